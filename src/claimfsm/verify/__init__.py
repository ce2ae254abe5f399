"""The generated stateful test of a declared lifecycle: Hypothesis drives the checker's model
and a real store side by side and compares them after every step (``claimfsm verify``).
A pytest suite calls :func:`lifecycle_state_machine` to run it as its own test."""

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
    "guided_paths",
    "lifecycle_state_machine",
    "play",
    "verify",
]
