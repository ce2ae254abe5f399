"""A lifecycle of your own on PostgreSQL: an existing entity's event is one statement on the
server (two round trips with BEGIN and COMMIT), it writes what the transaction path writes,
and a transaction the server rolls back, or a connection lost before or during the
commit, is run again or settled from history: never lost, never applied twice."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors as pg_errors

from claimfsm.errors import DraftChanged, StaleClaim, StoreError
from claimfsm.spec import declarations_dir, load_spec
from claimfsm.store import EntityHistory, EntityStore, open_entity_store
from claimfsm.store import _entity_drivers as drivers
from claimfsm.verify import ManualClock

from ._proxy import CommitSwallower, lose_the_next_commit, through
from .conftest import drop_schema, pg_schema_url

JOB = load_spec(declarations_dir() / "job.toml")


@pytest.fixture
def pg_url(pg_database: str) -> Iterator[str]:
    schema, found = pg_schema_url(pg_database)
    try:
        yield found
    finally:
        drop_schema(pg_database, schema)


def _a_job_run(store: EntityStore, clock: ManualClock) -> list[EntityHistory]:
    """Two attempts of one job, a stale owner's refusal and a takeover after a lapse; the
    history they leave (leases included), without seq and token fingerprints (each run
    draws fresh tokens)."""
    first = store.take("j", "lease", owner="w1", lease_seconds=30)
    first = store.act(store.act(first, "renew", lease_seconds=60), "start")
    first = store.act(first, "fail")
    second = store.take("j", "lease", owner="w2", lease_seconds=30)
    with pytest.raises(StaleClaim):
        store.act(first, "start")
    clock.advance(31)
    assert store.operate("j", "lapse") == "queued"
    third = store.act(store.take("j", "lease", owner="w3"), "start")
    store.act(third, "succeed")
    assert second.epoch == 2
    return [dataclasses.replace(h, seq=0, token_fingerprint="-") for h in store.history("j")]


def test_an_event_is_one_statement_in_two_round_trips(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new entity's first event (it creates the row) and an existing entity's event."""
    store = open_entity_store(JOB, pg_url, clock=ManualClock())
    sent: list[tuple[str, bool]] = []
    pipelines: list[int] = []
    execute, pipeline = psycopg.Cursor.execute, psycopg.Connection.pipeline

    def counted_execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        sent.append((str(query), self._conn._pipeline is not None))
        return execute(self, query, params, **kw)

    def counted_pipeline(self: Any) -> Any:
        pipelines.append(1)
        return pipeline(self)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted_execute)
    monkeypatch.setattr(psycopg.Connection, "pipeline", counted_pipeline)
    handle = store.take("j", "lease", owner="w")
    # BEGIN and the guarded write (which returns the row it replaced, or creates it); the
    # history record and COMMIT: two pipelines, two round trips.
    starts = ("BEGIN", "WITH clock AS MATERIALIZED", f"INSERT INTO {store.history_table}", "COMMIT")
    for event in ("lease", "start"):
        assert len(sent) == 4, (event, sent)
        assert all(q.startswith(w) and piped for (q, piped), w in zip(sent, starts, strict=True))
        assert len(pipelines) == 2, event
        sent.clear()
        pipelines.clear()
        if event == "lease":
            handle = store.act(handle, "start")
    monkeypatch.undo()
    assert [(h.event, h.source, h.dest) for h in store.history("j")] == [
        ("lease", "queued", "leased"),
        ("start", "leased", "running"),
    ]
    store.close()


def test_the_transaction_path_learns_its_id_with_the_locked_row(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What settles a lost commit (the transaction's id) comes back with a statement the
    path sends anyway: no query of its own, on either path."""
    store = open_entity_store(JOB, pg_url, clock=ManualClock())
    handle = store.take("j", "lease", owner="w")
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def counted(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        sent.append(str(query))
        return execute(self, query, params, **kw)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    monkeypatch.setattr(store, "_one_statement", {})  # the transaction path
    handle = store.act(handle, "start")
    assert handle.state == "running" and sent
    assert not [q for q in sent if "xact_id" in q and "FOR UPDATE" not in q], sent
    assert any("pg_current_xact_id()" in q and "FOR UPDATE" in q for q in sent), sent
    monkeypatch.undo()
    store.close()


def _both_paths(
    pg_database: str, spec: Any, run: Callable[[EntityStore, ManualClock], list[EntityHistory]]
) -> list[list[EntityHistory]]:
    """The history ``run`` leaves with each event as one statement, then with every event
    on the transaction path, each in a schema of its own."""
    histories = []
    for one in (True, False):
        schema, found = pg_schema_url(pg_database)
        clock = ManualClock()
        store = open_entity_store(spec, found, clock=clock)
        assert bool(store._one_statement) is True
        if not one:
            store._one_statement = {}  # every event on the transaction path
        try:
            histories.append(run(store, clock))
        finally:
            store.close()
            drop_schema(pg_database, schema)
    return histories


def test_the_one_statement_writes_what_the_transaction_path_writes(
    pg_database: str,
) -> None:
    histories = _both_paths(pg_database, JOB, _a_job_run)
    assert histories[0] == histories[1]
    assert [h.event for h in histories[0]] == [
        "lease",
        "renew",
        "start",
        "fail",
        "lease",
        "start",  # refused, recorded: the stale first owner
        "lapse",
        "lease",
        "start",
        "succeed",
    ]


PAGE = load_spec(Path(__file__).resolve().parents[1] / "examples" / "page.toml")


def _a_page_run(store: EntityStore, clock: ManualClock) -> list[EntityHistory]:
    """A page picked with a revision, a start refused once the revision was edited, a
    stale owner's refusal, a publish that marks its revision dispatched, a lapse; the
    history (without seq and token fingerprints)."""
    first = store.approve_draft(store.create_draft("p", "v1").draft_id)
    held = store.take("p", "pick", owner="w1", draft=first.draft_id, lease_seconds=30)
    store.edit_draft(first.draft_id, "v2")
    with pytest.raises(DraftChanged):
        store.act(held, "start")
    store.approve_draft(first.draft_id)
    store.act(held, "give_back")
    again = store.take("p", "pick", owner="w2", draft=first.draft_id, lease_seconds=30)
    with pytest.raises(StaleClaim):
        store.act(held, "start")
    store.act(store.act(again, "start"), "finish")
    other = store.approve_draft(store.create_draft("p", "another").draft_id)
    store.take("p", "pick", owner="w3", draft=other.draft_id, lease_seconds=30)
    clock.advance(31)
    assert store.operate("p", "lapse") == "withdrawn"
    assert store.draft(first.draft_id).status == "dispatched"
    return [dataclasses.replace(h, seq=0, token_fingerprint="-") for h in store.history("p")]


def test_with_drafts_the_one_statement_writes_what_the_transaction_path_writes(
    pg_database: str,
) -> None:
    """A lifecycle with linked drafts runs on the one statement too (the draft its guards
    read, read there): the same history, draft entries included, as statement by
    statement."""
    histories = _both_paths(pg_database, PAGE, _a_page_run)
    assert histories[0] == histories[1]
    assert [h.event for h in histories[0]] == [
        *("draft:create", "draft:approve", "pick", "draft:edit", "draft:approve"),
        *("give_back", "pick", "start", "start", "finish", "draft:dispatch"),
        *("draft:create", "draft:approve", "pick", "lapse"),
    ]
    assert histories[0][7].refused == "owner_matches"  # the stale owner's start


def test_with_drafts_an_event_is_still_one_statement(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pick and a start with linked drafts: BEGIN and the one statement, then history and
    COMMIT; a finish that dispatches its revision adds the dispatch's statement."""
    store = open_entity_store(PAGE, pg_url, clock=ManualClock())
    draft = store.approve_draft(store.create_draft("p", "v1").draft_id)
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def counted(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        sent.append(str(query).split(" ")[0])
        return execute(self, query, params, **kw)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    held = store.take("p", "pick", owner="w", draft=draft.draft_id)
    assert sent == ["BEGIN", "WITH", "INSERT", "COMMIT"], sent
    sent.clear()
    held = store.act(held, "start")
    assert sent == ["BEGIN", "WITH", "INSERT", "COMMIT"], sent
    sent.clear()
    store.act(held, "finish")
    assert sent == ["BEGIN", "WITH", "UPDATE", "INSERT", "INSERT", "COMMIT"], sent
    monkeypatch.undo()
    store.close()


def test_a_rolled_back_transaction_is_run_again(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_entity_store(JOB, pg_url, clock=ManualClock())
    handle = store.take("j", "lease", owner="w")
    failures = [pg_errors.SerializationFailure("injected"), pg_errors.DeadlockDetected("again")]
    one = drivers._PgTx.one

    def failing_one(self: Any, sql: str, args: tuple[Any, ...]) -> Any:
        found = one(self, sql, args)
        if failures:
            raise failures.pop(0)  # after the write: the rollback must undo it
        return found

    monkeypatch.setattr(drivers._PgTx, "one", failing_one)
    handle = store.act(handle, "start")
    monkeypatch.undo()
    assert not failures and handle.state == "running"
    assert [h.event for h in store.history("j")] == ["lease", "start"]  # once, not three times
    # Rolled back every time: the store gives up after its retries and says nothing changed.
    store.retries = 2
    monkeypatch.setattr(
        drivers._PgTx,
        "one",
        lambda self, sql, args: (_ for _ in ()).throw(pg_errors.SerializationFailure("again")),
    )
    with pytest.raises(StoreError, match=r"rolled back 3 times .*nothing was written"):
        store.act(handle, "succeed")
    monkeypatch.undo()
    assert store.row("j").state == "running"  # type: ignore[union-attr]
    store.close()


def test_a_connection_the_server_dropped_is_opened_again(pg_url: str) -> None:
    store = open_entity_store(JOB, pg_url, clock=ManualClock())
    handle = store.take("j", "lease", owner="w")
    with store._driver._pool.connection() as conn:  # type: ignore[attr-defined]
        pid = conn.info.backend_pid  # the pool's one connection: one thread asks
    with psycopg.connect(pg_url.split("?")[0], autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    handle = store.act(handle, "start")  # the first attempt meets the dead connection
    assert handle.state == "running"
    assert [h.event for h in store.history("j")] == ["lease", "start"]
    store.close()


@pytest.mark.parametrize("applied", [True, False])
def test_a_commit_whose_answer_was_lost_is_settled_from_history(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, applied: bool
) -> None:
    """The connection breaks while COMMIT is in flight: applied, the history record says
    so and the call succeeds; not applied, it is run again. Either way, once."""
    store = open_entity_store(JOB, pg_url, clock=ManualClock())
    handle = store.take("j", "lease", owner="w")
    commit = drivers._PgTx.commit
    lost: list[bool] = []

    def losing_commit(self: Any) -> None:
        if not lost:
            lost.append(True)
            if applied:
                commit(self)
            self._conn.close()
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        commit(self)

    monkeypatch.setattr(drivers._PgTx, "commit", losing_commit)
    handle = store.act(handle, "start")
    monkeypatch.undo()
    assert lost and handle.state == "running"
    assert [h.event for h in store.history("j")] == ["lease", "start"]
    store.close()


@pytest.mark.parametrize("path", ["one statement", "transaction"])
def test_a_commit_the_server_never_heard_is_ended_and_run_again(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """A partition loses COMMIT on its way: the client's connection breaks while the
    server's stays open, its transaction idle and holding the row's lock. The store's
    settle ends that backend, finds the transaction rolled back and runs the event again.
    Before, the settle gave up after 10 s and the rerun waited on the abandoned
    transaction's lock until the server's TCP keepalive noticed the client was gone (two
    hours by default)."""
    with CommitSwallower(pg_url) as proxy:
        store = open_entity_store(JOB, through(pg_url, proxy), clock=ManualClock(), pool_size=1)
        try:
            handle = store.take("j", "lease", owner="w")
            if path == "transaction":
                monkeypatch.setattr(store, "_one_statement", {})
            handle = lose_the_next_commit(proxy, lambda: store.act(handle, "start"))
            assert handle.state == "running"
            assert [h.event for h in store.history("j")] == ["lease", "start"]  # once
        finally:
            store.close()


def test_a_lifecycle_runs_through_pgbouncer_without_prepared_statements(
    pgbouncer: str,
) -> None:
    """Transaction pooling: each transaction may run on another server connection, so with
    ``prepared_statements=off`` nothing is prepared (psycopg would on a fifth use)."""
    schema, found = pg_schema_url(pgbouncer)
    clock = ManualClock()
    store = open_entity_store(JOB, found + "&prepared_statements=off", clock=clock)
    try:
        with store._driver._pool.connection() as conn:  # type: ignore[attr-defined]
            assert conn.prepare_threshold is None
        for _ in range(3):  # three runs: every statement used more than five times
            store.reset()
            assert len(_a_job_run(store, clock)) == 10
        # the history streamed through a server-side cursor in one transaction, as pooled
        whole = store.history()
        with contextlib.closing(store.iter_history(3)) as pages:
            first = [next(pages) for _ in range(3)]
            store.take("written-meanwhile", "lease", lease_seconds=10)
            assert first + list(pages) == whole
    finally:
        store.close()
        drop_schema(pgbouncer, schema)


@pytest.mark.parametrize("spec_name", ["job.toml", "page.toml"])
def test_a_store_opens_while_another_transaction_writes_its_tables(
    pg_url: str, spec_name: str
) -> None:
    """Opening makes the tables and indexes that are missing and only looks up those that
    are there: it takes no lock that waits for a writer of the rows, the history or the
    drafts (``CREATE INDEX`` would, even ``IF NOT EXISTS`` with the index there). A
    transaction that has written all three and not committed does not hold the opening
    up; the thread that opens is given ten seconds, far more than an open takes, so that
    the test ends if opening does wait."""
    import threading

    from claimfsm.store._postgres import split_url

    path = declarations_dir() / spec_name
    if spec_name == "page.toml":
        path = Path(__file__).parent.parent / "examples" / "page.toml"
    spec = load_spec(path)
    store = open_entity_store(spec, pg_url, clock=ManualClock())
    tables = [store.table, store.history_table]
    if spec.drafts is not None:
        tables.append(store._drafts.table)
    store.close()
    schema = pg_url.rsplit("schema=", 1)[1]
    opened: list[EntityStore] = []
    with psycopg.connect(split_url(pg_url)[0]) as writer:
        writer.execute(f'SET search_path TO "{schema}"')
        for table in tables:  # a write lock on each, held until the end of the block
            writer.execute(f"LOCK TABLE {table} IN ROW EXCLUSIVE MODE")
        opening = threading.Thread(
            target=lambda: opened.append(open_entity_store(spec, pg_url, clock=ManualClock()))
        )
        opening.start()
        opening.join(timeout=10)
        held_up = opening.is_alive()
        writer.rollback()
    opening.join()
    assert not held_up, "opening waited for the writer's transaction"
    opened[0].drop()
    opened[0].close()
