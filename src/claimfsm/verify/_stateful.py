"""The generated stateful test of a declared lifecycle against a real store (needs the
``verify`` extra: Hypothesis).

Hypothesis drives the checker's model of the declaration (``entity_model``) and a store of
the same declaration side by side: each step is one of the model's actions (a worker
takes, acts on its handle, crashes, or wakes up with the handle it saved before its crash;
the operator or the sweep acts; the clock passes the lease deadline; the executor is
fenced), played on the store through each worker's own connection. After every step the
store must have done what the model did (taken the transition, or refused), its row must
equal the model's (state, epoch, counters, whether the lease is live, which handle is
current), its history must have grown by what was done (a refusal recorded exactly where
the declaration's machine calls the caller a stale owner in the model's world: the stale
guard, or the stale state, it names), and the declared invariants must hold. A failure is
the shortest program Hypothesis finds, printed step by step.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st
from hypothesis.reporting import with_reporter
from hypothesis.stateful import (
    RuleBasedStateMachine,
    precondition,
    rule,
    run_state_machine_as_test,
)

from claimfsm.audit import audit_store
from claimfsm.checker import (
    EntityModelConfig,
    EntityWorld,
    entity_model,
    resends_in,
    world_facts,
)
from claimfsm.checker._entity_properties import acting
from claimfsm.checker._entity_world import (
    DRAFT_WORDS,
    WorldCaller,
    WorldRow,
    fenced_by_readback,
    holds_handle,
    key_shape,
    readback_fences,
    stored_rows,
)
from claimfsm.errors import IllegalTransition, InvalidArgument, Refused
from claimfsm.machine import LifecycleMachine as DeclaredMachine
from claimfsm.spec import RemoteRules, Spec
from claimfsm.store import EntityStore, Handle
from claimfsm.store._entity_history import AUTHORED, DRAFT_DISPATCH, DRAFT_ENTRIES
from claimfsm.store._tokens import fingerprint, token_hash

KEY = "entity-0"
#: The actions that name an event the store may refuse.
ACTING = ("take", "resend", "own", "wake", "env")
#: Where what a refusal records is not predicted (a declared ``first`` event was applied).
UNKNOWN = "?"
#: An idle worker's steps: a taker's event, and a resend (taking the current epoch over).
TAKES = ("take", "resend")
#: The executor's and the remote's steps, and what each did, in a program's words: a run
#: reaching the executor (without a remote), a request sent, landed or answered.
REMOTE_STEPS = ("run", "send", "land", "ack")
REMOTE_WORDS = {
    "run": "reached the executor",
    "send": "sent",
    "land": "landed",
    "ack": "answered",
}
LEASE_SECONDS = 30.0


class ManualClock:
    """The stores' time: moved on only by the model's clock steps."""

    #: where every program's time starts
    START = 1_000_000.0

    def __init__(self, start: float = START) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


OpenStore = Callable[[ManualClock], EntityStore]
C = TypeVar("C")
S = TypeVar("S")


class KeptStores:
    """Stores a finished program leaves for the next one to use, with the clock they were
    opened on: a verify runs hundreds of programs, and opening a store (a connection, the
    schema checked) costs more on PostgreSQL than a short program's steps. Each program
    still starts from an empty store on a clock at its start (the programs reset them),
    and each worker still acts through a connection of its own. Close them all with
    :meth:`close` (``with KeptStores() as kept``)."""

    def __init__(self) -> None:
        self.idle: list[tuple[Any, list[Any]]] = []

    def close(self) -> None:
        while self.idle:
            _clock, stores = self.idle.pop()
            _close_all(stores)

    def __enter__(self) -> KeptStores:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _restart(clock: ManualClock, stores: Sequence[EntityStore]) -> None:
    """A lifecycle program's start: the clock at its start, the store empty."""
    clock.now = ManualClock.START
    stores[0].reset()


def _close_all(stores: Sequence[Any]) -> None:
    for store in stores:
        with contextlib.suppress(Exception):
            store.close()


class StoreProgram(RuleBasedStateMachine):
    """What the generated stateful tests share: the program so far in words, the stores
    it opened (closed at the end, or left in ``kept`` for the next program), and how a
    failure reads."""

    program: list[str]
    stores: list[Any]
    #: Where a finished program leaves its stores and their clock (None: it closes them).
    #: ``verify`` and ``verify_claim`` keep them for the whole run; a pytest suite's
    #: ``TestCase`` opens new ones for every program.
    kept: KeptStores | None = None
    _clock_state: Any = None

    def _open_stores(
        self,
        count: int,
        new_clock: Callable[[], C],
        opener: Callable[[C], S],
        start: Callable[[C, list[S]], object],
    ) -> tuple[C, list[S]]:
        """``count`` stores on one new clock, or the ones a finished program kept, made
        ready for a program by ``start(clock, stores)`` (the clock set back to its start,
        the store emptied). If opening or ``start`` fails, the stores are closed before
        the error goes on: Hypothesis tears down only a program that began, so nothing
        else would close them."""
        kept = type(self).kept
        idle = kept.idle if kept is not None else []
        fits = [i for i, (_, s) in enumerate(idle) if len(s) == count]
        if kept is not None and fits:
            clock, stores = kept.idle.pop(fits[-1])
        else:
            clock, stores = new_clock(), []
        try:
            while len(stores) < count:
                stores.append(opener(clock))
            start(clock, stores)
        except BaseException:
            _close_all(stores)
            raise
        self._clock_state, self.stores = clock, stores
        return clock, stores

    def _invariants(self, always: Sequence[Any], world: Any) -> None:
        for p in always:
            assert p.holds(world), (
                f"invariant {p.name} violated: {p.description}. The store did what the model"
                " does at every step: the declaration itself breaks it (claimfsm check finds"
                " it too)\n" + "\n".join(self.program)
            )

    def _disagree(self, what: str) -> str:
        return "the store and the model disagree: " + what + "\n" + "\n".join(self.program)

    def teardown(self) -> None:
        kept = type(self).kept
        if kept is not None and self.stores:
            kept.idle.append((self._clock_state, self.stores))
        else:
            _close_all(self.stores)
        self.stores = []


def lifecycle_state_machine(
    spec: Spec,
    open_store: OpenStore,
    *,
    workers: int | None = None,
    epochs: int | None = None,
    crashes: bool | None = None,
    wakes: bool | None = None,
) -> type[RuleBasedStateMachine]:
    """A Hypothesis state machine comparing the stores ``open_store`` opens (one per worker,
    and one for the operator, the sweep and reading) with the checker's model of ``spec``.
    ``open_store(clock)`` must open a new connection to one database each time. In a
    pytest suite: ``TestMine = lifecycle_state_machine(spec, opener).TestCase``. With
    ``wakes`` (the declaration's ``[world] wakes`` by default), a crashed worker keeps its
    handle and may wake up and act on it, as a restarted process that saved it does."""
    config = _beyond_the_checker(spec, workers, epochs, crashes=crashes, wakes=wakes)
    model = entity_model(spec, config)
    spec = spec.lifecycle_view()  # as the model and the store read it
    # What a single step can break: the state invariants (an ``eventually`` obligation is
    # about whole runs; the checker proves it).
    always = [p for p in model.properties if p.kind == "always"]
    resolved = config.resolved(spec)
    # the declaration's transitions machine: which refusals are a stale owner's (recorded),
    # asked on the model's row and caller as the model's own guards read them
    declared = DeclaredMachine(spec)
    columns = {c: i for i, c in enumerate(spec.columns)}
    remote = resolved.get("remote")
    shape = key_shape(spec, resolved)  # the model's request key, as a number
    # the operator's events that fence first where readback finds nothing ([world] fence)
    rules = RemoteRules(remote) if remote is not None else None
    fences = readback_fences(spec, rules, resolved["fence"])

    class LifecycleMachine(StoreProgram):
        #: The steps of the latest program run, in words (the shortest failing one, after
        #: a failure: Hypothesis runs it last).
        last_program: list[str] = []
        #: Steps played on the store, over every program.
        steps_run = 0
        programs_run = 0

        def __init__(self) -> None:
            super().__init__()
            self.stores: list[EntityStore]
            self.clock, self.stores = self._open_stores(
                resolved["workers"] + 1, ManualClock, open_store, _restart
            )
            self.world: EntityWorld = next(iter(model.init_states()))
            self.handles: list[Handle | None] = [None] * resolved["workers"]
            # the handle each worker saved before it crashed ([world] wakes)
            self.saved: list[Handle | None] = [None] * resolved["workers"]
            self.program: list[str] = []
            # the store's request key for each of the model's (0: the entity's own), as
            # the store drew them: a key the model draws anew is one the store never held
            # (with linked drafts, a request's key names the pinned draft: none before a
            # take pins one)
            self.request_keys: dict[int, str] = {} if spec.drafts is not None else {0: KEY}
            # the store's id of each of the model's drafts, once the author created it;
            # the drafts the model's world starts with are written first (approved)
            self.draft_ids: dict[int, int] = {}
            for d, (status, _) in enumerate(self.world.rows[0].drafts):
                if status != "-":
                    made = self.stores[0].create_draft(KEY, f"draft {d}, version 1")
                    self.draft_ids[d] = self.stores[0].approve_draft(made.draft_id).draft_id
            self.clean = True  # no step has failed (teardown then audits the history)
            LifecycleMachine.last_program = self.program
            LifecycleMachine.programs_run += 1

        # One rule per kind of action, so that Hypothesis's swarm testing runs programs
        # where some kinds never happen (no crash, no clock): a fault that needs a worker
        # to keep running while others act is found far sooner that way.
        def _of(self, kinds: tuple[str, ...]) -> list[tuple[Any, ...]]:
            return [a for a in model.actions(self.world) if a[0] in kinds]

        @precondition(lambda self: bool(self._of(TAKES)))
        @rule(data=st.data())
        def take(self, data: st.DataObject) -> None:
            self.step(data.draw(st.sampled_from(self._of(TAKES)), label="take"))

        @precondition(lambda self: bool(self._of(("own",))))
        @rule(data=st.data())
        def act(self, data: st.DataObject) -> None:
            self.step(data.draw(st.sampled_from(self._of(("own",))), label="act"))

        @precondition(lambda self: bool(self._of(("env",))))
        @rule(data=st.data())
        def operate(self, data: st.DataObject) -> None:
            self.step(data.draw(st.sampled_from(self._of(("env",))), label="operate"))

        @precondition(lambda self: bool(self._of(("crash",))))
        @rule(data=st.data())
        def crash(self, data: st.DataObject) -> None:
            self.step(data.draw(st.sampled_from(self._of(("crash",))), label="crash"))

        @precondition(lambda self: bool(self._of(("wake",))))
        @rule(data=st.data())
        def wake(self, data: st.DataObject) -> None:
            self.step(data.draw(st.sampled_from(self._of(("wake",))), label="wake"))

        @precondition(lambda self: bool(self._of(("clock", "fence"))))
        @rule(data=st.data())
        def clock_or_fence(self, data: st.DataObject) -> None:
            self.step(
                data.draw(st.sampled_from(self._of(("clock", "fence"))), label="clock or fence")
            )

        @precondition(lambda self: bool(self._of(("draft",))))
        @rule(data=st.data())
        def author(self, data: st.DataObject) -> None:
            self.step(data.draw(st.sampled_from(self._of(("draft",))), label="author"))

        # The executor's and the remote's steps: they change the model's world alone, and
        # what the operator's readback then brings the store.
        @precondition(lambda self: bool(self._of(REMOTE_STEPS)))
        @rule(data=st.data())
        def remote(self, data: st.DataObject) -> None:
            self.step(data.draw(st.sampled_from(self._of(REMOTE_STEPS)), label="remote"))

        def _stale_record(self, action: tuple[Any, ...]) -> str | None:
            """What the store must record when it refuses ``action`` in the model's world as
            it is: the stale guard that fails, or the stale state, as the declaration's
            machine names a stale owner's refusal; None: nothing (not a stale owner's)."""
            row, kind, event = self.world.rows[0], action[0], action[-1]
            view = WorldRow(row, columns)  # the row as the model's guards read it
            if kind in ("own", "wake"):  # the handle, and the facts the store is given
                caller = WorldCaller(row, acting(self.world, action)[1], True, {})
            else:  # a taker names no epoch; the operator, the sweep, a resend the current
                facts = {} if kind == "take" else world_facts(self.world, 0, remote, shape)
                caller = WorldCaller(row, None, kind != "take", facts)
            return declared.stale_refusal(event, view, caller)

        def step(self, action: tuple[Any, ...]) -> None:
            self.clean = False  # until every check of this step has passed
            # a refusal is recorded where the caller is a stale owner as the world is now
            # (not where the store applied a declared ``first`` event before refusing)
            stale_record = self._stale_record(action) if action[0] in ACTING else None
            if action[0] in ACTING and spec.first(action[-1]) is not None:
                stale_record = UNKNOWN
            expected = model.next_state(self.world, action)
            before = len(self.stores[0].history(KEY))
            did, said = self._play(action)
            LifecycleMachine.steps_run += 1
            number = len(self.program) + 1
            self.program.append(f"{number}. {model.show_action(action)} -> {said}")
            # A refused owner's operation drops the handle and changes no row; a handle is
            # also dropped after a step into a state with nothing more for its holder to do,
            # and then the row has changed (into another state).
            refused_by_model = expected is None or (
                action[0] in ("own", "wake")
                and not holds_handle(expected.clients[action[1]])
                and stored_rows(expected) == stored_rows(self.world)
            )
            if expected is None and did == "took":
                # The model does not go beyond its bounds; the program ends here.
                assume(False)
            if action[0] == "draft":  # the author's: taken by neither, or by both
                assert (did == "refused") == (expected is None), self._disagree(
                    f"the store {'refused' if did == 'refused' else 'took'} it; the model "
                    + ("refused" if expected is None else "took")
                )
            elif did in ("took", "refused"):
                assert (did == "refused") == refused_by_model, self._disagree(
                    f"the store {did} it; the model " + ("refused" if refused_by_model else "took")
                )
            # the row moves this step makes: one, or two where the store applied the event
            # declared ``first`` before it (the model's explanation gives each)
            moves = 1
            if expected is not None and model.explain is not None:
                moves = len(model.explain(self.world, action, expected))
            changes = _draft_changes(action, self.world, expected)
            if expected is not None:
                if action[0] in ("take", "resend", "own", "wake") and not holds_handle(
                    expected.clients[action[1]]
                ):
                    self.handles[action[1]] = None  # done with it, as the model's client is
                self.world = expected
            self._compare(before, did, moves, stale_record, changes)
            self.clean = True

        def _play(self, action: tuple[Any, ...]) -> tuple[str, str]:
            kind = action[0]
            try:
                if kind == "take":  # (take, worker, key[, draft], event)
                    c, event = action[1], action[-1]
                    named = {"draft": self.draft_ids[action[3]]} if len(action) == 5 else {}
                    taken = self.stores[c + 1].take(
                        KEY, event, owner=f"worker {c}", lease_seconds=LEASE_SECONDS, **named
                    )
                    self.handles[c] = taken
                    return "took", taken.state
                if kind == "resend":  # the operator's event: readback's facts, a handle
                    _, c, key, event = action
                    taken = self.stores[c + 1].take_over(
                        KEY,
                        event,
                        owner=f"worker {c}",
                        lease_seconds=LEASE_SECONDS,
                        facts=world_facts(self.world, key, resolved.get("remote"), shape),
                    )
                    self.handles[c] = taken
                    return "took", taken.state
                if kind in ("own", "wake"):
                    _, c, event = action
                    if kind == "wake":  # a restarted worker, with the handle it saved
                        handle, self.saved[c] = self.saved[c], None
                    else:
                        handle = self.handles[c]
                    assert handle is not None
                    self.handles[c] = None  # kept only if the store takes it
                    acted = self.stores[c + 1].act(handle, event, lease_seconds=LEASE_SECONDS)
                    self.handles[c] = acted
                    return "took", acted.state
                if kind == "env":
                    _, key, event = action
                    # readback, after the fence it leads to where it finds nothing
                    seen = fenced_by_readback(self.world, key, event, fences, rules, shape)
                    facts = world_facts(seen, key, remote, shape)
                    return "took", self.stores[0].operate(KEY, event, facts=facts)
                if kind == "draft":  # the author's, on the operator's connection
                    return self._author(action)
            except Refused as exc:
                if kind == "draft":
                    return "refused", f"refused ({type(exc).__name__})"
                return "refused", f"refused ({type(exc).__name__}: {exc.guard} does not hold)"
            except IllegalTransition:
                return "refused", "refused (not declared from the entity's state)"
            if kind == "clock":
                self.clock.advance(LEASE_SECONDS + 1)
                return "world", "the lease deadline passes"
            if kind == "crash":
                if resolved["wakes"]:
                    self.saved[action[1]] = self.handles[action[1]]
                self.handles[action[1]] = None
                return "world", "its handle is saved" if resolved["wakes"] else "its handle is gone"
            # the model's world only: the executor or remote fenced, a run reaching the
            # executor, a request sent, landed or answered
            return "world", REMOTE_WORDS.get(kind, "fenced")

        def _author(self, action: tuple[Any, ...]) -> tuple[str, str]:
            """An author's step on the store: a draft created, edited or approved."""
            _, _key, d, what = action
            store = self.stores[0]
            version = self.world.rows[0].drafts[d][1] + (what == "edit")
            content = f"draft {d}, version {1 if what == 'create' else version}"
            if what == "create":
                self.draft_ids[d] = store.create_draft(KEY, content).draft_id
            elif what == "edit":
                store.edit_draft(self.draft_ids[d], content)
            else:
                store.approve_draft(self.draft_ids[d])
            return "world", f"draft {d} {what}d" if what != "edit" else f"draft {d} edited"

        def _compare_drafts(self, row: Any) -> None:
            """The store's drafts and pin against the model's: each draft's status and
            version, and the draft and version the current epoch pinned."""
            want = self.world.rows[0]
            if not want.linked:
                return
            by_id = {d.draft_id: d for d in self.stores[0].drafts(KEY)}
            for d, (status, version) in enumerate(want.drafts):
                if status == "-":
                    assert d not in self.draft_ids, self._disagree(f"draft {d} exists")
                    continue
                stored = by_id[self.draft_ids[d]]
                got, expect = (stored.status, stored.version), (DRAFT_WORDS[status], version)
                assert got == expect, self._disagree(
                    f"draft {d} (status, version): store {got}, model {expect}"
                )
            pinned = None if row is None or row.draft_id is None else row.draft_id
            model_pin = self.draft_ids.get(want.draft) if want.draft >= 0 else None
            got_pin = (pinned, None if pinned is None else row.draft_version)
            expect_pin = (model_pin, None if model_pin is None else want.version)
            assert got_pin == expect_pin, self._disagree(
                f"the pinned (draft, version): store {got_pin}, model {expect_pin}"
            )

        def _compare(
            self,
            before: int,
            did: str,
            moves: int = 1,
            stale_record: str | None = None,
            changes: Sequence[str] = (),
        ) -> None:
            store = self.stores[0]
            row = store.row(KEY)
            want = self.world.rows[0]
            now = self.clock()
            if row is None:  # never written: every entity starts in the initial state
                defaults = tuple(c.default for c in spec.columns.values())
                got: tuple[Any, ...] = (spec.initial, 0, defaults, False)
            else:
                live = row.lease_deadline is not None and now < row.lease_deadline
                got = (row.state, row.epoch, tuple(row.columns.values()), live)
            expect = (want.state, want.epoch, want.columns, want.live)
            assert got == expect, self._disagree(
                f"store row (state, epoch, columns, live) {got}, model {expect}"
            )
            recorded = "" if row is None else row.outcome or ""
            assert recorded == want.outcome, self._disagree(
                f"readback's outcome the row records: store {recorded!r}, model {want.outcome!r}"
            )
            self._compare_drafts(row)
            drawn = KEY if row is None else row.request_key
            model_key = shape.current(want)
            known = self.request_keys.get(model_key)
            if want.linked and (row is None or row.draft_id is None):
                pass  # no draft pinned yet: no request either
            elif known is None:
                assert drawn not in self.request_keys.values(), self._disagree(
                    "the store's request key: the model drew a new one, the store did not"
                )
                self.request_keys[model_key] = drawn
            else:
                assert drawn == known, self._disagree(
                    "the store's request key: the model kept it, the store drew another"
                )
            for c, (h, mh) in enumerate(zip(self.handles, self.world.clients, strict=True)):
                assert (h is None) == (not holds_handle(mh)), self._disagree(f"worker {c}'s handle")
                kept = mh is not None and bool(mh.saved)
                assert (self.saved[c] is not None) == kept, self._disagree(
                    f"whether worker {c} saved a handle"
                )
                if h is not None and mh is not None and mh.phase == "S":  # its request is due
                    assert h.request_key == self.request_keys.get(mh.request_key), self._disagree(
                        f"the request key worker {c}'s request carries"
                    )
                if h is not None and mh is not None and row is not None:
                    current = fingerprint(token_hash(h.token)) == row.token_fingerprint and (
                        h.epoch == row.epoch
                    )
                    assert current == ((mh.epoch, mh.token) == (want.epoch, want.token)), (
                        self._disagree(f"whether worker {c}'s handle is current")
                    )
            new = store.history(KEY)[before:]
            made = [e.event for e in new if e.event in DRAFT_ENTRIES]
            assert made == list(changes), self._disagree(
                f"history recorded the drafts' changes {made}; the model made {list(changes)}"
            )
            grown = len(new) - len(made)
            if did == "took":
                assert grown == moves, self._disagree(
                    f"history grew by {grown} for {moves} transition{'s' if moves > 1 else ''}"
                )
            elif did == "world":
                assert grown == 0, self._disagree("history changed with no operation")
            elif did == "refused" and stale_record is not UNKNOWN:
                refusals = [e.refused for e in new if e.event not in DRAFT_ENTRIES]
                assert refusals == ([stale_record] if stale_record else []), self._disagree(
                    f"the refusal recorded {refusals}; the declaration's stale owner rule"
                    + (f" records {stale_record!r}" if stale_record else " records nothing")
                )
            self._invariants(always, self.world)

        def teardown(self) -> None:
            try:
                if not self.clean:
                    return  # a step failed: that failure is the one to report
                # Whatever the program did, its history passes the after-the-fact audit.
                found = audit_store(self.stores[0])
                assert found.ok, self._disagree(
                    "the audit of the store's history found "
                    + "; ".join(f"{v.kind}: {v.message}" for v in found.violations[:3])
                )
            finally:
                super().teardown()

    LifecycleMachine.__name__ = f"{spec.name.replace('-', '_').title()}Lifecycle"
    return LifecycleMachine


def _draft_changes(action: tuple[Any, ...], before: Any, after: Any) -> list[str]:
    """The drafts' changes history must record for ``action``, which takes the model's
    world ``before`` to ``after`` (None: refused): an author's change, or the dispatch of
    each draft the step made dispatched."""
    if after is None:
        return []
    if action[0] == "draft":
        return [AUTHORED[action[-1]]]
    was, now = before.rows[0], after.rows[0]
    return [
        DRAFT_DISPATCH
        for (old, _), (new, _) in zip(was.drafts, now.drafts, strict=True)
        if new == "d" and old != "d"
    ]


def _beyond_the_checker(
    spec: Spec,
    workers: int | None,
    epochs: int | None = None,
    crashes: bool | None = None,
    wakes: bool | None = None,
) -> EntityModelConfig:
    """The world a program plays on a store: one entity, and the checker's bounds at their
    highest (epochs, counters and tokens, resends per epoch), since a store has none."""
    return EntityModelConfig(
        workers=workers,
        keys=1,
        epochs=epochs or 8,
        counts=16,
        retries=6 if resends_in(spec) else None,
        crashes=crashes,
        wakes=wakes,
        lists_refused=True,  # a refused take or operator's event is played too
    )


#: guided_paths' answers, by (id of the declaration, workers, max_states, symmetry): each is
#: dropped when its declaration is (so an id is never read for another declaration)
_GUIDED: dict[
    tuple[int, int | None, int, bool], tuple[tuple[str, tuple[tuple[Any, ...], ...]], ...]
] = {}


def guided_paths(
    spec: Spec, *, workers: int | None = None, max_states: int = 200_000, symmetry: bool = True
) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """The model's shortest path to each thing worth playing on a store, breadth-first
    within the declaration's ``[world]`` bounds (one entity): to every transition and every
    refusal the model can reach, as (event, from, to) or (event, from, refused), to each
    author's step (linked drafts) in each state, done or refused, and to the first
    violation of each invariant. Each is (what it reaches, its actions). Searched once
    per declaration and bounds (a declaration is immutable): a caller that lists them and
    then runs :func:`verify` on the same declaration searches once. ``symmetry``: search
    one world of each class under renumbering the workers (the same paths' lengths, found
    sooner); off, every world."""
    key = (id(spec), workers, max_states, symmetry)
    found = _GUIDED.get(key)
    if found is None:
        paths = _guided_paths(spec, workers, max_states, symmetry)
        found = _GUIDED[key] = tuple((what, tuple(actions)) for what, actions in paths)
        weakref.finalize(spec, _GUIDED.pop, key, None)
    return [(what, list(actions)) for what, actions in found]


def _guided_paths(
    spec: Spec, workers: int | None, max_states: int, symmetry: bool
) -> list[tuple[str, list[tuple[Any, ...]]]]:
    model = entity_model(spec, EntityModelConfig(workers=workers, keys=1, lists_refused=True))
    # the same world without the checker's bounds: a step it takes that the bounded model
    # does not is beyond a bound, not refused
    unbounded = entity_model(spec, _beyond_the_checker(spec, workers))
    always = [p for p in model.properties if p.kind == "always"]
    # One world of each class under renumbering the workers is searched (the model's
    # ``canonical``): what a step reaches names no worker, so each is as near in a class's
    # first world as in any, and the worlds kept are the ones reached, so each path is
    # made of real actions, played as they are.
    canonical = (symmetry and model.canonical) or (lambda world: world)
    start = next(iter(model.init_states()))
    parent: dict[Hashable, tuple[Hashable, tuple[Any, ...]] | None] = {canonical(start): None}
    found: dict[str, tuple[Hashable, tuple[Any, ...]]] = {}  # what -> (before, action)
    queue = [(canonical(start), start)]
    for key, world in queue:
        if len(parent) > max_states:
            break
        for action in model.actions(world):
            after = model.next_state(world, action)
            if action[0] in ("take", "own", "env", "resend", "wake"):
                row = world.rows[0]
                refused = f"{action[-1]} from {row.state}: refused"
                if after is None:
                    # a step the unbounded world takes is beyond a bound: no step of this
                    # world (asked only while the refusal is still to be found)
                    if refused not in found and unbounded.next_state(world, action) is None:
                        found[refused] = (key, action)
                elif (
                    action[0] in ("own", "wake")
                    and not holds_handle(after.clients[action[1]])
                    and stored_rows(after) == stored_rows(world)
                ):  # refused: the handle is dropped, the entity unchanged
                    found.setdefault(refused, (key, action))
                else:
                    moved = f"{action[-1]}: {row.state} -> {after.rows[0].state}"
                    found.setdefault(moved, (key, action))
            elif action[0] == "draft":  # an author's step, and the store's lock on it
                done = "refused" if after is None else "done"
                found.setdefault(
                    f"author {action[3]} in {world.rows[0].state}: {done}", (key, action)
                )
            if after is None:
                continue
            reached = canonical(after)
            if reached in parent:
                continue
            parent[reached] = (key, action)
            queue.append((reached, after))
            for p in always:
                if not p.holds(after):
                    found.setdefault(f"invariant {p.name} violated", (key, action))

    def path_to(key: Hashable) -> list[tuple[Any, ...]]:
        actions: list[tuple[Any, ...]] = []
        back = parent[key]
        while back is not None:
            key, action = back
            actions.append(action)
            back = parent[key]
        return actions[::-1]

    paths = [(what, [*path_to(before), action]) for what, (before, action) in found.items()]
    return sorted(paths, key=lambda p: (len(p[1]), p[0]))


@dataclass
class VerifyResult:
    ok: bool
    guided: int  # the model's shortest paths played (to each transition, refusal, violation)
    guided_steps: int
    programs: int  # random programs run (Hypothesis's examples, shrinking included)
    steps_run: int  # their steps played on the store
    workers: int
    failure: str = ""  # what went wrong first, in one line
    program: list[str] = field(default_factory=list)  # the failing program, step by step


def play(
    spec: Spec,
    open_store: OpenStore,
    actions: Sequence[tuple[Any, ...]],
    *,
    workers: int | None = None,
) -> tuple[list[str], str]:
    """Play one path of the model (its actions, on entity 0) on the store, comparing after
    every step as :func:`verify` does: the program in words, and the first disagreement or
    violated invariant ("" if none)."""
    if any(a[0] in ("env", "clock", "fence") and a[1] != 0 for a in actions) or any(
        a[0] in TAKES and a[2] != 0 for a in actions
    ):
        raise InvalidArgument("a path played on the store acts on entity 0 only")
    run = lifecycle_state_machine(spec, open_store, workers=workers)()
    try:
        for action in actions:
            run.step(action)  # type: ignore[attr-defined]
    except AssertionError as exc:
        return list(run.program), str(exc).split("\n")[0]  # type: ignore[attr-defined]
    finally:
        run.teardown()
    return list(run.program), ""  # type: ignore[attr-defined]


def verify(
    spec: Spec,
    open_store: OpenStore,
    *,
    examples: int = 50,
    steps: int = 30,
    workers: int | None = None,
    seed: int | None = None,
    guided_first: bool = True,
) -> VerifyResult:
    """Run the generated stateful test: first the model's shortest path to every transition,
    refusal and invariant violation it can reach (:func:`guided_paths`; skipped when
    ``guided_first`` is false), then ``examples`` random programs of up to ``steps``
    steps. The result says whether the store agreed with the model at every step, and
    gives the failing program if not (for a random one, the shortest Hypothesis finds)."""
    machine = lifecycle_state_machine(spec, open_store, workers=workers)
    with KeptStores() as kept:
        machine.kept = kept
        return _verify(machine, spec, workers, examples, steps, seed, guided_first)


def _verify(
    machine: type[RuleBasedStateMachine],
    spec: Spec,
    workers: int | None,
    examples: int,
    steps: int,
    seed: int | None,
    guided_first: bool,
) -> VerifyResult:
    chosen = EntityModelConfig(workers=workers, keys=1).resolved(spec)["workers"]
    guided = guided_paths(spec, workers=workers) if guided_first else []
    guided_steps = 0
    for what, path in guided:
        run = machine()
        try:
            try:
                for action in path:
                    run.step(action)  # type: ignore[attr-defined]
                    guided_steps += 1
            finally:
                run.teardown()  # which audits the path's history
        except AssertionError as exc:
            program = list(run.program)  # type: ignore[attr-defined]
            first = str(exc).split("\n")[0]
            return VerifyResult(
                False,
                len(guided),
                guided_steps,
                0,
                0,
                chosen,
                f"{first}; the path: {what}",
                program,
            )
    machine.programs_run = machine.steps_run = 0
    failure, program = random_programs(machine, examples, steps, seed)
    return VerifyResult(
        not failure,
        len(guided),
        guided_steps,
        getattr(machine, "programs_run", 0),
        getattr(machine, "steps_run", 0),
        chosen,
        failure,
        program,
    )


def random_programs(
    machine: type[RuleBasedStateMachine], examples: int, steps: int, seed: int | None
) -> tuple[str, list[str]]:
    """Run ``examples`` random programs of up to ``steps`` steps of ``machine``
    (derandomised unless ``seed`` is given): the first failure in one line and the failing
    program in words (the shortest Hypothesis finds: it runs it last), or ("", [])."""
    test_settings = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        derandomize=seed is None,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    try:
        with with_reporter(lambda value: None):  # the program is ours to print, in words
            if seed is not None:
                from hypothesis import seed as with_seed

                with_seed(seed)(
                    lambda: run_state_machine_as_test(machine, settings=test_settings)
                )()
            else:
                run_state_machine_as_test(machine, settings=test_settings)
    except AssertionError as exc:
        return str(exc).split("\n")[0], list(getattr(machine, "last_program", []))
    return "", []
