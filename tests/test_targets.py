"""The claim model's targets are independent, so one target's check proves the ``always``
properties for any number of targets (claimfsm.checker._targets, docs/design.md)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from click.testing import CliRunner

from claimfsm.checker import Checker, ClaimModelConfig, Model, Property, claim_model
from claimfsm.checker._by_target import ByTarget, by_target, one_target_liveness
from claimfsm.checker._claim import Worker
from claimfsm.checker._targets import (
    TargetsIndependence,
    join,
    project,
    project_action,
    targets_independent,
)
from claimfsm.cli import main
from claimfsm.spec import claim_spec, shipped


def _classes(spec: Any, config: ClaimModelConfig) -> int:
    report = Checker(claim_model(spec, config)).symmetry().stop_on_violation(False).run()
    assert report.complete
    return report.unique


@pytest.mark.parametrize(
    ("design", "remote", "epochs"),
    [
        ("claim", "fencing", 1),
        # the quick suite takes one correct design and one wrong; the slow suite the rest
        pytest.param("claim", "plain", 1, marks=pytest.mark.slow),
        ("lapse_reclaims_sending", "fencing", 1),
        pytest.param("readback_present_only", "fencing", 1, marks=pytest.mark.slow),
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
    # deadlock freedom carries over; readback liveness (per target) projects; acquisition's
    # does not: its workers' class is shared by the targets (the premise says where), but
    # the premise of runs coming to rest holds for both
    assert found.deadlocks is None and found.determined is None
    broke = dict(found.eventually)
    if remote == "fencing":
        assert broke.pop("uncertain_is_reconciled") is None
    why = broke.pop("free_target_is_acquired")
    assert why is not None and "('steps',)" in why and "not one target's" in why
    assert broke == {}
    assert all(why is None for _name, why in found.resting)


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


def test_a_model_that_refuses_steps_on_two_targets_breaks_the_deadlock_premise() -> None:
    """Every step refused once both targets hold a claim: such a state has no step, while
    each projection (one target, its claim held) still has some."""

    def stuck(spec: Any, config: ClaimModelConfig) -> Any:
        model = claim_model(spec, config)
        step = model.next_state

        def next_state(world: Any, action: Any) -> Any:
            if len(world.targets) > 1 and all(t.epoch for t in world.targets):
                return None
            return step(world, action)

        return dataclasses.replace(model, next_state=next_state, processes=None)

    config = ClaimModelConfig(workers=2, targets=2, drafts=1, epochs=1)
    found = targets_independent(claim_spec(), config, model=stuck)
    assert found.failure is None  # every step taken is still a one-target step
    assert found.deadlocks is not None
    assert "a state with no step projects onto one with a step" in found.deadlocks


def test_a_fairness_class_shared_by_the_targets_is_not_carried_over() -> None:
    """Readback made one class for all targets: a fair two-target run may read back one
    target for ever and never the other, so the property does not carry over."""

    def shared_readback(spec: Any, config: ClaimModelConfig) -> Any:
        model = claim_model(spec, config)
        props = [
            dataclasses.replace(p, fair=lambda a: "readback" if a[0] == "reconcile" else None)
            if p.name == "uncertain_is_reconciled"
            else p
            for p in model.properties
        ]
        return dataclasses.replace(model, properties=props)

    config = ClaimModelConfig(workers=2, targets=2, drafts=1, epochs=1)
    found = targets_independent(claim_spec(), config, model=shared_readback)
    why = dict(found.eventually)["uncertain_is_reconciled"]
    assert why is not None and "'readback'" in why and "not one target's" in why


def test_a_design_whose_readback_can_be_refused_may_stop_with_uncertain_open() -> None:
    """readback_present_only refuses an absent readback: one target can rest uncertain with
    workers' steps possible and no fair one, which a second target would take for ever."""
    wrong, right = (
        claim_model(shipped()[name], ClaimModelConfig(workers=2, drafts=1))
        for name in ("readback_present_only", "claim")
    )
    (found,) = one_target_liveness(wrong, ["uncertain_is_reconciled"])
    assert found.stops is not None and "uncertain" in found.stops
    (fine,) = one_target_liveness(right, ["uncertain_is_reconciled"])
    assert fine.stops is None and fine.settles is None


def test_a_loop_through_met_and_open_states_does_not_settle() -> None:
    """Two states, each step to the other: "eventually at 1" holds from 0 under fairness,
    yet a target could be at 1 while another is at 0 for ever: it does not settle."""
    toggle: Model[int, str] = Model(
        init_states=lambda: [0],
        actions=lambda s: ["flip"],
        next_state=lambda s, a: 1 - s,
        properties=[
            Property(
                "at_one", "eventually", lambda s: s == 1, trigger=lambda s: s == 0, fair=lambda a: a
            )
        ],
    )
    (found,) = one_target_liveness(toggle, ["at_one"], symmetry=False)
    assert found.stops is None
    assert found.settles is not None and "both met and open" in found.settles


def _without_worker_fairness(spec: Any, config: ClaimModelConfig) -> Any:
    """free_target_is_acquired with acquiring fair and the workers' steps not."""
    model = claim_model(spec, config)
    props = [
        dataclasses.replace(p, fair=lambda a: (a[0], a[2]) if a[0] == "acquire" else None)
        if p.name == "free_target_is_acquired"
        else p
        for p in model.properties
    ]
    return dataclasses.replace(model, properties=props)


def test_acquisition_without_worker_fairness_does_not_carry_over() -> None:
    """A worker holding a claim has no fair step: busy on one target it leaves the other
    waiting with nothing fair to do, though the other's projection could acquire (the
    slow test below finds such a run with two targets searched whole). Acquiring, an idle
    worker's step, does not project either."""
    config = ClaimModelConfig(workers=2, targets=2, drafts=1, epochs=2)
    found = by_target(claim_spec(), config, model=_without_worker_fairness)
    why = found.not_carried()["free_target_is_acquired"]
    assert "by projection: a fair step an idle worker takes: worker 0 acquires" in why
    assert "at rest: worker 0 has no fair step" in why
    assert found.verdict == "incomplete"
    assert found.one.outcome(_named(found, "free_target_is_acquired")) == "holds"


def _named(found: Any, name: str) -> Any:
    return next(p for p in found.one.model.properties if p.name == name)


@pytest.mark.slow
@pytest.mark.parametrize("fair_workers", [True, False])
def test_by_target_agrees_with_two_targets_searched_whole(fair_workers: bool) -> None:
    """K=2, T=2, D=1, 2 epochs (1.4 million classes): acquisition liveness holds with the
    workers' fairness, as by_target carries it over, and fails without, where it does not."""
    build = claim_model if fair_workers else _without_worker_fairness
    config = ClaimModelConfig(workers=2, targets=2, drafts=1, epochs=2)
    whole = Checker(build(claim_spec(), config)).symmetry().run()
    assert whole.complete
    found = by_target(claim_spec(), config, model=build)
    assert ("free_target_is_acquired" in found.not_carried()) is (not fair_workers)
    expected = "holds" if fair_workers else "violated"
    assert whole.outcome(_named(found, "free_target_is_acquired")) == expected
    assert found.verdict == ("ok" if fair_workers else "incomplete")


def test_one_target_conditions_of_runs_at_rest() -> None:
    """A loop of two states; a fair step that changes nothing; a state where the
    obligation is open and no fair step is possible: each is found."""

    def toy(step: Any, fair: Any) -> Model[int, str]:
        return Model(
            init_states=lambda: [0],
            actions=lambda s: ["go"] if s < 2 else [],
            next_state=step,
            properties=[
                Property(
                    "at_two", "eventually", lambda s: s == 2, fair=fair, trigger=lambda s: s != 2
                )
            ],
        )

    looping = toy(lambda s, a: 1 - s, lambda a: a)
    (found,) = one_target_liveness(looping, ["at_two"], symmetry=False)
    assert found.loops is not None and "a loop through 2 states" in found.loops
    (found,) = one_target_liveness(toy(lambda s, a: s, lambda a: a), ["at_two"], symmetry=False)
    assert found.fair_loop is not None and found.loops is None
    (found,) = one_target_liveness(
        toy(lambda s, a: s + 1, lambda a: None), ["at_two"], symmetry=False
    )
    assert found.idle is not None and found.stops is not None and not found.rests
    (found,) = one_target_liveness(toy(lambda s, a: s + 1, lambda a: a), ["at_two"], symmetry=False)
    assert found.rests and found.projects


def test_a_state_not_made_of_its_projections_is_found() -> None:
    """With two targets, a worker that, idle again, keeps naming its last target: no
    projection shows it (with one target the model is unchanged)."""

    def remembering(spec: Any, config: ClaimModelConfig) -> Any:
        model = claim_model(spec, config)
        step = model.next_state

        def next_state(world: Any, action: Any) -> Any:
            after = step(world, action)
            if after is None or action[0] not in ("release", "confirm") or len(after.targets) < 2:
                return after
            i = action[1]
            kept = after.workers[i]._replace(target=world.workers[i].target)
            return after._replace(workers=(*after.workers[:i], kept, *after.workers[i + 1 :]))

        return dataclasses.replace(model, next_state=next_state, processes=None)

    config = ClaimModelConfig(workers=2, targets=2, drafts=1, epochs=1)
    found = targets_independent(claim_spec(), config, model=remembering)
    assert found.determined is not None
    assert "the state is not made of its projections" in found.determined


def test_join_rebuilds_a_world_from_its_projections() -> None:
    model = claim_model(claim_spec(), ClaimModelConfig(workers=2, targets=2, drafts=1))
    (start,) = model.init_states()
    world = start._replace(workers=(Worker("R", 1, 1, 1, (0, 1, 1)), Worker("S", 0, 2, 3, ())))
    assert join([project(world, 0), project(world, 1)], world.ghosts) == world


def test_check_by_target_proves_two_targets() -> None:
    runner = CliRunner()
    args = ["check", "--workers", "2", "--drafts", "1", "--targets", "2", "--by-target"]
    result = runner.invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    one = ClaimModelConfig(workers=2, drafts=1)
    assert data["one_target"]["unique"] == _classes(claim_spec(), one)
    assert data["premise"]["complete"] and data["premise"]["classes"] > 0
    assert data["verdict"] == "ok" and data["deadlocks"] == "none"
    outcomes = {name: p["outcome"] for name, p in data["properties"].items()}
    assert outcomes["uncertain_is_reconciled"] == "holds"
    assert outcomes["no_overlapping_sends"] == "holds"
    assert outcomes["free_target_is_acquired"] == "holds"
    assert data["carried"] == {
        "uncertain_is_reconciled": "by projection",
        "free_target_is_acquired": "at rest",
    }
    assert data["not_carried"] == {}
    for bad in (
        ["--targets", "1"],
        ["--targets", "2", "--engine", "spin"],
        ["--targets", "2", "--max-states", "10"],
    ):
        refused = runner.invoke(main, ["check", "--by-target", *bad])
        assert refused.exit_code == 2 and "--by-target" in refused.output, refused.output


def test_a_violation_on_one_target_is_the_verdict_for_many() -> None:
    """The one-target check's violation decides, whatever carries over; a premise that
    broke leaves every property not carried over."""
    spec = shipped()["release_by_target"]
    one = Checker(claim_model(spec, ClaimModelConfig(workers=2, drafts=1))).symmetry().run()
    fine = TargetsIndependence(10, 20, deadlocks=None, eventually=())
    broken = TargetsIndependence(0, 3, False, "a step on another target changes target 1")
    config = ClaimModelConfig(workers=2, targets=2, drafts=1, epochs=1)
    for premise in (fine, broken):
        found = ByTarget(2, one, premise, config, ())
        assert found.verdict == "violated"
        assert found.outcome(one.violations[0]) == "violated (one target)"
    assert ByTarget(2, one, broken, config, ()).not_carried() == {
        "always": "the premise broke: a step on another target changes target 1"
    }
