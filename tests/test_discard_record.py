"""A discard names what was refused: the event the stale owner attempted (``resume``'s: the
wake event the declaration's rule judged it by) and what the rule named (the stale guard
that failed, or ``state:`` and the state), in every store, as a lifecycle's refusal entry
does. Schema version 3 added the two columns; a version 2 store is migrated when opened,
its earlier discards naming neither, and the audit reads both."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from claimfsm.audit import audit
from claimfsm.cli import main
from claimfsm.errors import StaleClaim
from claimfsm.spec import claim_spec
from claimfsm.store import SCHEMA_VERSION, SQLiteStore, Store, open_store

from .conftest import Backend, FakeClock, approved_draft, drop_schema, pg_schema_url


def stale_owners(store: Store, clock: FakeClock) -> None:
    """On target c, a superseded owner's begin_send and resume; on target d, an owner's
    begin_send and resume after the sweep lapsed its lease (its token and epoch still
    current, its state declared stale)."""
    c = store.acquire("c", approved_draft(store, "c"), "w1", 30)
    clock.advance(31)
    store.acquire("c", approved_draft(store, "c"), "w2", 30)  # lapses epoch 1 first
    with pytest.raises(StaleClaim):
        c.begin_send()
    with pytest.raises(StaleClaim):
        store.resume("c", c.epoch, c.token)
    d = store.acquire("d", approved_draft(store, "d"), "w1", 30)
    clock.advance(31)
    store.sweep()
    with pytest.raises(StaleClaim, match="expired"):
        d.begin_send()
    with pytest.raises(StaleClaim, match="expired"):
        store.resume("d", d.epoch, d.token)


def discards(store: Store) -> list[tuple[str, int, str, str | None, str | None]]:
    return [
        (e.target_id, e.epoch, e.from_state, e.attempted, e.refused)
        for e in store.history()
        if e.event == "discard"
    ]


#: What ``stale_owners`` records: the guard that failed, then the stale state (each against
#: the state its epoch was last recorded in: a superseded epoch's, a discard's included).
RECORDED = [
    ("c", 1, "expired", "begin_send", "owner_matches"),
    ("c", 1, "discarded", "begin_send", "owner_matches"),  # resume, judged as begin_send
    ("d", 1, "expired", "begin_send", "state:expired"),
    ("d", 1, "expired", "begin_send", "state:expired"),  # resume
]


def test_every_store_records_the_event_and_what_the_rule_named(backend: Backend) -> None:
    store = backend.open()
    stale_owners(store, backend.clock)
    assert discards(store) == RECORDED
    details = [e.detail for e in store.history() if e.event == "discard"]
    assert [d.split(":")[0] for d in details] == [
        "refused begin_send",
        "refused resume",
        "refused begin_send",
        "refused resume",
    ]
    # the rule itself names the same, on the rows the stale owners found
    spec = claim_spec()
    assert spec.stale_owner("begin_send", "reserved", lambda g: g == "owner_matches") == (
        "owner_matches"
    )
    assert spec.stale_owner("begin_send", "expired", lambda g: False) == "state:expired"


def test_the_history_command_shows_what_each_discard_names(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "c.sqlite"
    store = SQLiteStore(path, clock=clock)
    stale_owners(store, clock)
    store.close()
    url = f"sqlite:///{path}"
    listed = CliRunner().invoke(main, ["history", "--db", url], env={"COLUMNS": "200"})
    assert listed.exit_code == 0, listed.output
    lines = listed.output.splitlines()
    assert "refused" in lines[1].split()
    discards = [line for line in lines if " discard " in line]
    assert len(discards) == 4
    assert all("begin_send (owner_matches)" in line for line in discards[:2])
    assert all("begin_send (state:expired)" in line for line in discards[2:])
    shown = CliRunner().invoke(main, ["history", "--db", url, "--json"])
    entries = [json.loads(line) for line in shown.output.splitlines()]
    assert [(e["attempted"], e["refused"]) for e in entries if e["event"] == "discard"] == [
        r[3:] for r in RECORDED
    ]


def back_to_version_2(path: Path) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript(
        "ALTER TABLE history DROP COLUMN attempted; ALTER TABLE history DROP COLUMN refused;"
        "PRAGMA user_version = 2;"
    )
    db.close()


def pg_version_2(pg_database: str, url: str, schema: str, clock: FakeClock) -> None:
    """A PostgreSQL schema as version 2 left it, with ``stale_owners``' history."""
    import psycopg
    from psycopg import sql

    store = open_store(url, clock=clock)
    stale_owners(store, clock)
    store.close()
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "ALTER TABLE {s}.history DROP COLUMN attempted, DROP COLUMN refused;"
                " UPDATE {s}.meta SET value = '2' WHERE key = 'schema_version'"
            ).format(s=sql.Identifier(schema))
        )


def pg_version(pg_database: str, schema: str) -> str:
    import psycopg
    from psycopg import sql

    with psycopg.connect(pg_database, autocommit=True) as conn:
        found = conn.execute(
            sql.SQL("SELECT value FROM {}.meta WHERE key = 'schema_version'").format(
                sql.Identifier(schema)
            )
        ).fetchone()
    assert found is not None
    return str(found[0])


def test_a_version_2_sqlite_store_is_migrated_and_its_old_discards_still_audit(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "v2.sqlite"
    url = f"sqlite:///{path}"
    store = SQLiteStore(path, clock=clock)
    stale_owners(store, clock)
    store.close()
    back_to_version_2(path)
    before = path.read_bytes()
    report = audit(url)  # the audit reads version 2 as it is, and writes nothing
    assert report.ok and report.entries == 10  # 4 discards, 3 acquires, 3 lapses
    assert path.read_bytes() == before
    store = SQLiteStore(path, clock=clock)  # migrated
    assert [r[3:] for r in discards(store)] == [(None, None)] * 4
    c = store.acquire("c", approved_draft(store, "c"), "w3", 30)
    clock.advance(31)
    store.acquire("c", approved_draft(store, "c"), "w4", 30)
    with pytest.raises(StaleClaim):
        c.renew(lease_seconds=30)
    assert discards(store)[-1] == ("c", 3, "expired", "renew", "owner_matches")
    assert audit(url).ok
    store.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    db.close()


def test_a_version_2_postgresql_schema_is_migrated(pg_database: str, clock: FakeClock) -> None:
    schema, url = pg_schema_url(pg_database)
    try:
        pg_version_2(pg_database, url, schema, clock)
        assert audit(url).ok  # read as version 2
        store = open_store(url, clock=clock)
        assert [r[3:] for r in discards(store)] == [(None, None)] * 4
        store.close()
        store = open_store(url, clock=clock)  # opened again: nothing left to migrate
        c = store.acquire("c", approved_draft(store, "c"), "w3", 30)
        clock.advance(31)
        store.sweep()
        with pytest.raises(StaleClaim):
            c.begin_send()
        assert discards(store)[-1] == ("c", 3, "expired", "begin_send", "state:expired")
        assert audit(url).ok
        store.close()
        assert pg_version(pg_database, schema) == "3"
    finally:
        drop_schema(pg_database, schema)


def open_together(url: str, clock: FakeClock) -> list[Store]:
    """Two stores of ``url`` opened by two threads at once."""
    start = threading.Barrier(2)
    opened: list[Store] = []
    failed: list[BaseException] = []

    def open_one() -> None:
        start.wait()
        try:
            opened.append(open_store(url, clock=clock))
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failed, failed
    return opened


def test_stores_opening_a_version_2_database_at_once_migrate_it_once(
    tmp_path: Path, clock: FakeClock, pg_database: str
) -> None:
    """Two stores opening the same version 2 database together: one migrates it (SQLite's
    write lock, PostgreSQL's per-schema lock), the other finds version 3; both work."""
    path = tmp_path / "v2.sqlite"
    store = SQLiteStore(path, clock=clock)
    stale_owners(store, clock)
    store.close()
    back_to_version_2(path)
    schema, pg_url = pg_schema_url(pg_database)
    try:
        pg_version_2(pg_database, pg_url, schema, clock)
        for url in (f"sqlite:///{path}", pg_url):
            opened = open_together(url, clock)
            assert [len(discards(o)) for o in opened] == [4, 4]
            for o in opened:
                o.close()
            assert audit(url).ok
        db = sqlite3.connect(path)
        assert db.execute("PRAGMA user_version").fetchone()[0] == 3
        db.close()
        assert pg_version(pg_database, schema) == "3"
    finally:
        drop_schema(pg_database, schema)
