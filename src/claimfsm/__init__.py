"""claimfsm: dispatch claims for external, non-idempotent effects.

The promise: at most one in-flight dispatch attempt per target; exactly-once effect only
when the remote dedups by idempotency key or rejects stale epochs (is fenced).

Layout, and the one direction dependencies run (each layer imports only those before it)::

    spec      a declaration: states, events, guards, transitions; roles, columns,
              invariants and the checker's world (stdlib only)
    machine   the ``transitions`` machine built from it; the guards' meaning in Python
    store     drafts, claims, history; one guarded write per transition (SQLite,
              PostgreSQL, memory); and the entities of any declared lifecycle
    audit     a database's history checked against the declaration, read-only
    metrics   Prometheus metrics from a store's observed transitions (optional extra)
    checker   the model checker, the claim model and the model of any declared lifecycle
              (imports spec alone)
    diagrams  state diagrams and sequence charts drawn from a declaration (spec alone)
    review    the design-review report (checker, diagrams)
    replay    model paths replayed on a real store, with coverage
    verify    a lifecycle's store against the checker's model (``claimfsm verify``)
    service   Dispatcher and the Remote protocol an adapter implements (and their asyncio
              faces, which run the same core)
    demo      the demonstration run by ``claimfsm demo``
    campaign  the crash and fault campaign run by ``claimfsm campaign``
    cli       the ``claimfsm`` command; nothing imports it

``errors`` holds every exception (one tree, drawn in its docstring) and imports nothing.
"""

__version__ = "0.1.0"

import importlib
from typing import TYPE_CHECKING, Any

from claimfsm.errors import (
    ClaimFSMError,
    DeclarationMismatch,
    DraftChanged,
    DraftNotApproved,
    IllegalTransition,
    InsufficientEvidence,
    InvalidArgument,
    InvalidRemote,
    LeaseExpired,
    LeaseLost,
    NotFound,
    Refused,
    SchemaVersionError,
    SpecError,
    StaleClaim,
    StoreBusy,
    StoreError,
    TargetBusy,
    UsageError,
)

# The rest is imported when first used (PEP 562), so that `import claimfsm.checker` or
# `claimfsm check` does not load the stores, the service and their drivers.
_LAZY = {
    "ClaimMachine": "claimfsm.machine",
    "claim_machine": "claimfsm.machine",
    "AsyncDispatcher": "claimfsm.service",
    "AsyncKeepAlive": "claimfsm.service",
    "AsyncRemote": "claimfsm.service",
    "Dispatcher": "claimfsm.service",
    "DispatchResult": "claimfsm.service",
    "KeepAlive": "claimfsm.service",
    "Remote": "claimfsm.service",
    "SendAmbiguous": "claimfsm.service",
    "SendRejected": "claimfsm.service",
    "SendRequest": "claimfsm.service",
    "SimulatedRemote": "claimfsm.service",
    "check_remote": "claimfsm.service",
    "Event": "claimfsm.spec",
    "Spec": "claimfsm.spec",
    "State": "claimfsm.spec",
    "claim_spec": "claimfsm.spec",
    "load_spec": "claimfsm.spec",
    "AsyncClaim": "claimfsm.store",
    "AsyncStore": "claimfsm.store",
    "Claim": "claimfsm.store",
    "ClaimInfo": "claimfsm.store",
    "Draft": "claimfsm.store",
    "Evidence": "claimfsm.store",
    "HistoryEntry": "claimfsm.store",
    "MemoryStore": "claimfsm.store",
    "SQLiteStore": "claimfsm.store",
    "Store": "claimfsm.store",
    "Transitioned": "claimfsm.store",
    "open_store": "claimfsm.store",
}

if TYPE_CHECKING:
    from claimfsm.machine import ClaimMachine, claim_machine
    from claimfsm.service import (
        AsyncDispatcher,
        AsyncKeepAlive,
        AsyncRemote,
        Dispatcher,
        DispatchResult,
        KeepAlive,
        Remote,
        SendAmbiguous,
        SendRejected,
        SendRequest,
        SimulatedRemote,
        check_remote,
    )
    from claimfsm.spec import Event, Spec, State, claim_spec, load_spec
    from claimfsm.store import (
        AsyncClaim,
        AsyncStore,
        Claim,
        ClaimInfo,
        Draft,
        Evidence,
        HistoryEntry,
        MemoryStore,
        SQLiteStore,
        Store,
        Transitioned,
        open_store,
    )


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'claimfsm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "AsyncClaim",
    "AsyncDispatcher",
    "AsyncKeepAlive",
    "AsyncRemote",
    "AsyncStore",
    "Claim",
    "ClaimFSMError",
    "ClaimInfo",
    "ClaimMachine",
    "DeclarationMismatch",
    "DispatchResult",
    "Dispatcher",
    "Draft",
    "DraftChanged",
    "DraftNotApproved",
    "Event",
    "Evidence",
    "HistoryEntry",
    "IllegalTransition",
    "InsufficientEvidence",
    "InvalidArgument",
    "InvalidRemote",
    "KeepAlive",
    "LeaseExpired",
    "LeaseLost",
    "MemoryStore",
    "NotFound",
    "Refused",
    "Remote",
    "SQLiteStore",
    "SchemaVersionError",
    "SendAmbiguous",
    "SendRejected",
    "SendRequest",
    "SimulatedRemote",
    "Spec",
    "SpecError",
    "StaleClaim",
    "State",
    "Store",
    "StoreBusy",
    "StoreError",
    "TargetBusy",
    "Transitioned",
    "UsageError",
    "__version__",
    "check_remote",
    "claim_machine",
    "claim_spec",
    "load_spec",
    "open_store",
]
