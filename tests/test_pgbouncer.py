"""Behind PgBouncer in transaction pooling mode, nothing a store does may outlive its
transaction on the server connection: no search_path, no prepared statements, no
advisory locks. (Every store test also runs through PgBouncer: the ``pgbouncer``
backend in conftest.py.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from claimfsm.store._postgres import PostgresStore

from . import _pgbouncer
from .conftest import PG_URL, REQUIRE_PGBOUNCER, FakeClock, approved_draft, drop_schema


@pytest.fixture
def one_server_connection(pg_database: str) -> Iterator[str]:
    """The test database through a PgBouncer with ONE server connection: every client
    transaction runs on it, one after another."""
    why = _pgbouncer.available()
    if why is not None:
        if REQUIRE_PGBOUNCER:
            pytest.fail(f"PgBouncer is required (CLAIMFSM_REQUIRE_PGBOUNCER=1) but {why}")
        pytest.skip(why)
    bouncer = _pgbouncer.start(PG_URL, pool_size=1)
    try:
        yield bouncer.url(pg_database)
    finally:
        bouncer.stop()


def test_prepared_statements_is_a_store_option_and_checked(pg_database: str) -> None:
    from claimfsm.errors import InvalidArgument
    from claimfsm.store._postgres import split_url

    assert split_url(f"{pg_database}?prepared_statements=off&schema=x")[1:] == ("x", False)
    assert split_url(pg_database)[2] is True
    with pytest.raises(InvalidArgument, match="prepared_statements must be on or off"):
        PostgresStore(f"{pg_database}?prepared_statements=maybe")


def test_two_stores_share_one_server_connection_and_leave_no_session_state(
    one_server_connection: str, pg_database: str, clock: FakeClock
) -> None:
    import psycopg

    url = one_server_connection
    a = PostgresStore(f"{url}&schema=bouncer_a", clock=clock, pool_size=2)
    b = PostgresStore(f"{url}&schema=bouncer_b", clock=clock, pool_size=2)
    try:
        # Interleaved on the one server connection: each store must reach its own tables
        # (a session search_path set by one would send the other's writes astray).
        for round_ in range(6):  # more than psycopg's prepare threshold (5)
            for store, name in ((a, "a"), (b, "b")):
                target = f"{name}-{round_}"
                claim = store.acquire(target, approved_draft(store, target), "w", 30)
                claim.begin_send()
                claim.confirm()
        assert {c.target_id[0] for c in a.claims()} == {"a"} and len(a.claims()) == 6
        assert {c.target_id[0] for c in b.claims()} == {"b"} and len(b.claims()) == 6
        plain = url.split("?")[0]
        with psycopg.connect(plain, autocommit=True, prepare_threshold=None) as probe:
            # The same server connection the stores used (PgBouncer has only one).
            assert probe.execute("SHOW search_path").fetchone() == ('"$user", public',)
            prepared = probe.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
            assert prepared == (0,)
            locks = probe.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                " AND pid = pg_backend_pid()"
            ).fetchone()
            assert locks == (0,)
    finally:
        a.close()
        b.close()
        drop_schema(pg_database, "bouncer_a")
        drop_schema(pg_database, "bouncer_b")
