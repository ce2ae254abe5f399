"""Renaming changes nothing: a copy of claim.toml (and of every wrong design) with every
state, event and guard renamed is the same protocol to the checker and the diagrams.

The checker's claim model reads the claim's steps from the declaration's shape
(``claimfsm.spec._vocabulary.claim_steps``), not from its names; these tests fail if a
name of the claim protocol is written into the model's logic.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from claimfsm.checker import Checker, ClaimModelConfig, claim_model, explained
from claimfsm.diagrams import to_dot, to_mermaid
from claimfsm.errors import SpecError
from claimfsm.spec import Event, State, claim_spec, declarations_dir, load_spec
from claimfsm.spec._vocabulary import claim_steps

from .conftest import needs_spin

WRONG = sorted(p.stem for p in (declarations_dir() / "wrong").glob("*.toml"))


def _names() -> dict[str, str]:
    """Every state, event and guard of claim.toml -> a new name that shares no word with it."""
    spec = claim_spec()
    names: dict[str, str] = {}
    for prefix, group in (("q", spec.states), ("x", spec.events), ("g", spec.guards)):
        for i, name in enumerate(group):
            names[name] = f"{prefix}{i}_{name[::-1]}"  # e.g. reserved -> q1_devreser
    return names


def _rename(text: str, names: dict[str, str]) -> str:
    """Whole words renamed, but not a guard's ``fact`` (``remote_dedups`` is both a guard's
    name and the fact it reads: the fact is the caller's word, not the declaration's)."""
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    return "".join(
        line if line.lstrip().startswith("fact =") else pattern.sub(lambda m: names[m[1]], line)
        for line in text.splitlines(keepends=True)
    )


def _back(text: str, names: dict[str, str]) -> str:
    back = {new: old for old, new in names.items()}
    return _rename(text, back)


@pytest.fixture(scope="module")
def renamed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """claim.toml and specs/wrong/*.toml, renamed, in the same layout (bases still resolve)."""
    root = tmp_path_factory.mktemp("renamed")
    (root / "wrong").mkdir()
    names = _names()
    source = declarations_dir()
    (root / "claim.toml").write_text(_rename((source / "claim.toml").read_text(), names))
    for design in WRONG:
        text = (source / "wrong" / f"{design}.toml").read_text()
        (root / "wrong" / f"{design}.toml").write_text(_rename(text, names))
    return root


def test_the_copy_shares_no_state_event_or_guard_name_with_claim(renamed: Path) -> None:
    spec, original = load_spec(renamed / "claim.toml"), claim_spec()
    assert not set(spec.states) & set(original.states)
    assert not set(spec.events) & set(original.events)
    assert not set(spec.guards) & set(original.guards)
    # and the claim's steps are found in it by shape, each under its new name
    steps, names = claim_steps(spec), _names()
    assert {e: steps.event(e) for e in steps.events} == {
        e: names[e.value] for e in claim_steps(original).events
    }
    assert steps.state(State.UNCERTAIN) == names["uncertain"]
    assert steps.event(Event.BEGIN_SEND) == names["begin_send"]


@pytest.mark.parametrize("symmetry", [False, True], ids=["nosym", "sym"])
def test_a_renamed_claim_has_the_same_state_space_and_verdicts(
    renamed: Path, symmetry: bool
) -> None:
    config = ClaimModelConfig(workers=2)
    reports = [
        Checker(claim_model(spec, config)).symmetry(symmetry).run()
        for spec in (claim_spec(), load_spec(renamed / "claim.toml"))
    ]
    original, copy = reports
    assert copy.unique == original.unique == (74_385 if symmetry else 144_461)
    assert (copy.states, copy.depth, copy.complete) == (
        original.states,
        original.depth,
        original.complete,
    )
    assert copy.verdict == original.verdict == "ok"
    assert [(p.name, p.kind) for p in copy.model.properties] == [
        (p.name, p.kind) for p in original.model.properties
    ]
    assert copy.discoveries.keys() == original.discoveries.keys()


@pytest.mark.parametrize("design", WRONG)
def test_a_renamed_wrong_design_fails_the_same_way_in_the_same_words(
    renamed: Path, design: str
) -> None:
    names = _names()
    config = ClaimModelConfig(workers=2)
    original = load_spec(declarations_dir() / "wrong" / f"{design}.toml")
    copy = load_spec(renamed / "wrong" / f"{design}.toml")
    models = [claim_model(spec, config) for spec in (original, copy)]
    first, second = (Checker(m).symmetry().stop_on_violation().run() for m in models)
    assert (second.unique, second.depth, second.verdict) == (
        first.unique,
        first.depth,
        first.verdict,
    )
    assert [p.name for p in second.violations] == [p.name for p in first.violations]
    for name, found in first.discoveries.items():
        other = second.discoveries[name]
        assert (other.token, other.loop_from) == (found.token, found.loop_from)
        # the counterexample reads the same, but for the names
        shown = [
            (_back(text, names), _back(state, names))
            for text, state in explained(models[1], other.path)
        ]
        assert shown == explained(models[0], found.path)


def test_a_renamed_claim_draws_the_same_diagrams_but_for_the_names(renamed: Path) -> None:
    names = _names()
    copy = load_spec(renamed / "claim.toml")
    for draw in (to_dot, to_mermaid):
        assert _back(draw(copy), names) == draw(claim_spec())


def test_a_claim_whose_shape_lacks_a_step_is_refused_by_the_model_saying_which(
    renamed: Path, tmp_path: Path
) -> None:
    n = _names()
    text = (renamed / "claim.toml").read_text()
    # retry leads back to sending; sent to reconciled instead, nothing is the claim's retry
    retry = f'event = "{n["retry"]}"\nsource = "{n["uncertain"]}"\ndest = "{n["sending"]}"'
    broken = text.replace(retry, retry.replace(n["sending"], n["reconciled"]))
    assert broken != text
    path = tmp_path / "no_retry.toml"
    path.write_text(broken)
    with pytest.raises(SpecError) as caught:
        claim_model(load_spec(path), ClaimModelConfig(workers=1))
    assert str(caught.value).startswith(f"{path}: the claim model needs exactly one other event")
    assert f"from {n['uncertain']!r} into a lease state; this declaration has none" in str(
        caught.value
    )


def test_claimfsm_check_takes_the_renamed_claim_and_says_what_it_cannot_run_yet(
    renamed: Path,
) -> None:
    import json

    from click.testing import CliRunner

    from claimfsm.cli import main

    path = str(renamed / "claim.toml")
    result = CliRunner().invoke(main, ["check", path, "--workers", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["unique"] == 74_385
    needs_spin()
    result = CliRunner().invoke(
        main, ["check", path, "--workers", "2", "--engine", "spin", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["unique"] == 144_461  # SPIN: no symmetry
    wrong = str(renamed / "wrong" / "lapse_reclaims_sending.toml")
    result = CliRunner().invoke(main, ["check", wrong, "--workers", "2"])
    assert result.exit_code == 1
    assert f"[{_names()['lapse']}: " in result.output  # the steps in the declaration's words
    for extra in (["--replay"], ["--replay-token", "0.0"]):
        result = CliRunner().invoke(main, ["check", path, "--workers", "2", *extra])
        assert result.exit_code == 2
        assert "the claim protocol under other names" in result.output
        assert "Traceback" not in result.output
    # the report and verify drive the claim's stores: one clear error each
    report = CliRunner().invoke(main, ["report", path, "--out", str(renamed / "r.html")])
    assert report.exit_code == 2 and "the claim protocol under other names" in report.output
    assert not (renamed / "r.html").exists()
    verify = CliRunner().invoke(main, ["verify", path, "--db", f"sqlite:///{renamed / 'v.db'}"])
    assert verify.exit_code == 2 and "renamed, by its shape" in verify.output
    assert not (renamed / "v.db").exists()


def test_the_checkers_claim_model_writes_no_name_of_the_claim_protocol() -> None:
    """The claim model, its Promela and the targets' check read the declaration's names
    (through ``claim_steps``), so
    no state, event or guard name of claim.toml is a string literal in it; the claim's
    steps are named by the typed face (``Event``), which renaming does not touch."""
    import ast

    import claimfsm.checker._claim as model
    import claimfsm.checker._spin_claim as promela
    import claimfsm.checker._targets as targets

    spec = claim_spec()
    names = set(spec.states) | set(spec.events) | set(spec.guards)
    names -= {"remote_dedups"}  # also the name of a fact the caller brings
    found = []
    for module in (model, promela, targets):
        tree = ast.parse(Path(module.__file__ or "").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{module.__name__}:{node.lineno}: {node.value!r}")
    assert found == []


@pytest.mark.parametrize("design", ["lapse_reclaims_sending", "release_by_target"])
def test_spin_searches_a_renamed_wrong_design_to_the_same_counterexample(
    renamed: Path, design: str
) -> None:
    """The Promela is generated from the copy (its steps found by shape, as the built-in
    engine finds them): the same violation, a counterexample as long, in the copy's words."""
    from claimfsm.checker import spin_check

    needs_spin()
    names, config = _names(), ClaimModelConfig(workers=2)
    copy = load_spec(renamed / "wrong" / f"{design}.toml")
    ours = Checker(claim_model(copy, config)).stop_on_violation().run()
    theirs, _run = spin_check(copy, config)
    assert theirs.verdict == ours.verdict == "violated"
    (prop,) = [p.name for p in ours.violations]
    assert [p.name for p in theirs.violations] == [prop]
    found = theirs.discoveries[prop]
    assert len(found.path) == len(ours.discoveries[prop].path)
    assert any(names["reserved"] in state for _text, state in explained(theirs.model, found.path))
