"""Targets are independent in the claim model (and entities in a lifecycle's): one target's
check covers any number of them.

Every action of the claim model names one target and at most one worker, and reads and
writes that target's claim, drafts and remote alone (an acquire lapses its own target's
epoch, never another's). So a run with T targets, seen from one target t, is a run of
the one-target model with the same workers, drafts, epochs, retries, remote and faults:

- a worker holding a claim on another target looks idle from t, and a worker's saved
  handle on another target is not seen (from t, that worker is one that has not crashed);
- a step on another target changes nothing t can see (a stutter);
- the sticky flags the safety properties read (``Ghosts``) are set by one target's step,
  and each is "some target's step did this": the flags of t's projection are those t's
  own steps set.

Each ``always`` property is "for every target": of the claim row, the drafts and the
remote of one target, or a flag. Hence, if the one-target check proves every ``always``
property, it holds for every number of targets.

Deadlock freedom and an ``eventually`` property carry over too, where more of the premise
holds (``deadlocks`` and ``eventually`` in :class:`TargetsIndependence`; docs/design.md
"Many targets" gives the argument):

- deadlocks: a state with no step has no step in any projection either, and nothing
  being enabled is fine in it exactly when it is fine in every projection;
- an ``eventually`` property: it holds in a state exactly when it holds in every
  projection; its obligation starts exactly when it starts in some projection, and is
  open in a projection only where it has started there; each of its fairness classes is
  the class of one target's steps; and the classes enabled on a target are the classes
  the one-target model has enabled in the projection, so a fair run projects onto fair
  runs. The one-target model must also (``_by_target.one_target_liveness``) leave no state
  where the obligation is open and some step is possible but no fair one (``stops``), and
  no strongly connected region where it is both open and met (``settles``), so that each
  target's projection ends up met for good, and so all of them at once.

A property whose fairness classes are not one target's (the claim's
``free_target_is_acquired``: some worker takes a step of its dispatch) may carry over a
second way, because runs come to rest: every state is made of its projections
(:func:`join`); the one-target model has no loop but a step that changes nothing, no fair
step changes nothing, and where the obligation is open some fair step is possible; a
worker holding a claim always has a fair step; and a step is fair exactly when its
projection is. Then a T-target loop changes no projection, so no state: a fair run comes
to rest in a state with no fair step, and there no projection is open, so neither is
the state. A fair step an idle worker takes (acquiring) rules out the first way: a worker
busy on another target looks idle in the projection, where it could take it.

:func:`targets_independent` checks the premise, step by step, over the whole state
space of a T-target model within its bounds: each step's projection onto each target is
either a stutter or a step the one-target model takes from the projected state, to the
projected successor; the flags combine by "or"; and each ``always`` property of the
T-target state is the conjunction of its projections'. A model change that couples
targets fails it (a test shows one).

All of it reads a world through a :class:`Projection`: the claim world's is
:data:`CLAIM_TARGETS`; the world of any declared lifecycle has its own
(``_entity_targets``), whose ``eventually`` properties speak of entity 0 alone
(``Projection.scope``): there the premise asks that a state meet the property where its
projection onto entity 0 does, that the obligation start there where the state's does,
and that the fairness classes be one entity's, so that a run that never meets it
projects onto entity 0 as one that never does, fair or stopping where no fair step is
possible; runs at rest carry one over with the first of those in place of "met exactly
where every projection is" (docs/design.md, "Many targets").
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from claimfsm.checker._claim import (
    OWNER_STEPS,
    Ghosts,
    Worker,
    World,
    claim_model,
)
from claimfsm.checker._engine import Checker
from claimfsm.spec import Event, Spec

Action = tuple[Any, ...]

#: Actions whose second item is the target (the world's own steps).
_TARGET_FIRST = frozenset(
    {"land", "edit", "approve", "create", "lease_lapses", "sweep", Event.RECONCILE}
)
#: Actions an idle worker takes on a target it names (third item).
_TAKES = frozenset({Event.ACQUIRE, Event.RETRY})
#: A worker's steps on the claim it holds (the target is the worker's).
_HOLDS = OWNER_STEPS | {"send", "ack", "crash"}


def project(world: World, target: int) -> World:
    """``world`` as the one-target model sees ``target`` (numbered 0 there); the flags are
    kept as they are."""

    def worker(wk: Worker) -> Worker:
        saved = (0, *wk.saved[1:]) if wk.saved and wk.saved[0] == target else ()
        if wk.phase and wk.target == target:
            return Worker(wk.phase, 0, wk.epoch, wk.token, saved, wk.key)
        return Worker("", -1, 0, 0, saved)

    return World(
        (world.targets[target],),
        (world.drafts[target],),
        tuple(worker(wk) for wk in world.workers),
        (world.remote[target],),
        world.ghosts,
    )


def join(views: list[World], ghosts: Ghosts) -> World:
    """The T-target world whose projections are ``views`` (the inverse of :func:`project`
    where each worker holds a claim on one target at most)."""
    workers = []
    for i in range(len(views[0].workers)):
        wk = Worker()
        saved: tuple[int, ...] = ()
        for t, v in enumerate(views):
            seen = v.workers[i]
            if seen.phase:
                wk = Worker(seen.phase, t, seen.epoch, seen.token, (), seen.key)
            if seen.saved:
                saved = (t, *seen.saved[1:])
        workers.append(wk._replace(saved=saved))
    return World(
        tuple(v.targets[0] for v in views),
        tuple(v.drafts[0] for v in views),
        tuple(workers),
        tuple(v.remote[0] for v in views),
        ghosts,
    )


def project_action(world: World, action: Action, target: int) -> Action | None:
    """The one-target model's action that ``action`` is from ``target``'s side, or None
    when it acts on another target."""
    kind = action[0]
    if kind in _TARGET_FIRST:
        return (kind, 0, *action[2:]) if action[1] == target else None
    if kind in _TAKES:
        return (kind, action[1], 0, *action[3:]) if action[2] == target else None
    wk = world.workers[action[1]]
    if kind == "wake":
        return action if wk.saved[0] == target else None
    if kind in _HOLDS:
        return action if wk.target == target else None
    raise ValueError(f"the target projection does not know the claim model's action {action!r}")


@dataclass(frozen=True)
class Projection:
    """A checker world seen from one of its keys (the claim world's targets, the entities
    of a declared lifecycle's world): what the carry-over reads of its worlds, actions
    and bounds. The claim world's is :data:`CLAIM_TARGETS`; a lifecycle's,
    ``claimfsm.checker._entity_targets.ENTITY_KEYS``."""

    #: The model of a declaration at some bounds (a config).
    model: Callable[[Spec, Any], Any]
    #: How many keys a config has, and the config with ``n`` keys.
    keys: Callable[[Spec, Any], int]
    with_keys: Callable[[Any, int], Any]
    #: The config the premise is checked at (two keys that share two workers, one epoch
    #: each: the smallest space where keys share workers), and its words.
    premise_config: Callable[[Spec, Any], Any]
    describe: Callable[[Spec, Any], str]
    #: The world as key ``t``'s one-key model sees it (numbered 0 there; the sticky flags
    #: kept as they are), and its inverse: the world of these views with ``world``'s flags.
    project: Callable[[Any, int], Any]
    join: Callable[[list[Any], Any], Any]
    #: The one-key model's action that ``action`` is from key ``t``'s side (None: it acts
    #: on another key).
    project_action: Callable[[Any, Action, int], Action | None]
    #: The world with its sticky flags cleared; its flags; two worlds' flags or-ed.
    strip: Callable[[Any], Any]
    flags: Callable[[Any], Any]
    merged: Callable[[Any, Any], Any]
    #: The workers holding a handle; whether an action is an idle worker's step on a key
    #: it names (a take, a wake-up); whether it is worker ``i``'s step on its handle.
    holders: Callable[[Any], list[int]]
    takes: Callable[[Action], bool]
    holds_step: Callable[[Action, int], bool]
    #: What an ``eventually`` property speaks of: "every" key (met where every key's is,
    #: open where some key's is: the claim world's) or key 0 alone ("first": a declared
    #: lifecycle's, checked for entity 0 since the entities start alike and every action
    #: treats them alike).
    scope: str = "every"
    #: What a key is called.
    key_word: str = "target"


def _claim_premise(spec: Spec, config: Any) -> Any:
    return replace(config, workers=2, targets=2, drafts=1, epochs=1)


CLAIM_TARGETS = Projection(
    model=claim_model,
    keys=lambda spec, config: config.targets,
    with_keys=lambda config, n: replace(config, targets=n),
    premise_config=_claim_premise,
    describe=lambda spec, c: (
        f"{c.workers} workers, {c.targets} targets, {c.drafts} draft, {c.epochs} epoch per target"
    ),
    project=project,
    join=lambda views, world: join(views, world.ghosts),
    project_action=project_action,
    strip=lambda w: w._replace(ghosts=Ghosts()),
    flags=lambda w: w.ghosts,
    merged=lambda a, b: Ghosts(*(x or y for x, y in zip(a, b, strict=True))),
    holders=lambda w: [i for i, wk in enumerate(w.workers) if wk.phase],
    takes=lambda a: a[0] in _TAKES or a[0] == "wake",
    holds_step=lambda a, i: a[0] in _HOLDS and a[1] == i,
)


@dataclass(frozen=True)
class TargetsIndependence:
    """What :func:`targets_independent` checked: ``states`` whose every step was projected
    onto every target (classes, under worker symmetry), ``steps`` in all, whether that was
    every reachable state (``complete``: no ``max_states`` cut), and ``failure``, where the
    premise broke (None: nowhere). ``deadlocks`` and ``eventually`` (property name: None
    where its premise held, else where it broke) say whether deadlock freedom and each
    ``eventually`` property carry over from one target (the module's text)."""

    states: int
    steps: int
    complete: bool = True
    failure: str | None = None
    deadlocks: str | None = None
    eventually: tuple[tuple[str, str | None], ...] = ()
    #: The premise of the second way (runs come to rest), per property, and whether every
    #: state is made of its projections, which that way needs too.
    resting: tuple[tuple[str, str | None], ...] = ()
    determined: str | None = None


class _Broken(Exception):
    """The premise broke: where, in words."""


def targets_independent(
    spec: Spec,
    config: Any,
    *,
    max_states: int | None = None,
    symmetry: bool = True,
    model: Callable[[Spec, Any], Any] | None = None,
    projection: Projection = CLAIM_TARGETS,
) -> TargetsIndependence:
    """Check, over every reachable state of ``config`` (up to ``max_states``), that the
    world's keys (the claim model's targets by default; ``projection`` says how another
    world is seen from one key) are independent (the module's premise). The checker's
    own search explores the T-key model; every step it takes is checked on the way.
    ``model`` builds the model, the one-key one included (for tests that break the
    premise on purpose; default: the projection's). With ``symmetry``, one state of each
    class under worker permutation is checked: the workers are interchangeable and
    projection commutes with permuting them."""
    pr = projection
    build = model or pr.model
    many = build(spec, config)
    one = build(spec, pr.with_keys(config, 1))
    targets = range(pr.keys(spec, config))
    first_only = pr.scope == "first"
    always = [p for p in many.properties if p.kind == "always"]
    always_one = {p.name: p.holds for p in one.properties if p.kind == "always"}
    if {p.name for p in always} != set(always_one):
        differ = f"the properties differ: {[p.name for p in always]} and {sorted(always_one)}"
        return TargetsIndependence(0, 0, False, differ)
    steps = 0
    seen = functools.lru_cache(maxsize=1 << 16)(pr.project)  # the same worlds recur often
    project_action = pr.project_action

    kw = pr.key_word

    def where(text: str, world: Any, action: Action | None = None) -> _Broken:
        found = f"{text}\n  in: {many.show_state(world)}"
        if action is not None:
            found += f"\n  action: {many.show_action(action)} {action!r}"
        return _Broken(found)

    def conjunction(w: Any) -> None:
        for p in always:
            if p.holds(w) != all(always_one[p.name](seen(w, t)) for t in targets):
                raise where(f"{p.name} is not the conjunction of its projections", w)

    # The successors of the state being expanded, computed once for the premise and the
    # step check both; and each projection's enabled steps (projections repeat).
    expanding: list[Any] = [None, {}]
    enabled_one: dict[Any, list[Action]] = {}

    def next_state(w: Any, a: Action) -> Any:
        nonlocal steps
        after: Any = (
            expanding[1][a] if w is expanding[0] and a in expanding[1] else many.next_state(w, a)
        )
        blank = pr.strip(w)
        alone = many.next_state(blank, a)  # the flags this step sets on its own
        if (after is None) != (alone is None):
            raise where("the step depends on the flags", w, a)
        if after is None or alone is None:
            return after
        steps += 1
        if pr.strip(after) != pr.strip(alone):
            raise where("the step depends on the flags", w, a)
        if pr.flags(after) != pr.merged(pr.flags(w), pr.flags(alone)):
            raise where("the step's flags do not combine by or", w, a)
        acting = 0
        for t in targets:
            before_t, seen_t = seen(blank, t), seen(alone, t)
            b = project_action(w, a, t)
            if b is None:
                if pr.strip(seen_t) != before_t:
                    raise where(f"a step on another {pr.key_word} changes {pr.key_word} {t}", w, a)
                continue
            acting += 1
            if b not in list(one.actions(before_t)):
                raise where(f"the one-{kw} model cannot take it on {kw} {t}", w, a)
            if one.next_state(before_t, b) != seen_t:
                raise where(f"the one-{kw} model's step differs on {kw} {t}", w, a)
        if acting != 1:
            raise where(f"the step acts on {acting} {kw}s, not one", w, a)
        conjunction(after)
        return after

    eventually = [p for p in many.properties if p.kind == "eventually"]
    eventually_one = {p.name: p for p in one.properties if p.kind == "eventually"}
    # Where each eventually property's premise broke (None: nowhere yet), and which target
    # and one-target class each of its T-target classes is (a class is one target's).
    broke: dict[str, str | None] = {
        p.name: None
        if p.name in eventually_one and p.trigger is not None
        else f"it has no one-{kw} counterpart with a trigger"
        for p in eventually
    }
    classes: dict[str, dict[Any, tuple[int, Any]]] = {p.name: {} for p in eventually}
    # The second way an eventually property carries over (runs come to rest: module text).
    resting: dict[str, str | None] = dict(broke)
    deadlocks: list[str] = []
    determined: list[str] = []

    def enabled(v: Any) -> list[Action]:
        found = enabled_one.get(v)
        if found is None:
            found = enabled_one[v] = [a for a in one.actions(v) if one.next_state(v, a) is not None]
        return found

    def target_of(w: Any, a: Action) -> int:
        return next(t for t in targets if project_action(w, a, t) is not None)

    def premise(w: Any) -> None:
        """Deadlocks and eventually properties: what one state must show (module text)."""
        after = {a: many.next_state(w, a) for a in many.actions(w)}
        expanding[:] = [w, after]
        here = [a for a, w2 in after.items() if w2 is not None]
        views = [seen(w, t) for t in targets]
        there = [enabled(v) for v in views]
        if not deadlocks:
            if not here and any(there):
                deadlocks.append(_at("a state with no step projects onto one with a step", w))
            elif not here and not many.may_stop(w) and all(one.may_stop(v) for v in views):
                # (only here does it matter: a deadlock must project onto one)
                deadlocks.append(
                    _at("a state with no step may not stop where each projection may", w)
                )
        if not determined and pr.join(views, w) != w:
            determined.append(_at("the state is not made of its projections", w))
        for p in eventually:
            if broke[p.name] is not None and resting[p.name] is not None:
                continue
            q = eventually_one[p.name]
            assert p.trigger is not None and q.trigger is not None
            why = None
            if first_only:  # of key 0 alone: a run that never meets it projects onto one
                if q.holds(views[0]) and not p.holds(w):
                    why = _at(f"its projection onto {kw} 0 meets it where the state does not", w)
                elif p.trigger(w) and not q.trigger(views[0]):
                    why = _at(f"it starts where its projection onto {kw} 0 does not", w)
            elif p.holds(w) != all(q.holds(v) for v in views):
                why = _at("it does not hold exactly where every projection does", w)
            elif p.trigger(w) != any(q.trigger(v) for v in views):
                why = _at("it does not start exactly where some projection does", w)
            elif any(not q.holds(v) and not q.trigger(v) for v in views):
                why = _at("a projection has it open where it has not started", w)
            if broke[p.name] is None:
                broke[p.name] = why or _fair_classes(p, q, w, here, there, classes[p.name])
            if resting[p.name] is None:
                resting[p.name] = why or _fair_somewhere(p, q, w, here, there)

    def _fair_somewhere(
        p: Any, q: Any, w: Any, here: list[Action], there: list[list[Action]]
    ) -> str | None:
        """Runs come to rest: a step is fair exactly when its projection is, and a fair step
        possible in some projection means one is possible here."""
        fair, fair_one = p.fair or (lambda a: None), q.fair or (lambda a: None)
        for a in here:
            b = project_action(w, a, target_of(w, a))
            if (fair(a) is None) != (fair_one(b) is None):
                return _at(f"{many.show_action(a)} is fair in one model and not the other", w)
        if any(fair_one(b) is not None for steps in there for b in steps) and all(
            fair(a) is None for a in here
        ):
            return _at("a projection has a fair step and this state none", w)
        return None

    def _at(text: str, w: Any) -> str:
        return f"{text}\n  in: {many.show_state(w)}"

    def _fair_classes(
        p: Any,
        q: Any,
        w: Any,
        here: list[Action],
        there: list[list[Action]],
        known: dict[Any, tuple[int, Any]],
    ) -> str | None:
        fair, fair_one = p.fair or (lambda a: None), q.fair or (lambda a: None)
        mapped: list[set[Any]] = [set() for _ in targets]
        for a in here:
            c = fair(a)
            if c is None:
                continue
            t = target_of(w, a)
            b = project_action(w, a, t)
            mine = (t, fair_one(b))
            if mine[1] is None:
                return _at(f"class {c!r} is fair here and its step not fair on one {kw}", w)
            if known.setdefault(c, mine) != mine:
                return _at(
                    f"fairness class {c!r} is taken on {kw} {known[c][0]} and on {kw} {t}:"
                    f" it is not one {kw}'s",
                    w,
                )
            mapped[t].add(mine[1])
        for t in targets:
            alone = {c for c in map(fair_one, there[t]) if c is not None}
            if alone != mapped[t]:
                return _at(
                    f"on {kw} {t} the one-{kw} model has the fair classes"
                    f" {sorted(map(repr, alone))} enabled, this state"
                    f" {sorted(map(repr, mapped[t]))}",
                    w,
                )
        return None

    def actions(w: Any) -> list[Action]:
        premise(w)
        return list(many.actions(w))

    first = list(one.init_states())
    checked = dataclasses.replace(
        many, actions=actions, next_state=next_state, properties=always, processes=None
    )
    try:
        for w in many.init_states():
            if any(pr.project(w, t) not in first for t in targets):
                raise where(f"a start does not project onto a start of the one-{kw} model", w)
            conjunction(w)
        report = Checker(checked).symmetry(symmetry).exhaustive().max_states(max_states).run()
    except _Broken as broken:
        return TargetsIndependence(0, steps, False, str(broken))
    return TargetsIndependence(
        report.unique,
        steps,
        report.complete,
        deadlocks=deadlocks[0] if deadlocks else None,
        eventually=tuple(broke.items()),
        resting=tuple(resting.items()),
        determined=determined[0] if determined else None,
    )
