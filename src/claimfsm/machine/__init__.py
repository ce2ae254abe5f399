"""The runtime ``transitions`` machine built from the declaration, and the guards' meaning."""

from claimfsm.machine._facts import ClaimRow, DraftRow, Facts
from claimfsm.machine._guards import Guard, build_guards
from claimfsm.machine._machine import ClaimMachine, claim_machine

__all__ = [
    "ClaimMachine",
    "ClaimRow",
    "DraftRow",
    "Facts",
    "Guard",
    "build_guards",
    "claim_machine",
]
