"""SPIN as a second engine for the claim protocol (``claimfsm check --engine spin``): Promela
generated from claim.toml (or a wrong design) and the model's bounds reaches exactly the
built-in engine's states (the counts pinned in test_checker.py), gives every wrong design
the same verdict, and its trails come back as the built-in model's counterexamples. Skipped
without SPIN and a C compiler, except in CI (CLAIMFSM_REQUIRE_SPIN=1)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from claimfsm.checker import Checker, ClaimModelConfig, Report, claim_model, replay, spin_check
from claimfsm.checker._spin import _build, _discover_lasso, _run, spin_optimisation
from claimfsm.checker._spin_claim import claim_promela
from claimfsm.cli import main
from claimfsm.spec import claim_spec, declarations_dir, designs, load_spec

from .conftest import needs_spin


@pytest.fixture(autouse=True)
def _spin() -> None:
    needs_spin()


def builtin(spec_name: str, config: ClaimModelConfig) -> Report:  # type: ignore[type-arg]
    spec = claim_spec() if spec_name == "claim" else designs()[spec_name]
    checker = Checker(claim_model(spec, config))
    if spec_name == "claim":
        return checker.exhaustive().run()
    return checker.stop_on_violation().run()


@pytest.mark.parametrize(
    ("config", "unique"),
    [
        pytest.param(ClaimModelConfig(workers=2), 144_461, id="K2"),
        pytest.param(ClaimModelConfig(workers=3), 493_405, id="K3", marks=pytest.mark.slow),
    ],
)
def test_spin_stores_exactly_the_pinned_claim_states(config: ClaimModelConfig, unique: int) -> None:
    """The counts test_checker.py pins for the built-in engine without symmetry (and the
    hand-written anchor reached), here from Promela generated from claim.toml."""
    report, run = spin_check(claim_spec(), config)
    assert report.unique == unique and report.depth == 26
    assert report.complete and report.verdict == "ok"
    assert report.reached == {
        "parallel_drafts",
        "dispatch_confirmed",
        "reconciled_present",
        "reconciled_absent",
        "stale_owner_discarded",
    }
    assert run.state_vector_bytes > 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "config",
    [
        pytest.param(ClaimModelConfig(workers=2, remote="dedup", drafts=1), id="dedup"),
        pytest.param(
            ClaimModelConfig(workers=2, drafts=1, epochs=2, retries=2, remote="dedup", edits=False),
            id="two-retries",
        ),
        pytest.param(
            ClaimModelConfig(workers=2, targets=2, drafts=1, epochs=1, crashes=False),
            id="two-targets",
        ),
    ],
)
def test_other_worlds_are_the_same_states_in_both_engines(config: ClaimModelConfig) -> None:
    """Retries (new tokens, a deduping remote), two targets, no crashes: the same world."""
    theirs, _ = spin_check(claim_spec(), config)
    ours = builtin("claim", config)
    assert (theirs.unique, theirs.depth, theirs.verdict) == (ours.unique, ours.depth, ours.verdict)


def _spin_states(tmp_path: Path, spec_name: str, config: ClaimModelConfig) -> int:
    """SPIN's count for the whole space, past violations (``-A``) and end states (``-E``)."""
    spec = claim_spec() if spec_name == "claim" else designs()[spec_name]
    text = claim_promela(spec, config).text
    _build(tmp_path, "all", text, ["-DSAFETY", "-DBFS"], spin_optimisation(), 600)
    output = _run(["./all", "-m1000000", "-A", "-E"], tmp_path / "all", 600, "pan")
    found = re.search(r"(\d+) states, stored", output)
    assert found, output
    return int(found.group(1))


@pytest.mark.parametrize(
    ("spec_name", "config"),
    [
        pytest.param("claim", ClaimModelConfig(workers=2, remote="dedup", epochs=2), id="dedup"),
        pytest.param(
            "intent_after_send",
            ClaimModelConfig(workers=2, remote="dedup", epochs=2, drafts=1),
            id="send-first",
        ),
        pytest.param(
            "fresh_key_retry",
            ClaimModelConfig(workers=2, remote="dedup"),
            id="fresh-key",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "claim",
            ClaimModelConfig(workers=2, own_keys=True),
            id="fencing-own-keys",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_workers_carry_their_own_key_in_both_engines(
    tmp_path: Path, spec_name: str, config: ClaimModelConfig
) -> None:
    """A worker's own claim's key, taken when it begins the send (after acquire, where the
    send comes first; after a retry, with its nonce) and sent even when stale: the whole
    space, violations and all, is the same states in both engines."""
    assert config.keys_in_workers
    spec = claim_spec() if spec_name == "claim" else designs()[spec_name]
    ours = Checker(claim_model(spec, config)).exhaustive().run()
    assert ours.complete
    assert _spin_states(tmp_path, spec_name, config) == ours.unique


def _same_verdict(name: str, config: ClaimModelConfig) -> None:
    spec = claim_spec() if name == "claim" else designs()[name]
    theirs, _ = spin_check(spec, config)
    ours = builtin(name, config)
    assert theirs.verdict == ours.verdict, name
    assert (theirs.deadlock is None) == (ours.deadlock is None), name
    if theirs.deadlock is not None and ours.deadlock is not None:
        assert len(theirs.deadlock) == len(ours.deadlock), name
    for prop, found in theirs.discoveries.items():
        assert prop in ours.discoveries, (name, prop)
        if found.property.kind == "always":
            # breadth-first in both: a shortest counterexample, of the same length
            assert len(found.path) == len(ours.discoveries[prop].path), (name, prop)
        steps = replay(theirs.model, found.token)
        assert [s.state for s in steps] == [s.state for s in found.path]
    for p in ours.model.properties:  # a search both ran to the end decides alike
        if theirs.complete and ours.complete:
            assert theirs.outcome(p) == ours.outcome(p), (name, p.name)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("claim", marks=pytest.mark.slow),
        "fresh_key_retry",
        pytest.param("lapse_reclaims_sending", marks=pytest.mark.slow),
        pytest.param("release_by_target", marks=pytest.mark.slow),
        pytest.param("update_returning_claim", marks=pytest.mark.slow),
        pytest.param("intent_after_send", marks=pytest.mark.slow),
        pytest.param("partial_unique_index", marks=pytest.mark.slow),
        pytest.param("readback_present_only", marks=pytest.mark.slow),
    ],
)
def test_every_wrong_design_gets_the_same_verdict(name: str) -> None:
    _same_verdict(name, ClaimModelConfig(workers=2))


def test_every_wrong_design_is_tested() -> None:
    params = test_every_wrong_design_gets_the_same_verdict.pytestmark  # type: ignore[attr-defined]
    named = {getattr(v, "values", (v,))[0] for m in params for v in m.args[1]}
    assert set(designs()) <= named


def test_a_design_found_wrong_by_liveness_alone_is_found_so_by_spin(tmp_path: Path) -> None:
    """readback_present_only strands an uncertain target: SPIN's safety search stops at the
    deadlock first, so its LTL search is run here by itself, from the generated formula; the
    cycle comes back as the built-in engine's kind of counterexample."""
    spec = designs()["readback_present_only"]
    config = ClaimModelConfig(workers=2)
    ours = Checker(claim_model(spec, config)).exhaustive().run()
    prop = next(p for p in ours.model.properties if p.name == "uncertain_is_reconciled")
    assert ours.outcome(prop) == "violated"
    ltl = claim_promela(spec, config, liveness="uncertain_is_reconciled")
    _build(tmp_path, "live", ltl.text, [], spin_optimisation(), 600)
    output = _run(["./live", "-a", "-i", "-m1000000"], tmp_path / "live", 600, "pan", check=False)
    assert "acceptance cycle" in output and "errors: 0" not in output
    trail = _run(["spin", "-t", "live.pml"], tmp_path / "live", 600, "spin -t")
    report: Report = Report(claim_model(spec, config))  # type: ignore[type-arg]
    _discover_lasso(report, prop, ltl, trail)
    found = report.discoveries["uncertain_is_reconciled"]
    assert any(s.state.targets[0].state == "uncertain" for s in found.path)
    assert [s.state for s in replay(report.model, found.token)] == [s.state for s in found.path]
    correct = claim_promela(claim_spec(), config, liveness="uncertain_is_reconciled")
    _build(tmp_path, "ok", correct.text, [], spin_optimisation(), 600)
    output = _run(["./ok", "-a", "-m1000000"], tmp_path / "ok", 600, "pan", check=False)
    assert "errors: 0" in output


def test_one_edit_of_the_declaration_reaches_the_promela(tmp_path: Path) -> None:
    """The generated model follows the TOML: a lapse that reclaims sending (one edited
    destination) makes SPIN find the overlapping sends, from the edited file."""
    text = (declarations_dir() / "claim.toml").read_text()
    old = 'event = "lapse"\nsource = "sending"\ndest = "uncertain"'
    assert text.count(old) == 1
    path = tmp_path / "edited.toml"
    path.write_text(text.replace(old, old.replace('"uncertain"', '"expired"')))
    config = ClaimModelConfig(workers=2)
    report, _ = spin_check(load_spec(path), config)
    assert "no_overlapping_sends" in report.discoveries and report.verdict == "violated"


@pytest.mark.slow  # the README's spin command runs in the quick suite
def test_check_engine_spin_on_the_claim_from_the_command_line(tmp_path: Path) -> None:
    kept = tmp_path / "spin"
    result = CliRunner().invoke(
        main, ["check", "--workers", "2", "--engine", "spin", "--json", "--spin-dir", str(kept)]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["engine"]["name"] == "spin" and data["unique"] == 144_461
    assert data["bounds"]["symmetry"] is False and data["verdict"] == "ok"
    assert data["properties"]["parallel_drafts"]["outcome"] == "found"
    assert (kept / "model.pml").read_text().startswith("/* claim: the claim model, generated")
    assert (kept / "free_target_is_acquired.pml").exists()
    wrong = CliRunner().invoke(
        main, ["check", "--design", "lapse_reclaims_sending", "--workers", "2", "--engine", "spin"]
    )
    assert wrong.exit_code == 1, wrong.output
    assert "engine: SPIN" in wrong.output and "no_overlapping_sends: violated" in wrong.output
    token = re.search(r"replay token: (\S+)", wrong.output)
    assert token is not None
    replayed = CliRunner().invoke(
        main,
        [
            "check",
            "--design",
            "lapse_reclaims_sending",
            "--workers",
            "2",
            "--replay-token",
            token.group(1),
        ],
    )
    assert replayed.exit_code == 1 and "the real store" in replayed.output, replayed.output
    refused = CliRunner().invoke(main, ["check", "--workers", "2", "--bitstate"])
    assert refused.exit_code == 2 and "go with --engine spin" in refused.output


def test_spin_takes_the_claims_steps_with_and_without_first(tmp_path: Path) -> None:
    """SPIN's transitions (stored + matched) exceed the built-in engine's generated states by
    the same number with and without ``first = "lapse"`` on acquire: the twin takes
    exactly the model's steps, the acquire that lapses the old epoch first included (the
    unique states are the same either way: the sweep reaches them too)."""
    text = (declarations_dir() / "claim.toml").read_text()
    old = '[events.acquire]\nfirst = "lapse"'
    assert text.count(old) == 1
    path = tmp_path / "no-first.toml"
    path.write_text(text.replace(old, "[events.acquire]"))
    config = ClaimModelConfig(workers=2, drafts=1)
    counts = {}
    for spec in (claim_spec(), load_spec(path)):
        builtin = Checker(claim_model(spec, config)).exhaustive().run()
        spin, _ = spin_check(spec, config)
        assert spin.unique == builtin.unique and spin.verdict == builtin.verdict == "ok"
        counts[spec.first("acquire")] = (builtin.states, spin.states)
    assert counts["lapse"][0] > counts[None][0]
    assert counts["lapse"][1] - counts["lapse"][0] == counts[None][1] - counts[None][0]
