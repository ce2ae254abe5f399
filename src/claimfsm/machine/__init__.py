"""The runtime ``transitions`` machine built from the declaration, and the guards' meaning."""

from claimfsm.machine._entity import CallerView, LifecycleMachine, RowView
from claimfsm.machine._facts import ClaimRow, DraftRow, Facts
from claimfsm.machine._guards import Guard, build_guards
from claimfsm.machine._machine import ClaimMachine, claim_machine

__all__ = [
    "CallerView",
    "ClaimMachine",
    "ClaimRow",
    "DraftRow",
    "Facts",
    "Guard",
    "LifecycleMachine",
    "RowView",
    "build_guards",
    "claim_machine",
]
