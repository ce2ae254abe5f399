"""Model-checker benchmark: prints figures, asserts nothing. ``make bench-checker``.

1. A bare breadth-first search over tuples (four counters, each step increments one), in
   this process: what plain Python does per state, the anchor for the figures below.
2. The claim model, correct design, fencing remote, crashes and lost acknowledgements:
   unique states, generated states, seconds and unique states per second, with and
   without symmetry reduction, for K=2 and K=3 workers (T=1, D=2, 3 epochs): the array
   search (the default), the packed search one state at a time, and the search over the
   model's own worlds, the baseline of both.
   Then time to verdict at the default bounds (T=1, D=2, 3 epochs), K=3 and K=4: the
   built-in engine with symmetry (the default) and without, ``claimfsm check`` as a whole
   process (starting Python included), and SPIN from the Promela
   generated from claim.toml (no symmetry): its whole check (the safety search and both
   eventually properties' LTL searches, generating and compiling included) and the safety
   search alone, which is what the hand-written anchor of the speed issue measured.
   Memory: the built-in engine's peak resident growth over its run without symmetry, in a
   process of its own, per unique state; SPIN's own figure.
3. The job lifecycle (specs/job.toml, its [world] with K workers and one or two jobs),
   checked by the built-in engine and, when SPIN and a C compiler are installed, by SPIN
   from the generated Promela: time to verdict (SPIN's includes generating and compiling
   its verifiers, one for the safety search and one per eventually invariant), unique
   states, and the ratio SPIN / built-in, from the same run. With two jobs and symmetry,
   the built-in engine's three searches as in section 2 (arrays, the default; packed one
   state at a time; the model's own worlds) and their ratios.
4. claim.toml in the two checker worlds: the claim world and the world of any declared
   lifecycle (with the claim world's request keys, where the two reach the same states):
   first the shared parts each splits its two-worker states into (the fewer, the more
   often a computed step is reused), then the time,
   K=2 and K=3 with and without symmetry, best of three runs each, alternating, in this
   process: unique states, seconds and the ratio lifecycle world / claim world, the
   figure that must come near 1 before the lifecycle world can replace the claim world.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

from claimfsm.checker import (
    Checker,
    ClaimModelConfig,
    EntityModelConfig,
    Model,
    claim_model,
    entity_model,
    reachable,
    spin_available,
    spin_check,
)
from claimfsm.spec import claim_spec, declarations_dir, load_spec


def bare_bfs(limit: int) -> tuple[int, float]:
    start = time.perf_counter()
    init: tuple[int, ...] = (0, 0, 0, 0)
    seen = {init}
    queue = deque([init])
    while queue:
        s = queue.popleft()
        for i in range(4):
            if s[i] < limit:
                n = (*s[:i], s[i] + 1, *s[i + 1 :])
                if n not in seen:
                    seen.add(n)
                    queue.append(n)
    return len(seen), time.perf_counter() - start


def main() -> None:
    print("== 1. bare breadth-first search over tuples (the anchor) ==")
    states, seconds = bare_bfs(24)
    anchor = states / seconds
    print(f"  {states:,} states in {seconds:.2f} s: {anchor:,.0f} states/s")
    print("== 2. the claim model (correct design, fencing remote, with crashes) ==")
    for workers in (2, 3):
        for symmetry in (False, True):
            config = ClaimModelConfig(workers=workers, targets=1, drafts=2)
            took: dict[str, float] = {}
            for search in ("arrays", "packed", "worlds"):
                report = (
                    Checker(claim_model(claim_spec(), config))
                    .symmetry(symmetry)
                    .packed(search != "worlds")
                    .arrays(search == "arrays")
                    .exhaustive()
                    .run()
                )
                took[search] = report.seconds
                rate = report.states_per_second
                print(
                    f"  K={workers} T=1 D=2 symmetry={'on ' if symmetry else 'off'}"
                    f" {search}: unique={report.unique:,}"
                    f" generated={report.states:,} depth={report.depth}"
                    f" seconds={report.seconds:.2f} states/s={rate:,.0f}"
                    f" ({rate / anchor:.2f} of the bare search) verdict={report.verdict}"
                )
                del report
            print(
                f"    array search / packed search one state at a time:"
                f" {took['arrays'] / took['packed']:.2f} of the time;"
                f" packed / search over the model's worlds:"
                f" {took['packed'] / took['worlds']:.2f}"
            )

    claim_against_spin()

    print("== 3. the job lifecycle: the built-in engine and SPIN (time to verdict) ==")
    job = load_spec(declarations_dir() / "job.toml")
    why = spin_available()
    if why is not None:
        print(f"  SPIN: not run ({why})")
    # two jobs with two workers: since a run reaches the executor as a step of its own the
    # job's world is four to five times larger, and three workers with two jobs take
    # minutes per search
    for workers, keys in ((3, 1), (4, 1), (2, 2)):
        world = EntityModelConfig(workers=workers, keys=keys)
        timed = {}
        for symmetry in (True, False):
            timing: dict[str, float] = {}
            # with two jobs, symmetry on: the three searches, for their ratios (without
            # symmetry, another minute and a half of CI; BENCHMARKS keeps their last run)
            three = keys > 1 and symmetry
            for search in ("arrays", "packed", "worlds") if three else ("arrays",):
                start = time.perf_counter()
                checked = (
                    Checker(entity_model(job, world))
                    .symmetry(symmetry)
                    .packed(search != "worlds")
                    .arrays(search == "arrays")
                    .run()
                )
                timing[search] = time.perf_counter() - start
                print(
                    f"  K={workers} jobs={keys} built-in symmetry={'on ' if symmetry else 'off'}"
                    f" {search}: unique={checked.unique:,} seconds={timing[search]:.2f}"
                    f" states/s={checked.unique / timing[search]:,.0f} verdict={checked.verdict}"
                )
            timed[symmetry] = timing["arrays"]
            if three:
                print(
                    f"    array search / packed search one state at a time:"
                    f" {timing['arrays'] / timing['packed']:.2f} of the time;"
                    f" arrays / search over the model's worlds:"
                    f" {timing['arrays'] / timing['worlds']:.2f}"
                )
        if why is None:
            start = time.perf_counter()
            spun, run = spin_check(job, world)
            total = time.perf_counter() - start
            print(
                f"  K={workers} jobs={keys} SPIN (no symmetry): unique={spun.unique:,}"
                f" seconds={total:.2f}"
                f" (compile {run.compile_seconds:.2f}, search {run.search_seconds:.2f})"
                f" verdict={spun.verdict}; SPIN / built-in: {total / timed[True]:.2f} against"
                f" symmetry on, {total / timed[False]:.2f} against off"
            )

    claim_in_both_worlds()


def claim_in_both_worlds() -> None:
    print("== 4. claim.toml in the claim world and in the lifecycle world ==")
    # the shared parts (rows) the packed and array searches decide steps by: the fewer,
    # the more often a computed step is reused (every state, no symmetry, K=2)
    parts = {}
    for world in ("claim", "lifecycle"):
        small: Model[Any, Any] = (
            claim_model(claim_spec(), ClaimModelConfig(workers=2))
            if world == "claim"
            else entity_model(claim_spec(), EntityModelConfig(workers=2, own_keys=False))
        )
        assert small.processes is not None
        split = small.processes.split
        parts[world] = len({split(state)[0] for state in reachable(small)})
    print(
        f"  K=2 shared parts over every state reached: claim world {parts['claim']:,},"
        f" lifecycle world {parts['lifecycle']:,}"
    )
    for workers in (2, 3):
        for symmetry in (True, False):
            best: dict[str, float] = {}
            unique: dict[str, int] = {}
            for _ in range(3):
                for world in ("claim", "lifecycle"):
                    model: Model[Any, Any] = (
                        claim_model(claim_spec(), ClaimModelConfig(workers=workers))
                        if world == "claim"
                        else entity_model(
                            claim_spec(), EntityModelConfig(workers=workers, own_keys=False)
                        )
                    )
                    start = time.perf_counter()
                    report = Checker(model).symmetry(symmetry).run()
                    took = time.perf_counter() - start
                    best[world] = min(best.get(world, took), took)
                    unique[world] = report.unique
            print(
                f"  K={workers} symmetry={'on ' if symmetry else 'off'}:"
                f" claim world unique={unique['claim']:,} seconds={best['claim']:.2f};"
                f" lifecycle world unique={unique['lifecycle']:,}"
                f" seconds={best['lifecycle']:.2f};"
                f" lifecycle / claim: {best['lifecycle'] / best['claim']:.2f}"
            )


def claim_against_spin() -> None:
    print("== 2b. the claim model, time to verdict: built-in engine and SPIN ==")
    why = spin_available()
    if why is not None:
        print(f"  SPIN: not run ({why})")
    for workers in (3, 4):
        config = ClaimModelConfig(workers=workers)
        timed: dict[bool | str, float] = {}
        for symmetry in (True, False):
            start = time.perf_counter()
            report = Checker(claim_model(claim_spec(), config)).symmetry(symmetry).run()
            timed[symmetry] = time.perf_counter() - start
            print(
                f"  K={workers} built-in symmetry={'on ' if symmetry else 'off'}:"
                f" unique={report.unique:,} seconds={timed[symmetry]:.2f}"
                f" states/s={report.unique / timed[symmetry]:,.0f} verdict={report.verdict}"
            )
            del report
        start = time.perf_counter()
        subprocess.run(
            [str(Path(sys.executable).parent / "claimfsm"), "check", "--workers", str(workers)],
            capture_output=True,
            check=True,
        )
        timed["process"] = time.perf_counter() - start
        print(
            f"  K={workers} claimfsm check --workers {workers} (the whole process):"
            f" seconds={timed['process']:.2f}"
        )
        grown, unique = peak_memory(workers)
        print(
            f"  K={workers} built-in symmetry=off, memory: peak resident {grown / 2**20:,.0f} MB"
            f" over the model's own, {grown / unique:,.0f} bytes per unique state"
            " (its own process)"
        )
        if why is not None:
            continue
        start = time.perf_counter()
        spun, run = spin_check(claim_spec(), config)
        total = time.perf_counter() - start
        print(
            f"  K={workers} SPIN, whole check: unique={spun.unique:,} seconds={total:.2f}"
            f" (verifiers built {run.compile_seconds:.2f}, searches {run.search_seconds:.2f})"
            f" verdict={spun.verdict} memory {run.memory_mb:,.0f} MB"
            f" ({run.state_vector_bytes} bytes per state vector);"
            f" SPIN / built-in: {total / timed[True]:.2f} against symmetry on,"
            f" {total / timed[False]:.2f} against off,"
            f" {total / timed['process']:.2f} against the whole claimfsm check"
        )
        safety, search = spin_safety_only(config)
        print(
            f"  K={workers} SPIN, safety search alone: seconds={safety:.2f}"
            f" (search {search:.2f}); SPIN / built-in: {safety / timed[True]:.2f} against"
            f" symmetry on, {safety / timed[False]:.2f} against off,"
            f" {safety / timed['process']:.2f} against the whole claimfsm check"
        )


def peak_memory(workers: int) -> tuple[int, int]:
    """The built-in engine's search without symmetry, in a process of its own: the growth of
    its peak resident memory over the run (bytes), and the unique states."""
    # VmHWM, not ru_maxrss: the latter survives exec, so a child started by this (large)
    # process would report this process's peak.
    script = (
        "import re\n"
        "from claimfsm.checker import Checker, ClaimModelConfig, claim_model\n"
        "from claimfsm.spec import claim_spec\n"
        "def peak():\n"
        "    status = open('/proc/self/status').read()\n"
        "    return int(re.search(r'VmHWM:\\s+(\\d+) kB', status).group(1)) * 1024\n"
        f"model = claim_model(claim_spec(), ClaimModelConfig(workers={workers}))\n"
        "before = peak()\n"
        "report = Checker(model).run()\n"
        "print(peak() - before, report.unique)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    grown, unique = (int(x) for x in done.stdout.split())
    return grown, unique


def spin_safety_only(config: ClaimModelConfig) -> tuple[float, float]:
    """Generate, compile and run the safety verifier alone: (seconds in all, searching)."""
    from claimfsm.checker._spin import _build, _run, spin_optimisation
    from claimfsm.checker._spin_claim import claim_promela

    with tempfile.TemporaryDirectory() as scratch:
        start = time.perf_counter()
        text = claim_promela(claim_spec(), config).text
        _build(Path(scratch), "model", text, ["-DSAFETY", "-DBFS"], spin_optimisation(), None)
        searching = time.perf_counter()
        output = _run(["./model", "-m1000000"], Path(scratch) / "model", None, "pan")
        end = time.perf_counter()
    assert "errors: 0" in output, output[-500:]
    return end - start, end - searching


if __name__ == "__main__":
    main()
