"""What speed work could silently break, pinned: which commits are fully synced, the exact
lease deadline after every renew, the exact lease boundary, and a refusal that races a
concurrent transition on PostgreSQL (real concurrent connections).

Each test here fails for a one-line change to the store that the rest of the suite let
through: the retry commit synced NORMAL, renew keeping the old deadline, ``lease_live``
as ``<=``, and the locked re-run of a refused write removed.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from claimfsm.errors import DeclarationMismatch, LeaseExpired, StaleClaim, TargetBusy
from claimfsm.spec import claim_spec
from claimfsm.store import Claim, Evidence, SQLiteStore, Store

from .conftest import Backend, FakeClock, approved_draft

LEASE = 30.0


def entering_sending() -> set[str]:
    """From the declaration: the events whose commit may be followed at once by the external
    call (they enter the state the intent to send is recorded in), so must survive power
    loss. Today: begin_send and retry."""
    spec = claim_spec()
    return {
        t.event
        for t in spec.transitions
        if t.dest == "sending" and t.source != "sending" and not t.internal
    }


def _drive(store: Store, clock: FakeClock, event: str) -> Callable[[], object]:
    """Set ``store`` up so that ``event`` is the next thing to happen; return that call."""
    target = f"t-{event}"
    draft = approved_draft(store, target)
    claim = store.acquire(target, draft, "w", LEASE)
    if event == "acquire":
        other = approved_draft(store, target)
        claim.release()
        return lambda: store.acquire(target, other, "w", LEASE)
    if event in ("begin_send", "release", "renew"):
        return {
            "begin_send": claim.begin_send,
            "release": claim.release,
            "renew": lambda: claim.renew(LEASE),
        }[event]
    claim.begin_send()
    if event in ("confirm", "timeout"):
        return claim.confirm if event == "confirm" else claim.mark_uncertain
    if event == "lapse":
        clock.advance(LEASE + 1)
        return store.sweep
    claim.mark_uncertain("timeout")
    if event == "reconcile":
        return lambda: store.reconcile(target, claim.epoch, Evidence.present())
    if event == "retry":
        return lambda: store.retry(
            target, claim.epoch, owner="r", lease_seconds=LEASE, remote_dedups=True
        )
    raise AssertionError(f"no scenario for {event}")


def _stale_release(store: Store, clock: FakeClock) -> Callable[[], object]:
    """A superseded owner's release: refused, and the refusal recorded (a discard commit)."""
    old = store.acquire("t-discard", approved_draft(store, "t-discard"), "w", LEASE)
    clock.advance(LEASE + 1)
    store.acquire("t-discard", approved_draft(store, "t-discard"), "x", LEASE)

    def stale() -> None:
        with pytest.raises(StaleClaim):
            old.release()

    return stale


def test_every_commit_entering_sending_is_fully_synced_and_no_other(
    tmp_path: Path, clock: FakeClock
) -> None:
    durable = entering_sending()
    assert durable == {"begin_send", "retry"} == claim_spec().durable_events()
    store = SQLiteStore(tmp_path / "c.sqlite", clock=clock)
    trace: list[str] = []
    store._db.conn.set_trace_callback(trace.append)
    try:
        for event in claim_spec().events:
            call = (
                _stale_release(store, clock) if event == "discard" else _drive(store, clock, event)
            )
            trace.clear()
            call()
            statements = [s.strip().upper() for s in trace]
            commits = [i for i, s in enumerate(statements) if s == "COMMIT"]
            assert commits, (event, statements)
            full = [i for i, s in enumerate(statements) if s == "PRAGMA SYNCHRONOUS = FULL"]
            if event in durable:
                # FULL is in force for the commit: set before it, restored only after it.
                assert full and full[0] < commits[-1], (event, statements)
                back = [i for i, s in enumerate(statements) if s == "PRAGMA SYNCHRONOUS = NORMAL"]
                assert back and back[-1] > commits[-1], (event, statements)
            else:
                assert not full, (event, statements)
    finally:
        store.close()


def test_renew_sets_the_deadline_to_exactly_now_plus_the_lease(backend: Backend) -> None:
    store = backend.open()
    clock = backend.clock
    claim = store.acquire("t", approved_draft(store, "t"), "w", LEASE)
    assert claim.lease_deadline == clock.now + LEASE
    for step in (None, Claim.begin_send):  # in reserved, then in sending
        if step is not None:
            step(claim)
        clock.advance(7.25)
        claim.renew(45.5)
        expected = clock.now + 45.5
        assert claim.lease_deadline == expected
        info = store.get_claim("t")
        assert info is not None and info.lease_deadline == expected
        last = store.history("t")[-1]
        assert (last.event, last.lease_deadline) == ("renew", expected)
    clock.advance(1.0)
    claim.renew(2.0)  # a shorter lease is a renew too: now + 2, not the longer old deadline
    assert claim.lease_deadline == clock.now + 2.0
    info = store.get_claim("t")
    assert info is not None and info.lease_deadline == clock.now + 2.0


def test_the_lease_is_live_strictly_before_its_deadline_and_lapsed_at_it(
    backend: Backend,
) -> None:
    store = backend.open()
    clock = backend.clock
    # Just before the deadline: live. begin_send works; sweep and another acquire do not act.
    early = store.acquire("early", approved_draft(store, "early"), "w", LEASE)
    clock.advance(LEASE - 0.001)
    assert store.sweep() == []
    with pytest.raises(TargetBusy):
        store.acquire("early", approved_draft(store, "early"), "other", LEASE)
    early.begin_send()
    # At the deadline exactly: lapsed. begin_send and renew are refused, sweep lapses it.
    clock.now = 2_000_000.0
    at = store.acquire("at", approved_draft(store, "at"), "w", LEASE)
    clock.now = at.lease_deadline
    with pytest.raises(LeaseExpired):
        at.begin_send()
    with pytest.raises(LeaseExpired):
        at.renew(LEASE)
    lapsed = store.sweep()
    assert [(t.target_id, t.to_state) for t in lapsed if t.target_id == "at"] == [("at", "expired")]
    # And another worker takes the target at that same instant.
    clock.now = 3_000_000.0
    first = store.acquire("taken", approved_draft(store, "taken"), "w", LEASE)
    clock.now = first.lease_deadline
    second = store.acquire("taken", approved_draft(store, "taken"), "other", LEASE)
    assert second.epoch == first.epoch + 1


# -- a refusal racing a concurrent transition, on PostgreSQL ------------------------------------


class _RaceAfterRefusal:
    """Wraps a store transaction's connection: the first statement that writes ``claims``
    and changes no row runs ``meanwhile`` (another connection's transition, committed)
    before the store sees the result, so the row changes between the refused write and
    whatever the store does next. It keys on what the statement does, not on its text, so
    it holds for any way the store phrases its writes."""

    def __init__(self, meanwhile: Callable[[], None]) -> None:
        self.meanwhile = meanwhile
        self.fired = False

    def wrap(self, conn: Any) -> Any:
        race = self

        class Proxy:
            def __getattr__(self, name: str) -> Any:
                return getattr(conn, name)

            def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
                cur = conn.execute(query, params, **kw)
                text = query if isinstance(query, str) else repr(query)
                writes = "claims" in text and "UPDATE" in text.upper()
                if writes and not race.fired and cur.rowcount == 0:
                    race.fired = True
                    other = threading.Thread(target=race.meanwhile)
                    other.start()
                    other.join(15)
                    assert not other.is_alive(), "the refused write kept the row locked"
                return cur

        return Proxy()


@pytest.fixture
def racing(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[], None]], _RaceAfterRefusal]:
    """``racing(meanwhile)``: the next refused PostgreSQL write of this thread meets that
    race, whether it is a single statement or a statement in a transaction."""
    from psycopg_pool import ConnectionPool

    armed: list[_RaceAfterRefusal] = []
    original = ConnectionPool.connection

    @contextlib.contextmanager
    def connection(self: Any, *args: Any, **kw: Any) -> Iterator[Any]:
        with original(self, *args, **kw) as conn:
            if armed and not armed[-1].fired and threading.current_thread() is main:
                yield armed[-1].wrap(conn)
            else:
                yield conn

    main = threading.current_thread()
    monkeypatch.setattr(ConnectionPool, "connection", connection)

    def arm(meanwhile: Callable[[], None]) -> _RaceAfterRefusal:
        armed.append(_RaceAfterRefusal(meanwhile))
        return armed[-1]

    return arm


@pytest.mark.parametrize("refused_by", ["single statement", "transaction"])
def test_a_refused_write_racing_a_transition_is_judged_on_the_row_it_saw(
    pg_database: str,
    racing: Any,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    refused_by: str,
) -> None:
    """confirm while reserved is refused; before the store looks again, the owner's other
    process commits begin_send. The store must not judge the refusal on a row the write did
    not see (every guard holds there: DeclarationMismatch). It writes again (under the row
    lock, in the transaction) and sees sending, and confirm applies. The race comes after
    the one-statement write's refusal, or inside the transaction that follows one."""
    from claimfsm.store._postgres import PostgresStore

    from .conftest import drop_schema, pg_schema_url

    schema, url = pg_schema_url(pg_database)
    worker = PostgresStore(url, clock=clock, pool_size=1)
    other = PostgresStore(url, clock=clock, pool_size=1)
    if refused_by == "transaction":
        monkeypatch.setattr(worker, "_single_statement", lambda *args: None)
    try:
        claim = worker.acquire("t", approved_draft(worker, "t"), "w", LEASE)
        twin = other.resume("t", claim.epoch, claim.token)  # the owner's other process
        race = racing(twin.begin_send)
        try:
            claim.confirm()
        except DeclarationMismatch as exc:  # judged on a row the write never saw
            pytest.fail(f"the refusal was diagnosed on another row than the write saw: {exc}")
        assert race.fired and claim.state == "confirmed"
        events = [(e.event, e.from_state, e.to_state) for e in worker.history("t")]
        assert events[-2:] == [
            ("begin_send", "reserved", "sending"),
            ("confirm", "sending", "confirmed"),
        ]
        assert not any(e[0] == "discard" for e in events)
    finally:
        worker.close()
        other.close()
        drop_schema(pg_database, schema)
