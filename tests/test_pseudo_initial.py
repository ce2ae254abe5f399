"""The claim's epoch shape, declared: its initial state is ``pseudo`` (before an epoch
exists), so its acquire begins the next epoch from whatever state the target is in, its
guards alone keeping a busy target. Every lifecycle consumer reads that from the
declaration (``Spec.lifecycle_view``): the lifecycle's machine, store, checker world and
audit run ``claim.toml`` itself, and agree with each other on both backends. Without the
flag they refuse it by name; a flag that would mean something else is refused at load."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from claimfsm.audit import audit_store
from claimfsm.checker import Checker, EntityModelConfig, entity_model
from claimfsm.cli import main
from claimfsm.errors import SpecError, TargetBusy
from claimfsm.spec import declarations_dir, load_spec
from claimfsm.store import open_entity_store
from claimfsm.verify import guided_paths, verify

from .conftest import sqlite_quick_postgresql_slow

CLAIM = (declarations_dir() / "claim.toml").read_text()
FLAG = next(line for line in CLAIM.splitlines() if line.startswith("pseudo = true"))
JOB = (declarations_dir() / "job.toml").read_text()


def _write(tmp_path: Path, text: str, name: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text.replace('name = "claim"', f'name = "{name}"', 1))
    return path


def test_the_flag_is_what_lets_every_lifecycle_consumer_run_the_claim(tmp_path: Path) -> None:
    """One line of the declaration reaches the lifecycle's checker world and store: with
    it both run ``claim.toml``; without it both refuse it, naming the state a taker could
    never take the target from and the flag that would let it, and the store creates
    nothing."""
    without = CLAIM.replace(FLAG + "\n", "", 1)
    assert without != CLAIM
    spec = load_spec(_write(tmp_path, without, "unflagged"))
    db = tmp_path / "unflagged.sqlite"
    with pytest.raises(SpecError, match=r"flagged frees_target.*pseudo = true"):
        entity_model(spec)
    with pytest.raises(SpecError, match=r"flagged frees_target.*pseudo = true"):
        open_entity_store(spec, f"sqlite:///{db}")
    assert not db.exists()

    claim = load_spec(declarations_dir() / "claim.toml")
    model = entity_model(claim, EntityModelConfig(workers=1, epochs=2, edits=False))
    report = Checker(model).run()
    assert report.complete
    # every safety invariant of the claim holds in the lifecycle world too, and the
    # take out of a freeing state is what reaches the second epoch
    for prop in model.properties:
        if prop.kind == "always":
            assert prop.name not in report.discoveries, prop.name
    confirmed = report.discoveries["dispatch_confirmed"]
    assert confirmed.path[-1].state.rows[0].state == "confirmed"


def test_a_take_begins_the_next_epoch_from_a_freeing_state_only(url: str) -> None:
    """On the lifecycle store, ``claim.toml``'s acquire out of ``unclaimed`` takes a
    released target (a new epoch, recorded as leaving ``released``), is refused a reserved
    one by its free guard, and takes a reserved one whose lease lapsed once the declared
    ``first`` event has marked it expired."""
    from claimfsm.verify import ManualClock

    clock = ManualClock()
    claim = load_spec(declarations_dir() / "claim.toml")
    store = open_entity_store(claim, url, clock=clock)
    try:
        draft = store.create_draft("t", "hello")
        store.approve_draft(draft.draft_id)
        first = store.take("t", "acquire", draft=draft.draft_id, lease_seconds=10)
        store.act(first, "release")
        second = store.take("t", "acquire", draft=draft.draft_id, lease_seconds=10)
        assert (first.epoch, second.epoch) == (1, 2)
        with pytest.raises(TargetBusy, match="target_free"):
            store.take("t", "acquire", draft=draft.draft_id, lease_seconds=10)
        clock.advance(11)
        third = store.take("t", "acquire", draft=draft.draft_id, lease_seconds=10)
        assert third.epoch == 3
        steps = [
            (e.event, e.source, e.dest)
            for e in store.history("t")
            if not e.refused and not e.event.startswith("draft:")
        ]
        assert steps[-4:] == [
            ("release", "reserved", "released"),
            ("acquire", "released", "reserved"),
            ("lapse", "reserved", "expired"),
            ("acquire", "expired", "reserved"),
        ]
        assert audit_store(store).ok
    finally:
        store.close()


@sqlite_quick_postgresql_slow
def test_the_lifecycle_store_runs_the_claim_as_the_lifecycle_world_models_it(url: str) -> None:
    """The generated stateful test of ``claim.toml`` on the lifecycle store: the model's
    shortest path to every transition, refusal and invariant violation it can reach, then
    random programs, with stale handles, crashes and clock jumps, compared step by step
    with the lifecycle world."""
    claim = load_spec(declarations_dir() / "claim.toml")
    reached = [what for what, _ in guided_paths(claim, workers=2)]
    freeing = [s for s, d in claim.states.items() if d.frees_target and s != "discarded"]
    for state in freeing:  # (nothing enters discarded in one row: a refusal is a record)
        assert f"acquire: {state} -> reserved" in reached, state
    assert "acquire from sending: refused" in reached  # busy: its free guard
    result = verify(
        claim, lambda clock: open_entity_store(claim, url, clock=clock), examples=2, workers=2
    )
    assert result.ok, result
    assert result.guided == len(reached)  # each path played on the store


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (
            lambda text: text.replace("[states.sending]\n", "[states.sending]\npseudo = true\n"),
            "state 'sending' is declared pseudo, and only the initial state",
        ),
        (
            lambda text: text.replace(
                "# --- the owner's operations",
                '[[transitions]]\nevent = "forget"\nsource = "released"\ndest = "unclaimed"\n'
                "guards = []\n\n# --- the owner's operations",
            ),
            "['forget'] lead into it",
        ),
        (
            lambda text: text.replace(
                '[[transitions]]\nevent = "release"\nsource = "reserved"',
                '[[transitions]]\nevent = "release"\nsource = "unclaimed"\ndest = "released"\n'
                'guards = []\n\n[[transitions]]\nevent = "release"\nsource = "reserved"',
            ),
            "['release'] leave it without beginning an epoch",
        ),
    ],
    ids=["not-initial", "entered", "left-by-an-owner"],
)
def test_a_pseudo_state_that_would_mean_something_else_is_refused(
    tmp_path: Path, edit: object, says: str
) -> None:
    text = edit(CLAIM)  # type: ignore[operator]
    assert text != CLAIM
    path = _write(tmp_path, text, "bad")
    with pytest.raises(SpecError, match=str(path.name)) as err:
        load_spec(path)
    assert says in str(err.value)
    result = CliRunner().invoke(main, ["spec", str(path)])
    assert result.exit_code != 0
    assert says in result.output and "Traceback" not in result.output


def test_the_job_lifecycle_is_its_own_view() -> None:
    """A declaration without a pseudo state is read as written by every consumer."""
    spec = load_spec(declarations_dir() / "job.toml")
    assert spec.lifecycle_view() is spec


def test_a_stale_owner_s_event_where_none_leaves_the_state_is_recorded_in_model_and_store(
    url: str,
) -> None:
    """A holder of epoch 1 comes back after epoch 2 was taken and released, and calls
    begin_send, which no transition takes out of ``released``: the store refuses it as a
    stale owner's (its epoch guard, read from begin_send's transitions elsewhere) and
    records it, so the lifecycle world marks the refusal (``stale_owner_discarded``) on the
    same step, as its Promela twin does."""
    from claimfsm.checker._entity_world import (
        Handle,
        Row,
    )
    from claimfsm.errors import StaleClaim
    from claimfsm.verify import ManualClock

    claim = load_spec(declarations_dir() / "claim.toml")
    assert not claim.transitions_for("begin_send", "released")
    store = open_entity_store(claim, url, clock=ManualClock())
    try:
        draft = store.create_draft("t", "hello")
        store.approve_draft(draft.draft_id)
        stale = store.take("t", "acquire", draft=draft.draft_id, lease_seconds=10)
        store.act(stale, "release")
        store.act(store.take("t", "acquire", draft=draft.draft_id, lease_seconds=10), "release")
        with pytest.raises(StaleClaim):
            store.act(stale, "begin_send")
        last = store.history("t")[-1]
        assert (last.event, last.epoch) == ("begin_send", 1)
        assert last.refused in claim.stale_guards("begin_send", "released")  # recorded
    finally:
        store.close()
    model = entity_model(claim, EntityModelConfig(workers=2, epochs=2, edits=False))
    start = next(iter(model.init_states()))
    row = start.rows[0]
    released = Row("released", epoch=2, token=1, linked=(row.drafts, 0, row.drafts[0][1]))
    world = start._replace(rows=(released,), clients=(Handle(0, 1, 1, "reserved"), None))
    action = ("own", 0, "begin_send")
    assert action in list(model.actions(world))
    after = model.next_state(world, action)
    assert after is not None and after.rows == world.rows  # refused: the row is unchanged
    assert "stale_owner_discarded" in after.marks
