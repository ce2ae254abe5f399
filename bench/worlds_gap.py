"""Where the lifecycle world's states on claim.toml come from: prints figures, asserts nothing.

``.venv/bin/python bench/worlds_gap.py [WORKERS]`` (default 2; about 20 s and 2 GB at 2).

Both checker worlds run ``specs/claim.toml`` at its declared bounds but the workers
(without symmetry): the claim world reaches the pinned counts, the lifecycle world
(``entity_model``) more, since it keeps what the claim world folds away. Retiring the claim
world needs the lifecycle world to reach the pinned counts state for state; this prints,
for each part of the lifecycle world's state, how many distinct states are left when that
part alone is ignored, so the parts that tell most states apart are the ones to look at
first. Ignoring a part is not a sound reduction: it only shows where the states differ.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from claimfsm.checker import (
    Checker,
    ClaimModelConfig,
    EntityModelConfig,
    claim_model,
    entity_model,
    reachable,
)
from claimfsm.checker._entity import EntityWorld, Handle, Row
from claimfsm.spec import declarations_dir, load_spec


def _ignoring_row_part(i: int) -> Callable[[EntityWorld], Any]:
    """The world with part ``i`` of every row left out."""
    return lambda w: (tuple(r[:i] + r[i + 1 :] for r in w.rows), w.clients, *_flags(w))


def _ignoring_handle_part(i: int) -> Callable[[EntityWorld], Any]:
    """The world with part ``i`` of every handle left out."""
    return lambda w: (
        w.rows,
        tuple(None if h is None else h[:i] + h[i + 1 :] for h in w.clients),
        *_flags(w),
    )


def _flags(w: EntityWorld) -> tuple[Any, ...]:
    return (w.stale_changed, w.marks, w.overlap)


def without(seen: set[EntityWorld], part: Callable[[EntityWorld], Any]) -> int:
    return len({part(w) for w in seen})


def main() -> None:
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    spec = load_spec(declarations_dir() / "claim.toml")
    start = time.perf_counter()
    claims = Checker(claim_model(spec, ClaimModelConfig.declared(spec, workers=workers)))
    report = claims.symmetry(False).run()
    took = time.perf_counter() - start
    print(f"claim world, K={workers}: {report.unique:,} unique states ({took:.1f} s)")
    start = time.perf_counter()
    seen = reachable(entity_model(spec, EntityModelConfig(workers=workers)))
    total = len(seen)
    took = time.perf_counter() - start
    print(f"lifecycle world, K={workers}: {total:,} unique states ({took:.1f} s)")
    print(f"ratio lifecycle / claim: {total / report.unique:.2f}")
    print("\nstates left when one part is ignored (lifecycle world):")
    rows: list[tuple[str, int]] = []
    for i, name in enumerate(Row._fields):
        rows.append((f"row.{name}", without(seen, _ignoring_row_part(i))))
    for i, name in enumerate(Handle._fields):
        rows.append((f"handle.{name}", without(seen, _ignoring_handle_part(i))))
    rows.append(("marks", without(seen, lambda w: (w.rows, w.clients, w.stale_changed, w.overlap))))
    for name, left in sorted(rows, key=lambda r: r[1]):
        if left < total:
            print(f"  {name:<22} {left:>10,}  ({left / total:.2f})")
    print("  (every other part: no state told apart by it alone)")


if __name__ == "__main__":
    main()
