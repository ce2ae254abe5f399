"""How the claim world's states and the lifecycle world's correspond on ``claim.toml``.

Both checker worlds run the claim's declaration; until the claim world is retired, its
pinned counts and the SPIN anchor are that world's. These map a state of either onto what
both keep (:func:`claim_common`, :func:`lifecycle_common`): the row (its lease bit as
kept outside the lease states: ``claim.toml``'s ``[lease] kept``), each worker's phase and
epoch and whether it holds the current claim, the sticky marks; request keys and raw
tokens left out. ``bench/worlds_gap.py`` prints the map;
``tests/test_claim_in_the_lifecycle_world.py`` holds the two worlds to it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from claimfsm.checker._claim import World
from claimfsm.checker._entity_world import EntityWorld
from claimfsm.spec import Spec
from claimfsm.spec._vocabulary import State, claim_steps


def _phases(spec: Spec) -> dict[tuple[str, str], str]:
    """A lifecycle handle's (state it saw, request phase) as the claim world's worker
    phase, the states found by the claim's shape (``claim_steps``), not by name."""
    steps = claim_steps(spec)
    reserved, sending = steps.state(State.RESERVED), steps.state(State.SENDING)
    return {(reserved, ""): "R", **{(sending, p): p for p in "SWA"}}


def claim_common(spec: Spec) -> Callable[[World], tuple[Any, ...]]:
    """A claim-world state (one target) as what both worlds keep."""

    def common(w: World) -> tuple[Any, ...]:
        t, r, g = w.targets[0], w.remote[0], w.ghosts
        row = (
            *(t.state, t.epoch, t.lease_live, r.fence, w.drafts[0], t.draft, t.version),
            tuple(sorted(q.epoch for q in r.in_flight)),
            tuple(sorted(q.epoch for q in r.landed)),
            *(t.outcome, t.retries),
        )
        workers: list[tuple[Any, ...]] = []
        for k in w.workers:
            saved = (k.saved[1], k.saved[1:] == (t.epoch, t.token)) if k.saved else None
            if k.target == -1:
                workers.append(("idle", saved))
            else:
                current = (k.epoch, k.token) == (t.epoch, t.token)
                workers.append((k.phase, k.epoch, current, saved))
        return row, tuple(workers), (g.overlap, g.stale_changed, g.escaped, g.discarded)

    return common


def lifecycle_common(spec: Spec) -> Callable[[EntityWorld], tuple[Any, ...]]:
    """A lifecycle-world state (one entity) as what both worlds keep."""
    left = {i.name for i in spec.invariants.values() if i.kind == "left_only_by"}
    discarded = {i.name for i in spec.invariants.values() if i.kind == "reachable" and i.event}
    phases = _phases(spec)

    def common(w: EntityWorld) -> tuple[Any, ...]:
        t = w.rows[0]
        row = (
            *(t.state, t.epoch, t.live, t.fence, t.drafts, t.draft),
            t.version,
            tuple(sorted(e for e, _ in t.in_flight)),
            tuple(sorted(e for e, _ in t.landed)),
            *(t.outcome, t.resent),
        )
        workers: list[tuple[Any, ...]] = []
        for h in w.clients:
            saved = None
            if h is not None and h.saved:
                saved = (h.saved[1], h.saved[1:] == (t.epoch, t.token))
            if h is None or h.key == -1:
                workers.append(("idle", saved))
                continue
            phase = phases.get((h.seen, h.phase), f"{h.seen}/{h.phase}")
            current = (h.epoch, h.token) == (t.epoch, t.token)
            workers.append((phase, h.epoch, current, saved))
        marks = (bool(w.marks & left), bool(w.marks & discarded))
        return row, tuple(workers), (w.overlap, w.stale_changed, *marks)

    return common
