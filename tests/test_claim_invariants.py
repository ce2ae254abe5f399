"""The claim protocol's invariants and world are declared in claim.toml, not written in the
checker: each consumer (the built-in engine, SPIN, the crash campaign's verdict, the CLI's
bounds) reads them, so one edit of the declaration changes what every one proves, and
what a world cannot read is refused by name."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from claimfsm.campaign._remote import Request
from claimfsm.campaign._verdict import judge
from claimfsm.checker import Checker, ClaimModelConfig, claim_model, entity_model, spin_check
from claimfsm.cli import main
from claimfsm.errors import InvalidArgument, SpecError
from claimfsm.spec import claim_spec, declarations_dir, load_spec, shipped
from claimfsm.store import open_store

from .conftest import FakeClock, approved_draft, needs_spin

CLAIM = (declarations_dir() / "claim.toml").read_text()
JOB = (declarations_dir() / "job.toml").read_text()


def edited(tmp_path: Path, old: str, new: str, text: str = CLAIM, name: str = "c") -> Path:
    assert text.count(old) == 1, old
    path = tmp_path / f"{name}.toml"
    path.write_text(text.replace(old, new))
    return path


def names(spec_path: Path | None, **config: object) -> list[str]:
    spec = claim_spec() if spec_path is None else load_spec(spec_path)
    cfg = ClaimModelConfig.declared(spec, **config)
    return [p.name for p in claim_model(spec, cfg).properties]


def test_the_checker_proves_what_claim_toml_declares_against_each_remote() -> None:
    declared = list(claim_spec().invariants)
    assert names(None) == ["stale_operations_change_nothing", *declared]
    # the promise's tiers: what a plain or deduping remote cannot keep is not checked there
    assert names(None, remote="dedup") == [
        "stale_operations_change_nothing",
        *(n for n in declared if n not in ("reconciled_absent", "uncertain_is_reconciled")),
    ]
    assert "effect_at_most_once" not in names(None, remote="plain")
    # an example of two live drafts cannot be met with one draft: it is left out
    assert "parallel_drafts" not in names(None, drafts=1)


def test_claim_toml_declares_the_world_the_cli_checks_without_flags() -> None:
    cfg = ClaimModelConfig.declared(claim_spec())
    assert (cfg.workers, cfg.targets, cfg.drafts, cfg.epochs) == (3, 1, 2, 3)
    assert (cfg.retries, cfg.remote, cfg.crashes, cfg.edits) == (1, "fencing", True, True)
    assert ClaimModelConfig.declared(claim_spec(), workers=2).workers == 2
    with pytest.raises(InvalidArgument, match="workers must be an int from 1 to 6"):
        ClaimModelConfig.declared(claim_spec(), workers=9)


def test_one_edit_of_the_world_changes_the_bounds_checked(tmp_path: Path) -> None:
    path = edited(tmp_path, "[world]\nworkers = 3", "[world]\nworkers = 2")
    result = CliRunner().invoke(main, ["check", str(path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["bounds"]["workers"] == 2 and data["unique"] == 74_385  # K=2, symmetry
    flagged = CliRunner().invoke(main, ["check", str(path), "--workers", "3", "--json"])
    assert json.loads(flagged.stdout)["unique"] == 101_269  # the flag overrides the file


def _dedup_small() -> ClaimModelConfig:
    return ClaimModelConfig(workers=2, drafts=2, epochs=2, remote="dedup")


def test_one_edit_of_an_invariant_reaches_the_checker_and_the_campaign(tmp_path: Path) -> None:
    """``no_overlapping_sends`` is checked against every remote in claim.toml; checked
    against a fencing remote alone (the edit), the dedup tier's overlap is no longer a
    violation, for the built-in engine and for the campaign's verdict."""
    fencing_only = edited(
        tmp_path,
        'kind = "exclusive_work"\n',
        'kind = "exclusive_work"\nremote = ["fencing"]\n',
    )
    before = Checker(claim_model(claim_spec(), _dedup_small())).run()
    assert before.verdict == "violated"
    assert before.discoveries["no_overlapping_sends"].property.kind == "always"
    after = Checker(claim_model(load_spec(fencing_only), _dedup_small())).run()
    assert after.verdict == "ok" and after.unique == before.unique

    clock = FakeClock()
    for spec, overlap_is_broken in ((claim_spec(), True), (load_spec(fencing_only), False)):
        assert spec.path is not None
        store = open_store(f"sqlite:///{tmp_path / spec.path.stem}.sqlite", clock=clock, spec=spec)
        claim = store.acquire("a", approved_draft(store, "a"), "w", 30)
        claim.begin_send()
        claim.confirm()
        late = Request("a", claim.draft_id, 0, "other-key", 0.0, 1.0, "deduplicated")
        sent = Request("a", claim.draft_id, 1, claim.idempotency_key, 0.5, 1.5, "applied")
        verdict = judge(store, [late, sent], "dedup", ["a"])
        assert verdict.findings.overlapping_sends == 1
        broken = [m for m in verdict.violations if "overlapping sends" in m]
        assert bool(broken) == overlap_is_broken, verdict.violations
        if broken:
            assert "no_overlapping_sends" in broken[0]  # named by the declaration
        store.close()


def test_sent_as_pinned_is_invariant_6_and_needs_draft_unchanged(tmp_path: Path) -> None:
    """PROTOCOL's invariant 6, declared (kind ``pinned``): while a claim may send, its draft
    is approved at the version pinned. Without ``draft_unchanged`` on begin_send, an edit
    of the draft between the acquire and the send breaks it in three steps, in both
    engines; the edit lock alone does not hold it (it covers sending and uncertain only)."""
    hasty = edited(
        tmp_path,
        'guards = ["owner_matches", "lease_live", "draft_unchanged"]',
        'guards = ["owner_matches", "lease_live"]',
    )
    result = CliRunner().invoke(main, ["check", str(hasty), "--workers", "2"])
    assert result.exit_code == 1, result.output
    assert "sent_as_pinned: violated" in result.output
    path = result.output.split("counterexample for sent_as_pinned")[1]
    assert "2. edit draft 0 of target 0" in path and "3. worker 0 records the intent" in path
    assert "4." not in path.split("verdict")[0].split("counterexample for")[0]
    held = CliRunner().invoke(main, ["check", "claim", "--workers", "2"])
    assert "sent_as_pinned: holds" in held.output
    needs_spin()
    theirs, _ = spin_check(load_spec(hasty), ClaimModelConfig(workers=2))
    assert [p.name for p in theirs.violations] == ["sent_as_pinned"]


def test_one_edit_of_left_only_by_reaches_both_engines(tmp_path: Path) -> None:
    """Without retry among the events that may leave uncertain, a same-key retry against a
    deduping remote breaks the invariant, in the built-in engine and in SPIN alike."""
    needs_spin()
    path = edited(tmp_path, 'events = ["reconcile", "retry"]', 'events = ["reconcile"]')
    config = ClaimModelConfig(workers=2, drafts=1, epochs=2, remote="dedup")
    for spec, broken in ((claim_spec(), False), (load_spec(path), True)):
        ours = Checker(claim_model(spec, config)).stop_on_violation().run()
        theirs, _ = spin_check(spec, config)
        for report in (ours, theirs):
            found = report.discoveries.get("uncertain_left_only_with_evidence")
            assert (found is not None) == broken, report.verdict
        if broken:
            assert ours.verdict == theirs.verdict == "violated"
            assert len(ours.discoveries["uncertain_left_only_with_evidence"].path) == len(
                theirs.discoveries["uncertain_left_only_with_evidence"].path
            )


def test_the_eventually_kind_reads_from_and_to_in_the_claim_world(tmp_path: Path) -> None:
    """Checked as "no target stays in from": every way out of from must enter to."""
    path = edited(tmp_path, 'to = ["reconciled", "sending"]', 'to = ["reconciled"]')
    with pytest.raises(SpecError, match=r"retry leads from 'uncertain' to 'sending', which is"):
        claim_model(load_spec(path))
    # another obligation, from the declaration alone: a reserved claim leaves reserved
    # only if some step is sure to happen: with readback alone assumed fair, a holder that
    # pauses keeps it; with the workers' steps fair (and no crash), it is sent or released
    reserved = 'from = ["reserved"]\nto = ["sending", "released", "expired"]'
    config = ClaimModelConfig(workers=2, crashes=False)
    for fair, verdict in (('"reconcile"', "violated"), ('"steps"', "ok")):
        text = CLAIM.replace('from = ["uncertain"]\nto = ["reconciled", "sending"]', reserved)
        other = edited(
            tmp_path, 'fair = ["reconcile", "fence"]', f"fair = [{fair}]", text=text, name="d"
        )
        report = Checker(claim_model(load_spec(other), config)).run()
        assert report.verdict == verdict, fair
        found = report.discoveries.get("uncertain_is_reconciled")
        assert (found is not None) == (verdict == "violated")


def test_a_fair_fence_assumes_nothing_more_than_reconcile_in_the_claim_world(
    tmp_path: Path,
) -> None:
    """The claim world's reconcile fences the remote itself where its readback finds
    nothing, so ``fence`` beside ``reconcile`` changes no verdict there, and the report
    says so rather than the lifecycle world's separate fencing step."""
    config = ClaimModelConfig(workers=2, epochs=2)
    alone = edited(tmp_path, 'fair = ["reconcile", "fence"]', 'fair = ["reconcile"]')
    both, one = claim_model(claim_spec(), config), claim_model(load_spec(alone), config)
    name = "uncertain_is_reconciled"
    for model in (both, one):
        report = Checker(model).run()
        assert report.complete
        assert {p.name: report.outcome(p) for p in model.properties}[name] == "holds"
    said = {p.name: p.fairness for p in both.properties}[name]
    assert "a reconcile that finds nothing fences the remote itself" in said
    assert "fences the executor" not in said


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            'meaning = "uncertain is left only by readback evidence or a same-key retry"',
            'meaning = "uncertain is left only by readback evidence or a same-key retry"\n\n'
            '[invariants.twice]\nkind = "left_only_by"\nstates = ["reserved"]\n'
            'events = ["begin_send"]\nmeaning = "x"',
            "declare one invariant of kind left_only_by",
        ),
        (
            'kind = "reachable"\nevent = "discard"',
            'kind = "reachable"\nevent = "renew"',
            "records one event a step takes, the refusal a stale owner's operation records",
        ),
        ("[world]\nworkers = 3", "[world]\ncounts = 5\nworkers = 3", "[world] counts"),
        ("drafts = 2\nepochs = 3", "drafts = 2\nepochs = 7", "epochs must be an int"),
        (
            'fair = ["reconcile", "fence"]',
            'fair = ["reconcile", "fence", "clock"]',
            "assuming clock fair",
        ),
    ],
)
def test_what_the_claim_world_cannot_read_is_refused_by_name(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    path = edited(tmp_path, old, new)
    result = CliRunner().invoke(main, ["check", str(path), "--workers", "2"])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert message in " ".join(result.output.split()), result.output
    assert str(path) in result.output


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            'kind = "exclusive_work"',
            'kind = "effect_once"',
            "kind 'effect_once', which the claim world reads",
        ),
        ("[world]\n", '[world]\nremote = "dedup"\n', "[world] declares ['remote']"),
        (
            'kind = "exclusive_work"',
            'kind = "exclusive_work"\nremote = ["fencing"]',
            "names remote modes ['fencing']",
        ),
    ],
)
def test_a_lifecycle_of_its_own_refuses_the_claim_worlds_invariants(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    path = edited(tmp_path, old, new, text=JOB, name="job")
    with pytest.raises(SpecError, match=re.escape(message)):
        entity_model(load_spec(path))
    result = CliRunner().invoke(main, ["check", str(path)])
    assert result.exit_code != 0 and message in result.output and "Traceback" not in result.output


def test_every_shipped_claim_design_checks_the_invariants_it_inherits() -> None:
    """The wrong designs are variants of claim.toml: they inherit its invariants and world
    (a variant changes transitions, guards, events or drafts, never what is proved)."""
    for name, spec in shipped().items():
        if spec.base is not None and "job" not in name:
            assert list(spec.invariants) == list(claim_spec().invariants), name
            assert spec.world == claim_spec().world, name


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('remote = ["fencing", "dedup"]', "remote = []", "remote must be a list of remote modes"),
        ('remote = ["fencing", "dedup"]', 'remote = ["fenced"]', "remote must be a list"),
        ("live_drafts = 2", "live_drafts = true", "live_drafts must be a whole number"),
        ('outcome = "present"', 'outcome = "maybe"', 'outcome must be "present" or "absent"'),
        (
            'states = ["confirmed"]',
            'states = ["confirmed"]\nevent = "discard"',
            "an example names one of states",
        ),
        ('events = ["reconcile", "retry"]', 'events = ["recon"]', "events ['recon'] are not"),
        ('events = ["reconcile", "retry"]', "events = []", "needs events = [event names]"),
        ('fair = ["acquire", "steps"]', 'fair = ["acquire", "walks"]', "fair names ['walks']"),
        (
            'kind = "taken"',
            'kind = "taken"\nfrom = ["reserved"]',
            "['from'] belong to kind 'eventually' only",
        ),
        ('remote = "fencing"', 'remote = "fenced"', "[world]: remote must be one of"),
        ("retries = 1", "retries = 9", "[world]: retries must be a whole number from 0 to 6"),
    ],
)
def test_bad_claim_invariants_and_worlds_are_named_with_their_line(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    path = edited(tmp_path, old, new)
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert message in str(e.value) and str(path) in str(e.value)
