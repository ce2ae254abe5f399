"""The packed search: a model whose state is a shared part and K processes' parts, searched
as tuples of small ints with each step computed once per part it reads.

A model that gives :class:`Processes` says how its state splits, and promises the footprint
of every action: an action of process ``i`` reads and changes the shared part and process
``i``'s part alone; any other action reads and changes the shared part alone. Then:

- each distinct shared part and each distinct process part is numbered once (interned), and
  a state is the tuple ``(shared number, part number of process 0, …)``: hashing and
  comparing it costs a few machine words, not a walk over nested tuples;
- a step is looked up by ``(action, shared number, part number)`` and computed by the model
  only the first time (the other processes' parts are whatever they are: a state with K
  workers reuses the steps of every state that differs only in the others);
- the actions of a state are the actions of each process's part, then the shared part's,
  each looked up the same way;
- with symmetry, the canonical form sorts the part numbers (equal parts have equal numbers,
  so the sorted tuple names the class);
- properties that read only the shared part (``shared_properties``) are decided once per
  shared part; a property (or ``may_stop``) that also asks whether *some* process's part
  meets a condition is given as :class:`ByParts`, and decided once per shared part and
  once per (shared part, part) pair.

The search is the same breadth-first search over the packed model, so its counts are the
model's own; paths are unpacked into the model's states for the report, and a replay token
names the same actions of the model. Each step computed is checked against the promise
(the other processes' parts unchanged) and a breach is an error, not a wrong count.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, TypeVar, cast

from claimfsm.checker._engine import Discovery, Model, Property, Report, Step

S = TypeVar("S", bound=Hashable)
A = TypeVar("A")
S_in = TypeVar("S_in", bound=Hashable, contravariant=True)
A_in = TypeVar("A_in", contravariant=True)
Packed = tuple[int, ...]


@dataclass(frozen=True)
class Processes(Generic[S, A]):
    """How a model's state splits into a shared part and its processes' parts (see the
    module). ``actions(state)`` must equal the processes' ``local_actions`` in process order,
    then ``shared_actions``. The processes are interchangeable: process ``i``'s actions
    from a shared part and a part do what process 0's do from the same parts, in the same
    order (the array search computes a part's steps for one process and uses them for all;
    it checks the first few parts against every process); and with symmetry, the packed
    search's canonical form sorts their parts, so give ``Processes`` only to a model whose
    own ``canonical`` orders the same parts (the claim model sorts its workers)."""

    split: Callable[[S], tuple[Hashable, tuple[Hashable, ...]]]
    join: Callable[[Any, tuple[Any, ...]], S]
    #: The actions of process ``i``'s part (shared part, part, i): each is that process's
    #: (the packed search learns an action's process from where it is listed).
    local_actions: Callable[[Any, Any, int], Sequence[A]]
    shared_actions: Callable[[Any], Sequence[A]]
    #: Properties (their ``holds`` and ``trigger``) and ``may_stop`` read the shared part
    #: alone, or are :class:`ByParts`: each is decided once per shared part (and pair).
    shared_properties: bool = False


@dataclass(frozen=True)
class ByParts(Generic[S]):
    """A predicate of a state that holds when ``shared`` holds of its shared part, or
    ``local`` holds of its shared part and some process's part (``local(shared, part)``).
    Called on a whole state it is ``whole``, which must agree (engines that do not split
    states call it so); the packed and array searches decide it part by part, once each."""

    whole: Callable[[S], bool]
    shared: Callable[[Any], bool]
    local: Callable[[Any, Any], bool]

    def __call__(self, state: S) -> bool:
        return self.whole(state)


class _Interned:
    """Numbers for values: equal values, equal numbers."""

    def __init__(self) -> None:
        self.numbers: dict[Hashable, int] = {}
        self.values: list[Any] = []

    def __call__(self, value: Hashable) -> int:
        n = self.numbers.get(value)
        if n is None:
            n = self.numbers[value] = len(self.values)
            self.values.append(value)
        return n


def pack(model: Model[S, A]) -> Packing[S, A]:
    """The packed model of ``model`` (which gives ``processes``), with the function that
    unpacks one of its states into the model's (see :class:`Packing`)."""
    pr = model.processes
    assert pr is not None, "pack() needs a model that gives processes"
    shared, local = _Interned(), _Interned()
    shared_of, local_of = shared.values, local.values

    def encode(state: S) -> Packed:
        s, parts = pr.split(state)
        return (shared(s), *map(local, parts))

    def decode(p: Packed) -> S:
        return pr.join(shared_of[p[0]], tuple(local_of[n] for n in p[1:]))

    local_acts: dict[tuple[int, int, int], Sequence[A]] = {}
    shared_acts: dict[int, Sequence[A]] = {}

    def listed_local(s: int, part: int, i: int) -> Sequence[A]:
        """The actions of process ``i`` (from 0) with this shared part and its part."""
        key = (s, part, i)
        acts = local_acts.get(key)
        if acts is None:
            acts = local_acts[key] = owned(pr.local_actions(shared_of[s], local_of[part], i), i)
        return acts

    def listed_shared(s: int) -> Sequence[A]:
        acts = shared_acts.get(s)
        if acts is None:
            acts = shared_acts[s] = owned(pr.shared_actions(shared_of[s]), None)
        return acts

    def actions(p: Packed) -> list[A]:
        s = p[0]
        found: list[A] = []
        for i in range(1, len(p)):
            found += listed_local(s, p[i], i - 1)
        found += listed_shared(s)
        return found

    # Each action's process (None: the shared part's), learnt where it is first listed.
    process: dict[A, int | None] = {}

    def owned(acts: Sequence[A], i: int | None) -> tuple[A, ...]:
        for a in acts:
            if process.setdefault(a, i) != i:
                raise AssertionError(
                    f"{model.show_action(a)!r} is listed as process {process[a]}'s and as"
                    f" {'the shared part' if i is None else f'process {i}'}'s"
                )
        return tuple(acts)

    # (action, shared number[, part number]) -> the next shared number[, part number], or
    # None when the action is disabled there.
    local_steps: dict[tuple[A, int, int], tuple[int, int] | None] = {}
    shared_steps: dict[tuple[A, int], int | None] = {}

    def computed(p: Packed, a: A, i: int | None, before: S | None = None) -> tuple[int, int] | None:
        after = model.next_state(decode(p) if before is None else before, a)
        if after is None:
            return None
        s2, parts = pr.split(after)
        for j, part in enumerate(parts):
            if j != i:
                was = local_of[p[j + 1]]
                if part is not was and part != was:
                    raise AssertionError(
                        f"the model's processes promise that {model.show_action(a)!r} changes"
                        " the shared part and its own process's alone, but it changed"
                        f" process {j}'s"
                    )
        return shared(s2), (-1 if i is None else local(parts[i]))

    def next_state(p: Packed, a: A) -> Packed | None:
        i = process[a]  # the search asks a state's actions before their steps
        if i is None:
            key = (a, p[0])
            if key in shared_steps:
                s2 = shared_steps[key]
            else:
                done = computed(p, a, None)
                s2 = shared_steps[key] = None if done is None else done[0]
            return None if s2 is None else (s2, *p[1:])
        j = i + 1
        lkey = (a, p[0], p[j])
        if lkey in local_steps:
            found = local_steps[lkey]
        else:
            found = local_steps[lkey] = computed(p, a, i)
        if found is None:
            return None
        return (found[0], *p[1:j], found[1], *p[j + 1 :])

    def canonical(p: Packed) -> Packed:
        parts = sorted(p[1:])
        return p if list(p[1:]) == parts else (p[0], *parts)

    def on_shared(f: Callable[[S], bool]) -> Callable[[Packed], bool]:
        if isinstance(f, ByParts):
            return by_parts(f)
        if not pr.shared_properties:
            return lambda p: f(decode(p))
        decided: dict[int, bool] = {}

        def holds(p: Packed) -> bool:
            found = decided.get(p[0])
            if found is None:
                found = decided[p[0]] = f(decode(p))
            return found

        return holds

    def by_parts(f: ByParts[S]) -> ByParts[Packed]:
        """``f`` over packed states, and over numbers: ``shared(shared number)``,
        ``local(shared number, part number)``, each decided once."""
        shared_known: dict[int, bool] = {}
        local_known: dict[tuple[int, int], bool] = {}

        def on_shared_number(s: int) -> bool:
            found = shared_known.get(s)
            if found is None:
                found = shared_known[s] = bool(f.shared(shared_of[s]))
            return found

        def on_pair(s: int, part: int) -> bool:
            found = local_known.get((s, part))
            if found is None:
                found = local_known[(s, part)] = bool(f.local(shared_of[s], local_of[part]))
            return found

        def whole(p: Packed) -> bool:
            s = p[0]
            return on_shared_number(s) or any(on_pair(s, part) for part in p[1:])

        return ByParts(whole, on_shared_number, on_pair)

    properties: list[Property[Packed]] = [
        replace(
            cast(Property[Any], p),
            holds=on_shared(p.holds),
            trigger=None if p.trigger is None else on_shared(p.trigger),
        )
        for p in model.properties
    ]
    explain = model.explain
    packed: Model[Packed, A] = Model(
        init_states=lambda: [encode(s) for s in model.init_states()],
        actions=actions,
        next_state=next_state,
        properties=properties,
        canonical=canonical if model.canonical is not None else None,
        show_action=model.show_action,
        show_state=lambda p: model.show_state(decode(p)),
        may_stop=on_shared(model.may_stop),
        explain=None
        if explain is None
        else (lambda before, a, after: explain(decode(before), a, decode(after))),
    )

    return Packing(
        packed,
        decode,
        shared_of,
        local_of,
        listed_local,
        listed_shared,
        computed,
        pr.shared_properties,
    )


class PackedStep(Protocol[S_in, A_in]):
    """The step of an action (process ``i``'s, or None: the shared part's) from a packed
    state (and, optionally, the state decoded, where it is already at hand): the next
    shared number and part number (-1 for a shared action), or None where the action is
    not enabled."""

    def __call__(
        self, p: Packed, a: A_in, i: int | None, before: S_in | None = None, /
    ) -> tuple[int, int] | None: ...


@dataclass(frozen=True)
class Packing(Generic[S, A]):
    """A packed model (see :func:`pack`) and what a search over arrays of packed states
    needs besides: the values numbered so far (a number indexes its list), and each
    part's actions in the order the packed model lists them: ``listed_local(shared
    number, part number, process)`` and ``listed_shared(shared number)``."""

    model: Model[Packed, A]
    decode: Callable[[Packed], S]
    shared_values: list[Any]
    local_values: list[Any]
    listed_local: Callable[[int, int, int], Sequence[A]]
    listed_shared: Callable[[int], Sequence[A]]
    #: Each step computed each time it is asked (the search keeps it).
    step: PackedStep[S, A]
    #: The model's properties and ``may_stop`` read the shared part alone.
    shared_properties: bool


def unpacked(
    report: Report[Packed, A], model: Model[S, A], decode: Callable[[Packed], S]
) -> Report[S, A]:
    """A packed search's report in the model's own states and properties."""
    props = {p.name: p for p in model.properties}

    def path(steps: tuple[Step[Packed, A], ...]) -> tuple[Step[S, A], ...]:
        return tuple(Step(step.action, decode(step.state)) for step in steps)

    return replace(
        cast(Report[S, A], report),
        model=model,
        deadlock=None if report.deadlock is None else path(report.deadlock),
        discoveries={
            name: Discovery(props[name], path(d.path), d.token, d.loop_from)
            for name, d in report.discoveries.items()
        },
        reached=set(report.reached),
    )
