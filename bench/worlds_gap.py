"""Where the lifecycle world's states on claim.toml come from: prints figures, asserts nothing.

``.venv/bin/python bench/worlds_gap.py [WORKERS]`` (default 2; about a minute and 3 GB at 2).

Both checker worlds run ``specs/claim.toml`` at its declared bounds but the workers
(without symmetry): the claim world reaches the pinned counts, the lifecycle world
(``entity_model``) more, since its clients carry their own request keys, which the claim
world folds away. This prints,
for each part of each world's state, how many distinct states are left when that part
alone is ignored, so the parts that tell most states apart are the ones to look at first:
in the lifecycle world what the claim world folds away, and in the claim world what the
lifecycle world does not keep. Ignoring a part is not a sound reduction: it only shows
where the states differ.

It also counts the lifecycle world whose clients carry no request key of their own, as the
claim world's workers do not against a fencing remote (``own_keys=False``).

Then it maps both worlds' states onto what they share (:func:`claim_common`,
:func:`lifecycle_common`: the row, each worker's phase and epoch and whether it holds the
current claim, the sticky marks; request keys and raw tokens left out) and prints how many
states each reaches that the other does not, with each shared part ignored in turn. Since
``claim.toml`` declares ``[lease] kept = true`` (the claim row keeps its last deadline
outside the lease states, as the claim world always did), the keyless lifecycle world
reaches the claim world's count and none in one world only: the figures to look at when
a change makes the worlds part again.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from claimfsm.checker import (
    ClaimModelConfig,
    EntityModelConfig,
    claim_model,
    entity_model,
    reachable,
)
from claimfsm.checker._claim import Ghosts, Remote, Target, Worker, World
from claimfsm.checker._entity_world import (
    EntityWorld,
    Handle,
    Row,
)
from claimfsm.checker._worlds import claim_common, lifecycle_common
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


def _claim_parts() -> dict[str, Callable[[World], Any]]:
    """For each part of the claim world's state, the world without it."""

    def field_of(kind: str, cls: Any, i: int) -> Callable[[World], Any]:
        def cut(w: World) -> Any:
            parts: list[Any] = list(w)
            at = World._fields.index(kind)
            parts[at] = tuple(x[:i] + x[i + 1 :] for x in parts[at])
            return tuple(parts)

        return cut

    parts: dict[str, Callable[[World], Any]] = {}
    for kind, cls in (("targets", Target), ("workers", Worker), ("remote", Remote)):
        for i, name in enumerate(cls._fields):
            parts[f"{kind[:-1] if kind != 'remote' else kind}.{name}"] = field_of(kind, cls, i)
    for i, name in enumerate(Ghosts._fields):
        parts[f"ghosts.{name}"] = _ignoring_ghost(i)
    parts["drafts"] = lambda w: (w.targets, w.workers, w.remote, w.ghosts)
    return parts


def _ignoring_ghost(i: int) -> Callable[[World], Any]:
    """The claim world with sticky fact ``i`` left out."""
    return lambda w: (*w[:4], w.ghosts[:i] + w.ghosts[i + 1 :])


def _entity_parts() -> dict[str, Callable[[EntityWorld], Any]]:
    """For each part of the lifecycle world's state, the world without it."""
    parts: dict[str, Callable[[EntityWorld], Any]] = {}
    for i, name in enumerate(Row._fields):
        parts[f"row.{name}"] = _ignoring_row_part(i)
    for i, name in enumerate(Handle._fields):
        parts[f"handle.{name}"] = _ignoring_handle_part(i)
    parts["marks"] = lambda w: (w.rows, w.clients, w.stale_changed, w.overlap)
    return parts


def _print_parts(seen: set[Any], parts: dict[str, Callable[[Any], Any]]) -> None:
    total = len(seen)
    rows = [(name, without(seen, part)) for name, part in parts.items()]
    for name, left in sorted(rows, key=lambda r: r[1]):
        if left < total:
            print(f"  {name:<22} {left:>10,}  ({left / total:.2f})")
    print("  (every other part: no state told apart by it alone)")


def _ignoring_common_row_part(i: int) -> Callable[[tuple[Any, ...]], Any]:
    return lambda x: (x[0][:i] + x[0][i + 1 :], x[1], x[2])


def _print_common(claims: set[tuple[Any, ...]], lifecycle: set[tuple[Any, ...]]) -> None:
    both = len(claims & lifecycle)
    print(f"  claim world {len(claims):,}, lifecycle world {len(lifecycle):,}, both {both:,}")
    names = ["state", "epoch", "lease", "fence", "drafts", "draft", "version"]
    names += ["in_flight", "landed", "outcome", "retries"]
    cuts = [(f"row.{n}", _ignoring_common_row_part(i)) for i, n in enumerate(names)]
    cuts.append(("workers' current", lambda x: (x[0], tuple(k[:2] for k in x[1]), x[2])))
    cuts.append(("marks", lambda x: (x[0], x[1])))
    print(f"  {'ignoring':<22} {'claim only':>10} {'lifecycle only':>15}")
    print(f"  {'(nothing)':<22} {len(claims - lifecycle):>10,} {len(lifecycle - claims):>15,}")
    for name, cut in cuts:
        a, b = {cut(x) for x in claims}, {cut(x) for x in lifecycle}
        print(f"  {name:<22} {len(a - b):>10,} {len(b - a):>15,}")


def main() -> None:
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    spec = load_spec(declarations_dir() / "claim.toml")
    start = time.perf_counter()
    model = claim_model(spec, ClaimModelConfig.declared(spec, workers=workers))
    claims = reachable(model)
    took = time.perf_counter() - start
    print(f"claim world, K={workers}: {len(claims):,} unique states ({took:.1f} s)")
    start = time.perf_counter()
    seen = reachable(entity_model(spec, EntityModelConfig(workers=workers)))
    total = len(seen)
    took = time.perf_counter() - start
    print(f"lifecycle world, K={workers}: {total:,} unique states ({took:.1f} s)")
    print(f"ratio lifecycle / claim: {total / len(claims):.2f}")
    start = time.perf_counter()
    keyless = len(reachable(entity_model(spec, EntityModelConfig(workers=workers, own_keys=False))))
    took = time.perf_counter() - start
    print(
        f"lifecycle world, K={workers}, its clients carrying no request key (own_keys=False,"
        f" the claim world's abstraction): {keyless:,} unique states ({took:.1f} s)"
    )
    print("\nstates left when one part is ignored (lifecycle world):")
    _print_parts(seen, _entity_parts())
    print("\nstates left when one part is ignored (claim world):")
    _print_parts(claims, _claim_parts())
    print("\nboth worlds on what they share:")
    of_claim, of_lifecycle = claim_common(spec), lifecycle_common(spec)
    _print_common({of_claim(w) for w in claims}, {of_lifecycle(w) for w in seen})


if __name__ == "__main__":
    main()
