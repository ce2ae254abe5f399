"""Retention: old history can be pruned (and archived) in one transaction, leaving a
checkpoint of each claim row where a target's removed entries end, so what remains still
replays to the claim rows. History stays append-only to everything else. Schema version 1
databases are migrated when opened (to the current version: tests/test_discard_record.py
migrates version 2)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from claimfsm.cli import main
from claimfsm.errors import InvalidArgument
from claimfsm.store import SCHEMA_VERSION, SQLiteStore, Store, claim_fields, replay
from claimfsm.store._core import CHECKPOINT

from .conftest import Backend, FakeClock, approved_draft


def dispatch(store: Store, target: str) -> None:
    claim = store.acquire(target, approved_draft(store, target), "w", 30)
    claim.begin_send()
    claim.confirm()


def replays(store: Store) -> bool:
    rows = replay(store.history())
    return rows == {c.target_id: claim_fields(c) for c in store.claims()}


def test_pruning_keeps_what_remains_replayable_on_every_backend(backend: Backend) -> None:
    store = backend.open()
    clock = backend.clock
    for target in ("a", "b", "c"):
        dispatch(store, target)  # old: three transitions each
    old = store.acquire("b", approved_draft(store, "b"), "w", 30)  # b's current epoch
    clock.advance(3600)
    dispatch(store, "a")  # recent
    old.release()  # recent, on the old epoch of b
    everything = store.history()
    archived: list[list[str]] = []

    pruned = store.prune_history(
        1800, archive=lambda rows: archived.append([r.event for r in rows])
    )

    assert pruned.entries == 10 and pruned.checkpoints == 3
    assert sum(len(batch) for batch in archived) == 10
    remaining = store.history()
    assert [e.event for e in remaining if e.event == CHECKPOINT] == [CHECKPOINT] * 3
    assert replays(store)
    # Each checkpoint sits where its target's removed entries ended, as the claim row was.
    for target in ("a", "b", "c"):
        before = [e for e in everything if e.target_id == target and e.seq <= pruned.upto_seq]
        checkpoint = next(e for e in remaining if e.target_id == target)
        assert checkpoint.event == CHECKPOINT and checkpoint.seq == before[-1].seq
        assert (checkpoint.epoch, checkpoint.to_state) == (before[-1].epoch, before[-1].to_state)
    # New transitions append after everything, as before.
    dispatch(store, "c")
    assert store.history()[-1].seq > max(e.seq for e in everything) and replays(store)
    # Nothing new is old enough: pruning again removes nothing, writes nothing.
    kept = store.history()
    again = store.prune_history(1800)
    assert (again.entries, again.checkpoints, again.upto_seq) == (0, 0, None)
    assert store.history() == kept


def test_an_archive_that_fails_prunes_nothing(backend: Backend) -> None:
    store = backend.open()
    dispatch(store, "a")
    backend.clock.advance(100)
    before = store.history()

    def broken(rows: list[object]) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        store.prune_history(10, archive=broken)
    assert store.history() == before


def test_bad_prune_arguments_are_refused(backend: Backend) -> None:
    store = backend.open()
    for bad in (-1, float("nan"), float("inf"), "30d", None, True):
        with pytest.raises(InvalidArgument):
            store.prune_history(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        store.prune_history(10, archive="file.jsonl")  # type: ignore[arg-type]


def test_history_stays_append_only_outside_pruning(tmp_path: Path, clock: FakeClock) -> None:
    store = SQLiteStore(tmp_path / "c.sqlite", clock=clock)
    dispatch(store, "a")
    store.close()
    db = sqlite3.connect(tmp_path / "c.sqlite")
    for statement in ("DELETE FROM history", "UPDATE history SET detail = 'x'"):
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            db.execute(statement)
    db.close()


def test_a_version_1_sqlite_database_is_migrated_when_opened(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "v1.sqlite"
    store = SQLiteStore(path, clock=clock)
    dispatch(store, "a")
    store.close()
    db = sqlite3.connect(path, isolation_level=None)  # back to what version 1 had
    db.executescript(
        "DROP TRIGGER history_no_delete; DROP INDEX history_by_target; DROP TABLE prune_permit;"
        "CREATE TRIGGER history_no_delete BEFORE DELETE ON history"
        " BEGIN SELECT RAISE(ABORT, 'history is append-only'); END;"
        "ALTER TABLE history DROP COLUMN attempted; ALTER TABLE history DROP COLUMN refused;"
        "PRAGMA user_version = 1;"
    )
    db.close()
    store = SQLiteStore(path, clock=clock)
    clock.advance(100)
    assert store.prune_history(10).entries == 3 and replays(store)
    store.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    assert db.execute("SELECT count(*) FROM sqlite_schema WHERE name = 'history_by_target'")
    columns = [r[1] for r in db.execute("PRAGMA table_info(history)")]
    assert columns[-2:] == ["attempted", "refused"]
    db.close()


def test_a_version_1_postgresql_schema_is_migrated_when_opened(
    pg_database: str, clock: FakeClock
) -> None:
    import psycopg
    from psycopg import sql

    from claimfsm.store._postgres import PostgresStore

    from .conftest import drop_schema, pg_schema_url

    schema, url = pg_schema_url(pg_database)
    s_ident = sql.Identifier(schema)
    delete_all = sql.SQL("DELETE FROM {s}.history").format(s=s_ident)
    try:
        store = PostgresStore(url, clock=clock, pool_size=1)
        dispatch(store, "a")
        store.close()
        with psycopg.connect(pg_database, autocommit=True) as conn:
            conn.execute(
                sql.SQL(
                    "DROP INDEX {s}.history_by_target; DROP TABLE {s}.prune_permit;"
                    "CREATE OR REPLACE FUNCTION {s}.history_append_only() RETURNS trigger"
                    " LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'history is append-only';"
                    " END $$; ALTER TABLE {s}.history DROP COLUMN attempted, DROP COLUMN refused;"
                    " UPDATE {s}.meta SET value = '1' WHERE key = 'schema_version'"
                ).format(s=s_ident)
            )
            with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                conn.execute(delete_all)
        store = PostgresStore(url, clock=clock, pool_size=1)
        clock.advance(100)
        assert store.prune_history(10).entries == 3 and replays(store)
        store.close()
        with psycopg.connect(pg_database, autocommit=True) as conn:
            version = conn.execute(
                sql.SQL("SELECT value FROM {s}.meta WHERE key = 'schema_version'").format(s=s_ident)
            ).fetchone()
            assert version == (str(SCHEMA_VERSION),) == ("3",)
            with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                conn.execute(delete_all)
    finally:
        drop_schema(pg_database, schema)


def test_the_prune_command_archives_then_prunes(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite"
    store = SQLiteStore(db)
    dispatch(store, "a")
    store.close()
    url = f"sqlite:///{db}"
    runner = CliRunner()
    archive = tmp_path / "old.jsonl"
    kept = runner.invoke(main, ["prune", "--db", url, "--older-than", "1d"])
    assert kept.exit_code == 0 and "pruned 0 entries" in kept.output
    done = runner.invoke(
        main, ["prune", "--db", url, "--older-than", "0s", "--archive", str(archive)]
    )
    assert done.exit_code == 0, done.output
    assert "pruned 3 entries" in done.output and "1 checkpoint" in done.output
    lines = [json.loads(line) for line in archive.read_text().splitlines()]
    assert [e["event"] for e in lines] == ["acquire", "begin_send", "confirm"]
    assert all("token" not in k or k == "token_fingerprint" for e in lines for k in e)
    # An existing archive is never overwritten; a bad duration is one clear error.
    again = runner.invoke(
        main, ["prune", "--db", url, "--older-than", "0s", "--archive", str(archive)]
    )
    assert again.exit_code != 0 and "exists" in again.output
    assert archive.read_text().count("\n") == 3
    bad = runner.invoke(main, ["prune", "--db", url, "--older-than", "soon"])
    assert bad.exit_code == 2 and "duration" in bad.output
