"""What only the PostgreSQL store has to prove. Everything else runs on it through the
``backend`` fixture and the stateful test; these are its multi-host properties."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import multiprocessing
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from claimfsm.errors import (
    DraftNotApproved,
    InvalidArgument,
    SchemaVersionError,
    StoreError,
    TargetBusy,
)
from claimfsm.store import Evidence, open_store

from .conftest import FakeClock, approved_draft, drop_schema, pg_schema_url

psycopg = pytest.importorskip("psycopg")
pg_errors = psycopg.errors
sql = psycopg.sql


@pytest.fixture
def pg(pg_database: str) -> Iterator[tuple[str, str]]:
    """(store URL with a fresh schema, database URL); the schema is dropped afterwards."""
    schema, url = pg_schema_url(pg_database)
    yield url, pg_database
    drop_schema(pg_database, schema)


def test_a_worker_whose_clock_runs_ahead_cannot_take_a_live_lease(
    pg: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = pg
    honest = open_store(url)  # no clock=: the server's clock judges leases
    claim = honest.acquire("acct", approved_draft(honest), "honest", lease_seconds=30)
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 3600)  # an hour ahead
    skewed = open_store(url)
    with pytest.raises(TargetBusy):
        skewed.acquire("acct", approved_draft(skewed), "skewed", lease_seconds=30)
    assert honest.get_claim("acct").epoch == claim.epoch  # type: ignore[union-attr]
    claim.begin_send()  # the honest owner still holds it
    honest.close()
    skewed.close()


def test_sqlite_would_let_the_same_skewed_clock_steal_the_lease(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Why the server clock matters: a store judged by each worker's own clock is stolen.
    path = f"sqlite:///{tmp_path / 'c.sqlite'}"
    honest = open_store(path)
    honest.acquire("acct", approved_draft(honest), "honest", lease_seconds=30)
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 3600)
    skewed = open_store(path)
    assert skewed.acquire("acct", approved_draft(skewed), "skewed", 30).epoch == 2
    honest.close()
    skewed.close()


def _lose_commit(monkeypatch: pytest.MonkeyPatch, *, after_commit: bool) -> None:
    """The next COMMIT's answer is lost: after the server committed, or before it did."""
    from claimfsm.store._postgres import _PostgresTx

    real_commit = _PostgresTx.commit
    state = {"armed": True}

    def commit(self: Any) -> None:
        if state["armed"]:
            state["armed"] = False
            if after_commit:
                real_commit(self)  # the server committed; the answer is lost
            else:
                self.conn.execute("ROLLBACK")  # the server never committed
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        real_commit(self)

    monkeypatch.setattr(_PostgresTx, "commit", commit)


def _transactions_only(store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Take the transaction path for every event, as a refusal, an acquire after a lapse
    and the sweep do."""
    monkeypatch.setattr(store, "_single_statement", lambda *args: None)


def _acquired(url: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """A store with target acct acquired, whose next events take the transaction path."""
    store = open_store(url)
    claim = store.acquire("acct", approved_draft(store), "w", 30)
    _transactions_only(store, monkeypatch)
    return store, claim


def test_commit_lost_after_the_server_committed_is_found_and_succeeds(
    pg: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, claim = _acquired(pg[0], monkeypatch)
    _lose_commit(monkeypatch, after_commit=True)
    claim.begin_send()  # no error: the store re-read history and found its commit
    assert store.get_claim("acct").state == "sending"  # type: ignore[union-attr]
    store.close()


def test_commit_lost_before_the_server_committed_is_run_again(
    pg: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, claim = _acquired(pg[0], monkeypatch)
    _lose_commit(monkeypatch, after_commit=False)
    claim.begin_send()  # history shows it did not happen: nothing changed, so it ran again
    assert store.get_claim("acct").state == "sending"
    assert [h.event for h in store.history("acct")] == ["acquire", "begin_send"]  # once
    store.close()


def test_a_rolled_back_transaction_is_run_again_and_then_given_up(
    pg: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from claimfsm.store._postgres import _PostgresTx

    store, claim = _acquired(pg[0], monkeypatch)
    failures = [
        pg_errors.SerializationFailure("injected"),
        pg_errors.DeadlockDetected("injected again"),
    ]
    real_commit = _PostgresTx.commit

    def commit(self: Any) -> None:
        if failures:
            raise failures.pop(0)  # before COMMIT is sent: the rollback undoes the write
        real_commit(self)

    monkeypatch.setattr(_PostgresTx, "commit", commit)
    claim.begin_send()
    assert not failures
    assert [h.event for h in store.history("acct")] == ["acquire", "begin_send"]
    # Rolled back every time: the store gives up after its retries and says nothing changed.
    store.retries = 2
    monkeypatch.setattr(
        _PostgresTx,
        "commit",
        lambda self: (_ for _ in ()).throw(pg_errors.SerializationFailure("always")),
    )
    with pytest.raises(StoreError, match=r"rolled back 3 times \(always\); nothing was written"):
        claim.confirm()
    monkeypatch.undo()
    assert store.get_claim("acct").state == "sending"  # type: ignore[union-attr]
    assert [h.event for h in store.history("acct")] == ["acquire", "begin_send"]
    store.close()


def _lose_statement(
    monkeypatch: pytest.MonkeyPatch, *, applied: bool, history_readable: bool = True
) -> list[str]:
    """The next single statement's answer is lost: after the server applied it (autocommit:
    applied is committed), or before it ran. Returns the statements run, for inspection."""
    real_execute = psycopg.Connection.execute
    state = {"armed": True, "lost": False}
    seen: list[str] = []

    def execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        text = query if isinstance(query, str) else ""
        seen.append(text)
        if state["armed"] and text.startswith("WITH clock"):
            state["armed"] = False
            state["lost"] = True
            if applied:
                real_execute(self, query, params, **kw)
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        if state["lost"] and not history_readable and "history" in text:
            raise psycopg.OperationalError("the server is still unreachable")
        return real_execute(self, query, params, **kw)

    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    return seen


@pytest.mark.parametrize("event", ["begin_send", "acquire", "retry", "reconcile"])
def test_a_single_statement_lost_after_it_applied_is_found_in_history(
    pg: tuple[str, str], monkeypatch: pytest.MonkeyPatch, event: str
) -> None:
    store = open_store(pg[0])
    draft = approved_draft(store)
    if event != "acquire":
        claim = store.acquire("acct", draft, "w", 30)
    if event in ("retry", "reconcile"):
        claim.begin_send()
        claim.mark_uncertain()
    _lose_statement(monkeypatch, applied=True)
    if event == "begin_send":
        claim.begin_send()
        expected = ["acquire", "begin_send"]
    elif event == "acquire":
        claim = store.acquire("acct", draft, "w", 30)
        assert claim.state == "reserved" and claim.epoch == 1
        claim.begin_send()  # the handle returned holds the token that was stored
        expected = ["acquire", "begin_send"]
    elif event == "retry":
        again = store.retry("acct", 1, owner="w2", lease_seconds=30, remote_dedups=True)
        assert again.state == "sending"
        again.confirm()  # its new token is the one stored
        expected = ["acquire", "begin_send", "timeout", "retry", "confirm"]
    else:
        info = store.reconcile("acct", 1, Evidence.present())
        assert (info.state, info.outcome) == ("reconciled", "present")
        assert info.token_fingerprint == claim.token_fingerprint
        expected = ["acquire", "begin_send", "timeout", "reconcile"]
    # Applied once, reported once: no second attempt, no refusal recorded.
    assert [e.event for e in store.history("acct")] == expected
    store.close()


def test_a_single_statement_lost_before_it_ran_is_run_again_by_a_transaction(
    pg: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(pg[0])
    claim = store.acquire("acct", approved_draft(store), "w", 30)
    seen = _lose_statement(monkeypatch, applied=False)
    claim.begin_send()  # nothing in history, so the transaction path did it
    assert any(q.startswith("BEGIN") for q in seen)
    assert [e.event for e in store.history("acct")] == ["acquire", "begin_send"]
    store.close()


def test_a_lost_renew_runs_again_and_a_second_renew_is_harmless(
    pg: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Renew may happen many times in an epoch with one token: history cannot tell whether
    # this one applied, and renewing again only sets the deadline from now once more.
    clock = FakeClock(1000.0)
    store = open_store(pg[0], clock=clock)
    claim = store.acquire("acct", approved_draft(store), "w", 30)
    _lose_statement(monkeypatch, applied=True)
    clock.advance(5)
    claim.renew(lease_seconds=60)
    assert claim.lease_deadline == 1065.0
    assert [e.event for e in store.history("acct")] == ["acquire", "renew", "renew"]
    store.close()


def test_a_lost_statement_whose_history_cannot_be_read_is_unknown(
    pg: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(pg[0])
    claim = store.acquire("acct", approved_draft(store), "w", 30)
    _lose_statement(monkeypatch, applied=True, history_readable=False)
    with pytest.raises(StoreError, match=r"outcome is\s+unknown"):
        claim.begin_send()
    monkeypatch.undo()
    assert store.get_claim("acct").state == "sending"  # type: ignore[union-attr]
    store.close()


def test_terminated_backends_are_retried_transparently(pg: tuple[str, str]) -> None:
    url, database = pg
    store = open_store(url)
    claim = store.acquire("acct", approved_draft(store), "w", 30)
    with psycopg.connect(database, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()[0]
    assert killed >= 1
    claim.begin_send()  # the pool's connection was dead; the store retried on a new one
    claim.confirm()
    assert [e.event for e in store.history("acct")] == ["acquire", "begin_send", "confirm"]
    store.close()


def test_tables_live_in_their_own_schema_and_versions_are_checked(pg: tuple[str, str]) -> None:
    url, database = pg
    schema = url.rsplit("schema=", 1)[1]
    open_store(url).close()
    with psycopg.connect(database, autocommit=True) as admin:
        tables = {
            r[0]
            for r in admin.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
            )
        }
        # prune_permit holds a row only inside a pruning transaction (schema version 2).
        assert tables == {"meta", "drafts", "claims", "history", "prune_permit"}
        admin.execute(
            sql.SQL("UPDATE {}.meta SET value = '99' WHERE key = 'schema_version'").format(
                sql.Identifier(schema)
            )
        )
    with pytest.raises(SchemaVersionError, match="version 99"):
        open_store(url)


def test_a_schema_with_other_tables_is_refused(pg_database: str) -> None:
    schema, url = pg_schema_url(pg_database)
    with psycopg.connect(pg_database, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        admin.execute(sql.SQL("CREATE TABLE {}.users (id int)").format(sql.Identifier(schema)))
    try:
        with pytest.raises(StoreError, match="not claimfsm's"):
            open_store(url)
    finally:
        drop_schema(pg_database, schema)


def test_history_is_append_only(pg: tuple[str, str]) -> None:
    url, database = pg
    store = open_store(url)
    store.acquire("acct", approved_draft(store), "w", 30)
    store.close()
    schema = url.rsplit("schema=", 1)[1]
    with (
        psycopg.connect(database, autocommit=True) as admin,
        pytest.raises(psycopg.errors.RaiseException, match="append-only"),
    ):
        admin.execute(sql.SQL("DELETE FROM {}.history").format(sql.Identifier(schema)))


def test_bad_urls_are_clear_errors() -> None:
    with pytest.raises(InvalidArgument, match="schema must be"):
        open_store("postgresql://postgres@127.0.0.1/postgres?schema=no;drop")
    from claimfsm.store._postgres import PostgresStore

    with pytest.raises(StoreError, match="cannot connect"):
        PostgresStore("postgresql://postgres@127.0.0.1:1/postgres", connect_seconds=0.5)


def test_a_wrong_database_is_named_with_the_servers_reason(pg_database: str) -> None:
    """A server that answers but refuses the connection says why, at once: both stores make
    one plain connection before their pools (a pool only retries until its timeout)."""
    from claimfsm.spec import declarations_dir, load_spec
    from claimfsm.store import open_entity_store
    from claimfsm.store._postgres import PostgresStore

    wrong = pg_database.rsplit("/", 1)[0] + "/claimfsm_no_such_database"
    with pytest.raises(StoreError, match='database "claimfsm_no_such_database" does not exist'):
        PostgresStore(wrong, connect_seconds=30)
    with pytest.raises(StoreError, match='database "claimfsm_no_such_database" does not exist'):
        open_entity_store(load_spec(declarations_dir() / "job.toml"), wrong)


def _worker(url: str, index: int, cycles: int, queue: Any) -> None:
    try:
        store = open_store(url)
        targets = ["shared-a", "shared-b", f"own-{index}"]
        intervals = []
        done = 0
        while done < cycles:
            target = targets[done % 3]
            draft = store.create_draft(target, f"w{index}-{done}")
            store.approve_draft(draft.draft_id)
            try:
                claim = store.acquire(target, draft.draft_id, f"w{index}", 30)
            except TargetBusy:
                time.sleep(0.001)
                continue
            claim.begin_send()
            start = time.monotonic()  # from here to confirm, this worker believes it sends
            time.sleep(0.001)
            end = time.monotonic()
            claim.confirm()
            intervals.append((target, claim.epoch, start, end))
            done += 1
        store.close()
        queue.put(intervals)
    except BaseException as exc:
        queue.put(repr(exc))


def test_processes_on_shared_and_distinct_targets(pg: tuple[str, str]) -> None:
    url, _ = pg
    open_store(url).close()
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(url, i, 30, queue)) for i in range(4)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=180) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert all(isinstance(r, list) for r in results), results
    intervals = [iv for r in results for iv in r]
    store = open_store(url)
    for target in {iv[0] for iv in intervals}:
        mine = sorted((iv for iv in intervals if iv[0] == target), key=lambda iv: iv[2])
        for before, after in itertools.pairwise(mine):
            assert before[3] <= after[2], f"overlapping sending on {target}: {before} {after}"
        history = store.history(target)
        epochs = [e.epoch for e in history if e.event == "acquire"]
        assert epochs == list(range(1, len(epochs) + 1))  # no duplicate or missing epoch
        assert sorted(iv[1] for iv in mine) == epochs
        assert len(history) == 3 * len(epochs)  # acquire, begin_send, confirm: none lost
    store.close()


def _between_read_and_write(monkeypatch: pytest.MonkeyPatch, meanwhile: Any) -> None:
    """Run ``meanwhile`` (on another connection) once, after an acquire has read its draft
    and before its write: what READ COMMITTED lets another transaction do. Found by the
    crash campaign (a DeclarationMismatch when a concurrent confirm dispatched the draft)."""
    from claimfsm.store import _postgres

    original = _postgres._PostgresTx.acquire_write
    pending = [meanwhile]

    def acquire_write(self: Any, facts: Any) -> Any:
        while pending:
            pending.pop()()
        return original(self, facts)

    monkeypatch.setattr(_postgres._PostgresTx, "acquire_write", acquire_write)
    # A single statement reads and writes at once: only the transaction path has this gap.
    monkeypatch.setattr(_postgres.PostgresStore, "_single_statement", lambda *args: None)


def test_a_draft_dispatched_between_read_and_write_is_refused_as_not_approved(
    pg: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = pg
    first, second = open_store(url), open_store(url)
    draft = approved_draft(first)
    claim = first.acquire("acct", draft, "w1", 30)
    claim.begin_send()
    _between_read_and_write(monkeypatch, claim.confirm)  # the draft becomes dispatched
    with pytest.raises(DraftNotApproved):
        second.acquire("acct", draft, "w2", 30)
    # Nothing written by the refused acquire: only the first owner's three transitions.
    assert [e.event for e in second.history()] == ["acquire", "begin_send", "confirm"]
    first.close()
    second.close()


def test_a_draft_edited_and_approved_between_read_and_write_pins_the_new_version(
    pg: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = pg
    first, second = open_store(url), open_store(url)
    draft = approved_draft(first, content="v1")

    def edit_and_approve() -> None:
        first.edit_draft(draft, "v2")
        first.approve_draft(draft)

    _between_read_and_write(monkeypatch, edit_and_approve)
    claim = second.acquire("acct", draft, "w2", 30)
    info = second.get_claim("acct")
    assert info is not None and info.draft_version == 2
    assert info.idempotency_key.startswith(f"cf-{draft}-v2-")  # the key of version 2
    assert claim.epoch == 1 and [e.event for e in second.history("acct")] == ["acquire"]
    first.close()
    second.close()


def _one_of_each(store: Any, clock: FakeClock) -> list[tuple[Any, ...]]:
    """Every owner event, retry and reconcile once, in two epochs; the history they leave,
    without seq (and with times, which the clock fixes)."""
    first = store.acquire("acct", approved_draft(store), "w1", 30)
    first.renew(lease_seconds=60)
    first.begin_send()
    first.mark_uncertain("timed out")
    again = store.retry("acct", first.epoch, owner="w2", lease_seconds=30, remote_dedups=True)
    again.mark_uncertain("timed out again")
    store.reconcile("acct", again.epoch, Evidence.present())
    clock.advance(1)
    second = store.acquire("acct", approved_draft(store), "w3", 30)
    second.release()
    return [dataclasses.astuple(e)[1:] for e in store.history("acct")]


def test_every_transition_is_one_statement_in_the_common_case(
    pg: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock(1000.0)
    store = open_store(pg[0], clock=clock)
    ran: list[str] = []
    real_execute = psycopg.Connection.execute

    def execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        ran.append(query if isinstance(query, str) else repr(query))
        return real_execute(self, query, params, **kw)

    draft = approved_draft(store)
    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    claim = store.acquire("acct", draft, "w", 30)
    claim.renew(lease_seconds=60)
    claim.begin_send()
    claim.mark_uncertain()
    again = store.retry("acct", 1, owner="w2", lease_seconds=30, remote_dedups=True)
    again.mark_uncertain()
    store.reconcile("acct", 1, Evidence.present())
    # acquire, renew, begin_send, timeout, retry, timeout, reconcile: one statement each.
    assert len(ran) == 7 and all(q.startswith("WITH clock") for q in ran), ran
    monkeypatch.undo()
    assert store.get_draft(draft).status == "dispatched"  # the draft's change came with it
    store.close()


def test_the_single_statements_write_what_the_transaction_path_writes(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    histories = []
    for single in (True, False):
        schema, url = pg_schema_url(pg_database)
        clock = FakeClock(1000.0)
        store = open_store(url, clock=clock)
        if not single:
            _transactions_only(store, monkeypatch)
        try:
            histories.append(_one_of_each(store, clock))
        finally:
            store.close()
            drop_schema(pg_database, schema)
    one, transactions = histories
    # Same rows (token fingerprints aside: every run draws fresh tokens).
    assert [r[:7] + r[8:] for r in one] == [r[:7] + r[8:] for r in transactions]
    assert len(one) == 9


# -- a commit still running on the server when its answer is lost ---------------------------
def _commits_take_a_second(database: str, schema: str, history: str) -> None:
    """Every COMMIT that wrote history waits a second on the server before it completes (a
    deferred constraint trigger that sleeps): a window in which the client can lose the
    connection while the server goes on committing."""
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(
            f'CREATE FUNCTION "{schema}".slow_commit() RETURNS trigger LANGUAGE plpgsql'
            " AS $$ BEGIN PERFORM pg_sleep(1.0); RETURN NULL; END $$"
        )
        conn.execute(
            f"CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON {history}"
            " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW"
            f' EXECUTE FUNCTION "{schema}".slow_commit()'
        )


def _cut_the_next_connection(pool: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The next connection the store takes from ``pool`` is cut from the client's side
    0.4 s later (its socket shut down), while the server, still committing, carries on.
    Returns the timer doing it (``cutter``, to join) and the most connections the store
    asked for or held at once (``most``)."""
    import contextlib
    import os
    import socket
    import threading

    real = pool.connection
    seen: dict[str, Any] = {"cutter": None, "held": 0, "most": 0}

    @contextlib.contextmanager
    def connection(*args: Any, **kwargs: Any) -> Iterator[Any]:
        seen["held"] += 1  # asked for, held, or both
        seen["most"] = max(seen["most"], seen["held"])
        try:
            with real(*args, **kwargs) as conn:
                if seen["cutter"] is None:
                    raw = getattr(conn, "_conn", conn)  # the asyncio face's adapter: its own
                    sock = socket.socket(fileno=os.dup(raw.fileno()))

                    def cut() -> None:
                        sock.shutdown(socket.SHUT_RDWR)
                        sock.close()

                    seen["cutter"] = threading.Timer(0.4, cut)
                    seen["cutter"].start()
                yield conn
        finally:
            seen["held"] -= 1

    monkeypatch.setattr(pool, "connection", connection)
    return seen


def _schema_of(url: str) -> str:
    return url.rsplit("schema=", 1)[1]


@pytest.mark.parametrize("path", ["one statement", "transaction"])
def test_a_claim_write_whose_answer_is_lost_while_the_server_still_commits_succeeds(
    pg: tuple[str, str], monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """Before, the store re-read history at once, missed the commit still in progress, ran
    begin_send again and reported a refusal for a write that landed a moment later."""
    from claimfsm.store._postgres import PostgresStore

    store = PostgresStore(pg[0], pool_size=1)
    claim = store.acquire("acct", approved_draft(store), "w", 30)
    if path == "transaction":
        _transactions_only(store, monkeypatch)
    _commits_take_a_second(pg[1], _schema_of(pg[0]), store._q.history)
    seen = _cut_the_next_connection(store._pool, monkeypatch)
    claim.begin_send()  # no error: the store waited for the commit in progress
    seen["cutter"].join(5)
    # settled on a new connection after giving the broken one back: a pool of one suffices
    assert seen["most"] == 1
    assert store.get_claim("acct").state == "sending"  # type: ignore[union-attr]
    assert [e.event for e in store.history("acct")] == ["acquire", "begin_send"]
    store.close()


def test_a_claim_commit_the_server_never_heard_is_ended_and_run_again(
    pg: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition loses the transaction path's COMMIT on its way: the server's side of
    the connection stays open, its transaction holding the claim row's lock. The settle
    ends that backend, finds the transaction rolled back, and begin_send runs again.
    Before, the settle gave up after 10 s and the rerun waited on the lock for as long as
    the server took to notice the client was gone."""
    from claimfsm.store._postgres import PostgresStore

    from ._proxy import CommitSwallower, lose_the_next_commit, through

    with CommitSwallower(pg[0]) as proxy:
        store = PostgresStore(through(pg[0], proxy), pool_size=1)
        try:
            claim = store.acquire("acct", approved_draft(store), "w", 30)
            _transactions_only(store, monkeypatch)
            lose_the_next_commit(proxy, claim.begin_send)
            assert store.get_claim("acct").state == "sending"  # type: ignore[union-attr]
            assert [e.event for e in store.history("acct")] == ["acquire", "begin_send"]
        finally:
            store.close()


def test_a_first_acquire_whose_answer_is_lost_while_the_server_still_commits_succeeds(
    pg: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The target has no claim row for the re-read to wait on: it waits on the draft's,
    which the new row's reference holds until the commit. Before, the caller was told the
    target was busy, with its own claim, which no handle held, left to lapse."""
    from claimfsm.store._postgres import PostgresStore

    store = PostgresStore(pg[0], pool_size=1)
    draft = approved_draft(store)
    _commits_take_a_second(pg[1], _schema_of(pg[0]), store._q.history)
    seen = _cut_the_next_connection(store._pool, monkeypatch)
    claim = store.acquire("acct", draft, "w", 30)
    seen["cutter"].join(5)
    assert seen["most"] == 1
    assert claim.epoch == 1 and [e.event for e in store.history("acct")] == ["acquire"]
    claim.begin_send()  # the handle the caller got holds the claim
    assert store.get_claim("acct").state == "sending"  # type: ignore[union-attr]
    store.close()


def _commit_sent_then_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    """The next claim transaction sends its writes and COMMIT, then its socket is shut down
    before the answer can come: the client settles at once, while the server (its commits
    slowed) is still committing."""
    import os
    import socket

    from claimfsm.store._postgres import _PostgresTx

    real = _PostgresTx.commit
    armed = [True]

    def commit(self: Any) -> None:
        if not armed:
            real(self)
            return
        armed.clear()
        for query, rows in self._deferred:
            with self.conn.cursor() as cur:
                cur.executemany(query, rows)
        raw = getattr(self.conn, "_conn", self.conn)  # the asyncio face's adapter: its own
        raw.pgconn.send_query(b"COMMIT")
        raw.pgconn.flush()
        with socket.socket(fileno=os.dup(raw.fileno())) as sock:
            sock.shutdown(socket.SHUT_RDWR)
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(_PostgresTx, "commit", commit)


def test_the_asyncio_face_settles_a_commit_still_running_without_blocking_its_loop(
    pg: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same store code on psycopg's async pool: its waits for the old transaction,
    still in progress when it asks, go through the loop (the face's own sleep), not
    ``time.sleep``, which would block every other task."""
    import asyncio

    from claimfsm import AsyncStore

    async def main() -> None:
        store = await AsyncStore.open(pg[0], pool_size=1)
        draft = await store.create_draft("acct", "hello")
        await store.approve_draft(draft.draft_id)
        claim = await store.acquire("acct", draft.draft_id, "w", 30)
        core = store.store
        _transactions_only(core, monkeypatch)
        _commits_take_a_second(pg[1], _schema_of(pg[0]), core._q.history)  # type: ignore[attr-defined]
        _commit_sent_then_cut(monkeypatch)
        waited: list[float] = []
        real_sleep = core._sleep  # type: ignore[attr-defined]

        def sleep(seconds: float) -> None:
            waited.append(seconds)
            real_sleep(seconds)

        monkeypatch.setattr(core, "_sleep", sleep)
        await claim.begin_send()  # no error: it waited, on the loop, for the commit
        assert waited  # the transaction was still in progress when the store first asked
        assert [e.event for e in await store.history("acct")] == ["acquire", "begin_send"]
        await store.close()

    asyncio.run(asyncio.wait_for(main(), 60))


@pytest.mark.parametrize("path", ["one statement", "transaction"])
def test_a_lifecycle_write_whose_answer_is_lost_while_the_server_still_commits_succeeds(
    pg: tuple[str, str], monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """The transaction's id comes back with the one statement, or with the locked row on
    the transaction path: either way it costs no round trip of its own."""
    from claimfsm.spec import declarations_dir, load_spec
    from claimfsm.store import open_entity_store

    store = open_entity_store(load_spec(declarations_dir() / "job.toml"), pg[0], pool_size=1)
    handle = store.take("report", "lease", owner="w", lease_seconds=30)
    if path == "transaction":
        monkeypatch.setattr(store, "_one_statement", {})
    _commits_take_a_second(pg[1], _schema_of(pg[0]), store.history_table)
    seen = _cut_the_next_connection(store._driver._pool, monkeypatch)  # type: ignore[attr-defined]
    assert store.act(handle, "start").state == "running"  # no error: it waited
    seen["cutter"].join(5)
    assert seen["most"] == 1  # settled after giving the broken connection back
    assert [(e.event, e.dest) for e in store.history("report")] == [
        ("lease", "leased"),
        ("start", "running"),
    ]
    store.close()


def test_a_lifecycle_store_whose_pool_stays_busy_says_so(pg: tuple[str, str]) -> None:
    """Every connection of the pool held elsewhere: a clear error, not the pool's own."""
    from claimfsm.errors import StoreError as Failed
    from claimfsm.spec import declarations_dir, load_spec
    from claimfsm.store import open_entity_store

    store = open_entity_store(load_spec(declarations_dir() / "job.toml"), pg[0], pool_size=1)
    pool = store._driver._pool  # type: ignore[attr-defined]
    pool.timeout = 0.2
    with pool.connection(), pytest.raises(Failed, match=r"pool_size=1\); nothing was written"):
        store.take("report", "lease", owner="w")
    assert store.row("report") is None  # and the store works once a connection is free
    store.close()


def test_a_settle_whose_role_may_not_end_the_backend_waits_and_the_owner_role_ends_it(
    pg_database: str,
) -> None:
    # end_abandoned's refusal branch: a role that sees the abandoned backend but may not
    # end it (pg_read_all_stats without the right to signal a superuser's backend) leaves
    # it running and the settle waits, with no error; the backend's own role ends it.
    import functools
    import secrets
    from urllib.parse import urlsplit, urlunsplit

    import psycopg.sql

    from claimfsm.store._pg import settled

    role = f"claimfsm_test_viewer_{secrets.token_hex(3)}"
    ident = psycopg.sql.Identifier(role)
    viewer_url = urlunsplit(urlsplit(pg_database)._replace(netloc=f"{role}@127.0.0.1:5432"))
    with psycopg.connect(pg_database, autocommit=True) as admin:
        if not admin.execute(
            "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
        ).fetchone()[0]:  # type: ignore[index]
            pytest.skip("needs a superuser to hold the abandoned transaction")
        admin.execute(psycopg.sql.SQL("CREATE ROLE {} LOGIN").format(ident))
        admin.execute(psycopg.sql.SQL("GRANT pg_read_all_stats TO {}").format(ident))
    abandoned = psycopg.connect(pg_database)  # a transaction idle, waiting for its client
    try:
        begun = abandoned.execute("SELECT pg_current_xact_id()")
        xid = str(begun.fetchone()[0])  # type: ignore[index]
        pid = abandoned.info.backend_pid

        def alive() -> bool:
            with psycopg.connect(pg_database, autocommit=True) as c:
                q = "SELECT wait_event FROM pg_stat_activity WHERE pid = %s"
                row = c.execute(q, (pid,)).fetchone()
                return row is not None and row[0] == "ClientRead"

        # the backend sent its answer before it began waiting for the client's next
        # message: wait (by count) until it is waiting there
        for _ in range(200):
            if alive():
                break
            time.sleep(0.01)
        assert alive()
        viewer = functools.partial(psycopg.connect, viewer_url, autocommit=True)
        with viewer() as c:  # it sees the backend: the refusal is the server's, not a blind spot
            q = "SELECT count(*) FROM pg_stat_activity WHERE backend_xid::text::bigint = %s"
            assert c.execute(q, (int(xid) % 2**32,)).fetchone()[0] == 1  # type: ignore[index]
        assert settled(viewer, xid, seconds=0.3) is None  # still in progress: unknown
        assert alive()
        owner = functools.partial(psycopg.connect, pg_database, autocommit=True)
        assert settled(owner, xid, seconds=10) is False  # ended: aborted, decided
        assert not alive()
    finally:
        with contextlib.suppress(psycopg.Error):
            abandoned.close()
        with psycopg.connect(pg_database, autocommit=True) as admin:
            admin.execute(psycopg.sql.SQL("DROP ROLE IF EXISTS {}").format(ident))


@pytest.mark.serial
@pytest.mark.slow
def test_a_worker_cut_off_from_its_database_host_mid_commit_is_told_the_outcome_is_unknown(
    pg: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database's host vanishes (dies, or a partition cuts it off) just after a
    transaction's COMMIT went out: nothing resets the connection, and the operating
    system's defaults would keep the worker waiting for the answer for hours. The store's
    connections carry libpq's TCP keepalives and user timeout (``_pg.DEAD_HOST_SETTINGS``):
    the wait breaks, the settle cannot reach the server either, and begin_send says its
    outcome is unknown. Once the host is back, the claim is as the server left it."""
    import threading
    from urllib.parse import urlsplit, urlunsplit

    from claimfsm.store._postgres import PostgresStore

    from . import _netns
    from ._proxy import CommitSwallower

    why = _netns.unavailable()
    if why is not None and os.environ.get("CLAIMFSM_REQUIRE_NETNS") == "1":
        pytest.fail(f"network namespaces are required (CLAIMFSM_REQUIRE_NETNS=1): {why}")
    if why is not None:
        pytest.skip(why)
    url = pg[0]
    # client -> host.address:5432 (the namespace) -> gateway:relay -> the server
    with (
        _netns.IsolatedHost() as host,
        CommitSwallower(url, host=host.gateway, on_commit=host.cut) as relay,
    ):
        host.forward(5432, relay.port)
        parts = urlsplit(url)
        user = parts.netloc.rsplit("@", 1)[0]
        far = urlunsplit(parts._replace(netloc=f"{user}@{host.address}:5432"))
        store = PostgresStore(far, pool_size=1)
        claim = store.acquire("acct", approved_draft(store), "w", 30)
        _transactions_only(store, monkeypatch)
        found: dict[str, BaseException] = {}

        def send() -> None:
            try:
                claim.begin_send()
            except BaseException as exc:  # handed to the test's thread
                found["error"] = exc

        relay.armed = True
        worker = threading.Thread(target=send, daemon=True)
        worker.start()
        # a bound far above the settings' (about 25 s to notice, then the settle's
        # attempts); the operating system's own keepalive waits two hours
        worker.join(300)
        assert relay.swallowed == 1, "no COMMIT went through the relay"
        assert not worker.is_alive(), "still waiting for COMMIT's answer from a dead host"
        error = found.get("error")
        assert isinstance(error, StoreError), error
        assert "unknown" in str(error)
        with contextlib.suppress(Exception):
            store.close()
    # the relay closed: the abandoned backend ends, its transaction rolled back
    near = open_store(url)
    try:
        assert near.get_claim("acct").state == "reserved"  # type: ignore[union-attr]
    finally:
        near.close()


def test_both_stores_connections_notice_a_dead_host_unless_the_url_says_otherwise(
    pg: tuple[str, str],
) -> None:
    from claimfsm.spec import declarations_dir, load_spec
    from claimfsm.store import open_entity_store
    from claimfsm.store._pg import DEAD_HOST_SETTINGS
    from claimfsm.store._postgres import PostgresStore

    def settings(pool: Any) -> dict[str, str]:
        with pool.connection() as conn:
            params = conn.info.get_parameters()
        return {k: params[k] for k in DEAD_HOST_SETTINGS}

    job = load_spec(declarations_dir() / "job.toml")
    own = "&keepalives_idle=3&tcp_user_timeout=0"
    for url, expected in (
        (pg[0], DEAD_HOST_SETTINGS),
        (pg[0] + own, {**DEAD_HOST_SETTINGS, "keepalives_idle": "3", "tcp_user_timeout": "0"}),
    ):
        claims = PostgresStore(url, pool_size=1)
        jobs = open_entity_store(job, url, pool_size=1)
        try:
            assert settings(claims._pool) == expected
            assert settings(jobs._driver._pool) == expected  # type: ignore[attr-defined]
        finally:
            claims.close()
            jobs.close()
