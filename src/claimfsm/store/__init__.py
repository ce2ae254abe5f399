"""Stores: drafts, one claim row per target, and append-only history; and, for any other
declared lifecycle, one row per entity with its history (``open_entity_store``).

``open_store(url)`` picks the backend. All backends share one protocol core
(``_core.Store``); each supplies only transactions and the guarded writes.
"""

from __future__ import annotations

from pathlib import Path

from claimfsm.errors import InvalidArgument
from claimfsm.machine import ClaimMachine
from claimfsm.spec import Spec
from claimfsm.store import _validate as check
from claimfsm.store._async import AsyncClaim, AsyncStore, open_async_store
from claimfsm.store._core import Clock, Store, claim_fields, idempotency_key, replay
from claimfsm.store._entity import EntityRow, EntityStore, Handle, open_entity_store
from claimfsm.store._entity_history import EntityHistory
from claimfsm.store._entity_sql import compile_event
from claimfsm.store._entity_upkeep import Swept
from claimfsm.store._memory import MemoryStore
from claimfsm.store._sqlite import SCHEMA_VERSION, SQLiteStore
from claimfsm.store._types import Claim, ClaimInfo, Draft, Evidence, HistoryEntry, Transitioned


def open_store(
    url: str, *, clock: Clock | None = None, create: bool = True, spec: Spec | None = None
) -> Store:
    """Open a store by URL.

    - ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db``: a SQLite file
      (created with the schema if new).
    - ``sqlite://:memory:``: a private in-memory SQLite database (tests).
    - ``memory://``: the reference store, run by the ``transitions`` machine.
    - ``postgresql://user@host:port/db?schema=name``: PostgreSQL (needs the ``postgres``
      extra); tables in schema ``name`` (default ``claimfsm``), leases judged by the
      server's clock.

    ``clock`` returns the store's time in seconds; tests pass a controllable one to drive
    leases. Default: ``time.time`` for SQLite and memory, the server's clock for PostgreSQL
    (where ``clock=`` is for tests only: workers on several hosts must share one clock).
    ``create=False`` opens only an existing SQLite file (to read one, say): a missing path
    is ``NotFound`` instead of a new, empty database.

    ``spec`` is the declaration the store runs: ``claim.toml`` by default, or a variant of
    it, under the claim's names or any others (its steps are read by its shape:
    ``claim_steps``). A lifecycle of your own goes to ``open_entity_store``.
    """
    if not isinstance(url, str):
        raise InvalidArgument(f"url must be a str, not {type(url).__name__}")
    if clock is not None and not callable(clock):
        raise InvalidArgument("clock must be a callable returning seconds")
    if spec is not None and not isinstance(spec, Spec):
        raise InvalidArgument(f"spec must be a Spec (load_spec), not {type(spec).__name__}")
    machine = ClaimMachine(spec) if spec is not None else None
    if url in ("sqlite://:memory:", "sqlite:///:memory:"):
        return SQLiteStore(":memory:", clock=clock, machine=machine)
    if url.startswith("sqlite:///") and len(url) > len("sqlite:///"):
        path = url[len("sqlite:///") :]
        if not create:
            check.database_file(Path(path))
        return SQLiteStore(path, clock=clock, machine=machine)
    if url == "memory://":
        return MemoryStore(clock=clock, machine=machine)
    if url.startswith(("postgresql://", "postgres://")):
        from claimfsm.store._postgres import PostgresStore  # psycopg is an optional extra

        return PostgresStore(url, clock=clock, machine=machine)
    raise InvalidArgument(
        f"unsupported store url {url!r}; use sqlite:///path.db, sqlite://:memory:, memory://"
        " or postgresql://user@host/db"
    )


__all__ = [
    "SCHEMA_VERSION",
    "AsyncClaim",
    "AsyncStore",
    "Claim",
    "ClaimInfo",
    "Clock",
    "Draft",
    "EntityHistory",
    "EntityRow",
    "EntityStore",
    "Evidence",
    "Handle",
    "HistoryEntry",
    "MemoryStore",
    "SQLiteStore",
    "Store",
    "Swept",
    "Transitioned",
    "claim_fields",
    "compile_event",
    "idempotency_key",
    "open_async_store",
    "open_entity_store",
    "open_store",
    "replay",
]
