"""A declared lifecycle's history: the columns of its table and of an entry, in one place.

Every operation on an entity appends one entry: an event applied (``refused`` is None) or a
stale caller's operation refused (``refused`` names the guard; the row did not change), and
the ``checkpoint`` entries pruning leaves. An entry records the row as the operation left
it: its ``epoch``, its state (``dest``; ``source`` is where it was), the token that holds it
(as ``token_fingerprint``) and its lease deadline (``lease_deadline``, None: no lease). With
the store's time (``at``) that is what an auditor needs to judge the guards of the next
entry, the lease's included.

The store, its upkeep and the audit read these names and indexes from here.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The history table's columns, in the order an entry reads them.
COLUMNS = (
    "seq",
    "key",
    "epoch",
    "event",
    "source",
    "dest",
    "at",
    "refused",
    "token_fingerprint",
    "lease_deadline",
)
SELECT = ", ".join(COLUMNS)
#: What the store appends: an entry without its seq (the database numbers it).
RECORD = COLUMNS[1:]
#: Indexes into an appended record.
KEY, EPOCH, EVENT, SOURCE, DEST, AT, REFUSED, TOKEN, LEASE = range(len(RECORD))
#: The lease deadline of an entry appended before history recorded it (a store made by an
#: earlier claimfsm, opened since): not known, so not judged.
UNRECORDED = float("-inf")


def lease_recorded(deadline: float | None) -> bool:
    """Whether an entry's ``lease_deadline`` is what the row held (not :data:`UNRECORDED`)."""
    return deadline is None or deadline > UNRECORDED


def table(name: str, serial: str) -> str:
    """``CREATE TABLE`` of the history table ``name``; ``serial``: the driver's ``seq``."""
    return (
        f"CREATE TABLE IF NOT EXISTS {name} (seq {serial}, key TEXT NOT NULL,"
        " epoch INTEGER NOT NULL, event TEXT NOT NULL, source TEXT NOT NULL, dest TEXT NOT"
        " NULL, at DOUBLE PRECISION NOT NULL, refused TEXT, token_fingerprint TEXT NOT NULL,"
        " lease_deadline DOUBLE PRECISION)"
    )


def add_lease(name: str, unrecorded: str, add: str = "ADD COLUMN") -> str:
    """``ALTER TABLE`` that gives an older history table its ``lease_deadline`` column, its
    existing entries marked ``unrecorded`` (:data:`UNRECORDED` as the database's literal);
    ``add``: the database's words for adding a column."""
    return f"ALTER TABLE {name} {add} lease_deadline DOUBLE PRECISION DEFAULT {unrecorded}"


@dataclass(frozen=True)
class EntityHistory:
    """One entry of a lifecycle's history (see the module's docstring)."""

    seq: int
    key: str
    epoch: int
    event: str
    source: str
    dest: str
    at: float
    refused: str | None  # the guard a stale owner failed; None for a transition taken
    token_fingerprint: str
    #: the lease the row holds after the entry; None: no lease; ``-inf``: not recorded
    lease_deadline: float | None = None
