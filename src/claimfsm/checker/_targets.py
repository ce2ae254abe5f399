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
  runs. The one-target model must also (:func:`one_target_liveness`) leave no state
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
"""

from __future__ import annotations

import dataclasses
import functools
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

    def carried(self) -> list[str]:
        """The ``eventually`` properties whose premise held, one way or the other."""
        rest = dict(self.resting)
        return [
            name
            for name, why in self.eventually
            if why is None or (rest.get(name, "") is None and self.determined is None)
        ]


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
    seen = functools.lru_cache(maxsize=1 << 16)(project)  # the same worlds are projected often

    def where(text: str, world: World, action: Action | None = None) -> _Broken:
        found = f"{text}\n  in: {many.show_state(world)}"
        if action is not None:
            found += f"\n  action: {many.show_action(action)} {action!r}"
        return _Broken(found)

    def conjunction(w: World) -> None:
        for p in always:
            if p.holds(w) != all(always_one[p.name](seen(w, t)) for t in targets):
                raise where(f"{p.name} is not the conjunction of its projections", w)

    # The successors of the state being expanded, computed once for the premise and the
    # step check both; and each projection's enabled steps (projections repeat).
    expanding: list[Any] = [None, {}]
    enabled_one: dict[World, list[Action]] = {}

    def next_state(w: World, a: Action) -> World | None:
        nonlocal steps
        after: World | None = (
            expanding[1][a] if w is expanding[0] and a in expanding[1] else many.next_state(w, a)
        )
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
            before_t, seen_t = seen(blank, t), seen(alone, t)
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

    eventually = [p for p in many.properties if p.kind == "eventually"]
    eventually_one = {p.name: p for p in one.properties if p.kind == "eventually"}
    # Where each eventually property's premise broke (None: nowhere yet), and which target
    # and one-target class each of its T-target classes is (a class is one target's).
    broke: dict[str, str | None] = {
        p.name: None
        if p.name in eventually_one and p.trigger is not None
        else "it has no one-target counterpart with a trigger"
        for p in eventually
    }
    classes: dict[str, dict[Any, tuple[int, Any]]] = {p.name: {} for p in eventually}
    # The second way an eventually property carries over (runs come to rest: module text).
    resting: dict[str, str | None] = dict(broke)
    deadlocks: list[str] = []
    determined: list[str] = []

    def enabled(v: World) -> list[Action]:
        found = enabled_one.get(v)
        if found is None:
            found = enabled_one[v] = [a for a in one.actions(v) if one.next_state(v, a) is not None]
        return found

    def target_of(w: World, a: Action) -> int:
        return next(t for t in targets if project_action(w, a, t) is not None)

    def premise(w: World) -> None:
        """Deadlocks and eventually properties: what one state must show (module text)."""
        after = {a: many.next_state(w, a) for a in many.actions(w)}
        expanding[:] = [w, after]
        here = [a for a, w2 in after.items() if w2 is not None]
        views = [seen(w, t) for t in targets]
        there = [enabled(v) for v in views]
        if not deadlocks:
            if not here and any(there):
                deadlocks.append(_at("a state with no step projects onto one with a step", w))
            elif many.may_stop(w) != all(one.may_stop(v) for v in views):
                deadlocks.append(_at("may_stop is not the conjunction of its projections", w))
        if not determined and join(views, w.ghosts) != w:
            determined.append(_at("the state is not made of its projections", w))
        for p in eventually:
            if broke[p.name] is not None and resting[p.name] is not None:
                continue
            q = eventually_one[p.name]
            assert p.trigger is not None and q.trigger is not None
            why = None
            if p.holds(w) != all(q.holds(v) for v in views):
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
        p: Any, q: Any, w: World, here: list[Action], there: list[list[Action]]
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

    def _at(text: str, w: World) -> str:
        return f"{text}\n  in: {many.show_state(w)}"

    def _fair_classes(
        p: Any,
        q: Any,
        w: World,
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
                return _at(f"class {c!r} is fair here and its step not fair on one target", w)
            if known.setdefault(c, mine) != mine:
                return _at(
                    f"fairness class {c!r} is taken on target {known[c][0]} and on target {t}:"
                    " it is not one target's",
                    w,
                )
            mapped[t].add(mine[1])
        for t in targets:
            alone = {c for c in map(fair_one, there[t]) if c is not None}
            if alone != mapped[t]:
                return _at(
                    f"on target {t} the one-target model has the fair classes"
                    f" {sorted(map(repr, alone))} enabled, this state"
                    f" {sorted(map(repr, mapped[t]))}",
                    w,
                )
        return None

    def actions(w: World) -> list[Action]:
        premise(w)
        return list(many.actions(w))

    first = list(one.init_states())
    checked = dataclasses.replace(
        many, actions=actions, next_state=next_state, properties=always, processes=None
    )
    try:
        for w in many.init_states():
            if any(project(w, t) not in first for t in targets):
                raise where("a start does not project onto a start of the one-target model", w)
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


@dataclass(frozen=True)
class OneTargetLiveness:
    """What the one-target model shows of an ``eventually`` property for the carry-over
    (None where the search found no such place). By projection: ``stops`` (a state where
    it is open and some step possible, none fair), ``settles`` (a strongly connected
    region where it is both met and open) and ``takes`` (a fair step an idle worker takes:
    a worker busy on another target, idle in the projection, could take it there and not
    in the whole state). Runs come to rest: ``loops`` (a loop other
    than a step that changes nothing), ``fair_loop`` (a fair step that changes nothing)
    ``idle`` (a state where it is open and no fair step is possible) and ``busy`` (a
    worker holding a claim with no fair step possible: with two targets, it could look
    idle from the other and leave a state with a fair step in a projection and none)."""

    name: str
    stops: str | None
    settles: str | None
    takes: str | None = None
    loops: str | None = None
    fair_loop: str | None = None
    idle: str | None = None
    busy: str | None = None

    @property
    def projects(self) -> bool:
        return self.stops is None and self.settles is None and self.takes is None

    @property
    def rests(self) -> bool:
        return (
            self.loops is None
            and self.fair_loop is None
            and self.idle is None
            and self.busy is None
        )


def one_target_liveness(
    one: Any,
    names: list[str],
    *,
    symmetry: bool = True,
    holders: Callable[[Any], list[int]] | None = None,
    strip: Callable[[Any], Any] = lambda w: w,
) -> list[OneTargetLiveness]:
    """Check, over the whole one-target space of model ``one``, the conditions either way
    of carrying an ``eventually`` property over needs besides the premise (module text;
    :class:`OneTargetLiveness`). With ``symmetry`` the regions are those of the quotient
    graph, which joins every region of the whole graph; a step that stays in its symmetry
    class must change nothing, so a loop of the whole graph is a loop of the quotient.
    ``holders(state)``: the workers holding a claim (the claim model's), each of whose
    steps is an action naming it second. ``strip(state)``: the state without what the
    projections do not carry (the claim model's sticky flags), so that loops are looked
    for in the graph a T-target run projects onto; the properties must not read it."""
    from claimfsm.checker._engine import Property, _regions

    props = {p.name: p for p in one.properties if p.kind == "eventually" and p.name in names}
    fair = {name: p.fair or (lambda a: None) for name, p in props.items()}
    canonical = one.canonical if symmetry and one.canonical is not None else (lambda w: w)
    ids: dict[Any, int] = {}
    succ: list[set[int]] = []
    found: dict[tuple[str, str], str] = {}  # (property or "", what) -> where

    def note(name: str, what: str, text: str) -> None:
        found.setdefault((name, what), text)

    met: list[tuple[bool, ...]] = []  # each node's holds, per property

    def node(k: Any, w: Any) -> int:
        n = ids.get(k)
        holds = tuple(p.holds(w) for p in props.values())
        if n is None:
            n = ids[k] = len(succ)
            succ.append(set())
            met.append(holds)
        elif met[n] != holds:
            note("", "reads", f"a property reads what strip() drops, in: {one.show_state(w)}")
        return n

    def next_state(w: Any, a: Action) -> Any:
        after = one.next_state(w, a)
        if after is not None:
            bare, bare_after = strip(w), strip(after)
            here, there = canonical(bare), canonical(bare_after)
            succ[node(here, w)].add(node(there, after))
            if bare_after == bare:
                for name in props:
                    if fair[name](a) is not None:
                        note(name, "fair_loop", f"{one.show_action(a)} in: {one.show_state(w)}")
            elif here == there:
                note("", "loops", f"{one.show_action(a)} moves within its symmetry class")
        return after

    def watch_open(w: Any) -> bool:
        open_ = [name for name, p in props.items() if not p.holds(w)]
        held = holders(w) if holders is not None else []
        if open_ or holders is not None:
            steps = [a for a in one.actions(w) if one.next_state(w, a) is not None]
            for a in steps if holders is not None else ():
                if a[0] in _TAKES or a[0] == "wake":
                    for name in props:
                        if fair[name](a) is not None:
                            note(
                                name,
                                "takes",
                                f"a fair step an idle worker takes: {one.show_action(a)}",
                            )
            for i in held:
                for name in props:
                    mine = [a for a in steps if a[0] in _HOLDS and a[1] == i]
                    if not any(fair[name](a) is not None for a in mine):
                        note(name, "busy", f"worker {i} has no fair step, in: {one.show_state(w)}")
            for name in open_:
                if not any(fair[name](a) is not None for a in steps):
                    where = f"in: {one.show_state(w)}"
                    note(name, "idle", f"open, and no fair step possible, {where}")
                    if steps:
                        note(name, "stops", f"open, with steps but none fair, {where}")
        return True

    watch = Property("watch_open", "always", watch_open)
    checked = dataclasses.replace(one, next_state=next_state, properties=[watch], processes=None)
    for w in one.init_states():
        node(canonical(strip(w)), w)
    report = Checker(checked).symmetry(symmetry and one.canonical is not None).exhaustive().run()
    assert report.complete

    class _Edges:
        @staticmethod
        def succ(k: int) -> list[int]:
            return list(succ[k])

    states: dict[Any, Any] = {k: w for w, k in ids.items()}
    if ("", "reads") in found:
        for name in props:
            note(name, "settles", found[("", "reads")])
            note(name, "idle", found[("", "reads")])
    regions = [r for r in _regions({i: i for i in range(len(succ))}, _Edges()) if len(r) > 1]  # type: ignore[arg-type]
    if regions:
        shown = one.show_state(states[regions[0][0]])
        note("", "loops", f"a loop through {len(regions[0])} states, e.g. {shown}")
    out = []
    for index, name in enumerate(props):
        for region in regions:
            if len({met[int(k)][index] for k in region}) == 2:  # type: ignore[call-overload]
                note(
                    name,
                    "settles",
                    f"a region of {len(region)} states where it is both met and open, e.g."
                    f" {one.show_state(states[region[0]])}",
                )
                break
        out.append(
            OneTargetLiveness(
                name,
                found.get((name, "stops")),
                found.get((name, "settles")),
                found.get((name, "takes")),
                found.get(("", "loops")),
                found.get((name, "fair_loop")),
                found.get((name, "idle")),
                found.get((name, "busy")),
            )
        )
    return out


#: The bounds the premise is checked at by :func:`by_target`: two targets, one epoch
#: each, the smallest space where two targets share workers (the tests search the same).
PREMISE_BOUNDS = {"workers": 2, "targets": 2, "drafts": 1, "epochs": 1}


@dataclass(frozen=True)
class ByTarget:
    """A check of T targets by one target's (``claimfsm check --targets T --by-target``):
    ``one``, the one-target report at the same bounds; ``premise``, the premise checked
    over ``premise_config``; ``liveness``, the one-target conditions of each ``eventually``
    property whose premise held."""

    targets: int
    one: Any  # Report of the one-target model
    premise: TargetsIndependence
    premise_config: ClaimModelConfig
    liveness: tuple[OneTargetLiveness, ...]

    def not_carried(self) -> dict[str, str]:
        """What does not carry over to T targets, and why (empty: everything does)."""
        out: dict[str, str] = {}
        if self.premise.failure is not None:
            return {"always": f"the premise broke: {self.premise.failure}"}
        if self.premise.deadlocks is not None:
            out["deadlocks"] = self.premise.deadlocks
        projected = dict(self.premise.eventually)
        resting = dict(self.premise.resting)
        carried = self.carried()
        for found in self.liveness:
            if found.name not in carried:
                out[found.name] = "; ".join(self._why(found, projected, resting))
        return out

    def carried(self) -> dict[str, str]:
        """Each ``eventually`` property that carries over, and which way: "by projection"
        or "at rest" (runs come to rest; module text)."""
        if self.premise.failure is not None:
            return {}
        projected = dict(self.premise.eventually)
        resting = dict(self.premise.resting)
        out: dict[str, str] = {}
        for found in self.liveness:
            if projected.get(found.name, "") is None and found.projects:
                out[found.name] = "by projection"
            elif (
                resting.get(found.name, "") is None
                and self.premise.determined is None
                and found.rests
            ):
                out[found.name] = "at rest"
        return out

    def _why(
        self,
        found: OneTargetLiveness,
        projected: dict[str, str | None],
        resting: dict[str, str | None],
    ) -> list[str]:
        """Why neither way carries ``found`` over: the first reason of each."""
        one = (
            projected.get(found.name)
            or (f"a run may stop with it open: {found.stops}" if found.stops else None)
            or found.settles
            or found.takes
        )
        two = (
            resting.get(found.name)
            or self.premise.determined
            or found.loops
            or (f"a fair step changes nothing: {found.fair_loop}" if found.fair_loop else None)
            or found.idle
            or found.busy
        )
        return [f"by projection: {one}", f"at rest: {two}"]

    def outcome(self, prop: Any) -> str:
        """The property's outcome for T targets: the one-target outcome where it carries
        over, else 'not carried over'."""
        outcome = str(self.one.outcome(prop))
        if outcome == "violated":
            return "violated (one target)"
        if prop.name in self.not_carried() or "always" in self.not_carried():
            return "not carried over"
        return outcome

    @property
    def verdict(self) -> str:
        """ok: every property holds (or is found) for T targets; violated: the one-target
        check found a violation or a deadlock; incomplete: not everything carries over or
        the one-target search was cut short."""
        if self.one.violations or self.one.deadlock:
            return "violated"
        if not self.one.complete or not self.premise.complete or self.not_carried():
            return "incomplete"
        return "ok"


def by_target(
    spec: Spec,
    config: ClaimModelConfig,
    *,
    symmetry: bool = True,
    model: Callable[[Spec, ClaimModelConfig], Any] = claim_model,
) -> ByTarget:
    """Check ``config``'s T targets by checking one: the one-target model at the same
    bounds, the premise over two targets (``PREMISE_BOUNDS``, with ``config``'s remote,
    retries and faults), and the one-target conditions of the ``eventually`` properties
    the premise carries (module text). ``model`` builds the models (for tests that
    change one on purpose)."""
    one_config = replace(config, targets=1)
    one = model(spec, one_config)
    report = Checker(one).symmetry(symmetry).run()
    premise_config = replace(config, **PREMISE_BOUNDS)  # type: ignore[arg-type]
    premise = targets_independent(spec, premise_config, symmetry=symmetry, model=model)
    names = [p.name for p in one.properties if p.kind == "eventually"]
    liveness = tuple(
        one_target_liveness(
            one,
            names,
            symmetry=symmetry,
            holders=lambda w: [i for i, wk in enumerate(w.workers) if wk.phase],
            strip=lambda w: w._replace(ghosts=Ghosts()),
        )
        if names
        else ()
    )
    return ByTarget(config.targets, report, premise, premise_config, liveness)
