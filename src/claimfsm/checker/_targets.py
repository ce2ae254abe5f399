"""Targets are independent in the claim model: one target's check covers any number of them.

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
property, it holds for every number of targets. The argument covers the ``always``
properties only: liveness (``eventually``) and deadlock freedom are not carried over (a
worker busy on another target is not idle, so fairness on one target does not project).

:func:`targets_independent` checks the premise, step by step, over the whole state
space of a T-target model within its bounds: each step's projection onto each target is
either a stutter or a step the one-target model takes from the projected state, to the
projected successor; the flags combine by "or"; and each ``always`` property of the
T-target state is the conjunction of its projections'. A model change that couples
targets fails it (a test shows one).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from claimfsm.checker._claim import (
    OWNER_STEPS,
    ClaimModelConfig,
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
class TargetsIndependence:
    """What :func:`targets_independent` checked: ``states`` whose every step was projected
    onto every target (classes, under worker symmetry), ``steps`` in all, whether that was
    every reachable state (``complete``: no ``max_states`` cut), and ``failure``, where the
    premise broke (None: nowhere)."""

    states: int
    steps: int
    complete: bool = True
    failure: str | None = None


class _Broken(Exception):
    """The premise broke: where, in words."""


def targets_independent(
    spec: Spec,
    config: ClaimModelConfig,
    *,
    max_states: int | None = None,
    symmetry: bool = True,
    model: Callable[[Spec, ClaimModelConfig], Any] = claim_model,
) -> TargetsIndependence:
    """Check, over every reachable state of ``config`` (up to ``max_states``), that the
    claim model's targets are independent (the module's premise). The checker's own
    search explores the T-target model; every step it takes is checked on the way.
    ``model`` builds the model, the one-target one included (for tests that break the
    premise on purpose). With ``symmetry``, one state of each class under worker
    permutation is checked: the workers are interchangeable and projection commutes with
    permuting them."""
    many = model(spec, config)
    one = model(spec, replace(config, targets=1))
    targets = range(config.targets)
    zero = Ghosts()
    always = [p for p in many.properties if p.kind == "always"]
    always_one = {p.name: p.holds for p in one.properties if p.kind == "always"}
    if {p.name for p in always} != set(always_one):
        differ = f"the properties differ: {[p.name for p in always]} and {sorted(always_one)}"
        return TargetsIndependence(0, 0, False, differ)
    steps = 0

    def where(text: str, world: World, action: Action | None = None) -> _Broken:
        found = f"{text}\n  in: {many.show_state(world)}"
        if action is not None:
            found += f"\n  action: {many.show_action(action)} {action!r}"
        return _Broken(found)

    def conjunction(w: World) -> None:
        for p in always:
            if p.holds(w) != all(always_one[p.name](project(w, t)) for t in targets):
                raise where(f"{p.name} is not the conjunction of its projections", w)

    def next_state(w: World, a: Action) -> World | None:
        nonlocal steps
        after: World | None = many.next_state(w, a)
        blank = w._replace(ghosts=zero)
        alone = many.next_state(blank, a)  # the flags this step sets on its own
        if (after is None) != (alone is None):
            raise where("the step depends on the flags", w, a)
        if after is None or alone is None:
            return after
        steps += 1
        if after._replace(ghosts=zero) != alone._replace(ghosts=zero):
            raise where("the step depends on the flags", w, a)
        if after.ghosts != Ghosts(*(x or y for x, y in zip(w.ghosts, alone.ghosts, strict=True))):
            raise where("the step's flags do not combine by or", w, a)
        acting = 0
        for t in targets:
            before_t, seen_t = project(blank, t), project(alone, t)
            b = project_action(w, a, t)
            if b is None:
                if seen_t._replace(ghosts=zero) != before_t:
                    raise where(f"a step on another target changes target {t}", w, a)
                continue
            acting += 1
            if b not in list(one.actions(before_t)):
                raise where(f"the one-target model cannot take it on target {t}", w, a)
            if one.next_state(before_t, b) != seen_t:
                raise where(f"the one-target model's step differs on target {t}", w, a)
        if acting != 1:
            raise where(f"the step acts on {acting} targets, not one", w, a)
        conjunction(after)
        return after

    first = list(one.init_states())
    checked = dataclasses.replace(many, next_state=next_state, properties=always, processes=None)
    try:
        for w in many.init_states():
            if any(project(w, t) not in first for t in targets):
                raise where("a start does not project onto a start of the one-target model", w)
            conjunction(w)
        report = Checker(checked).symmetry(symmetry).exhaustive().max_states(max_states).run()
    except _Broken as broken:
        return TargetsIndependence(0, steps, False, str(broken))
    return TargetsIndependence(report.unique, steps, report.complete)
