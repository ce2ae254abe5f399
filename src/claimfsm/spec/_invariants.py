"""What a declaration's ``[invariants]`` say: the kinds of property the checker proves
(:data:`INVARIANT_KINDS`), the keys each kind takes, and which world reads which
(:func:`lifecycle_world_problem`: the claim world reads every kind but ``row``, a lifecycle
of your own every kind, ``effect_once`` where it declares a remote). stdlib only.

- ``exclusive_work``, ``row``, ``effect_once`` and ``left_only_by`` hold in every reachable
  state;
- ``eventually`` and ``taken`` are obligations on every fair run (``fair`` lists the steps
  assumed weakly fair: events, or the world's own :data:`FAIR_STEPS`);
- ``reachable`` is an example the search must find;
- ``remote`` limits one to some remote modes of the claim world (the promise's tiers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from claimfsm.spec._guards import READBACK_OUTCOMES, compare
from claimfsm.spec._remote import REMOTE_MODES
from claimfsm.spec._roles import (
    LIFECYCLE_WORLD,
    LINKED_WORLD,
    WORD,
    ColumnDecl,
    Fail,
    check_column_compare,
    crashless_wakes,
    has_remote,
    lifecycle_problem,
    named_tables,
    records_outcome,
    wake_events,
)

#: Invariant kinds, with the sentence the docs use.
INVARIANT_KINDS: dict[str, str] = {
    "exclusive_work": "at most one client's external work on an entity is running at a time,"
    " apart from work at an epoch the executor has fenced off (with a remote, and in the claim"
    " world: the remote never has requests of two epochs of one entity in flight at once)",
    "row": "`column op value` holds for the entity's row (in the listed `states` only, if given)",
    "eventually": "an entity in one of the `from` states reaches one of the `to` states on every"
    " run where each step listed in `fair` that stays possible is eventually taken",
    "effect_once": "each entity's effect (with linked drafts, each draft's) happens at most"
    " once at the remote; a lifecycle declares it with a remote",
    "left_only_by": "an entity leaves the listed `states` only by the listed `events`",
    "pinned": "in the listed `states`, the draft the entity's epoch pinned is as it was"
    " pinned: approved (or dispatched) at the version pinned, so the work carries what was"
    " approved (the claim world, and a lifecycle with `[drafts]`)",
    "taken": "an entity that may be taken (a taker's event would begin a new epoch on it"
    " within the bounds; the claim world: a free target with an approved draft and epochs"
    " left) is taken, or stops being takeable, on every run where each step listed in"
    " `fair` that stays possible is eventually taken",
    "reachable": "an example, not an invariant: some reachable state has an entity in one of"
    " `states` (with the readback `outcome` its row records, if given: the claim's, or a"
    " lifecycle's whose event sets outcome), or a step took `event` (in the claim world,"
    " its one: the refusal a stale owner's operation records), or (the claim world) one"
    " target has `live_drafts` live drafts",
}

#: The keys each invariant kind takes besides ``kind``, ``meaning`` and ``remote``.
INVARIANT_OPERANDS: dict[str, frozenset[str]] = {
    "exclusive_work": frozenset(),
    "row": frozenset({"column", "op", "value", "states"}),
    "eventually": frozenset({"from", "to", "fair"}),
    "effect_once": frozenset(),
    "left_only_by": frozenset({"states", "events"}),
    "pinned": frozenset({"states"}),
    "taken": frozenset({"fair"}),
    "reachable": frozenset({"states", "outcome", "event", "live_drafts"}),
}

#: The world's own steps an ``eventually`` or ``taken`` invariant may list in ``fair``,
#: besides events.
FAIR_STEPS: dict[str, str] = {
    "clock": "a live lease's deadline eventually passes: no lease is renewed forever",
    "fence": "the operator eventually fences the executor through the entity's epoch",
    "steps": "some worker keeps stepping: while a worker can take a step on the handle it"
    " holds other than a keep-alive (an owner event but one that only renews, its request's"
    " send or its answer; the claim world's: begin the send, send, the answer, time out,"
    " confirm, release), some worker takes one",
}

INVARIANT_KEYS = {"kind", "meaning", "remote"}.union(*INVARIANT_OPERANDS.values())


@dataclass(frozen=True, slots=True)
class InvariantDecl:
    name: str
    kind: str  # one of INVARIANT_KINDS
    meaning: str
    # kind "row": column op value, in states (empty: every state)
    column: str | None = None
    op: str | None = None
    value: int | None = None
    states: tuple[str, ...] = ()
    # kind "eventually": from a state in ``sources``, every fair run reaches one of
    # ``goals``; ``fair`` lists the events and world steps (FAIR_STEPS) assumed weakly fair
    sources: tuple[str, ...] = ()
    goals: tuple[str, ...] = ()
    fair: tuple[str, ...] = ()  # also kind "taken"
    # kind "pinned": in ``states``, the pinned draft is approved or dispatched at the
    # version pinned
    # kind "left_only_by": the entity leaves ``states`` only by these events
    events: tuple[str, ...] = ()
    # kind "reachable": an entity in ``states`` with this readback outcome (the claim
    # world's), a step that took ``event``, or this many live drafts of one target
    outcome: str | None = None
    event: str | None = None
    live_drafts: int | None = None
    # the remote modes it is checked against (the claim world); empty: every mode
    remote: tuple[str, ...] = ()

    def applies(self, mode: str) -> bool:
        """Whether it is checked against a remote of ``mode``."""
        return not self.remote or mode in self.remote


def parse_invariants(
    declared: Any,
    states: Mapping[str, Any],
    columns: Mapping[str, ColumnDecl],
    starts_work: bool,
    fail: Fail,
    events: frozenset[str] = frozenset(),
    fenceable: bool = False,
) -> dict[str, InvariantDecl]:
    found = {}
    tables = named_tables(
        declared,
        "invariants",
        "invariant",
        INVARIANT_KEYS,
        fail,
        says="a 'kind' and a 'meaning'",
        word=WORD,
    )
    for name, body, what in tables:
        kind = body.get("kind")
        if not isinstance(kind, str) or kind not in INVARIANT_KINDS:
            raise fail(f"{what}: unknown kind {kind!r}; use one of {sorted(INVARIANT_KINDS)}")
        extra = set(body) - {"kind", "meaning", "remote"} - INVARIANT_OPERANDS[kind]
        if extra:
            owners = [k for k, keys in INVARIANT_OPERANDS.items() if extra <= keys]
            raise fail(
                f"{what}: {sorted(extra)} belong to kind {owners[0]!r} only"
                if len(owners) == 1
                else f"{what}: {sorted(extra)} do not belong to kind {kind!r}, which takes"
                f" {sorted(INVARIANT_OPERANDS[kind]) or 'no other keys'}"
            )
        remote = _remote_modes(what, body.get("remote", list(REMOTE_MODES)), fail)
        if kind == "eventually":
            decl = _obligation(what, name, body, states, events, fenceable, fail)
        elif kind == "taken":
            decl = InvariantDecl(
                name, kind, body["meaning"], fair=_fair(what, body, events, fenceable, fail)
            )
        elif kind == "exclusive_work":
            if not starts_work:
                raise fail(
                    f"{what}: no event starts work; mark the one that does with"
                    ' work = "starts" under [events.NAME]'
                )
            decl = InvariantDecl(name, kind, body["meaning"])
        elif kind == "effect_once":
            decl = InvariantDecl(name, kind, body["meaning"])
        elif kind == "left_only_by":
            decl = InvariantDecl(
                name,
                kind,
                body["meaning"],
                states=_names(what, body, "states", states, "states", fail, needed=True),
                events=_names(what, body, "events", events, "events", fail, needed=True),
            )
        elif kind == "reachable":
            decl = _example(what, name, body, states, events, fail)
        elif kind == "pinned":
            listed = _names(what, body, "states", states, "states", fail, needed=True)
            decl = InvariantDecl(name, kind, body["meaning"], states=listed)
        else:
            column, op, value = body.get("column"), body.get("op"), body.get("value")
            check_column_compare(what, column, op, value, columns, fail)
            listed = _names(what, body, "states", states, "states", fail)
            decl = InvariantDecl(name, kind, body["meaning"], column, op, value, listed)
        found[name] = replace(decl, remote=remote)
    return found


def _remote_modes(what: str, listed: Any, fail: Fail) -> tuple[str, ...]:
    """``remote``: the remote modes an invariant is checked against (all, when not given)."""
    if (
        not isinstance(listed, list)
        or not listed
        or not all(isinstance(m, str) and m in REMOTE_MODES for m in listed)
    ):
        raise fail(f"{what}: remote must be a list of remote modes from {list(REMOTE_MODES)}")
    return () if set(listed) == set(REMOTE_MODES) else tuple(dict.fromkeys(listed))


def _names(
    what: str,
    body: dict[str, Any],
    key: str,
    declared: Mapping[str, Any] | frozenset[str],
    noun: str,
    fail: Fail,
    needed: bool = False,
) -> tuple[str, ...]:
    """``key``: a list of declared names (``noun``: states or events); not empty if
    ``needed``."""
    listed = body.get(key, [])
    if not isinstance(listed, list) or not all(isinstance(x, str) for x in listed):
        raise fail(f"{what}: {key} must be a list of {noun[:-1]} names")
    if needed and not listed:
        raise fail(f"{what}: kind {body['kind']!r} needs {key} = [{noun[:-1]} names]")
    unknown = [x for x in listed if x not in declared]
    if unknown:
        raise fail(f"{what}: {key} {unknown} are not declared {noun}")
    return tuple(dict.fromkeys(listed))


def _example(
    what: str,
    name: str,
    body: dict[str, Any],
    states: Mapping[str, Any],
    events: frozenset[str],
    fail: Fail,
) -> InvariantDecl:
    """A ``reachable`` example: some entity in ``states`` (with readback ``outcome``), a
    step that took ``event``, or ``live_drafts`` live drafts of one target."""
    listed = _names(what, body, "states", states, "states", fail)
    outcome, event, live = body.get("outcome"), body.get("event"), body.get("live_drafts")
    if outcome is not None and outcome not in READBACK_OUTCOMES:
        words = " or ".join(f'"{o}"' for o in READBACK_OUTCOMES)
        raise fail(f"{what}: outcome must be {words}, not {outcome!r}")
    if event is not None and (not isinstance(event, str) or event not in events):
        raise fail(f"{what}: event {event!r} is not a declared event")
    if live is not None and (isinstance(live, bool) or not isinstance(live, int) or live < 1):
        raise fail(f"{what}: live_drafts must be a whole number from 1, not {live!r}")
    said = [k for k in ("states", "event", "live_drafts") if k in body]
    if len(said) != 1 or (outcome is not None and not listed):
        raise fail(
            f"{what}: an example names one of states (with an outcome, if any), event or"
            f" live_drafts; this one names {said or 'none'}"
        )
    return InvariantDecl(
        name,
        "reachable",
        body["meaning"],
        states=listed,
        outcome=outcome,
        event=event,
        live_drafts=live,
    )


def _obligation(
    what: str,
    name: str,
    body: dict[str, Any],
    states: Mapping[str, Any],
    events: frozenset[str],
    fenceable: bool,
    fail: Fail,
) -> InvariantDecl:
    """An ``eventually`` invariant: ``from`` and ``to`` name declared states (neither empty,
    none in both); ``fair`` names declared events or :data:`FAIR_STEPS`."""
    lists: dict[str, tuple[str, ...]] = {}
    for key in ("from", "to"):
        listed = body.get(key, [])
        if not isinstance(listed, list) or not all(isinstance(x, str) for x in listed):
            raise fail(f"{what}: {key} must be a list of names")
        lists[key] = tuple(dict.fromkeys(listed))
    fair = _fair(what, body, events, fenceable, fail)
    for key in ("from", "to"):
        if not lists[key]:
            raise fail(f"{what}: kind 'eventually' needs {key} = [state names]")
        unknown = [s for s in lists[key] if s not in states]
        if unknown:
            raise fail(f"{what}: {key} names states {unknown} that are not declared")
    both = [s for s in lists["from"] if s in lists["to"]]
    if both:
        raise fail(f"{what}: {both} are in both from and to, so the obligation says nothing")
    return InvariantDecl(
        name,
        "eventually",
        body["meaning"],
        sources=lists["from"],
        goals=lists["to"],
        fair=fair,
    )


def _fair(
    what: str, body: dict[str, Any], events: frozenset[str], fenceable: bool, fail: Fail
) -> tuple[str, ...]:
    """``fair``: declared events or :data:`FAIR_STEPS` (``fence`` only where a guard reads
    ``fenced_through``)."""
    listed = body.get("fair", [])
    if not isinstance(listed, list) or not all(isinstance(x, str) for x in listed):
        raise fail(f"{what}: fair must be a list of names")
    allowed = set(events) | set(FAIR_STEPS)
    if not fenceable:
        allowed.discard("fence")
    unknown = [x for x in listed if x not in allowed]
    if unknown:
        extra = "" if fenceable else " ('fence' only where a guard reads fenced_through)"
        raise fail(
            f"{what}: fair names {unknown}, which are neither events nor world steps; use"
            f" events or {sorted(FAIR_STEPS)}{extra}"
        )
    return tuple(dict.fromkeys(listed))


def pinned_holds(
    i: InvariantDecl, state: str, pinned: tuple[str, int] | None, version: int
) -> bool:
    """Kind ``pinned`` on one entity in ``state`` whose epoch pinned a draft now ``pinned``
    (its status, ``approved``, ``pending`` or ``dispatched``, and version; None: none
    pinned) at ``version``: outside the listed states anything goes; in them the draft is
    approved or dispatched at the version pinned. (The checker's two engines compile the
    same.)"""
    if state not in i.states:
        return True
    return pinned is not None and pinned[0] in ("approved", "dispatched") and pinned[1] == version


def row_holds(i: InvariantDecl, state: str, value: Any) -> bool:
    """Kind ``row`` on one entity in ``state`` whose ``column`` (``epoch`` or a declared
    column) reads ``value``: ``value op value`` where the entity is in one of ``states``,
    in every state when none is listed. (The checker's two engines compile the same.)"""
    return (bool(i.states) and state not in i.states) or compare(i.op or "=", value, i.value)


def leaves_by_another(i: InvariantDecl, source: str, event: str, dest: str) -> bool:
    """Kind ``left_only_by``: whether ``event``, taking an entity from ``source`` to
    ``dest``, leaves the listed ``states`` by an event not listed, which breaks it. (The
    lifecycle checker and the audit read it so; the claim checker compiles the same.)"""
    return source in i.states and dest not in i.states and event not in i.events


def invariant_words(i: InvariantDecl) -> str:
    """An invariant's kind and operands in words (``claimfsm spec``, the report)."""
    what = i.kind
    if i.kind == "row":
        what = f"{i.column} {i.op} {i.value}" + (f" in {', '.join(i.states)}" if i.states else "")
    elif i.kind == "eventually":
        what = (
            f"eventually: from {', '.join(i.sources)} to {', '.join(i.goals)};"
            f" fair: {', '.join(i.fair) or 'none'}"
        )
    elif i.kind == "taken":
        what = f"taken; fair: {', '.join(i.fair) or 'none'}"
    elif i.kind == "left_only_by":
        what = f"{', '.join(i.states)} left only by {', '.join(i.events)}"
    elif i.kind == "pinned":
        what = f"the pinned draft as pinned in {', '.join(i.states)}"
    elif i.kind == "reachable":
        if i.event is not None:
            what = f"example: a step takes {i.event}"
        elif i.live_drafts is not None:
            what = f"example: {i.live_drafts} live drafts of one target"
        else:
            what = f"example: in {', '.join(i.states)}" + (
                f" with outcome {i.outcome}" if i.outcome else ""
            )
    if i.remote:
        what += f"; against a {' or '.join(i.remote)} remote"
    return str(what)


def lifecycle_world_problem(spec: Any) -> str | None:
    """What in ``spec`` the checker's world of a lifecycle of your own cannot answer (None:
    nothing): anything :func:`lifecycle_problem` names, and what only the claim world reads
    (an invariant of a claim-world kind, or over a remote's modes; the fair ``steps``; a
    ``[world]`` option of the claim world's)."""
    problem = lifecycle_problem(spec)
    if problem is not None:
        return problem
    remote = has_remote(spec)
    linked = spec.drafts is not None
    for name, inv in spec.invariants.items():
        if inv.kind in CLAIM_INVARIANTS and not (inv.kind == "effect_once" and remote):
            why = (
                "; with a remote (an event declaring remote), effect_once reads it too"
                if inv.kind == "effect_once"
                else ""
            )
            return (
                f"invariant {name!r} is of kind {inv.kind!r}, which the claim world reads"
                f" (its drafts and remote); a lifecycle of your own declares"
                f" {sorted(set(INVARIANT_KINDS) - CLAIM_INVARIANTS)}{why}"
            )
        if inv.kind == "pinned" and not linked:
            return (
                f"invariant {name!r} is of kind 'pinned', which reads the draft an epoch"
                " pinned: declare [drafts] (and a take that pins one), or leave it out"
            )
        if inv.kind == "reachable" and inv.live_drafts and not linked:
            return (
                f"invariant {name!r}: an example of a lifecycle of your own names states"
                " (with an outcome where its row records one) or an event a step takes;"
                " live_drafts counts an entity's linked drafts: declare [drafts]"
            )
        if inv.kind == "reachable" and inv.outcome and not records_outcome(spec):
            return (
                f"invariant {name!r} asks for the outcome {inv.outcome!r}, and no row"
                ' records readback\'s outcome: declare sets = ["outcome"] on the event'
                " that takes readback's evidence, or leave outcome out"
            )
        if inv.remote and not remote:
            return (
                f"invariant {name!r} names remote modes {list(inv.remote)}, and no event"
                " declares a remote: leave out remote, or give the events on the remote"
                " their roles"
            )
    if spec.world.get("wakes"):
        if crashless_wakes(spec):
            return crashless_wakes(spec)
        if not wake_events(spec):
            return (
                "[world] wakes = true, and no owner event leaves the state a taker's event"
                " leads into for another: a woken client would have nothing to begin again;"
                " leave out wakes"
            )
    resends = any(spec.remote_role(e) == "resends" for e in spec.events)
    known = LIFECYCLE_WORLD | {"remote"} if remote else LIFECYCLE_WORLD
    known = known | {"retries"} if resends else known
    known = known | LINKED_WORLD if linked else known
    claims = sorted(set(spec.world_declared) - known)
    if claims:
        return (
            f"[world] declares {claims}, which only the claim world reads (its drafts and"
            f" remote); a lifecycle of your own declares {sorted(known)}"
            + ("" if remote else ", and remote when an event declares a remote role")
            + ("" if resends else ", and retries when an event resends")
            + ("" if linked else ", and drafts and edits when it declares [drafts]")
        )
    return None


#: Invariant kinds only the claim world reads (its remote), unless a lifecycle declares one.
CLAIM_INVARIANTS = frozenset({"effect_once"})
