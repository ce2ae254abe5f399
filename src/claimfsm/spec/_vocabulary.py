"""The claim protocol's typed face: the names code uses for its steps and states.

Code needs to name a few of the claim's steps (a store writes acquire's new epoch, with the
lease it declares, the dispatcher records the intent to send); :class:`Event` and
:class:`State` make such names typo-proof, and their values are ``claim.toml``'s. The
declaration owns what they mean, how they connect and what they are called:
:func:`claim_steps` finds each of the claim's steps in a declaration by its shape and its
declared roles, so the checker's model, the machine, the stores and the replays run a
renamed copy of ``claim.toml`` as the same protocol, in its own names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from claimfsm.errors import SpecError
from claimfsm.spec._roles import a_lifecycle_of_its_own, step_events, wake_events


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


#: The claim's owner events: a worker's operations on the claim it holds, each a step of
#: the claim world's workers (the checker's claim model and its Promela).
OWNER_EVENTS = frozenset(
    {Event.BEGIN_SEND, Event.RELEASE, Event.CONFIRM, Event.TIMEOUT, Event.RENEW}
)


def require_claim_protocol(spec: object, what: str) -> ClaimSteps:
    """Raise ``SpecError`` unless ``spec`` is the claim protocol or a variant of it, by its
    shape whatever its names (:func:`require_claim_world`); the claim's steps in it."""
    return require_claim_world(spec, what)


#: The evidence the claim protocol's callers bring (the remote's readback and modes).
CLAIM_FACTS = frozenset({"outcome", "fenced_through", "remote_dedups"})


def _beyond_the_claim_row(spec: object) -> str:
    """What a declaration with the claim's names says that the claim's stores and model
    do not read: declared columns, invariants over them (``row``) or assuming fair what the
    claim world does not schedule (``clock``; a ``fence`` is part of its reconciler's
    readback, so a fair fence assumes nothing a fair readback does not), guards over other
    facts, or the ``[world]`` option ``counts``."""
    found = []
    if getattr(spec, "columns", None):
        found.append(f"columns {sorted(spec.columns)}")  # type: ignore[attr-defined]
    invariants = getattr(spec, "invariants", {})
    rows = sorted(n for n, inv in invariants.items() if inv.kind == "row")
    if rows:
        found.append(f"invariants {rows} of kind 'row' (over columns the claim row lacks)")

    unfair = sorted(n for n, inv in invariants.items() if "clock" in inv.fair)
    if unfair:
        found.append(
            f"invariants {unfair} assuming clock fair (the claim world's fairness lists"
            " events and steps)"
        )
    if "counts" in getattr(spec, "world_declared", ()):
        found.append("[world] counts (the claim world bounds epochs, retries and edits)")
    odd = [
        name
        for name, g in getattr(spec, "guards", {}).items()
        if g.kind == "compare" and g.fact not in CLAIM_FACTS
    ]
    if odd:
        found.append(f"guards {odd} over a fact the claim's callers do not bring")
    return " and ".join(found)


@dataclass(frozen=True)
class ClaimSteps:
    """The claim protocol's steps and states as one declaration names them: the typed face
    (:class:`State`, :class:`Event`) on one side, the declaration's names on the other.

    Read from the declaration's transitions, not from its names, so a copy of
    ``claim.toml`` with every name changed is the same protocol (and an edit to a guard or
    an effect does not change which event is which): the event that leaves the initial
    state acquires (into the reserved state); the one with a ``lapsed`` guard lapses (from
    the reserved state into the expired one); the one whose every transition stays in its
    state renews; the one with an internal transition records a stale owner's refusal
    (discard, into the discarded state from the expired one). Of the other events, from the
    reserved state: into a lease state, the intent to send (into the sending state), into
    a state without a lease, release (into the released state). How the rest stand to the
    remote is declared (``remote`` on ``[events.NAME]``), not read off the shape: the
    event taken once the remote answered confirms, the one taken on giving up waiting
    times out (into the uncertain state), the one that sends again retries; the other
    event from the uncertain state reconciles (into the reconciled state).
    """

    events: Mapping[Event, str]
    states: Mapping[State, str]

    def event(self, event: Event) -> str:
        return self.events[event]

    def state(self, state: State) -> str:
        return self.states[state]

    def event_role(self, name: str) -> Event | None:
        """The typed face of the declared event ``name`` (None: not one of the claim's)."""
        for role, declared in self.events.items():
            if declared == name:
                return role
        return None

    def woken(self, spec: Any) -> tuple[Event, ...]:
        """What a worker woken from a crash may take with its saved handle, as both worlds
        read it (``wake_events``: an owner event out of the state a take leads into, for
        another state): on ``claim.toml``, begin_send and release. ``SpecError`` when the
        declaration gives another, which the claim world does not model."""
        return self._typed(
            spec, wake_events(spec), "on waking from a crash", (Event.BEGIN_SEND, Event.RELEASE)
        )

    def stepping(self, spec: Any) -> frozenset[Event]:
        """The owner events the fair step ``steps`` counts, as both worlds read them
        (``step_events``: an owner event but a keep-alive): on ``claim.toml``,
        begin_send, confirm, timeout and release."""
        owner = tuple(sorted(OWNER_EVENTS))
        return frozenset(
            self._typed(spec, sorted(step_events(spec)), "as a step of its work", owner)
        )

    def _typed(
        self, spec: Any, names: Any, what: str, modelled: tuple[Event, ...]
    ) -> tuple[Event, ...]:
        out = []
        for name in names:
            typed = self.event_role(name)
            if typed not in modelled:
                where = getattr(spec, "path", None) or getattr(spec, "name", "the declaration")
                raise SpecError(
                    f"{where}: {name!r} is an owner event here (by = 'owner', or an owner"
                    f" guard), so a worker of the claim world would take it {what}; that"
                    f" world's workers take only {[self.events[e] for e in modelled]} so:"
                    f" declare {name!r} by the operator or the sweep (by)"
                )
            out.append(typed)
        return tuple(out)

    def state_role(self, name: str) -> State | None:
        """The typed face of the declared state ``name`` (None: not one of the claim's)."""
        for role, declared in self.states.items():
            if declared == name:
                return role
        return None


def claim_steps(spec: Any) -> ClaimSteps:
    """The claim's steps in ``spec`` (``ClaimSteps``), or ``SpecError`` naming the one step
    its shape does not give, and what to declare."""

    where = getattr(spec, "path", None) or getattr(spec, "name", "the declaration")

    def one(found: Any, what: str) -> str:
        names = sorted(set(found))
        if len(names) != 1:
            raise SpecError(
                f"{where}: the claim protocol needs exactly one {what}; this declaration has"
                f" {names or 'none'} (the claim's steps are read from the declaration's"
                " shape and its declared roles: docs/declarations.md, 'The claim protocol's"
                " steps')"
            )
        return str(names[0])

    moving = [t for t in spec.transitions if not t.internal]
    lease = set(spec.states_where("lease"))
    terminal = set(spec.states_where("terminal"))
    acquire = one(
        (t.event for t in moving if t.source == spec.initial), "event from the initial state"
    )
    reserved = one((t.dest for t in moving if t.event == acquire), f"state {acquire!r} enters")
    lapse = one(
        (t.event for t in moving if any(spec.guards[g].kind == "lapsed" for g in t.guards)),
        "event with a guard of kind lapsed",
    )
    renew = one(
        (
            e
            for e in spec.events
            if e != lapse
            and any(t.event == e for t in moving)
            and all(t.source == t.dest and not t.internal for t in spec.transitions if t.event == e)
        ),
        "event whose every transition stays in its state",
    )
    known = {acquire, lapse, renew}

    def leaving(state: str) -> list[Any]:
        return [t for t in moving if t.source == state and t.dest != state and t.event not in known]

    def split(state: str, flagged: set[str], into: str, not_into: str) -> tuple[str, str]:
        """The other event from ``state`` into a flagged state, and the one into another."""
        out = leaving(state)
        return (
            one((t.event for t in out if t.dest in flagged), f"other event from {state!r} {into}"),
            one(
                (t.event for t in out if t.dest not in flagged),
                f"other event from {state!r} {not_into}",
            ),
        )

    def enters(state: str, event: str) -> str:
        return one((t.dest for t in leaving(state) if t.event == event), f"state {event!r} enters")

    def declared(
        role: str, step: str, source: str, into: Callable[[str], bool], says: str
    ) -> tuple[str, str]:
        """The one event declaring ``remote = role``, and the state it enters from
        ``source``, which ``into`` must accept (``says`` what it needs, for the error)."""
        event = one(
            (e for e in spec.events if spec.remote_role(e) == role),
            f"event declaring remote = {role!r} under [events.NAME] (the claim's {step})",
        )
        dests = sorted({t.dest for t in leaving(source) if t.event == event})
        if len(dests) != 1 or not into(dests[0]):
            raise SpecError(
                f"{where}: the event declaring remote = {role!r} (the claim's {step}),"
                f" {event!r}, must lead from {source!r} {says}; from there it leads"
                f" {'into ' + ', '.join(map(repr, dests)) if dests else 'nowhere'}: declare the"
                " role on the event that does (docs/declarations.md, 'The claim protocol's"
                " steps')"
            )
        return event, dests[0]

    begin_send, release = split(
        reserved, lease, "into a lease state", "into a state without a lease"
    )
    sending = enters(reserved, begin_send)
    known |= {begin_send, release}
    confirm, confirmed = declared(
        "answered",
        "confirm",
        sending,
        lambda s: s in terminal,
        "into a terminal state (the remote answered: the attempt is over)",
    )
    timeout, uncertain = declared(
        "unanswered",
        "timeout",
        sending,
        lambda s: s not in terminal,
        "into a state that is not terminal (its request may still land: readback or a"
        " resend must leave that state)",
    )
    known |= {confirm, timeout}
    retry, _ = declared(
        "resends",
        "retry",
        uncertain,
        lambda s: s == sending,
        f"back into {sending!r} (its request is in flight again)",
    )
    known.add(retry)
    reconcile = one((t.event for t in leaving(uncertain)), f"other event from {uncertain!r}")
    discard = one(
        (t.event for t in spec.transitions if t.internal), "event with an internal transition"
    )

    def dest(event: str, source: str) -> str:
        return one(
            (t.dest for t in moving if t.event == event and t.source == source),
            f"state {event!r} enters from {source!r}",
        )

    expired = dest(lapse, reserved)
    return ClaimSteps(
        events={
            Event.ACQUIRE: acquire,
            Event.BEGIN_SEND: begin_send,
            Event.RELEASE: release,
            Event.RENEW: renew,
            Event.CONFIRM: confirm,
            Event.TIMEOUT: timeout,
            Event.LAPSE: lapse,
            Event.RECONCILE: reconcile,
            Event.RETRY: retry,
            Event.DISCARD: discard,
        },
        states={
            State.UNCLAIMED: spec.initial,
            State.RESERVED: reserved,
            State.SENDING: sending,
            State.CONFIRMED: confirmed,
            State.UNCERTAIN: uncertain,
            State.RECONCILED: dest(reconcile, uncertain),
            State.RELEASED: dest(release, reserved),
            State.EXPIRED: expired,
            State.DISCARDED: dest(discard, expired),
        },
    )


def claim_wakes(spec: Any) -> bool:
    """Whether the claim world of ``spec`` keeps a crashed worker's handle for a wake-up:
    ``[world] wakes`` where declared, else true (the claim world's crash always has)."""
    world = getattr(spec, "world", {})
    return bool(world["wakes"]) if "wakes" in getattr(spec, "world_declared", ()) else True


def require_claim_world(spec: Any, what: str) -> ClaimSteps:
    """The claim's steps in ``spec`` for ``what`` (the checker's claim model), which reads
    the claim's world by the declaration's shape, whatever its names; ``SpecError`` when
    the shape is not the claim's, or the declaration says more than that world reads."""
    if a_lifecycle_of_its_own(spec):
        where = getattr(spec, "path", None) or getattr(spec, "name", "the declaration")
        raise SpecError(
            f"{where}: {what} is built for the claim protocol and its variants (a world of"
            " drafts and a remote: specs/claim.toml); this declaration, with states"
            f" {sorted(getattr(spec, 'states', ()))}, is a lifecycle of your own:"
            " `claimfsm check PATH` checks it on the model of a declared lifecycle and"
            " `open_entity_store` stores it"
        )
    steps = claim_steps(spec)
    extra = _beyond_the_claim_row(spec)
    if extra:
        where = getattr(spec, "path", None) or getattr(spec, "name", "the declaration")
        raise SpecError(
            f"{where}: {what} is built for the claim protocol's row; this declaration"
            f" also has {extra}, which only a lifecycle of your own reads (the checker's"
            " model of a declared lifecycle, the entity store): rename the lifecycle's"
            " states and events, or leave them out"
        )
    firsts = sorted(e for e, d in getattr(spec, "effects", {}).items() if d.first is not None)
    if set(firsts) - {steps.event(Event.ACQUIRE)}:
        where = getattr(spec, "path", None) or getattr(spec, "name", "the declaration")
        raise SpecError(
            f"{where}: {what} applies an event first on the claim's"
            f" {steps.event(Event.ACQUIRE)!r} only; this declaration declares first on"
            f" {firsts}: leave it out of the others"
        )
    acquire = steps.event(Event.ACQUIRE)
    if not acquire_leases(spec, acquire):
        where = getattr(spec, "path", None) or getattr(spec, "name", "the declaration")
        raise SpecError(
            f"{where}: {what} gives every new epoch of the claim's {acquire!r} a lease (its"
            f' claim row keeps a lease deadline); declare sets = ["lease"] on'
            f" [events.{acquire}], as specs/claim.toml does"
        )
    if not getattr(spec, "lease_kept", False):
        where = getattr(spec, "path", None) or getattr(spec, "name", "the declaration")
        raise SpecError(
            f"{where}: {what} keeps each epoch's lease deadline on its claim row after the"
            " epoch leaves the lease states (a row per epoch: its history shows when the"
            " lease ran out); declare [lease] kept = true, as specs/claim.toml does"
        )
    return steps


def acquire_leases(spec: Any, acquire: str) -> bool:
    """Whether the claim's ``acquire`` (as ``spec`` names it) declares the lease it sets."""
    decl = getattr(spec, "effects", {}).get(acquire)
    return decl is not None and "lease" in decl.sets
