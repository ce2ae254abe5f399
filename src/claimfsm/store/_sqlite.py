"""The SQLite store: the embedded default, one file, no server.

Durability and locking are the connection's (``_sqlite_file``, which a lifecycle's SQLite
store shares): WAL, ``synchronous=NORMAL`` for ordinary commits and ``FULL`` for the
commit that enters ``sending`` (``begin_send``, ``retry``: the record that a send may
happen is never lost on power loss; what power loss can take back is safe: an acquire, a
release or renew, or a confirm, whose epoch stays sending, lapses to uncertain and is
resolved by readback), ``BEGIN IMMEDIATE`` first, and a bounded jittered retry under
contention instead of SQLite's unfair busy handler, then ``StoreBusy``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from claimfsm.errors import SchemaVersionError, StoreError
from claimfsm.machine import ClaimMachine, ClaimRow, DraftRow, Facts
from claimfsm.store._core import CHECKPOINT, Clock, HistoryRecord, Store
from claimfsm.store._sql import CLAIM_COLUMNS, HISTORY_COLUMNS, Compiled, compile_writes
from claimfsm.store._sqlite_file import SQLiteFile
from claimfsm.store._types import HistoryEntry

#: 2: history by target in seq order, deletes only by prune_history; 3: a discard records
#: the event attempted and what the stale owner rule named
SCHEMA_VERSION = 3
APPLICATION_ID = 0x436C464D  # "ClFM": marks a file as a claimfsm database

SCHEMA = """
CREATE TABLE drafts (
    draft_id   INTEGER PRIMARY KEY AUTOINCREMENT,
    target_id  TEXT NOT NULL,
    content    TEXT NOT NULL,
    version    INTEGER NOT NULL CHECK (version >= 1),       -- bumps on every edit
    digest     TEXT NOT NULL,                               -- sha256 of content
    status     TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'dispatched')),
    updated_at REAL NOT NULL
);
-- No uniqueness per target: any number of pending and approved drafts may coexist.
CREATE INDEX drafts_by_target ON drafts (target_id, status);

CREATE TABLE claims (                                       -- exactly one row per target
    target_id       TEXT PRIMARY KEY,
    epoch           INTEGER NOT NULL CHECK (epoch >= 1),    -- +1 per acquire, never reused
    state           TEXT NOT NULL,
    owner           TEXT NOT NULL,
    token_hash      TEXT NOT NULL,                          -- sha256 of the owner token
    draft_id        INTEGER NOT NULL REFERENCES drafts (draft_id),
    draft_version   INTEGER NOT NULL,                       -- pinned at acquire
    draft_digest    TEXT NOT NULL,                          -- pinned at acquire
    idempotency_key TEXT NOT NULL,
    lease_deadline  REAL NOT NULL,                          -- store clock, seconds
    outcome         TEXT,                                   -- reconciled: present | absent
    updated_at      REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX claims_by_state ON claims (state, lease_deadline);

CREATE TABLE history (                                      -- append-only
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    target_id       TEXT NOT NULL,
    epoch           INTEGER NOT NULL,
    event           TEXT NOT NULL,
    from_state      TEXT NOT NULL,
    to_state        TEXT NOT NULL,
    at              REAL NOT NULL,
    token_fp        TEXT NOT NULL,                          -- fingerprint, never the token
    owner           TEXT,                                   -- the row after a transition;
    draft_id        INTEGER,                                -- NULL for a discard record
    draft_version   INTEGER,
    draft_digest    TEXT,
    idempotency_key TEXT,
    lease_deadline  REAL,
    outcome         TEXT,
    detail          TEXT NOT NULL
);
CREATE INDEX history_by_epoch ON history (target_id, epoch, seq);
CREATE TRIGGER history_no_update BEFORE UPDATE ON history
BEGIN SELECT RAISE(ABORT, 'history is append-only'); END;
"""
#: What version 2 adds: history by target in seq order, and deletes only while a pruning
#: transaction holds a permit row (``prune_history``).
_V2 = (
    "CREATE INDEX history_by_target ON history (target_id, seq)",
    "CREATE TABLE prune_permit (upto INTEGER NOT NULL)",
    "CREATE TRIGGER history_no_delete BEFORE DELETE ON history"
    " WHEN NOT EXISTS (SELECT 1 FROM prune_permit WHERE OLD.seq <= prune_permit.upto)"
    " BEGIN SELECT RAISE(ABORT, 'history is append-only (prune_history removes old"
    " entries)'); END",
)
#: What version 3 adds: a discard's event attempted and what the stale owner rule named
#: (NULL on a transition, and on a discard recorded before).
_V3 = (
    "ALTER TABLE history ADD COLUMN attempted TEXT",
    "ALTER TABLE history ADD COLUMN refused TEXT",
)
SCHEMA += "".join(statement + ";\n" for statement in (*_V2, *_V3))
#: From version 1 (whose delete trigger refused every delete), and from version 2.
MIGRATE_1_TO_2 = ("DROP TRIGGER history_no_delete", *_V2)
MIGRATE_2_TO_3 = _V3

_HISTORY_COLUMNS = "seq, " + ", ".join(HISTORY_COLUMNS)
_PREFIXED_HISTORY = ", ".join(f"h.{c.strip()}" for c in _HISTORY_COLUMNS.split(","))
_SELECT_CLAIMS = "SELECT " + ", ".join(CLAIM_COLUMNS) + " FROM claims"  # noqa: S608 (constant column list)
_INSERT_HISTORY = (
    f"INSERT INTO history ({', '.join(HISTORY_COLUMNS)})"  # noqa: S608 (constant column list)
    f" VALUES ({', '.join('?' for _ in HISTORY_COLUMNS)})"
)
R = TypeVar("R")


def _statements(script: str) -> Iterator[str]:
    """Split a script into complete statements (triggers contain semicolons)."""
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            yield buffer.strip()
            buffer = ""


class _SQLiteTx:
    def __init__(self, conn: sqlite3.Connection, sql: Compiled, clock: Clock) -> None:
        self.conn = conn
        self.sql = sql
        self.now = clock  # one host: the store's clock is this process's

    def claim_row(self, target_id: str) -> ClaimRow | None:
        cur = self.conn.execute(
            _SELECT_CLAIMS + " WHERE target_id = ?",
            (target_id,),
        )
        found = cur.fetchone()
        return None if found is None else ClaimRow(*found)

    def draft_row(self, draft_id: int) -> DraftRow | None:
        found = self.conn.execute(
            "SELECT draft_id, target_id, version, digest, status, content FROM drafts"
            " WHERE draft_id = ?",
            (draft_id,),
        ).fetchone()
        return None if found is None else DraftRow(*found)

    def draft_rows(self, target_id: str, status: str | None) -> list[DraftRow]:
        rows = self.conn.execute(
            "SELECT draft_id, target_id, version, digest, status, content FROM drafts"
            " WHERE target_id = ? AND (? IS NULL OR status = ?) ORDER BY draft_id",
            (target_id, status, status),
        ).fetchall()
        return [DraftRow(*r) for r in rows]

    def claim_rows(self, state: str | None) -> list[ClaimRow]:
        rows = self.conn.execute(
            _SELECT_CLAIMS + " WHERE (? IS NULL OR state = ?) ORDER BY target_id",
            (state, state),
        ).fetchall()
        return [ClaimRow(*r) for r in rows]

    def epoch_state(self, target_id: str, epoch: int) -> str | None:
        found = self.conn.execute(
            "SELECT to_state FROM history WHERE target_id = ? AND epoch = ?"
            " ORDER BY seq DESC LIMIT 1",
            (target_id, epoch),
        ).fetchone()
        return None if found is None else str(found[0])

    def history_rows(self, target_id: str | None) -> list[HistoryEntry]:
        rows = self.conn.execute(
            f"SELECT {_HISTORY_COLUMNS} FROM history"  # noqa: S608
            " WHERE (? IS NULL OR target_id = ?) ORDER BY seq",
            (target_id, target_id),
        ).fetchall()
        return [HistoryEntry(*r) for r in rows]

    def live_drafts(self, target_id: str) -> list[DraftRow]:
        # BEGIN IMMEDIATE already holds the write lock: no other creation can interleave.
        return [d for d in self.draft_rows(target_id, None) if d.status in ("pending", "approved")]

    def insert_draft(self, target_id: str, content: str, digest: str, now: float) -> DraftRow:
        cur = self.conn.execute(
            "INSERT INTO drafts (target_id, content, version, digest, status, updated_at)"
            " VALUES (?, ?, 1, ?, 'pending', ?) RETURNING draft_id",
            (target_id, content, digest, now),
        )
        (draft_id,) = cur.fetchone()
        return DraftRow(draft_id, target_id, 1, digest, "pending", content)

    def update_draft(self, row: DraftRow, now: float) -> None:
        self.conn.execute(
            "UPDATE drafts SET content = ?, version = ?, digest = ?, status = ?, updated_at = ?"
            " WHERE draft_id = ?",
            (row.content, row.version, row.digest, row.status, now, row.draft_id),
        )

    def mark_dispatched(self, draft_id: int, version: int, now: float) -> None:
        self.conn.execute(
            "UPDATE drafts SET status = 'dispatched', updated_at = ?"
            " WHERE draft_id = ? AND version = ?",
            (now, draft_id, version),
        )

    def acquire_write(self, facts: Facts) -> ClaimRow | None:
        found = self.conn.execute(self.sql.acquire, self.sql.params(facts)).fetchone()
        return None if found is None else ClaimRow(*found)

    def guarded_write(self, event: str, facts: Facts) -> list[ClaimRow]:
        statements = self.sql.events if facts.target_id is not None else self.sql.everywhere
        rows = self.conn.execute(statements[event], self.sql.params(facts)).fetchall()
        return [ClaimRow(*r) for r in rows]

    def history_cut(self, before: float) -> int | None:
        found = self.conn.execute(
            "SELECT max(seq) FROM history WHERE at < ? AND event <> ?", (before, CHECKPOINT)
        )
        value = found.fetchone()[0]
        return None if value is None else int(value)

    def history_range(self, after: int, upto: int, limit: int) -> list[HistoryEntry]:
        rows = self.conn.execute(
            f"SELECT {_HISTORY_COLUMNS} FROM history"  # noqa: S608
            " WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT ?",
            (after, upto, limit),
        ).fetchall()
        return [HistoryEntry(*r) for r in rows]

    def last_before_cut(self, cut: int, discard: str) -> list[tuple[int, HistoryEntry]]:
        rows = self.conn.execute(
            f"SELECT last.seq_max, {_PREFIXED_HISTORY} FROM history AS h JOIN ("  # noqa: S608
            " SELECT target_id, max(seq) AS seq_max,"
            " max(CASE WHEN event != ? THEN seq END) AS kept"
            " FROM history WHERE seq <= ? GROUP BY target_id"
            ") AS last ON h.seq = last.kept ORDER BY h.target_id",
            (discard, cut),
        ).fetchall()
        return [(int(r[0]), HistoryEntry(*r[1:])) for r in rows]

    def delete_history_upto(self, cut: int) -> int:
        self.conn.execute("INSERT INTO prune_permit (upto) VALUES (?)", (cut,))
        removed = self.conn.execute("DELETE FROM history WHERE seq <= ?", (cut,)).rowcount
        self.conn.execute("DELETE FROM prune_permit")
        return int(removed)

    def insert_history_at(self, seq: int, record: HistoryRecord) -> None:
        self.conn.execute(
            f"INSERT INTO history ({_HISTORY_COLUMNS})"  # noqa: S608 (constant column list)
            f" VALUES (?, {', '.join('?' for _ in HISTORY_COLUMNS)})",
            (seq, *record.params()),
        )

    def append_history(self, records: list[HistoryRecord]) -> None:
        if len(records) == 1:  # the common case: one statement, no list
            self.conn.execute(_INSERT_HISTORY, records[0].params())
        else:
            self.conn.executemany(_INSERT_HISTORY, [r.params() for r in records])


class SQLiteStore(Store):
    """A store in one SQLite file (``sqlite:///path``) or in memory (``sqlite://:memory:``)."""

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Clock | None = None,
        machine: ClaimMachine | None = None,
        busy_seconds: float = 30.0,
    ) -> None:
        super().__init__(clock=clock, machine=machine)
        self.path = str(path)
        self.busy_seconds = busy_seconds
        self._sql = compile_writes(self.spec, lambda name: f":{name}")
        self._db = SQLiteFile(self.path, busy_seconds=busy_seconds)
        self._tx = _SQLiteTx(self._db.conn, self._sql, self.clock)  # stateless: one is enough
        try:
            with self._db.translate("open"):
                self._db.retry_busy(self._ensure_schema)
        except BaseException:
            self._db.close()
            raise

    # -- schema ----------------------------------------------------------------------------
    def _ensure_schema(self) -> None:
        c = self._db.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            app_id = c.execute("PRAGMA application_id").fetchone()[0]
            version = c.execute("PRAGMA user_version").fetchone()[0]
            tables = c.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0]
            if app_id == 0 and version == 0 and tables == 0:
                for statement in _statements(SCHEMA):
                    c.execute(statement)
                c.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            elif app_id == APPLICATION_ID and version in (1, 2):
                # in this transaction, all or nothing: each version's step in turn
                steps = (*(MIGRATE_1_TO_2 if version == 1 else ()), *MIGRATE_2_TO_3)
                for statement in steps:
                    c.execute(statement)
                c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            elif app_id != APPLICATION_ID:
                raise StoreError(
                    f"{self.path!r} is not a claimfsm database (it has other tables); "
                    "give claimfsm a file of its own"
                )
            elif version != SCHEMA_VERSION:
                raise SchemaVersionError(
                    f"{self.path!r} has claimfsm schema version {version}; this claimfsm reads "
                    f"version {SCHEMA_VERSION}: use the claimfsm release that wrote it"
                )
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise

    # -- transactions ------------------------------------------------------------------------
    def _atomically(self, body: Callable[[Any], R], *, durable: bool = False) -> R:
        """``body`` in one ``BEGIN IMMEDIATE`` transaction, FULL-synced when ``durable``."""
        return self._db.write(body, self._tx, durable=durable)

    @contextmanager
    def _snapshot(self) -> Iterator[_SQLiteTx]:
        with self._db.snapshot():
            yield self._tx

    def close(self) -> None:
        self._db.close()
