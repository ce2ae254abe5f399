"""What only the SQLite store has to prove: file format, durability settings, locking."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from claimfsm.errors import NotFound, SchemaVersionError, StoreError
from claimfsm.store import SCHEMA_VERSION, SQLiteStore, open_store

from .conftest import FakeClock, approved_draft


def test_new_file_is_wal_with_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    SQLiteStore(path).close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()


def test_other_schema_version_is_a_clear_error_and_leaves_the_file_alone(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    SQLiteStore(path).close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    before = path.read_bytes()
    with pytest.raises(SchemaVersionError, match=f"schema version {SCHEMA_VERSION + 1}"):
        SQLiteStore(path)
    assert path.read_bytes() == before


def test_foreign_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "app.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE users (id INTEGER)")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="not a claimfsm database"):
        open_store(f"sqlite:///{path}")


def test_garbage_file_is_a_store_error_not_a_driver_traceback(tmp_path: Path) -> None:
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError) as caught:
        SQLiteStore(path)
    assert isinstance(caught.value.__cause__, sqlite3.DatabaseError)


def test_token_is_never_stored_only_its_hash(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "c.sqlite"
    store = SQLiteStore(path, clock=clock)
    claim = store.acquire("acct", approved_draft(store), "w", 30)
    claim.begin_send()
    claim.confirm()
    store.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert claim.token.encode() not in raw
    assert len(claim.token) >= 22  # >= 128 bits of urlsafe base64


def test_history_is_append_only(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "c.sqlite"
    store = SQLiteStore(path, clock=clock)
    store.acquire("acct", approved_draft(store), "w", 30)
    store.close()
    db = sqlite3.connect(path)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        db.execute("DELETE FROM history")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        db.execute("UPDATE history SET event = 'x'")
    db.close()


def test_only_the_commit_entering_sending_is_fully_synced(tmp_path: Path, clock: FakeClock) -> None:
    store = SQLiteStore(tmp_path / "c.sqlite", clock=clock)
    seen: list[tuple[str, int]] = []
    conn = store._db.conn

    class Spy:
        def execute(self, statement: str, *args: object) -> sqlite3.Cursor:
            if statement == "COMMIT":
                seen.append((current, conn.execute("PRAGMA synchronous").fetchone()[0]))
            return conn.execute(statement, *args)

        def __getattr__(self, name: str) -> object:
            return getattr(conn, name)

    store._db.conn = Spy()  # type: ignore[assignment]
    current = "create"
    draft = approved_draft(store)
    current = "acquire"
    claim = store.acquire("acct", draft, "w", 30)
    current = "begin_send"
    claim.begin_send()
    current = "confirm"
    claim.confirm()
    full, normal = 2, 1
    assert ("begin_send", full) in seen
    assert all(level == normal for step, level in seen if step != "begin_send")


def test_open_store_without_create_refuses_a_missing_file_and_creates_nothing(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "typo.sqlite"
    with pytest.raises(NotFound, match="no database"):
        open_store(f"sqlite:///{missing}", create=False)
    assert list(tmp_path.iterdir()) == []
    SQLiteStore(missing).close()
    open_store(f"sqlite:///{missing}", create=False).close()  # an existing file opens
