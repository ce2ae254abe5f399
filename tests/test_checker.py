"""The model checker: exact state counts, the correct design proved, every wrong design caught,
and the checker's table agreeing with the runtime machine on every guard outcome."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from claimfsm.checker import (
    Checker,
    ClaimModelConfig,
    Model,
    Property,
    World,
    claim_model,
    compile_table,
    fire,
    path_steps,
    replay,
)
from claimfsm.cli import main
from claimfsm.errors import InvalidArgument
from claimfsm.machine import ClaimMachine, Facts
from claimfsm.spec import claim_spec, designs

SPEC = claim_spec()


# -- the engine on a toy model ------------------------------------------------------------
def counter(limit: int, *, stop_at: int | None = None) -> Model[int, str]:
    return Model(
        init_states=lambda: [0],
        actions=lambda n: ["inc", "double"],
        next_state=lambda n, a: (n + 1 if a == "inc" else n * 2) if n < limit else None,
        properties=[
            Property("small", "always", lambda n: n < 7, "stays below 7"),
            Property("reaches_4", "sometimes", lambda n: n == 4, "reaches 4"),
        ],
        may_stop=lambda n: stop_at is None or n >= stop_at,
    )


def test_bfs_finds_the_shortest_counterexample_and_it_replays() -> None:
    report = Checker(counter(20)).run()
    d = report.discoveries["small"]
    assert [s.state for s in d.path] == [0, 1, 2, 4, 8]  # 4 steps: nothing shorter reaches >= 7
    assert [s.state for s in replay(counter(20), d.token)] == [0, 1, 2, 4, 8]
    assert report.verdict == "violated"
    with pytest.raises(InvalidArgument):
        replay(counter(20), "0.9")


def test_deadlocks_and_limits_are_reported() -> None:
    report = Checker(counter(3, stop_at=99)).exhaustive().run()
    assert report.deadlock is not None and report.deadlock[-1].state == 3
    limited = Checker(counter(10**6)).exhaustive().max_depth(5).run()
    assert not limited.complete and limited.stopped_by == "depth"
    assert limited.verdict in ("violated", "incomplete")


def test_sometimes_never_met_in_a_complete_search_is_a_violation() -> None:
    model = Model(
        init_states=lambda: [0],
        actions=lambda n: ["inc"],
        next_state=lambda n, a: n + 1 if n < 3 else None,
        properties=[Property("reaches_9", "sometimes", lambda n: n == 9, "reaches 9")],
        may_stop=lambda n: True,
    )
    report = Checker(model).run()
    assert report.complete and report.outcome(model.properties[0]) == "never happens"
    assert report.verdict == "violated"


# -- the claim model --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("config", "symmetry", "unique", "generated", "depth"),
    [
        (ClaimModelConfig(workers=2, drafts=1, epochs=2), False, 2_313, 10_776, 16),
        (ClaimModelConfig(workers=2, drafts=1, epochs=2), True, 1_273, 5_513, 16),
        (ClaimModelConfig(workers=2, drafts=2), False, 144_461, 831_435, 26),
        (ClaimModelConfig(workers=2, drafts=2), True, 74_385, 419_683, 26),
        (ClaimModelConfig(workers=3, drafts=2), True, 101_269, 682_207, 26),
    ],
    ids=["k2d1e2", "k2d1e2-sym", "k2d2", "k2d2-sym", "k3d2-sym"],
)
def test_correct_design_holds_with_pinned_state_counts(
    config: ClaimModelConfig, symmetry: bool, unique: int, generated: int, depth: int
) -> None:
    report = Checker(claim_model(SPEC, config)).symmetry(symmetry).exhaustive().run()
    assert report.verdict == "ok", report.text()
    assert (report.unique, report.states, report.depth) == (unique, generated, depth)


@pytest.mark.slow
def test_correct_design_holds_for_three_workers_without_symmetry() -> None:
    report = Checker(claim_model(SPEC, ClaimModelConfig(workers=3))).exhaustive().run()
    assert report.verdict == "ok" and report.unique == 493_405


@pytest.mark.slow
def test_correct_design_holds_for_two_workers_on_two_targets() -> None:
    config = ClaimModelConfig(workers=2, targets=2, drafts=1, epochs=2)
    report = Checker(claim_model(SPEC, config)).symmetry().exhaustive().run()
    assert report.verdict == "ok", report.text()
    assert report.unique == 1_423_377


WRONG = {
    # design: (the property it violates, steps in the shortest counterexample)
    "fresh_key_retry": ("effect_at_most_once", 8),
    "intent_after_send": ("no_overlapping_sends", 5),
    "lapse_reclaims_sending": ("no_overlapping_sends", 7),
    "partial_unique_index": ("parallel_drafts", None),  # a complete search never meets it
    "release_by_target": ("stale_operations_change_nothing", 4),
    "update_returning_claim": ("no_overlapping_sends", 6),
    # liveness only: nothing leaves uncertain when readback finds no effect
    "readback_present_only": ("uncertain_is_reconciled", "liveness"),
}


def test_every_known_wrong_design_has_a_variant() -> None:
    assert set(designs()) == set(WRONG)
    for spec in designs().values():
        assert spec.base and spec.description


@pytest.mark.parametrize("name", sorted(WRONG))
def test_wrong_design_is_caught_with_a_shortest_counterexample(name: str) -> None:
    prop, steps = WRONG[name]
    model = claim_model(designs()[name], ClaimModelConfig(workers=2))
    report = Checker(model).symmetry().stop_on_violation().run()
    assert report.verdict == "violated"
    if steps == "liveness":  # every safety property holds; it never reconciles an absence
        assert [p.name for p in report.violations] == ["reconciled_absent", prop]
        d = report.discoveries[prop]
        assert replay(model, d.token) == d.path
        assert d.path[-1].state.targets[0].state == "uncertain"
        return
    assert [p.name for p in report.violations] == [prop]
    if steps is None:
        assert report.complete and prop not in report.discoveries
        return
    d = report.discoveries[prop]
    assert len(d.path) - 1 == steps
    assert replay(model, d.token) == d.path
    violated = next(p for p in model.properties if p.name == prop)
    assert not violated.holds(d.path[-1].state)  # the last state is the violation
    assert all(violated.holds(s.state) for s in d.path[:-1])  # and no earlier one


def test_a_dedup_only_remote_can_overlap_a_late_request_with_the_next_epoch() -> None:
    # A finding, kept as a regression: without fencing, a same-key retry leaves uncertain
    # while the original request may still be in flight, so the next epoch's send can
    # overlap it. (Whether the effect stays at most once: the next test.)
    model = claim_model(SPEC, ClaimModelConfig(workers=2, remote="dedup"))
    report = Checker(model).symmetry().stop_on_violation().run()
    assert [p.name for p in report.violations] == ["no_overlapping_sends"]


def test_against_a_dedup_remote_each_effect_happens_at_most_once_with_two_drafts() -> None:
    """Each worker sends its own claim's key: a stalled worker's late request carries its
    own epoch's draft, which the remote has applied already, so it is no duplicate (the
    model once sent the target's current key and reported one that could not happen)."""
    model = claim_model(SPEC, ClaimModelConfig(workers=2, drafts=2, remote="dedup"))
    report = Checker(model).symmetry().stop_on_violation(False).run()
    assert report.complete
    assert [p.name for p in report.violations] == ["no_overlapping_sends"]
    effect = next(p for p in model.properties if p.name == "effect_at_most_once")
    assert report.outcome(effect) == "holds"


def test_against_a_dedup_remote_a_fresh_key_retry_is_still_a_duplicate() -> None:
    model = claim_model(designs()["fresh_key_retry"], ClaimModelConfig(remote="dedup"))
    report = Checker(model).symmetry().stop_on_violation().run()
    assert "effect_at_most_once" in [p.name for p in report.violations]
    d = report.discoveries["effect_at_most_once"]
    landed = d.path[-1].state.remote[0].landed
    assert len({r.draft for r in landed}) < len(landed)  # one draft, two keys applied
    assert len({r.nonce for r in landed}) == len(landed)


def _stale_senders_are_fenced(w: World) -> bool:
    """Every worker that may still send from an epoch no longer current is behind the
    fence: its send is rejected whatever key it carries."""
    return all(
        wk.epoch <= w.remote[wk.target].fence
        for wk in w.workers
        if wk.phase in ("S", "P") or (wk.phase == "R" and wk.key)
        if wk.epoch != w.targets[wk.target].epoch
    )


def test_against_a_fencing_remote_the_correct_design_never_lets_a_stale_send_land() -> None:
    """Why the fencing model may build a send from the target's current claim (and keep
    the pinned counts): in the correct design no stale worker's send gets past the fence,
    so the key it carries never reaches the remote."""
    fenced = Property("stale_senders_are_fenced", "always", _stale_senders_are_fenced, "")

    def checked(model: Model[World, Any]) -> Model[World, Any]:
        assert model.processes is not None  # the property reads the workers, not shared alone
        processes = dataclasses.replace(model.processes, shared_properties=False)
        return dataclasses.replace(model, properties=[fenced], processes=processes)

    model = claim_model(SPEC, ClaimModelConfig(workers=2))
    report = Checker(checked(model)).exhaustive().run()
    assert report.complete and report.unique == 144_461
    assert report.outcome(fenced) == "holds"
    # the property can fail: a design whose lapse reclaims sending lets one through
    wrong = claim_model(designs()["lapse_reclaims_sending"], ClaimModelConfig(workers=2))
    report = Checker(checked(wrong)).run()
    assert report.outcome(fenced) == "violated"


@pytest.mark.parametrize("name", ["claim", *sorted(WRONG)])
def test_against_a_fencing_remote_own_keys_change_no_verdict(name: str) -> None:
    """Against a fencing remote the worker's own key is left out of the model (it would
    only split states): carrying it gives the correct design every property's outcome and
    every wrong design the same verdict, with shortest counterexamples as long."""
    spec = SPEC if name == "claim" else designs()[name]
    runs = []
    for own_keys in (False, True):
        model = claim_model(spec, ClaimModelConfig(workers=2, own_keys=own_keys))
        report = Checker(model).symmetry().stop_on_violation().run()
        runs.append(
            (
                [report.outcome(p) for p in model.properties],
                {n: len(d.path) for n, d in report.discoveries.items()},
            )
        )
    assert runs[0] == runs[1]


def test_a_plain_remote_can_leave_a_target_uncertain_forever() -> None:
    model = claim_model(SPEC, ClaimModelConfig(workers=2, remote="plain"))
    report = Checker(model).run()
    assert report.violations == [] and report.deadlock is not None
    assert "uncertain" in model.show_state(report.deadlock[-1].state)


# -- the packed search ------------------------------------------------------------------------
@pytest.mark.parametrize("symmetry", [False, True], ids=["nosym", "sym"])
@pytest.mark.parametrize(
    "config",
    [
        ClaimModelConfig(workers=3, drafts=1, epochs=2),
        ClaimModelConfig(workers=2, targets=2, drafts=1, epochs=1),
        ClaimModelConfig(workers=2, drafts=1, epochs=2, remote="dedup"),
    ],
    ids=["k3d1e2", "k2t2e1", "k2-dedup"],
)
def test_the_packed_search_explores_the_models_own_space(
    config: ClaimModelConfig, symmetry: bool
) -> None:
    """Same states, transitions, depth and outcomes as searching the model's own worlds; its
    paths are the model's worlds and replay on it."""
    model = claim_model(SPEC, config)
    assert model.processes is not None
    packed = Checker(model).symmetry(symmetry).exhaustive().run()
    plain = Checker(model).symmetry(symmetry).packed(False).exhaustive().run()
    assert (packed.unique, packed.states, packed.depth) == (plain.unique, plain.states, plain.depth)
    assert [packed.outcome(p) for p in model.properties] == [
        plain.outcome(p) for p in model.properties
    ]
    assert set(packed.discoveries) == set(plain.discoveries)
    for name, d in packed.discoveries.items():
        assert len(d.path) == len(plain.discoveries[name].path)
        assert replay(model, d.token) == d.path


def test_a_model_that_breaks_its_processes_promise_is_an_error_not_a_count() -> None:
    """An action of one process that changes another's part would make the packed search's
    reuse of steps wrong; it is caught when the step is first computed."""
    from claimfsm.checker import Processes

    def step(s: tuple[int, int], a: tuple[str, int]) -> tuple[int, int] | None:
        if a[0] == "bump" and s[a[1]] < 2:
            return (s[0] + 1, s[1] + 1)  # process a[1]'s step changes both parts
        return None

    model: Model[tuple[int, int], tuple[str, int]] = Model(
        init_states=lambda: [(0, 0)],
        actions=lambda s: [("bump", 0), ("bump", 1)],
        next_state=step,
        properties=[],
        may_stop=lambda s: True,
        processes=Processes(
            split=lambda s: ((), s),
            join=lambda shared, parts: (parts[0], parts[1]),
            local_actions=lambda shared, part, i: [("bump", i)],
            shared_actions=lambda shared: [],
        ),
    )
    assert Checker(model).packed(False).exhaustive().run().unique == 3
    with pytest.raises(AssertionError, match="changed process 1's"):
        Checker(model).exhaustive().run()


# -- the array search ---------------------------------------------------------------------------
def _everything(report: Any) -> tuple[Any, ...]:
    """All a report says: counts, how it ended, each discovery's path and its loop."""
    return (
        report.unique,
        report.states,
        report.depth,
        report.complete,
        report.stopped_by,
        {name: (d.token, d.loop_from, d.path) for name, d in report.discoveries.items()},
        report.deadlock,
    )


ARRAY_CASES: dict[str, tuple[str | None, ClaimModelConfig, Callable[[Checker[Any, Any]], Any]]] = {
    "k3d1e2": (None, ClaimModelConfig(workers=3, drafts=1, epochs=2), lambda c: c),
    "k3d1e2-sym": (None, ClaimModelConfig(workers=3, drafts=1, epochs=2), Checker.symmetry),
    "k2t2e1": (None, ClaimModelConfig(workers=2, targets=2, drafts=1, epochs=1), lambda c: c),
    "plain-deadlock": (None, ClaimModelConfig(workers=2, drafts=1, remote="plain"), lambda c: c),
    "state-limit": (None, ClaimModelConfig(workers=3), lambda c: c.max_states(7_777)),
    "depth-limit": (None, ClaimModelConfig(workers=3), lambda c: c.symmetry().max_depth(9)),
    "first-counterexample": (
        "release_by_target",
        ClaimModelConfig(workers=3),
        lambda c: c.symmetry().stop_on_violation(),
    ),
    # two properties violated, the search run to its end (every property is never found
    # here, so it does not stop early): the same discoveries on the way
    "violations-complete": (
        "lapse_reclaims_sending",
        ClaimModelConfig(workers=2, epochs=2),
        lambda c: c,
    ),
    "liveness": ("readback_present_only", ClaimModelConfig(workers=2, drafts=1), lambda c: c),
}


@pytest.mark.parametrize("case", sorted(ARRAY_CASES))
def test_the_array_search_reports_what_the_packed_search_reports(case: str) -> None:
    """A level at a time in arrays, the search finds the same states in the same order:
    the same counts, stops at the same place for the same reason, and gives the same paths
    (so the same replay tokens) and the same deadlock and liveness loops."""
    design, config, configure = ARRAY_CASES[case]
    model = claim_model(SPEC if design is None else designs()[design], config)
    arrays = configure(Checker(model)).run()
    one_at_a_time = configure(Checker(model).arrays(False)).run()
    assert _everything(arrays) == _everything(one_at_a_time)
    if case == "plain-deadlock":
        assert arrays.deadlock is not None
    if case == "liveness":
        assert "uncertain_is_reconciled" in arrays.discoveries
    if case == "first-counterexample":
        assert arrays.stopped_by == "first counterexample"
    for d in arrays.discoveries.values():
        assert replay(model, d.token) == d.path


def test_keys_too_wide_for_the_array_search_fall_back_to_the_packed_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import claimfsm.checker._arrays as arrays_module

    model = claim_model(SPEC, ClaimModelConfig(workers=2, drafts=1, epochs=2))
    wide = Checker(model).symmetry().exhaustive().run()
    calls = []
    real = arrays_module.array_search

    def spy(*args: Any) -> Any:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(arrays_module, "array_search", spy)
    monkeypatch.setattr(arrays_module, "KEY_BITS", 8)  # no key fits
    narrow = Checker(model).symmetry().exhaustive().run()
    assert calls and _everything(narrow) == _everything(wide)


def test_processes_that_are_not_interchangeable_are_an_error_not_a_count() -> None:
    """The array search computes a part's steps once for every process; a model whose
    process 1 steps differently from process 0 is caught on the first parts computed."""
    from claimfsm.checker import Processes

    def local(shared: int, part: int, i: int) -> list[tuple[str, int]]:
        return [("bump", i)] if part < 2 else []

    def step(s: tuple[int, int, int], a: tuple[str, int]) -> tuple[int, int, int] | None:
        i = a[1]
        if s[1 + i] >= 2:
            return None
        parts = list(s)
        parts[1 + i] += 1 + i  # process 1 jumps two at a time
        return (parts[0], parts[1], parts[2])

    model: Model[tuple[int, int, int], tuple[str, int]] = Model(
        init_states=lambda: [(0, 0, 0)],
        actions=lambda s: [a for i in (0, 1) for a in local(s[0], s[1 + i], i)],
        next_state=step,
        properties=[Property("fine", "always", lambda s: True, "anything goes")],
        may_stop=lambda s: True,
        processes=Processes(
            split=lambda s: (s[0], (s[1], s[2])),
            join=lambda shared, parts: (shared, parts[0], parts[1]),
            local_actions=local,
            shared_actions=lambda shared: [],
            shared_properties=True,
        ),
    )
    assert Checker(model).arrays(False).exhaustive().run().unique == 6
    with pytest.raises(AssertionError, match="interchangeable"):
        Checker(model).exhaustive().run()


# -- one declaration: the checker's table and the runtime machine agree ---------------------------
class _Stub:
    def __init__(self, truth: dict[str, bool]) -> None:
        self.truth = truth


def test_checker_table_agrees_with_the_transitions_machine_on_every_guard_outcome() -> None:
    machine = ClaimMachine(SPEC)
    table = compile_table(SPEC)
    truth: dict[str, bool] = {}
    for g in machine.guards:
        machine.guards[g] = lambda row, facts, g=g: truth[g]
    checked = 0
    for event in SPEC.events:
        guards = sorted({g for t in SPEC.transitions if t.event == event for g in t.guards})
        for state in SPEC.states:
            for values in itertools.product([False, True], repeat=len(guards)):
                truth.clear()
                truth.update(dict(zip(guards, values, strict=True)))
                true = frozenset(g for g, v in truth.items() if v)
                expected = fire(table, event, state, true)
                try:
                    got: str | None = machine.fire(event, state, None, Facts(now=0.0))
                except Exception:
                    got = None
                assert got == expected, (event, state, truth)
                checked += 1
    assert checked == 405  # every (event, state, guard outcome) the declaration can meet


# -- the command line ----------------------------------------------------------------------------
def test_check_cli_exit_codes_and_json() -> None:
    runner = CliRunner()
    ok = runner.invoke(main, ["check", "--workers", "2", "--json"])
    assert ok.exit_code == 0
    data = json.loads(ok.stdout)
    assert data["verdict"] == "ok" and data["unique"] == 74_385 and data["violations"] == []
    bad = runner.invoke(main, ["check", "--design", "lapse_reclaims_sending", "--workers", "2"])
    assert bad.exit_code == 1
    assert "counterexample for no_overlapping_sends" in bad.stdout and "replay token" in bad.stdout
    listed = runner.invoke(main, ["check", "--list"]).stdout.splitlines()
    # the claim's wrong designs, then another lifecycle's
    assert [line.split()[0] for line in listed] == [
        *sorted(WRONG),
        "job-orphan_waits_for_readback",
        "job-requeue_on_readback",
        "job-requeue_without_evidence",
    ]
    stopped = runner.invoke(main, ["check", "--workers", "2", "--max-states", "100"])
    assert stopped.exit_code == 3
    assert runner.invoke(main, ["check", "--design", "nope"]).exit_code == 2


def test_every_state_change_is_a_numbered_step_of_its_own() -> None:
    """lapse_reclaims_sending's fault (sending -> expired, done inside the next acquire)
    is a step of its own, and no two steps share a number, in text, JSON and drawings."""
    result = CliRunner().invoke(
        main, ["check", "--design", "lapse_reclaims_sending", "--workers", "2"]
    )
    numbers = [int(m) for m in re.findall(r"^  (\d+)\. ", result.output, re.M)]
    assert numbers == list(range(len(numbers))) and len(numbers) == 9
    assert re.search(r"^  5\. .*\[lapse: sending → expired\]$", result.output, re.M)
    data = json.loads(
        CliRunner()
        .invoke(main, ["check", "--design", "lapse_reclaims_sending", "--workers", "2", "--json"])
        .output
    )
    steps = data["violations"][0]["steps"]
    assert [s["number"] for s in steps] == list(range(9))
    spec = designs()["lapse_reclaims_sending"]
    report = Checker(claim_model(spec, ClaimModelConfig(workers=2))).stop_on_violation().run()
    drawn = path_steps(spec, report.model, report.discoveries["no_overlapping_sends"].path)
    assert [s.number for s in drawn] == list(range(1, 9))


def test_a_replay_token_replays_on_the_model_and_on_a_real_store() -> None:
    runner = CliRunner()
    wrong = ["check", "--design", "lapse_reclaims_sending", "--workers", "2"]
    token = re.search(r"replay token: (\S+)", runner.invoke(main, wrong).output)
    assert token
    played = runner.invoke(main, [*wrong, "--replay-token", token.group(1)])
    assert played.exit_code == 1
    assert "violates no_overlapping_sends after: worker 1 sends the request" in played.output
    assert "departed from the model: TargetBusy" in played.output  # the real store refuses
    # An example of the correct design: the real store follows it step for step.
    data = json.loads(runner.invoke(main, ["check", "--workers", "2", "--json"]).stdout)
    example = data["examples"]["reconciled_absent"]["token"]
    ok = runner.invoke(main, ["check", "--workers", "2", "--replay-token", example])
    assert ok.exit_code == 0, ok.output
    assert "the real store followed all" in ok.output
    bad = runner.invoke(main, ["check", "--workers", "2", "--replay-token", "0.x"])
    assert bad.exit_code == 1 and "is not a replay token" in bad.output


def test_where_the_send_may_start_is_declared_not_a_model_option(tmp_path: Path) -> None:
    """intent_after_send differs from claim.toml in its events' tables alone: the send may
    start at acquire instead of begin_send. The older [model] flag is refused with that
    advice, and the claim model refuses a send that starts anywhere else."""
    from claimfsm.errors import SpecError
    from claimfsm.spec import declarations_dir, differences, load_spec

    wrong = designs()["intent_after_send"]
    assert wrong.work("acquire") == "starts" and wrong.work("begin_send") is None
    assert claim_spec().work("begin_send") == "starts"
    found = differences(claim_spec(), wrong)
    assert found.drafts == () and not found.changed
    assert found.lines() == [
        "event acquire: work none → starts",
        "event acquire: durable false → true",  # work may begin as it commits
        "event begin_send: work starts → none",
    ]
    flag = tmp_path / "flag.toml"
    base = declarations_dir() / "claim.toml"
    flag.write_text(
        f'base = "{base}"\ndescription = "the old spelling"\n[model]\nsend_before_intent = true\n'
    )
    with pytest.raises(SpecError, match=r'declared now: send_before_intent is work = "starts"'):
        load_spec(flag)
    elsewhere = tmp_path / "elsewhere.toml"
    elsewhere.write_text(
        f'base = "{base}"\ndescription = "send on renew"\n'
        '[events.renew]\nsets = ["lease"]\nwork = "starts"\ndurable = true\n'
    )
    with pytest.raises(SpecError, match="lets the send start after begin_send or after acquire"):
        claim_model(load_spec(elsewhere))
    unmarked = tmp_path / "unmarked.toml"
    # without the mark, the exclusive_work invariant has no work to judge (the loader
    # refuses it), so the copy leaves that invariant out too
    text = base.read_text().replace('work = "starts"  #', "#")
    text = text.replace('kind = "exclusive_work"', 'kind = "reachable"\nstates = ["confirmed"]')
    unmarked.write_text(text)
    small = ClaimModelConfig(workers=2, drafts=1, epochs=2)
    counts = [Checker(claim_model(load_spec(p), small)).run().unique for p in (base, unmarked)]
    assert counts[0] == counts[1]  # no mark: the send starts after begin_send
