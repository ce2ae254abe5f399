"""The PostgreSQL store: the same protocol for workers on many hosts.

Choices, in one place:

- **One clock: the server's.** Every write takes its time from the server's
  ``clock_timestamp()``, read once per statement or transaction; guards, new lease
  deadlines and history all use it, so a worker whose own clock runs ahead cannot take over
  a live lease. ``clock=`` replaces the server clock with a callable, for tests only (it
  makes lease time controllable).
- **One round trip per transition, in the common case.** Each event compiles to one
  autocommit statement (``compile_single_statements``): the guarded ``UPDATE`` (or the
  acquire upsert), its history row and the draft's change, in one CTE on the server's
  clock. Its row lock serialises the writers of a target, and under READ COMMITTED
  PostgreSQL re-checks the WHERE clause against the newest row version after waiting, so
  the guard is a true compare-and-set.
- **The transaction path**, when that statement changes nothing (refused; or an acquire
  whose current epoch must lapse first), and for the sweep: READ COMMITTED, the guarded
  write, and if it is refused, the same write once more with the row locked (``FOR
  UPDATE``), so the diagnosis and the discard record see one consistent row, which may
  already have moved on since the single statement ran (then the write simply applies).
- **Retries.** Deadlocks (possible between concurrent sweeps), serialization failures and
  a connection lost *before* COMMIT roll the transaction back; the store retries it, up to
  ``retries`` times with jitter, then raises ``StoreError``.
- **A connection lost around a write** leaves the outcome unknown. The store does not
  guess, and it does not read too early: the old backend may still be committing. A
  transaction reads its id before ``COMMIT`` and asks the server for its fate
  (``_pg.settled``: committed, the call succeeds; aborted, it runs again). A single
  statement has no id to ask about: its re-read first waits for the claim row's lock
  (``FOR SHARE``), which the statement holds until it commits (a first acquire's new row
  is invisible until then: the re-read waits for the lock the row's reference holds on
  the draft's row). Then, and where the server cannot tell a transaction's fate, the store
  re-reads, on a fresh connection, the history record the write would have made (a single
  statement: target, event, epoch and the token the row holds after it; a transaction:
  target, epoch, event and time). Found: it happened and the call succeeds. Not found:
  the write runs again (a single statement by the transaction path, whose guards refuse a
  second application; a transaction as a retry). Unreadable: ``StoreError`` says the
  outcome is unknown and how to find out (``history``/``get_claim``). A renew, which may
  repeat with one token, is simply run again.
- **Durability**: the server's ``synchronous_commit`` (``on`` by default) makes every
  commit durable, including the one that enters ``sending``.
- **Placement**: all tables live in one schema (``claimfsm`` unless ``?schema=name`` is in
  the URL), so they can share an application's database. The schema version is recorded in
  its ``meta`` table; another version is refused with ``SchemaVersionError``.
- **No session state.** Every statement names its schema (no ``SET search_path``), locks
  are transaction-scoped, and with ``?prepared_statements=off`` nothing is prepared on the
  server: behind PgBouncer in transaction pooling mode each transaction may run on any
  server connection. Directly connected, psycopg prepares a statement on its fifth use.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from claimfsm.errors import ClaimFSMError, SchemaVersionError, StoreError
from claimfsm.machine import ClaimMachine, ClaimRow, DraftRow, Facts
from claimfsm.store._core import CHECKPOINT, Clock, HistoryRecord, Store
from claimfsm.store._pg import (
    SETTLE_SECONDS,
    LostCommit,
    Retry,
    judged,
    open_pool,
    pool_options,
    probe,
    rerun,
    settled,
    split_url,
    transaction_id,
)
from claimfsm.store._pg import redacted as _redacted
from claimfsm.store._sql import (
    CLAIM_COLUMNS,
    HISTORY_COLUMNS,
    Compiled,
    compile_single_statements,
    compile_writes,
)
from claimfsm.store._tokens import FINGERPRINT_LENGTH, fingerprint
from claimfsm.store._types import HistoryEntry

if TYPE_CHECKING:
    import psycopg

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg import sql as pg_sql
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError:  # pragma: no cover - exercised only without the extra
    psycopg = None  # type: ignore[assignment]

#: 2: history by target in seq order, deletes only by prune_history; 3: a discard records
#: the event attempted and what the stale owner rule named
SCHEMA_VERSION = 3
R = TypeVar("R")

DDL = """
CREATE TABLE {schema}.meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE {schema}.drafts (
    draft_id   bigserial PRIMARY KEY,
    target_id  text NOT NULL,
    content    text NOT NULL,
    version    bigint NOT NULL CHECK (version >= 1),
    digest     text NOT NULL,
    status     text NOT NULL CHECK (status IN ('pending', 'approved', 'dispatched')),
    updated_at double precision NOT NULL
);
CREATE INDEX drafts_by_target ON {schema}.drafts (target_id, status);
CREATE TABLE {schema}.claims (
    target_id       text PRIMARY KEY,
    epoch           bigint NOT NULL CHECK (epoch >= 1),
    state           text NOT NULL,
    owner           text NOT NULL,
    token_hash      text NOT NULL,
    draft_id        bigint NOT NULL REFERENCES {schema}.drafts (draft_id),
    draft_version   bigint NOT NULL,
    draft_digest    text NOT NULL,
    idempotency_key text NOT NULL,
    lease_deadline  double precision NOT NULL,
    outcome         text,
    updated_at      double precision NOT NULL
);
CREATE INDEX claims_by_state ON {schema}.claims (state, lease_deadline);
CREATE TABLE {schema}.history (
    seq             bigserial PRIMARY KEY,
    target_id       text NOT NULL,
    epoch           bigint NOT NULL,
    event           text NOT NULL,
    from_state      text NOT NULL,
    to_state        text NOT NULL,
    at              double precision NOT NULL,
    owner           text,
    token_fp        text NOT NULL,
    draft_id        bigint,
    draft_version   bigint,
    draft_digest    text,
    idempotency_key text,
    lease_deadline  double precision,
    outcome         text,
    detail          text NOT NULL
);
CREATE INDEX history_by_epoch ON {schema}.history (target_id, epoch, seq);
CREATE FUNCTION {schema}.history_append_only() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN RAISE EXCEPTION 'history is append-only'; END $$;
CREATE TRIGGER history_no_change BEFORE UPDATE OR DELETE ON {schema}.history
FOR EACH ROW EXECUTE FUNCTION {schema}.history_append_only();
INSERT INTO {schema}.meta (key, value) VALUES ('schema_version', '1');
"""
#: Version 2, also the migration from version 1: history by target in seq order, and deletes
#: only while the pruning transaction holds a permit row (``prune_history``).
MIGRATE_1_TO_2 = """
CREATE INDEX history_by_target ON {schema}.history (target_id, seq);
CREATE TABLE {schema}.prune_permit (upto bigint NOT NULL);
CREATE OR REPLACE FUNCTION {schema}.history_append_only() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN
    IF TG_OP = 'DELETE' AND EXISTS (
        SELECT 1 FROM {schema}.prune_permit WHERE OLD.seq <= prune_permit.upto
    ) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'history is append-only (prune_history removes old entries)';
END $$;
UPDATE {schema}.meta SET value = '2' WHERE key = 'schema_version';
"""
#: Version 3: a discard's event attempted and what the stale owner rule named (NULL on a
#: transition, and on a discard recorded before).
MIGRATE_2_TO_3 = """
ALTER TABLE {schema}.history ADD COLUMN attempted text, ADD COLUMN refused text;
UPDATE {schema}.meta SET value = '3' WHERE key = 'schema_version';
"""


class _Queries:
    """Every statement the store sends besides the compiled writes, with its schema named
    in it: the store keeps no session state (no ``SET search_path``), so a transaction
    pooler may run each transaction on any server connection."""

    def __init__(self, schema: str) -> None:
        # ``schema`` is a checked identifier (split_url); quoted as PostgreSQL quotes one.
        s = '"' + schema.replace('"', '""') + '"'
        self.claims = f"{s}.claims"
        self.drafts = f"{s}.drafts"
        self.drafts_lock = f"claimfsm:{schema}:drafts:"  # + target: live_drafts' lock
        self.history = f"{s}.history"
        cols = ", ".join(CLAIM_COLUMNS)
        self.select_claims = f"SELECT {cols} FROM {self.claims}"  # noqa: S608 (identifiers)
        self.select_drafts = (
            f"SELECT draft_id, target_id, version, digest, status, content FROM {self.drafts}"  # noqa: S608
        )
        self.select_history = f"SELECT seq, {', '.join(HISTORY_COLUMNS)} FROM {self.history}"  # noqa: S608
        self.prune_permit = f"{s}.prune_permit"
        marks = ", ".join("%s" for _ in HISTORY_COLUMNS)
        self.insert_history = (
            f"INSERT INTO {self.history} ({', '.join(HISTORY_COLUMNS)}) VALUES ({marks})"  # noqa: S608
        )


# The server's time, and one round trip that opens a transaction and reads it.
_SERVER_NOW = "extract(epoch FROM clock_timestamp())::float8"
_BEGIN = f"BEGIN ISOLATION LEVEL READ COMMITTED; SELECT {_SERVER_NOW}"


class _PostgresTx:
    """One transaction. Writes whose results nothing reads (history rows, marking a draft
    dispatched) are deferred and sent in one pipeline with COMMIT: one round trip."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        sql: Compiled,
        q: _Queries,
        clock: Clock | None,
        server_now: float | None,
    ) -> None:
        self.conn = conn
        self.sql = sql
        self.q = q
        self.clock = clock
        self._now = server_now
        self.appended: list[HistoryRecord] = []
        self._deferred: list[tuple[str, list[tuple[Any, ...]]]] = []

    def now(self) -> float:
        if self.clock is not None:  # tests only
            return self.clock()
        if self._now is None:  # a read outside a write transaction
            row = self.conn.execute(
                "SELECT extract(epoch FROM clock_timestamp())::float8"
            ).fetchone()
            assert row is not None
            self._now = float(row[0])
        return self._now

    def commit(self) -> None:
        with self.conn.pipeline(), self.conn.cursor() as cur:
            for query, rows in self._deferred:
                cur.executemany(query, rows)
            cur.execute("COMMIT")

    def _one(self, query: str, params: tuple[Any, ...]) -> Any:
        return self.conn.execute(query, params).fetchone()

    def claim_row(self, target_id: str) -> ClaimRow | None:
        found = self._one(self.q.select_claims + " WHERE target_id = %s", (target_id,))
        return None if found is None else ClaimRow(*found)

    def draft_row(self, draft_id: int) -> DraftRow | None:
        found = self._one(self.q.select_drafts + " WHERE draft_id = %s", (draft_id,))
        return None if found is None else DraftRow(*found)

    def draft_rows(self, target_id: str, status: str | None) -> list[DraftRow]:
        params: tuple[Any, ...]
        if status is None:
            query, params = " WHERE target_id = %s", (target_id,)
        else:
            query, params = " WHERE target_id = %s AND status = %s", (target_id, status)
        rows = self.conn.execute(self.q.select_drafts + query + " ORDER BY draft_id", params)
        return [DraftRow(*r) for r in rows.fetchall()]

    def claim_rows(self, state: str | None) -> list[ClaimRow]:
        if state is None:
            rows = self.conn.execute(self.q.select_claims + " ORDER BY target_id")
        else:
            rows = self.conn.execute(
                self.q.select_claims + " WHERE state = %s ORDER BY target_id", (state,)
            )
        return [ClaimRow(*r) for r in rows.fetchall()]

    def epoch_state(self, target_id: str, epoch: int) -> str | None:
        found = self._one(
            f"SELECT to_state FROM {self.q.history} WHERE target_id = %s AND epoch = %s"  # noqa: S608
            " ORDER BY seq DESC LIMIT 1",
            (target_id, epoch),
        )
        return None if found is None else str(found[0])

    def history_rows(self, target_id: str | None) -> list[HistoryEntry]:
        if target_id is None:
            rows = self.conn.execute(self.q.select_history + " ORDER BY seq")
        else:
            rows = self.conn.execute(
                self.q.select_history + " WHERE target_id = %s ORDER BY seq", (target_id,)
            )
        return [HistoryEntry(*r) for r in rows.fetchall()]

    def live_drafts(self, target_id: str) -> list[DraftRow]:
        # Under READ COMMITTED two transactions would both see none: a lock per target
        # (held to commit) makes the second creation wait for the first.
        self.conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s))", (self.q.drafts_lock + target_id,)
        )
        rows = self.conn.execute(
            self.q.select_drafts + " WHERE target_id = %s AND status IN ('pending', 'approved')"
            " ORDER BY draft_id",
            (target_id,),
        )
        return [DraftRow(*r) for r in rows.fetchall()]

    def insert_draft(self, target_id: str, content: str, digest: str, now: float) -> DraftRow:
        (draft_id,) = self._one(
            f"INSERT INTO {self.q.drafts} (target_id, content, version, digest, status,"  # noqa: S608
            " updated_at) VALUES (%s, %s, 1, %s, 'pending', %s) RETURNING draft_id",
            (target_id, content, digest, now),
        )
        return DraftRow(draft_id, target_id, 1, digest, "pending", content)

    def update_draft(self, row: DraftRow, now: float) -> None:
        self.conn.execute(
            f"UPDATE {self.q.drafts} SET content = %s, version = %s, digest = %s, status = %s,"  # noqa: S608
            " updated_at = %s WHERE draft_id = %s",
            (row.content, row.version, row.digest, row.status, now, row.draft_id),
        )

    def mark_dispatched(self, draft_id: int, version: int, now: float) -> None:
        self._deferred.append(
            (
                f"UPDATE {self.q.drafts} SET status = 'dispatched', updated_at = %s"  # noqa: S608
                " WHERE draft_id = %s AND version = %s",
                [(now, draft_id, version)],
            )
        )

    def _lock(self, target_id: str, draft_id: int | None = None) -> None:
        """Lock the target's claim row (and the draft) so a retried write and the diagnosis
        that may follow it see one row that nobody else can change meanwhile."""
        self.conn.execute(
            f"SELECT 1 FROM {self.q.claims} WHERE target_id = %s FOR UPDATE",  # noqa: S608
            (target_id,),
        )
        if draft_id is not None:
            self.conn.execute(
                f"SELECT 1 FROM {self.q.drafts} WHERE draft_id = %s FOR SHARE",  # noqa: S608
                (draft_id,),
            )

    def acquire_write(self, facts: Facts) -> ClaimRow | None:
        params = self.sql.params(facts)
        found = self.conn.execute(self.sql.acquire, params).fetchone()
        if found is None:
            assert facts.target_id is not None
            self._lock(facts.target_id, facts.draft_id)
            found = self.conn.execute(self.sql.acquire, params).fetchone()
        return None if found is None else ClaimRow(*found)

    def guarded_write(self, event: str, facts: Facts) -> list[ClaimRow]:
        params = self.sql.params(facts)
        if facts.target_id is None:
            rows = self.conn.execute(self.sql.everywhere[event], params).fetchall()
            return [ClaimRow(*r) for r in rows]
        rows = self.conn.execute(self.sql.events[event], params).fetchall()
        if not rows:
            self._lock(facts.target_id)
            rows = self.conn.execute(self.sql.events[event], params).fetchall()
        return [ClaimRow(*r) for r in rows]

    def history_cut(self, before: float) -> int | None:
        found = self._one(
            f"SELECT max(seq) FROM {self.q.history}"  # noqa: S608
            " WHERE at < %s AND event <> %s",
            (before, CHECKPOINT),
        )
        return None if found[0] is None else int(found[0])

    def history_range(self, after: int, upto: int, limit: int) -> list[HistoryEntry]:
        rows = self.conn.execute(
            self.q.select_history + " WHERE seq > %s AND seq <= %s ORDER BY seq LIMIT %s",
            (after, upto, limit),
        )
        return [HistoryEntry(*r) for r in rows.fetchall()]

    def last_before_cut(self, cut: int, discard: str) -> list[tuple[int, HistoryEntry]]:
        rows = self.conn.execute(
            "SELECT last.seq_max, h.* FROM (" + self.q.select_history + ") AS h JOIN ("  # noqa: S608
            " SELECT target_id, max(seq) AS seq_max,"
            " max(seq) FILTER (WHERE event <> %s) AS kept"
            f" FROM {self.q.history} WHERE seq <= %s GROUP BY target_id"
            ") AS last ON h.seq = last.kept ORDER BY h.target_id",
            (discard, cut),
        )
        return [(int(r[0]), HistoryEntry(*r[1:])) for r in rows.fetchall()]

    def delete_history_upto(self, cut: int) -> int:
        self.conn.execute(f"INSERT INTO {self.q.prune_permit} (upto) VALUES (%s)", (cut,))  # noqa: S608
        removed = self.conn.execute(f"DELETE FROM {self.q.history} WHERE seq <= %s", (cut,))  # noqa: S608
        self.conn.execute(f"DELETE FROM {self.q.prune_permit}")  # noqa: S608
        return int(removed.rowcount)

    def insert_history_at(self, seq: int, record: HistoryRecord) -> None:
        self.conn.execute(
            f"INSERT INTO {self.q.history} (seq, {', '.join(HISTORY_COLUMNS)})"  # noqa: S608
            f" VALUES (%s, {', '.join('%s' for _ in HISTORY_COLUMNS)})",
            (seq, *record.params()),
        )

    def append_history(self, records: list[HistoryRecord]) -> None:
        # Nothing in a transaction reads history after appending to it: deferred to commit.
        self._deferred.append((self.q.insert_history, [r.params() for r in records]))
        self.appended.extend(records)


class PostgresStore(Store):
    """A store in a PostgreSQL database (``postgresql://user@host:port/db?schema=name``)."""

    def __init__(
        self,
        url: str,
        *,
        clock: Clock | None = None,
        machine: ClaimMachine | None = None,
        pool_size: int = 4,
        connect_seconds: float = 10.0,
        retries: int = 5,
    ) -> None:
        if psycopg is None:
            raise StoreError(
                "PostgreSQL support needs the 'postgres' extra: pip install 'claimfsm[postgres]'"
            )
        super().__init__(clock=clock, machine=machine)
        self.explicit_clock = clock  # None: the server's clock decides
        self.url, self.schema, prepared = split_url(url)
        self.retries = retries
        self._q = _Queries(self.schema)
        self._sql = compile_writes(
            self.spec, lambda name: f"%({name})s", lambda table: getattr(self._q, table)
        )
        self._single = compile_single_statements(
            self.spec,
            "%(clock_now)s::float8" if clock is not None else _SERVER_NOW,
            lambda table: getattr(self._q, table),
            FINGERPRINT_LENGTH,
        )
        # Events that can fire again with the same epoch and token (renew): a lost
        # connection cannot tell from history whether this call applied.
        self._repeatable = frozenset(
            e
            for e in self.spec.events
            if all(t.source == t.dest for t in self.spec.transitions if t.event == e)
        )
        # No session settings, and with prepared_statements=off nothing prepared on the
        # server (``pool_options``): a transaction pooler may run each transaction on
        # another server connection.
        shown = _redacted(self.url)
        self._connect_seconds = connect_seconds
        self._probe(shown)
        self._pool = self._make_pool(
            **pool_options(
                url=self.url,
                prepared=prepared,
                pool_size=pool_size,
                name=f"claimfsm-{self.schema}",
            )
        )
        open_pool(self._pool, shown, connect_seconds)
        try:
            self._ensure_schema()
        except BaseException:
            self._pool.close()
            raise

    def _probe(self, shown: str) -> None:
        """One connection, to report a wrong URL at once (the asyncio face makes its own)."""
        probe(self.url, shown, self._connect_seconds)

    def _make_pool(self, **options: Any) -> Any:
        """The connection pool (the asyncio face gives psycopg's async pool instead)."""
        return ConnectionPool(self.url, open=False, **options)

    def _sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    # -- schema --------------------------------------------------------------------------------
    def _ensure_schema(self) -> None:
        ident = pg_sql.Identifier(self.schema)
        with (
            self._translate("schema set-up"),
            self._pool.connection() as conn,
            conn.transaction(),
        ):
            # One creator at a time, per schema.
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"claimfsm:{self.schema}",))
            conn.execute(pg_sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
            has_meta = conn.execute(
                "SELECT to_regclass(%s) IS NOT NULL", (f"{self.schema}.meta",)
            ).fetchone()
            tables = conn.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = %s", (self.schema,)
            ).fetchone()
            assert has_meta is not None and tables is not None

            def run(script: str) -> None:
                conn.execute(script.replace("{schema}", ident.as_string()).encode())

            if not has_meta[0] and tables[0] == 0:
                run(DDL)  # version 1, then the same migrations an existing schema gets
                run(MIGRATE_1_TO_2)
                run(MIGRATE_2_TO_3)
            elif not has_meta[0]:
                raise StoreError(
                    f"schema {self.schema!r} holds tables that are not claimfsm's; "
                    "give claimfsm a schema of its own (?schema=name)"
                )
            else:
                found = conn.execute(
                    pg_sql.SQL("SELECT value FROM {}.meta WHERE key = 'schema_version'").format(
                        ident
                    )
                ).fetchone()
                version = int(found[0]) if found else 0
                if version in (1, 2):  # in this transaction, under the creator's lock
                    if version == 1:
                        run(MIGRATE_1_TO_2)
                    run(MIGRATE_2_TO_3)
                elif version != SCHEMA_VERSION:
                    raise SchemaVersionError(
                        f"schema {self.schema!r} has claimfsm schema version {version}; this "
                        f"claimfsm reads version {SCHEMA_VERSION}: use the release that wrote it"
                    )

    # -- one statement per transition ----------------------------------------------------------
    def _single_statement(
        self, event: str, make_facts: Callable[[float], Facts], detail: str
    ) -> ClaimRow | None:
        """One autocommit statement, one round trip: the guarded write, its history row and
        the draft's change, on the server's clock. Refused (no row), or rolled back by a
        deadlock or serialization failure: None, and the transaction path runs."""
        statement = self._single.get(event)
        if statement is None:
            return None
        facts = make_facts(0.0)  # times relative to the statement's clock
        params = self._sql.params(facts)
        params["detail"] = detail
        if self.explicit_clock is not None:  # tests only
            params["clock_now"] = self.explicit_clock()
        with self._translate("write"):
            try:
                with self._pool.connection() as conn:
                    found = conn.execute(statement, params).fetchone()
            except (pg_errors.SerializationFailure, pg_errors.DeadlockDetected):
                return None
            except psycopg.OperationalError as exc:
                return self._settle_lost_statement(event, facts, exc)
        return None if found is None else ClaimRow(*found)

    def _settle_lost_statement(self, event: str, facts: Facts, exc: Exception) -> ClaimRow | None:
        """The connection broke around a single statement: did it apply? Its history row
        says so: the target, the event, the epoch named and the token the row holds after
        it (a fresh one for acquire and retry) identify it. Applied: the claim row it wrote.
        Not applied (or an event that may repeat, renew, whose re-run is harmless): None,
        and the transaction path runs it again, where the guards refuse a second
        application. Unreadable: ``StoreError``, outcome unknown."""
        if event in self._repeatable:
            return None
        held = facts.new_token_hash or facts.token_hash
        query = self._q.select_history + " WHERE target_id = %s AND event = %s"
        params: list[Any] = [facts.target_id, event]
        if facts.epoch is not None:
            query += " AND epoch = %s"
            params.append(facts.epoch)
        if held is not None:
            query += " AND token_fp = %s"
            params.append(fingerprint(held))
        try:
            found = self._read_retrying(
                query + " ORDER BY seq DESC LIMIT 1",
                params,
                after_writer_of=facts.target_id,
                draft_id=facts.draft_id if event == self._acquire else None,
            )
        except psycopg.Error as again:
            raise StoreError(
                f"the connection was lost during {event} for target {facts.target_id!r}, "
                f"and the store could not re-read its history ({again}); its outcome is "
                "unknown: check history() before acting on it"
            ) from exc
        if found is None:
            return None
        e = HistoryEntry(*found)
        return ClaimRow(
            e.target_id,
            e.epoch,
            e.to_state,
            e.owner or "",
            # reconcile presents no token; what it returns (ClaimInfo) shows only the
            # fingerprint, which is a prefix of the hash
            held if held is not None else e.token_fingerprint,
            e.draft_id or 0,
            e.draft_version or 0,
            e.draft_digest or "",
            e.idempotency_key or "",
            e.lease_deadline if e.lease_deadline is not None else 0.0,
            e.outcome,
            e.at,
        )

    def _read_retrying(
        self,
        query: str,
        params: list[Any],
        *,
        after_writer_of: str | None = None,
        draft_id: int | None = None,
    ) -> Any:
        """One row, read again on a fresh connection if a pooled one turns out dead (a
        server restart or a terminated backend leaves several in the pool).

        ``after_writer_of``: a target whose claim row a lost statement may still be
        writing (its backend between receiving it and committing): the read waits for the
        row's lock first (``FOR SHARE``, at most :data:`SETTLE_SECONDS`), so it sees that
        statement's history if it commits. ``draft_id``: the draft a lost acquire pins. A
        first acquire of a target creates its claim row, which no one else sees until it
        commits; the row's reference to the draft holds the draft's row (``FOR KEY
        SHARE``) until then, so the read waits for that instead (``FOR UPDATE``)."""
        for attempt in range(self._pool.max_size + 1):
            try:
                with self._pool.connection() as conn:
                    if after_writer_of is None:
                        return conn.execute(query, params).fetchone()
                    with conn.transaction():
                        conn.execute(f"SET LOCAL lock_timeout = '{int(SETTLE_SECONDS * 1000)}ms'")
                        with contextlib.suppress(pg_errors.LockNotAvailable), conn.transaction():
                            conn.execute(
                                f"SELECT 1 FROM {self._q.claims} WHERE target_id = %s FOR SHARE",  # noqa: S608
                                (after_writer_of,),
                            )
                            if draft_id is not None:  # after the claim row, as writers lock
                                conn.execute(
                                    f"SELECT 1 FROM {self._q.drafts} WHERE draft_id = %s"  # noqa: S608
                                    " FOR UPDATE",
                                    (draft_id,),
                                )
                        return conn.execute(query, params).fetchone()
            except psycopg.OperationalError:
                if attempt == self._pool.max_size:
                    raise
        raise AssertionError("unreachable")

    # -- transactions ------------------------------------------------------------------------
    def _atomically(self, body: Callable[[Any], R], *, durable: bool = False) -> R:
        return rerun(
            lambda: super(PostgresStore, self)._atomically(body, durable=durable),
            retries=self.retries,
            what="the PostgreSQL transaction",
            sleep=self._sleep,
        )

    @contextmanager
    def _transaction(self, *, durable: bool = False) -> Iterator[_PostgresTx]:
        with self._translate("write"):
            tx: _PostgresTx | None = None
            lost: LostCommit | None = None
            with self._pool.connection() as conn:
                try:
                    with judged(conn) as attempt:
                        cur = conn.execute(_BEGIN)
                        cur.nextset()
                        found = cur.fetchone()
                        assert found is not None
                        tx = _PostgresTx(
                            conn, self._sql, self._q, self.explicit_clock, float(found[0])
                        )
                        yield tx
                        if tx.appended:  # a write: its id settles a lost commit
                            attempt.xid = transaction_id(conn)
                        attempt.committing = True
                        tx.commit()
                except LostCommit as exc:
                    lost = exc
            if lost is not None:  # settled on a new connection, the broken one given back
                assert tx is not None and lost.__cause__ is not None
                self._settle_lost_commit(tx, lost.__cause__, attempt.xid)

    def _settle_lost_commit(self, tx: _PostgresTx, exc: BaseException, xid: str | None) -> None:
        """COMMIT was sent and the connection broke: find out whether it happened. The
        server says, where the transaction had an id (:func:`settled`, which waits while
        the old backend is still committing): committed, the call succeeds; aborted,
        nothing changed and the transaction runs again (:class:`Retry`). Otherwise its
        history row says so, as the lifecycle store's does: found, the call succeeds; not
        found, it runs again."""
        if xid is not None:
            try:
                happened = settled(self._pool.connection, xid, sleep=self._sleep)
            except psycopg.Error:
                happened = None  # history, below, decides
            if happened is True:
                return
            if happened is False:
                raise Retry() from exc
        if not tx.appended:
            raise StoreError(
                "the connection was lost during COMMIT of a draft operation; its outcome is "
                "unknown: read the draft (get_draft) to see whether it applied"
            ) from exc
        rec = tx.appended[-1]
        try:
            with self._pool.connection() as conn:
                found = conn.execute(
                    f"SELECT count(*) FROM {self._q.history} WHERE target_id = %s"  # noqa: S608
                    " AND epoch = %s AND event = %s AND to_state = %s AND at = %s",
                    (rec.target_id, rec.epoch, rec.event, rec.to_state, rec.at),
                ).fetchone()
        except psycopg.Error as again:
            raise StoreError(
                f"the connection was lost during COMMIT of {rec.event} for target "
                f"{rec.target_id!r} epoch {rec.epoch}, and the store could not re-read it "
                f"({again}); its outcome is unknown: check history() before acting on it"
            ) from exc
        if not found or found[0] == 0:
            raise Retry() from exc  # it did not happen: nothing changed, so run it again
        # Found: the commit happened; the call succeeds.

    @contextmanager
    def _snapshot(self) -> Iterator[_PostgresTx]:
        with self._translate("read"), self._pool.connection() as conn:
            yield _PostgresTx(conn, self._sql, self._q, self.explicit_clock, None)  # autocommit

    @contextmanager
    def _translate(self, what: str) -> Iterator[None]:
        try:
            yield
        except (ClaimFSMError, Retry):
            raise
        except PoolTimeout as exc:
            raise StoreError(f"no PostgreSQL connection available for the {what}") from exc
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL {what} failed: {exc}") from exc

    def close(self) -> None:
        self._pool.close()
