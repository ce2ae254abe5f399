"""The array search: the packed search (``_packed``) one breadth-first level at a time, over
numpy arrays of packed states, with the same counts, order, paths and verdicts.

The packed search already computes each step once per (process, shared part, process part)
and looks it up after that; what is left per state is CPython's cost of a loop turn, a
tuple and a dict look-up. Here a whole level moves at once:

- **States** are rows of a 2-D array of part numbers ``(shared, part of process 0, …)``,
  numbered in the order found, as the packed search numbers them.
- **Steps** are tables filled on demand: a pair (shared number, part number) has a list of
  successor entries (next shared number, next part number, the action's index among
  those listed); so does a shared number for the world's actions. The processes are
  interchangeable (``Processes``), so a pair's steps are computed once, for whichever
  process first has it, and serve every process. A level's successors are gathered from
  the tables with array indexing, process by process, then put in the order the packed
  search generates them: by parent, then by action.
- **The visited set** is a sorted array of 64-bit keys (the row's numbers side by side in
  fixed-width bit fields; with symmetry, the processes' numbers sorted first), with each
  key's state number beside it. A level's new states are the keys not in it, each first
  found where the packed search would first find it.
- **Properties** read the shared part alone (the model promises it, ``shared_properties``)
  and are decided once per shared number, so a level is checked with one array look-up;
  one given as ``ByParts`` (the shared part, or some process's part with it) is decided
  once per shared number and once per (shared number, part number) pair.
- **Stops** (every property decided, the first counterexample, a state limit) are placed at
  the parent after which the packed search would stop, and what came after is dropped: a
  stopped search reports the same states as the packed search too. A time limit is looked
  at between levels.
- **Liveness** runs the engine's own pass (``_liveness``) over the graph kept in arrays.

A model whose properties read more than the shared part, or whose keys outgrow
``KEY_BITS``, is searched by the packed search instead (the checker does that by itself).
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt

from claimfsm.checker._engine import (
    Discovery,
    Model,
    Report,
    _Graph,
    _liveness,
    _token,
    path_from,
)
from claimfsm.checker._packed import ByParts

if TYPE_CHECKING:
    from claimfsm.checker._engine import Checker
    from claimfsm.checker._packed import Packing

A = TypeVar("A")
Packed = tuple[int, ...]
Ints = npt.NDArray[np.integer[Any]]
Pairs = npt.NDArray[np.int32]
#: What is kept per state (rows of part numbers, parents, action indices, edges): 32-bit.
KEPT = np.int32


#: The bits a key may use: the row's numbers side by side, in a signed 64-bit int.
KEY_BITS = 62
#: How many pairs' steps are also computed for every other process, to check that the
#: processes are interchangeable (a model that breaks the promise is stopped, not counted).
CHECKED_PAIRS = 32


class TooWide(Exception):
    """The packed states' keys no longer fit in ``KEY_BITS``: search another way."""


class _Steps(Generic[A]):
    """Successor tables, filled on demand (see the module): a pair's entries are
    ``start[pair]`` to ``start[pair] + count[pair]`` of ``next_shared``, ``next_part`` and
    ``rank``; ``listed[pair]`` counts its actions, enabled or not."""

    def __init__(self, packing: Packing[Any, A], processes: int) -> None:
        self.packing = packing
        self.k = processes
        self.local_pair = np.full((64, 16), -1, np.int32)
        self.shared_pair = np.full(64, -1, np.int32)
        self.start: Ints = np.zeros(0, np.int64)
        self.count: Ints = np.zeros(0, np.int64)
        self.listed: Ints = np.zeros(0, np.int64)
        self.next_shared: Ints = np.zeros(0, np.int64)
        self.next_part: Ints = np.zeros(0, np.int64)
        self.rank: Ints = np.zeros(0, np.int64)
        self.checked = 0
        #: per fairness function, whether a pair has an enabled fair action
        self.fair_known: dict[Callable[[Any], Hashable | None], dict[int, bool]] = {}

    def _fit(self) -> None:
        """Room in the look-up tables for every number given so far."""
        shared = len(self.packing.shared_values)
        local = len(self.packing.local_values)
        s_cap, l_cap = self.local_pair.shape
        if shared > s_cap or local > l_cap:
            s_new, l_new = max(s_cap, 2 * shared), max(l_cap, 2 * local)
            grown = np.full((s_new, l_new), -1, np.int32)
            grown[:s_cap, :l_cap] = self.local_pair
            self.local_pair = grown
        if shared > len(self.shared_pair):
            grown1 = np.full(2 * shared, -1, np.int32)
            grown1[: len(self.shared_pair)] = self.shared_pair
            self.shared_pair = grown1

    def _steps_of(self, row: Packed, process: int | None) -> tuple[int, list[tuple[int, ...]]]:
        """How many actions the part lists, and (next shared, next part, index) of each
        enabled one."""
        if process is None:
            acts = self.packing.listed_shared(row[0])
        else:
            acts = self.packing.listed_local(row[0], row[1 + process], process)
        found: list[tuple[int, ...]] = []
        before = self.packing.decode(row)  # once for all its actions
        for rank, action in enumerate(acts):
            after = self.packing.step(row, action, process, before)
            if after is not None:
                found.append((*after, rank))
        return len(acts), found

    def _same_for_every_process(self, row: Packed, process: int, steps: Any) -> None:
        for other in range(self.k):
            if other != process:
                moved = list(row)
                moved[1 + other], moved[1 + process] = row[1 + process], row[1 + other]
                if self._steps_of(tuple(moved), other) != steps:
                    raise AssertionError(
                        "the model's processes promise that they are interchangeable, but"
                        f" process {other}'s steps from a part differ from process"
                        f" {process}'s from the same part"
                    )

    def _fill(self, rows: list[Packed], process: int | None) -> list[int]:
        """Compute the pairs of these rows (one row per pair missing): their pair numbers."""
        pair = len(self.start)
        pairs, starts, counts, listed = [], [], [], []
        nxt_s: list[int] = []
        nxt_l: list[int] = []
        ranks: list[int] = []
        entry = len(self.next_shared)
        for row in rows:
            n_listed, steps = self._steps_of(row, process)
            if process is not None and self.checked < CHECKED_PAIRS:
                self.checked += 1
                self._same_for_every_process(row, process, (n_listed, steps))
            before = len(ranks)
            for shared, part, rank in steps:
                nxt_s.append(shared)
                nxt_l.append(part)
                ranks.append(rank)
            pairs.append(pair)
            starts.append(entry + before)
            counts.append(len(steps))
            listed.append(n_listed)
            pair += 1
        self.start = np.concatenate([self.start, np.array(starts, np.int64)])
        self.count = np.concatenate([self.count, np.array(counts, np.int64)])
        self.listed = np.concatenate([self.listed, np.array(listed, np.int64)])
        self.next_shared = np.concatenate([self.next_shared, np.array(nxt_s, KEPT)])
        self.next_part = np.concatenate([self.next_part, np.array(nxt_l, KEPT)])
        self.rank = np.concatenate([self.rank, np.array(ranks, np.int64)])
        return pairs

    def local(self, process: int, block: Ints) -> Pairs:
        """The pair number of each row's (shared part, process's part): the same for every
        process, which are interchangeable (``Processes``); computed for the first process
        that needs it."""
        self._fit()
        s, part = block[:, 0], block[:, 1 + process]
        found = self.local_pair[s, part]
        missing = np.flatnonzero(found < 0)
        if missing.size:
            combined = s[missing] * len(self.packing.local_values) + part[missing]
            _, first = np.unique(combined, return_index=True)
            todo = missing[first]
            rows = [tuple(r) for r in block[todo].tolist()]
            numbers = self._fill(rows, process)
            self.local_pair[s[todo], part[todo]] = numbers
            self._fit()
            found = self.local_pair[s, part]
        return found

    def fair_enabled(
        self, rows: Ints, process: int | None, fairness: Callable[[Any], Hashable | None]
    ) -> npt.NDArray[np.bool_]:
        """Whether each row's part (``process``'s, or the shared part's) has an enabled
        action of some fairness class, decided once per pair from its entries (every row
        is expanded: the search was complete) and kept for every property that asks."""
        if process is None:
            pairs = self.shared_pair[rows[:, 0]]
        else:
            pairs = self.local_pair[rows[:, 0], rows[:, 1 + process]]
        unique, first, back = np.unique(pairs, return_index=True, return_inverse=True)
        flags = np.zeros(len(unique), np.bool_)
        known = self.fair_known.setdefault(fairness, {})
        for u, (pair, row_at) in enumerate(zip(unique.tolist(), first.tolist(), strict=True)):
            assert pair >= 0, "a state of a complete search was not expanded"
            decided = known.get(pair)
            if decided is not None:
                flags[u] = decided
                continue
            row = rows[row_at]
            s = int(row[0])
            if process is None:
                acts = self.packing.listed_shared(s)
            else:
                acts = self.packing.listed_local(s, int(row[1 + process]), process)
            begin = int(self.start[pair])
            ranks = self.rank[begin : begin + int(self.count[pair])].tolist()
            flags[u] = known[pair] = any(fairness(acts[r]) is not None for r in ranks)
        found: npt.NDArray[np.bool_] = flags[back.reshape(-1)]
        return found

    def shared(self, block: Ints) -> Pairs:
        """The pair number of each row's shared part (the world's actions)."""
        self._fit()
        s = block[:, 0]
        found = self.shared_pair[s]
        missing = np.flatnonzero(found < 0)
        if missing.size:
            _, first = np.unique(s[missing], return_index=True)
            todo = missing[first]
            rows = [tuple(r) for r in block[todo].tolist()]
            self.shared_pair[s[todo]] = self._fill(rows, None)
            self._fit()
            found = self.shared_pair[s]
        return found


class _Facts:
    """A function of the shared part alone, decided once per shared number."""

    def __init__(self, f: Callable[[Packed], bool]) -> None:
        self.f = f
        self.known = np.full(64, -1, np.int8)

    def of(self, rows: Ints) -> npt.NDArray[np.bool_]:
        s = rows[:, 0]
        if s.size and int(s.max()) >= len(self.known):
            grown = np.full(2 * int(s.max()) + 2, -1, np.int8)
            grown[: len(self.known)] = self.known
            self.known = grown
        values = self.known[s]
        missing = np.flatnonzero(values < 0)
        if missing.size:
            _, first = np.unique(s[missing], return_index=True)
            for j in missing[first].tolist():
                self.known[s[j]] = 1 if self.f(tuple(rows[j].tolist())) else 0
            values = self.known[s]
        decided: npt.NDArray[np.bool_] = values == 1
        return decided


class _PartFacts:
    """A :class:`ByParts` predicate over packed rows: the shared number's fact, or some
    process's (shared number, part number) pair's, each decided once."""

    def __init__(self, f: ByParts[Packed]) -> None:
        self.f = f
        self.shared = _Facts(lambda row: f.shared(row[0]))
        self.pairs: dict[int, bool] = {}

    def of(self, rows: Ints) -> npt.NDArray[np.bool_]:
        out = self.shared.of(rows)
        s = rows[:, 0].astype(np.int64) << 32
        for i in range(1, rows.shape[1]):
            todo = np.flatnonzero(~out)
            if not todo.size:
                break
            codes = s[todo] | rows[todo, i].astype(np.int64)
            unique, back = np.unique(codes, return_inverse=True)
            values = np.fromiter(
                (self._pair(int(code)) for code in unique.tolist()), np.bool_, len(unique)
            )
            out[todo] = values[back]
        return out

    def _pair(self, code: int) -> bool:
        found = self.pairs.get(code)
        if found is None:
            found = self.pairs[code] = bool(self.f.local(code >> 32, code & 0xFFFFFFFF))
        return found


def _facts(f: Callable[[Packed], bool]) -> _Facts | _PartFacts:
    return _PartFacts(f) if isinstance(f, ByParts) else _Facts(f)


class _Chunks:
    """An array grown a level at a time, joined when read."""

    def __init__(self, first: Ints) -> None:
        self.parts = [first]
        self._joined: Ints | None = first

    def add(self, part: Ints) -> None:
        self.parts.append(part)
        self._joined = None

    def all(self) -> Ints:
        if self._joined is None:
            self._joined = np.concatenate(self.parts)
            self.parts = [self._joined]
        return self._joined


class _Seen(Mapping[int, tuple[int | None, Any, Packed, int, int]]):
    """The search's parent map, in the engine's shape (number -> parent number, action,
    packed state, depth, number), read from the arrays: an action is found again by its
    index among the parent's actions."""

    def __init__(
        self,
        model: Model[Packed, Any],
        rows: _Chunks,
        parents: _Chunks,
        chosen: _Chunks,
        levels: list[int],
    ) -> None:
        self.model, self.rows, self.parents, self.chosen = model, rows, parents, chosen
        self.levels = levels

    def __getitem__(self, k: int) -> tuple[int | None, Any, Packed, int, int]:
        rows = self.rows.all()
        if not 0 <= k < len(rows):
            raise KeyError(k)
        parent = int(self.parents.all()[k])
        state = self.state(k)
        depth = bisect_right(self.levels, k) - 1
        if parent < 0:
            return None, None, state, depth, k
        action = list(self.model.actions(self.state(parent)))[int(self.chosen.all()[k])]
        return parent, action, state, depth, k

    def state(self, k: int) -> Packed:
        """State ``k`` alone (``self[k]`` finds its action again too, from its parent's)."""
        return tuple(self.rows.all()[k].tolist())

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.rows.all())))

    def __len__(self) -> int:
        return len(self.rows.all())


class _ArrayGraph(_Graph):
    """The liveness pass's graph (see ``_Graph``) over the arrays: keys are state numbers."""

    def __init__(
        self,
        model: Model[Packed, Any],
        seen: _Seen,
        offsets: Ints,
        targets: Ints,
        chosen: Ints,
        steps: _Steps[Any],
    ) -> None:
        super().__init__(model, seen)  # type: ignore[arg-type]
        self.states = seen
        self.offsets_a = offsets
        self.starts: list[int] = offsets.tolist()
        self.targets_a, self.chosen_a = targets, chosen
        self.steps = steps

    def first_stop(
        self, keys: list[Hashable], fairness: Callable[[Any], Hashable | None] | None
    ) -> Hashable | None:
        """As the engine's, decided for all ``keys`` at once from the step tables: whether
        a state has a fair action is whether its shared part's pair, or one of its
        processes' pairs, has an enabled action whose class is not None, and that is
        decided once per pair (and process)."""
        if not keys:
            return None
        at = np.asarray(keys, np.int64)
        stop = self.offsets_a[at + 1] == self.offsets_a[at]
        if fairness is not None:
            rows = self.states.rows.all()[at]
            fair = self.steps.fair_enabled(rows, None, fairness)
            for process in range(rows.shape[1] - 1):
                fair |= self.steps.fair_enabled(rows, process, fairness)
            stop |= ~fair
        hits = np.flatnonzero(stop)
        return keys[int(hits[0])] if hits.size else None

    def _span(self, k: Hashable) -> range:
        i: int = k  # type: ignore[assignment]
        return range(self.starts[i], self.starts[i + 1])

    def succ(self, k: Hashable) -> list[Hashable]:
        i: int = k  # type: ignore[assignment]
        found: list[Hashable] = self.targets_a[self.starts[i] : self.starts[i + 1]].tolist()
        return found

    def out(self, k: Hashable) -> list[tuple[Any, Hashable]]:
        found = self._out.get(k)
        if found is None:
            span = self._span(k)
            if not span:
                return []
            i: int = k  # type: ignore[assignment]
            actions = list(self.model.actions(self.states.state(i)))
            chosen = self.chosen_a[span.start : span.stop].tolist()
            targets = self.targets_a[span.start : span.stop].tolist()
            found = [(actions[c], t) for c, t in zip(chosen, targets, strict=True)]
        return found


def array_search(checker: Checker[Any, A], packing: Packing[Any, A]) -> Report[Packed, A]:
    """Search ``packing``'s model as ``checker`` is configured (see the module); raises
    ``TooWide`` when its keys outgrow ``KEY_BITS`` (search it another way)."""
    m = packing.model
    report: Report[Packed, A] = Report(m)
    symmetric = checker._symmetry and m.canonical is not None
    always = [p for p in m.properties if p.kind == "always"]
    sometimes = [p for p in m.properties if p.kind == "sometimes"]
    eventually = [p for p in m.properties if p.kind == "eventually"]
    facts = {p.name: _facts(p.holds) for p in always + sometimes}
    may_stop = _facts(m.may_stop)
    start_time = time.perf_counter()
    next_progress = start_time + checker.PROGRESS_EVERY

    inits = [tuple(p) for p in m.init_states()]
    width = len(inits[0])
    k = width - 1
    steps = _Steps(packing, k)
    bits = 0

    def wide_enough() -> bool:
        """Whether the key's fields are wide enough for every part number given so far
        (else they are widened: every key is made again)."""
        nonlocal bits
        needed = len(packing.local_values).bit_length()
        if needed <= bits:
            return True
        bits = needed + 1
        return False

    def keys_of(block: Ints) -> Ints:
        if len(packing.shared_values).bit_length() + k * bits > KEY_BITS:
            raise TooWide
        parts = np.sort(block[:, 1:], axis=1) if symmetric and k > 1 else block[:, 1:]
        key = block[:, 0].astype(np.int64)
        for j in range(k):
            key <<= bits
            key |= parts[:, j]
        return key

    # The initial states, as the packed search visits them.
    report.states += len(inits)
    wide_enough()
    init_block = np.array(inits, KEPT).reshape(len(inits), width)
    init_keys = keys_of(init_block)
    _, first = np.unique(init_keys, return_index=True)
    first.sort()
    rows = _Chunks(init_block[first])
    parents = _Chunks(np.full(len(first), -1, KEPT))
    chosen = _Chunks(np.zeros(len(first), KEPT))
    order = np.argsort(init_keys[first], kind="stable")
    visited, numbers = init_keys[first][order], np.arange(len(first), dtype=KEPT)[order]
    levels = [0]
    current = rows.all()
    seen = _Seen(m, rows, parents, chosen, levels)
    edge_offsets: list[Ints] = []
    edge_targets: list[Ints] = []
    edge_chosen: list[Ints] = []
    edge_count = 0

    def discover(block: Ints) -> list[tuple[str, int]]:
        """(property, offset into ``block``) of the first state of ``block`` that decides
        each property still open (a violation of ``always``, an example of ``sometimes``)."""
        found = []
        for p in always + sometimes:
            if p.name in report.discoveries:
                continue
            holds = facts[p.name].of(block)
            hits = np.flatnonzero(~holds if p.kind == "always" else holds)
            if hits.size:
                found.append((p.name, int(hits[0])))
        return found

    props = {p.name: p for p in m.properties}

    def record(found: list[tuple[str, int]], base: int) -> None:
        for name, offset in found:
            path = path_from(seen, base + offset)
            report.discoveries[name] = Discovery(props[name], path, _token(m, path))

    record(discover(rows.all()), 0)
    all_found = len(m.properties)
    lo, hi, depth = 0, len(first), 0
    while lo < hi:
        report.stopped_by = checker._decided(report)
        if report.stopped_by is not None:
            break
        report.depth = max(report.depth, depth)
        if checker._max_depth is not None and depth >= checker._max_depth:
            report.stopped_by = "depth"
            break
        block = current
        n = hi - lo
        # Successors, process by process, then the world's; each in parent and action order.
        cands, cpars, cchosen = [], [], []
        listed_before = np.zeros(n, np.int64)
        for process in [*range(k), None]:
            pair = steps.shared(block) if process is None else steps.local(process, block)
            count = steps.count[pair]
            total = int(count.sum())
            if total:
                par = np.repeat(np.arange(n, dtype=np.int64), count)
                entry = np.repeat(steps.start[pair] - (np.cumsum(count) - count), count)
                entry += np.arange(total, dtype=np.int64)
                cand = block[par]
                cand[:, 0] = steps.next_shared[entry]
                if process is not None:
                    cand[:, 1 + process] = steps.next_part[entry]
                cands.append(cand)
                cpars.append(par)
                cchosen.append(listed_before[par] + steps.rank[entry])
            listed_before += steps.listed[pair]
        if cands:
            cand = np.concatenate(cands)
            cpar = np.concatenate(cpars)
            order = np.argsort(cpar, kind="stable")
            cand, cpar, cch = cand[order], cpar[order], np.concatenate(cchosen)[order]
        else:
            cand = np.zeros((0, width), KEPT)
            cpar = cch = np.zeros(0, np.int64)
        per_parent = np.bincount(cpar, minlength=n)
        if not wide_enough():
            keys = keys_of(rows.all())
            order = np.argsort(keys, kind="stable")
            visited, numbers = keys[order], order.astype(KEPT)
        ckeys = keys_of(cand)
        target = np.full(len(cand), -1, np.int64)
        if len(visited):
            at = np.minimum(np.searchsorted(visited, ckeys), len(visited) - 1)
            hit = visited[at] == ckeys
            target[hit] = numbers[at[hit]]
        else:
            hit = np.zeros(len(cand), np.bool_)
        miss = np.flatnonzero(~hit)
        new_keys, first_at, inverse = np.unique(ckeys[miss], return_index=True, return_inverse=True)
        found_order = np.argsort(first_at, kind="stable")
        number_of = np.empty(len(new_keys), np.int64)
        number_of[found_order] = hi + np.arange(len(new_keys), dtype=np.int64)
        target[miss] = number_of[inverse.reshape(-1)]
        new_at = miss[first_at[found_order]]  # candidates that are new states, in order
        new_rows, new_par = cand[new_at], cpar[new_at]
        # Where the packed search would stop in this level: after parent ``cut``, for the
        # first reason it looks at there (the state limit right after the expansion; at
        # the next turn, every property decided, then the first counterexample).
        found = discover(new_rows)
        firsts = {name: int(new_par[offset]) for name, offset in found}
        stops: list[tuple[int, int, str]] = []
        if checker._max_states is not None:
            reached = hi + np.cumsum(np.bincount(new_par, minlength=n))
            over = np.flatnonzero(reached >= checker._max_states)
            if over.size:
                stops.append((int(over[0]), 0, "states"))
        decided = len(report.discoveries) + len(firsts) == all_found
        if checker._stop_when_all_found and firsts and decided:
            stops.append((max(firsts.values()), 1, "all properties decided"))
        if checker._stop_on_violation:
            broken = [firsts[p.name] for p in always if p.name in firsts]
            if broken:
                stops.append((min(broken), 2, "first counterexample"))
        cut, _, why = min(stops) if stops else (n - 1, 0, None)
        if why is not None:
            kept = int(np.searchsorted(cpar, cut, side="right"))
            fresh = int(np.searchsorted(new_par, cut, side="right"))
            found = [(name, offset) for name, offset in found if offset < fresh]
        else:
            kept, fresh = len(cand), len(new_at)
        report.states += int(per_parent[: cut + 1].sum())
        rows.add(new_rows[:fresh])
        parents.add((lo + new_par[:fresh]).astype(KEPT))
        chosen.add(cch[new_at[:fresh]].astype(KEPT))
        levels.append(hi)
        record(found, hi)
        if report.deadlock is None:
            stuck = np.flatnonzero(per_parent[: cut + 1] == 0)
            if stuck.size:
                free = may_stop.of(block[stuck])
                if not free.all():
                    report.deadlock = path_from(seen, lo + int(stuck[np.argmin(free)]))
        if eventually:
            expanded = per_parent[: cut + 1]
            edge_offsets.append(edge_count + np.cumsum(expanded) - expanded)
            edge_targets.append(target[:kept].astype(KEPT))
            edge_chosen.append(cch[:kept].astype(KEPT))
            edge_count += kept
        if fresh:
            merged = np.concatenate([visited, ckeys[new_at[:fresh]]])
            order = np.argsort(merged, kind="stable")
            visited = merged[order]
            numbers = np.concatenate([numbers, hi + np.arange(fresh, dtype=KEPT)])[order]
        current = new_rows[:fresh]
        lo, hi, depth = hi, hi + fresh, depth + 1
        if why is not None:
            report.stopped_by = why
            break
        now = time.perf_counter()
        if checker._seconds is not None and now - start_time >= checker._seconds:
            report.stopped_by = "time"
            break
        if checker._progress is not None and now >= next_progress:
            checker._progress(hi, depth, now - start_time)
            next_progress = now + checker.PROGRESS_EVERY
    report.complete = lo >= hi and report.stopped_by is None
    report.unique = len(rows.all())
    if report.complete:
        report.depth = bisect_right(levels, report.unique - 1) - 1
        if eventually:
            offsets = np.concatenate([*edge_offsets, np.array([edge_count], np.int64)])
            graph = _ArrayGraph(
                m,
                seen,
                offsets,
                np.concatenate(edge_targets) if edge_targets else np.zeros(0, np.int64),
                np.concatenate(edge_chosen) if edge_chosen else np.zeros(0, np.int64),
                steps,
            )
            for p in eventually:
                marked = _marked(p, rows.all(), parents.all())
                result = _liveness(p, seen, graph, marked)  # type: ignore[arg-type]
                if result is not None:
                    path, loop_from = result
                    report.discoveries[p.name] = Discovery(p, path, _token(m, path), loop_from)
    report.seconds = time.perf_counter() - start_time
    return report


def _marked(p: Any, rows: Ints, parents: Ints) -> tuple[set[Hashable], list[Hashable]]:
    """The states where ``p`` does not hold, and those of them where its obligation
    starts (its trigger holds; with no trigger, the initial states), nearest first."""
    bad = ~_facts(p.holds).of(rows)
    start = _facts(p.trigger).of(rows) if p.trigger is not None else parents < 0
    starts: list[Hashable] = list(np.flatnonzero(bad & start).tolist())
    return set(np.flatnonzero(bad).tolist()), starts


__all__: Sequence[str] = ("TooWide", "array_search")
