"""The store's public value types and the claim handle a worker holds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from claimfsm.errors import InvalidArgument
from claimfsm.machine import ClaimRow, DraftRow
from claimfsm.spec import Event, State
from claimfsm.store._tokens import fingerprint, token_hash

if TYPE_CHECKING:
    from claimfsm.store._core import Store


@dataclass(frozen=True, slots=True)
class Draft:
    draft_id: int
    target_id: str
    version: int  # bumps on every edit
    digest: str  # sha256 of the content
    status: str  # pending | approved | dispatched
    content: str

    @classmethod
    def from_row(cls, row: DraftRow) -> Draft:
        return cls(row.draft_id, row.target_id, row.version, row.digest, row.status, row.content)


@dataclass(frozen=True, slots=True)
class ClaimInfo:
    """A read-only snapshot of a target's current claim (no token, only its fingerprint)."""

    target_id: str
    epoch: int
    state: str
    owner: str
    token_fingerprint: str
    draft_id: int
    draft_version: int
    draft_digest: str
    idempotency_key: str
    lease_deadline: float
    outcome: str | None

    @classmethod
    def from_row(cls, row: ClaimRow) -> ClaimInfo:
        return cls(
            row.target_id,
            row.epoch,
            row.state,
            row.owner,
            fingerprint(row.token_hash),
            row.draft_id,
            row.draft_version,
            row.draft_digest,
            row.idempotency_key,
            row.lease_deadline,
            row.outcome,
        )


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One appended record: a transition of an epoch, or a refused stale operation (discard).

    Transition records carry the claim row as it was after the transition, so replaying
    them reproduces the current rows. Discard records never change a row.
    """

    seq: int
    target_id: str
    epoch: int
    event: str
    from_state: str
    to_state: str
    at: float
    owner: str | None
    token_fingerprint: str
    draft_id: int | None
    draft_version: int | None
    draft_digest: str | None
    idempotency_key: str | None
    lease_deadline: float | None
    outcome: str | None
    detail: str
    #: A discard's: the event the stale owner attempted (``resume``'s: the wake event by
    #: which the declaration's rule called it stale), and what the rule named
    #: (``Spec.stale_owner``: the stale guard that failed, or ``state:`` and the state);
    #: None on a transition, and on a discard recorded before schema version 3.
    attempted: str | None = None
    refused: str | None = None


@dataclass(frozen=True, slots=True)
class Transitioned:
    """What one transition did (``sweep`` returns these)."""

    target_id: str
    epoch: int
    event: str
    from_state: str
    to_state: str


@dataclass(frozen=True, slots=True)
class Evidence:
    """What remote readback found for an uncertain epoch. Build with the two constructors."""

    outcome: Literal["present", "absent"]
    fenced_through: int | None = None  # the remote rejects every epoch <= this

    @classmethod
    def present(cls) -> Evidence:
        """Readback found the effect of the epoch's idempotency key."""
        return cls("present")

    @classmethod
    def absent_fenced(cls, fenced_through: int) -> Evidence:
        """Readback found no effect, after fencing the remote through ``fenced_through``."""
        if (
            isinstance(fenced_through, bool)
            or not isinstance(fenced_through, int)
            or not 0 <= fenced_through < 2**63
        ):
            raise InvalidArgument("fenced_through must be the int epoch the remote is fenced at")
        return cls("absent", fenced_through)


class Claim:
    """A worker's handle on one epoch of one target: the only place its token lives.

    Save ``(target_id, epoch, token)`` to resume after a restart (``Store.resume``); never
    log the token: ``repr`` and ``token_fingerprint`` show a short, non-secret label.
    """

    __slots__ = (
        "_store",
        "_token",
        "draft_digest",
        "draft_id",
        "draft_version",
        "epoch",
        "idempotency_key",
        "lease_deadline",
        "owner",
        "state",
        "target_id",
        "token_fingerprint",
    )

    def __init__(self, store: Store, row: ClaimRow, token: str) -> None:
        self._store = store
        self._token = token
        self.target_id = row.target_id
        self.epoch = row.epoch
        self.token_fingerprint = fingerprint(token_hash(token))
        self._refresh(row)

    def _refresh(self, row: ClaimRow) -> None:
        self.state = row.state
        self.owner = row.owner
        self.draft_id = row.draft_id
        self.draft_version = row.draft_version
        self.draft_digest = row.draft_digest
        self.idempotency_key = row.idempotency_key
        self.lease_deadline = row.lease_deadline

    @property
    def token(self) -> str:
        """The secret owner token. Keep it out of logs."""
        return self._token

    @property
    def role(self) -> State | None:
        """The claim's state in the typed face (``State.RESERVED`` …), whatever the store's
        declaration names it (``state`` is the declared name)."""
        return self._store.steps.state_role(self.state)

    def begin_send(self) -> Claim:
        """reserved → sending, durably, before the external call. Refused if stale or lapsed."""
        return self._store._owner_event(self, Event.BEGIN_SEND)

    def confirm(self) -> Claim:
        """sending → confirmed: the remote acknowledged the effect."""
        return self._store._owner_event(self, Event.CONFIRM)

    def mark_uncertain(self, reason: str = "") -> Claim:
        """sending → uncertain: a timeout or ambiguous error; only readback resolves it."""
        return self._store._owner_event(self, Event.TIMEOUT, reason=reason)

    def release(self) -> Claim:
        """reserved → released: give the claim back without sending."""
        return self._store._owner_event(self, Event.RELEASE)

    def renew(self, lease_seconds: float) -> Claim:
        """Extend a live lease (reserved or sending) to now + ``lease_seconds``."""
        return self._store._owner_event(self, Event.RENEW, lease_seconds=lease_seconds)

    def __repr__(self) -> str:
        return (
            f"Claim(target_id={self.target_id!r}, epoch={self.epoch}, state={self.state!r}, "
            f"owner={self.owner!r}, token={self.token_fingerprint}…)"
        )
