"""When the SQLite database itself fails: a clear StoreError, no half-applied transition,
and the data that was there still readable afterwards. (SQLite-only by nature: these are
the embedded file's failure modes; PostgreSQL's are in test_postgres.py.)"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from claimfsm.errors import StoreError
from claimfsm.store import Claim, SQLiteStore

from .conftest import FakeClock, approved_draft


def snapshot(store: SQLiteStore) -> object:
    return (store.claims(), store.history(), store.drafts("acct"))


@pytest.fixture
def sending(tmp_path: Path, clock: FakeClock) -> tuple[SQLiteStore, Claim]:
    store = SQLiteStore(tmp_path / "c.sqlite", clock=clock)
    claim = store.acquire("acct", approved_draft(store), "w", 30)
    claim.begin_send()
    return store, claim


def test_a_read_only_database_refuses_writes_and_stays_readable(
    sending: tuple[SQLiteStore, Claim],
) -> None:
    busy_store, claim = sending
    before = snapshot(busy_store)
    busy_store._db.conn.execute("PRAGMA query_only = ON")  # as a read-only file behaves
    with pytest.raises(StoreError, match="readonly database") as caught:
        busy_store.create_draft("acct", "more")
    assert isinstance(caught.value.__cause__, sqlite3.Error)
    with pytest.raises(StoreError):
        claim.confirm()  # a transition, refused by the database: not half-applied
    assert snapshot(busy_store) == before


def test_a_full_disk_applies_nothing_and_recovers(sending: tuple[SQLiteStore, Claim]) -> None:
    busy_store, claim = sending
    before = snapshot(busy_store)
    pages = busy_store._db.conn.execute("PRAGMA page_count").fetchone()[0]
    busy_store._db.conn.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(StoreError, match="full"):
        for i in range(200):  # until the file cannot grow
            busy_store.create_draft("other", "x" * 4000 + str(i))
    grown = snapshot(busy_store)
    assert grown[0] == before[0] and grown[1] == before[1]  # claims and history untouched
    busy_store._db.conn.execute("PRAGMA max_page_count = 1073741823")
    claim.confirm()  # works again once there is room
    assert busy_store.get_claim("acct").state == "confirmed"  # type: ignore[union-attr]


def test_a_corrupted_file_is_a_store_error_and_nothing_is_half_done(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "c.sqlite"
    store = SQLiteStore(path, clock=clock)
    for i in range(50):
        approved_draft(store, f"t{i}", "x" * 2000)
    store.close()
    raw = bytearray(path.read_bytes())
    raw[4096 * 3 : 4096 * 3 + 512] = b"\xff" * 512  # scribble over a page in the middle
    path.write_bytes(bytes(raw))
    with pytest.raises(StoreError) as caught:
        reopened = SQLiteStore(path, clock=clock)
        for i in range(50):
            reopened.drafts(f"t{i}")
        reopened.acquire("t0", 1, "w", 30)
    assert isinstance(caught.value.__cause__, sqlite3.DatabaseError)
