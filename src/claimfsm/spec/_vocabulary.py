"""The names code refers to. The declaration owns what they mean and how they connect.

Code needs to name a few states and events (a store sets a lease on ``acquire``, the
dispatcher calls ``begin_send``); these enums make such names typo-proof. The machine
refuses to build from a declaration whose states or events differ from them.
"""

from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    """States of one epoch; meanings are in ``specs/claim.toml``."""

    UNCLAIMED = "unclaimed"
    RESERVED = "reserved"
    SENDING = "sending"
    CONFIRMED = "confirmed"
    UNCERTAIN = "uncertain"
    RECONCILED = "reconciled"
    RELEASED = "released"
    EXPIRED = "expired"
    DISCARDED = "discarded"


class Event(StrEnum):
    """Events of the claim machine, as declared in ``specs/claim.toml``."""

    ACQUIRE = "acquire"
    BEGIN_SEND = "begin_send"
    RELEASE = "release"
    RENEW = "renew"
    CONFIRM = "confirm"
    TIMEOUT = "timeout"
    LAPSE = "lapse"
    RECONCILE = "reconcile"
    RETRY = "retry"
    DISCARD = "discard"
