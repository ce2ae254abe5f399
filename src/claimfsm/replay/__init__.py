"""Model paths replayed on a real store (depends on ``checker`` and ``store``)."""

from claimfsm.replay._replay import (
    Coverage,
    ReplayMismatch,
    coverage_paths,
    replay_coverage,
    replay_path,
)

__all__ = ["Coverage", "ReplayMismatch", "coverage_paths", "replay_coverage", "replay_path"]
