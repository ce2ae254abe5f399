"""One SQLite file's connection, as both SQLite stores use it: the claim protocol's
(``_sqlite.SQLiteStore``) and a lifecycle's (``_entity_drivers.SQLite``).

Durability and locking, in one place:

- WAL journal (set where the store creates the file; a store opened only to read or keep
  one leaves its file's mode). Readers never block the writer and vice versa.
- ``synchronous=NORMAL`` for ordinary commits, ``FULL`` for a commit the declaration
  calls ``durable`` (the claim's ``begin_send`` and ``retry``: an external call may follow
  at any moment). In WAL mode NORMAL survives a process crash but may lose the last
  commits on power loss; FULL syncs the WAL (everything before it too) before the commit
  returns.
- Every write transaction starts with ``BEGIN IMMEDIATE``: the write lock is taken first,
  so the guarded write and any diagnosis that follows it see one consistent database.
- Contention: SQLite's own busy handler sleeps in growing steps (up to 100 ms) and lets a
  busy process starve (``FIELD-NOTES``: some processes finished one cycle in 4 s while
  others finished thousands). The connection instead has no busy timeout of its own and
  retries ``BEGIN IMMEDIATE`` with short jittered sleeps for up to ``busy_seconds``, then
  raises ``StoreBusy`` naming the file. Callers never see "database is locked" for
  ordinary contention.
- A driver error inside a transaction rolls it back and is one ``StoreError`` naming the
  file and saying that nothing was written; the store's own errors pass through as they
  are, after the same rollback.

The one connection runs one transaction at a time, whichever thread asks (``lock``).
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from claimfsm.errors import ClaimFSMError, StoreBusy, StoreError

R = TypeVar("R")
A = TypeVar("A")

_BUSY_CODES = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}


def is_busy(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` is contention for the file's lock (worth waiting out)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _BUSY_CODES
    return "locked" in str(exc) or "busy" in str(exc)


class SQLiteFile:
    """A connection to one SQLite file (or ``:memory:``) and its write transactions."""

    def __init__(self, path: str, *, busy_seconds: float, wal: bool = True) -> None:
        self.path = path
        self.busy_seconds = busy_seconds
        self.lock = threading.RLock()
        try:
            self.conn = sqlite3.connect(
                path, timeout=0, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the SQLite database {path!r}: {exc}") from None
        try:
            with self.translate("open"):
                self.retry_busy(lambda: self._configure(wal))
        except BaseException:
            self.conn.close()
            raise

    def _configure(self, wal: bool) -> None:
        c = self.conn
        if wal:
            c.execute("PRAGMA journal_mode = WAL")
        c.execute("PRAGMA synchronous = NORMAL")
        c.execute("PRAGMA foreign_keys = ON")

    def write(self, body: Callable[[A], R], arg: A, *, durable: bool = False) -> R:
        """``body(arg)`` in one ``BEGIN IMMEDIATE`` transaction, FULL-synced when
        ``durable``: committed, or rolled back and its error raised.

        No context manager of its own: this is every claim write's path, and its own cost
        is what the store adds to SQLite's (BENCHMARKS.md)."""
        with self.lock:
            self._begin(durable)
            try:
                result = body(arg)
            except BaseException as exc:
                raise self._abort(durable, exc)  # noqa: B904
            self._commit(durable)
            return result

    @contextmanager
    def transaction(self, *, durable: bool = False) -> Iterator[sqlite3.Connection]:
        """:meth:`write` as a context: the connection, in a write transaction."""
        with self.lock:
            self._begin(durable)
            try:
                yield self.conn
            except BaseException as exc:
                raise self._abort(durable, exc)  # noqa: B904
            self._commit(durable)

    def _begin(self, durable: bool) -> None:
        try:
            if durable:
                self.conn.execute("PRAGMA synchronous = FULL")
            self.begin_immediate()
        except BaseException as exc:
            raise self._abort(durable, exc)  # noqa: B904

    def _commit(self, durable: bool) -> None:
        try:
            self.conn.execute("COMMIT")
        except BaseException as exc:
            raise self._abort(durable, exc)  # noqa: B904
        if durable:
            with self.translate("write"):
                self.conn.execute("PRAGMA synchronous = NORMAL")

    def _abort(self, durable: bool, exc: BaseException) -> BaseException:
        """Roll back what ``exc`` interrupted; what to raise: the store's own errors as
        they are, a driver's as one ``StoreError`` naming the file."""
        c = self.conn
        try:
            if c.in_transaction:
                c.execute("ROLLBACK")
            if durable:
                c.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as lost:  # the connection broke: the transaction is gone too
            exc = lost if not isinstance(exc, sqlite3.Error) else exc
        if isinstance(exc, sqlite3.Error):
            failed = StoreError(f"SQLite write failed on {self.path!r}: {exc}; nothing was written")
            failed.__cause__ = exc
            return failed
        return exc

    def begin_immediate(self) -> None:
        """``BEGIN IMMEDIATE``: at once when the write lock is free, else the bounded retry."""
        c = self.conn
        try:
            c.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
            self.retry_busy(lambda: c.execute("BEGIN IMMEDIATE"))

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """The connection in a read transaction (``BEGIN DEFERRED``): one consistent view."""
        with self.lock, self.translate("read"):
            c = self.conn
            self.retry_busy(lambda: c.execute("BEGIN DEFERRED"))
            try:
                yield c
            finally:
                if c.in_transaction:
                    c.execute("COMMIT")

    def retry_busy(self, fn: Callable[[], R]) -> R:
        """``fn()``, again after a short jittered sleep while the file is locked, for up to
        ``busy_seconds``; then ``StoreBusy``."""
        deadline = time.monotonic() + self.busy_seconds
        delay = 0.0002
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise StoreBusy(
                        f"{self.path!r} stayed locked for {self.busy_seconds:g} s; another "
                        "process holds a long write transaction"
                    ) from exc
                time.sleep(random.uniform(0, delay))
                delay = min(delay * 2, 0.005)

    @contextmanager
    def translate(self, what: str) -> Iterator[None]:
        """A driver error as one ``StoreError`` naming the file; the store's own pass."""
        try:
            yield
        except ClaimFSMError:
            raise
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite {what} failed on {self.path!r}: {exc}") from exc

    def close(self) -> None:
        with self.lock:
            self.conn.close()
