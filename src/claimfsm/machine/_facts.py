"""What guards look at: the claim row, the draft, and the facts an event brings."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(slots=True)
class DraftRow:
    draft_id: int
    target_id: str
    version: int  # bumps on every edit
    digest: str  # sha256 of the canonical content
    status: str  # pending | approved | dispatched
    content: str


@dataclass(slots=True)
class ClaimRow:
    """The current epoch of one target: exactly one such row per target."""

    target_id: str
    epoch: int  # strictly increases per target, never reused
    state: str
    owner: str
    token_hash: str  # sha256 of the owner token; the token itself is never stored
    draft_id: int
    draft_version: int  # pinned at acquire
    draft_digest: str  # pinned at acquire
    idempotency_key: str  # stable for the pinned draft version
    lease_deadline: float  # store clock, seconds
    outcome: str | None  # reconciled outcome: present | absent
    updated_at: float

    def column(self, name: str) -> object:
        """A column a declared guard compares (the loader checked the name)."""
        return getattr(self, name)


@dataclass(frozen=True, slots=True)
class Facts:
    """The inputs of one event, as both the guards and the stores' SQL parameters see them.

    Field names double as SQL parameter names (``:now``, ``:epoch``, ...).
    """

    now: float
    target_id: str | None = None
    epoch: int | None = None  # the epoch the caller claims to hold or names
    token_hash: str | None = None  # hash of the token the caller presents
    draft_id: int | None = None
    owner: str | None = None
    lease_deadline: float | None = None  # new deadline, for acquire / renew / retry
    new_token_hash: str | None = None  # for retry: the new owner's token
    new_idempotency_key: str | None = None  # for an event declared with fresh_key
    outcome: str | None = None  # evidence: "present" or "absent"
    fenced_through: int | None = None  # evidence: remote rejects every epoch <= this
    remote_dedups: bool = False
    draft: DraftRow | None = None  # the draft as stored now (acquired or pinned)

    def fact(self, name: str) -> object:
        """A fact a declared guard compares (the loader checked the name)."""
        return getattr(self, name)

    def with_draft(self, draft: DraftRow | None) -> Facts:
        return replace(self, draft=draft)

    def sql_params(self) -> dict[str, object]:
        return {
            "now": self.now,
            "target_id": self.target_id,
            "epoch": self.epoch,
            "token_hash": self.token_hash,
            "draft_id": self.draft_id,
            "owner": self.owner,
            "lease_deadline": self.lease_deadline,
            "new_token_hash": self.new_token_hash,
            "new_idempotency_key": self.new_idempotency_key,
            "outcome": self.outcome,
            "fenced_through": self.fenced_through,
            "remote_dedups": self.remote_dedups,
        }
