"""Every exception claimfsm raises, under one root.

::

    ClaimFSMError
    ├── UsageError                  you did it: fix the call
    │   ├── InvalidArgument         (also TypeError and ValueError) a bad argument
    │   │   └── InvalidRemote       a Remote adapter that breaks the contract (lists how)
    │   ├── NotFound                (also LookupError) no such draft or claim
    │   └── IllegalTransition       the event is not declared from the current state
    ├── Refused                     the protocol said no; nothing changed
    │   ├── StaleClaim              epoch or owner token is not current (recorded as discard)
    │   ├── LeaseExpired            the lease lapsed; the claim can no longer be used to send
    │   ├── LeaseLost               a keep-alive could not keep the lease: stop, do not send
    │   ├── TargetBusy              the target's current claim does not free it
    │   ├── DraftNotApproved        the draft is not approved (or not for this target)
    │   ├── DraftChanged            the pinned draft was edited or unapproved since acquire
    │   └── InsufficientEvidence    uncertain may only be left with readback evidence
    ├── StoreError                  the world did it: the database failed (cause chained)
    │   ├── StoreBusy               contention outlasted the store's bounded retry
    │   └── SchemaVersionError      the database was made by another schema version
    ├── SpecError                   a declaration in specs/ is malformed
    └── DeclarationMismatch         a store and the declaration disagree (a claimfsm bug)

A refusal names the guard that failed; a misuse names what to do instead. Messages never
contain an owner token (a short fingerprint at most).
"""

from __future__ import annotations


class ClaimFSMError(Exception):
    """Root of every claimfsm exception."""


class UsageError(ClaimFSMError):
    """The caller used the library wrongly; the message says what to do instead."""


class InvalidArgument(UsageError, TypeError, ValueError):
    """An argument has the wrong type or value. Nothing was written."""


class InvalidRemote(InvalidArgument):
    """A ``Remote`` adapter breaks the contract (docs/remote-adapters.md): a flag or
    method is missing, misspelled, or cannot take the arguments claimfsm passes.
    ``problems`` lists each one."""

    def __init__(self, message: str, *, problems: list[str]) -> None:
        super().__init__(message)
        self.problems = problems


class NotFound(UsageError, LookupError):
    """No draft or claim with that id."""


class IllegalTransition(UsageError):
    """The event is not declared from the claim's current state."""

    def __init__(self, message: str, *, state: str, event: str) -> None:
        super().__init__(message)
        self.state = state
        self.event = event


class Refused(ClaimFSMError):
    """The protocol refused the operation; no claim or draft state changed."""

    #: The declared guard that failed, when one did.
    guard: str | None = None


class StaleClaim(Refused):
    """The epoch or owner token is no longer current (a stale owner). Recorded as discard."""


class LeaseExpired(Refused):
    """The claim's lease has lapsed, so it may not start sending or be renewed."""


class LeaseLost(Refused):
    """A ``KeepAlive`` lost the claim's lease: a renew was refused, or none succeeded before
    the lease ran out. The guarded work must stop before it sends; ``__cause__`` says why."""


class TargetBusy(Refused):
    """The target's current claim is live, sending or uncertain."""


class DraftNotApproved(Refused):
    """The draft is not approved, or does not belong to the target."""


class DraftChanged(Refused):
    """The pinned draft's version, digest or approval changed since it was claimed."""


class InsufficientEvidence(Refused):
    """Uncertain is left only with readback evidence, or a same-key retry to a deduping remote."""


class StoreError(ClaimFSMError):
    """The database failed; the driver's exception is chained as ``__cause__``."""


class StoreBusy(StoreError):
    """Lock contention lasted longer than the store's bounded retry allows."""


class SchemaVersionError(StoreError):
    """The database was created by a different schema version of claimfsm."""


class SpecError(ClaimFSMError):
    """A declaration file is malformed; the message names the file and the entry."""


class DeclarationMismatch(ClaimFSMError):
    """A store refused a write that the declaration's guards allow, or the reverse.

    This is a claimfsm bug, never a caller's: please report it with the message.
    """


#: Refusal names usable in a declaration's ``refusal =`` field.
REFUSALS: dict[str, type[Refused]] = {
    cls.__name__: cls
    for cls in (
        StaleClaim,
        LeaseExpired,
        TargetBusy,
        DraftNotApproved,
        DraftChanged,
        InsufficientEvidence,
    )
}
