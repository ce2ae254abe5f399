"""An explicit-state model checker: breadth-first, so every counterexample is a shortest one.

A model is data and functions, not a class to inherit (see :class:`Model`): its initial
states, the actions enabled in a state, the next state for an action (None: disabled), and
named properties. ``always`` properties must hold in every reachable state (a violation is
a *counterexample*); ``sometimes`` properties must hold in at least one (a discovery is an
*example*, and finding none in a complete search shows the model, or a design, cannot do
something it should). ``eventually`` properties are liveness: from every reachable state
where ``trigger`` holds, every path reaches a state where ``holds`` holds, under weak
fairness for the action classes ``fair`` names (an action class that stays enabled is
eventually taken). A violation is a *lasso*: a path to a loop of states where ``holds``
never holds that a fair scheduler may repeat forever, or a path to a state where nothing
more can happen. States must be immutable and hashable.

Symmetry reduction: a model may give ``canonical(state)``, a representative of the state's
class under permutation of interchangeable parts (workers). The checker then visits one
state per class; properties must be symmetric too. Paths stay concrete: each discovery is
a sequence of real actions from an initial state, replayable with :func:`replay`.
"""

from __future__ import annotations

import builtins
import gc
import itertools
import json
import time
from array import array
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from claimfsm.errors import InvalidArgument

if TYPE_CHECKING:
    from claimfsm.checker._packed import Processes

S = TypeVar("S", bound=Hashable)
A = TypeVar("A")


@dataclass(frozen=True)
class Property(Generic[S]):
    name: str
    kind: Literal["always", "sometimes", "eventually"]
    holds: Callable[[S], bool]
    description: str = ""
    #: ``eventually`` only: where the obligation starts (None: the initial states).
    trigger: Callable[[S], bool] | None = None
    #: ``eventually`` only: an action's fairness class (None: not under fairness). Each
    #: class is weakly fair: if some action of it stays enabled, one is eventually taken.
    fair: Callable[[Any], Hashable | None] | None = None
    #: ``eventually`` only: the fairness assumption in words, for reports.
    fairness: str = ""
    #: ``eventually`` only: a run may also stop (stutter forever) in any state where no
    #: action of a fair class is possible, as in TLA+: only fair steps are sure to happen.
    #: False: a run stops only where nothing at all can happen.
    stutter: bool = False


@dataclass(frozen=True)
class Model(Generic[S, A]):
    init_states: Callable[[], Iterable[S]]
    actions: Callable[[S], Iterable[A]]
    next_state: Callable[[S, A], S | None]
    properties: Sequence[Property[S]]
    canonical: Callable[[S], Hashable] | None = None
    show_action: Callable[[A], str] = str
    show_state: Callable[[S], str] = str
    #: States where nothing being enabled is fine (otherwise: a deadlock is reported).
    may_stop: Callable[[S], bool] = lambda state: False
    #: One action may make several state changes (an acquire that first lapses the old
    #: epoch): ``explain(before, action, after)`` gives each as (text, state after it, or
    #: None for ``show_state(after)``), and each is shown as a numbered step of its own.
    explain: Callable[[S, A, S], Sequence[tuple[str, str | None]]] | None = None
    #: How the state splits into a shared part and interchangeable processes' parts, each
    #: action touching the shared part and at most one process's: the checker then runs
    #: the packed search (``_packed``), with the same counts, and reports in these states.
    processes: Processes[S, A] | None = None


def reachable(model: Model[S, A]) -> set[S]:
    """Every state ``model`` reaches, breadth-first, as the model gives them (no symmetry,
    no packing): for a small model's states themselves, in a test or a study of them
    (``bench/worlds_gap.py``); ``Checker`` is the search."""
    seen = set(model.init_states())
    queue = list(seen)
    for state in queue:
        for action in model.actions(state):
            after = model.next_state(state, action)
            if after is not None and after not in seen:
                seen.add(after)
                queue.append(after)
    return seen


def explained(model: Model[S, A], path: Sequence[Step[S, A]]) -> list[tuple[str, str]]:
    """A path as numbered steps (text, state after): step 0 is the start; an action that
    makes several state changes gives one step for each."""
    steps = [("(start)", model.show_state(path[0].state))]
    for before, after in itertools.pairwise(path):
        assert after.action is not None
        if model.explain is None:
            parts: Sequence[tuple[str, str | None]] = [(model.show_action(after.action), None)]
        else:
            parts = model.explain(before.state, after.action, after.state)
        for text, state in parts:
            steps.append((text, model.show_state(after.state) if state is None else state))
    return steps


@dataclass(frozen=True)
class Step(Generic[S, A]):
    action: A | None  # None for the initial state
    state: S


@dataclass(frozen=True)
class Discovery(Generic[S, A]):
    property: Property[S]
    path: tuple[Step[S, A], ...]
    token: str  # replay token: the action indices along the path
    #: A liveness counterexample's loop: the steps from this index on (to the end of the
    #: path, which returns to the state at this index) may repeat forever. None: no loop
    #: (a safety counterexample, an example, or a liveness path that ends where nothing
    #: more can happen).
    loop_from: int | None = None

    @builtins.property  # the field above shadows the builtin in this class body
    def kind(self) -> str:
        return "example" if self.property.kind == "sometimes" else "counterexample"

    def ending(self) -> str:
        """How a liveness counterexample's run goes on for ever without meeting it."""
        if self.loop_from is not None:
            return (
                f"the last {len(self.path) - 1 - self.loop_from} actions repeat forever,"
                " and it never holds"
            )
        if self.property.stutter:
            return (
                "after the last step no step assumed fair is possible, so the run may stop"
                " there, and it never held"
            )
        return "after the last step nothing more can happen, and it never held"


@dataclass
class Report(Generic[S, A]):
    model: Model[S, A]
    states: int = 0  # states generated, duplicates included
    unique: int = 0  # distinct states (classes, with symmetry)
    depth: int = 0  # deepest level reached
    seconds: float = 0.0
    complete: bool = False  # the whole reachable space was explored
    stopped_by: str | None = None  # depth, states or time
    discoveries: dict[str, Discovery[S, A]] = field(default_factory=dict)
    deadlock: tuple[Step[S, A], ...] | None = None
    #: ``sometimes`` properties an engine met without giving the path there (SPIN's search
    #: says that it met one, not how): found, with no example to show.
    reached: set[str] = field(default_factory=set)

    @property
    def states_per_second(self) -> float:
        return self.unique / self.seconds if self.seconds > 0 else 0.0

    def outcome(self, prop: Property[S]) -> str:
        found = prop.name in self.discoveries or prop.name in self.reached
        if prop.kind in ("always", "eventually"):
            return "violated" if found else ("holds" if self.complete else "holds so far")
        return "found" if found else ("never happens" if self.complete else "not found yet")

    @property
    def violations(self) -> list[Property[S]]:
        """Always-properties violated, and sometimes-properties a complete search never met."""
        bad = []
        for p in self.model.properties:
            outcome = self.outcome(p)
            if outcome in ("violated", "never happens"):
                bad.append(p)
        return bad

    @property
    def verdict(self) -> str:
        if self.violations or self.deadlock:
            return "violated"
        return "ok" if self.complete else "incomplete"

    def text(self) -> str:
        m = self.model
        lines = [
            f"states={self.states:,}, unique={self.unique:,}, depth={self.depth}, "
            f"seconds={self.seconds:.2f}, states/s={self.states_per_second:,.0f}"
            + ("" if self.complete else f" (stopped by {self.stopped_by} limit)")
        ]
        for p in m.properties:
            lines.append(f"  {p.kind:<9} {p.name}: {self.outcome(p)}")
        for p in self.violations:
            d = self.discoveries.get(p.name)
            if d is None:
                lines.append(f"\n{p.name} ({p.kind}) never happens: {p.description}")
                continue
            lines.append(f"\ncounterexample for {p.name}: {p.description}")
            if p.kind == "eventually":
                lines.append(f"  (under fairness: {p.fairness or 'none'})")
            lines += _numbered(m, d.path)
            if p.kind == "eventually":
                lines.append("  " + d.ending())
            lines.append(f"replay token: {d.token}")
        if self.deadlock:
            lines.append("\ndeadlock: no action is enabled after")
            lines += _numbered(m, self.deadlock)
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        m = self.model
        return {
            "verdict": self.verdict,
            "states": self.states,
            "unique": self.unique,
            "depth": self.depth,
            "seconds": round(self.seconds, 3),
            "states_per_second": round(self.states_per_second),
            "complete": self.complete,
            "stopped_by": self.stopped_by,
            "properties": {
                p.name: {"kind": p.kind, "outcome": self.outcome(p)} for p in m.properties
            },
            "violations": [
                {
                    "property": p.name,
                    "kind": p.kind,
                    "description": p.description,
                    "steps": _steps(m, self.discoveries[p.name].path)
                    if p.name in self.discoveries
                    else [],
                    "token": self.discoveries[p.name].token if p.name in self.discoveries else None,
                    "loop_from": self.discoveries[p.name].loop_from
                    if p.name in self.discoveries
                    else None,
                }
                for p in self.violations
            ],
            "examples": {
                name: {"steps": _steps(m, d.path), "token": d.token}
                for name, d in self.discoveries.items()
                if d.property.kind == "sometimes"
            },
            "deadlock": _steps(m, self.deadlock) if self.deadlock else None,
        }

    def json(self) -> str:
        return json.dumps(self.as_dict(), indent=2)


def _numbered(model: Model[Any, Any], path: Sequence[Step[Any, Any]]) -> list[str]:
    steps = explained(model, path)
    lines = [f"  0. (start)  {steps[0][1]}"]
    for i, (text, state) in enumerate(steps[1:], start=1):
        lines.append(f"  {i}. {text}")
        lines.append(f"       -> {state}")
    return lines


def _steps(model: Model[Any, Any], path: Sequence[Step[Any, Any]]) -> list[dict[str, Any]]:
    return [
        {"number": n, "action": text, "state": state}
        for n, (text, state) in enumerate(explained(model, path))
    ]


class Checker(Generic[S, A]):
    """Configure fluently, then :meth:`run`: ``Checker(model).symmetry().max_depth(30).run()``."""

    #: Seconds between two calls of the :meth:`progress` report (at most one per check
    #: point: a state in the search one at a time, a chunk of a level in the array search).
    PROGRESS_EVERY = 1.0

    def __init__(self, model: Model[S, A]) -> None:
        self.model = model
        self._symmetry = False
        self._max_depth: int | None = None
        self._max_states: int | None = None
        self._seconds: float | None = None
        self._progress: Callable[[int, int, float], None] | None = None
        self._stop_when_all_found = True
        self._stop_on_violation = False
        self._packed = True
        self._arrays = True

    def symmetry(self, on: bool = True) -> Checker[S, A]:
        if on and self.model.canonical is None:
            raise InvalidArgument("this model has no canonical() for symmetry reduction")
        self._symmetry = on
        return self

    def max_depth(self, depth: int | None) -> Checker[S, A]:
        self._max_depth = depth
        return self

    def max_states(self, states: int | None) -> Checker[S, A]:
        self._max_states = states
        return self

    def time_limit(self, seconds: float | None) -> Checker[S, A]:
        self._seconds = seconds
        return self

    def progress(self, report: Callable[[int, int, float], None] | None) -> Checker[S, A]:
        """Call ``report(unique, depth, seconds)`` about once a second (``PROGRESS_EVERY``)."""
        self._progress = report
        return self

    def stop_on_violation(self, on: bool = True) -> Checker[S, A]:
        """Stop at the first counterexample (it is a shortest one; others may exist)."""
        self._stop_on_violation = on
        return self

    def packed(self, on: bool = True) -> Checker[S, A]:
        """Search the packed model when the model gives ``processes`` (the default); off:
        search the model's own states, for comparison."""
        self._packed = on
        return self

    def arrays(self, on: bool = True) -> Checker[S, A]:
        """Search the packed model a level at a time in numpy arrays (``_arrays``; the
        default where the model's properties read its shared part alone); off: one state
        at a time, for comparison. Counts, paths and verdicts are the same."""
        self._arrays = on
        return self

    def exhaustive(self) -> Checker[S, A]:
        """Explore everything even after every property has a discovery (exact counts)."""
        self._stop_when_all_found = False
        return self

    def run(self) -> Report[S, A]:
        """Search (see the class). Python's cyclic garbage collector is paused meanwhile:
        the search keeps every state alive and makes no reference cycles, so each of the
        collector's passes over the growing set of states would be pure cost."""
        paused = gc.isenabled()
        gc.disable()
        try:
            if self.model.processes is None or not self._packed:
                return self._run(self.model)
            from claimfsm.checker._packed import pack, unpacked

            packing = pack(self.model)
            report: Report[Any, A] | None = None
            if self._arrays and packing.shared_properties:
                from claimfsm.checker._arrays import TooWide, array_search

                try:
                    report = array_search(self, packing)
                except TooWide:
                    report = None  # too many part numbers for its keys
            if report is None:
                report = self._run(packing.model)
            return unpacked(report, self.model, packing.decode)
        finally:
            if paused:
                gc.enable()

    def _decided(self, report: Report[Any, A]) -> str | None:
        """Why the search stops before its next state, by what it has found: every
        property decided, or a counterexample when it stops at the first; else None."""
        if self._stop_when_all_found and len(report.discoveries) == len(report.model.properties):
            return "all properties decided"
        if self._stop_on_violation and any(
            d.property.kind == "always" for d in report.discoveries.values()
        ):
            return "first counterexample"
        return None

    def _run(self, m: Model[Any, A]) -> Report[Any, A]:
        canon: Callable[[Any], Hashable] = (
            m.canonical if self._symmetry and m.canonical is not None else (lambda s: s)
        )
        report: Report[Any, A] = Report(m)
        always = [p for p in m.properties if p.kind == "always"]
        sometimes = [p for p in m.properties if p.kind == "sometimes"]
        eventually = [p for p in m.properties if p.kind == "eventually"]
        # For liveness, the graph, in flat arrays of ints (no object per edge): states are
        # numbered as found; the edges of state i are entries offsets[i] to offsets[i + 1]
        # of ``targets`` (the next state's number) and ``chosen`` (the index of the action
        # among the state's actions: actions are asked of the model again when needed).
        # key -> (parent key, action, the concrete state first reached, depth, number): one
        # look-up per state generated (a nested tuple's hash is not cached, so each costs).
        seen: dict[Hashable, tuple[Hashable | None, A | None, S, int, int]] = {}
        edges: _Graph | None = _Graph(m, seen) if eventually else None
        queue: deque[Hashable] = deque()
        start = time.perf_counter()
        next_progress = start + self.PROGRESS_EVERY

        def path_to(key: Hashable) -> tuple[Step[S, A], ...]:
            return path_from(seen, key)

        def visit(key: Hashable, state: S) -> None:
            for p in always:
                if p.name not in report.discoveries and not p.holds(state):
                    path = path_to(key)
                    report.discoveries[p.name] = Discovery(p, path, _token(m, path))
            for p in sometimes:
                if p.name not in report.discoveries and p.holds(state):
                    path = path_to(key)
                    report.discoveries[p.name] = Discovery(p, path, _token(m, path))

        for state in m.init_states():
            report.states += 1
            key = canon(state)
            if key not in seen:
                seen[key] = (None, None, state, 0, len(seen))
                if edges is not None:
                    edges.number(key)
                visit(key, state)
                queue.append(key)

        actions, next_state, symmetric = m.actions, m.next_state, self._symmetry
        checking = bool(always or sometimes)
        while queue:
            report.stopped_by = self._decided(report)
            if report.stopped_by is not None:
                break
            key = queue.popleft()
            _, _, state, depth, _ = seen[key]
            report.depth = max(report.depth, depth)
            if self._max_depth is not None and depth >= self._max_depth:
                report.stopped_by = "depth"
                continue
            enabled = False
            if edges is not None:
                edges.expand(key)
            generated = 0
            for index, action in enumerate(actions(state)):
                nxt = next_state(state, action)
                if nxt is None:
                    continue
                enabled = True
                generated += 1
                k2 = canon(nxt) if symmetric else nxt
                entry = seen.get(k2)
                if entry is not None:
                    if edges is not None:  # inlined: this is the inner loop
                        edges.targets.append(entry[4])
                        edges.chosen.append(index)
                    continue
                number = len(seen)
                seen[k2] = (key, action, nxt, depth + 1, number)
                if edges is not None:
                    edges.keys.append(k2)
                    edges.targets.append(number)
                    edges.chosen.append(index)
                if checking:
                    visit(k2, nxt)
                queue.append(k2)
            report.states += generated
            if not enabled and report.deadlock is None and not m.may_stop(state):
                report.deadlock = path_to(key)
            now = time.perf_counter()
            if self._max_states is not None and len(seen) >= self._max_states:
                report.stopped_by = "states"
                break
            if self._seconds is not None and now - start >= self._seconds:
                report.stopped_by = "time"
                break
            if self._progress is not None and now >= next_progress:
                self._progress(len(seen), depth, now - start)
                next_progress = now + self.PROGRESS_EVERY
        report.complete = not queue and report.stopped_by is None
        if report.complete and edges is not None:
            for p in eventually:
                found = _liveness(p, seen, edges.done())
                if found is not None:
                    path, loop_from = found
                    report.discoveries[p.name] = Discovery(p, path, _token(m, path), loop_from)
        report.unique = len(seen)
        report.seconds = time.perf_counter() - start
        if report.complete:
            report.depth = max((v[3] for v in seen.values()), default=0)
        return report


def _token(m: Model[Any, Any], path: Sequence[Step[Any, Any]]) -> str:
    """The index of each action among those enabled before it, joined by dots."""
    indices = []
    for before, after in itertools.pairwise(path):
        options = [a for a in m.actions(before.state)]
        indices.append(str(options.index(after.action)))
    init = [s for s in m.init_states()]
    return ".".join([str(init.index(path[0].state)), *indices])


class _Graph:
    """A search's graph for liveness, in flat arrays of ints (see ``Checker._run``); each
    edge's action is found again on demand."""

    def __init__(
        self,
        model: Model[Any, Any],
        seen: dict[Hashable, tuple[Hashable | None, Any, Any, int, int]],
    ) -> None:
        self.model, self.seen = model, seen  # seen[key][4]: the state's number
        self.keys: list[Hashable] = []
        self.offsets = array("Q")
        self.targets = array("I")
        self.chosen = array("H")
        self._out: dict[Hashable, list[tuple[Any, Hashable]]] = {}

    # -- built during the search (states are expanded in the order they are numbered) --
    def number(self, k: Hashable) -> None:
        self.keys.append(k)

    def expand(self, k: Hashable) -> None:
        assert self.seen[k][4] == len(self.offsets), "states are expanded in the order found"
        self.offsets.append(len(self.targets))

    def done(self) -> _Graph:
        while len(self.offsets) <= len(self.keys):
            self.offsets.append(len(self.targets))
        return self

    # -- read by the liveness pass --
    def _span(self, k: Hashable) -> range:
        i = self.seen[k][4]
        return range(self.offsets[i], self.offsets[i + 1])

    def succ(self, k: Hashable) -> list[Hashable]:
        keys, targets = self.keys, self.targets
        return [keys[targets[j]] for j in self._span(k)]

    def out(self, k: Hashable) -> list[tuple[Any, Hashable]]:
        """(action, next key) of every enabled action of ``k`` (asked of the model again:
        kept for the few states a loop is built through, not for every state)."""
        found = self._out.get(k)
        if found is None:
            span = self._span(k)
            actions = list(self.model.actions(self.seen[k][2])) if span else []
            found = [(actions[self.chosen[j]], self.keys[self.targets[j]]) for j in span]
        return found

    def first_stop(
        self, keys: list[Hashable], fairness: Callable[[Any], Hashable | None] | None
    ) -> Hashable | None:
        """The first of ``keys`` where a run may stop: it has no next state, or (given
        ``fairness``, the classes of weak fairness) none of its actions is fair."""
        for k in keys:
            if not self.succ(k) or (
                fairness is not None and all(fairness(a) is None for a, _k2 in self.out(k))
            ):
                return k
        return None

    def keep(self, k: Hashable) -> list[tuple[Any, Hashable]]:
        """``out(k)``, kept: for the searches that build a loop."""
        found = self._out.get(k)
        if found is None:
            found = self._out[k] = self.out(k)
        return found


def _liveness(
    p: Property[Any],
    seen: dict[Hashable, tuple[Hashable | None, Any, Any, int, int]],
    edges: _Graph,
    marked: tuple[set[Hashable], list[Hashable]] | None = None,
) -> tuple[tuple[Step[Any, Any], ...], int | None] | None:
    """A shortest-prefix violation of ``eventually`` property ``p`` in a complete search's
    graph, or None if it holds: a path to a state where nothing more can happen, or a lasso
    whose loop a weakly fair scheduler may repeat forever, all in states where ``p`` does not
    hold, from a state where its trigger does.

    ``marked``: the bad states and the starts (nearest first), when the search has them.

    Weak fairness, per class: a loop is fair if each class is either taken on the loop or
    disabled in one of its states. A strongly connected region of bad states hosts a fair
    loop exactly when that holds of the whole region (a smaller loop is fair only if its
    region is), so the maximal regions (Tarjan's algorithm) decide.
    """
    holds, fair = p.holds, p.fair

    def fairness(action: Any) -> Hashable | None:
        return None if fair is None else fair(action)

    if marked is None:
        bad = {k for k, v in seen.items() if not holds(v[2])}
        trigger = p.trigger
        starts = [
            k for k in bad if (seen[k][0] is None if trigger is None else trigger(seen[k][2]))
        ]
        starts.sort(key=lambda k: seen[k][4])  # nearest first, in the order found
    else:
        bad, starts = marked
    if not starts:
        return None
    # The bad states reachable from a start through bad states, in breadth-first order from
    # the nearest starts, so the prefix found is short.
    via: dict[Hashable, tuple[Hashable | None, Any]] = {k: (None, None) for k in starts}
    queue = deque(starts)
    while queue:
        k = queue.popleft()
        for k2 in edges.succ(k):
            if k2 in bad and k2 not in via:
                via[k2] = (k, None)  # the action is found again for the path shown
                queue.append(k2)

    def lasso_prefix(k: Hashable) -> list[Step[Any, Any]]:
        """The search's path to the start of the bad run, then the bad run to ``k``."""
        tail: list[tuple[Any, Hashable]] = []
        while via[k][0] is not None:
            parent = via[k][0]
            action = next(a for a, k2 in edges.out(parent) if k2 == k)
            tail.append((action, k))
            k = parent
        steps = list(path_from(seen, k))
        for action, key in reversed(tail):
            steps.append(Step(action, seen[key][2]))
        return steps

    # Nothing more can happen in a bad state (with ``stutter``: nothing fair can), so a run
    # may stop there: the obligation is never met.
    stop = edges.first_stop(list(via), fairness if p.stutter else None)
    if stop is not None:
        return tuple(lasso_prefix(stop)), None
    order = {k: i for i, k in enumerate(via)}  # breadth-first: nearer states first
    for region in _regions(via, edges):
        inside = set(region)
        if len(region) == 1 and region[0] not in edges.succ(region[0]):
            continue  # a single state without a self-loop is no loop
        classes_taken: set[Hashable] = set()
        enabled_somewhere: set[Hashable] = set()
        enabled_everywhere: set[Hashable] | None = None
        for k in region:
            here = set()
            for action, k2 in edges.out(k) if fair is not None else ():
                c = fairness(action)
                if c is None:
                    continue
                here.add(c)
                if k2 in inside:
                    classes_taken.add(c)
            enabled_somewhere |= here
            enabled_everywhere = here if enabled_everywhere is None else enabled_everywhere & here
        if enabled_everywhere and not enabled_everywhere <= classes_taken:
            continue  # a class stays enabled and is never taken here: no fair loop
        entry = min(region, key=order.__getitem__)
        prefix = lasso_prefix(entry)
        loop = _loop(entry, inside, edges, seen, fair, classes_taken, enabled_somewhere)
        return tuple(prefix + loop), len(prefix) - 1
    return None


def _regions(nodes: dict[Hashable, Any], edges: _Graph) -> list[list[Hashable]]:
    """The strongly connected regions of ``edges`` restricted to ``nodes`` (Tarjan's
    algorithm, iteratively: the graphs are deeper than Python's recursion limit)."""
    index: dict[Hashable, int] = {}
    low: dict[Hashable, int] = {}
    on_stack: set[Hashable] = set()
    stack: list[Hashable] = []
    found: list[list[Hashable]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work: list[tuple[Hashable, int, list[Hashable]]] = [(root, 0, [])]
        while work:
            k, i, succ = work.pop()
            if i == 0:
                index[k] = low[k] = counter
                counter += 1
                stack.append(k)
                on_stack.add(k)
                succ = [k2 for k2 in edges.succ(k) if k2 in nodes]
            recurse = False
            while i < len(succ):
                k2 = succ[i]
                i += 1
                if k2 not in index:
                    work.append((k, i, succ))
                    work.append((k2, 0, []))
                    recurse = True
                    break
                if k2 in on_stack:
                    low[k] = min(low[k], index[k2])
            if recurse:
                continue
            if low[k] == index[k]:
                region = []
                while True:
                    k2 = stack.pop()
                    on_stack.discard(k2)
                    region.append(k2)
                    if k2 == k:
                        break
                found.append(region)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[k])
    return found


def _loop(
    entry: Hashable,
    inside: set[Hashable],
    edges: _Graph,
    seen: dict[Hashable, tuple[Hashable | None, Any, Any, int, int]],
    fair: Callable[[Any], Hashable | None] | None,
    taken: set[Hashable],
    somewhere: set[Hashable],
) -> list[Step[Any, Any]]:
    """A loop from ``entry`` back to it inside the region that is fair: it takes each
    fairness class the region takes, and passes a state where each class enabled somewhere
    in the region but never taken there is disabled."""

    def fairness_class(action: Any) -> Hashable | None:
        return None if fair is None else fair(action)

    goals: list[tuple[str, Hashable]] = [("take", c) for c in sorted(taken, key=repr)]
    goals += [("disabled", c) for c in sorted(somewhere - taken, key=repr)]
    goals.append(("back", None))

    def meets(goal: tuple[str, Hashable], a: Any, k2: Hashable) -> bool:
        what, c = goal
        if what == "take":
            return fairness_class(a) == c
        if what == "disabled":
            return all(fairness_class(b) != c for b, _ in edges.keep(k2))
        return k2 == entry

    steps: list[Step[Any, Any]] = []
    here = entry
    for goal in goals:
        # The shortest way from here to an edge that meets the goal, inside the region.
        via: dict[Hashable, tuple[Hashable, Any] | None] = {here: None}
        queue = deque([here])
        end: tuple[Hashable, Any, Hashable] | None = None
        while queue and end is None:
            k = queue.popleft()
            for a, k2 in edges.keep(k):
                if k2 not in inside:
                    continue
                if meets(goal, a, k2):
                    end = (k, a, k2)
                    break
                if k2 not in via:
                    via[k2] = (k, a)
                    queue.append(k2)
        assert end is not None, "a strongly connected region reaches each of its states"
        k, a, k2 = end
        part = [(a, k2)]
        while via[k] is not None:
            parent, action = via[k]  # type: ignore[misc]
            part.append((action, k))
            k = parent
        for action, key in reversed(part):
            steps.append(Step(action, seen[key][2]))
        here = k2
    return steps


def path_from(seen: Mapping[Any, tuple[Any, ...]], key: Hashable) -> tuple[Step[Any, Any], ...]:
    """The path to ``key`` in a search's parent map (key -> parent, action, state, ...)."""
    steps = []
    k: Hashable | None = key
    while k is not None:
        parent, action, state, *_ = seen[k]
        steps.append(Step(action, state))
        k = parent
    return tuple(reversed(steps))


def replay(model: Model[S, A], token: str) -> tuple[Step[S, A], ...]:
    """The path a replay token names: the same actions, from the same initial state."""
    try:
        first, *rest = (int(part) for part in token.split("."))
        state = list(model.init_states())[first]
    except (ValueError, IndexError) as exc:
        raise InvalidArgument(f"{token!r} is not a replay token of this model") from exc
    steps: list[Step[S, A]] = [Step(None, state)]
    for index in rest:
        options = list(model.actions(state))
        if not 0 <= index < len(options):
            raise InvalidArgument(f"replay token {token!r} names action {index} of {len(options)}")
        nxt = model.next_state(state, options[index])
        if nxt is None:
            raise InvalidArgument(f"replay token {token!r} names a disabled action")
        state = nxt
        steps.append(Step(options[index], state))
    return tuple(steps)
