"""The generated stateful test of a declaration: Hypothesis drives the checker's model and a
real store side by side and compares them after every step (``claimfsm verify``). A pytest
suite calls :func:`lifecycle_state_machine` (a lifecycle of your own) or
:func:`claim_state_machine` (the claim protocol, under any names) to run it as its own
test."""

from claimfsm.verify._claim import claim_state_machine, scratch_claim_stores, verify_claim
from claimfsm.verify._stateful import (
    ManualClock,
    VerifyResult,
    guided_paths,
    lifecycle_state_machine,
    play,
    verify,
)

__all__ = [
    "ManualClock",
    "VerifyResult",
    "claim_state_machine",
    "guided_paths",
    "lifecycle_state_machine",
    "play",
    "scratch_claim_stores",
    "verify",
    "verify_claim",
]
