"""The lifecycle store's drivers: the one place SQLite and PostgreSQL differ for it.

A driver opens a transaction and gives it a :class:`Tx`: ``run``, ``one`` and ``all`` send
a statement and wait for it; ``defer`` queues a write whose result nothing reads (a
history row), sent with the commit.

- **SQLite**: the claim store's connection (``_sqlite_file``): ``BEGIN IMMEDIATE`` (the
  write lock from the first statement, with a bounded jittered retry under contention,
  then ``StoreBusy``), FULL sync for a durable commit, each statement in process;
  ``defer`` runs at once. The one connection runs one transaction at a time, whichever
  thread asks.
- **PostgreSQL**: each transaction takes an autocommit connection from the store's pool
  (psycopg_pool; threads share a store), which says ``BEGIN`` itself, pipelined with the
  transaction's first statement, and the deferred writes pipelined with ``COMMIT``; a
  transaction whose first statement decides it (the guarded write of an existing entity)
  is two round trips. The URL, the pool and what a failed transaction means are the claim
  store's (``_pg``): deadlocks, serialization failures and a connection lost before
  ``COMMIT`` raise :class:`Retry`, and the store runs the transaction again on a fresh
  connection; a connection lost *during* ``COMMIT`` is settled by the server's word on
  the transaction (its id read before ``COMMIT``: ``_pg.settled``, which waits while it
  still commits): committed, the transaction stands; aborted, :class:`Retry`; where the
  server cannot tell, :class:`LostCommit`, and the store finds out from history whether it
  happened (:meth:`Postgres.recorded`).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from claimfsm.errors import StoreError
from claimfsm.store._pg import TRANSACTION_ID, LostCommit, Retry, rerun
from claimfsm.store._sqlite_file import SQLiteFile

__all__ = ["Driver", "LostCommit", "Postgres", "Retry", "SQLite", "Tx", "rerun"]

R = TypeVar("R")
#: PostgreSQL's time, in seconds: every write reads the server's clock
SERVER_NOW = "extract(epoch FROM clock_timestamp())::float8"


class Tx:
    """One SQLite transaction's statements (PostgreSQL's: :class:`_PgTx`)."""

    #: PostgreSQL: the transaction's id where a statement returned it (a lost commit's
    #: answer is settled by it; else the driver reads it before ``COMMIT``)
    transaction_id: str | None = None

    def __init__(self, cursor: Any) -> None:
        self._c = cursor

    def run(self, sql: str, args: tuple[Any, ...]) -> None:
        self._c.execute(sql, args)

    def one(self, sql: str, args: tuple[Any, ...]) -> Any:
        self._c.execute(sql, args)
        row = self._c.fetchone()
        return None if row is None else tuple(row)

    def all(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        self._c.execute(sql, args)
        return [tuple(r) for r in self._c.fetchall()]

    def defer(self, sql: str, args: tuple[Any, ...]) -> None:
        """A write whose result nothing reads: sent with the commit where that saves a
        round trip (here, at once)."""
        self.run(sql, args)


class Driver:
    marker = "?"
    serial = "INTEGER PRIMARY KEY AUTOINCREMENT"
    lock_clause = ""
    #: a column that reads the transaction's id, appended to the locked row's (PostgreSQL)
    transaction_id_column = ""
    #: whether the guarded write of an existing entity may be tried as one statement first
    #: that also reads the row it replaced (PostgreSQL's writable CTEs)
    one_statement = False

    def transaction(self, durable: bool = False) -> Any:
        raise NotImplementedError

    def rerun(self, body: Callable[[Tx], R], retries: int = 5) -> R:
        """``body`` in a transaction, run again where the database rolled it back or a
        commit's answer was lost: for reads and writes that may repeat."""

        def attempt() -> R:
            try:
                with self.transaction() as tx:
                    return body(tx)
            except LostCommit as lost:  # may repeat: as good as rolled back
                raise Retry() from lost.__cause__

        return rerun(attempt, retries=retries, what="the transaction")

    def stream(
        self, query: str, args: tuple[Any, ...], page: int
    ) -> Iterator[list[tuple[Any, ...]]]:
        """Every row ``query`` finds, ``page`` rows at a time, all from one snapshot of the
        database taken when the first page is read, in a read transaction on a connection
        of its own (the store's others may write meanwhile; none of it is seen). It ends
        when the last page is read or the iterator is closed."""
        raise NotImplementedError

    def run_all(self, statements: list[str]) -> None:
        """``statements`` in one transaction, whose results nothing reads (schema, reset)."""

        def run_all(tx: Tx) -> None:
            for s in statements:
                tx.run(s, ())

        self.rerun(run_all)

    def qualify(self, table: str) -> str:
        return table

    def insert_if_missing(self, table: str, columns: tuple[str, ...]) -> str:
        names = ", ".join(["key", "state", "epoch", *columns])
        marks = ", ".join([self.marker, self.marker, "0", *([self.marker] * len(columns))])
        return f"INSERT INTO {table} ({names}) VALUES ({marks}) ON CONFLICT (key) DO NOTHING"  # noqa: S608

    def server_now(self, tx: Tx) -> float:
        return time.time()

    def append_only(self, history: str, permit: str, name: str) -> list[str]:
        """Statements that make the table ``history`` refuse every update, and every delete
        of a row above what the table ``permit`` allows (a pruning transaction's, or a
        reset's, permit). ``name``: the history table's unqualified name, for the trigger's.
        Idempotent: run each time a store opens."""
        refuse = "history is append-only (prune_history removes old entries)"
        return [
            f"CREATE TABLE IF NOT EXISTS {permit} (upto INTEGER NOT NULL)",
            f"CREATE TRIGGER IF NOT EXISTS {name}_no_update BEFORE UPDATE ON {history}"
            f" BEGIN SELECT RAISE(ABORT, 'history is append-only'); END",
            f"CREATE TRIGGER IF NOT EXISTS {name}_no_delete BEFORE DELETE ON {history}"  # noqa: S608
            f" WHEN NOT EXISTS (SELECT 1 FROM {permit} WHERE OLD.seq <= {permit}.upto)"
            f" BEGIN SELECT RAISE(ABORT, '{refuse}'); END",
        ]

    def drop_function(self, name: str) -> list[str]:
        """Drop the function ``append_only`` made, where the database keeps one apart."""
        return []

    def index(self, name: str, table: str, columns: str) -> str:
        """The statement that makes index ``name`` (unqualified) on ``table`` where it is
        missing, and does nothing where it is there. Idempotent: run each time a store
        opens."""
        return f"CREATE INDEX IF NOT EXISTS {name} ON {table} ({columns})"

    def has_table(self, table: str) -> bool:
        """Whether ``table`` (unqualified) exists, where this driver keeps its tables."""
        found = self.rerun(
            lambda tx: tx.one(
                f"SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = {self.marker}",  # noqa: S608
                (table,),
            )
        )
        return found is not None

    #: the database's literal for minus infinity, a DOUBLE PRECISION
    minus_infinity = "-9e999"
    #: its words for adding a column (SQLite's ALTER runs under the write lock, in turn)
    add_column = "ADD COLUMN"
    #: the names of a table's columns; the one parameter: the table, as ``qualify`` names it
    columns_sql = "SELECT name FROM pragma_table_info(?)"

    def columns(self, tx: Tx, table: str) -> set[str]:
        """The columns of ``table`` (unqualified), read in ``tx``."""
        return {r[0] for r in tx.all(self.columns_sql, (self.qualify(table),))}

    def recorded(self, sql: str, args: tuple[Any, ...]) -> bool:
        """Whether a row answers ``sql`` (read on a fresh connection where the last broke)."""
        with self.transaction() as tx:
            return tx.one(sql, args) is not None

    def close(self) -> None:
        raise NotImplementedError


class SQLite(Driver):
    """A lifecycle's store in one SQLite file: the claim store's connection
    (``_sqlite_file``: WAL, FULL sync for a durable commit, ``BEGIN IMMEDIATE`` with a
    bounded jittered retry under contention, then ``StoreBusy``)."""

    def __init__(self, path: str, busy_seconds: float = 30.0, create: bool = True) -> None:
        # a store opened only to read or keep one (not ``create``) leaves its file's mode
        self._db = SQLiteFile(path, busy_seconds=busy_seconds, wal=create)

    @contextmanager
    def transaction(self, durable: bool = False) -> Iterator[Tx]:
        with self._db.transaction(durable=durable) as c:
            yield Tx(c.cursor())

    def stream(
        self, query: str, args: tuple[Any, ...], page: int
    ) -> Iterator[list[tuple[Any, ...]]]:
        """A second connection to the file, in a read transaction: in WAL mode (every store
        claimfsm creates) its snapshot holds while the store's connection writes on. An
        in-memory database has no second connection: it is read in one transaction and
        handed out a page at a time."""
        db = self._db
        if db.path == ":memory:":
            rows = self.rerun(lambda tx: tx.all(query, args))
            for at in range(0, len(rows), page):
                yield rows[at : at + page]
            return
        try:  # mode=rw: the file must exist, as the store's does (none is made here)
            conn = sqlite3.connect(
                Path(db.path).absolute().as_uri() + "?mode=rw",
                uri=True,
                timeout=0,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the SQLite database {db.path!r}: {exc}") from None
        try:
            with db.translate("read"):
                db.retry_busy(lambda: conn.execute("BEGIN DEFERRED"))
                cursor = db.retry_busy(lambda: conn.execute(query, args))
                while rows := db.retry_busy(lambda: cursor.fetchmany(page)):
                    yield [tuple(r) for r in rows]
        finally:
            conn.close()  # ends the read transaction, whether read to the end or not

    def close(self) -> None:
        self._db.close()


class _PgTx(Tx):
    """A PostgreSQL transaction on an autocommit connection: ``BEGIN`` goes out with the
    first statement, the deferred writes with ``COMMIT``, each batch in one pipeline."""

    def __init__(self, conn: Any) -> None:
        super().__init__(None)
        self._conn = conn
        self.begun = False
        self.deferred: list[tuple[str, tuple[Any, ...]]] = []

    def _send(self, sql: str, args: tuple[Any, ...]) -> Any:
        cur = self._conn.cursor()
        if self.begun:
            cur.execute(sql, args)
            return cur
        with self._conn.pipeline():
            cur.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
            cur.execute(sql, args)
        self.begun = True
        return cur

    def run(self, sql: str, args: tuple[Any, ...]) -> None:
        self._send(sql, args)

    def one(self, sql: str, args: tuple[Any, ...]) -> Any:
        row = self._send(sql, args).fetchone()
        return None if row is None else tuple(row)

    def all(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self._send(sql, args).fetchall()]

    def defer(self, sql: str, args: tuple[Any, ...]) -> None:
        self.deferred.append((sql, args))

    def commit(self) -> None:
        if not self.begun and not self.deferred:
            return
        with self._conn.pipeline(), self._conn.cursor() as cur:
            if not self.begun:
                cur.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
            for sql, args in self.deferred:
                cur.execute(sql, args)
            cur.execute("COMMIT")


class Postgres(Driver):
    marker = "%s"
    serial = "BIGSERIAL PRIMARY KEY"
    lock_clause = " FOR UPDATE"
    transaction_id_column = f", {TRANSACTION_ID}"
    one_statement = True

    def __init__(self, url: str, create: bool = True, pool_size: int = 4) -> None:
        from psycopg_pool import ConnectionPool

        from claimfsm.store._pg import open_pool, pool_options, probe, redacted, split_url

        self._url = redacted(url)
        self._libpq, self.schema, prepared = split_url(url)
        probe(self._libpq, self._url)
        # Each transaction takes a connection of its own: threads share one store.
        self._pool = ConnectionPool(
            self._libpq,
            open=False,
            **pool_options(
                url=self._libpq,
                prepared=prepared,
                pool_size=pool_size,
                name=f"claimfsm-lc-{self.schema}",
            ),
        )
        open_pool(self._pool, self._url, 15)
        if create:
            try:
                self.run_all([f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"'])
            except BaseException:
                self._pool.close()
                raise

    def qualify(self, table: str) -> str:
        return f'"{self.schema}".{table}'

    @contextmanager
    def transaction(self, durable: bool = False) -> Iterator[Tx]:
        import psycopg
        from psycopg_pool import PoolTimeout

        from claimfsm.store._pg import first_line, judged, settled, transaction_id

        lost: LostCommit | None = None
        try:
            with self._pool.connection() as conn:
                try:
                    with judged(conn) as attempt:
                        tx = _PgTx(conn)
                        yield tx
                        if tx.begun and tx.deferred:  # a write: its id settles a lost commit
                            attempt.xid = tx.transaction_id or transaction_id(conn)
                        attempt.committing = True
                        tx.commit()
                except LostCommit as exc:
                    lost = exc
                except psycopg.Error as exc:
                    raise StoreError(
                        f"PostgreSQL: {first_line(exc)}; nothing was written"
                    ) from None
        except PoolTimeout:
            raise StoreError(
                f"PostgreSQL at {self._url}: no connection of the store's pool came free"
                f" within {self._pool.timeout:g} s (pool_size={self._pool.max_size}); nothing"
                " was written: give the store a larger pool, or fewer threads"
            ) from None
        if lost is None:
            return
        # Settled on a new connection, the broken one given back (a pool of one has no other).
        happened = None
        if attempt.xid is not None:
            try:
                happened = settled(self._pool.connection, attempt.xid)
            except psycopg.Error:
                happened = None  # the caller reads history instead
        if happened is False:
            raise Retry() from lost.__cause__
        if happened is None:
            raise lost  # unknown: the caller finds out from history
        # it committed: the transaction did what it did

    def stream(
        self, query: str, args: tuple[Any, ...], page: int
    ) -> Iterator[list[tuple[Any, ...]]]:
        """A connection of the pool, held until the last page is read or the iterator is
        closed, in one ``REPEATABLE READ, READ ONLY`` transaction, read through a
        server-side cursor a page at a time (a store of ``pool_size=1`` has no other
        connection to write with meanwhile)."""
        import psycopg
        from psycopg_pool import PoolTimeout

        from claimfsm.store._pg import first_line

        try:
            with self._pool.connection() as conn, conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                with conn.cursor(name="claimfsm_stream") as cursor:
                    cursor.execute(query, args)
                    while rows := cursor.fetchmany(page):
                        yield [tuple(r) for r in rows]
        except PoolTimeout:
            raise StoreError(
                f"PostgreSQL at {self._url}: no connection of the store's pool came free"
                f" within {self._pool.timeout:g} s (pool_size={self._pool.max_size}) to read"
            ) from None
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL: {first_line(exc)}; the read stopped") from None

    def server_now(self, tx: Tx) -> float:
        found = tx.one(f"SELECT {SERVER_NOW}", ())
        return float(found[0])

    def append_only(self, history: str, permit: str, name: str) -> list[str]:
        function = self.qualify(f"{name}_append_only")
        trigger = f"{name}_no_change"
        return [
            f"CREATE TABLE IF NOT EXISTS {permit} (upto BIGINT NOT NULL)",
            # Made once: a store that opens on an existing schema only looks the trigger up
            # (CREATE TRIGGER locks the table against writers, and rewrites the catalog).
            "DO $do$ BEGIN"  # noqa: S608
            f" IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = '{trigger}'"
            f" AND tgrelid = '{history}'::regclass) THEN"
            # stores opening at once: one at a time makes it
            f" PERFORM pg_advisory_xact_lock(hashtext('{self.schema}.{name}'));"
            f" CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS"
            f" $fn$ BEGIN IF TG_OP = 'DELETE' AND EXISTS (SELECT 1 FROM {permit}"
            " WHERE OLD.seq <= upto) THEN RETURN OLD; END IF; RAISE EXCEPTION"
            " 'history is append-only (prune_history removes old entries)'; END $fn$;"
            f" CREATE OR REPLACE TRIGGER {trigger} BEFORE UPDATE OR DELETE ON {history}"
            f" FOR EACH ROW EXECUTE FUNCTION {function}();"
            " END IF; END $do$",
        ]

    def drop_function(self, name: str) -> list[str]:
        return [f"DROP FUNCTION IF EXISTS {self.qualify(name)}()"]

    def index(self, name: str, table: str, columns: str) -> str:
        # Made once: CREATE INDEX takes a lock that waits for, and then blocks, every
        # writer of the table even where the index exists (IF NOT EXISTS is judged after
        # the lock), so a store that opens while others write only looks it up.
        return (
            "DO $do$ BEGIN"
            f" IF to_regclass('{self.qualify(name)}') IS NULL THEN"
            # stores opening at once: one at a time makes it
            f" PERFORM pg_advisory_xact_lock(hashtext('{self.schema}.{name}'));"
            f" CREATE INDEX IF NOT EXISTS {name} ON {table} ({columns});"
            " END IF; END $do$"
        )

    minus_infinity = "'-Infinity'::float8"
    add_column = "ADD COLUMN IF NOT EXISTS"  # stores opening at once: one adds it
    # the catalog itself: information_schema's views take milliseconds
    columns_sql = (
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s)"
        " AND attnum > 0 AND NOT attisdropped"
    )

    def has_table(self, table: str) -> bool:
        found = self.rerun(lambda tx: tx.one("SELECT to_regclass(%s)", (self.qualify(table),)))
        return found is not None and found[0] is not None

    def recorded(self, sql: str, args: tuple[Any, ...]) -> bool:
        try:
            return super().recorded(sql, args)
        except (Retry, LostCommit) as exc:
            raise StoreError(
                f"PostgreSQL at {self._url}: cannot read history back ({exc.__cause__})"
            ) from exc

    def close(self) -> None:
        self._pool.close()
