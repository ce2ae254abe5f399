"""T targets checked by one target's check (``claimfsm check --targets T --by-target``):
the one-target check, the premise over two targets (``_targets.targets_independent``) and
the one-target conditions each way of carrying an ``eventually`` property over needs
(``_targets`` gives the argument; docs/design.md, "Many targets")."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from claimfsm.checker._engine import Checker
from claimfsm.checker._targets import (
    CLAIM_TARGETS,
    Action,
    Projection,
    TargetsIndependence,
    targets_independent,
)
from claimfsm.spec import Spec


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
    projection: Projection = CLAIM_TARGETS,
) -> list[OneTargetLiveness]:
    """Check, over the whole one-target space of model ``one``, the conditions either way
    of carrying an ``eventually`` property over needs besides the premise (module text;
    :class:`OneTargetLiveness`). With ``symmetry`` the regions are those of the quotient
    graph, which joins every region of the whole graph; a step that stays in its symmetry
    class must change nothing, so a loop of the whole graph is a loop of the quotient.
    ``holders(state)``: the workers holding a claim (the claim model's), each of whose
    steps is an action naming it second; ``projection`` tells an idle worker's take and a
    holder's step among the actions (the claim world's by default). ``strip(state)``:
    the state without what the projections do not carry (the sticky flags), so that loops
    are looked for in the graph a T-target run projects onto; the properties must not
    read it."""
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
                if projection.takes(a):
                    for name in props:
                        if fair[name](a) is not None:
                            note(
                                name,
                                "takes",
                                f"a fair step an idle worker takes: {one.show_action(a)}",
                            )
            for i in held:
                for name in props:
                    mine = [a for a in steps if projection.holds_step(a, i)]
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


@dataclass(frozen=True)
class ByTarget:
    """A check of T targets by one target's (``claimfsm check --targets T --by-target``):
    ``one``, the one-target report at the same bounds; ``premise``, the premise checked
    over ``premise_config``; ``liveness``, the one-target conditions of each ``eventually``
    property whose premise held."""

    targets: int
    one: Any  # Report of the one-target model
    premise: TargetsIndependence
    premise_config: Any
    liveness: tuple[OneTargetLiveness, ...]
    #: the premise's bounds in words, and how a key is seen (the claim world's targets by
    #: default): what an ``eventually`` property speaks of, what a key is called
    premise_words: str = ""
    projection: Projection = CLAIM_TARGETS

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
            if projected.get(found.name, "") is None and self._projects(found):
                out[found.name] = "by projection"
            elif (
                resting.get(found.name, "") is None
                and self.premise.determined is None
                and found.rests
            ):
                out[found.name] = "at rest"
        return out

    def _projects(self, found: OneTargetLiveness) -> bool:
        """The one-key conditions of carrying ``found`` over by projection: of every key,
        as :attr:`OneTargetLiveness.projects` says. Of key 0 alone, a run that never meets
        it projects onto key 0 as a fair one-key run that never does, or one that stops
        for good where no fair step is possible; the one-key check finds the first, and,
        where the property lets a run stop so (``stutter``), the second; else that must
        not happen (``stops``). Only key 0's projection need be met, so a region both met
        and open (``settles``) is no obstacle. A fair step an idle worker takes
        (``takes``) stays one, as for every key."""
        if self.projection.scope == "first":
            stutters = any(q.stutter for q in self.one.model.properties if q.name == found.name)
            return found.takes is None and (stutters or found.stops is None)
        return found.projects

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
            or (found.settles if self.projection.scope == "every" else None)
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
            return f"violated (one {self.projection.key_word})"
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
    config: Any,
    *,
    symmetry: bool = True,
    model: Callable[[Spec, Any], Any] | None = None,
    projection: Projection = CLAIM_TARGETS,
) -> ByTarget:
    """Check ``config``'s T keys (the claim world's targets; ``projection`` says how
    another world is seen from one key) by checking one: the one-key model at the same
    bounds, the premise over two keys (``Projection.premise_config``: two workers, one
    epoch each, with ``config``'s remote, retries and faults), and the one-key conditions
    of the ``eventually`` properties the premise carries (module text). ``model`` builds
    the models (for tests that change one on purpose; default: the projection's)."""
    pr = projection
    build = model or pr.model
    one = build(spec, pr.with_keys(config, 1))
    report = Checker(one).symmetry(symmetry).run()
    premise_config = pr.premise_config(spec, config)
    premise = targets_independent(
        spec, premise_config, symmetry=symmetry, model=build, projection=pr
    )
    names = [p.name for p in one.properties if p.kind == "eventually"]
    liveness = tuple(
        one_target_liveness(
            one,
            names,
            symmetry=symmetry,
            holders=pr.holders,
            strip=pr.strip,
            projection=pr,
        )
        if names
        else ()
    )
    return ByTarget(
        pr.keys(spec, config),
        report,
        premise,
        premise_config,
        liveness,
        pr.describe(spec, premise_config),
        pr,
    )
