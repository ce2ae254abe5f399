"""The claim world's properties, compiled from the declaration's ``[invariants]``.

The claim model (``_claim``) does not say what it proves: each declared invariant is a
predicate of a kind (docs/declarations.md), compiled here into the built-in engine's
property over the claim world (targets, drafts, the remote, the sticky ghosts), and by
``_spin_claim`` into SPIN's assertion or formula. An invariant whose ``remote`` does not
list the world's remote mode is not checked there (the promise's tiers), and an example
of more live drafts than the world has is left out (it cannot be met within the bounds).

What the claim world reads of each kind:

- ``exclusive_work``: no send arrived while another epoch's send was in flight at the
  remote (the ``overlap`` ghost);
- ``left_only_by``: no target left the listed states by another event (the ``escaped``
  ghost; one such invariant, since the world keeps one ghost for it);
- ``effect_once``: no draft's effect landed twice at a target's remote;
- ``eventually``: while some target is in ``from``, every fair run reaches a state where
  none is; each transition out of ``from`` must enter ``to`` (checked here), so leaving
  ``from`` is reaching ``to``;
- ``taken``: while some target is free (``frees_target`` or the initial state), has epochs
  left in the bounds and an approved draft, every fair run reaches a state where none is;
- ``reachable``: an example: a target in ``states`` (with the readback ``outcome``), a
  stale owner's refusal recorded (``event``, the claim's discard), or ``live_drafts``
  pending or approved drafts of one target.

The framework's own ``stale_operations_change_nothing`` comes first, as for every lifecycle.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from claimfsm.checker._engine import Property
from claimfsm.checker._entity_world import DRAFT_WORDS
from claimfsm.errors import SpecError
from claimfsm.spec import InvariantDecl, Spec
from claimfsm.spec._invariants import FAIR_STEPS, pinned_holds
from claimfsm.spec._vocabulary import ClaimSteps, Event

#: The framework's own property, which every lifecycle gets.
STALE = Property[Any](
    "stale_operations_change_nothing",
    "always",
    lambda w: not w.ghosts.stale_changed,
    "an operation with a superseded epoch or token changes no claim",
)

#: The live statuses of a draft in the claim world (pending, approved).
LIVE = ("p", "a")


def claim_invariants(
    spec: Spec, steps: ClaimSteps, remote: str, drafts: int
) -> tuple[InvariantDecl, ...]:
    """The declared invariants the claim world checks against a ``remote`` with ``drafts``
    drafts per target, in declaration order; ``SpecError`` for one it cannot read."""
    where = spec.path or spec.name
    escaping = [inv.name for inv in spec.invariants.values() if inv.kind == "left_only_by"]
    if len(escaping) > 1:
        raise SpecError(
            f"{where}: the claim world keeps one record of a state left by another event;"
            f" declare one invariant of kind left_only_by, not {escaping}"
        )
    found = []
    for inv in spec.invariants.values():
        if inv.kind == "reachable" and inv.event not in (None, steps.events[Event.DISCARD]):
            raise SpecError(
                f"{where}: invariant {inv.name!r}: the claim world records one event a step"
                f" takes, the refusal a stale owner's operation records"
                f" ({steps.events[Event.DISCARD]!r}), not {inv.event!r}"
            )
        if inv.kind == "eventually":
            for t in spec.transitions:
                leaves = t.source in inv.sources and t.dest not in inv.sources
                if leaves and not t.internal and t.dest not in inv.goals:
                    raise SpecError(
                        f"{where}: invariant {inv.name!r}: {t.event} leads from"
                        f" {t.source!r} to {t.dest!r}, which is not in its to; the claim"
                        " world proves that every target leaves from, so list every"
                        " state it leaves into"
                    )
        if not inv.applies(remote):
            continue
        if inv.kind == "reachable" and (inv.live_drafts or 0) > drafts:
            continue
        found.append(inv)
    return tuple(found)


def escape_rule(invariants: tuple[InvariantDecl, ...]) -> tuple[frozenset[str], frozenset[str]]:
    """(states, events) of the ``left_only_by`` invariant: leaving those states by another
    event sets the world's ``escaped`` ghost (nothing does, without one)."""
    for inv in invariants:
        if inv.kind == "left_only_by":
            return frozenset(inv.states), frozenset(inv.events)
    return frozenset(), frozenset()


def claim_properties(
    spec: Spec,
    invariants: tuple[InvariantDecl, ...],
    *,
    waiting: Callable[[Any], bool],
    fairness: Callable[[frozenset[str]], Callable[[Any], Hashable | None]],
) -> list[Property[Any]]:
    """The engine's properties for ``invariants`` over the claim world. ``waiting``: some
    target may be taken (``taken``); ``fairness(listed)``: an action's fairness class
    under the fair steps ``listed``."""
    props: list[Property[Any]] = [STALE]
    for inv in invariants:
        if inv.kind == "eventually":
            open_in = _some_target_in(frozenset(inv.sources))
            props.append(
                Property(
                    inv.name,
                    "eventually",
                    _none_of(open_in),
                    inv.meaning,
                    trigger=open_in,
                    fair=fairness(frozenset(inv.fair)),
                    fairness=fair_words(spec, inv.fair),
                )
            )
        elif inv.kind == "taken":
            props.append(
                Property(
                    inv.name,
                    "eventually",
                    lambda w: not waiting(w),
                    inv.meaning,
                    trigger=waiting,
                    fair=fairness(frozenset(inv.fair)),
                    fairness=fair_words(spec, inv.fair),
                )
            )
        elif inv.kind == "reachable":
            props.append(Property(inv.name, "sometimes", _predicate(inv), inv.meaning))
        else:
            props.append(Property(inv.name, "always", _predicate(inv), inv.meaning))
    return props


def _none_of(found: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda w: not found(w)


def _some_target_in(states: frozenset[str]) -> Callable[[Any], bool]:
    return lambda w: any(t.state in states for t in w.targets)


def _predicate(inv: InvariantDecl) -> Callable[[Any], bool]:
    """An ``always`` invariant's or a ``reachable`` example's predicate on a claim world."""
    if inv.kind == "exclusive_work":
        return lambda w: not w.ghosts.overlap
    if inv.kind == "left_only_by":
        return lambda w: not w.ghosts.escaped
    if inv.kind == "effect_once":
        return _effect_once
    if inv.kind == "pinned":
        return _as_pinned(inv)
    assert inv.kind == "reachable", inv.kind
    if inv.event is not None:
        return lambda w: w.ghosts.discarded
    if inv.live_drafts is not None:
        n = inv.live_drafts
        return lambda w: any(sum(s in LIVE for s, _ in ds) >= n for ds in w.drafts)
    states, outcome = frozenset(inv.states), inv.outcome or ""
    if outcome:
        return lambda w: any(t.state in states and t.outcome == outcome for t in w.targets)
    return lambda w: any(t.state in states for t in w.targets)


def _as_pinned(inv: InvariantDecl) -> Callable[[Any], bool]:
    """Kind ``pinned``: a target's claim in one of the listed states has its pinned draft
    approved or dispatched at the version pinned (``spec._invariants.pinned_holds``, as
    the lifecycle's world reads it)."""
    states = frozenset(inv.states)

    def holds(w: Any) -> bool:
        for t, drafts in zip(w.targets, w.drafts, strict=True):
            if t.state in states:
                now = None if t.draft < 0 else drafts[t.draft]
                seen = None if now is None or now[0] == "-" else (DRAFT_WORDS[now[0]], now[1])
                if not pinned_holds(inv, t.state, seen, t.version):
                    return False
        return True

    return holds


def _effect_once(w: Any) -> bool:
    for rm in w.remote:
        landed = rm.landed
        if len(landed) > 1 and len({r.draft for r in landed}) < len(landed):
            return False
    return True


def fair_words(spec: Spec, fair: tuple[str, ...]) -> str:
    """The fairness an invariant assumes, in words, for reports. The claim world's reconcile
    fences a fencing remote itself where its readback finds nothing, then reads again, so a
    fair ``fence`` assumes nothing more here than a fair reconcile (a lifecycle's world
    fences as a step of its own: ``FAIR_STEPS``)."""
    words = []
    for name in fair:
        if name == "fence":
            words.append("fence (here a reconcile that finds nothing fences the remote itself)")
        elif name in FAIR_STEPS:
            words.append(FAIR_STEPS[name])
        else:
            role = spec.role(name)
            whom = {
                "taker": "each target, by any worker",
                "owner": "by some worker holding a claim",
            }.get(role, "each target")
            words.append(f"{name} ({whom})")
    return "; ".join(words) if words else "none: any step may be skipped forever"
