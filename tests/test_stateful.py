"""Hypothesis drives real SQLite connections and the reference model through one program.

Three workers, each with its own connection to one SQLite file, interleave acquire,
begin_send, the remote receiving the send, acknowledgement, lost acknowledgement,
timeout (the request may land later), confirm, release, renew, crash (forget the handle),
stale wake-up (use an old handle), clock jumps, sweep, reconcile by readback (fencing the
remote first), same-key retry (deduping remote) and draft edits. Every call is made on
the SQLite store and on the reference store (``MemoryStore``, run by the ``transitions``
machine from the same declaration): outcomes must agree, and after every step the
docs/design.md invariants are checked against the database and the remote.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from claimfsm.audit import audit
from claimfsm.errors import ClaimFSMError
from claimfsm.spec import RemoteRules, claim_spec
from claimfsm.store import Claim, ClaimInfo, Evidence, MemoryStore, SQLiteStore, Store, replay
from claimfsm.store import claim_fields as fields_of

from ._async_face import LoopThread, open_blocking
from .conftest import FakeClock, drop_schema, pg_schema_url

WORKERS = 3
TARGETS = ("t1", "t2")
LEASE = 10.0
SPEC = claim_spec()


@dataclass
class Request:
    worker: int
    target_id: str
    draft_id: int
    epoch: int
    key: str
    landed: bool = False
    rejected: bool = False


@dataclass
class ModelRemote:
    """A fencing (or deduping) remote that sees requests arrive and land separately."""

    dedup: bool = False
    fence: dict[str, int] = field(default_factory=dict)  # rejects epochs <= fence
    in_flight: list[Request] = field(default_factory=list)
    effects: list[Request] = field(default_factory=list)
    keys: set[str] = field(default_factory=set)
    overlaps: list[tuple[Request, Request]] = field(default_factory=list)

    @property
    def rules(self) -> RemoteRules:
        return RemoteRules("dedup" if self.dedup else "fencing")

    def arrive(self, r: Request) -> None:
        fence = self.rules.arrives(self.fence.get(r.target_id, 0), r.epoch)
        if fence is None:
            r.rejected = True
            return
        for other in self.in_flight:
            if other.target_id == r.target_id and not (self.dedup and other.key == r.key):
                self.overlaps.append((other, r))
        self.fence[r.target_id] = fence
        self.in_flight.append(r)

    def land(self, r: Request) -> None:
        if r not in self.in_flight:
            return
        self.in_flight.remove(r)
        landing = self.rules.lands(self.fence.get(r.target_id, 0), r.epoch, r.key in self.keys)
        if landing == "fenced":
            r.rejected = True
            return
        r.landed = True
        if landing == "applied":
            self.effects.append(r)
            self.keys.add(r.key)

    def fence_through(self, target_id: str, epoch: int) -> None:
        self.fence[target_id] = self.rules.fence_through(self.fence.get(target_id, 0), epoch)
        for r in [r for r in self.in_flight if r.target_id == target_id and r.epoch <= epoch]:
            self.land(r)  # settles as rejected

    def present(self, key: str) -> bool:
        return key in self.keys


@dataclass
class Worker:
    pair: tuple[Claim, Claim] | None = None  # (sqlite handle, reference handle)
    saved: list[tuple[Claim, Claim]] = field(default_factory=list)
    request: Request | None = None


def outcome(fn: Any) -> tuple[str, Any]:
    try:
        return ("ok", fn())
    except ClaimFSMError as exc:
        return ("error", type(exc).__name__)


def comparable(info: ClaimInfo | None) -> Any:
    if info is None:
        return None
    d = fields_of(info)
    d.pop("token_fingerprint")  # the two stores issue different tokens
    return d


def comparable_history(store: Store) -> list[tuple[Any, ...]]:
    return [
        (
            e.target_id,
            e.epoch,
            e.event,
            e.from_state,
            e.to_state,
            e.owner,
            e.draft_id,
            e.draft_version,
            e.lease_deadline,
            e.outcome,
        )
        for e in store.history()
    ]


class ClaimProtocol(RuleBasedStateMachine):
    dedup = False

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.admin = self.open_store()
        self.conns = [self.open_store() for _ in range(WORKERS)]
        self.ref = MemoryStore(clock=self.clock)
        self.remote = ModelRemote(dedup=self.dedup)
        self.workers = [Worker() for _ in range(WORKERS)]
        self.sent: set[tuple[str, int, str]] = set()
        for target in TARGETS:
            for n in range(2):
                self._both(lambda s, t=target, n=n: self._approved(s, t, f"{t} draft {n}"))

    def open_store(self) -> Store:
        """One more connection to this run's database (SQLite here; see the subclasses)."""
        if not hasattr(self, "dir"):
            self.dir = Path(tempfile.mkdtemp(prefix="claimfsm-stateful-"))
        return SQLiteStore(self.dir / "claims.sqlite", clock=self.clock)

    def store_url(self) -> str:
        return f"sqlite:///{self.dir / 'claims.sqlite'}"

    def teardown(self) -> None:
        try:
            # Whatever the program did, its history passes the after-the-fact audit.
            found = audit(self.store_url())
            assert found.ok, [v.as_dict() for v in found.violations]
            assert found.entries == len(self.admin.history())
        finally:
            for s in [self.admin, *self.conns]:
                s.close()
            if hasattr(self, "dir"):
                shutil.rmtree(self.dir, ignore_errors=True)

    # -- helpers -------------------------------------------------------------------------------
    @staticmethod
    def _approved(store: Store, target: str, content: str) -> int:
        draft = store.create_draft(target, content)
        store.approve_draft(draft.draft_id)
        return draft.draft_id

    def _both(self, call: Any, worker: int | None = None) -> tuple[str, Any]:
        real = outcome(lambda: call(self.conns[worker] if worker is not None else self.admin))
        ref = outcome(lambda: call(self.ref))
        assert real[0] == ref[0] and (real[0] == "ok" or real[1] == ref[1]), (real, ref)
        return real

    def _on_handles(self, w: int, method: str, *args: Any) -> tuple[str, Any]:
        pair = self.workers[w].pair
        assert pair is not None
        real = outcome(lambda: getattr(pair[0], method)(*args))
        ref = outcome(lambda: getattr(pair[1], method)(*args))
        assert real[0] == ref[0] and (real[0] == "ok" or real[1] == ref[1]), (method, real, ref)
        assert pair[0].state == pair[1].state
        return real

    # -- rules -----------------------------------------------------------------------------------
    @rule(w=st.integers(0, WORKERS - 1), tgt=st.sampled_from(TARGETS), pick=st.integers(0, 5))
    def acquire(self, w: int, tgt: str, pick: int) -> None:
        drafts = [d.draft_id for d in self.ref.drafts(tgt)]
        self._acquire(w, tgt, drafts[pick % len(drafts)])

    def _acquire(self, w: int, target: str, draft_id: int) -> None:
        real = outcome(lambda: self.conns[w].acquire(target, draft_id, f"w{w}", LEASE))
        ref = outcome(lambda: self.ref.acquire(target, draft_id, f"w{w}", LEASE))
        assert real[0] == ref[0] and (real[0] == "ok" or real[1] == ref[1]), (real, ref)
        if real[0] == "ok":
            worker = self.workers[w]
            if worker.pair is not None:
                worker.saved.append(worker.pair)
            worker.pair = (real[1], ref[1])
            worker.request = None
            assert real[1].epoch == ref[1].epoch

    @precondition(lambda self: any(w.pair for w in self.workers))
    @rule(
        w=st.integers(0, WORKERS - 1),
        op=st.sampled_from(["begin_send", "release", "mark_uncertain", "renew"]),
    )
    def owner_operation(self, w: int, op: str) -> None:
        # No bare ``confirm`` here: a correct worker confirms only after the remote
        # acknowledged (remote_answers); confirming with a request still in flight is a
        # worker bug no protocol can catch. Stale-handle confirms are in test_agreement.
        if self.workers[w].pair is None:
            return
        args = (LEASE,) if op == "renew" else ()
        self._on_handles(w, op, *args)

    @rule(w=st.integers(0, WORKERS - 1))
    def remote_receives_send(self, w: int) -> None:
        worker = self.workers[w]
        if worker.pair is None or worker.request is not None or worker.pair[0].state != "sending":
            return
        c = worker.pair[0]
        # A correct worker sends once per begin_send. Sending again from the same handle
        # (say after its mark_uncertain was refused because a sweep got there first) is the
        # fresh-retry mistake; no store can stop a worker from calling the remote twice.
        if (c.target_id, c.epoch, c.token) in self.sent:
            return
        self.sent.add((c.target_id, c.epoch, c.token))
        worker.request = Request(w, c.target_id, c.draft_id, c.epoch, c.idempotency_key)
        self.remote.arrive(worker.request)

    @rule(
        w=st.integers(0, WORKERS - 1),
        what=st.sampled_from(["ack", "lost_ack", "timeout", "timeout_then_lands"]),
    )
    def remote_answers(self, w: int, what: str) -> None:
        worker = self.workers[w]
        r = worker.request
        if worker.pair is None or r is None:
            return
        if what != "timeout":
            self.remote.land(r)
        if what == "ack" and r.landed:
            self._on_handles(w, "confirm")
        else:
            self._on_handles(w, "mark_uncertain", what)
        worker.request = None

    @rule()
    def a_late_request_lands(self) -> None:
        orphans = [
            r for r in self.remote.in_flight if all(w.request is not r for w in self.workers)
        ]
        if orphans:
            self.remote.land(orphans[0])

    def _progress(self, w: int, answer: str) -> None:
        """The next sensible step for worker ``w``: this keeps runs deep (sending, uncertain,
        reconciled) instead of wandering among refusals."""
        worker = self.workers[w]
        target = TARGETS[w % len(TARGETS)]
        info = self.ref.get_claim(target)
        if info is not None and info.state == "uncertain" and answer == "ack":
            self.reconcile_by_readback(target)
            return
        if worker.pair is None or worker.pair[0].state not in ("reserved", "sending"):
            approved = [d.draft_id for d in self.ref.drafts(target, status="approved")]
            if approved:
                self._acquire(w, target, approved[0])
            return
        if worker.pair[0].state == "reserved":
            self._on_handles(w, "begin_send")
        elif worker.request is None:
            self.remote_receives_send(w)
        else:
            self.remote_answers(w, answer)

    @rule(
        w=st.integers(0, WORKERS - 1),
        answer=st.sampled_from(["ack", "ack", "lost_ack", "timeout", "timeout_then_lands"]),
    )
    def progress(self, w: int, answer: str) -> None:
        self._progress(w, answer)

    @rule(w=st.integers(0, WORKERS - 1), answer=st.sampled_from(["ack", "timeout"]))
    def progress_again(self, w: int, answer: str) -> None:
        self._progress(w, answer)

    @rule(w=st.integers(0, WORKERS - 1))
    def crash(self, w: int) -> None:
        worker = self.workers[w]
        if worker.pair is not None:
            worker.saved.append(worker.pair)  # what it had persisted
        worker.pair, worker.request = None, None

    @rule(w=st.integers(0, WORKERS - 1))
    def stale_wakeup(self, w: int) -> None:
        worker = self.workers[w]
        if worker.saved:
            worker.pair = worker.saved.pop(0)
            worker.request = None
            real, ref = worker.pair
            res = self._both(
                lambda s: s.resume(
                    real.target_id, real.epoch, (real if s is not self.ref else ref).token
                ),
                w,
            )
            del res

    @rule(seconds=st.sampled_from([1.0, 5.0, LEASE + 1]))
    def clock_jumps(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule()
    def sweep(self) -> None:
        real, ref = outcome(self.admin.sweep), outcome(self.ref.sweep)
        assert real == ref

    @rule(tgt=st.sampled_from(TARGETS))
    def reconcile_by_readback(self, tgt: str) -> None:
        target = tgt
        info = self.ref.get_claim(target)
        if info is None or info.state != "uncertain":
            return
        if self.remote.present(info.idempotency_key):
            evidence = Evidence.present()
        elif self.dedup:
            self._both(
                lambda s: s.retry(
                    target, info.epoch, owner="reconciler", lease_seconds=LEASE, remote_dedups=True
                )
            )
            return
        else:
            self.remote.fence_through(target, info.epoch)
            evidence = (
                Evidence.present()
                if self.remote.present(info.idempotency_key)
                else Evidence.absent_fenced(info.epoch)
            )
        self._both(lambda s: s.reconcile(target, info.epoch, evidence))

    @rule(tgt=st.sampled_from(TARGETS), data=st.data())
    def draft_work(self, tgt: str, data: st.DataObject) -> None:
        target = tgt
        drafts = [d.draft_id for d in self.ref.drafts(target)]
        op = data.draw(st.sampled_from(["create", "edit", "approve"]))
        draft_id = data.draw(st.sampled_from(drafts))
        if op == "create":
            self._both(lambda s: self._approved(s, target, f"new for {target}"))
        elif op == "edit":
            self._both(lambda s: s.edit_draft(draft_id, f"edited {draft_id}"))
        else:
            self._both(lambda s: s.approve_draft(draft_id))

    # -- invariants --------------------------------------------------------------------------------
    @invariant()
    def store_agrees_with_the_reference_model(self) -> None:
        for target in TARGETS:
            info = self.ref.get_claim(target)
            event(f"reached {info.state if info else 'unclaimed'}")
            assert comparable(self.admin.get_claim(target)) == comparable(
                self.ref.get_claim(target)
            )
            assert self.admin.drafts(target) == self.ref.drafts(target)
        assert comparable_history(self.admin) == comparable_history(self.ref)

    @invariant()
    def history_replays_to_the_rows(self) -> None:
        rows = {c.target_id: fields_of(c) for c in self.admin.claims()}
        assert replay(self.admin.history()) == rows

    @invariant()
    def remote_never_sees_overlapping_sends_for_a_target(self) -> None:
        assert self.remote.overlaps == []

    @invariant()
    def an_effect_at_most_once_per_draft(self) -> None:
        drafts = [r.draft_id for r in self.remote.effects]
        assert len(drafts) == len(set(drafts))

    @invariant()
    def epochs_strictly_increase_and_every_one_ends_visibly(self) -> None:
        frees = set(SPEC.states_where("frees_target"))
        for target in TARGETS:
            history = self.admin.history(target)
            acquired = [e.epoch for e in history if e.event == "acquire"]
            assert acquired == list(range(1, len(acquired) + 1))
            epochs = self.admin.epochs(target)
            for epoch in acquired[:-1]:  # superseded epochs ended in a state that frees
                assert epochs[epoch] in frees

    @invariant()
    def uncertain_left_only_with_evidence_and_lapse_only_as_declared(self) -> None:
        for e in self.admin.history():
            if e.from_state == "uncertain" and e.to_state != "uncertain":
                assert e.event in ("reconcile", "retry")
            if e.event == "lapse":
                assert (e.from_state, e.to_state) in (
                    ("reserved", "expired"),
                    ("sending", "uncertain"),
                )
            if e.to_state == "sending" and e.from_state != "sending":
                assert e.event in ("begin_send", "retry")

    @invariant()
    def dispatched_drafts_match_their_pinned_effect(self) -> None:
        for r in self.remote.effects:
            draft = self.admin.get_draft(r.draft_id)
            assert r.key.startswith(f"cf-{r.draft_id}-v")
            assert draft.status in ("dispatched", "approved", "pending")


class OnPostgres(ClaimProtocol):
    """The same program on PostgreSQL: each worker its own pool of one connection."""

    database_url = ""

    def open_store(self) -> Store:
        from claimfsm.store._postgres import PostgresStore

        if not hasattr(self, "schema"):
            self.schema, self.url = pg_schema_url(self.database_url)
        return PostgresStore(self.url, clock=self.clock, pool_size=1)

    def store_url(self) -> str:
        return self.url

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            drop_schema(self.database_url, self.schema)


class FencingOnPostgres(OnPostgres):
    pass


class DedupOnPostgres(OnPostgres):
    dedup = True


@pytest.mark.parametrize("machine", [FencingOnPostgres, DedupOnPostgres], ids=["fencing", "dedup"])
#: through PgBouncer in the slow suite: the quick suite's store tests run through it too
@pytest.mark.parametrize("route", ["direct", pytest.param("pgbouncer", marks=pytest.mark.slow)])
def test_postgresql_agrees_with_the_reference_model(
    pg_database: str, machine: type[OnPostgres], route: str, request: pytest.FixtureRequest
) -> None:
    """Directly, and through PgBouncer in transaction pooling mode (every worker's
    transactions may land on any server connection)."""
    machine.database_url = (
        request.getfixturevalue("pgbouncer") if route == "pgbouncer" else pg_database
    )
    run_state_machine_as_test(machine, settings=QUICK_PG)


@pytest.mark.slow
@pytest.mark.parametrize("machine", [FencingOnPostgres, DedupOnPostgres], ids=["fencing", "dedup"])
def test_postgresql_agrees_with_the_reference_model_long(
    pg_database: str, machine: type[OnPostgres]
) -> None:
    machine.database_url = pg_database
    run_state_machine_as_test(machine, settings=LONG_PG)


class SQLiteAsyncFace(ClaimProtocol):
    """The same program through the asyncio face: each worker its own ``AsyncStore``
    (on SQLite, the core in a worker thread), all on one event loop."""

    def open_store(self) -> Store:
        if not hasattr(self, "loop"):
            self.loop = LoopThread()
            self.dir = Path(tempfile.mkdtemp(prefix="claimfsm-stateful-"))
        return open_blocking(f"sqlite:///{self.dir / 'claims.sqlite'}", self.loop, clock=self.clock)

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            self.loop.stop()


class PostgresAsyncFace(OnPostgres):
    """... and on PostgreSQL: psycopg's async pool (one connection per worker), the core
    in greenlets on the loop."""

    def open_store(self) -> Store:
        if not hasattr(self, "loop"):
            self.loop = LoopThread()
            self.schema, self.url = pg_schema_url(self.database_url)
        return open_blocking(self.url, self.loop, clock=self.clock, pool_size=1)

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            self.loop.stop()


@pytest.mark.parametrize("dedup", [False, True], ids=["fencing", "dedup"])
@pytest.mark.parametrize("backend_name", ["sqlite", "postgresql"])
def test_the_async_face_agrees_with_the_reference_model(
    backend_name: str, dedup: bool, request: pytest.FixtureRequest
) -> None:
    machine: type[ClaimProtocol]
    if backend_name == "postgresql":
        machine = type("Machine", (PostgresAsyncFace,), {"dedup": dedup})
        machine.database_url = request.getfixturevalue("pg_database")  # type: ignore[attr-defined]
    else:
        machine = type("Machine", (SQLiteAsyncFace,), {"dedup": dedup})
    run_state_machine_as_test(machine, settings=QUICK_ASYNC)


@pytest.mark.slow
@pytest.mark.parametrize("dedup", [False, True], ids=["fencing", "dedup"])
def test_the_async_face_agrees_with_the_reference_model_long(pg_database: str, dedup: bool) -> None:
    machine = type("Machine", (PostgresAsyncFace,), {"dedup": dedup, "database_url": pg_database})
    run_state_machine_as_test(machine, settings=LONG_PG)


QUICK_ASYNC = settings(max_examples=12, stateful_step_count=50, deadline=None)
QUICK_PG = settings(max_examples=25, stateful_step_count=50, deadline=None)
LONG_PG = settings(max_examples=150, stateful_step_count=80, deadline=None)
QUICK = settings(max_examples=60, stateful_step_count=50, deadline=None)
LONG = settings(max_examples=400, stateful_step_count=80, deadline=None)


class FencingQuick(ClaimProtocol):
    pass


class DedupQuick(ClaimProtocol):
    dedup = True


class FencingLong(ClaimProtocol):
    pass


class DedupLong(ClaimProtocol):
    dedup = True


TestFencingRemote = FencingQuick.TestCase
TestFencingRemote.settings = QUICK
TestDedupRemote = DedupQuick.TestCase
TestDedupRemote.settings = QUICK
TestFencingRemoteLong = pytest.mark.slow(FencingLong.TestCase)
TestFencingRemoteLong.settings = LONG
TestDedupRemoteLong = pytest.mark.slow(DedupLong.TestCase)
TestDedupRemoteLong.settings = LONG
