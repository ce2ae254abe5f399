"""Model paths replayed on the real SQLite store: the store does what the model predicts."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from claimfsm.checker import Checker, ClaimModelConfig, claim_model
from claimfsm.errors import ClaimFSMError
from claimfsm.replay import Coverage, ReplayMismatch, replay_coverage, replay_path
from claimfsm.spec import claim_spec, designs
from claimfsm.store import SQLiteStore, Store


def fresh_files(tmp_path: Path, per_path: int) -> Callable[[Callable[[], float]], Store]:
    """A new database file for every path (``per_path`` connections open each one)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    state = {"calls": 0}

    def open_store(clock: Callable[[], float]) -> Store:
        n = state["calls"] // per_path
        state["calls"] += 1
        return SQLiteStore(tmp_path / f"path-{n}.sqlite", clock=clock)

    return open_store


def test_every_declared_transition_and_guard_refusal_is_reached_on_the_store(
    tmp_path: Path,
) -> None:
    fencing = replay_coverage(
        claim_spec(), ClaimModelConfig(workers=2), fresh_files(tmp_path / "f", 3)
    )
    dedup = replay_coverage(
        claim_spec(),
        ClaimModelConfig(workers=2, drafts=1, epochs=2, remote="dedup"),
        fresh_files(tmp_path / "d", 3),
    )
    assert fencing.paths > 50 and fencing.steps > 500
    assert fencing.missing == {("retry", "uncertain", "sending")}  # needs a deduping remote
    assert dedup.missing == set()
    # The README quotes exactly these runs' numbers.
    readme = " ".join((Path(__file__).parent.parent / "README.md").read_text().split())
    quoted = re.search(
        r"takes (\d+) of the (\d+) declared transitions on the store and raises (\d+) kinds "
        r"of refusal; .*? it takes all (\d+)\.",
        readme,
    )
    assert quoted, "the README's replay coverage sentence is missing"
    taken, declared, kinds, all_taken = map(int, quoted.groups())
    assert taken == len(fencing.declared & fencing.transitions)
    assert declared == all_taken == len(fencing.declared) == len(dedup.declared & dedup.transitions)
    assert kinds == len(fencing.refusals)
    refusals = fencing.refusals | dedup.refusals
    for expected in [
        ("begin_send", "owner_matches"),
        ("begin_send", "lease_live"),
        ("begin_send", "draft_unchanged"),
        ("begin_send", "StaleClaim"),  # an expired epoch's owner comes back
        ("release", "owner_matches"),
        ("renew", "lease_live"),
        ("timeout", "owner_matches"),
        ("release", "IllegalTransition"),
    ]:
        assert expected in refusals, expected


def test_a_wrong_designs_counterexample_cannot_be_played_on_the_real_store(
    tmp_path: Path,
) -> None:
    spec = designs()["lapse_reclaims_sending"]
    config = ClaimModelConfig(workers=2)
    report = Checker(claim_model(spec, config)).symmetry().stop_on_violation().run()
    path = report.discoveries["no_overlapping_sends"].path
    coverage = Coverage(declared=set())
    # The store implements the correct declaration: it refuses the reclaim the variant allows.
    with pytest.raises((ReplayMismatch, ClaimFSMError)) as caught:
        replay_path(spec, config, path, fresh_files(tmp_path, 3), coverage)
    assert "TargetBusy" in type(caught.value).__name__ or "store has" in str(caught.value)


def test_replay_needs_one_target(tmp_path: Path) -> None:
    from claimfsm.errors import InvalidArgument

    config = ClaimModelConfig(workers=1, targets=2)
    with pytest.raises(InvalidArgument, match="one-target"):
        replay_path(claim_spec(), config, (), fresh_files(tmp_path, 2), Coverage(set()))
