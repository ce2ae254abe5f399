"""``[world] wakes``: a crashed worker keeps its handle and may wake up with it, as a
process that saved its handle and restarted does (the claim world's crash).

The job with ``wakes = true`` is checked by both engines, played on both stores, and
refused where the world cannot run it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from claimfsm.checker import Checker, EntityModelConfig, entity_model, spin_check
from claimfsm.cli import main
from claimfsm.errors import InvalidArgument, SpecError
from claimfsm.spec import load_spec, shipped, wake_events, wrong_designs
from claimfsm.store import open_entity_store
from claimfsm.verify import verify
from claimfsm.verify._stateful import guided_paths, play

from .conftest import needs_spin

SPECS = Path(__file__).parent.parent / "specs"


def with_world(tmp_path: Path, source: str, lines: str, name: str = "waking.toml") -> Path:
    """``source`` (a file in specs/) with ``lines`` added to its ``[world]``."""
    text = (SPECS / source).read_text()
    assert "\n[world]\n" in text
    path = tmp_path / name
    path.write_text(text.replace("\n[world]\n", f"\n[world]\n{lines}\n"))
    return path


@pytest.fixture
def waking(tmp_path: Path) -> Path:
    return with_world(tmp_path, "job.toml", "wakes = true")


def test_a_woken_worker_begins_its_work_again() -> None:
    """The events a woken worker takes are those that leave the state its take led into
    for another: the claim's begin_send and release (the claim world's wake-up, which it
    has always had), the job's start and release; never a keep-alive (renew)."""
    assert wake_events(shipped()["claim"]) == ("begin_send", "release")
    assert wake_events(shipped()["job"]) == ("start", "release")


def test_wakes_are_off_unless_declared(waking: Path) -> None:
    """Without ``wakes`` a crash forgets the handle, and no world has a wake-up; with it,
    a crashed worker idles on its saved handle and may wake up with it, once."""
    job = shipped()["job"]
    model = entity_model(job)
    path = [("take", 0, 0, "lease"), ("own", 0, "start"), ("crash", 0)]
    world = next(iter(model.init_states()))
    for action in path:
        world = model.next_state(world, action)
    assert world.clients[0] is None
    assert not [a for a in model.actions(world) if a[0] == "wake"]

    model = entity_model(load_spec(waking))
    world = next(iter(model.init_states()))
    for action in path:
        world = model.next_state(world, action)
    assert world.clients[0] is not None and world.clients[0].saved == (0, 1, 1)
    assert "worker 0 idle, saved handle on job 0 e1" in model.show_state(world)
    wakes = [a for a in model.actions(world) if a[0] == "wake"]
    assert wakes == [("wake", 0, "start"), ("wake", 0, "release")]
    # it takes a new job while it keeps the saved handle, and does not crash again
    taken = model.next_state(world, ("take", 0, 0, "lease"))
    assert taken is None  # the job is running under the saved handle's epoch
    woken = model.next_state(world, ("wake", 0, "start"))
    assert woken is not None and woken.clients[0] is None  # refused: running has no start
    assert woken.rows == world.rows


def test_a_stale_wake_up_changes_nothing(waking: Path) -> None:
    """A worker that crashed holding a lease wakes up after its lease lapsed and another
    worker leased the job: its start is refused by the owner guard, and the counterexample
    text says so."""
    model = entity_model(load_spec(waking))
    path = [
        ("take", 0, 0, "lease"),
        ("crash", 0),
        ("clock", 0),
        ("env", 0, "lapse"),
        ("take", 1, 0, "lease"),
        ("wake", 0, "start"),
    ]
    world = next(iter(model.init_states()))
    for action in path[:-1]:
        world = model.next_state(world, action)
    after = model.next_state(world, path[-1])
    assert after is not None and not after.stale_changed
    assert after.rows == world.rows and after.clients[0] is None
    assert model.explain is not None
    said = model.explain(world, path[-1], after)
    assert said[-1][0] == (
        "worker 0 wakes up: start with its saved handle refused (owner_matches false):"
        " drops its handle, stops its work"
    )


def test_the_job_holds_with_restarts_and_its_wrong_designs_still_fail(
    waking: Path, tmp_path: Path
) -> None:
    """Restarts on a saved handle add states (the saved handle, and a worker holding two)
    and the job's invariants still hold; each wrong design of the job is still caught."""
    without = Checker(entity_model(shipped()["job"])).symmetry(False).run()
    found = Checker(entity_model(load_spec(waking))).symmetry(False).run()
    assert found.complete and found.verdict == "ok"
    assert found.unique > without.unique
    for wrong in sorted((SPECS / "wrong" / "job").glob("*.toml")):
        path = tmp_path / wrong.name  # the same variant, of the job that restarts
        text = wrong.read_text()
        assert 'base = "../../job.toml"' in text
        path.write_text(text.replace('base = "../../job.toml"', f'base = "{waking.name}"'))
        assert Checker(entity_model(load_spec(path))).run().verdict == "violated", wrong.name


@pytest.mark.parametrize("workers", [2, 3])
def test_spin_reaches_the_same_states_with_restarts(waking: Path, workers: int) -> None:
    """The generated Promela keeps each worker's saved handle field for field: SPIN
    reaches the built-in engine's states, state for state."""
    needs_spin()
    spec = load_spec(waking)
    config = EntityModelConfig(workers=workers)
    theirs, _ = spin_check(spec, config)
    ours = Checker(entity_model(spec, config)).symmetry(False).run()
    assert (theirs.unique, theirs.depth, theirs.verdict) == (ours.unique, ours.depth, "ok")


def test_the_world_says_it_restarts(waking: Path) -> None:
    result = CliRunner().invoke(main, ["check", str(waking)])
    assert result.exit_code == 0, result.output
    assert "with crashes, restarts on a saved handle and stale wake-ups" in result.output
    result = CliRunner().invoke(main, ["check", str(waking), "--no-crashes"])
    assert result.exit_code == 0 and "without crashes" in result.output


def test_the_store_meets_a_woken_worker_as_the_model_does(waking: Path, url: str) -> None:
    """Every guided path with a wake-up, then random programs: each store refuses the
    woken worker's stale or out-of-place operation as the model does (the verify keeps
    the crashed worker's handle and hands it back when it wakes)."""
    spec = load_spec(waking)

    def opener(clock: object) -> object:
        return open_entity_store(spec, url, clock=clock)

    woken = [(what, acts) for what, acts in guided_paths(spec) if any(a[0] == "wake" for a in acts)]
    assert {what for what, _ in woken} >= {"start from running: refused"}
    for what, actions in woken:
        program, failure = play(spec, opener, actions)  # type: ignore[arg-type]
        assert failure == "", (what, failure)
        assert any("wakes up" in line for line in program)
    result = verify(spec, opener, examples=15, steps=25, guided_first=False)  # type: ignore[arg-type]
    assert result.ok, (result.failure, result.program)


def test_wakes_it_cannot_run_are_refused_by_name(tmp_path: Path) -> None:
    """``wakes`` without crashes, or on a lifecycle where nothing leaves the state a take
    leads into: one clear error naming the file."""
    path = with_world(tmp_path, "job.toml", "wakes = true").read_text()
    no_crash = tmp_path / "no_crash.toml"
    no_crash.write_text(path.replace("crashes = true", "crashes = false"))
    with pytest.raises(SpecError, match="wakes = true needs crashes = true"):
        entity_model(load_spec(no_crash))
    result = CliRunner().invoke(main, ["check", str(no_crash)])
    assert result.exit_code != 0 and "no_crash.toml" in result.output
    assert "needs crashes = true" in result.output
    with pytest.raises(InvalidArgument, match="wakes must be true or false"):
        EntityModelConfig(wakes=1).resolved(shipped()["job"])  # type: ignore[arg-type]
    lock = tmp_path / "lock.toml"
    lock.write_text(LOCK)
    result = CliRunner().invoke(main, ["check", str(lock)])
    assert result.exit_code != 0 and "lock.toml" in result.output, result.output
    assert "a woken client would have nothing to begin again" in result.output
    # the claim world refuses it alike; --no-crashes on the shipped claim is no such case
    text = (SPECS / "claim.toml").read_text()
    assert "\ncrashes = true\n" in text and "\nwakes = true\n" in text
    stalled = tmp_path / "claim_no_crash.toml"
    stalled.write_text(text.replace("\ncrashes = true\n", "\ncrashes = false\n"))
    result = CliRunner().invoke(main, ["check", str(stalled), "--workers", "2"])
    assert result.exit_code != 0 and "claim_no_crash.toml" in result.output, result.output
    assert "needs crashes = true" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(main, ["check", "claim", "--workers", "2", "--no-crashes"])
    assert result.exit_code == 0, result.output


#: A lock whose holder does nothing but hold it: nothing for a woken holder to begin.
LOCK = """
name = "lock"
description = "a lock held until its lease lapses"
initial = "free"

[states.free]
meaning = "nobody holds it"

[states.held]
meaning = "somebody holds it"
lease = true

[guards.nobody]
kind = "free"
meaning = "nobody holds it"

[guards.lapsed]
kind = "lapsed"
meaning = "the lease has lapsed"

[events.take]
sets = ["lease"]

[[transitions]]
event = "take"
source = "free"
dest = "held"
guards = ["nobody"]

[[transitions]]
event = "lapse"
source = "held"
dest = "free"
guards = ["lapsed"]

[world]
wakes = true
"""


def test_the_claim_declares_its_wake_ups(tmp_path: Path) -> None:
    """The claim world's crash reads the same option: claim.toml declares ``wakes = true``
    (undeclared, the claim world keeps its old default, true); with ``wakes = false`` a
    crash forgets the handle, in the built-in model and in the claim's Promela alike."""
    from claimfsm.checker import ClaimModelConfig, claim_model

    claim = shipped()["claim"]
    assert "wakes" in claim.world_declared and ClaimModelConfig.declared(claim).wakes
    text = (SPECS / "claim.toml").read_text()
    assert "\nwakes = true\n" in text
    (tmp_path / "unsaid.toml").write_text(text.replace("\nwakes = true\n", "\n"))
    assert ClaimModelConfig.declared(load_spec(tmp_path / "unsaid.toml")).wakes
    (tmp_path / "forgets.toml").write_text(text.replace("\nwakes = true\n", "\nwakes = false\n"))
    forgets = load_spec(tmp_path / "forgets.toml")
    config = ClaimModelConfig.declared(forgets, workers=2)
    assert not config.wakes
    model = claim_model(forgets, config)
    found = Checker(model).symmetry(False).run()
    full = Checker(claim_model(claim, ClaimModelConfig(workers=2))).symmetry(False).run()
    assert found.verdict == "ok" and found.unique < full.unique == 144_461
    assert model.show_action(("crash", 0)).endswith("crashes (its handle is gone)")
    world = next(iter(model.init_states()))
    assert all(a[0] != "wake" for w in [world] for a in model.actions(w))
    # and the check's bounds say so: crashes, no stale wake-ups
    result = CliRunner().invoke(main, ["check", str(tmp_path / "forgets.toml"), "--workers", "2"])
    assert result.exit_code == 0, result.output
    assert "fencing remote, with crashes\n" in result.output, result.output
    result = CliRunner().invoke(main, ["check", "claim", "--workers", "2"])
    assert "with crashes and stale wake-ups\n" in result.output, result.output
    # a woken worker takes the owner events out of reserved, read as a lifecycle's are
    # (wake_events), whatever their guards: release_by_target's release has lost its owner
    # guard, but claim.toml declares it the holder's (by), and a stale worker still calls
    # it (that is the design's flaw, which verify shows on the store)
    for spec in (claim, wrong_designs()["release_by_target"]):
        assert [a for a in model_actions_after_crash(spec) if a[0] == "wake"] == [
            ("wake", 0, "begin_send"),
            ("wake", 0, "release"),
        ]


def model_actions_after_crash(spec: Any) -> list[Any]:
    """The claim model's actions once worker 0 acquired and crashed (two workers)."""
    from claimfsm.checker import ClaimModelConfig, claim_model

    model = claim_model(spec, ClaimModelConfig(workers=2))
    world = next(iter(model.init_states()))
    acquire = next(a for a in model.actions(world) if a[0] == "acquire" and a[1] == 0)
    world = model.next_state(world, acquire)
    world = model.next_state(world, ("crash", 0))
    return list(model.actions(world))


def test_spin_forgets_as_the_claim_model_does(tmp_path: Path) -> None:
    needs_spin()
    from claimfsm.checker import ClaimModelConfig, claim_model

    text = (SPECS / "claim.toml").read_text()
    (tmp_path / "forgets.toml").write_text(text.replace("\nwakes = true\n", "\nwakes = false\n"))
    spec = load_spec(tmp_path / "forgets.toml")
    config = ClaimModelConfig.declared(spec, workers=2)
    theirs, _ = spin_check(spec, config)
    ours = Checker(claim_model(spec, config)).symmetry(False).run()
    assert (theirs.unique, theirs.depth, theirs.verdict) == (ours.unique, ours.depth, "ok")


def check_json(*args: str) -> dict[str, Any]:
    import json

    result = CliRunner().invoke(main, ["check", *args, "--no-symmetry", "--json"])
    assert result.exit_code == 0, result.output
    # a long search also prints its progress ("... N unique states"), to stderr
    printed = [line for line in result.output.splitlines() if not line.startswith("... ")]
    found: dict[str, Any] = json.loads("\n".join(printed))
    return found


def test_no_wakes_checks_the_world_wakes_false_declares(tmp_path: Path, waking: Path) -> None:
    """``check --no-wakes`` is ``[world] wakes = false`` for one run, in both worlds: the
    same states as the declaration that says it, fewer than with wake-ups, and the JSON
    bounds say which world was searched."""
    text = (SPECS / "claim.toml").read_text()
    (tmp_path / "forgets.toml").write_text(text.replace("\nwakes = true\n", "\nwakes = false\n"))
    flag = check_json("claim", "--workers", "2", "--no-wakes")
    declared = check_json(str(tmp_path / "forgets.toml"), "--workers", "2")
    full = check_json("claim", "--workers", "2")
    assert flag["unique"] == declared["unique"] < full["unique"] == 144_461
    assert flag["bounds"]["wakes"] is declared["bounds"]["wakes"] is False
    assert full["bounds"]["wakes"] is True and full["bounds"]["crashes"] is True
    # without crashes there is nothing to wake up from, whatever the declaration says
    assert check_json("claim", "--workers", "2", "--no-crashes")["bounds"]["wakes"] is False
    # the job with restarts: the flag gives the job as shipped (wakes undeclared: false)
    flag = check_json(str(waking), "--no-wakes")
    shipped_job = check_json("job")
    restarts = check_json(str(waking))
    assert flag["unique"] == shipped_job["unique"] < restarts["unique"]
    assert flag["bounds"]["wakes"] is shipped_job["bounds"]["wakes"] is False
    assert restarts["bounds"]["wakes"] is True
