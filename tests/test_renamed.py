"""Renaming changes nothing: a copy of claim.toml (and of every wrong design) with every
state, event and guard renamed is the same protocol to the checker, the diagrams, the
replays and the report (the stores: tests/test_agreement.py runs on the copy too).

Everything reads the claim's steps from the declaration's shape
(``claimfsm.spec.claim_steps``), not from its names; these tests fail if a name of the
claim protocol is written into the code.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from claimfsm.checker import Checker, ClaimModelConfig, claim_model, explained
from claimfsm.diagrams import to_dot, to_mermaid
from claimfsm.errors import SpecError
from claimfsm.spec import Event, State, claim_spec, declarations_dir, load_spec
from claimfsm.spec._vocabulary import claim_steps

from ._renamed import WRONG, back, write_renamed
from ._renamed import names as renaming
from .conftest import needs_spin


@pytest.fixture(scope="module")
def renamed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """claim.toml and specs/wrong/*.toml, renamed, in the same layout (bases still resolve)."""
    return write_renamed(tmp_path_factory.mktemp("renamed")).parent


def test_the_copy_shares_no_state_event_or_guard_name_with_claim(renamed: Path) -> None:
    spec, original = load_spec(renamed / "claim.toml"), claim_spec()
    assert not set(spec.states) & set(original.states)
    assert not set(spec.events) & set(original.events)
    assert not set(spec.guards) & set(original.guards)
    # and the claim's steps are found in it by shape, each under its new name
    steps, names = claim_steps(spec), renaming()
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
    names = renaming()
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
            (back(text, names), back(state, names))
            for text, state in explained(models[1], other.path)
        ]
        assert shown == explained(models[0], found.path)


def test_a_renamed_claim_draws_the_same_diagrams_but_for_the_names(renamed: Path) -> None:
    names = renaming()
    copy = load_spec(renamed / "claim.toml")
    for draw in (to_dot, to_mermaid):
        assert back(draw(copy), names) == draw(claim_spec())


def test_a_claim_whose_shape_lacks_a_step_is_refused_by_the_model_saying_which(
    renamed: Path, tmp_path: Path
) -> None:
    n = renaming()
    text = (renamed / "claim.toml").read_text()
    # retry leads back to sending; sent to reconciled instead, nothing is the claim's retry
    retry = f'event = "{n["retry"]}"\nsource = "{n["uncertain"]}"\ndest = "{n["sending"]}"'
    broken = text.replace(retry, retry.replace(n["sending"], n["reconciled"]))
    assert broken != text
    path = tmp_path / "no_retry.toml"
    path.write_text(broken)
    with pytest.raises(SpecError) as caught:
        claim_model(load_spec(path), ClaimModelConfig(workers=1))
    # the event declaring remote = "resends" is the retry; it no longer sends again
    assert str(caught.value).startswith(
        f"{path}: the event declaring remote = 'resends' (the claim's retry), {n['retry']!r},"
        f" must lead from {n['uncertain']!r} back into {n['sending']!r}"
    )
    assert f"from there it leads into {n['reconciled']!r}" in str(caught.value)


def test_claimfsm_check_replay_and_report_take_the_renamed_claim(renamed: Path) -> None:
    import json

    from click.testing import CliRunner

    from claimfsm.cli import main

    n = renaming()
    path = str(renamed / "claim.toml")
    result = CliRunner().invoke(main, ["check", path, "--workers", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["unique"] == 74_385
    wrong = str(renamed / "wrong" / "lapse_reclaims_sending.toml")
    result = CliRunner().invoke(main, ["check", wrong, "--workers", "2"])
    assert result.exit_code == 1
    assert f"[{n['lapse']}: " in result.output  # the steps in the declaration's words
    # The replays run on the claim's stores, which run the renamed declaration: the same
    # coverage as claim.toml's, in the copy's words.
    ours, theirs = (
        CliRunner().invoke(main, ["check", p, "--workers", "2", "--replay", "--json"])
        for p in (path, "claim")
    )
    assert ours.exit_code == theirs.exit_code == 0, ours.output
    got, want = json.loads(ours.stdout)["replay"], json.loads(theirs.stdout)["replay"]
    got = json.loads(back(json.dumps(got), n))
    assert {**got, "refusals": sorted(got["refusals"])} == want  # sorted by its own words
    assert want["transitions_reached"] == want["declared_transitions"] - 1  # retry: plain remote
    found = CliRunner().invoke(main, ["check", wrong, "--workers", "2", "--json"])
    token = json.loads(found.stdout)["violations"][0]["token"]
    played, original = (
        CliRunner().invoke(main, ["check", *d, "--workers", "2", "--replay-token", token])
        for d in ([wrong], ["--design", "lapse_reclaims_sending"])
    )
    assert played.exit_code == original.exit_code == 1
    # the same steps, and the store departs at the same step for the same reason
    after = lambda text: text[text.index("replay token") :]  # noqa: E731 - below the heading
    assert "departed from the model: TargetBusy" in original.output
    assert back(after(played.output), n) == after(original.output)
    # the report: the same page as claim.toml's own, but for the names
    out = renamed / "r.html"
    report = CliRunner().invoke(main, ["report", path, "--out", str(out)])
    assert report.exit_code == 0, report.output
    page = out.read_text()
    assert n["uncertain"] in page and n["begin_send"] in page
    # claimfsm verify takes it too: tests/test_verify_claim.py


#: Where a word of claim.toml may be written, and why: the typed face's own definitions,
#: and words of other vocabularies that happen to be the same.
TYPED_FACE = {
    "claimfsm.spec._vocabulary": "the typed face: State and Event, their values claim.toml's",
    "claimfsm.service._dispatcher": "its outcomes and step names (DispatchResult.outcome"
    " 'confirmed' | 'uncertain', the hook's 'sending'): the dispatcher's API words",
    "claimfsm.campaign._run": "counts the dispatcher's outcomes by their API words",
    "claimfsm.campaign._worker": "maps the dispatcher's step names to kill points",
    "claimfsm.service._http": "'timeout', an httpx request option",
}


def test_no_name_of_the_claim_protocol_is_written_in_src() -> None:
    """Everything reads the declaration's names: the checker's model, its Promela and the
    targets' check, the machine, the stores, the replay, the campaign's verdict, the demo
    and the metrics go through ``claim_steps`` and the typed face (``Event``, ``State``),
    which renaming does not touch. So no state, event or guard name of claim.toml is a
    string literal in src/claimfsm, but in the typed face and the words listed above."""
    import ast

    import claimfsm

    spec = claim_spec()
    names = set(spec.states) | set(spec.events) | set(spec.guards)
    names -= {"remote_dedups"}  # also the name of a fact the caller brings
    root = Path(claimfsm.__file__).parent
    found, scanned = [], 0
    for path in sorted(root.rglob("*.py")):
        module = ".".join(("claimfsm", *path.relative_to(root).with_suffix("").parts))
        module = module.removesuffix(".__init__")
        if module in TYPED_FACE:
            continue
        scanned += 1
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{module}:{node.lineno}: {node.value!r}")
    assert scanned > 60  # every module but those listed
    assert found == []


@pytest.mark.parametrize(
    "design",
    ["lapse_reclaims_sending", pytest.param("release_by_target", marks=pytest.mark.slow)],
)
def test_spin_searches_a_renamed_wrong_design_to_the_same_counterexample(
    renamed: Path, design: str
) -> None:
    """The Promela is generated from the copy (its steps found by shape, as the built-in
    engine finds them): the same violation, a counterexample as long, in the copy's words."""
    from claimfsm.checker import spin_check

    needs_spin()
    names, config = renaming(), ClaimModelConfig(workers=2)
    copy = load_spec(renamed / "wrong" / f"{design}.toml")
    ours = Checker(claim_model(copy, config)).stop_on_violation().run()
    theirs, _run = spin_check(copy, config)
    assert theirs.verdict == ours.verdict == "violated"
    (prop,) = [p.name for p in ours.violations]
    assert [p.name for p in theirs.violations] == [prop]
    found = theirs.discoveries[prop]
    assert len(found.path) == len(ours.discoveries[prop].path)
    assert any(names["reserved"] in state for _text, state in explained(theirs.model, found.path))


def test_a_renamed_claims_refusals_use_its_own_event_names(renamed: Path) -> None:
    """A refusal's advice names the declaration's events (the taker's and the renewer's,
    found by role), so the renamed claim advises its own names and never the claim's."""
    from claimfsm.errors import LeaseExpired, StaleClaim
    from claimfsm.machine import ClaimMachine, ClaimRow, Facts

    spec = load_spec(renamed / "claim.toml")
    table = renaming()
    machine = ClaimMachine(spec)
    row = ClaimRow("t", 2, table["sending"], "w", "h", 1, 1, "d", "k", 10.0, None, 0.0)
    stale = machine.explain(table["confirm"], row.state, row, Facts(20.0, "t", 1, "h"))
    assert isinstance(stale, StaleClaim)
    assert f"drop it and {table['acquire']} again" in str(stale)
    lapsed = machine.explain(table["renew"], row.state, row, Facts(20.0, "t", 2, "h"))
    assert isinstance(lapsed, LeaseExpired)
    assert f"{table['renew']} before the deadline, or {table['acquire']} again" in str(lapsed)
    for word in ("acquire", "renew"):
        assert word not in str(stale) + str(lapsed)
