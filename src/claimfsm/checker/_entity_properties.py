"""The declaration's invariants as the lifecycle world's properties (:mod:`._entity`), and
which client or entity each of its actions acts for, for fairness and for the paths drawn.

Each invariant kind (``exclusive_work``, ``row``, ``left_only_by``, ``pinned``, ``eventually``,
``taken``, and ``reachable`` examples) is compiled once per model into a predicate of the
world; an ``eventually`` or ``taken`` obligation is a liveness property under the fairness
the declaration states (``fairness_class``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from claimfsm.checker._engine import Property
from claimfsm.checker._entity_world import (
    Action,
    EntityWorld,
    KeyShape,
    Shared,
    _draft_seen,
    _split,
)
from claimfsm.spec import (
    RemoteRules,
    compare,
)
from claimfsm.spec._invariants import FAIR_STEPS, pinned_holds


def _pinned(inv: Any) -> Callable[[EntityWorld], bool]:
    """Kind ``pinned``: in the listed states, each entity's pinned draft is approved or
    dispatched at the version pinned (``spec._invariants.pinned_holds``)."""

    def holds(world: EntityWorld) -> bool:
        for row in world.rows:
            if row.state in inv.states:
                seen = _draft_seen(row, row.draft)
                now = None if seen is None else (seen.status, seen.version)
                if not pinned_holds(inv, row.state, now, row.version):
                    return False
        return True

    return holds


def _live_drafts(n: int) -> Callable[[EntityWorld], bool]:
    """Some entity has ``n`` live (pending or approved) drafts at once."""
    return lambda world: any(
        sum(status in ("p", "a") for status, _ in row.drafts) >= n for row in world.rows
    )


def _some_row_in(
    states: frozenset[str], outcome: str | None = None
) -> Callable[[EntityWorld], bool]:
    """Some row is in ``states`` (and records readback's ``outcome``, where given)."""
    if outcome is None:
        return lambda world: any(row.state in states for row in world.rows)
    return lambda world: any(row.state in states and row.outcome == outcome for row in world.rows)


def _marked(name: str) -> Callable[[EntityWorld], bool]:
    """A step set the mark ``name``: the example's event was taken."""
    return lambda world: name in world.marks


def _invariant(
    inv: Any, col_index: dict[str, int], rules: RemoteRules | None, shape: KeyShape
) -> Callable[[EntityWorld], bool]:
    if inv.kind == "left_only_by":
        broken = _marked(inv.name)
        return lambda world: not broken(world)
    if inv.kind == "effect_once" and shape.drafts:  # each draft's effect at most once
        return lambda world: all(
            len({shape.draft_of(k) for _, k in row.landed}) == len(row.landed) for row in world.rows
        )
    if inv.kind == "effect_once":  # with a remote: one request took effect at most, any key
        return lambda world: all(len(row.landed) <= 1 for row in world.rows)
    if inv.kind == "exclusive_work" and rules is not None:
        # with a remote: no request arrived while another epoch's was in flight
        return lambda world: not world.overlap
    if inv.kind == "pinned":
        return _pinned(inv)
    if inv.kind == "exclusive_work":

        def exclusive(world: EntityWorld) -> bool:
            for row in world.rows:
                if sum(1 for epoch in row.working if epoch > row.fence) > 1:
                    return False
            return True

        return exclusive
    states, op, value = frozenset(inv.states), inv.op, inv.value

    def row_holds(world: EntityWorld) -> bool:
        for row in world.rows:
            if states and row.state not in states:
                continue
            left = row.epoch if inv.column == "epoch" else row.columns[col_index[inv.column]]
            if not compare(op, left, value):
                return False
        return True

    return row_holds


def _obligation(
    inv: Any,
    or_bounded: Callable[[Callable[[Shared], bool]], Callable[[EntityWorld], bool]],
    roles: dict[str, str],
    steps: frozenset[str],
    fence: str = "any_step",
) -> Property[EntityWorld]:
    """An ``eventually`` invariant as the engine's liveness property.

    It is checked for entity 0 alone: the entities start alike and every action treats them
    alike, so a violation for one is, renumbered, a violation for entity 0. Only the steps
    listed in ``fair`` are sure to happen: a run may stop in any state where none of them is
    possible (a worker may pause forever), and one that stays possible is eventually taken
    (weak fairness, :func:`fairness_class`). A state where a bound stops a step meets the
    obligation: the search cannot see past it, so a run that leaves the bounds is not
    called a violation.
    """
    sources, goals = frozenset(inv.sources), frozenset(inv.goals)
    holds = or_bounded(lambda shared: shared[0][0].state in goals)
    trigger = lambda world: world.rows[0].state in sources  # noqa: E731
    return _fair_property(inv, holds, trigger, roles, steps, fence)


def _taken(
    inv: Any,
    takeable: Callable[[Shared], bool],
    or_bounded: Callable[[Callable[[Shared], bool]], Callable[[EntityWorld], bool]],
    roles: dict[str, str],
    steps: frozenset[str],
    fence: str = "any_step",
) -> Property[EntityWorld]:
    """A ``taken`` invariant as the engine's liveness property: from a state where entity 0
    may be taken, it is taken or stops being takeable, under the fairness ``fair`` states
    (as :func:`_obligation` reads it, for entity 0 alone and with a bound meeting it)."""
    holds = or_bounded(lambda shared: not takeable(shared))
    trigger = lambda world: takeable(_split(world)[0])  # noqa: E731
    return _fair_property(inv, holds, trigger, roles, steps, fence)


def _fair_property(
    inv: Any,
    holds: Callable[[EntityWorld], bool],
    trigger: Callable[[EntityWorld], bool],
    roles: dict[str, str],
    steps: frozenset[str],
    fence: str = "any_step",
) -> Property[EntityWorld]:
    """The engine's property: from a state where ``trigger`` holds, ``holds`` is reached on
    every run fair to the steps ``inv`` lists (``steps``: the owner events ``steps``
    counts; ``fence``: ``[world] fence``, where ``with_readback`` leaves no fence step of
    its own to be fair to)."""
    fair = frozenset(inv.fair)
    classes: dict[Action, tuple[Any, ...] | None] = {}  # few actions recur: each once

    def fair_class(action: Action) -> tuple[Any, ...] | None:
        found = classes.get(action, classes)
        if found is classes:
            found = classes[action] = fairness_class(fair, action, steps)
        return found  # type: ignore[return-value]

    words = [
        f"{e} ({roles[e]})"
        if e in roles
        else "fence (here only inside an operator's readback that finds nothing)"
        if e == "fence" and fence == "with_readback"
        else FAIR_STEPS[e].split(":")[0]
        for e in inv.fair
    ]
    return Property(
        inv.name,
        "eventually",
        holds,
        inv.meaning,
        trigger=trigger,
        fair=fair_class,
        fairness=", ".join(words) if words else "none: any step may be skipped forever",
        stutter=True,
    )


#: The world's steps, each naming its entity second: an environment event, the clock, the
#: fence, a request landing, an author's edit.
WORLD_STEPS = frozenset({"env", "clock", "fence", "land", "draft"})


#: An idle client's steps on an entity it names (third): a take, a resend.
NAMING_STEPS = frozenset({"take", "resend"})


#: A client's steps on the handle it holds: an owner event, its run, its request's send,
#: the answer, a crash.
HANDLE_STEPS = frozenset({"own", "run", "send", "ack", "crash"})


def acts_on(world: EntityWorld, action: Action) -> int:
    """The entity ``action`` acts on (every action of the world acts on one): the one a
    world's step or an idle client's names, the handle's for a client's step on it, the
    saved handle's for a wake-up."""
    kind = action[0]
    if kind in WORLD_STEPS:
        return int(action[1])
    if kind in NAMING_STEPS:
        return int(action[2])
    if kind == "wake":
        return acting(world, action)[0]
    if kind not in HANDLE_STEPS:
        raise ValueError(f"{action!r} is no action of the lifecycle world")
    h = world.clients[action[1]]
    assert h is not None, f"{action!r} is a client's with no handle to act on"
    return h.key


def acting(world: EntityWorld, action: Action) -> tuple[int, tuple[int, int]]:
    """The entity an ``own`` or ``wake`` action acts on, and the (epoch, token) it
    presents: the client's handle, or for a wake the handle it saved."""
    h = world.clients[action[1]]
    assert h is not None
    if action[0] == "wake":
        return h.saved[0], (h.saved[1], h.saved[2])
    return h.key, (h.epoch, h.token)


def fairness_class(
    fair: frozenset[str], action: Action, steps: frozenset[str] = frozenset()
) -> tuple[Any, ...] | None:
    """The weak-fairness class of ``action`` under an ``eventually`` or ``taken``
    invariant's ``fair`` list (None: not assumed fair): (event or world step, entity); an
    owner's event is one class over every client's try; with ``steps`` listed, every
    client's step on the handle it holds (an owner event of ``steps``, its request's send
    and its answer) is one class too, the claim world's ``steps``, unless its event is
    listed itself."""
    kind = action[0]
    if "steps" in fair and (
        (kind == "own" and action[2] in steps and action[2] not in fair)
        or kind in ("send", "ack", "run")
    ):
        return ("steps",)
    if kind == "env" and action[2] in fair:
        return (action[2], action[1])
    if kind in ("take", "resend") and action[-1] in fair:
        return (action[-1], action[2])
    if kind == "own" and action[2] in fair:
        return (action[2], "held")
    if kind in ("clock", "fence") and kind in fair:
        return (kind, action[1])
    return None
