"""An explicit-state model checker: breadth-first, so every counterexample is a shortest one.

A model is data and functions, not a class to inherit (see :class:`Model`): its initial
states, the actions enabled in a state, the next state for an action (None: disabled), and
named properties. ``always`` properties must hold in every reachable state (a violation is
a *counterexample*); ``sometimes`` properties must hold in at least one (a discovery is an
*example*, and finding none in a complete search shows the model, or a design, cannot do
something it should). States must be immutable and hashable.

Symmetry reduction: a model may give ``canonical(state)``, a representative of the state's
class under permutation of interchangeable parts (workers). The checker then visits one
state per class; properties must be symmetric too. Paths stay concrete: each discovery is
a sequence of real actions from an initial state, replayable with :func:`replay`.
"""

from __future__ import annotations

import builtins
import itertools
import json
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from claimfsm.errors import InvalidArgument

S = TypeVar("S", bound=Hashable)
A = TypeVar("A")


@dataclass(frozen=True)
class Property(Generic[S]):
    name: str
    kind: Literal["always", "sometimes"]
    holds: Callable[[S], bool]
    description: str = ""


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

    @builtins.property  # the field above shadows the builtin in this class body
    def kind(self) -> str:
        return "counterexample" if self.property.kind == "always" else "example"


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

    @property
    def states_per_second(self) -> float:
        return self.unique / self.seconds if self.seconds > 0 else 0.0

    def outcome(self, prop: Property[S]) -> str:
        found = prop.name in self.discoveries
        if prop.kind == "always":
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
            lines += _numbered(m, d.path)
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

    def __init__(self, model: Model[S, A]) -> None:
        self.model = model
        self._symmetry = False
        self._max_depth: int | None = None
        self._max_states: int | None = None
        self._seconds: float | None = None
        self._progress: Callable[[int, int, float], None] | None = None
        self._stop_when_all_found = True
        self._stop_on_violation = False

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
        """Call ``report(unique, depth, seconds)`` about once a second."""
        self._progress = report
        return self

    def stop_on_violation(self, on: bool = True) -> Checker[S, A]:
        """Stop at the first counterexample (it is a shortest one; others may exist)."""
        self._stop_on_violation = on
        return self

    def exhaustive(self) -> Checker[S, A]:
        """Explore everything even after every property has a discovery (exact counts)."""
        self._stop_when_all_found = False
        return self

    def run(self) -> Report[S, A]:
        m = self.model
        canon: Callable[[S], Hashable] = (
            m.canonical if self._symmetry and m.canonical is not None else (lambda s: s)
        )
        report: Report[S, A] = Report(m)
        always = [p for p in m.properties if p.kind == "always"]
        sometimes = [p for p in m.properties if p.kind == "sometimes"]
        # key -> (parent key, action, the concrete state first reached, depth)
        seen: dict[Hashable, tuple[Hashable | None, A | None, S, int]] = {}
        queue: deque[Hashable] = deque()
        start = time.perf_counter()
        next_progress = start + 1.0

        def path_to(key: Hashable) -> tuple[Step[S, A], ...]:
            return path_from(seen, key)

        def visit(key: Hashable, state: S) -> None:
            for p in always:
                if p.name not in report.discoveries and not p.holds(state):
                    path = path_to(key)
                    report.discoveries[p.name] = Discovery(p, path, self._token(path))
            for p in sometimes:
                if p.name not in report.discoveries and p.holds(state):
                    path = path_to(key)
                    report.discoveries[p.name] = Discovery(p, path, self._token(path))

        for state in m.init_states():
            report.states += 1
            key = canon(state)
            if key not in seen:
                seen[key] = (None, None, state, 0)
                visit(key, state)
                queue.append(key)

        all_found = len(m.properties)
        while queue:
            if self._stop_when_all_found and len(report.discoveries) == all_found:
                report.stopped_by = "all properties decided"
                break
            if self._stop_on_violation and any(
                d.property.kind == "always" for d in report.discoveries.values()
            ):
                report.stopped_by = "first counterexample"
                break
            key = queue.popleft()
            _, _, state, depth = seen[key]
            report.depth = max(report.depth, depth)
            if self._max_depth is not None and depth >= self._max_depth:
                report.stopped_by = "depth"
                continue
            enabled = False
            for action in m.actions(state):
                nxt = m.next_state(state, action)
                if nxt is None:
                    continue
                enabled = True
                report.states += 1
                k2 = canon(nxt)
                if k2 in seen:
                    continue
                seen[k2] = (key, action, nxt, depth + 1)
                visit(k2, nxt)
                queue.append(k2)
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
                next_progress = now + 1.0
        report.unique = len(seen)
        report.seconds = time.perf_counter() - start
        report.complete = not queue and report.stopped_by is None
        if report.complete:
            report.depth = max((v[3] for v in seen.values()), default=0)
        return report

    def _token(self, path: Sequence[Step[S, A]]) -> str:
        """The index of each action among those enabled before it, joined by dots."""
        m = self.model
        indices = []
        for before, after in itertools.pairwise(path):
            options = [a for a in m.actions(before.state)]
            indices.append(str(options.index(after.action)))  # type: ignore[arg-type]
        init = [s for s in m.init_states()]
        return ".".join([str(init.index(path[0].state)), *indices])


def path_from(
    seen: dict[Hashable, tuple[Hashable | None, Any, Any, int]], key: Hashable
) -> tuple[Step[Any, Any], ...]:
    """The path to ``key`` in a search's parent map (key -> parent, action, state, depth)."""
    steps = []
    k: Hashable | None = key
    while k is not None:
        parent, action, state, _ = seen[k]
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
