"""The declaration of a claim machine: states, events, guards, transitions (stdlib only).

Everything else derives from it: the ``transitions`` machine (``claimfsm.machine``), the
stores' guarded writes (``claimfsm.store``), and the checker and diagrams.
"""

from claimfsm.spec._declaration import EventDecl, GuardDecl, Spec, StateDecl, TransitionDecl
from claimfsm.spec._differences import Differences, differences
from claimfsm.spec._effects import EFFECTS
from claimfsm.spec._guards import COLUMNS, FACTS, GUARD_KINDS, OPERATORS, compare
from claimfsm.spec._load import (
    MODEL_OPTIONS,
    available,
    claim_spec,
    declarations_dir,
    designs,
    load_spec,
    parse_spec,
)
from claimfsm.spec._vocabulary import Event, State, require_claim_protocol

__all__ = [
    "COLUMNS",
    "EFFECTS",
    "FACTS",
    "GUARD_KINDS",
    "MODEL_OPTIONS",
    "OPERATORS",
    "Differences",
    "Event",
    "EventDecl",
    "GuardDecl",
    "Spec",
    "State",
    "StateDecl",
    "TransitionDecl",
    "available",
    "claim_spec",
    "compare",
    "declarations_dir",
    "designs",
    "differences",
    "load_spec",
    "parse_spec",
    "require_claim_protocol",
]
