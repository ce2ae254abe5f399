"""Read-only streams of a store's history and claim rows, both in target order, from one
consistent snapshot. Nothing here writes: a SQLite file is opened ``mode=ro``; a
PostgreSQL connection runs one ``REPEATABLE READ READ ONLY`` transaction with server-side
cursors, so a 10 M-row history streams in batches instead of being loaded."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from claimfsm.audit import _drafts as drafts_read
from claimfsm.audit._rules import COLUMNS
from claimfsm.errors import InvalidArgument, NotFound, SchemaVersionError, StoreError
from claimfsm.store import _entity_history as entries
from claimfsm.store._entity_drivers import Driver, Postgres, SQLite
from claimfsm.store._sqlite import APPLICATION_ID
from claimfsm.store._tokens import FINGERPRINT_LENGTH

#: Schema versions whose history and claims tables the auditor reads.
READABLE_VERSIONS = (1, 2, 3)
#: The history columns version 3 added (a discard's event and what the rule named): an
#: older history reads as NULL there, as a discard recorded before them does.
_SINCE_3 = ("attempted", "refused")
BATCH = 10_000
#: The claim row's fields in ``_rules.ROW_FIELDS`` order, the token as its fingerprint.
_CLAIM = (
    f"target_id, epoch, state, owner, substr(token_hash, 1, {FINGERPRINT_LENGTH}),"
    " draft_id, draft_version, draft_digest, idempotency_key, lease_deadline, outcome"
)

Streams = tuple[Iterable[tuple[Any, ...]], Iterable[tuple[Any, ...]]]


@contextmanager
def streams(url: str) -> Iterator[Streams]:
    """(history entries ordered by target then seq, claim rows ordered by target)."""
    with _snapshot(url) as (conn, path, schema):
        if path is not None:
            yield _sqlite_claims(conn, path)
        else:
            yield _postgres_claims(conn, schema)


@contextmanager
def entity_streams(
    url: str,
    table: str,
    history_columns: tuple[str, ...],
    row_columns: str,
    unrecorded: frozenset[str] = frozenset(),
    row_extras: tuple[str, ...] = (),
    orphans: list[tuple[str, int]] | None = None,
) -> Iterator[Streams]:
    """A lifecycle store's (history entries ordered by key then seq, rows ordered by key),
    from its tables ``table`` and ``table_history`` (names the store checked);
    ``NotFound`` when they do not exist. A column of ``unrecorded`` that an older history
    table lacks reads as what marks it not recorded (``entries.unrecorded``: the store adds
    it so when opened). ``row_extras``: row columns read after ``row_columns``; one an older
    row table lacks reads as NULL (the store adds it when opened: a request key). With
    ``orphans`` (a declaration with linked drafts), each row ends with its entity's drafts
    from ``table_drafts`` (``_drafts.with_drafts``), and a draft whose key has no row is
    added to ``orphans``."""
    with _snapshot(url) as (conn, path, schema):
        if path is not None:
            if not _exists(conn, path, table, schema):
                raise NotFound(
                    f"no table {table} in {str(path)!r}: check the URL and the declaration"
                )
            driver: type[Driver] = SQLite
            qualified, order, draft_order = table, "key", "target_id"
        else:
            if not _exists(conn, path, table, schema):
                raise NotFound(
                    f"no table {table} in schema {schema!r}: check the URL (?schema=name) and"
                    " the declaration"
                )
            driver = Postgres
            qualified, order = f'"{schema}".{table}', _c_order(conn, "key")
            draft_order = _c_order(conn, "target_id")
        # the store's own catalog query and literal: the reader keeps no copy of them
        found = conn.execute(driver.columns_sql, (f"{qualified}_history",)).fetchall()
        present = {r[0] for r in found}
        if row_extras:
            have = {r[0] for r in conn.execute(driver.columns_sql, (qualified,)).fetchall()}
            row_columns = ", ".join(
                [row_columns, *(c if c in have else f"NULL AS {c}" for c in row_extras)]
            )
        selected = ", ".join(
            f"{entries.unrecorded(c, driver.minus_infinity)} AS {c}"
            if c in unrecorded and c not in present
            else c
            for c in history_columns
        )
        queries = [
            f"SELECT {selected} FROM {qualified}_history ORDER BY {order}, seq",  # noqa: S608
            f"SELECT {row_columns} FROM {qualified} ORDER BY {order}",  # noqa: S608
        ]
        if orphans is not None and _exists(conn, path, f"{table}_drafts", schema):
            queries.append(
                f"SELECT {drafts_read.SELECT} FROM {qualified}_drafts"  # noqa: S608
                f" ORDER BY {draft_order}, draft_id"
            )
        streamed: list[Iterable[tuple[Any, ...]]] = []
        if path is not None:
            conn.execute("BEGIN")  # one snapshot for every stream
            streamed = [_batched(conn.execute(query)) for query in queries]
        else:
            names = ("claimfsm_audit_history", "claimfsm_audit_rows", "claimfsm_audit_drafts")
            for name, query in zip(names, queries, strict=False):
                cur = conn.cursor(name=name)  # server-side: streamed in batches
                cur.itersize = BATCH
                cur.execute(query)
                streamed.append(cur)
        history, rows = streamed[0], streamed[1]
        if orphans is not None:  # (no drafts table: none made yet, as history says)
            rows = drafts_read.with_drafts(rows, streamed[2] if streamed[2:] else (), orphans)
        yield history, rows


def _exists(conn: Any, path: Path | None, table: str, schema: str) -> bool:
    """Whether ``table`` is in the SQLite file (``path``) or in ``schema``."""
    if path is not None:
        query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
        return conn.execute(query, (table,)).fetchone() is not None
    found = conn.execute("SELECT to_regclass(%s)", (f"{schema}.{table}",)).fetchone()
    return found is not None and found[0] is not None


@contextmanager
def _snapshot(url: str) -> Iterator[tuple[Any, Path | None, str]]:
    """A read-only connection with one snapshot: (connection, the SQLite file or None,
    the PostgreSQL schema). Nothing here writes: a SQLite file is opened ``mode=ro``; a
    PostgreSQL connection runs one ``REPEATABLE READ READ ONLY`` transaction."""
    if not isinstance(url, str):
        raise InvalidArgument(f"url must be a str, not {type(url).__name__}")
    if url.startswith("sqlite:///") and len(url) > len("sqlite:///"):
        path = Path(url[len("sqlite:///") :])
        if not path.is_file():
            raise NotFound(f"no database at {str(path)!r}; check the path")
        try:
            conn = sqlite3.connect(
                f"file:{quote(str(path.resolve()))}?mode=ro", uri=True, isolation_level=None
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {str(path)!r} read-only: {exc}") from exc
        try:
            yield conn, path, ""
        except sqlite3.Error as exc:
            raise StoreError(f"reading {str(path)!r} failed: {exc}") from exc
        finally:
            conn.close()
    elif url.startswith(("postgresql://", "postgres://")):
        try:
            import psycopg
        except ImportError:  # pragma: no cover - exercised only without the extra
            raise StoreError(
                "PostgreSQL support needs the 'postgres' extra: pip install 'claimfsm[postgres]'"
            ) from None
        from claimfsm.store._pg import CONNECT_SECONDS, first_line, redacted, split_url

        plain, schema, _ = split_url(url)
        try:
            pg = psycopg.connect(plain, connect_timeout=CONNECT_SECONDS)
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot connect to PostgreSQL at {redacted(plain)}: {first_line(exc)}"
            ) from None
        try:
            pg.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            pg.read_only = True
            yield pg, None, schema
        except psycopg.Error as exc:
            raise StoreError(f"reading the PostgreSQL history failed: {exc}") from exc
        finally:
            pg.close()  # the read-only transaction ends with it
    else:
        raise InvalidArgument(
            f"audit reads sqlite:///path.db or postgresql://user@host/db?schema=name, not {url!r}"
        )


def _sqlite_claims(conn: sqlite3.Connection, path: Path) -> Streams:
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{str(path)!r} is not a SQLite database: {exc}") from exc
    if app_id != APPLICATION_ID:
        raise StoreError(f"{str(path)!r} is not a claimfsm database")
    if version not in READABLE_VERSIONS:
        raise SchemaVersionError(
            f"{str(path)!r} has claimfsm schema version {version}; this audit reads "
            f"versions {list(READABLE_VERSIONS)}"
        )
    conn.execute("BEGIN")  # one snapshot for both streams
    selected = ", ".join(f"NULL AS {c}" if version < 3 and c in _SINCE_3 else c for c in COLUMNS)
    history = conn.execute(
        f"SELECT {selected} FROM history ORDER BY target_id, seq"  # noqa: S608
    )
    claims = conn.execute(f"SELECT {_CLAIM} FROM claims ORDER BY target_id")  # noqa: S608
    return _batched(history), _batched(claims)


def _batched(cur: Any) -> Iterator[tuple[Any, ...]]:
    while rows := cur.fetchmany(BATCH):
        yield from rows


def _c_order(conn: Any, column: str) -> str:
    """``column``, ordered as Python compares strings (by code point, as the "C" collation
    does). The database's index is in its collation: used when that is byte order."""
    collate = conn.execute(
        "SELECT datcollate FROM pg_database WHERE datname = current_database()"
    ).fetchone()
    c_like = collate is not None and (
        collate[0] in ("C", "POSIX") or str(collate[0]).startswith("C.")
    )
    return column if c_like else f'{column} COLLATE "C"'


def _postgres_claims(conn: Any, schema: str) -> Streams:
    from psycopg import sql

    s = sql.Identifier(schema)
    found = conn.execute("SELECT to_regclass(%s)", (f"{schema}.meta",)).fetchone()
    if found is None or found[0] is None:
        raise NotFound(f"no claimfsm schema {schema!r} in that database; name it with ?schema=name")
    row = conn.execute(
        sql.SQL("SELECT value FROM {}.meta WHERE key = 'schema_version'").format(s)
    ).fetchone()
    version = int(row[0]) if row else 0
    if version not in READABLE_VERSIONS:
        raise SchemaVersionError(
            f"schema {schema!r} has claimfsm schema version {version}; this audit reads "
            f"versions {list(READABLE_VERSIONS)}"
        )
    order = sql.SQL(_c_order(conn, "target_id"))
    history = conn.cursor(name="claimfsm_audit_history")
    history.itersize = BATCH
    history.execute(
        sql.SQL("SELECT {} FROM {}.history ORDER BY {}, seq").format(
            sql.SQL(", ").join(
                sql.SQL("NULL AS {}").format(sql.Identifier(c))
                if version < 3 and c in _SINCE_3
                else sql.Identifier(c)
                for c in COLUMNS
            ),
            s,
            order,
        )
    )
    claims = conn.cursor(name="claimfsm_audit_claims")
    claims.itersize = BATCH
    claims.execute(
        sql.SQL("SELECT {} FROM {}.claims ORDER BY {}").format(sql.SQL(_CLAIM), s, order)
    )
    return history, claims
