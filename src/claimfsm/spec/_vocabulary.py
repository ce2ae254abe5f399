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


def require_claim_protocol(spec: object, what: str) -> None:
    """Raise ``SpecError`` unless ``spec`` declares the claim protocol's states and events
    (``claim.toml`` or a variant of it): what ``what`` (the checker's model, the machine,
    the stores) is built for. Any declaration can be loaded, shown and drawn."""
    from claimfsm.errors import SpecError

    states = set(getattr(spec, "states", ()))
    events = set(getattr(spec, "events", ()))
    want_states, want_events = {s.value for s in State}, {e.value for e in Event}
    where = getattr(spec, "path", None) or getattr(spec, "name", "the declaration")
    if states == want_states and events == want_events:
        extra = _beyond_the_claim_row(spec)
        if extra:
            raise SpecError(
                f"{where}: {what} is built for the claim protocol's row; this declaration"
                f" also has {extra}, which only the checker's model of a lifecycle of your"
                " own reads: rename the lifecycle's states and events, or leave them out"
            )
        return
    differ = []
    if states != want_states:
        differ.append(f"states {sorted(states)}")
    if events != want_events:
        differ.append(f"events {sorted(events)}")
    raise SpecError(
        f"{where}: {what} is built for the claim protocol and its variants (specs/claim.toml:"
        f" states {sorted(want_states)}, events {sorted(want_events)}); this declaration has "
        + " and ".join(differ)
        + ". `claimfsm spec` and `claimfsm diagram` take any declaration; checking, storing"
        " and replaying a lifecycle of your own is not built yet"
    )


#: The evidence the claim protocol's callers bring (the remote's readback and modes).
CLAIM_FACTS = frozenset({"outcome", "fenced_through", "remote_dedups"})


def _beyond_the_claim_row(spec: object) -> str:
    """What a declaration with the claim's names says that the claim's stores and model
    do not read: declared columns, invariants, or guards over them or other facts."""
    found = []
    if getattr(spec, "columns", None):
        found.append(f"columns {sorted(spec.columns)}")  # type: ignore[attr-defined]
    if getattr(spec, "invariants", None):
        found.append(f"invariants {sorted(spec.invariants)}")  # type: ignore[attr-defined]
    odd = [
        name
        for name, g in getattr(spec, "guards", {}).items()
        if g.kind == "compare" and g.fact not in CLAIM_FACTS
    ]
    if odd:
        found.append(f"guards {odd} over a fact the claim's callers do not bring")
    return " and ".join(found)
