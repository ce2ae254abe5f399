"""SPIN as a second engine (``claimfsm check --engine spin``): Promela generated from a
declaration reaches the same states as the built-in engine, gives the same verdicts, and its
trail comes back as the same kind of counterexample. Skipped without SPIN and a C compiler,
except in CI (CLAIMFSM_REQUIRE_SPIN=1), which installs them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from claimfsm.checker import (
    Checker,
    EntityModelConfig,
    entity_model,
    promela,
    replay,
    spin_check,
)
from claimfsm.cli import main
from claimfsm.errors import InvalidArgument
from claimfsm.spec import declarations_dir, is_lifecycle_of_its_own, load_spec, shipped

from .conftest import needs_spin

JOB_PATH = declarations_dir() / "job.toml"
JOB = JOB_PATH.read_text()


@pytest.fixture(autouse=True)
def _spin() -> None:
    needs_spin()


def builtin(spec_path: Path, config: EntityModelConfig) -> tuple[int, int, str]:
    report = Checker(entity_model(load_spec(spec_path), config)).symmetry(False).run()
    return report.unique, report.depth, report.verdict


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(EntityModelConfig(workers=2), id="K2"),
        pytest.param(EntityModelConfig(workers=3), id="K3"),
        pytest.param(
            EntityModelConfig(workers=2, keys=2, epochs=2), id="two-jobs", marks=pytest.mark.slow
        ),
        pytest.param(
            EntityModelConfig(workers=2, crashes=False), id="no-crashes", marks=pytest.mark.slow
        ),
    ],
)
def test_spin_stores_exactly_the_builtin_engines_states(config: EntityModelConfig) -> None:
    report, run = spin_check(load_spec(JOB_PATH), config)
    assert (report.unique, report.depth, report.verdict) == builtin(JOB_PATH, config)
    assert report.complete and run.compile_seconds > 0 and run.state_vector_bytes > 0


@pytest.mark.slow
def test_a_column_with_a_default_and_a_counter_bound_are_the_same_world(tmp_path: Path) -> None:
    """Columns start at their default (Promela keeps the distance from it); a bump past the
    counts bound is cut in both engines."""
    text = JOB.replace("default = 0", "default = 1").replace("value = 3", "value = 4")
    path = tmp_path / "job.toml"
    path.write_text(text)
    config = EntityModelConfig(workers=2, counts=4)
    report, _ = spin_check(load_spec(path), config)
    assert (report.unique, report.depth, report.verdict) == builtin(path, config)


def test_every_design_gets_the_same_verdict_and_a_replayable_counterexample() -> None:
    own = {n: s for n, s in shipped().items() if is_lifecycle_of_its_own(s)}
    assert len(own) >= 3
    for name, spec in own.items():
        config = EntityModelConfig(workers=2)
        ours = Checker(entity_model(spec, config)).symmetry(False).run()
        theirs, _ = spin_check(spec, config)
        assert theirs.verdict == ours.verdict, name
        assert (theirs.deadlock is None) == (ours.deadlock is None), name
        # the wrong ones violate: a property, or (SPIN stops there) a deadlock
        wrong = bool(theirs.discoveries) or theirs.deadlock is not None
        assert wrong == bool(spec.base), name
        for prop, found in theirs.discoveries.items():
            assert prop in ours.discoveries, (name, prop)
            if found.property.kind == "always":
                # breadth-first in both: the same length of shortest counterexample
                assert len(found.path) == len(ours.discoveries[prop].path), (name, prop)
            else:
                assert (found.loop_from is None) == (ours.discoveries[prop].loop_from is None)
            steps = replay(theirs.model, found.token)
            assert [s.state for s in steps] == [s.state for s in found.path]


def test_fairness_decides_in_spin_as_in_the_builtin_engine(tmp_path: Path) -> None:
    """The LTL formula carries the declared fairness: without the operator's fencing
    assumed fair, the correct job's orphan can starve, in both engines."""
    for fair, verdict in (('["requeue", "fence"]', "ok"), ('["requeue"]', "violated")):
        path = tmp_path / "job.toml"
        path.write_text(JOB.replace('fair = ["requeue", "fence"]', f"fair = {fair}"))
        config = EntityModelConfig(workers=2)
        theirs, _ = spin_check(load_spec(path), config)
        assert theirs.verdict == verdict == builtin(path, config)[2], fair


def test_a_deadlock_is_found_by_spin_as_by_the_builtin_engine(tmp_path: Path) -> None:
    path = tmp_path / "stuck.toml"
    path.write_text(JOB.replace('op = "<"\nvalue = 3', 'op = "<"\nvalue = 2'))
    report, _ = spin_check(load_spec(path), EntityModelConfig(workers=2))
    assert report.deadlock is not None and report.verdict == "violated"
    assert "queued e2" in report.model.show_state(report.deadlock[-1].state)


def test_the_promela_is_generated_from_the_declaration() -> None:
    """No hand-kept model: the declaration's states, invariants and bounds are in the text,
    and an edit of the declaration is an edit of the Promela."""
    spec = load_spec(JOB_PATH)
    text = promela(spec, EntityModelConfig(workers=2)).text
    assert "generated by claimfsm from its declaration" in text
    assert "0 queued, 1 leased, 2 running" in text and "/* one_attempt_at_a_time */" in text
    assert text.count("Client c[2];") == 1 and "ep + 1 > 4" in text
    three = promela(spec, EntityModelConfig(workers=3)).text
    assert "Client c[3];" in three


def test_check_engine_spin_on_the_command_line(tmp_path: Path) -> None:
    kept = tmp_path / "spin"
    result = CliRunner().invoke(
        main, ["check", "job", "--engine", "spin", "--json", "--spin-dir", str(kept)]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["engine"]["name"] == "spin"
    assert data["unique"] == builtin(JOB_PATH, EntityModelConfig())[0]
    assert data["bounds"]["symmetry"] is False and data["verdict"] == "ok"
    assert (kept / "model.pml").read_text().startswith("/* job: generated by claimfsm")
    wrong = CliRunner().invoke(main, ["check", "job-requeue_without_evidence", "--engine", "spin"])
    assert wrong.exit_code == 1, wrong.output
    assert "engine: SPIN" in wrong.output and "one_attempt_at_a_time: violated" in wrong.output
    token = re.search(r"replay token: (\S+)", wrong.output)
    assert token is not None
    replayed = CliRunner().invoke(
        main, ["check", "job-requeue_without_evidence", "--replay-token", token.group(1)]
    )
    assert replayed.exit_code == 1 and "worker 1: start" in replayed.output


def test_engine_spin_errors_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    claim = CliRunner().invoke(main, ["check", "--engine", "spin", "--max-depth", "3"])
    assert claim.exit_code == 2 and "SPIN takes --time-limit" in claim.output
    alone = CliRunner().invoke(main, ["check", "job", "--bitstate"])
    assert alone.exit_code == 2 and "go with --engine spin" in alone.output
    depth = CliRunner().invoke(main, ["check", "job", "--engine", "spin", "--max-states", "9"])
    assert depth.exit_code == 2 and "SPIN takes --time-limit" in depth.output
    monkeypatch.setenv("PATH", "/nonexistent")
    missing = CliRunner().invoke(main, ["check", "job", "--engine", "spin"])
    assert missing.exit_code == 2 and "apt-get install spin gcc" in missing.output
    assert "Traceback" not in missing.output
    missing = CliRunner().invoke(main, ["check", "--engine", "spin", "--workers", "2"])
    assert missing.exit_code == 2 and "apt-get install spin gcc" in missing.output


def test_left_only_by_and_examples_decide_in_spin_as_in_the_builtin_engine(
    tmp_path: Path,
) -> None:
    """job.toml's orphaned state is left only by requeue, and its examples are met, in both
    engines; with requeue left out of the events that may leave it, both find the same
    shortest counterexample, and an example the bounds cannot meet fails both searches."""
    config = EntityModelConfig(workers=2)
    edits = {
        "holds": (JOB, "ok", None),
        "broken": (
            JOB.replace('events = ["requeue"]', 'events = ["lapse"]'),
            "violated",
            "orphan_leaves_only_by_requeue",
        ),
        "unmet": (
            JOB.replace("epochs = 4", "epochs = 2"),
            "violated",
            "a_job_is_dead_lettered",
        ),
    }
    for case, (text, verdict, found) in edits.items():
        path = tmp_path / f"{case}.toml"
        path.write_text(text)
        ours = Checker(entity_model(load_spec(path), config)).symmetry(False).run()
        theirs, _ = spin_check(load_spec(path), config)
        assert ours.verdict == theirs.verdict == verdict, case
        if case != "broken":  # SPIN stops at its first failed assertion
            assert ours.unique == theirs.unique, case
        if found == "orphan_leaves_only_by_requeue":
            ours_path = ours.discoveries[found].path
            assert len(theirs.discoveries[found].path) == len(ours_path)
        if found == "a_job_is_dead_lettered":
            assert found not in ours.discoveries and found not in theirs.reached
        elif found is None:
            assert {"a_job_succeeds", "a_job_is_dead_lettered"} <= theirs.reached
            assert {"a_job_succeeds", "a_job_is_dead_lettered"} <= set(ours.discoveries)


def test_the_verifiers_are_built_at_the_optimisation_named_and_a_bad_one_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``CLAIMFSM_SPIN_OPT`` names the C compiler's optimisation level for the verifiers
    (the suite sets -O0; unset, -O1): the same verdicts and counts at any level, the level
    said in the report; a level it does not know is refused by name before anything is
    built, and ``check`` says so in one line."""
    needs_spin()
    spec = load_spec(declarations_dir() / "job.toml")
    config = EntityModelConfig(workers=2)
    seen = {}
    for level in ("-O0", "-O2"):
        monkeypatch.setenv("CLAIMFSM_SPIN_OPT", level)
        report, run = spin_check(spec, config)
        assert run.optimisation == level
        verdicts = {p.name: report.outcome(p) for p in report.model.properties}
        seen[level] = (report.unique, report.depth, report.complete, verdicts)
    assert seen["-O0"] == seen["-O2"]
    said = CliRunner().invoke(main, ["check", "job", "--engine", "spin", "--json"])
    assert json.loads(said.stdout)["engine"]["optimisation"] == "-O2"
    monkeypatch.delenv("CLAIMFSM_SPIN_OPT")
    assert spin_check(spec, config)[1].optimisation == "-O1"
    monkeypatch.setenv("CLAIMFSM_SPIN_OPT", "-O9")
    kept = tmp_path / "kept"
    with pytest.raises(InvalidArgument, match=r"CLAIMFSM_SPIN_OPT='-O9' .* -O0, -O1, -O2"):
        spin_check(spec, config, keep=kept)
    assert not kept.exists()
    said = CliRunner().invoke(main, ["check", "job", "--engine", "spin", "--spin-dir", str(kept)])
    assert said.exit_code == 2 and "Traceback" not in said.output
    assert "CLAIMFSM_SPIN_OPT='-O9'" in said.output and not kept.exists()
