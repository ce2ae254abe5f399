"""Model paths replayed on a real store (depends on ``checker`` and ``store``)."""

from claimfsm.replay._replay import (
    Coverage,
    Player,
    ReplayMismatch,
    TokenReplay,
    coverage_paths,
    replay_coverage,
    replay_path,
    replay_token,
)

__all__ = [
    "Coverage",
    "Player",
    "ReplayMismatch",
    "TokenReplay",
    "coverage_paths",
    "replay_coverage",
    "replay_path",
    "replay_token",
]
