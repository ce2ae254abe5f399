"""The claim's verdicts do not rest on the claim world's Python alone: the lifecycle's
world, which has no line about the claim, reads ``claim.toml`` and each wrong design from
the declaration (its ``pseudo`` initial state, its ``by = "refusal"`` discard, its acquire
that starts the send in ``intent_after_send``) and reaches the same verdict on every
invariant and example, at the same bounds. The one difference is the data model's: the
claim keeps a row per epoch, a lifecycle one row per entity, so where a design acquires a
busy target (``update_returning_claim``) the lifecycle's row leaves ``uncertain`` by the
acquire, and the uncertain epoch is never reconciled, which the claim's rows per epoch do
not show. SPIN's twin of the lifecycle world reaches the built-in engine's states on the
claim too. With the claim world's fence and the claim row's kept lease, both declared
in ``claim.toml``, and the claim world's key abstraction, the two worlds reach the same
states one to one, and so the pinned counts, from the command line too (``check --world
lifecycle``)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from claimfsm.checker import (
    Checker,
    ClaimModelConfig,
    EntityModelConfig,
    claim_model,
    entity_model,
    reachable,
    spin_check,
)
from claimfsm.checker._worlds import claim_common, lifecycle_common
from claimfsm.cli import main
from claimfsm.errors import SpecError
from claimfsm.spec import declarations_dir, designs, load_spec

from .conftest import needs_spin

#: Where one row per entity judges otherwise than a row per epoch: (claim's, lifecycle's).
ONE_ROW = {
    "update_returning_claim": {
        "uncertain_left_only_with_evidence": ("holds", "violated"),
        "uncertain_is_reconciled": ("holds", "violated"),
    }
}


def _declaration(name: str) -> object:
    folder = declarations_dir()
    return load_spec(folder / "claim.toml" if name == "claim" else folder / f"wrong/{name}.toml")


@pytest.mark.parametrize("name", ["claim", *designs()])
def test_both_worlds_give_each_design_the_same_verdicts(name: str) -> None:
    _same_verdicts(name, None)


@pytest.mark.slow  # about 2 minutes: the lifecycle world about twice as large
@pytest.mark.parametrize("name", ["claim", *designs()])
def test_both_worlds_give_each_design_the_same_verdicts_where_the_operator_fences_at_any_step(
    name: str,
) -> None:
    """The claim's verdicts do not rest on the claim world's fence either: with the
    lifecycle world's operator free to fence at any step, every design gets the same
    verdicts."""
    _same_verdicts(name, "any_step")


@pytest.mark.slow  # about 40 s
@pytest.mark.parametrize("name", ["claim", *designs()])
def test_both_worlds_give_each_design_the_same_verdicts_where_no_client_carries_its_key(
    name: str,
) -> None:
    """Nor on the claim world's key abstraction: with the lifecycle world's clients
    sending the entity's key as it is when sent (``own_keys=False``), every design gets
    the same verdicts as with their own keys, and as in the claim world."""
    _same_verdicts(name, None, own_keys=False)


def _same_verdicts(name: str, fence: str | None, own_keys: bool | None = None) -> None:
    spec = _declaration(name)
    bounds = {"workers": 2, "epochs": 2, "drafts": 2, "retries": 1}
    edits = name != "fresh_key_retry"  # (its fresh keys alone make the world ten times larger)
    claims = claim_model(spec, ClaimModelConfig.declared(spec, edits=edits, **bounds))  # type: ignore[arg-type]
    config = EntityModelConfig(edits=edits, fence=fence, own_keys=own_keys, **bounds)  # type: ignore[arg-type]
    lifecycles = entity_model(spec, config)
    theirs, ours = Checker(claims).run(), Checker(lifecycles).run()
    assert theirs.complete and ours.complete
    claim_says = {p.name: theirs.outcome(p) for p in claims.properties}
    lifecycle_says = {p.name: ours.outcome(p) for p in lifecycles.properties}
    assert set(claim_says) == set(lifecycle_says)  # the same declared properties
    differ = {
        n: (claim_says[n], lifecycle_says[n])
        for n in claim_says
        if claim_says[n] != lifecycle_says[n]
    }
    assert differ == ONE_ROW.get(name, {})
    assert (theirs.deadlock is None) == (ours.deadlock is None)
    if name != "claim":  # each wrong design is caught in the lifecycle's world too
        wrong = [
            n
            for n, said in lifecycle_says.items()
            if said in ("violated", "never happens") and n not in ONE_ROW.get(name, {})
        ]
        assert wrong or ours.deadlock is not None, lifecycle_says
    else:
        assert all(s in ("holds", "found") for s in lifecycle_says.values()), lifecycle_says
        # a stale owner's refusal, not anyone taking the discard, meets the example
        path = ours.discoveries["stale_owner_discarded"].path
        assert path[-1].action is not None and path[-1].action[0] in ("own", "wake")
        assert path[-1].state.rows == path[-2].state.rows


@pytest.mark.slow  # about 30 s: 205,925 states in each engine
def test_spin_reaches_the_lifecycle_worlds_states_on_the_claim_at_its_declared_bounds() -> None:
    """At ``claim.toml``'s own bounds (two workers, three epochs, two drafts with edits),
    where a stale owner comes back to a row that moved through a later epoch into a state
    its event does not leave: both engines mark that refusal, and store the same states."""
    needs_spin()
    spec = load_spec(declarations_dir() / "claim.toml")
    config = EntityModelConfig(workers=2)
    ours = Checker(entity_model(spec, config)).symmetry(False).run()
    theirs, _ = spin_check(spec, config)
    assert (theirs.unique, theirs.depth) == (ours.unique, ours.depth)


@pytest.mark.parametrize("fence", ["with_readback", "any_step"])
def test_spin_reaches_the_lifecycle_worlds_states_on_the_claim(fence: str) -> None:
    """The lifecycle world's Promela, generated from ``claim.toml`` (the acquire out of
    every state, the refusal's mark, the fence inside reconcile or at any step), has
    exactly the built-in engine's states and verdicts."""
    needs_spin()
    spec = load_spec(declarations_dir() / "claim.toml")
    config = EntityModelConfig(workers=2, epochs=2, drafts=1, edits=False, fence=fence)
    model = entity_model(spec, config)
    ours = Checker(model).symmetry(False).run()
    theirs, _ = spin_check(spec, config)
    assert (theirs.unique, theirs.depth) == (ours.unique, ours.depth)
    assert {p.name: theirs.outcome(p) for p in model.properties} == {
        p.name: ours.outcome(p) for p in model.properties
    }
    assert ours.outcome(next(p for p in model.properties if p.name == "stale_owner_discarded")) == (
        "found"
    )


@pytest.mark.parametrize("fence", ["with_readback", "any_step"])
def test_on_what_both_keep_the_lifecycle_world_reaches_the_claim_worlds_states(fence: str) -> None:
    """``claim.toml`` declares the claim world's fence (``[world] fence =
    "with_readback"``: the operator fences only inside reconcile, where readback finds
    nothing). Mapped onto what both worlds keep (``checker/_worlds.py``: the row, each
    worker's phase and epoch and whether it holds the current claim, the sticky marks),
    the lifecycle world then reaches exactly the claim world's states, so the two worlds
    differ only in what the mapping leaves out: the request key each handle carries. With
    the operator free to fence at any step, it reaches those and more."""
    spec = load_spec(declarations_dir() / "claim.toml")
    assert spec.world["fence"] == "with_readback"
    bounds = {"workers": 2, "epochs": 2, "drafts": 2}
    claims = reachable(claim_model(spec, ClaimModelConfig.declared(spec, **bounds)))
    lifecycles = reachable(entity_model(spec, EntityModelConfig(fence=fence, **bounds)))
    theirs = set(map(claim_common(spec), claims))
    ours = set(map(lifecycle_common(spec), lifecycles))
    if fence == "with_readback":
        assert ours == theirs
    else:
        assert ours > theirs
        fenced_early = {x for x in ours - theirs if x[0][3] > 0}
        assert fenced_early == ours - theirs  # each extra state has the remote fenced


def test_with_the_claim_worlds_key_abstraction_the_worlds_reach_the_same_states() -> None:
    """Where the lifecycle world's clients carry no request key of their own (the send
    takes the entity's key as it is when sent, the answer is heard for the epoch: the
    claim world's abstraction against a fencing remote, ``own_keys=False``), it reaches as
    many states as the claim world, and they map one to one onto the same states of what
    both keep, the lease bit the claim row keeps (``[lease] kept``) included. SPIN's twin
    of the lifecycle world reaches the same count."""
    spec = load_spec(declarations_dir() / "claim.toml")
    bounds = {"workers": 2, "epochs": 2, "drafts": 2}
    claims = reachable(claim_model(spec, ClaimModelConfig.declared(spec, **bounds)))
    config = EntityModelConfig(own_keys=False, **bounds)  # type: ignore[arg-type]
    lifecycles = reachable(entity_model(spec, config))
    theirs = set(map(claim_common(spec), claims))
    ours = set(map(lifecycle_common(spec), lifecycles))
    assert len(lifecycles) == len(ours) == len(theirs) == len(claims)
    assert ours == theirs
    # with their own keys, the clients tell more states apart than the mapping keeps
    carried = reachable(entity_model(spec, EntityModelConfig(**bounds)))  # type: ignore[arg-type]
    assert len(carried) > len(lifecycles)
    assert set(map(lifecycle_common(spec), carried)) == theirs
    needs_spin()
    theirs_spin, _ = spin_check(spec, config)
    assert theirs_spin.unique == len(lifecycles)


#: The pinned counts (tests/test_checker.py): claim.toml at its declared bounds, by
#: workers, without and with worker symmetry.
PINNED = {2: (144_461, 74_385), 3: (493_405, 101_269)}


def _lifecycle_counts(workers: int) -> tuple[int, int]:
    """Without symmetry through the API, with it through ``claimfsm check --world
    lifecycle``, which takes the claim world's key abstraction for the claim by itself."""
    spec = load_spec(declarations_dir() / "claim.toml")
    model = entity_model(spec, EntityModelConfig(workers=workers, own_keys=False))
    plain = Checker(model).symmetry(False).run()
    assert plain.complete
    said = CliRunner().invoke(
        main, ["check", "claim", "--world", "lifecycle", "--workers", str(workers), "--json"]
    )
    assert said.exit_code == 0, said.output
    folded = json.loads(said.stdout)
    assert folded["complete"] and folded["verdict"] == "ok"
    assert folded["bounds"]["own_keys"] is False
    said_of = {name: v["outcome"] for name, v in folded["properties"].items()}
    assert {p.name: plain.outcome(p) for p in model.properties} == said_of
    return plain.unique, folded["unique"]


def test_the_claim_compiled_into_the_lifecycle_world_reaches_the_pinned_counts() -> None:
    """Test (a) of issue 10 on the world that has no line about the claim: ``claim.toml``
    compiled into the lifecycle world (its clients carrying no key of their own, the claim
    world's abstraction) reaches exactly the pinned counts at two workers, with and
    without symmetry, and every property holds or is found."""
    assert _lifecycle_counts(2) == PINNED[2]


def test_check_runs_a_claim_design_in_either_world_and_refuses_what_a_world_cannot(
    tmp_path: Path,
) -> None:
    """``--world lifecycle`` checks a wrong design there too (and catches it); ``--world
    claim`` is refused for a lifecycle of its own, and ``--by-target`` without two targets
    or more, each by name; ``--drafts`` bounds a lifecycle's linked drafts."""
    small = ["--workers", "2", "--epochs", "2", "--drafts", "1"]
    for world in ("claim", "lifecycle"):
        said = CliRunner().invoke(
            main, ["check", "lapse_reclaims_sending", "--world", world, *small]
        )
        assert said.exit_code == 1 and "verdict: violated" in said.output, (world, said.output)
        assert "no_overlapping_sends: violated" in said.output, said.output
        assert "stopped by first counterexample" in said.output, said.output
    said = CliRunner().invoke(main, ["check", "job", "--world", "claim"])
    assert said.exit_code == 2 and "--world claim" in said.output and "job" in said.output
    said = CliRunner().invoke(main, ["check", "claim", "--world", "lifecycle", "--by-target"])
    assert said.exit_code == 2 and "--by-target" in said.output
    page = str(Path(__file__).parents[1] / "examples" / "page.toml")
    said = CliRunner().invoke(main, ["check", page, "--drafts", "1", "--workers", "1", "--json"])
    assert "Traceback" not in said.output
    found = json.loads(said.stdout)  # (an example that needs two live revisions: never)
    assert found["complete"] and found["bounds"]["drafts"] == 1


@pytest.mark.slow  # about 80 s: 493,405 states in each engine, and 101,269 classes
def test_the_claim_compiled_into_the_lifecycle_world_reaches_the_pinned_counts_at_three() -> None:
    """And at three workers, in the built-in engine and in SPIN's twin of the lifecycle
    world (the Promela generated from the declaration, not the claim world's)."""
    assert _lifecycle_counts(3) == PINNED[3]
    needs_spin()
    spec = load_spec(declarations_dir() / "claim.toml")
    theirs, _ = spin_check(spec, EntityModelConfig(workers=3, own_keys=False))
    assert (theirs.unique, theirs.depth, theirs.verdict) == (PINNED[3][0], 26, "ok")


@pytest.mark.slow  # about a minute: 144,461 states in each world, and SPIN's
def test_at_claim_toml_s_declared_bounds_the_worlds_reach_the_same_states() -> None:
    """The same one-to-one map at ``claim.toml``'s declared bounds with two workers, where
    the claim world reaches the pinned 144,461 states: so does the lifecycle world without
    its clients' keys, in each engine, and on what both keep they are the same states."""
    spec = load_spec(declarations_dir() / "claim.toml")
    claims = reachable(claim_model(spec, ClaimModelConfig.declared(spec, workers=2)))
    config = EntityModelConfig(workers=2, own_keys=False)
    lifecycles = reachable(entity_model(spec, config))
    assert len(claims) == len(lifecycles) == PINNED[2][0]
    assert set(map(lifecycle_common(spec), lifecycles)) == set(map(claim_common(spec), claims))
    needs_spin()
    theirs, _ = spin_check(spec, config)
    assert (theirs.unique, theirs.depth, theirs.verdict) == (PINNED[2][0], 26, "ok")


def test_one_line_keeps_the_lease_in_the_store_and_both_checker_engines(tmp_path: Path) -> None:
    """``[lease] kept = true`` is what the claim row does with its lease deadline once the
    epoch leaves the lease states: it keeps it. Edited to ``false``, the lifecycle store
    clears the deadline on release, the lifecycle world and its SPIN twin clear the bit
    (fewer states, the same verdicts), and the claim world refuses the declaration by name,
    since its rows per epoch keep the deadline."""
    text = (declarations_dir() / "claim.toml").read_text()
    assert "[lease]\nkept = true\n" in text
    path = tmp_path / "cleared.toml"
    path.write_text(
        text.replace("[lease]\nkept = true\n", "[lease]\nkept = false\n").replace(
            'name = "claim"', 'name = "cleared"'
        )
    )
    kept, cleared = load_spec(declarations_dir() / "claim.toml"), load_spec(path)
    assert kept.lease_kept and not cleared.lease_kept
    for name, shown in (("claim", True), (str(path), False)):
        said = CliRunner().invoke(main, ["spec", name, "--json"])
        assert json.loads(said.stdout)["lease"] == {"kept": shown}
    with pytest.raises(SpecError, match=r"cleared\.toml: .*declare \[lease\] kept = true"):
        claim_model(cleared)
    from claimfsm.store import open_store

    with pytest.raises(SpecError, match=r"cleared\.toml: .*declare \[lease\] kept = true"):
        open_store("memory://", spec=cleared)  # the claim machine, which every claim store runs
    said = CliRunner().invoke(main, ["check", str(path)])
    assert said.exit_code == 1 and "Traceback" not in said.output, said.output
    assert "declare [lease] kept = true" in said.output
    bounds = {"workers": 2, "epochs": 2, "drafts": 1, "edits": False}
    config = EntityModelConfig(own_keys=False, **bounds)  # type: ignore[arg-type]
    models = {spec.name: entity_model(spec, config) for spec in (kept, cleared)}
    reports = {name: Checker(model).run() for name, model in models.items()}
    assert reports["cleared"].unique < reports["claim"].unique
    assert {p.name: reports["claim"].outcome(p) for p in models["claim"].properties} == {
        p.name: reports["cleared"].outcome(p) for p in models["cleared"].properties
    }
    claims = reachable(claim_model(kept, ClaimModelConfig.declared(kept, **bounds)))
    assert reports["claim"].unique == len(claims)
    needs_spin()
    for spec in (kept, cleared):
        theirs, _ = spin_check(spec, config)
        assert theirs.unique == reports[spec.name].unique, spec.name


@pytest.mark.parametrize("name", ["claim", "cleared"])
def test_the_lifecycle_store_keeps_or_clears_the_deadline_as_declared(
    tmp_path: Path, name: str
) -> None:
    from claimfsm.store import open_entity_store
    from claimfsm.verify import ManualClock

    text = (declarations_dir() / "claim.toml").read_text()
    if name == "cleared":
        text = text.replace("[lease]\nkept = true\n", "[lease]\nkept = false\n")
    path = tmp_path / f"{name}.toml"
    path.write_text(text.replace('name = "claim"', f'name = "{name}"'))
    spec = load_spec(path)
    clock = ManualClock()
    with open_entity_store(spec, f"sqlite:///{tmp_path / 'c.sqlite'}", clock=clock) as store:
        draft = store.create_draft("t", "hello")
        store.approve_draft(draft.draft_id)
        handle = store.take("t", "acquire", draft=draft.draft_id, lease_seconds=10)
        deadline = clock() + 10
        store.act(handle, "release")
        row = store.row("t")
        assert row is not None and row.state == "released"
        assert row.lease_deadline == (deadline if name == "claim" else None)
        history = [e for e in store.history("t") if e.event == "release"]
        assert [e.lease_deadline for e in history] == [row.lease_deadline]


def test_the_claim_world_fences_only_with_readback() -> None:
    """The claim world has one fence, reconcile's: a claim declaration that declares
    another is refused by name, and so is ``check --fence any_step`` on the claim."""
    text = (declarations_dir() / "claim.toml").read_text()
    assert 'fence = "with_readback"' in text
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "anyfence.toml"
        path.write_text(
            text.replace('fence = "with_readback"', 'fence = "any_step"').replace(
                'name = "claim"', 'name = "anyfence"'
            )
        )
        spec = load_spec(path)
        with pytest.raises(SpecError, match=r"anyfence\.toml: \[world\] fence = 'any_step'"):
            ClaimModelConfig.declared(spec)
        # the lifecycle world runs it as declared: the operator's fence a step of its own
        model = entity_model(spec, EntityModelConfig(workers=1, epochs=1, drafts=1, edits=False))
        assert any(a[0] == "fence" for w in reachable(model) for a in model.actions(w))
    said = CliRunner().invoke(main, ["check", "claim", "--fence", "any_step"])
    assert said.exit_code == 2 and "Traceback" not in said.output
    assert "fences only inside reconcile's readback" in said.output
