"""The claim model's targets are independent, so one target's check proves the ``always``
properties for any number of targets (claimfsm.checker._targets, docs/design.md)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from claimfsm.checker import Checker, ClaimModelConfig, claim_model
from claimfsm.checker._claim import Worker
from claimfsm.checker._targets import project, project_action, targets_independent
from claimfsm.spec import claim_spec, shipped


def _classes(spec: Any, config: ClaimModelConfig) -> int:
    report = Checker(claim_model(spec, config)).symmetry().stop_on_violation(False).run()
    assert report.complete
    return report.unique


@pytest.mark.parametrize(
    ("design", "remote", "epochs"),
    [
        ("claim", "fencing", 1),
        ("claim", "plain", 1),
        ("lapse_reclaims_sending", "fencing", 1),
        ("readback_present_only", "fencing", 1),
        # the send starts right after acquire: 124 thousand classes, 40 s, so in the slow suite
        pytest.param("intent_after_send", "plain", 1, marks=pytest.mark.slow),
    ],
)
def test_every_step_of_two_targets_is_a_one_target_step_or_a_stutter_on_each(
    design: str, remote: str, epochs: int
) -> None:
    spec = shipped()[design]
    config = ClaimModelConfig(workers=2, targets=2, drafts=1, epochs=epochs, remote=remote)  # type: ignore[arg-type]
    found = targets_independent(spec, config)
    assert found.failure is None, found.failure
    assert found.complete
    # every class of the two-target space was checked, each step projected onto both
    assert found.states == _classes(spec, config)
    assert found.steps > found.states


def test_a_model_that_couples_its_targets_fails_the_check() -> None:
    """An acquire that also lets every other target's lease lapse: the projection onto
    the other target changes on a step that is not its own."""

    def coupled(spec: Any, config: ClaimModelConfig) -> Any:
        model = claim_model(spec, config)
        step = model.next_state

        def next_state(world: Any, action: Any) -> Any:
            after = step(world, action)
            if after is None or action[0] != "acquire":
                return after
            targets = tuple(
                tg if t == action[2] else tg._replace(lease_live=False)
                for t, tg in enumerate(after.targets)
            )
            return after._replace(targets=targets)

        return dataclasses.replace(model, next_state=next_state, processes=None)

    config = ClaimModelConfig(workers=2, targets=2, drafts=1, epochs=1)
    found = targets_independent(claim_spec(), config, model=coupled)
    assert found.failure is not None
    assert "a step on another target changes target" in found.failure
    assert "acquires target" in found.failure  # the step is named in the model's words


def test_the_check_stops_at_a_state_limit_and_says_it_is_incomplete() -> None:
    config = ClaimModelConfig(workers=2, targets=2, drafts=1, epochs=1)
    found = targets_independent(claim_spec(), config, max_states=500)
    assert found.failure is None
    assert not found.complete
    # where the checker's own search stops at that limit (it is the search underneath)
    limited = Checker(claim_model(claim_spec(), config)).symmetry().exhaustive().max_states(500)
    assert found.states == limited.run().unique < _classes(claim_spec(), config)


def test_a_worker_busy_on_another_target_looks_idle_and_its_saved_handle_unseen() -> None:
    model = claim_model(claim_spec(), ClaimModelConfig(workers=2, targets=2, drafts=1))
    (start,) = model.init_states()
    world = start._replace(workers=(Worker("R", 1, 1, 1, (0, 1, 1)), Worker("S", 0, 2, 3, ())))
    seen_from_0 = project(world, 0)
    assert seen_from_0.workers == (Worker("", -1, 0, 0, (0, 1, 1)), Worker("S", 0, 2, 3, ()))
    seen_from_1 = project(world, 1)
    assert seen_from_1.workers == (Worker("R", 0, 1, 1, ()), Worker("", -1, 0, 0, ()))
    assert seen_from_1.targets == (world.targets[1],)
    # the worker's own steps belong to the target it holds; a wake-up to its saved one's
    assert project_action(world, ("begin_send", 0), 1) == ("begin_send", 0)
    assert project_action(world, ("begin_send", 0), 0) is None
    assert project_action(world, ("acquire", 1, 1, 0), 1) == ("acquire", 1, 0, 0)
    assert project_action(world, ("land", 0, 0), 0) == ("land", 0, 0)
    with pytest.raises(ValueError, match="does not know"):
        project_action(world, ("teleport", 0), 0)


@pytest.mark.slow
def test_targets_are_independent_with_three_workers() -> None:
    config = ClaimModelConfig(workers=3, targets=2, drafts=1, epochs=1)
    found = targets_independent(claim_spec(), config)
    assert found.failure is None, found.failure
    assert found.complete
