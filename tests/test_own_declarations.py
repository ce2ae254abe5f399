"""A user's own declaration: it loads, shows, draws and is checked like the built-in ones
(the checker runs it on the model of a declared lifecycle, never on the claim model, which
once reported a wrong verdict for it); the claim machine and the claim's stores refuse it
with one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from claimfsm.checker import claim_model
from claimfsm.cli import main
from claimfsm.errors import SpecError
from claimfsm.machine import ClaimMachine
from claimfsm.spec import declarations_dir, load_spec

DOCFLOW = """\
name = "docflow"
description = "a document approval lifecycle"
initial = "draft"

[states.draft]
meaning = "being written"

[states.review]
meaning = "awaiting approval"

[states.approved]
meaning = "approved"
terminal = true

[states.rejected]
meaning = "rejected"
terminal = true

[[transitions]]
event = "submit"
source = "draft"
dest = "review"
guards = []

[[transitions]]
event = "approve"
source = "review"
dest = "approved"
guards = []

[[transitions]]
event = "reject"
source = "review"
dest = "rejected"
guards = []
"""


@pytest.fixture
def docflow(tmp_path: Path) -> Path:
    path = tmp_path / "docflow.toml"
    path.write_text(DOCFLOW)
    return path


def test_the_claim_model_and_machine_refuse_another_lifecycle(docflow: Path) -> None:
    spec = load_spec(docflow)
    with pytest.raises(SpecError, match=r"docflow\.toml: the model checker's claim model") as e:
        claim_model(spec)
    assert "states ['approved', 'draft', 'rejected', 'review']" in str(e.value)
    with pytest.raises(SpecError, match="the claim machine is built for the claim protocol"):
        ClaimMachine(spec)


def test_the_commands_take_a_path(docflow: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    shown = runner.invoke(main, ["spec", str(docflow)])
    assert shown.exit_code == 0 and "submit" in shown.output
    drawn = runner.invoke(main, ["diagram", str(docflow), "--out", str(tmp_path / "d")])
    assert drawn.exit_code == 0, drawn.output
    dot = (tmp_path / "d" / "docflow.dot").read_text()
    assert "draft -> review" in dot and "approve" in dot
    # The legend explains only what this diagram shows: final states, nothing of leases,
    # stale owners, evidence, counterexamples or changes.
    assert "final: nothing leaves it" in dot
    for absent in ("lease expiry", "stale owner", "only evidence", "counterexample", "changed"):
        assert absent not in dot
    checked = runner.invoke(main, ["check", str(docflow)])
    assert checked.exit_code == 0, checked.output
    assert "design docflow" in checked.output and "names no [invariants]" in checked.output
    assert "stale_operations_change_nothing: holds" in checked.output
    # Its own properties, not the claim model's (which once ran on it and found drafts).
    assert "parallel_drafts" not in checked.output and "verdict: ok" in checked.output


def test_a_variant_of_the_claim_protocol_is_checked_by_path() -> None:
    variant = declarations_dir() / "wrong" / "release_by_target.toml"
    result = CliRunner().invoke(main, ["check", str(variant), "--workers", "2"])
    assert result.exit_code == 1  # the known-wrong design's counterexample
    assert "design release_by_target" in result.output
    assert "stale_operations_change_nothing: violated" in result.output


def test_unknown_names_and_missing_files_are_named(tmp_path: Path) -> None:
    runner = CliRunner()
    unknown = runner.invoke(main, ["check", "claims"])
    assert unknown.exit_code == 2 and "no declaration 'claims'" in unknown.output
    missing = runner.invoke(main, ["diagram", str(tmp_path / "nope.toml")])
    assert missing.exit_code == 1 and "nope.toml: cannot read the declaration" in missing.output
