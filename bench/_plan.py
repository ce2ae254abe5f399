"""What every store benchmark does the same way: the drafts to dispatch, the cycle, and
how two paired series of rates are reported."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from claimfsm.store import Store

Plan = list[tuple[str, list[int]]]  # (target, approved draft ids)


def prepare(store: Store, targets: int, per_target: int, tag: str = "target") -> Plan:
    """``per_target`` approved drafts for each of ``targets`` targets."""
    plan = []
    for t in range(targets):
        target = f"{tag}-{t}"
        ids = []
        for n in range(per_target):
            d = store.create_draft(target, f"draft {n} for {target}")
            store.approve_draft(d.draft_id)
            ids.append(d.draft_id)
        plan.append((target, ids))
    return plan


def dispatch_cycles(store: Store, plan: Plan) -> tuple[int, float]:
    """Acquire -> begin_send -> confirm for every planned draft: (cycles, seconds)."""
    n, start = 0, time.perf_counter()
    for target, drafts in plan:
        for draft in drafts:
            claim = store.acquire(target, draft, "bench", 60)
            claim.begin_send()
            claim.confirm()
            n += 1
    return n, time.perf_counter() - start


def acquire_times(store: Store, targets: list[str]) -> list[float]:
    """Seconds each acquire took, one per target (each given a new approved draft first),
    sorted."""
    drafts = []
    for target in targets:
        d = store.create_draft(target, "y")
        store.approve_draft(d.draft_id)
        drafts.append(d)
    times = []
    for d in drafts:
        t0 = time.perf_counter()
        store.acquire(d.target_id, d.draft_id, "bench", 60)
        times.append(time.perf_counter() - t0)
    return sorted(times)


def paired(rates: dict[str, list[float]], unit: str, width: int = 10) -> None:
    """Print each series' median and rounds, then the ratio of the first to the second:
    the median of the rounds' ratios (each round ran both back to back, so it saw one
    machine load) and their range."""
    for name, values in rates.items():
        shown = ", ".join(f"{r:,.0f}" for r in values)
        print(
            f"  {name:<{width}} {statistics.median(values):>7,.0f} {unit} median (rounds: {shown})"
        )
    (ours, a), (theirs, b) = list(rates.items())
    pairs = [x / y for x, y in zip(a, b, strict=True)]
    print(
        f"  ratio {ours} / {theirs} = {statistics.median(pairs):.2f} (median of the rounds'"
        f" ratios; {min(pairs):.2f} to {max(pairs):.2f})"
    )


def at_rest(
    open_store: Callable[[str], Any], fill: Callable[[str, str, int], None], rows: int, rounds: int
) -> None:
    """A lifecycle store at rest (specs/job.toml): opening it and a sweep, with ``rows``
    finished jobs in its table against none. ``open_store(name)`` opens the store of that
    name; ``fill(name, table, rows)`` adds that many rows in ``succeeded`` (a job's terminal
    state) to its table, beside the one leased job each store has. Each round times both
    stores back to back; a ratio near 1 says neither grows with the rows at rest."""
    for name, count in (("full", rows), ("empty", 0)):
        store = open_store(name)
        store.take("live", "lease", owner="bench")
        table = store.table
        store.close()
        if count:
            fill(name, table, count)
    opens: dict[str, list[float]] = {f"{rows:,} at rest": [], "none": []}
    sweeps: dict[str, list[float]] = {f"{rows:,} at rest": [], "none": []}
    for _ in range(rounds):
        for label, name in zip(opens, ("full", "empty"), strict=True):
            start = time.perf_counter()
            store = open_store(name)
            opened = time.perf_counter()
            store.sweep()
            swept = time.perf_counter()
            store.close()
            opens[label].append(1 / (opened - start))
            sweeps[label].append(1 / (swept - opened))
    paired(opens, "opens/s", width=14)
    paired(sweeps, "sweeps/s", width=14)
