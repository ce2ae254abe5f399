"""Declarations of lifecycles: states, events, guards, transitions, and the roles,
invariants and world the checker reads (stdlib only).

Everything else derives from it: the ``transitions`` machine (``claimfsm.machine``), the
stores' guarded writes (``claimfsm.store``), and the checker and diagrams.
"""

from claimfsm.spec._declaration import (
    DraftsDecl,
    EventDecl,
    GuardDecl,
    Spec,
    StateDecl,
    TransitionDecl,
)
from claimfsm.spec._differences import Differences, TransitionKey, differences, transition_keys
from claimfsm.spec._effects import EFFECTS
from claimfsm.spec._guards import (
    ABSENT,
    COLUMNS,
    FACTS,
    GUARD_KINDS,
    OPERATORS,
    PRESENT,
    READBACK_OUTCOMES,
    compare,
)
from claimfsm.spec._invariants import (
    INVARIANT_KINDS,
    InvariantDecl,
    invariant_words,
    lifecycle_world_problem,
)
from claimfsm.spec._load import (
    RETIRED_MODEL_OPTIONS,
    available,
    base_of,
    claim_spec,
    declarations_dir,
    designs,
    is_lifecycle_of_its_own,
    load_spec,
    parse_spec,
    runs_on_the_claim_model,
    shipped,
    wrong_designs,
)
from claimfsm.spec._remote import REMOTE_MODES, Landing, RemoteMode, RemoteRules
from claimfsm.spec._roles import (
    CLAIM_WORLD,
    LIFECYCLE_FACTS,
    LIFECYCLE_WORLD,
    REMOTE_ROLES,
    ROLES,
    WORK,
    WORLD_OPTIONS,
    ColumnDecl,
    lifecycle_problem,
)
from claimfsm.spec._vocabulary import ClaimSteps, Event, State, claim_steps, require_claim_protocol

__all__ = [
    "ABSENT",
    "CLAIM_WORLD",
    "COLUMNS",
    "EFFECTS",
    "FACTS",
    "GUARD_KINDS",
    "INVARIANT_KINDS",
    "LIFECYCLE_FACTS",
    "LIFECYCLE_WORLD",
    "OPERATORS",
    "PRESENT",
    "READBACK_OUTCOMES",
    "REMOTE_MODES",
    "REMOTE_ROLES",
    "RETIRED_MODEL_OPTIONS",
    "ROLES",
    "WORK",
    "WORLD_OPTIONS",
    "ClaimSteps",
    "ColumnDecl",
    "Differences",
    "DraftsDecl",
    "Event",
    "EventDecl",
    "GuardDecl",
    "InvariantDecl",
    "Landing",
    "RemoteMode",
    "RemoteRules",
    "Spec",
    "State",
    "StateDecl",
    "TransitionDecl",
    "TransitionKey",
    "available",
    "base_of",
    "claim_spec",
    "claim_steps",
    "compare",
    "declarations_dir",
    "designs",
    "differences",
    "invariant_words",
    "is_lifecycle_of_its_own",
    "lifecycle_problem",
    "lifecycle_world_problem",
    "load_spec",
    "parse_spec",
    "require_claim_protocol",
    "runs_on_the_claim_model",
    "shipped",
    "transition_keys",
    "wrong_designs",
]
