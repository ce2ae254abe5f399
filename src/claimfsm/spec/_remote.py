"""What a remote does with a request, by its mode: the rules every remote in claimfsm
follows, stated once.

The checker's model of the remote, the simulated remote the demo and the tests send to,
and the crash campaign's remote process all decide with :class:`RemoteRules`; the SPIN
engine's generated Promela states the same rules in its own words (``_spin_claim``), and
a test holds the two engines to the same states.

- **plain** applies every request.
- **fencing** rejects a request whose epoch is at or below the target's fence, on arrival
  and again when it would land; the highest epoch that arrived fences every lower one,
  and readback fences through the epoch it reconciles (``fence_through``).
- **dedup** applies each idempotency key at most once; a request whose key was applied
  already lands as a duplicate, with no second effect.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

RemoteMode = Literal["plain", "fencing", "dedup"]
REMOTE_MODES: tuple[RemoteMode, ...] = get_args(RemoteMode)

#: What became of a request that reached the remote.
Landing = Literal["applied", "deduplicated", "fenced"]


@dataclass(frozen=True)
class RemoteRules:
    """The rules of a remote of ``mode`` (plain, fencing or dedup)."""

    mode: RemoteMode

    def __post_init__(self) -> None:
        if self.mode not in REMOTE_MODES:
            raise ValueError(f"a remote is plain, fencing or dedup, not {self.mode!r}")

    @property
    def fences(self) -> bool:
        return self.mode == "fencing"

    @property
    def dedups(self) -> bool:
        return self.mode == "dedup"

    def arrives(self, fence: int, epoch: int) -> int | None:
        """A request of ``epoch`` arrives at a target fenced through ``fence``: None when it
        is rejected, else the target's fence afterwards."""
        if not self.fences:
            return fence
        if epoch <= fence:
            return None
        return max(fence, epoch - 1)  # the highest epoch seen fences every lower one

    def lands(self, fence: int, epoch: int, key_applied: bool) -> Landing:
        """A request of ``epoch`` lands at a target fenced through ``fence``; ``key_applied``:
        whether its idempotency key has taken effect there already."""
        if self.fences and epoch <= fence:
            return "fenced"
        if self.dedups and key_applied:
            return "deduplicated"
        return "applied"

    @staticmethod
    def fence_through(fence: int, epoch: int) -> int:
        """The fence after an explicit fence through ``epoch`` (readback's, before it may
        call an effect absent)."""
        return max(fence, epoch)
