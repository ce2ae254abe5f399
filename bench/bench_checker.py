"""Model-checker benchmark: prints figures, asserts nothing. ``make bench-checker``.

1. A bare breadth-first search over tuples (four counters, each step increments one), in
   this process: what plain Python does per state, the anchor for the figures below.
2. The claim model, correct design, fencing remote, crashes and lost acknowledgements:
   unique states, generated states, seconds and unique states per second, with and
   without symmetry reduction, for K=2 and K=3 workers (T=1, D=2, 3 epochs).
3. The job lifecycle (specs/job.toml, its [world] with K workers and one or two jobs),
   checked by the built-in engine and, when SPIN and a C compiler are installed, by SPIN
   from the generated Promela: time to verdict (SPIN's includes generating and compiling
   its verifiers, one for the safety search and one per eventually invariant), unique
   states, and the ratio SPIN / built-in, from the same run.
"""

from __future__ import annotations

import time
from collections import deque

from claimfsm.checker import (
    Checker,
    ClaimModelConfig,
    EntityModelConfig,
    claim_model,
    entity_model,
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
            report = (
                Checker(claim_model(claim_spec(), config)).symmetry(symmetry).exhaustive().run()
            )
            rate = report.states_per_second
            print(
                f"  K={workers} T=1 D=2 symmetry={'on ' if symmetry else 'off'}: "
                f"unique={report.unique:,} generated={report.states:,} depth={report.depth} "
                f"seconds={report.seconds:.1f} states/s={rate:,.0f} "
                f"({rate / anchor:.2f} of the bare search) verdict={report.verdict}"
            )

    print("== 3. the job lifecycle: the built-in engine and SPIN (time to verdict) ==")
    job = load_spec(declarations_dir() / "job.toml")
    why = spin_available()
    if why is not None:
        print(f"  SPIN: not run ({why})")
    for workers, keys in ((3, 1), (4, 1), (3, 2)):
        world = EntityModelConfig(workers=workers, keys=keys)
        timed = {}
        for symmetry in (True, False):
            start = time.perf_counter()
            checked = Checker(entity_model(job, world)).symmetry(symmetry).run()
            timed[symmetry] = time.perf_counter() - start
            print(
                f"  K={workers} jobs={keys} built-in symmetry={'on ' if symmetry else 'off'}: "
                f"unique={checked.unique:,} seconds={timed[symmetry]:.2f} "
                f"states/s={checked.unique / timed[symmetry]:,.0f} verdict={checked.verdict}"
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


if __name__ == "__main__":
    main()
