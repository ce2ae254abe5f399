"""PostgreSQL connections, as both stores (the claim's and a declared lifecycle's) use them.

One place for what the two stores must agree on:

- **The URL.** ``postgresql://...?schema=name&prepared_statements=off``: claimfsm's own
  options are split off (:func:`split_url`), and a URL is shown with its password hidden
  (:func:`redacted`).
- **Opening.** One plain connection first (:func:`probe`), so a wrong URL, database or
  password is reported at once with the server's reason; a pool that cannot connect would
  only retry, quietly, until its timeout. Then the pool, of autocommit connections that
  prepare nothing on the server when the URL says ``prepared_statements=off``, and notice
  a dead or cut-off server host within half a minute where the URL does not set libpq's
  TCP settings itself (:data:`DEAD_HOST_SETTINGS`; :func:`pool_options`,
  :func:`open_pool`).
- **What a failed transaction means** (:func:`judged`). A deadlock, a serialization
  failure, or a connection lost before ``COMMIT`` was sent: the server rolled the
  transaction back, so running it again is safe (:class:`Retry`). A connection lost while
  ``COMMIT`` was in flight: it may or may not have happened (:class:`LostCommit`). Either
  way the connection is rolled back where it can be and closed when broken, so the pool
  opens a fresh one.
- **Settling a lost commit** (:func:`transaction_id`, :func:`settled`). The old backend
  may still be committing when the client learns that the connection broke, so reading
  history at once can miss a commit that lands a moment later. A transaction that has
  written reads its id just before ``COMMIT``; after a lost commit the store asks the
  server for that transaction's fate (``pg_xact_status``) on a new connection, waiting
  while it is still in progress, and only then decides. Without an id (nothing written
  yet) or when the server cannot tell, the store reads its history as before. A
  transaction whose backend still waits for its client after the client gave it up never
  received its ``COMMIT``: the store ends that backend (:func:`end_abandoned`), which
  frees its row locks, and the server's answer becomes final.
- **Running it again** (:func:`rerun`). One loop for every transaction either store runs
  again: a bounded number of attempts, a short random wait that doubles, and one error
  that says how often it was rolled back, why, and that nothing was written.
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from claimfsm.errors import InvalidArgument, StoreError

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg.pq import TransactionStatus
    from psycopg_pool import PoolTimeout
except ImportError:  # pragma: no cover - exercised only without the extra
    psycopg = None  # type: ignore[assignment]

#: seconds a single connection attempt may take
CONNECT_SECONDS = 10

#: libpq's TCP settings for every connection a store opens, unless its URL gives its own:
#: a server host that dies or is cut off mid-call is noticed in about half a minute, not
#: the hours the operating system's defaults take (a write whose ``COMMIT`` went out
#: then waits for an answer on a connection no one closes). ``tcp_user_timeout``: data
#: unacknowledged for 30 s breaks the connection; keepalives: a connection waiting for an
#: answer is probed after 10 s of silence, every 5 s, and broken after 3 probes go
#: unanswered. A live server's host answers both whatever its statements wait for, so a
#: long lock wait or a slow query is not cut short; Unix-domain sockets ignore them.
DEAD_HOST_SETTINGS = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "30000",
}

R = TypeVar("R")


class Retry(Exception):
    """The database rolled the transaction back for a reason running it again can fix."""


class LostCommit(Exception):
    """The connection broke while ``COMMIT`` was in flight: it may or may not have happened."""


def split_url(url: str) -> tuple[str, str, bool]:
    """``postgresql://...?schema=name&prepared_statements=off&...`` → (libpq URL without
    claimfsm's own options, schema name, whether to use server-side prepared statements)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = "claimfsm"
    prepared = True
    kept = []
    for key, value in query:
        if key == "schema":
            schema = value
        elif key == "prepared_statements":
            if value not in ("on", "off"):
                raise InvalidArgument(
                    f"prepared_statements must be on or off, got {value!r} (off behind a "
                    "transaction-pooling proxy such as PgBouncer)"
                )
            prepared = value == "on"
        else:
            kept.append((key, value))
    if not schema.isidentifier() or not schema.isascii() or len(schema) > 63:
        raise InvalidArgument(
            f"schema must be a plain identifier of at most 63 ASCII characters, got {schema!r}"
        )
    return urlunsplit(parts._replace(query=urlencode(kept))), schema.lower(), prepared


def redacted(url: str) -> str:
    """``url`` with its password, if it has one, shown as ``***``."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        parts = parts._replace(netloc=netloc)
    return urlunsplit(parts)


def first_line(exc: BaseException) -> str:
    """A driver error's first line: the server's reason, without its hints and context."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def probe(
    libpq_url: str,
    shown_url: str,
    seconds: float = CONNECT_SECONDS,
    connect: Callable[[str, int], None] | None = None,
) -> None:
    """Connect once, waiting at most about ``seconds``, and close (by ``connect``, the
    asyncio face's own): ``StoreError`` with the server's reason if that fails."""
    timeout = max(2, math.ceil(seconds))  # libpq's unit; it waits at least 2 s
    try:
        libpq_url.encode()
    except UnicodeEncodeError:
        raise InvalidArgument(
            "the PostgreSQL URL is not valid text (it holds bytes that are not UTF-8):"
            " give it again, percent-encoding what is not plain text"
        ) from None
    try:
        if connect is None:
            psycopg.connect(libpq_url, connect_timeout=timeout).close()
        else:
            connect(libpq_url, timeout)
    except psycopg.Error as exc:
        reason = first_line(exc)
        raise StoreError(f"cannot connect to PostgreSQL at {shown_url}: {reason}") from None


def pool_options(*, url: str, prepared: bool, pool_size: int, name: str) -> dict[str, Any]:
    """A store's pool of connections to the libpq ``url``: autocommit connections (each
    transaction says ``BEGIN`` itself); with ``prepared_statements=off``, nothing prepared
    on the server (a transaction pooler may run each transaction on another server
    connection; psycopg prepares a statement on its fifth use); and
    :data:`DEAD_HOST_SETTINGS`, each where the URL does not set it."""
    given = {key for key, _ in parse_qsl(urlsplit(url).query, keep_blank_values=True)}
    return {
        "min_size": 1,
        "max_size": pool_size,
        "kwargs": {
            "autocommit": True,
            "connect_timeout": CONNECT_SECONDS,
            "prepare_threshold": 5 if prepared else None,
            **{k: v for k, v in DEAD_HOST_SETTINGS.items() if k not in given},
        },
        "name": name,
    }


def open_pool(pool: Any, shown_url: str, seconds: float) -> None:
    """Open ``pool`` (its first connection made), or close it and raise ``StoreError``."""
    try:
        pool.open(wait=True, timeout=seconds)
    except PoolTimeout:
        pool.close()
        raise StoreError(
            f"cannot connect to PostgreSQL at {shown_url} within {seconds:g} s; is the server"
            " running and the URL right?"
        ) from None


class Attempt:
    """One transaction's progress, as :func:`judged` needs to know it."""

    committing = False  #: set just before ``COMMIT`` is sent
    #: the transaction's id (:func:`transaction_id`), read before ``COMMIT`` where it wrote
    xid: str | None = None


#: SQL for the id of the transaction it runs in (giving it one if it has none yet): a
#: column the stores append to a statement they send anyway, where they can.
TRANSACTION_ID = "pg_current_xact_id()::text"


def transaction_id(conn: Any) -> str | None:
    """The id of the transaction open on ``conn``, if it has one (it has written), read
    just before ``COMMIT`` in a round trip of its own, where no statement returned it
    (:data:`TRANSACTION_ID`): what :func:`settled` asks about if the answer is lost."""
    row = conn.execute("SELECT pg_current_xact_id_if_assigned()::text").fetchone()
    return None if row is None or row[0] is None else str(row[0])


#: How long :func:`settled` waits for a transaction still in progress (its backend may be
#: between receiving ``COMMIT`` and finishing it, or waiting for a lock or a replica).
SETTLE_SECONDS = 10.0


def settled(
    connection: Callable[[], Any],
    xid: str,
    *,
    seconds: float = SETTLE_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
) -> bool | None:
    """Whether transaction ``xid`` committed (True) or not (False), asked on a new
    connection (``connection()``, a context manager) and waited for while it is in
    progress, its backend ended if it waits for its client (``ClientRead``) for a
    ``COMMIT`` that will not come (:func:`end_abandoned`, asked on each poll until it ends
    one: a backend still between a pipeline's statements may come to wait there): None
    when it is still in progress after ``seconds`` or the server can no longer tell."""
    deadline = time.monotonic() + seconds
    wait = 0.002
    ended = False
    while True:
        with connection() as conn:
            row = conn.execute("SELECT pg_xact_status(%s::xid8)", (xid,)).fetchone()
            status = None if row is None else row[0]
            if status == "in progress" and not ended:
                ended = end_abandoned(conn, xid)
        if status == "committed":
            return True
        if status == "aborted":
            return False
        if status is None or time.monotonic() >= deadline:
            return None
        sleep(wait)
        wait = min(wait * 2, 0.1)


#: The backend running transaction %s (its 32-bit id), ended if it waits for its client.
_END_ABANDONED = (
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
    " WHERE backend_xid::text::bigint = %s AND wait_event = 'ClientRead'"
)


def end_abandoned(conn: Any, xid: str) -> bool:
    """End the backend of transaction ``xid`` if it waits for its client; whether one did.

    Waiting there (idle in the transaction, or between the statements of a pipeline), its
    ``COMMIT`` has not arrived, and the client (this store, which lost the connection and
    closed it) will send nothing more; a backend that has its ``COMMIT`` is left to finish
    it. A partition or a reset the server did not see leaves it so, holding its row
    locks, until the server's TCP keepalive notices, two hours by default; a rerun of the
    write would wait that long for them. Ending it decides nothing by itself: the caller
    goes on asking ``pg_xact_status``, which answers ``aborted``, or ``committed`` if a
    late ``COMMIT`` landed first. Where the store's role may not end it (another role's
    backend), the caller waits as before."""
    try:
        row = conn.execute(_END_ABANDONED, (int(xid) % 2**32,)).fetchone()
    except pg_errors.InsufficientPrivilege:
        return False
    return row is not None and bool(row[0])


@contextmanager
def judged(conn: Any) -> Iterator[Attempt]:
    """Run one transaction's body on ``conn``; set ``committing`` before sending ``COMMIT``.
    A failure leaves as :class:`Retry` (rolled back: safe to run again), :class:`LostCommit`
    (the outcome is unknown) or as itself, after the connection is rolled back."""
    attempt = Attempt()
    try:
        yield attempt
    except (pg_errors.SerializationFailure, pg_errors.DeadlockDetected) as exc:
        rollback(conn)
        raise Retry() from exc
    except psycopg.OperationalError as exc:
        rollback(conn)
        with contextlib.suppress(psycopg.Error):
            conn.close()  # broken or not: the pool drops it, and opens a fresh one
        if attempt.committing:
            raise LostCommit() from exc
        raise Retry() from exc  # rolled back by the server: safe to run again
    except BaseException:
        rollback(conn)
        raise


def rollback(conn: Any) -> None:
    """Roll back whatever ``conn`` has open; a broken connection is left to the pool."""
    status = conn.info.transaction_status
    if not conn.closed and status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        with contextlib.suppress(psycopg.Error):  # broken: the pool discards it
            conn.execute("ROLLBACK")


def rerun(
    attempt: Callable[[], R],
    *,
    retries: int,
    what: str,
    sleep: Callable[[float], None] = time.sleep,
) -> R:
    """``attempt()``, run again each time it raises :class:`Retry` (the database rolled
    it back), after a random wait of up to 2 ms, 4 ms, 8 ms ...; at most ``retries`` times
    again. Then :class:`StoreError` says that ``what`` was rolled back that often, the
    last reason, and that nothing was written. ``attempt`` must have no effect outside
    its transaction. ``sleep`` waits (the asyncio face waits on its own loop)."""
    if retries < 0:
        raise InvalidArgument(f"retries must be 0 or more, not {retries!r}")
    for n in range(retries + 1):
        try:
            return attempt()
        except Retry as exc:
            if n == retries:
                times = "once" if n == 0 else f"{n + 1} times"
                raise StoreError(
                    f"{what} was rolled back {times} ({exc.__cause__}); nothing was written"
                ) from exc.__cause__
            sleep(random.uniform(0, 0.002 * 2**n))
    raise AssertionError("unreachable")
