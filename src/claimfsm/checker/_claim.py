"""The claim protocol as a model for the checker, driven by a table compiled from a declaration.

The model supplies the world around the claim row: K workers, T targets with D drafts each,
and a remote (plain, fencing or deduping by key) that receives requests, lets them land
later or never, and can be read back and fenced. Faults are actions the search may take at
any point: lease lapse, worker crash (the worker keeps its saved handle), stale wake-up
(the saved handle is used again), send timeout, lost acknowledgement (the request lands but
the worker times out), late landing, sweep, readback, draft edits.

Every change of a claim's state goes through :func:`compile_table`'s table: the model only
says which guards are true now (its guard semantics), the declaration says where that
leads. Which declared event is the claim's acquire, begin_send, timeout, ... and which state
its reserved, sending, uncertain ... is read from the declaration's shape
(``claim_steps``): the model's actions are named by the typed face (``Event``) and take
the declared names, so a renamed copy of ``claim.toml`` checks the same. A wrong design
is a different declaration (``specs/wrong/``); the model code is the same. Renewal is an
action (its guards decide), but a successful renew changes nothing the untimed model can
see: not lapsing is the lapse action not being taken.

What the model proves is the declaration's ``[invariants]`` (compiled by kind in
``_claim_invariants``), in the world its ``[world]`` declares (``ClaimModelConfig.declared``;
flags override it): no property of the protocol is written here.

Epochs are bounded (``epochs``, per target) and so are draft edits (one per draft).
Invariants 4 (every expired epoch visible in history) and 8 (history replays to the rows)
are properties of a store's history, not of this abstraction: the stateful tests and the
model-to-store replay check them on real databases.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from claimfsm.checker._claim_invariants import claim_invariants, claim_properties, escape_rule
from claimfsm.checker._engine import Model
from claimfsm.checker._packed import Processes
from claimfsm.checker._path import PathStep
from claimfsm.errors import InvalidArgument, SpecError
from claimfsm.spec import (
    ABSENT,
    GUARD_KINDS,
    PRESENT,
    REMOTE_MODES,
    RemoteMode,
    RemoteRules,
    Spec,
)
from claimfsm.spec._predicates import build_guards
from claimfsm.spec._roles import crashless_wakes
from claimfsm.spec._vocabulary import (
    OWNER_EVENTS,
    ClaimSteps,
    Event,
    State,
    acquire_leases,
    claim_steps,
    claim_wakes,
    require_claim_world,
)

Table = dict[tuple[str, str], tuple[tuple[frozenset[str], str, bool], ...]]


#: A holder's operations on its claim, each the declared event the claim's steps name.
OWNER_STEPS = OWNER_EVENTS


def compile_table(spec: Spec) -> Table:
    """(event, state) -> the candidate transitions (guards, destination, internal), in order."""
    table: dict[tuple[str, str], list[tuple[frozenset[str], str, bool]]] = {}
    for t in spec.transitions:
        table.setdefault((t.event, t.source), []).append((frozenset(t.guards), t.dest, t.internal))
    return {k: tuple(v) for k, v in table.items()}


def fire(table: Table, event: str, state: str, true_guards: frozenset[str]) -> str | None:
    """The destination of ``event`` from ``state`` when exactly ``true_guards`` hold."""
    for guards, dest, _internal in table.get((event, state), ()):
        if guards <= true_guards:
            return dest
    return None


class _Seen:
    """A situation of the world as the guards' compiled predicates read a row, a caller or
    a draft (``spec._predicates``): the attributes given, ``column`` and ``fact`` from the
    mappings given. Built once per situation, never in the inner loop."""

    def __init__(
        self,
        *,
        columns: dict[str, Any] | None = None,
        facts: dict[str, Any] | None = None,
        **seen: Any,
    ) -> None:
        self.__dict__.update(seen)
        self._columns, self._facts = columns or {}, facts or {}

    def column(self, name: str) -> Any:
        return self._columns.get(name)

    def fact(self, name: str) -> Any:
        return self._facts.get(name)


class Target(NamedTuple):
    epoch: int = 0
    state: str = ""  # the declaration's initial state until acquired (init sets it)
    token: int = 0  # bumps on acquire and retry: who holds the current claim
    lease_live: bool = False
    draft: int = -1  # pinned draft index
    version: int = 0  # pinned version
    nonce: int = (
        0  # idempotency key = (draft, version, nonce); nonce changes only on fresh-key retry
    )
    outcome: str = ""  # reconciled: PRESENT | ABSENT
    retries: int = 0  # retries of this epoch so far (bounded by the config)


class Worker(NamedTuple):
    phase: str = ""  # "" idle, R reserved, S may send, W awaiting reply, A acknowledged,
    #                  P sent before intent (wrong design), Q acknowledged before intent
    target: int = -1
    epoch: int = 0
    token: int = 0
    saved: tuple[int, ...] = ()  # a crashed worker's handle: (target, epoch, token), or ()
    # The idempotency key (draft, version, nonce) of the request this worker is about to
    # send, taken from its own claim when it may send (phase S; R when the send comes
    # first), so that a stale worker's late send carries its own epoch's key. Kept against
    # a plain or deduping remote only: against a fencing one it is () (see ``own_keys``).
    key: tuple[int, ...] = ()


class Request(NamedTuple):
    epoch: int
    draft: int
    version: int
    nonce: int


class Remote(NamedTuple):
    in_flight: tuple[Request, ...] = ()
    landed: tuple[Request, ...] = ()  # applied effects (a deduping remote applies a key once)
    fence: int = 0  # rejects epochs <= fence


class Ghosts(NamedTuple):
    """Sticky facts about the path so far, so that per-step properties become invariants."""

    overlap: bool = False  # a send arrived while another epoch's send was in flight
    stale_changed: bool = False  # a stale owner's operation changed a claim
    escaped: bool = False  # a left_only_by state was left by an event it does not allow
    discarded: bool = False  # a stale owner's operation was refused (recorded)


#: The world but its workers: (targets, drafts, remote, ghosts).
Shared = tuple[Any, ...]


class World(NamedTuple):
    targets: tuple[Target, ...]
    drafts: tuple[tuple[tuple[str, int], ...], ...]  # per target, per draft: (status, version)
    workers: tuple[Worker, ...]
    remote: tuple[Remote, ...]
    ghosts: Ghosts


@dataclass(frozen=True)
class ClaimModelConfig:
    workers: int = 2
    targets: int = 1
    drafts: int = 2
    epochs: int = 3  # acquisitions per target
    retries: int = 1  # same-key retries per epoch (each bumps the token: unbounded otherwise)
    remote: RemoteMode = "fencing"
    crashes: bool = True  # crash and stale wake-up actions
    #: a crashed worker keeps its handle and wakes up once with it (``[world] wakes``, which
    #: the claim world takes as true unless declared); without it a crash forgets it
    wakes: bool = True
    edits: bool = True  # draft edits (one per draft)
    # Whether a worker carries its own claim's key to the send: None (the default) does
    # against a plain or deduping remote, not against a fencing one (see claim_model).
    own_keys: bool | None = None

    def __post_init__(self) -> None:
        for name in ("workers", "targets", "drafts", "epochs", "retries"):
            value = getattr(self, name)
            low = 0 if name == "retries" else 1
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 6:
                raise InvalidArgument(f"{name} must be an int from {low} to 6, got {value!r}")
        if self.remote not in REMOTE_MODES:
            raise InvalidArgument("remote must be plain, fencing or dedup")
        for flag in ("crashes", "wakes", "edits"):
            if not isinstance(getattr(self, flag), bool):
                raise InvalidArgument(f"{flag} must be true or false, got {getattr(self, flag)!r}")
        if self.own_keys not in (None, True, False):
            raise InvalidArgument(f"own_keys must be None, True or False, got {self.own_keys!r}")

    @classmethod
    def declared(cls, spec: Spec, **overrides: Any) -> ClaimModelConfig:
        """The world ``spec`` declares (``[world]``), with ``overrides`` (None: the
        declaration's); a value out of the claim world's range is ``SpecError`` naming the
        file when it is the declaration's, ``InvalidArgument`` when it is an override."""
        world = spec.world
        declared: dict[str, Any] = {
            "workers": world["workers"],
            "targets": world["keys"],
            "drafts": world["drafts"],
            "epochs": world["epochs"],
            "retries": world["retries"],
            "remote": world["remote"],
            "crashes": world["crashes"],
            "wakes": claim_wakes(spec),
            "edits": world["edits"],
        }
        try:
            cls(**declared)
        except InvalidArgument as exc:
            raise SpecError(f"{spec.path or spec.name}: [world]: {exc}") from None
        problem = crashless_wakes(spec)  # refused as a lifecycle's world refuses it
        if problem:
            raise SpecError(f"{spec.path or spec.name}: {problem}")
        if world["fence"] != "with_readback" and "fence" in spec.world_declared:
            raise SpecError(
                f"{spec.path or spec.name}: [world] fence = {world['fence']!r}: the claim"
                " world's operator fences only inside reconcile's readback, where it finds"
                ' nothing; declare fence = "with_readback" or leave it out'
            )
        given = {k: v for k, v in overrides.items() if v is not None}
        unknown = set(given) - {*declared, "own_keys"}
        if unknown:
            raise InvalidArgument(f"no claim world option {sorted(unknown)}")
        return cls(**{**declared, **given})

    @property
    def keys_in_workers(self) -> bool:
        """Whether workers carry their own claim's key to the send (``own_keys`` decided)."""
        return workers_carry_keys(self.remote) if self.own_keys is None else self.own_keys


def workers_carry_keys(remote: str) -> bool:
    """The claim world's key abstraction: against a fencing remote, which a stale request
    does not get past, a worker carries no key of its own (a send takes the claim's key as
    it is when sent); against any other, it does. ``check --world lifecycle`` gives the
    lifecycle world the same (``EntityModelConfig(own_keys=...)``)."""
    return remote != "fencing"


def _acquirable(spec: Spec) -> dict[tuple[bool, bool], frozenset[str]]:
    """A taker's situations: the target free (no row) or not (a row in a state that does
    not free it), the draft it names approved for this target or not; the guards of the
    kinds a taker reads (free, draft_ready) true in each."""
    guards = build_guards(spec)
    names = frozenset(spec.guards_of_kind("free")) | frozenset(spec.guards_of_kind("draft_ready"))
    busy = next(s for s in spec.states if s != spec.initial and not spec.states[s].frees_target)
    return {
        (free, ready): frozenset(
            n
            for n in names
            if guards[n](
                None if free else _Seen(state=busy),
                _Seen(
                    target_id="t",
                    draft=_Seen(status="approved" if ready else "edited", target_id="t"),
                ),
            )
        )
        for free in (False, True)
        for ready in (False, True)
    }


def refusal_recorded(spec: Spec) -> Callable[[Target, str, int, int], str | None]:
    """What a worker's refused ``event`` on the target's row, with the handle (epoch,
    token), is recorded as: None where it is no discard, else what the declaration's
    stale owner rule names (``Spec.stale_owner``: the stale guard that failed, or
    ``state:`` and the state), its guards read by the compiled predicates on the
    situation as the model reads an owner's. The claim world (whether) and the replay
    (what: it holds the stores' discards to it) read this one rule."""
    guards = build_guards(spec)
    seen: dict[tuple[Any, ...], str | None] = {}

    def recorded(tg: Target, event: str, epoch: int, token: int) -> str | None:
        situation = (
            event,
            tg.state,
            tg.epoch == epoch,
            tg.token == token and epoch > 0,
            tg.lease_live,
        )
        if situation in seen:
            return seen[situation]
        row = _Seen(
            state=tg.state,
            epoch=1,
            token_hash="1",
            lease_deadline=1.0 if tg.lease_live else None,
        )
        caller = _Seen(
            epoch=1 if situation[2] else 2,
            token_hash="1" if situation[3] else "2",
            now=0.0,
        )
        found = seen[situation] = spec.stale_owner(
            event, tg.state, lambda g: not guards[g](row, caller)
        )
        return found

    return recorded


def claim_crash_words(config: ClaimModelConfig) -> str:
    """How the claim world of ``config`` crashes, in the words the CLI and the report put
    after its bounds (empty without crashes)."""
    if not config.crashes:
        return ""
    return ", with crashes and stale wake-ups" if config.wakes else ", with crashes"


def claim_model(
    spec: Spec, config: ClaimModelConfig | None = None
) -> Model[World, tuple[Any, ...]]:
    """The checker model of ``spec`` (the correct declaration or a wrong-design variant)
    in the world ``config`` (None: the one ``spec`` declares), proving ``spec``'s declared
    invariants (``_claim_invariants``). Another lifecycle is refused (``SpecError``): this
    model is the claim protocol's world."""
    # The claim's steps and states as this declaration names them (read from its shape):
    # the model's own actions are named by the typed face (Event), its effects by these.
    steps = require_claim_world(spec, "the model checker's claim model")
    ev, st = steps.events, steps.states
    e_acquire, e_lapse, e_reconcile, e_retry = (
        ev[Event.ACQUIRE],
        ev[Event.LAPSE],
        ev[Event.RECONCILE],
        ev[Event.RETRY],
    )
    s_initial, s_uncertain = st[State.UNCLAIMED], st[State.UNCERTAIN]
    e_first = spec.first(e_acquire)  # the sweep's event an acquire applies first, if any
    cfg = config or ClaimModelConfig.declared(spec)
    invariants = claim_invariants(spec, steps, cfg.remote, cfg.drafts)
    # Leaving these states by another event is recorded (the left_only_by invariant).
    guarded_states, exits = escape_rule(invariants)
    table = compile_table(spec)
    frees = frozenset(spec.states_where("frees_target")) | {spec.initial}
    stale_states = frozenset(spec.states_where("stale"))
    lease_states = frozenset(spec.states_where("lease"))
    # How many drafts may be live per target is declared ([drafts]): any number (the
    # correct design), or one, as a partial unique index allows (partial_unique_index).
    one_live = spec.drafts is not None and spec.drafts.one_live_per_target
    pinning = spec.pinning_states()  # where the pinned draft may not be edited
    # Where the send may start is declared (``work = "starts"``): after begin_send, the
    # intent recorded first (the correct design; also when no event says), or right after
    # acquire, before any intent is recorded (the wrong design intent_after_send).
    starts = [e for e in spec.events if spec.work(e) == "starts"]
    if len(starts) > 1 or not set(starts) <= {e_acquire, ev[Event.BEGIN_SEND]}:
        raise SpecError(
            f"{spec.path or spec.name}: the claim model lets the send start after"
            f" {ev[Event.BEGIN_SEND]} or after {e_acquire}, one of them; work = 'starts' is"
            f" on {starts}"
        )
    send_first = starts == [e_acquire]
    # What a worker woken from a crash takes with its saved handle, as a lifecycle's world
    # reads it (the owner events out of the state acquire leads into: begin_send and
    # release, which claim.toml gives its holder by role, so release_by_target's release,
    # with no owner guard, is still the holder's); none where a crash forgets the handle
    # ([world] wakes = false). The fair step ``steps`` counts the owner events read so too,
    # but renew: a worker that can take another step does not renew for ever instead. (One
    # that holds a claim for ever, renewing it, starves its target: the protocol sets no
    # maximum hold time, so a service bounds its calls.)
    wakes = list(steps.woken(spec)) if cfg.wakes else []
    stepping = steps.stepping(spec) | {"send", "ack"}
    # Whether a retry sends under a new idempotency key is declared too: ``fresh_key`` in
    # what retry writes (fresh_key_retry). The model's remote sees keys change nowhere else.
    keyed = [e for e, d in spec.effects.items() if "fresh_key" in d.sets]
    if not set(keyed) <= {e_retry}:
        raise SpecError(
            f"{spec.path or spec.name}: the claim model lets {e_retry} alone write a fresh"
            f" idempotency key; fresh_key is on {keyed}"
        )
    fresh_key = keyed == [e_retry]
    rules = RemoteRules(cfg.remote)  # what the remote does with a request
    fencing, dedup = rules.fences, rules.dedups
    # Which key a send carries. A real worker sends its own claim's key, taken when it
    # began the send. The model keeps that key in the worker against a plain or deduping
    # remote, where a stale worker's late send can land and its key decides whether it is
    # a duplicate. Against a fencing remote the send is built from the target's current
    # claim instead: for a current worker that is the same key, and a stale worker's send
    # is rejected by the fence in the correct design (test_checker counts accepted stale
    # sends: none), so keeping the key would only split states no verdict depends on (a
    # test compares every design's verdict both ways), and the pinned counts and the SPIN
    # anchor's state-for-state agreement stay the fencing model's.
    own_keys = cfg.keys_in_workers
    # The guards true in a situation: each guard's predicate, compiled from its kind by the
    # compiler the machines run (``spec._predicates``), read on a view of the situation
    # (:class:`_Seen`). Which kinds a situation can answer is the world's: an owner's
    # operation reads the row and the handle, a taker's the row and the draft, evidence
    # the comparisons.
    guards = build_guards(spec)
    kinds = {kind: frozenset(spec.guards_of_kind(kind)) for kind in GUARD_KINDS}

    def holding(names: frozenset[str], row: _Seen | None, caller: _Seen) -> frozenset[str]:
        return frozenset(n for n in names if guards[n](row, caller))

    # Which transition fired, where it matters: the ones declared to dispatch the draft.
    dispatch_flags = {
        (t.event, t.source): tuple(
            d.dispatches for d in spec.transitions if (d.event, d.source) == (t.event, t.source)
        )
        for t in spec.transitions
    }

    def dispatches(event: str, state: str, true: frozenset[str]) -> bool:
        """Whether the transition ``fire`` takes (the first whose guards hold) dispatches."""
        flags = dispatch_flags.get((event, state))
        if not flags or not any(flags):
            return False
        for (guards, _dest, _internal), flag in zip(table[(event, state)], flags, strict=True):
            if guards <= true:
                return flag
        return False

    retry_sets = spec.effects[e_retry].sets if e_retry in spec.effects else ()
    leases = acquire_leases(spec, e_acquire)  # a new epoch's lease, as declared (required)
    seen_comparisons: dict[tuple[Any, ...], frozenset[str]] = {}

    def compared(
        outcome: str | None, fenced_through: int | None, dedups: bool, tg: Target
    ) -> frozenset[str]:
        """The ``compare`` guards true for these evidence facts and this target's row."""
        key = (outcome, fenced_through, dedups, tg.epoch, tg.version, tg.outcome)
        found = seen_comparisons.get(key)
        if found is None:
            facts = {"outcome": outcome, "fenced_through": fenced_through, "remote_dedups": dedups}
            row = {"epoch": tg.epoch, "draft_version": tg.version, "outcome": tg.outcome or None}
            found = seen_comparisons[key] = holding(
                kinds["compare"], _Seen(columns=row), _Seen(facts=facts)
            )
        return found

    def init() -> list[World]:
        drafts = tuple(
            tuple(("-" if one_live and d > 0 else "a", 1) for d in range(cfg.drafts))
            for _ in range(cfg.targets)
        )
        return [
            World(
                tuple(Target(state=s_initial) for _ in range(cfg.targets)),
                drafts,
                tuple(Worker() for _ in range(cfg.workers)),
                tuple(Remote() for _ in range(cfg.targets)),
                Ghosts(),
            )
        ]

    # -- guard semantics ----------------------------------------------------------------------
    # The guards true for an owner's operation, for each combination of what can hold
    # (owner, epoch, lease live, draft pinned): looked up, not rebuilt, in the inner loop.
    # The row holds epoch 1 with token 1 and draft 0 pinned at version 1; the caller names
    # epoch 1 or 2, presents token 1 or 2, and the draft is approved at that version or not.
    of_the_handle = kinds["owner"] | kinds["epoch"] | kinds["live"] | kinds["lapsed"]
    of_the_handle |= kinds["draft_pinned"]

    def situation(owner: bool, epoch: bool, live: bool, pinned: bool) -> frozenset[str]:
        status = "approved" if pinned else "edited"
        draft = _Seen(draft_id=0, status=status, version=1, digest="d")
        row = _Seen(
            epoch=1,
            token_hash="1",
            lease_deadline=1.0 if live else None,
            draft_id=0,
            draft_version=1,
            draft_digest="d",
        )
        named = 1 if epoch else 2
        caller = _Seen(epoch=named, token_hash="1" if owner else "2", now=0.0, draft=draft)
        return holding(of_the_handle, row, caller)

    truths = {
        (owner, epoch, live, pinned): situation(owner, epoch, live, pinned)
        for owner in (False, True)
        for epoch in (False, True)
        for live in (False, True)
        for pinned in (False, True)
    }
    acquirable = _acquirable(spec)
    # The operator's (reconcile, retry): it names the current epoch and holds no token.
    named_current = holding(
        kinds["owner"] | kinds["epoch"],
        _Seen(epoch=1, token_hash="1"),
        _Seen(epoch=1, token_hash=None),
    )

    def owner_truths(w: World, t: int, epoch: int, token: int) -> frozenset[str]:
        tg = w.targets[t]
        pinned = False
        if tg.draft >= 0:
            status, version = w.drafts[t][tg.draft]
            pinned = status == "a" and version == tg.version
        current = tg.epoch == epoch
        owner = current and tg.token == token and epoch > 0
        return truths[(owner, current, tg.lease_live, pinned)]

    def is_stale(w: World, t: int, epoch: int, token: int) -> bool:
        tg = w.targets[t]
        return (tg.epoch, tg.token) != (epoch, token) or tg.state in stale_states

    # -- helpers that rebuild the world -------------------------------------------------------
    def put(tup: tuple[Any, ...], i: int, value: Any) -> tuple[Any, ...]:
        return (*tup[:i], value, *tup[i + 1 :])

    # Worlds are rebuilt positionally: NamedTuple._replace costs several times more, and
    # this is the checker's inner loop.
    def move(w: World, t: int, event: str, dest: str, **changes: Any) -> World:
        tg = w.targets[t]
        ghosts = w.ghosts
        if tg.state in guarded_states and dest not in guarded_states and event not in exits:
            ghosts = Ghosts(ghosts[0], ghosts[1], True, ghosts[3])
        new = tg._replace(state=dest, **changes) if changes else Target(tg[0], dest, *tg[2:])
        return World(put(w.targets, t, new), w.drafts, w.workers, w.remote, ghosts)

    def set_draft(w: World, t: int, d: int, status: str, version: int) -> World:
        drafts = put(w.drafts, t, put(w.drafts[t], d, (status, version)))
        return World(w.targets, drafts, w.workers, w.remote, w.ghosts)

    def set_worker(w: World, i: int, worker: Worker) -> World:
        return World(w.targets, w.drafts, put(w.workers, i, worker), w.remote, w.ghosts)

    def set_remote(w: World, t: int, remote: Remote, ghosts: Ghosts | None = None) -> World:
        return World(w.targets, w.drafts, w.workers, put(w.remote, t, remote), ghosts or w.ghosts)

    def with_phase(wk: Worker, phase: str, key: tuple[int, ...] = ()) -> Worker:
        """The worker in ``phase``; ``key`` is what it will send (the phases that send)."""
        return Worker(phase, wk[1], wk[2], wk[3], wk[4], key)

    def claim_key(tg: Target) -> tuple[int, int, int]:
        """The idempotency key of the target's current claim: (draft, version, nonce)."""
        return (tg.draft, tg.version, tg.nonce)

    def key_of(tg: Target) -> tuple[int, ...]:
        """The key a worker taking a send from this claim carries: the claim's own."""
        return claim_key(tg) if own_keys else ()

    def swept(w: World, t: int, event: str) -> World:
        """The sweep's ``event`` on target ``t``'s current epoch, where it fires."""
        tg = w.targets[t]
        dest = fire(table, event, tg.state, owner_truths(w, t, -1, -1))
        return w if dest is None or dest == tg.state else move(w, t, event, dest)

    def acquired(w: World, t: int, ready: bool) -> tuple[World, str | None]:
        """Where an acquire of target ``t`` (its draft approved: ``ready``) leads, as the
        stores take it: the world it acts on and the destination, None where refused. As
        the row is; where that is refused, the declared first event (claim.toml's lapse),
        where it fires, then the acquire once more. Both or neither are kept: the caller
        keeps the world only with a destination."""
        dest = fire(table, e_acquire, s_initial, acquirable[(w.targets[t].state in frees, ready)])
        if dest is None and e_first is not None:
            w = swept(w, t, e_first)
            dest = fire(
                table, e_acquire, s_initial, acquirable[(w.targets[t].state in frees, ready)]
            )
        return w, dest

    def mark_dispatched(w: World, t: int) -> World:
        tg = w.targets[t]
        version = w.drafts[t][tg.draft][1]
        return set_draft(w, t, tg.draft, "d", version) if version == tg.version else w

    recorded_on = refusal_recorded(spec)

    def recorded(w: World, t: int, event: str, epoch: int, token: int) -> bool:
        return recorded_on(w.targets[t], event, epoch, token) is not None

    def refuse(w: World, i: int, t: int, event: str, epoch: int, token: int) -> World:
        """A worker's operation was refused: it drops the handle; a stale one is recorded."""
        ghosts = w.ghosts
        if not ghosts.discarded and recorded(w, t, event, epoch, token):
            ghosts = Ghosts(ghosts[0], ghosts[1], ghosts[2], True)
        idle = Worker("", -1, 0, 0, w.workers[i].saved)
        return World(w.targets, w.drafts, put(w.workers, i, idle), w.remote, ghosts)

    def owner_event(w: World, i: int, event: str, epoch: int, token: int, t: int) -> World | None:
        """Apply ``event`` with a handle; None when refused (the caller records that)."""
        tg = w.targets[t]
        true = owner_truths(w, t, epoch, token)
        dest = fire(table, event, tg.state, true)
        if dest is None:
            return None
        if dest != tg.state and not w.ghosts.stale_changed and is_stale(w, t, epoch, token):
            g = w.ghosts
            w = World(w.targets, w.drafts, w.workers, w.remote, Ghosts(g[0], True, g[2], g[3]))
        w = move(w, t, event, dest)
        if dispatches(event, tg.state, true):
            w = mark_dispatched(w, t)
        return w

    def present(w: World, t: int) -> bool:
        key = claim_key(w.targets[t])
        return any((r.draft, r.version, r.nonce) == key for r in w.remote[t].landed)

    # -- actions --------------------------------------------------------------------------------
    # A worker's actions read its own part and the shared world (targets, drafts, remote,
    # ghosts) alone, and so do its steps: the packed search (``Processes``) relies on it.
    def worker_actions(shared: Shared, wk: Worker, i: int) -> list[tuple[Any, ...]]:
        targets, drafts = shared[0], shared[1]
        acts: list[tuple[Any, ...]] = []
        phase = wk.phase
        if phase == "":
            for t in range(cfg.targets):
                tg = targets[t]
                if tg.epoch < cfg.epochs:
                    for d, (status, _) in enumerate(drafts[t]):
                        if status == "a":
                            acts.append((Event.ACQUIRE, i, t, d))
                if tg.state == s_uncertain and tg.retries < cfg.retries:
                    acts.append((Event.RETRY, i, t))
            if wk.saved:
                acts += [("wake", i, op) for op in wakes]
            return acts
        if phase in ("R", "Q"):
            acts.append((Event.BEGIN_SEND, i))
        if phase == "R":
            acts.append((Event.RELEASE, i))
            if send_first:
                acts.append(("send", i))
        if phase == "S":
            acts.append(("send", i))
        if phase in ("W", "P"):
            acts.append(("ack", i))
        if phase in ("S", "W"):
            acts.append((Event.TIMEOUT, i))
        if phase in ("R", "S", "W"):
            acts.append((Event.RENEW, i))
        if phase == "A":
            acts.append((Event.CONFIRM, i))
        if cfg.crashes and not wk.saved:
            acts.append(("crash", i))
        return acts

    def world_actions(shared: Shared) -> list[tuple[Any, ...]]:
        targets, drafts, remote = shared[0], shared[1], shared[2]
        acts: list[tuple[Any, ...]] = []
        for t, tg in enumerate(targets):
            if tg.lease_live and tg.state in lease_states:
                acts.append(("lease_lapses", t))
            if not tg.lease_live and tg.state in lease_states:
                acts.append(("sweep", t))
            for k in range(len(remote[t].in_flight)):
                acts.append(("land", t, k))
            if tg.state == s_uncertain:
                acts.append((Event.RECONCILE, t))
            for d, (status, version) in enumerate(drafts[t]):
                if cfg.edits and status in ("a", "p") and version < 2:
                    acts.append(("edit", t, d))
                if status == "p":
                    acts.append(("approve", t, d))
                if status == "-":
                    acts.append(("create", t, d))
        return acts

    def actions(w: World) -> list[tuple[Any, ...]]:
        shared = (w.targets, w.drafts, w.remote, w.ghosts)
        acts: list[tuple[Any, ...]] = []
        for i, wk in enumerate(w.workers):
            acts += worker_actions(shared, wk, i)
        return acts + world_actions(shared)

    def step(w: World, a: tuple[Any, ...]) -> World | None:
        kind = a[0]
        if kind == Event.ACQUIRE:
            _, i, t, d = a
            w, dest = acquired(w, t, w.drafts[t][d][0] == "a")
            if dest is None:
                return None  # refused: nothing changes (the same world is not a new state)
            tg = w.targets[t]
            version = w.drafts[t][d][1]
            epoch, token = tg.epoch + 1, tg.token + 1
            w = w._replace(
                targets=put(
                    w.targets,
                    t,
                    Target(epoch, dest, token, leases, d, version, 0, ""),
                )
            )
            first: tuple[int, ...] = (d, version, 0) if send_first and own_keys else ()
            return set_worker(w, i, Worker("R", t, epoch, token, w.workers[i].saved, first))
        if kind in OWNER_STEPS:
            i = a[1]
            wk = w.workers[i]
            nxt = owner_event(w, i, ev[kind], wk.epoch, wk.token, wk.target)
            if nxt is None:
                return refuse(w, i, wk.target, ev[kind], wk.epoch, wk.token)
            if kind == Event.RENEW:
                return nxt  # the lease stays live: nothing else changes
            phase = {Event.BEGIN_SEND: "S" if wk.phase == "R" else "A"}.get(kind, "")
            if kind == Event.BEGIN_SEND and wk.phase == "Q":
                phase = "A"
            if phase == "S":
                return set_worker(nxt, i, with_phase(wk, phase, key_of(nxt.targets[wk.target])))
            if phase:
                return set_worker(nxt, i, with_phase(wk, phase))
            return set_worker(nxt, i, Worker(saved=wk.saved))
        if kind == "send":
            i = a[1]
            wk = w.workers[i]
            t = wk.target
            tg = w.targets[t]
            req = Request(wk.epoch, *(wk.key or claim_key(tg)))
            rm = w.remote[t]
            phase = "P" if wk.phase == "R" else "W"
            w = set_worker(w, i, with_phase(wk, phase))
            fence = rules.arrives(rm.fence, req.epoch)
            if fence is None:
                return w  # rejected on arrival (fenced); the worker will time out
            ghosts = w.ghosts
            if any(r.epoch != req.epoch for r in rm.in_flight):
                ghosts = ghosts._replace(overlap=True)
            rm = Remote(tuple(sorted((*rm.in_flight, req))), rm.landed, fence)
            return set_remote(w, t, rm, ghosts)
        if kind == "land":
            _, t, k = a
            rm = w.remote[t]
            req = rm.in_flight[k]
            rest = rm.in_flight[:k] + rm.in_flight[k + 1 :]
            landed = rm.landed
            key = (req.draft, req.version, req.nonce)  # the idempotency key: not the epoch
            applied = any((r.draft, r.version, r.nonce) == key for r in landed)
            if rules.lands(rm.fence, req.epoch, applied) == "applied":
                landed = tuple(sorted((*landed, req)))
            return set_remote(w, t, Remote(rest, landed, rm.fence))
        if kind == "ack":
            i = a[1]
            wk = w.workers[i]
            tg_req = (wk.epoch, wk.target)
            landed = w.remote[wk.target].landed
            if not any(r.epoch == tg_req[0] for r in landed):
                return None  # nothing has landed for this worker's epoch
            if any(r.epoch == wk.epoch for r in w.remote[wk.target].in_flight):
                return None  # its request is still in flight
            return set_worker(w, i, with_phase(wk, "A" if wk.phase == "W" else "Q"))
        if kind == "crash":
            i = a[1]
            wk = w.workers[i]
            if not wakes:  # it forgets its handle
                return set_worker(w, i, Worker())
            return set_worker(w, i, Worker(saved=(wk.target, wk.epoch, wk.token)))
        if kind == "wake":
            _, i, op = a
            wk = w.workers[i]
            t, epoch, token = wk.saved
            w = set_worker(w, i, Worker())
            nxt = owner_event(w, i, ev[op], epoch, token, t)
            if nxt is None:
                return refuse(w, i, t, ev[op], epoch, token)
            if op == Event.BEGIN_SEND:
                return set_worker(nxt, i, Worker("S", t, epoch, token, (), key_of(nxt.targets[t])))
            return nxt
        if kind == "lease_lapses":
            t = a[1]
            return w._replace(targets=put(w.targets, t, w.targets[t]._replace(lease_live=False)))
        if kind == "sweep":
            nxt = swept(w, a[1], e_lapse)
            return None if nxt == w else nxt
        if kind == Event.RECONCILE:
            t = a[1]
            tg = w.targets[t]
            found = present(w, t)
            if not found and fencing:  # fence first, then read again
                rm = w.remote[t]
                kept = tuple(r for r in rm.in_flight if r.epoch > tg.epoch)
                w = w._replace(
                    remote=put(
                        w.remote,
                        t,
                        Remote(kept, rm.landed, rules.fence_through(rm.fence, tg.epoch)),
                    )
                )
                found = present(w, t)
            evidence = compared(PRESENT if found else ABSENT, w.remote[t].fence, False, tg)
            true = named_current | evidence
            dest = fire(table, e_reconcile, tg.state, true)
            if dest is None:
                return None
            w = move(w, t, e_reconcile, dest, outcome=PRESENT if found else ABSENT)
            return mark_dispatched(w, t) if dispatches(e_reconcile, tg.state, true) else w
        if kind == Event.RETRY:
            _, i, t = a
            tg = w.targets[t]
            true = named_current | compared(None, None, dedup, tg)
            dest = fire(table, e_retry, tg.state, true)
            if dest is None:
                return None
            # What retry writes is declared ([events.retry]): a fresh token makes every
            # earlier handle stale; a new lease makes the epoch live again.
            token = tg.token + 1 if "fresh_token" in retry_sets else tg.token
            w = move(
                w,
                t,
                e_retry,
                dest,
                token=token,
                lease_live=True if "lease" in retry_sets else tg.lease_live,
                retries=tg.retries + 1,
                nonce=tg.nonce + 1 if fresh_key else tg.nonce,
            )
            own = key_of(w.targets[t])
            return set_worker(w, i, Worker("S", t, tg.epoch, token, w.workers[i].saved, own))
        if kind == "edit":
            _, t, d = a
            tg = w.targets[t]
            if tg.draft == d and tg.state in pinning:
                return None  # the store refuses edits of a draft being dispatched
            return set_draft(w, t, d, "p", w.drafts[t][d][1] + 1)
        if kind == "approve":
            _, t, d = a
            return set_draft(w, t, d, "a", w.drafts[t][d][1])
        if kind == "create":
            _, t, d = a
            if one_live and any(s in ("p", "a") for s, _ in w.drafts[t]):
                return None  # the unique index refuses a second live draft
            return set_draft(w, t, d, "p", 1)
        raise AssertionError(a)

    # -- properties: the declaration's invariants (_claim_invariants) ------------------------
    def takeable(w: World, t: int) -> bool:
        """An idle worker's acquire of an approved draft would begin a new epoch of target
        ``t`` within the bounds, the declared first event applied where the stores would:
        a lifecycle's ``takeable``, read off the declaration's acquire."""
        if w.targets[t].epoch >= cfg.epochs:
            return False
        return (
            any(status == "a" for status, _ in w.drafts[t]) and acquired(w, t, True)[1] is not None
        )

    def waiting(w: World) -> bool:
        """Some target may be taken (``takeable``)."""
        return any(takeable(w, t) for t in range(len(w.targets)))

    def fairness(listed: frozenset[str]) -> Callable[[tuple[Any, ...]], Any]:
        """Fairness classes under the fair steps ``listed``: a listed event is fair per
        target (acquire, retry, reconcile, the sweep's lapse) or, for a worker's own step,
        one class over every worker holding a claim; ``steps``: any worker's step of a
        dispatch (symmetric in the workers, so it is sound under worker symmetry)."""

        def fair(a: tuple[Any, ...]) -> Any:
            event = _event_of(steps, a)
            if event is not None and event in listed:
                if a[0] in (Event.ACQUIRE, Event.RETRY):
                    return (event, a[2])
                if a[0] in (Event.RECONCILE, "sweep"):
                    return (event, a[1])
                return (event, "held")
            return ("steps",) if "steps" in listed and a[0] in stepping else None

        return fair

    props = claim_properties(spec, invariants, waiting=waiting, fairness=fairness)

    def canonical(w: World) -> Any:
        workers = w.workers
        ordered = tuple(sorted(workers))
        return w if ordered == workers else World(w.targets, w.drafts, ordered, w.remote, w.ghosts)

    verbs: dict[str, str] = {
        Event.BEGIN_SEND: f"records the intent to send ({ev[Event.BEGIN_SEND]})",
        Event.RENEW: "renews its lease",
        Event.RELEASE: "releases",
        Event.CONFIRM: "confirms",
        Event.TIMEOUT: f"times out and marks the claim {s_uncertain}",
        "send": "sends the request",
        "ack": "receives the acknowledgement",
        "crash": "crashes (keeps its saved handle)" if wakes else "crashes (its handle is gone)",
    }

    def show_action(a: tuple[Any, ...]) -> str:
        kind = a[0]
        if kind == Event.ACQUIRE:
            return f"worker {a[1]} acquires target {a[2]} for draft {a[3]}"
        if kind in verbs:
            return f"worker {a[1]} {verbs[kind]}"
        if kind == "wake":
            return f"worker {a[1]} wakes up and calls {ev[a[2]]} with its saved (stale) handle"
        if kind == Event.RETRY:
            return f"worker {a[1]} retries {s_uncertain} target {a[2]}"
        if kind == "land":
            return f"a request in flight for target {a[1]} reaches the remote"
        if kind == "lease_lapses":
            return f"the lease on target {a[1]} lapses"
        if kind == "sweep":
            return f"sweep applies lease expiry to target {a[1]}"
        if kind == Event.RECONCILE:
            return f"{e_reconcile} target {a[1]} by readback" + (
                " (fencing first)" if fencing else ""
            )
        return f"{kind} draft {a[2]} of target {a[1]}"

    def show_state(w: World) -> str:
        parts = []
        for t, tg in enumerate(w.targets):
            rm = w.remote[t]
            claim = f"epoch {tg.epoch} {tg.state}" + ("" if tg.lease_live else " (lapsed)")
            if tg.outcome:
                claim += f" {tg.outcome}"
            effects = ",".join(f"d{r.draft}@e{r.epoch}" for r in rm.landed) or "-"
            flight = ",".join(f"e{r.epoch}" for r in rm.in_flight) or "-"
            parts.append(
                f"t{t}: {claim}; remote in flight [{flight}] effects [{effects}]"
                + (f" fence {rm.fence}" if fencing else "")
            )
        workers = " ".join(
            f"w{i}:{wk.phase or 'idle'}"
            + (f"(t{wk.target} e{wk.epoch})" if wk.phase else "")
            + ("+saved" if wk.saved else "")
            for i, wk in enumerate(w.workers)
        )
        return "; ".join(parts) + f"; {workers}"

    def may_stop(w: World) -> bool:
        # Stopping is fine when every target is free or out of epochs, or (an artefact of
        # bounding retries, not of the protocol) uncertain with its retries used up. A
        # target left uncertain with nothing to resolve it is reported as a deadlock: with
        # a plain remote, that is the protocol's honest limit.
        return all(
            t.state in frees
            or t.epoch >= cfg.epochs
            or (dedup and t.state == s_uncertain and t.retries >= cfg.retries)
            for t in w.targets
        )

    return Model(
        init_states=init,
        actions=actions,
        next_state=step,
        properties=props,
        canonical=canonical,
        show_action=show_action,
        show_state=show_state,
        may_stop=may_stop,
        explain=_explainer(spec, show_action),
        processes=Processes(
            split=lambda w: ((w.targets, w.drafts, w.remote, w.ghosts), w.workers),
            join=lambda s, parts: World(s[0], s[1], parts, s[2], s[3]),
            local_actions=worker_actions,
            shared_actions=world_actions,
            shared_properties=True,
        ),
    )


def _event_of(steps: ClaimSteps, a: tuple[Any, ...]) -> str | None:
    """The declared event a model action takes, if any (a sweep takes the lapse)."""
    kind = a[0]
    if kind == "wake":
        return steps.events[a[2]]
    if kind == "sweep":
        return steps.events[Event.LAPSE]
    return steps.events.get(kind)


def path_steps(spec: Spec, model: Model[World, tuple[Any, ...]], path: Any) -> list[PathStep]:
    """A checker path as declaration-level steps: who did what, and which transition.

    Every state change is a step of its own, numbered in order: an acquire that first lapses
    the current epoch (``first``, as the stores do) gives two steps, the lapse and then the
    acquire.
    """
    table, free = compile_table(spec), _free_states(spec)
    named = claim_steps(spec)
    first = _first_of(spec, table, free, named)
    steps: list[PathStep] = []
    for before, after in itertools.pairwise(path):
        parts = _parts(
            table,
            free,
            first,
            named,
            model.show_action,
            before.state,
            after.action,
            after.state,
        )
        for part in parts:
            steps.append(part._replace(number=len(steps) + 1))
    return steps


class _First(NamedTuple):
    """What an acquire's declared first event (``first``) needs to be drawn: the guards a
    lapsed lease makes true, the event, and the states from which the acquire of an
    approved draft is refused as the row is (where the stores apply the first event)."""

    lapsed: frozenset[str]
    event: str | None
    refused_from: frozenset[str]


def _first_of(spec: Spec, table: Table, free: frozenset[str], named: ClaimSteps) -> _First:
    acquire, initial = named.events[Event.ACQUIRE], named.states[State.UNCLAIMED]
    taker = _acquirable(spec)
    refused = frozenset(
        s for s in spec.states if fire(table, acquire, initial, taker[(s in free, True)]) is None
    )
    return _First(frozenset(spec.guards_of_kind("lapsed")), spec.first(acquire), refused)


def _free_states(spec: Spec) -> frozenset[str]:
    return frozenset(n for n, st in spec.states.items() if st.frees_target or n == spec.initial)


_LABELS = {"send": "request", "land": "lands", "ack": "ack", "crash": "crash"}


def _remote_view(w: World, target: int) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
    rm = w.remote[target]
    return tuple(r.epoch for r in rm.in_flight), tuple((r.draft, r.epoch) for r in rm.landed)


def _parts(
    table: Any,
    free: frozenset[str],
    swept_first: _First,
    named: ClaimSteps,
    show_action: Callable[[tuple[Any, ...]], str],
    before: World,
    a: tuple[Any, ...],
    after: World,
) -> list[PathStep]:
    """The declaration-level state changes one model action makes (numbered 0)."""
    kind = a[0]
    parts: list[PathStep] = []
    worker = (
        a[1]
        if kind
        not in ("land", "lease_lapses", "sweep", Event.RECONCILE, "edit", "approve", "create")
        else None
    )
    if kind in (Event.ACQUIRE, Event.RETRY):
        target = a[2]
    elif worker is not None:
        wk = before.workers[worker]
        target = wk.saved[0] if kind == "wake" and wk.saved else max(wk.target, 0)
    else:
        target = a[1]
    source = before.targets[target].state
    dest = after.targets[target].state
    event = _event_of(named, a)
    lapse, initial = swept_first.event, named.states[State.UNCLAIMED]
    busy = ""
    if kind == Event.ACQUIRE and source != initial:
        # the stores apply the first event only where the acquire is refused as the row is
        lapsed = (
            None
            if lapse is None or source not in swept_first.refused_from
            else fire(table, lapse, source, swept_first.lapsed)
        )
        if lapse is not None and lapsed is not None and not before.targets[target].lease_live:
            flight, effects = _remote_view(before, target)
            parts.append(
                PathStep(
                    0,
                    "store",
                    "store",
                    f"the store lapses epoch {before.targets[target].epoch} of target {target}"
                    f" (inside worker {worker}'s {named.events[Event.ACQUIRE]}, before the new"
                    " epoch)",
                    lapse,
                    source,
                    lapsed,
                    lapse,
                    flight,
                    effects,
                )
            )
            source = lapsed
        if source in free:
            source = initial  # acquire creates the new epoch
        else:  # a design that lets acquire take a busy target: draw where it really came from
            busy = f", while epoch {before.targets[target].epoch} is still {source}"
    actor = (
        f"worker {worker}"
        if worker is not None
        else {
            "land": "remote",
            "lease_lapses": "clock",
            "edit": "author",
            "approve": "author",
            "create": "author",
        }.get(kind, "store")
    )
    to = {"send": "remote", "ack": actor, "land": "remote"}.get(kind, "store")
    if kind == "ack":
        actor, to = "remote", f"worker {worker}"
    if event is not None and source == dest and kind not in (Event.RENEW, Event.ACQUIRE):
        text = f"{show_action(a)} (refused)"
    else:
        text = show_action(a) + busy
    flight, effects = _remote_view(after, target)
    label = _LABELS.get(kind) or event or kind
    parts.append(PathStep(0, actor, to, text, event, source, dest, label, flight, effects))
    return parts


def _explainer(
    spec: Spec, show_action: Callable[[tuple[Any, ...]], str]
) -> Callable[[World, tuple[Any, ...], World], list[tuple[str, str | None]]]:
    """For the engine: each state change of an action as a numbered step of its own, with
    the declared transition it takes."""
    table, free = compile_table(spec), _free_states(spec)
    named = claim_steps(spec)
    first = _first_of(spec, table, free, named)

    def explain(before: World, a: tuple[Any, ...], after: World) -> list[tuple[str, str | None]]:
        parts = _parts(table, free, first, named, show_action, before, a, after)
        shown: list[tuple[str, str | None]] = []
        for i, p in enumerate(parts):
            moved = p.event is not None and p.source != p.dest
            text = p.text + (f" [{p.event}: {p.source} → {p.dest}]" if moved else "")
            last = i == len(parts) - 1
            shown.append((text, None if last else f"the claim {p.dest}; nothing else changed yet"))
        return shown

    return explain
