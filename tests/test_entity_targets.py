"""A declared lifecycle's entities are independent in its checker world, so one entity's
check carries over to many (claimfsm.checker._entity_targets, docs/design.md "Many
targets"): ``claimfsm check LIFECYCLE --targets T --by-target``."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from click.testing import CliRunner

from claimfsm.checker import Checker, EntityModelConfig, entity_model
from claimfsm.checker._by_target import by_target
from claimfsm.checker._entity_targets import entity_keys, join, project, project_action
from claimfsm.checker._entity_world import (
    EntityWorld,
    Handle,
    resting,
)
from claimfsm.checker._targets import targets_independent
from claimfsm.cli import main
from claimfsm.spec import Spec, declarations_dir, load_spec

PREMISE = EntityModelConfig(workers=2, keys=2, epochs=1)


def _job(name: str = "job") -> Spec:
    path = declarations_dir() / (f"{name}.toml" if name == "job" else f"wrong/job/{name}.toml")
    return load_spec(path)


def _classes(spec: Spec, config: EntityModelConfig) -> int:
    report = Checker(entity_model(spec, config)).symmetry().exhaustive().run()
    assert report.complete
    return report.unique


@pytest.mark.parametrize(
    "design",
    ["job", "orphan_waits_for_readback", "requeue_on_readback", "requeue_without_evidence"],
)
def test_every_step_of_two_jobs_is_a_one_job_step_or_a_stutter_on_each(design: str) -> None:
    """Over the whole two-job space every step projects onto each job as a one-job step or
    a stutter, each ``always`` property is the conjunction of its projections, a state
    with no step may stop where its projections may, and ``orphan_is_requeued`` (of job 0)
    is met wherever its projection onto job 0 is, with one job's fairness classes."""
    spec = _job(design)
    found = targets_independent(spec, PREMISE, projection=entity_keys(spec))
    assert found.failure is None, found.failure
    assert found.complete and found.states == _classes(spec, PREMISE)
    assert found.steps > found.states
    assert found.deadlocks is None and found.determined is None
    assert dict(found.eventually) == {"orphan_is_requeued": None}
    assert dict(found.resting) == {"orphan_is_requeued": None}


def test_a_client_busy_on_another_job_looks_idle_and_its_saved_handle_unseen() -> None:
    spec = _job()
    model = entity_model(spec, EntityModelConfig(workers=3, keys=2))
    (start,) = model.init_states()
    holder = Handle(1, 1, 1, "leased", saved=(0, 1, 1))
    world = start._replace(clients=(holder, Handle(0, 2, 3, "running", True), resting((1, 1, 2))))
    seen_from_0 = project(world, 0)
    assert seen_from_0.clients == (
        resting((0, 1, 1)),
        Handle(0, 2, 3, "running", True),
        None,
    )
    seen_from_1 = project(world, 1)
    assert seen_from_1.clients == (Handle(0, 1, 1, "leased"), None, resting((0, 1, 2)))
    assert seen_from_1.rows == (world.rows[1],)
    assert join([seen_from_0, seen_from_1], world) == world
    # a client's steps belong to the job it holds; a wake-up to its saved one's; a take and
    # the world's steps to the job they name
    assert project_action(world, ("own", 0, "start"), 1) == ("own", 0, "start")
    assert project_action(world, ("own", 0, "start"), 0) is None
    assert project_action(world, ("wake", 2, "start"), 1) == ("wake", 2, "start")
    assert project_action(world, ("take", 2, 1, "lease"), 1) == ("take", 2, 0, "lease")
    assert project_action(world, ("take", 2, 1, "lease"), 0) is None
    assert project_action(world, ("env", 1, "requeue"), 1) == ("env", 0, "requeue")
    with pytest.raises(ValueError, match="does not know"):
        project_action(world, ("teleport", 0), 0)


def _coupled(spec: Spec, config: EntityModelConfig) -> Any:
    """A take that also lets every other job's lease lapse."""
    model = entity_model(spec, config)
    step = model.next_state

    def next_state(world: EntityWorld, action: Any) -> Any:
        after = step(world, action)
        if after is None or action[0] != "take":
            return after
        rows = tuple(
            row if k == action[2] else row._replace(live=False) for k, row in enumerate(after.rows)
        )
        return after._replace(rows=rows)

    return dataclasses.replace(model, next_state=next_state, processes=None)


def test_a_lifecycle_model_that_couples_its_entities_fails_the_check() -> None:
    spec = _job()
    found = targets_independent(spec, PREMISE, model=_coupled, projection=entity_keys(spec))
    assert found.failure is not None
    assert "a step on another job changes job" in found.failure
    assert "lease job" in found.failure  # the step, in the model's words


def _elsewhere(spec: Spec, config: EntityModelConfig) -> Any:
    """``orphan_is_requeued`` read off the last job rather than job 0."""
    model = entity_model(spec, config)
    goals = frozenset(spec.invariants["orphan_is_requeued"].goals)
    props = [
        dataclasses.replace(p, holds=lambda w: w.rows[-1].state in goals)
        if p.name == "orphan_is_requeued"
        else p
        for p in model.properties
    ]
    return dataclasses.replace(model, properties=props, processes=None)


def test_an_obligation_that_reads_another_entity_is_not_carried_over() -> None:
    spec = _job()
    found = by_target(
        spec, EntityModelConfig(workers=2, keys=2), model=_elsewhere, projection=entity_keys(spec)
    )
    assert found.verdict == "incomplete"
    why = found.not_carried()["orphan_is_requeued"]
    assert "by projection: its projection onto job 0 meets it where the state does not" in why
    assert "at rest: its projection onto job 0 meets it where the state does not" in why


def _never_stops(spec: Spec, config: EntityModelConfig) -> Any:
    """With two jobs, no state may stop (every state a deadlock where nothing can happen)."""
    model = entity_model(spec, config)
    may_stop = model.may_stop
    return dataclasses.replace(
        model, may_stop=lambda w: len(w.rows) < 2 and may_stop(w), processes=None
    )


def test_a_state_with_no_step_that_may_not_stop_where_its_projections_may_is_found() -> None:
    spec = _job()
    found = targets_independent(spec, PREMISE, model=_never_stops, projection=entity_keys(spec))
    assert found.failure is None
    assert found.deadlocks is not None
    assert "a state with no step may not stop where each projection may" in found.deadlocks


@pytest.mark.parametrize(
    ("design", "epochs", "broken"),
    [
        # two epochs spend no job's three attempts: the dead-letter example never happens
        ("job", 2, "a_job_is_dead_lettered"),
        pytest.param("job", 3, None, marks=pytest.mark.slow),
        ("orphan_waits_for_readback", 2, "orphan_is_requeued"),
        ("requeue_on_readback", 2, "one_attempt_at_a_time"),
    ],
)
def test_by_target_agrees_with_two_jobs_searched_whole(
    design: str, epochs: int, broken: str | None
) -> None:
    """Two workers and two jobs: what one job's check carries over is what the whole
    two-job search finds, property by property."""
    spec = _job(design)
    config = EntityModelConfig(workers=2, keys=2, epochs=epochs)
    found = by_target(spec, config, projection=entity_keys(spec))
    whole = Checker(entity_model(spec, config)).symmetry().stop_on_violation(False).run()
    assert whole.complete and found.not_carried() == {}
    assert found.verdict == whole.verdict == ("ok" if broken is None else "violated")
    for p in whole.model.properties:
        assert found.outcome(p).split(" (")[0] == whole.outcome(p), p.name
    if broken is not None:
        assert found.outcome(_named(whole, broken)) in ("violated (one job)", "never happens")
    assert (found.one.deadlock is None) == (whole.deadlock is None)


def _named(report: Any, name: str) -> Any:
    return next(p for p in report.model.properties if p.name == name)


def test_check_by_target_proves_three_jobs() -> None:
    """Three jobs at the declaration's bounds (a whole search of them does not fit in this
    machine's 24 GiB: README), from one job's check."""
    runner = CliRunner()
    result = runner.invoke(main, ["check", "job", "--targets", "3", "--by-target", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["verdict"] == "ok" and data["deadlocks"] == "none"
    assert data["one_target"]["unique"] == _classes(_job(), EntityModelConfig(keys=1))
    assert data["premise"]["bounds"] == "2 workers, 2 jobs, 1 epoch per job"
    assert data["premise"]["complete"] and data["premise"]["classes"] == _classes(_job(), PREMISE)
    assert data["carried"] == {"orphan_is_requeued": "by projection"}
    assert data["not_carried"] == {}
    assert data["properties"]["one_attempt_at_a_time"]["outcome"] == "holds"
    text = runner.invoke(main, ["check", "job", "--targets", "3", "--by-target"]).output
    assert "checked as one job, carried over to 3" in text
    assert "eventually orphan_is_requeued: holds (carried over by projection)" in text
    wrong = runner.invoke(
        main, ["check", "job-requeue_on_readback", "--targets", "2", "--by-target"]
    )
    assert wrong.exit_code == 1 and "one_attempt_at_a_time: violated (one job)" in wrong.output
    for bad in (
        ["--targets", "1"],
        ["--targets", "2", "--engine", "spin"],
        ["--targets", "2", "--max-states", "10"],
        ["--targets", "2", "--replay-token", "0.1"],
    ):
        refused = runner.invoke(main, ["check", "job", "--by-target", *bad])
        assert refused.exit_code == 2 and "--by-target" in refused.output, refused.output
    # more entities than a whole search takes: by one's check, or refused by name
    many = runner.invoke(main, ["check", "job", "--targets", "6", "--by-target"])
    assert many.exit_code == 0 and "carried over to 6" in many.output, many.output
    whole = runner.invoke(main, ["check", "job", "--targets", "6"])
    assert whole.exit_code == 2 and "--targets 6" in whole.output and "--by-target" in whole.output


@pytest.mark.slow
def test_the_claim_in_the_lifecycle_world_carries_its_safety_and_says_why_not_its_liveness() -> (
    None
):
    """The claim in the world of any lifecycle: every ``always`` property, deadlock
    freedom and acquisition's liveness (at rest, as in the claim world) carry over to two
    targets; readback's, of claim 0 alone there, does not: a worker busy on the other
    claim looks idle from claim 0, and its acquire there, cut by the epoch bound, meets
    the obligation in the projection and not in the state. The claim world carries it
    (tests/test_targets.py)."""
    result = CliRunner().invoke(
        main,
        [
            "check",
            "--world",
            "lifecycle",
            "--workers",
            "2",
            "--targets",
            "2",
            "--by-target",
            "--json",
        ],
    )
    assert result.exit_code == 3, result.output
    data = json.loads(result.stdout)
    assert data["deadlocks"] == "none"
    assert data["carried"] == {"free_target_is_acquired": "at rest"}
    assert set(data["not_carried"]) == {"uncertain_is_reconciled"}
    why = data["not_carried"]["uncertain_is_reconciled"]
    assert "by projection: its projection onto claim 0 meets it where the state does not" in why
    always = [p for p in data["properties"].values() if p["kind"] == "always"]
    assert always and all(p["outcome"] == "holds" for p in always)
