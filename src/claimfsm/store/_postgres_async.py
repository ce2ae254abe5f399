"""The PostgreSQL store on psycopg's asyncio connection and pool, with the same core.

:class:`AsyncPostgresCore` *is* :class:`PostgresStore`: the same statements, transactions,
retries and settling of lost connections. Only its connection pool differs: psycopg's
``AsyncConnectionPool``, seen through thin adapters whose every call that would block
instead ``wait``-s for the async call through the greenlet runner (``_bridge``). Run its
methods only through that runner (the asyncio face, ``AsyncStore``, does).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from claimfsm.store._bridge import GreenletRunner
from claimfsm.store._pg import probe
from claimfsm.store._postgres import PostgresStore

try:
    import psycopg
    from psycopg_pool import AsyncConnectionPool
except ImportError:  # pragma: no cover - exercised only without the extra
    AsyncConnectionPool = None  # type: ignore[assignment,misc]


class _Cursor:
    """An ``AsyncCursor`` with the blocking cursor's methods the store calls."""

    def __init__(self, cursor: Any, runner: GreenletRunner) -> None:
        self._cursor = cursor
        self._wait = runner.wait

    @property
    def rowcount(self) -> int:
        return int(self._cursor.rowcount)

    def nextset(self) -> bool:
        return bool(self._cursor.nextset())

    def fetchone(self) -> Any:
        return self._wait(self._cursor.fetchone())

    def fetchall(self) -> list[Any]:
        return self._wait(self._cursor.fetchall())

    def execute(self, query: Any, params: Any = None) -> _Cursor:
        self._wait(self._cursor.execute(query, params))
        return self

    def executemany(self, query: Any, params_seq: Sequence[Any]) -> None:
        self._wait(self._cursor.executemany(query, params_seq))


class _Connection:
    """An ``AsyncConnection`` with the blocking connection's methods the store calls."""

    def __init__(self, conn: Any, runner: GreenletRunner) -> None:
        self._conn = conn
        self._runner = runner
        self._wait = runner.wait

    @property
    def info(self) -> Any:
        return self._conn.info

    @property
    def closed(self) -> bool:
        return bool(self._conn.closed)

    def close(self) -> None:
        self._wait(self._conn.close())

    def execute(self, query: Any, params: Any = None) -> _Cursor:
        return _Cursor(self._wait(self._conn.execute(query, params)), self._runner)

    @contextmanager
    def cursor(self) -> Iterator[_Cursor]:
        with _entered(self._conn.cursor(), self._wait) as cur:
            yield _Cursor(cur, self._runner)

    @contextmanager
    def pipeline(self) -> Iterator[None]:
        with _entered(self._conn.pipeline(), self._wait):
            yield

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with _entered(self._conn.transaction(), self._wait):
            yield


class _Pool:
    """An ``AsyncConnectionPool`` with the blocking pool's methods the store calls."""

    def __init__(self, pool: Any, runner: GreenletRunner) -> None:
        self._pool = pool
        self._runner = runner
        self._wait = runner.wait

    @property
    def max_size(self) -> int:
        return int(self._pool.max_size)

    def open(self, wait: bool = False, timeout: float = 30.0) -> None:
        self._wait(self._pool.open(wait=wait, timeout=timeout))

    def close(self) -> None:
        self._wait(self._pool.close())

    @contextmanager
    def connection(self) -> Iterator[_Connection]:
        with _entered(self._pool.connection(), self._wait) as conn:
            yield _Connection(conn, self._runner)


@contextmanager
def _entered(manager: Any, wait: Any) -> Iterator[Any]:
    """An async context manager entered and exited through ``wait``."""
    value = wait(manager.__aenter__())
    try:
        yield value
    except BaseException as exc:
        if not wait(manager.__aexit__(type(exc), exc, exc.__traceback__)):
            raise
    else:
        wait(manager.__aexit__(None, None, None))


class AsyncPostgresCore(PostgresStore):
    """``PostgresStore`` over psycopg's async pool; construct and call it through
    ``runner.run`` (``AsyncStore.open`` does)."""

    def __init__(self, url: str, *, runner: GreenletRunner, **options: Any) -> None:
        self._runner = runner
        super().__init__(url, **options)

    def _probe(self, shown: str) -> None:
        def connect(url: str, seconds: int) -> None:
            conn = self._runner.wait(psycopg.AsyncConnection.connect(url, connect_timeout=seconds))
            self._runner.wait(conn.close())

        probe(self.url, shown, self._connect_seconds, connect)

    def _make_pool(self, **options: Any) -> Any:
        pool = AsyncConnectionPool(self.url, open=False, **options)
        return _Pool(pool, self._runner)

    def _sleep(self, seconds: float) -> None:
        self._runner.wait(asyncio.sleep(seconds))
