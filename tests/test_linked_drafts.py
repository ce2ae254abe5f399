"""Linked drafts in a lifecycle of your own (``[drafts]``): a taker names one of the
entity's drafts and its epoch pins it, ``draft_pinned`` reads the pinned draft as it is
now, a transition declared ``dispatches`` marks it dispatched, and an edit of the pinned
draft is refused where it may yet be dispatched. The checker's world of a lifecycle reads
them (examples/page.toml), in the built-in engine and in its SPIN twin, state for state;
an invariant of kind ``pinned`` says the work carries what was approved. With a remote, a
request carries the pinned draft's key (examples/post.toml). (Their store, verify and the
campaign: ``test_linked_drafts_store``.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from claimfsm.checker import Checker, EntityModelConfig, entity_model, spin_check
from claimfsm.checker._engine import Step, explained
from claimfsm.checker._entity_text import entity_path_steps
from claimfsm.checker._entity_world import EntityWorld
from claimfsm.cli import main
from claimfsm.errors import InvalidArgument, SpecError
from claimfsm.spec import claim_spec, declarations_dir, load_spec
from claimfsm.store import open_entity_store

from .conftest import needs_spin
from .test_lifecycle_checker import run as outcomes  # each property's outcome, bounds given
from .test_lifecycle_remote import load_spec_text

PAGE = Path(__file__).resolve().parents[1] / "examples" / "page.toml"
POST = Path(__file__).resolve().parents[1] / "examples" / "post.toml"


def page(tmp_path: Path, text: str, name: str = "variant") -> Path:
    """A variant of the page declaration, beside a copy of it."""
    (tmp_path / "page.toml").write_text(PAGE.read_text())
    path = tmp_path / f"{name}.toml"
    path.write_text(f'base = "page.toml"\nname = "{name}"\ndescription = "a variant"\n' + text)
    return path


def test_the_page_lifecycle_holds_and_finds_its_examples() -> None:
    result = CliRunner().invoke(main, ["check", str(PAGE), "--json"])
    assert result.exit_code == 0, result.output
    found = {k: v["outcome"] for k, v in json.loads(result.stdout)["properties"].items()}
    assert found == {
        "stale_operations_change_nothing": "holds",
        "one_publish_at_a_time": "holds",
        "publishes_what_was_approved": "holds",
        "stalled_left_only_by_clear": "holds",
        "parallel_revisions": "found",
        "revision_published": "found",
        "free_page_is_picked": "holds",
    }
    text = CliRunner().invoke(main, ["check", str(PAGE)]).output
    assert "2 linked drafts per page, each edited once at most" in text


def test_one_live_draft_per_entity_reaches_the_checker(tmp_path: Path) -> None:
    """The claim's partial_unique_index finding, for a lifecycle: with one live draft per
    entity, two revisions are never live at once. Without drafts in the world, or with
    the flag ignored, both outcomes would be the same."""
    one_live = page(tmp_path, "[drafts]\none_live_per_target = true\n", "one_live")
    assert outcomes(one_live)["parallel_revisions"] == "never happens"
    assert outcomes(PAGE)["parallel_revisions"] == "found"
    # one draft per page and no edits: never two live ones either
    assert outcomes(PAGE, drafts=1, edits=False)["parallel_revisions"] == "never happens"


#: page.toml with a start that does not read the pin (no draft_pinned guard)
HASTY = PAGE.read_text().replace(
    'guards = ["owner_matches", "lease_live", "revision_unchanged"]',
    'guards = ["owner_matches", "lease_live"]',
)


def test_the_pinned_invariant_catches_a_start_that_does_not_read_the_pin(
    tmp_path: Path,
) -> None:
    """``draft_pinned`` is what keeps the work on the approved content: without it the
    author edits the pinned revision while the page is reserved and the start goes ahead,
    and ``publishes_what_was_approved`` (kind ``pinned``) is broken in three steps."""
    assert PAGE.read_text() != HASTY  # the guard was there to drop
    hasty = tmp_path / "hasty_page.toml"
    hasty.write_text(HASTY)
    result = CliRunner().invoke(main, ["check", str(hasty)])
    assert result.exit_code == 1, result.output
    assert "publishes_what_was_approved: violated" in result.output
    path = result.output.split("counterexample for publishes_what_was_approved")[1]
    assert "1. worker 0: pick page 0 with draft 0" in path
    assert "2. author: edits draft 0 of page 0" in path
    assert "3. worker 0: start" in path and "4." not in path
    assert "one_publish_at_a_time: holds" in result.output  # only the content went wrong
    # the generated stateful test plays the same on a store: the store does what the
    # model does, and the declaration itself breaks the invariant
    from claimfsm.verify import verify

    spec = load_spec(hasty)
    url = f"sqlite:///{tmp_path / 'hasty.sqlite'}"
    found = verify(spec, lambda clock: open_entity_store(spec, url, clock=clock), examples=5)
    assert not found.ok
    assert found.failure.startswith("invariant publishes_what_was_approved violated")


def test_spin_breaks_the_pinned_invariant_where_the_builtin_engine_does(tmp_path: Path) -> None:
    needs_spin()
    hasty = tmp_path / "hasty_page.toml"
    hasty.write_text(HASTY)
    for path, broken in ((PAGE, []), (hasty, ["publishes_what_was_approved"])):
        spec = load_spec(path)
        ours = Checker(entity_model(spec)).symmetry(False).run()
        theirs, _ = spin_check(spec)
        assert [p.name for p in ours.violations] == broken
        assert [p.name for p in theirs.violations] == broken


def test_a_pinned_invariant_needs_drafts_and_states(tmp_path: Path) -> None:
    pinned = '\n[invariants.as_pinned]\nkind = "pinned"\nmeaning = "as pinned"\n'
    no_states = tmp_path / "no_states.toml"
    no_states.write_text(PAGE.read_text() + pinned)
    with pytest.raises(SpecError, match=r"kind 'pinned' needs states = \[state names\]"):
        load_spec(no_states)
    job = tmp_path / "job.toml"
    job.write_text(
        (declarations_dir() / "job.toml").read_text() + pinned + 'states = ["running"]\n'
    )
    with pytest.raises(SpecError, match=r"kind 'pinned', which reads the draft an epoch pinned"):
        entity_model(load_spec(job))
    refused = CliRunner().invoke(
        main, ["verify", str(job), "--db", "sqlite:///" + str(tmp_path / "j.db")]
    )
    assert refused.exit_code != 0 and "which reads the draft an epoch pinned" in refused.output
    assert not (tmp_path / "j.db").exists()
    # the claim world reads it too: claim.toml's sent_as_pinned (test_claim_invariants)
    assert claim_spec().invariants["sent_as_pinned"].kind == "pinned"


def _world(model: Any) -> EntityWorld:
    return next(iter(model.init_states()))


def _take(model: Any, world: EntityWorld, draft: int) -> EntityWorld:
    after = model.next_state(world, ("take", 0, 0, draft, "pick"))
    assert after is not None
    return after


def test_a_take_pins_the_named_draft_and_an_edit_refuses_the_start() -> None:
    model = entity_model(load_spec(PAGE))
    world = _take(model, _world(model), 1)
    row = world.rows[0]
    assert (row.state, row.draft, row.version) == ("reserved", 1, 1)
    # as pinned: the start goes
    started = model.next_state(world, ("own", 0, "start"))
    assert started is not None and started.rows[0].state == "publishing"
    # the pinned draft edited (allowed while reserved): the start is refused
    edited = model.next_state(world, ("draft", 0, 1, "edit"))
    assert edited is not None and edited.rows[0].drafts[1] == ("p", 2)
    refused = model.next_state(edited, ("own", 0, "start"))
    assert refused is not None
    assert refused.rows[0] == edited.rows[0] and refused.clients[0] is None
    assert model.explain is not None
    text = model.explain(edited, ("own", 0, "start"), refused)[-1][0]
    assert "refused (revision_unchanged false)" in text
    # approved again at version 2, it is still not the version pinned
    approved = model.next_state(edited, ("draft", 0, 1, "approve"))
    assert approved is not None
    assert model.next_state(approved, ("own", 0, "start")).rows[0].state == "reserved"  # type: ignore[union-attr]
    # another draft's edit changes nothing for it
    other = model.next_state(world, ("draft", 0, 0, "edit"))
    assert model.next_state(other, ("own", 0, "start")).rows[0].state == "publishing"  # type: ignore[arg-type,union-attr]


def test_the_pinned_draft_is_locked_while_it_may_be_dispatched_then_marked() -> None:
    model = entity_model(load_spec(PAGE))
    world = model.next_state(_take(model, _world(model), 0), ("own", 0, "start"))
    assert world is not None and world.rows[0].state == "publishing"
    assert model.next_state(world, ("draft", 0, 0, "edit")) is None  # refused: pinned
    assert model.next_state(world, ("draft", 0, 1, "edit")) is not None  # another draft
    ran = model.next_state(world, ("run", 0))
    done = model.next_state(ran, ("own", 0, "finish"))  # type: ignore[arg-type]
    assert done is not None and done.rows[0].state == "published"
    assert done.rows[0].drafts[0] == ("d", 1)  # dispatched
    # a dispatched draft is not approved: a take naming it is refused, another goes
    assert model.next_state(done, ("take", 1, 0, 0, "pick")) is None
    again = model.next_state(done, ("take", 1, 0, 1, "pick"))
    assert again is not None and (again.rows[0].draft, again.rows[0].state) == (1, "reserved")
    # the path, as the diagrams draw it: the author's step, the take naming its draft
    edited = model.next_state(done, ("draft", 0, 1, "edit"))
    path = [
        Step(None, done),
        Step(("draft", 0, 1, "edit"), edited),
        Step(("draft", 0, 1, "approve"), model.next_state(edited, ("draft", 0, 1, "approve"))),
    ]
    steps = entity_path_steps(load_spec(PAGE), model, path)  # type: ignore[arg-type]
    assert [(s.actor, s.label, s.event) for s in steps] == [
        ("author", "edit draft 1", None),
        ("author", "approve draft 1", None),
    ]
    assert model.show_action(("take", 1, 0, 1, "pick")) == "worker 1: pick page 0 with draft 1"


def test_where_the_pinned_draft_is_locked_is_declared_by_dispatches(tmp_path: Path) -> None:
    """One edit to the declaration reaches the checker and the claim's store alike: the
    states a ``dispatches`` transition leaves."""
    assert claim_spec().pinning_states() == {"sending", "uncertain"}
    assert load_spec(PAGE).pinning_states() == {"publishing"}
    moved = tmp_path / "moved.toml"
    moved.write_text(PAGE.read_text().replace("dispatches = true", "dispatches = false"))
    spec = load_spec(moved)
    assert spec.pinning_states() == frozenset()
    model = entity_model(spec)
    world = model.next_state(_take(model, _world(model), 0), ("own", 0, "start"))
    assert model.next_state(world, ("draft", 0, 0, "edit")) is not None  # type: ignore[arg-type]


def test_what_linked_drafts_need_is_refused_by_name(tmp_path: Path) -> None:
    text = PAGE.read_text()
    no_table = tmp_path / "no_table.toml"
    no_table.write_text(text.replace("[drafts]\n", ""))
    with pytest.raises(SpecError, match=r"linked draft, and no \[drafts\] is declared"):
        entity_model(load_spec(no_table))
    owner_ready = tmp_path / "owner_ready.toml"
    owner_ready.write_text(
        text.replace(
            'guards = ["owner_matches", "lease_live", "revision_unchanged"]',
            'guards = ["owner_matches", "lease_live", "revision_approved"]',
        )
    )
    with pytest.raises(SpecError, match=r"reads 'revision_approved', of kind 'draft_ready'"):
        entity_model(load_spec(owner_ready))
    with pytest.raises(InvalidArgument, match=r"declares no \[drafts\]: leave out drafts"):
        entity_model(load_spec(declarations_dir() / "job.toml"), EntityModelConfig(drafts=2))
    # dispatches without [drafts] means nothing: the checker and the store both say so
    no_table_dispatch = tmp_path / "dispatch_only.toml"
    no_table_dispatch.write_text(
        text.replace("[drafts]\n", "")
        .replace('kind = "draft_ready"', 'kind = "epoch"')
        .replace('kind = "draft_pinned"', 'kind = "live"')
    )
    for refuse in (
        lambda: entity_model(load_spec(no_table_dispatch)),
        lambda: open_entity_store(load_spec(no_table_dispatch), "sqlite:///:memory:"),
    ):
        with pytest.raises(SpecError, match=r"dispatches the pinned draft, and no \[drafts\]"):
            refuse()
    # [drafts] with no taker to pin one means nothing: refused by name, nothing made
    no_taker = tmp_path / "no_taker.toml"
    no_taker.write_text(
        'name = "own"\ninitial = "a"\n[states.a]\nmeaning = "a"\n[states.b]\nmeaning = "b"\n'
        '[[transitions]]\nevent = "go"\nsource = "a"\ndest = "b"\n[drafts]\n'
    )
    with pytest.raises(SpecError, match="no taker's event pins a draft"):
        open_entity_store(load_spec(no_taker), "sqlite:///" + str(tmp_path / "x.db"))
    assert not (tmp_path / "x.db").exists()
    verify = CliRunner().invoke(
        main, ["verify", str(no_taker), "--db", "sqlite:///" + str(tmp_path / "y.db")]
    )
    assert verify.exit_code != 0 and "no taker's event pins a draft" in verify.output
    assert "Traceback" not in verify.output and not (tmp_path / "y.db").exists()


@pytest.mark.parametrize(
    ("one_live", "bounds"),
    [
        pytest.param(False, {}, id="declared"),
        pytest.param(True, {"drafts": 3}, id="one-live-3-drafts"),
        pytest.param(False, {"edits": False, "wakes": True}, id="no-edits-wakes"),
    ],
)
def test_spin_reaches_the_same_states_with_linked_drafts(
    tmp_path: Path, one_live: bool, bounds: dict[str, Any]
) -> None:
    """The lifecycle's Promela keeps each draft, the pinned one and its version field for
    field: the same unique states and verdicts as the built-in engine, the ``taken``
    liveness (which reads the drafts a pick may name) included."""
    needs_spin()
    path = page(tmp_path, "[drafts]\none_live_per_target = true\n") if one_live else PAGE
    spec, config = load_spec(path), EntityModelConfig(**bounds)
    ours = Checker(entity_model(spec, config)).symmetry(False).run()
    theirs, _ = spin_check(spec, config)
    assert theirs.complete and theirs.unique == ours.unique
    verdicts = {p.name: ours.outcome(p) for p in ours.model.properties}
    assert {p.name: theirs.outcome(p) for p in theirs.model.properties} == verdicts
    assert verdicts["parallel_revisions"] == ("never happens" if one_live else "found")


def test_a_spin_trail_through_a_named_draft_comes_back_as_the_same_path(tmp_path: Path) -> None:
    needs_spin()
    text = PAGE.read_text().replace('fair = ["pick", "steps"]', 'fair = ["steps"]')
    text = text.replace(
        "[world]",
        '[invariants.reserved_left_by_start]\nkind = "left_only_by"\nstates = ["reserved"]\n'
        'events = ["start", "lapse"]\nmeaning = "given back is another way out"\n\n[world]',
    )
    path = tmp_path / "strict.toml"
    path.write_text(text)
    spec = load_spec(path)
    ours = Checker(entity_model(spec)).symmetry(False).run()
    theirs, _ = spin_check(spec)
    verdicts = {p.name: ours.outcome(p) for p in ours.model.properties}
    assert verdicts["reserved_left_by_start"] == verdicts["free_page_is_picked"] == "violated"
    found = theirs.discoveries["reserved_left_by_start"].path
    assert [step.action for step in found[1:]] == [
        ("take", 0, 0, 0, "pick"),
        ("own", 0, "give_back"),
    ]


def hasty_post(tmp_path: Path) -> Path:
    """examples/post.toml settling absent on readback alone, without the remote's fence."""
    (tmp_path / "post.toml").write_text(POST.read_text())
    path = tmp_path / "hasty_post.toml"
    path.write_text(
        'base = "post.toml"\nname = "hasty_post"\ndescription = "absent without the fence"\n'
        'drop_guard = [{ event = "settle", guard = "fenced" }]\n'
    )
    return path


def test_a_request_carries_the_pinned_drafts_key(tmp_path: Path) -> None:
    """With a remote, a request's key is the pinned draft's and version's, as the claim's
    is: readback asks about it, a deduplicating remote applies it once, and effect_once is
    per draft, so posting two revisions in turn is no duplicate while one revision twice is.
    Keyed by the entity (as without drafts), effect_once would fail on the correct design,
    and a revision posted twice would be one key among others."""
    assert outcomes(POST)["each_revision_posted_once"] == "holds"
    assert outcomes(POST)["revision_posted"] == "found"
    spec = load_spec(hasty_post(tmp_path))
    model = entity_model(spec)
    report = Checker(model).run()
    verdicts = {p.name: report.outcome(p) for p in model.properties}
    assert verdicts["each_revision_posted_once"] == "violated"
    found = report.discoveries["each_revision_posted_once"].path
    landed = [step for step in explained(model, found) if "lands" in step[0]]
    assert len(landed) == 2 and all("(key d0v1)" in text for text, _ in landed), landed
    # two revisions, each once: the correct design posts draft 0, then draft 1
    model = entity_model(load_spec(POST))
    world = _world(model)
    for action in [
        ("take", 0, 0, 0, "pick"),
        ("own", 0, "send"),
        ("send", 0),
        ("land", 0, 1, 0),
        ("ack", 0),
        ("own", 0, "answer"),
        ("take", 0, 0, 1, "pick"),
        ("own", 0, "send"),
        ("send", 0),
        ("land", 0, 2, 2),  # epoch 2, draft 1 at version 1: key (1 * 2 + 0) * 1 + 0
    ]:
        nxt = model.next_state(world, action)
        assert nxt is not None, (action, model.show_state(world))
        world = nxt
    assert world.rows[0].landed == ((1, 0), (2, 2))
    assert [d for d, _ in world.rows[0].drafts] == ["d", "a"]  # draft 0 dispatched
    assert all(p.holds(world) for p in model.properties if p.kind == "always")


@pytest.mark.parametrize(
    ("hasty", "bounds"),
    [
        pytest.param(False, {}, id="declared"),
        pytest.param(False, {"wakes": True, "epochs": 2}, id="wakes"),
        pytest.param(True, {"epochs": 2, "drafts": 1}, id="hasty"),
    ],
)
def test_spin_keys_requests_by_the_pinned_draft_as_the_builtin_engine_does(
    tmp_path: Path, hasty: bool, bounds: dict[str, Any]
) -> None:
    needs_spin()
    spec = load_spec(hasty_post(tmp_path) if hasty else POST)
    config = EntityModelConfig(**bounds)
    ours = Checker(entity_model(spec, config)).symmetry(False).run()
    theirs, _ = spin_check(spec, config)
    if hasty:  # SPIN stops at its first counterexample, a shortest one
        assert not theirs.complete and theirs.verdict == ours.verdict == "violated"
        return
    assert theirs.complete and theirs.unique == ours.unique
    verdicts = {p.name: ours.outcome(p) for p in ours.model.properties}
    assert {p.name: theirs.outcome(p) for p in theirs.model.properties} == verdicts


def test_a_deduplicating_remote_settles_an_unanswered_post_by_resending_it() -> None:
    """post.toml's promise in the claim's three tiers: against a fencing remote every
    invariant holds; against a deduplicating one the operator resends an unanswered post
    with its revision's key, so nothing is stuck in ``unknown`` and each revision takes
    effect once, though a late request may arrive beside a later epoch's (so
    ``one_request_at_a_time`` is declared against a fencing remote only: without that,
    the resend's path breaks it); against a plain remote nothing settles an unanswered
    post, and the checker finds that deadlock."""
    spec = load_spec(POST)
    reports = {
        remote: Checker(entity_model(spec, EntityModelConfig(remote=remote))).run()
        for remote in ("fencing", "dedup", "plain")
    }
    said = {
        remote: {p.name: r.outcome(p) for p in r.model.properties} for remote, r in reports.items()
    }
    assert reports["fencing"].verdict == "ok" and reports["fencing"].deadlock is None
    assert said["fencing"]["one_request_at_a_time"] == "holds"
    assert reports["dedup"].verdict == "ok" and reports["dedup"].deadlock is None
    assert said["dedup"]["each_revision_posted_once"] == "holds"
    assert "one_request_at_a_time" not in said["dedup"]  # not promised there
    unscoped = load_spec_text(POST.read_text().replace('remote = ["fencing"]  #', "#"))
    model = entity_model(unscoped, EntityModelConfig(remote="dedup"))
    overlapped = Checker(model).run()
    path = overlapped.discoveries["one_request_at_a_time"].path
    assert any(s.action is not None and "resend" in s.action for s in path), path
    stuck = reports["plain"].deadlock
    assert stuck is not None and stuck[-1].state.rows[0].state == "unknown"
