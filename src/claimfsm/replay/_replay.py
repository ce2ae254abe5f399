"""Replay model paths against a real store and measure the coverage they reach.

Each model path becomes a program on a fresh store: worker ``i`` is a store of its own (its
own connection); lease lapse is a clock jump past the lease; remote steps (send, land,
acknowledgement) happen in the model only. After every step the store must hold what the
model predicts: the target's epoch and state, the reconciled outcome, and each draft's
status and version. Coverage is read back from the store itself: the transitions its
history recorded and the refusals it raised (by the guard they name), against the
transitions the declaration has.

One target only: the clock jump that lapses a lease would lapse every target's lease.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from claimfsm.checker import (
    ClaimModelConfig,
    Model,
    Step,
    World,
    claim_model,
    explained,
    path_from,
    refusal_recorded,
    replay,
)
from claimfsm.errors import ClaimFSMError, InvalidArgument, Refused
from claimfsm.spec import PRESENT, STALE_STATE, ClaimSteps, Event, Spec, State, claim_steps
from claimfsm.store import Claim, Evidence, Store

LEASE = 10.0
TARGET = "target-0"
_STATUS = {"a": "approved", "p": "pending", "d": "dispatched"}
#: The model's worker steps (the typed face) and the handle's method that takes each.
_OWNER_CALLS: dict[str, Callable[..., Claim]] = {
    Event.BEGIN_SEND: Claim.begin_send,
    Event.RELEASE: Claim.release,
    Event.CONFIRM: Claim.confirm,
    Event.TIMEOUT: Claim.mark_uncertain,
    Event.RENEW: Claim.renew,
}


class ReplayMismatch(AssertionError):
    """The store and the model disagree after a step (a claimfsm bug)."""


@dataclass
class Coverage:
    declared: set[tuple[str, str, str]]
    transitions: set[tuple[str, str, str]] = field(default_factory=set)
    refusals: set[tuple[str, str]] = field(default_factory=set)  # (event, guard or class)
    paths: int = 0
    steps: int = 0

    @property
    def missing(self) -> set[tuple[str, str, str]]:
        return self.declared - self.transitions

    def text(self) -> str:
        lines = [
            f"replayed {self.paths} paths, {self.steps} steps, on the real store",
            f"declared transitions taken by the store: {len(self.declared & self.transitions)}"
            f"/{len(self.declared)}",
            f"refusal kinds raised by the store: {len(self.refusals)} "
            + ", ".join(f"{e}:{g}" for e, g in sorted(self.refusals)),
        ]
        if self.missing:
            lines.append(
                "not reached: " + ", ".join(f"{e} {s}->{d}" for e, s, d in sorted(self.missing))
            )
        return "\n".join(lines)


def coverage_paths(
    model: Model[World, tuple[Any, ...]], *, deep_samples: int = 20, seed: int = 0
) -> list[tuple[Step[World, tuple[Any, ...]], ...]]:
    """The first (shortest) path to each kind of step, plus a sample of the deepest paths.

    A kind of step is (action, the event it names, the target's state before, after): every
    transition the model can take and every refusal it can meet, a woken worker's with each
    of the events it may take.
    """
    canon: Callable[[World], Hashable] = model.canonical or (lambda s: s)
    init = list(model.init_states())
    seen: dict[Hashable, tuple[Hashable | None, Any, World, int]] = {}
    queue: deque[Hashable] = deque()
    firsts: dict[tuple[Any, ...], Hashable] = {}
    # kinds first met on an edge into a state already reached (a step that changes nothing,
    # two woken workers' refusals that leave the same world), each with its own path
    others: dict[tuple[Any, ...], tuple[Hashable, Any, World]] = {}
    for s in init:
        seen[canon(s)] = (None, None, s, 0)
        queue.append(canon(s))
    while queue:
        key = queue.popleft()
        _, _, state, depth = seen[key]
        for action in model.actions(state):
            nxt = model.next_state(state, action)
            if nxt is None:
                continue
            k2 = canon(nxt)
            kind = (
                action[0],
                *(a for a in action[1:] if isinstance(a, str)),  # a woken worker's event too
                state.targets[0].state,
                nxt.targets[0].state,
                k2 == key,  # a step that changes nothing (a successful renew) is its own kind
                _guard_facts(state, action),
            )
            if k2 not in seen:
                seen[k2] = (key, action, nxt, depth + 1)
                queue.append(k2)
            if kind not in firsts and seen[k2][0] == key and seen[k2][1] == action:
                firsts[kind] = k2
            elif kind not in firsts and kind not in others:
                others[kind] = (key, action, nxt)

    def path_to(key: Hashable) -> tuple[Step[World, tuple[Any, ...]], ...]:
        return path_from(seen, key)

    deepest = max(v[3] for v in seen.values())
    deep = [k for k, v in seen.items() if v[3] >= deepest - 2]
    rng = random.Random(seed)
    chosen = list(
        dict.fromkeys([*firsts.values(), *rng.sample(deep, min(deep_samples, len(deep)))])
    )
    paths = [path_to(k) for k in chosen]
    for kind, (key, action, nxt) in others.items():
        if kind not in firsts:
            paths.append((*path_to(key), Step(action, nxt)))
    return paths


def _guard_facts(state: World, action: tuple[Any, ...]) -> tuple[bool, ...]:
    """What decides a worker's step: handle current, lease live, pinned draft unchanged.

    Part of a step's kind, so that every guard outcome gets a path of its own."""
    if action[0] not in _OWNER_CALLS and action[0] != "wake":
        return ()
    wk = state.workers[action[1]]
    epoch, token = (wk.saved[1], wk.saved[2]) if action[0] == "wake" else (wk.epoch, wk.token)
    tg = state.targets[0]
    pinned = state.drafts[0][tg.draft] if tg.draft >= 0 else None
    return (
        (epoch, token) == (tg.epoch, tg.token),
        tg.lease_live,
        pinned == ("a", tg.version),
    )


class Player:
    """Plays one-target paths of ``spec``'s claim model on real stores, for one target,
    comparing the store with the model after every step (:class:`ReplayMismatch`).

    ``env`` is the environment's store (sweep, reconcile, drafts, reading); ``workers``
    one store per worker (their own connections), all on one database and one clock,
    ``now`` (a one-item list the lease lapse moves on). Several players may share the
    stores, each with a target of its own. The stores may name the claim's states and
    events otherwise than ``spec`` (a renamed copy of ``claim.toml``): the two are
    compared, and the store's history counted, by the claim's steps (``claim_steps``)."""

    def __init__(
        self,
        spec: Spec,
        config: ClaimModelConfig,
        env: Store,
        workers: list[Store],
        now: list[float],
        target: str = TARGET,
    ) -> None:
        if config.targets != 1:
            raise InvalidArgument("replay runs one-target models (a clock jump lapses every lease)")
        self.spec, self.ours = spec, claim_steps(spec)
        self.env, self.workers, self.now, self.target = env, workers, now, target
        self.held: list[Claim | None] = [None] * config.workers
        self.saved: list[Claim | None] = [None] * config.workers
        self.drafts = config.drafts
        self.draft_ids: list[int] = []
        #: the model's world before the next step, and its rule for what a refusal records
        self.world: World | None = None
        self.recorded = refusal_recorded(spec)
        #: set by a step the store refused: the model's event it attempted
        self.refused: str | None = None

    def start(self, first: World) -> None:
        """The target's drafts, as the model's first state has them."""
        self.world = first
        drafts = [self.env.create_draft(self.target, f"draft {d}") for d in range(self.drafts)]
        for d, (status, _) in enumerate(first.drafts[0]):
            if status == "a":
                self.env.approve_draft(drafts[d].draft_id)
        self.draft_ids = [d.draft_id for d in drafts]

    def step(self, action: tuple[Any, ...], after: World, coverage: Coverage) -> None:
        """Play ``action`` on the stores; ``after`` is the model's state after it. A
        refusal must be recorded as a discard exactly where the model's rule says, read
        on its world before the step (:func:`claimfsm.checker.refusal_recorded`), naming
        the event attempted and what the rule names (a guard by what it checks, its
        kind: the store's declaration may be a renamed copy)."""
        before, discards = self.world, self._discards()
        self.refused = None
        _apply(action, after, self, coverage)
        _compare(self, after)
        want: str | None = None
        if self.refused is not None and before is not None:
            worker = before.workers[action[1]]
            _, epoch, token = worker.saved if action[0] == "wake" else (0, *worker[2:4])
            want = self.recorded(before.targets[0], self.refused, epoch, token)
        grown = self._discards()[len(discards) :]
        if len(grown) != (want is not None):
            raise ReplayMismatch(
                f"{self.refused or action[0]}: the store recorded {len(grown)} discard(s); the"
                f" model's stale owner rule records {int(want is not None)}"
            )
        if want is not None:
            assert self.refused is not None
            expected = (self.refused, _named(self.spec, self.ours, want))
            got = (
                _event_in_words_of(self.ours, self.env.steps, grown[0].attempted),
                _named(self.env.spec, self.env.steps, grown[0].refused, self.ours),
            )
            if got != expected:
                raise ReplayMismatch(
                    f"{self.refused}: the store's discard names {got}; the model's stale owner"
                    f" rule names {expected}"
                )
        self.world = after
        coverage.steps += 1

    def _discards(self) -> list[Any]:
        """The discard records in the target's history (stale owners' refusals)."""
        discard = self.env.steps.event(Event.DISCARD)
        return [e for e in self.env.history(self.target) if e.event == discard]

    def transitions(self) -> set[tuple[str, str, str]]:
        """The transitions the store's history recorded for the target, in ``spec``'s words."""
        return {_in_words_of(self.ours, self.env.steps, e) for e in self.env.history(self.target)}


def replay_path(
    spec: Spec,
    config: ClaimModelConfig,
    path: tuple[Step[World, tuple[Any, ...]], ...],
    open_store: Callable[[Callable[[], float]], Store],
    coverage: Coverage,
) -> None:
    """Run one model path on fresh stores (one per worker, one for the environment)."""
    if config.targets != 1:
        raise InvalidArgument("replay runs one-target models (a clock jump lapses every lease)")
    now = [1_000_000.0]
    clock = lambda: now[0]  # noqa: E731 - shared by every connection of this path
    env = open_store(clock)
    workers = [open_store(clock) for _ in range(config.workers)]
    try:
        player = Player(spec, config, env, workers, now)
        player.start(path[0].state)
        for step in path[1:]:
            assert step.action is not None
            player.step(step.action, step.state, coverage)
        coverage.transitions |= player.transitions()
        coverage.paths += 1
    finally:
        for s in [env, *workers]:
            s.close()


def _apply(action: tuple[Any, ...], after: World, p: Player, coverage: Coverage) -> None:
    kind = action[0]
    env, workers, held, saved, now = p.env, p.workers, p.held, p.saved, p.now
    target, draft_ids = p.target, p.draft_ids

    def attempt(step: str, call: Callable[[], Any]) -> Any:
        event = env.steps.event(Event(step))  # the refusal in the store's words
        try:
            return call()
        except Refused as exc:
            coverage.refusals.add((event, exc.guard or type(exc).__name__))
        except ClaimFSMError as exc:
            coverage.refusals.add((event, type(exc).__name__))
        p.refused = p.ours.event(Event(step))  # in the model's words
        return None

    if kind == Event.ACQUIRE:
        _, i, _, d = action
        held[i] = workers[i].acquire(target, draft_ids[d], f"w{i}", LEASE)
    elif kind in _OWNER_CALLS:
        i = action[1]
        claim = held[i]
        assert claim is not None
        call = _OWNER_CALLS[kind]
        args = (LEASE,) if kind == Event.RENEW else ()
        if attempt(kind, lambda: call(claim, *args)) is None or (after.workers[i].phase == ""):
            held[i] = None
    elif kind == "wake":
        _, i, op = action
        claim, saved[i] = saved[i], None
        assert claim is not None
        woken = claim
        if attempt(op, lambda: _OWNER_CALLS[op](woken)) is not None and op == Event.BEGIN_SEND:
            held[i] = claim
    elif kind == "crash":
        i = action[1]
        saved[i], held[i] = held[i], None
    elif kind == "lease_lapses":
        now[0] += LEASE + 1
    elif kind == "sweep":
        env.sweep()
    elif kind == Event.RECONCILE:
        tg = after.targets[0]
        evidence = Evidence.present() if tg.outcome == PRESENT else Evidence.absent_fenced(tg.epoch)
        env.reconcile(target, tg.epoch, evidence)
    elif kind == Event.RETRY:
        _, i, _ = action
        tg = after.targets[0]
        held[i] = workers[i].retry(
            target, tg.epoch, owner=f"w{i}", lease_seconds=LEASE, remote_dedups=True
        )
    elif kind == "edit":
        _, _, d = action
        env.edit_draft(draft_ids[d], f"draft {d} edited")
    elif kind == "approve":
        _, _, d = action
        env.approve_draft(draft_ids[d])
    elif kind in ("send", "land", "ack"):
        pass  # between the worker and the remote: the store is not involved
    else:
        raise InvalidArgument(f"replay cannot map model action {kind!r} to the store")


def _event_in_words_of(ours: ClaimSteps, theirs: ClaimSteps, event: str | None) -> str | None:
    """An event a store names, in the model's declaration's names."""
    role = None if event is None else theirs.event_role(event)
    return event if role is None else ours.event(role)


def _named(
    spec: Spec, steps: ClaimSteps, name: str | None, ours: ClaimSteps | None = None
) -> tuple[str, str] | None:
    """What the stale owner rule named (``Spec.stale_owner``), comparable across renamed
    copies: ("state", the state in ``ours``' names) or ("guard", the guard's kind)."""
    if name is None:
        return None
    if name.startswith(STALE_STATE):
        state = name[len(STALE_STATE) :]
        role = steps.state_role(state)
        return ("state", state if role is None else (ours or steps).state(role))
    guard = spec.guards.get(name)
    return ("guard", name if guard is None else guard.kind)


def _in_words_of(ours: ClaimSteps, theirs: ClaimSteps, entry: Any) -> tuple[str, str, str]:
    """A store's history entry, in the model's declaration's names."""
    event, source, dest = entry.event, entry.from_state, entry.to_state
    e, s, d = theirs.event_role(event), theirs.state_role(source), theirs.state_role(dest)
    return (
        event if e is None else ours.event(e),
        source if s is None else ours.state(s),
        dest if d is None else ours.state(d),
    )


def _compare(p: Player, expected: World) -> None:
    ours, store, draft_ids = p.ours, p.env, p.draft_ids
    tg = expected.targets[0]
    info = store.get_claim(p.target)
    if info is None:
        got = (0, ours.state(State.UNCLAIMED), "")
    else:
        role = store.steps.state_role(info.state)  # the store's word, in the model's words
        state = info.state if role is None else ours.state(role)
        got = (info.epoch, state, info.outcome or "")
    want = (tg.epoch, tg.state, tg.outcome)
    if got != want:
        raise ReplayMismatch(f"claim: the store has {got}, the model predicts {want}")
    for d, (status, version) in enumerate(expected.drafts[0]):
        draft = store.get_draft(draft_ids[d])
        if (draft.status, draft.version) != (_STATUS[status], version):
            raise ReplayMismatch(
                f"draft {d}: the store has {draft.status} v{draft.version}, "
                f"the model predicts {_STATUS[status]} v{version}"
            )


def replay_coverage(
    spec: Spec,
    config: ClaimModelConfig,
    open_store: Callable[[Callable[[], float]], Store],
    *,
    deep_samples: int = 20,
) -> Coverage:
    """Generate the coverage paths of ``spec``'s model and replay each on a fresh store."""
    model = claim_model(spec, config)
    declared = {(t.event, t.source, t.dest) for t in spec.transitions if not t.internal}
    coverage = Coverage(declared=declared)
    for path in coverage_paths(model, deep_samples=deep_samples):
        replay_path(spec, config, path, open_store, coverage)
    return coverage


@dataclass
class TokenReplay:
    """A replay token played on the model and then on a real store."""

    steps: list[tuple[str, str]]  # numbered steps as the checker prints them: (text, state)
    violated: dict[str, str]  # always-property -> the action after which it first fails
    actions: int  # model actions on the path
    store_followed: int  # how many of them the real store did exactly as the model predicts
    store_error: str | None  # why the store departed from the model, if it did

    def text(self) -> str:
        lines = [f"  0. (start)  {self.steps[0][1]}"]
        for n, (text, state) in enumerate(self.steps[1:], start=1):
            lines += [f"  {n}. {text}", f"       -> {state}"]
        for name, where in self.violated.items():
            lines.append(f"violates {name} after: {where}")
        if self.store_error is None:
            lines.append(
                f"the real store followed all {self.actions} actions, matching the model after each"
            )
        else:
            lines.append(
                f"the real store followed {self.store_followed} of {self.actions} actions, then"
                f" departed from the model: {self.store_error}"
            )
        return "\n".join(lines)


def replay_token(
    spec: Spec,
    config: ClaimModelConfig,
    token: str,
    open_store: Callable[[Callable[[], float]], Store],
) -> TokenReplay:
    """Play the path ``token`` names (``claimfsm check`` prints one per discovery) on the
    model of ``spec`` with the same bounds, then on fresh real stores. The stores run the
    correct declaration, so a wrong design's counterexample departs where the store refuses
    what the variant allows. Raises ``InvalidArgument`` for a token of another model."""
    model = claim_model(spec, config)
    path = replay(model, token)
    violated: dict[str, str] = {}
    for step in path:
        for p in model.properties:
            if p.kind == "always" and p.name not in violated and not p.holds(step.state):
                violated[p.name] = (
                    "(start)" if step.action is None else model.show_action(step.action)
                )
    coverage = Coverage(declared=set())
    error = None
    try:
        replay_path(spec, config, path, open_store, coverage)
    except (ReplayMismatch, ClaimFSMError) as exc:
        if isinstance(exc, InvalidArgument) and "one-target" in str(exc):
            raise
        error = f"{type(exc).__name__}: {exc}"
    return TokenReplay(explained(model, path), violated, len(path) - 1, coverage.steps, error)
