"""Model-checker benchmark: prints figures, asserts nothing. ``make bench-checker``.

1. A bare breadth-first search over tuples (four counters, each step increments one), in
   this process: what plain Python does per state, the anchor for the figures below.
2. The claim model, correct design, fencing remote, crashes and lost acknowledgements:
   unique states, generated states, seconds and unique states per second, with and
   without symmetry reduction, for K=2 and K=3 workers (T=1, D=2, 3 epochs).
"""

from __future__ import annotations

import time
from collections import deque

from claimfsm.checker import Checker, ClaimModelConfig, claim_model
from claimfsm.spec import claim_spec


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


if __name__ == "__main__":
    main()
