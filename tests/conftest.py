"""Fixtures shared by the suite.

``backend`` runs a test once per store backend: ``sqlite`` (a real file in tmp_path, each
``backend.open()`` a new connection), ``memory`` (the reference store run by the
``transitions`` machine) and ``postgresql`` (a fresh schema in a database made for this
test run) and ``pgbouncer`` (the same, through a PgBouncer in transaction pooling mode).
A test that uses it must hold on all four.

PostgreSQL is found through ``CLAIMFSM_PG_URL`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``). Without a server the PostgreSQL tests
are skipped with one reason; with ``CLAIMFSM_REQUIRE_PG=1`` (as in .ci/run) they fail.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from claimfsm.machine import ClaimMachine
from claimfsm.spec import Spec
from claimfsm.store import MemoryStore, SQLiteStore, Store

# SPIN's verifiers are compiled unoptimised in the suite: its worlds are small, so
# compiling is nearly all of SPIN's time, and -O0 compiles in half the time of the
# default -O1 (the benchmarks, run outside it, keep -O1).
os.environ.setdefault("CLAIMFSM_SPIN_OPT", "-O0")

from ._async_face import LoopThread, open_blocking


def needs_dot() -> None:
    """Skip (or, with CLAIMFSM_REQUIRE_GRAPHVIZ=1 as in .ci/run, fail) without Graphviz."""
    if shutil.which("dot") is None:
        if os.environ.get("CLAIMFSM_REQUIRE_GRAPHVIZ") == "1":
            pytest.fail("Graphviz's dot is required (CLAIMFSM_REQUIRE_GRAPHVIZ=1) but missing")
        pytest.skip("Graphviz's dot is not installed (Debian: apt-get install graphviz)")


def needs_spin() -> None:
    """Skip (or, with CLAIMFSM_REQUIRE_SPIN=1 as in .ci/run, fail) without SPIN and cc."""
    from claimfsm.checker import spin_available

    why = spin_available()
    if why is not None:
        if os.environ.get("CLAIMFSM_REQUIRE_SPIN") == "1":
            pytest.fail(f"SPIN is required (CLAIMFSM_REQUIRE_SPIN=1): {why}")
        pytest.skip(why)


PG_URL = os.environ.get("CLAIMFSM_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REQUIRE_PG = os.environ.get("CLAIMFSM_REQUIRE_PG") == "1"
REQUIRE_PGBOUNCER = os.environ.get("CLAIMFSM_REQUIRE_PGBOUNCER") == "1"


def _pg_reachable() -> str | None:
    """None if the PostgreSQL server answers, else why not."""
    try:
        import psycopg

        psycopg.connect(PG_URL, connect_timeout=3).close()
    except Exception as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


def chromium() -> str | None:
    """The Chromium executable, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def environment_lines() -> list[str]:
    """One line per optional component: what runs, or what is skipped and why."""
    why = _pg_reachable()
    if why is None:
        pg = f"claimfsm: PostgreSQL tests run against {PG_URL}"
    elif REQUIRE_PG:
        pg = f"claimfsm: PostgreSQL REQUIRED but not reachable at {PG_URL}: {why}"
    else:
        pg = (
            f"claimfsm: PostgreSQL tests SKIPPED: not reachable at {PG_URL} ({why}); "
            "start a server or set CLAIMFSM_PG_URL"
        )
    gv = (
        "claimfsm: diagram images rendered with Graphviz"
        if shutil.which("dot")
        else "claimfsm: tests that render diagram images SKIPPED: Graphviz's dot is not "
        "installed (Debian: apt-get install graphviz)"
    )
    ch = (
        "claimfsm: the report's browser test runs in Chromium"
        if chromium()
        else "claimfsm: the report's browser test SKIPPED: Chromium is not installed "
        "(Debian: apt-get install chromium)"
    )
    from claimfsm.checker import spin_available

    sp = (
        "claimfsm: --engine spin tests run SPIN"
        if spin_available() is None
        else f"claimfsm: --engine spin tests SKIPPED: {spin_available()}"
    )
    from . import _pgbouncer

    why_not = _pgbouncer.available()
    pb = (
        "claimfsm: PostgreSQL store tests run through PgBouncer (transaction pooling) too"
        if why_not is None and why is None
        else f"claimfsm: PgBouncer store tests SKIPPED: {why_not or 'no PostgreSQL server'}"
    )
    return [pg, pb, gv, ch, sp]


#: Paths that a test run may create or change: caches, never the project's files.
_CACHES = {".venv", "__pycache__", ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache"}


def _tree_state() -> list[str] | None:
    """``git status`` of the checkout (ignored files included, caches left out), or None
    outside a git checkout."""
    import subprocess

    root = Path(__file__).parent.parent
    try:
        out = subprocess.run(
            ["git", "status", "--porcelain", "--ignored"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return sorted(
        line
        for line in out.stdout.splitlines()
        if not _CACHES & set(Path(line[3:].strip('"')).parts)
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    # Written at once, so that `pytest -q` (which hides the report header) shows them too.
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and not hasattr(session.config, "workerinput"):
        for line in environment_lines():
            reporter.write_line(line)
    session.config.stash[_TREE] = _tree_state()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The suite leaves the working tree as it found it: a test that writes into the
    checkout fails the run, naming what it left."""
    before = session.config.stash.get(_TREE, None)
    if before is None:
        return
    after = _tree_state()
    if after is not None and after != before:
        changed = sorted(set(after) ^ set(before))
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                "claimfsm: FAILED: the test run changed the working tree: " + "; ".join(changed),
                red=True,
            )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_TREE = pytest.StashKey[list[str] | None]()


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A database made for this test run (dropped at the end); its URL."""
    try:
        import psycopg
        import psycopg.sql

        admin = psycopg.connect(PG_URL, autocommit=True, connect_timeout=3)
    except Exception as exc:  # no driver or no server
        if REQUIRE_PG:
            pytest.fail(f"PostgreSQL is required (CLAIMFSM_REQUIRE_PG=1) but {exc}")
        pytest.skip(f"PostgreSQL not reachable at {PG_URL}: set CLAIMFSM_PG_URL to run these")
    name = f"claimfsm_test_{os.getpid()}_{secrets.token_hex(3)}"
    with admin:
        admin.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    try:
        yield _with_database(PG_URL, name)
    finally:
        # A new connection: the campaign test restarts the server meanwhile.
        with psycopg.connect(PG_URL, autocommit=True, connect_timeout=10) as admin:
            admin.execute(
                psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    psycopg.sql.Identifier(name)
                )
            )


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store's URL on each backend: a SQLite file in ``tmp_path``, and a fresh schema of
    the test database on PostgreSQL (dropped afterwards)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.sqlite'}"
        return
    database = request.getfixturevalue("pg_database")
    schema, found = pg_schema_url(database)
    try:
        yield found
    finally:
        drop_schema(database, schema)


#: For a heavy test of the ``url`` fixture: SQLite in the quick suite, PostgreSQL in the
#: slow one (CI runs both). The PostgreSQL store's own SQL is covered by the quick suite's
#: lighter tests; what such a test adds is its long program, which the backends share.
sqlite_quick_postgresql_slow = pytest.mark.parametrize(
    "url", ["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)], indirect=True
)


def pg_schema_url(database_url: str) -> tuple[str, str]:
    """A new schema name in the test database, and the store URL that uses it."""
    schema = f"t_{secrets.token_hex(6)}"
    return schema, f"{database_url}{'&' if '?' in database_url else '?'}schema={schema}"


def drop_schema(database_url: str, schema: str) -> None:
    import psycopg
    import psycopg.sql

    from claimfsm.store._postgres import split_url

    plain = split_url(database_url)[0]  # without the store's own options
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(
            psycopg.sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                psycopg.sql.Identifier(schema)
            )
        )


class FakeClock:
    """A store clock that moves only when a test says so."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Backend:
    name: str
    clock: FakeClock
    path: Path | None = None
    pg_database: str | None = None
    via: str | None = None  # pgbouncer: the test database's URL through PgBouncer
    opened: list[Store] = field(default_factory=list)
    _memory: MemoryStore | None = None
    _schema: tuple[str, str] | None = None
    _loop: LoopThread | None = None  # the async face's event loop (its own thread)
    spec: Spec | None = None  # the declaration the stores run (None: claim.toml)

    def open(self) -> Store:
        """Another handle on the same database (a new connection or pool)."""
        machine = None if self.spec is None else ClaimMachine(self.spec)
        if self.name == "memory":
            if self._memory is None:
                self._memory = MemoryStore(clock=self.clock, machine=machine)
            return self._memory
        store: Store
        if self.name.endswith("-async"):  # the asyncio face, driven through the sync API
            if self._loop is None:
                self._loop = LoopThread()
            if self.name == "postgresql-async":
                assert self.pg_database is not None
                if self._schema is None:
                    self._schema = pg_schema_url(self.pg_database)
                url = self._schema[1]
            else:
                url = f"sqlite:///{self.path}"
            store = open_blocking(url, self._loop, clock=self.clock, pool_size=2, spec=self.spec)
        elif self.name in ("postgresql", "pgbouncer"):
            from claimfsm.store._postgres import PostgresStore

            assert self.pg_database is not None
            if self._schema is None:
                self._schema = pg_schema_url(self.via or self.pg_database)
            store = PostgresStore(self._schema[1], clock=self.clock, pool_size=2, machine=machine)
        else:
            assert self.path is not None
            store = SQLiteStore(self.path, clock=self.clock, machine=machine)
        self.opened.append(store)
        return store

    def close(self) -> None:
        for s in self.opened:
            s.close()
        if self._loop is not None:
            self._loop.stop()
        if self._schema is not None and self.pg_database is not None:
            drop_schema(self.pg_database, self._schema[0])


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="session")
def pgbouncer(pg_database: str) -> Iterator[str]:
    """The test database's URL through a PgBouncer in transaction pooling mode."""
    from . import _pgbouncer

    why = _pgbouncer.available()
    if why is not None:
        if REQUIRE_PGBOUNCER:
            pytest.fail(f"PgBouncer is required (CLAIMFSM_REQUIRE_PGBOUNCER=1) but {why}")
        pytest.skip(why)
    bouncer = _pgbouncer.start(PG_URL)
    try:
        yield bouncer.url(pg_database)
    finally:
        bouncer.stop()


@pytest.fixture(
    params=["sqlite", "memory", "postgresql", "pgbouncer", "sqlite-async", "postgresql-async"]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Backend]:
    if request.param in ("postgresql", "pgbouncer", "postgresql-async"):
        b = Backend(request.param, clock, pg_database=request.getfixturevalue("pg_database"))
        if request.param == "pgbouncer":
            b.via = request.getfixturevalue("pgbouncer")
    else:
        b = Backend(request.param, clock, tmp_path / "claims.sqlite")
    yield b
    b.close()


@pytest.fixture
def store(backend: Backend) -> Store:
    return backend.open()


class CountedOpener:
    """An opener of stores that counts what it opened and which of those were closed."""

    def __init__(self, open_store: Callable[[Any], Any]) -> None:
        self._open = open_store
        self.opened: list[Any] = []
        self.closed: list[Any] = []

    def __call__(self, clock: Any) -> Any:
        store = self._open(clock)
        real = store.close

        def close() -> None:
            self.closed.append(store)
            real()

        store.close = close
        self.opened.append(store)
        return store

    def all_closed(self) -> bool:
        return sorted(map(id, self.closed)) == sorted(map(id, self.opened))


def approved_draft(store: Store, target: str = "acct", content: str = "hello") -> int:
    draft = store.create_draft(target, content)
    store.approve_draft(draft.draft_id)
    return draft.draft_id


def forge_history(
    store: Any, key: str, epoch: int, event: str, source: str, dest: str, **kw: Any
) -> None:
    """A history entry written past a lifecycle's store, as a bug or a hand edit would
    (history takes inserts; its triggers refuse only updates and deletes). ``kw``: ``at``,
    ``refused``, ``fp`` (the token fingerprint), ``lease``, ``facts``, ``owner`` and ``rk``
    (the request key; None, the default, leaves it unrecorded)."""
    m = store._driver.marker
    entry = (
        *(key, epoch, event, source, dest, kw.get("at", 2e6), kw.get("refused")),
        *(kw.get("fp", "-"), kw.get("lease"), kw.get("facts", "{}"), kw.get("owner", "")),
        kw.get("rk"),
    )
    store._driver.rerun(
        lambda tx: tx.run(
            f"INSERT INTO {store.history_table} (key, epoch, event, source, dest, at, refused,"  # noqa: S608
            " token_fingerprint, lease_deadline, facts, owner, request_key)"
            f" VALUES ({', '.join([m] * len(entry))})",
            entry,
        )
    )
