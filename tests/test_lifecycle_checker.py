"""A lifecycle of your own, checked: the model of any declared lifecycle reads its world, its
roles and its invariants from the declaration (``specs/job.toml`` is the shipped one).

Each invariant kind is shown failing on a declaration that breaks it, so none can pass by
not being checked; renaming every name of the declaration changes no count; one edit of
the TOML changes the verdict."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from claimfsm.checker import (
    Checker,
    EntityModelConfig,
    entity_model,
    reachable,
    replay,
    spin_available,
    spin_check,
)
from claimfsm.cli import main
from claimfsm.errors import InvalidArgument, SpecError, TargetBusy
from claimfsm.machine import ClaimMachine
from claimfsm.spec import declarations_dir, load_spec, shipped

JOB = (declarations_dir() / "job.toml").read_text()


def job(tmp_path: Path, text: str = JOB, name: str = "myjob") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text.replace('name = "job"', f'name = "{name}"'))
    return path


def run(path: Path, **bounds: Any) -> dict[str, str]:
    report = Checker(entity_model(load_spec(path), EntityModelConfig(**bounds))).run()
    assert report.complete
    return {p.name: report.outcome(p) for p in report.model.properties}


def test_the_job_lifecycle_holds_every_invariant_it_declares() -> None:
    result = CliRunner().invoke(main, ["check", "job"])
    assert result.exit_code == 0, result.output
    for name in (
        "stale_operations_change_nothing",
        "one_attempt_at_a_time",
        "attempts_bounded",
        "dead_only_when_spent",
        "orphan_is_requeued",
    ):
        assert f"{name}: holds" in result.output
    assert "world: 2 workers, 1 job, 4 epochs per job" in result.output
    three = CliRunner().invoke(main, ["check", "job", "--workers", "3", "--json"])
    assert three.exit_code == 0, three.output
    data = json.loads(three.output)
    assert data["complete"] and data["bounds"]["workers"] == 3 and data["bounds"]["epochs"] == 4


def test_the_wrong_job_design_is_caught_with_the_shortest_counterexample() -> None:
    result = CliRunner().invoke(main, ["check", "job-requeue_without_evidence"])
    assert result.exit_code == 1, result.output
    assert "one_attempt_at_a_time: violated" in result.output
    steps = re.findall(r"^  (\d+)\. (.*)$", result.output, flags=re.MULTILINE)
    texts = [text for _, text in steps]
    # lease, start, the run reaches the executor, the lease lapses, the sweep orphans it,
    # requeued without a fence, a second worker leases and starts it while the first runs.
    assert len(texts) == 10, texts
    assert texts[3:] == [
        "worker 0: its run reaches the executor and runs there",
        "clock: the lease of job 0 lapses",
        "sweep: lapse job 0",
        "operator: requeue job 0",
        "worker 1: lease job 0",
        "worker 1: start",
        "worker 1: its run reaches the executor and runs there",
    ]
    token = re.search(r"replay token: (\S+)", result.output)
    assert token is not None
    replayed = CliRunner().invoke(
        main, ["check", "job-requeue_without_evidence", "--replay-token", token.group(1)]
    )
    assert replayed.exit_code == 1 and "worker 1: start" in replayed.output
    assert "--replay-token" in CliRunner().invoke(main, ["check", "--help"]).output


def test_readback_alone_misses_a_run_that_has_not_reached_the_executor() -> None:
    """Requeue on readback alone (no run of the epoch at the executor) is the campaign's
    finding: the first worker's run is due, not there yet, when readback is asked; it
    arrives after the requeue, and the next attempt runs beside it."""
    result = CliRunner().invoke(main, ["check", "job-requeue_on_readback"])
    assert result.exit_code == 1, result.output
    assert "one_attempt_at_a_time: violated" in result.output
    first = result.output.split("counterexample for one_attempt_at_a_time")[1]
    first = first.split("counterexample for")[0]
    texts = re.findall(r"^  \d+\. (.*)$", first, flags=re.MULTILINE)
    assert texts[1:] == [
        "worker 0: lease job 0",
        "worker 0: start",
        "clock: the lease of job 0 lapses",
        "sweep: lapse job 0",
        "operator: requeue job 0",
        "worker 0: its run reaches the executor and runs there",
        "worker 1: lease job 0",
        "worker 1: start",
        "worker 1: its run reaches the executor and runs there",
    ]
    # readback was asked while the run was due: it said no run of e1 was running
    assert "its run due at the executor" in first.split("operator: requeue job 0")[0]
    # the shipped job, whose requeue needs the fence, holds in the same world
    assert CliRunner().invoke(main, ["check", "job"]).exit_code == 0


def test_a_fenced_executor_refuses_a_late_run() -> None:
    """A run that reaches the executor after the fence through its epoch never runs, and
    the path says so."""
    from claimfsm.checker._engine import Step

    model = entity_model(load_spec(declarations_dir() / "job.toml"))
    world = next(iter(model.init_states()))
    path = [Step(None, world)]
    for action in (
        ("take", 0, 0, "lease"),
        ("own", 0, "start"),
        ("clock", 0),
        ("env", 0, "lapse"),
        ("fence", 0),
        ("run", 0),
    ):
        nxt = model.next_state(world, action)
        assert nxt is not None, action
        path.append(Step(action, nxt))
        world = nxt
    assert world.rows[0].working == () and world.clients[0] is not None
    assert not world.clients[0].working and world.clients[0].phase == ""
    assert model.explain is not None
    text = model.explain(path[-2].state, ("run", 0), world)[-1][0]
    assert text.endswith("fenced through e1, which refuses it: it never runs"), text


def test_spec_shows_an_eventually_invariant_as_declared() -> None:
    data = json.loads(CliRunner().invoke(main, ["spec", "job", "--json"]).output)
    found = [i for i in data["invariants"] if i["kind"] == "eventually"]
    assert found == [
        {
            "name": "orphan_is_requeued",
            "kind": "eventually",
            "meaning": found[0]["meaning"],
            "from": ["orphaned"],
            "to": ["queued"],
            "fair": ["requeue", "fence"],
        }
    ]
    table = CliRunner().invoke(main, ["spec", "job"], env={"COLUMNS": "200"}).output
    assert "eventually: from orphaned to queued; fair: requeue, fence" in table


def test_the_starving_job_design_is_caught_by_liveness_and_a_deadlock() -> None:
    """Leaving orphaned only on readback that the run came and went is safe, but a worker
    paused for ever before its run reaches the executor starves the job, however fair the
    operator is; one that crashed there leaves nothing that can ever happen: a deadlock."""
    result = CliRunner().invoke(main, ["check", "job-orphan_waits_for_readback"])
    assert result.exit_code == 1, result.output
    outcomes = dict(re.findall(r"^  \w+ +(\w+): (\w+)$", result.output, flags=re.MULTILINE))
    assert [n for n, o in outcomes.items() if o == "violated"] == ["orphan_is_requeued"]
    liveness, deadlock = result.output.split("deadlock: no action is enabled after")
    texts = re.findall(r"^  \d+\. (.*)$", liveness, flags=re.MULTILINE)
    assert texts[1:] == [
        "worker 0: lease job 0",
        "worker 0: start",
        "clock: the lease of job 0 lapses",
        "sweep: lapse job 0",
        "operator: fence the executor of job 0 through its epoch",
    ]
    last = liveness.split("operator: fence the executor")[1]
    assert "worker 0 holds job 0 e1 (saw running), its run due at the executor" in last
    assert "no step assumed fair is possible, so the run may stop there" in liveness
    assert "under fairness: requeue (operator), the operator eventually fences" in liveness
    stuck = re.findall(r"^  \d+\. (.*)$", deadlock, flags=re.MULTILINE)
    assert "worker 0 crashes (its work stops, its handle is gone)" in stuck
    assert stuck[-1] == "operator: fence the executor of job 0 through its epoch"
    token = re.search(r"replay token: (\S+)", result.output)
    assert token is not None
    replayed = CliRunner().invoke(
        main, ["check", "job-orphan_waits_for_readback", "--replay-token", token.group(1)]
    )
    assert replayed.exit_code == 1 and "through its epoch" in replayed.output


def test_fairness_is_what_the_declaration_states(tmp_path: Path) -> None:
    """Without the operator's fencing assumed fair, a paused worker starves the orphaned job
    of the correct design too; without requeue fair, the operator may never requeue it; a
    goal that the sweep's lapse reaches needs the clock."""
    assert run(job(tmp_path))["orphan_is_requeued"] == "holds"
    for fair, outcome in (
        ('fair = ["requeue"]', "violated"),
        ('fair = ["fence"]', "violated"),
        ("fair = []", "violated"),
        ('fair = ["fence", "requeue", "lease"]', "holds"),
    ):
        text = JOB.replace('fair = ["requeue", "fence"]', fair)
        assert run(job(tmp_path, text))["orphan_is_requeued"] == outcome, fair
    lapses = JOB.replace(
        'from = ["orphaned"]\nto = ["queued"]\nfair = ["requeue", "fence"]',
        'from = ["running"]\nto = ["orphaned", "succeeded", "queued"]\nfair = ["clock", "lapse"]',
    )
    assert run(job(tmp_path, lapses))["orphan_is_requeued"] == "holds"
    no_clock = lapses.replace('fair = ["clock", "lapse"]', 'fair = ["lapse"]')
    assert run(job(tmp_path, no_clock))["orphan_is_requeued"] == "violated"


def test_each_way_out_of_orphaned_carries_the_protection(tmp_path: Path) -> None:
    """Without the fence's guard, or without readback's "it ran" beside "it is not
    running", two attempts run at once; with both ways whole, they never do."""
    fenced = 'guards = ["epoch_current", "executor_fenced"]'
    readback = 'guards = ["epoch_current", "attempt_ran", "attempt_stopped"]'
    assert fenced in JOB and readback in JOB
    for way, instead in (
        (fenced, 'guards = ["epoch_current"]'),
        (readback, 'guards = ["epoch_current", "attempt_stopped"]'),
        (readback, 'guards = ["epoch_current", "attempt_ran"]'),
    ):
        text = JOB.replace(way, instead)
        assert run(job(tmp_path, text))["one_attempt_at_a_time"] == "violated", instead
    assert run(job(tmp_path))["one_attempt_at_a_time"] == "holds"


@pytest.mark.parametrize(
    ("edit", "violated"),
    [
        # the lease no longer checks the attempts left: a fourth attempt
        ('guards = ["job_queued", "attempts_left"]', "attempts_bounded"),
        # the sweep buries a job at once
        ('guards = ["attempts_spent"]', "dead_only_when_spent"),
        # succeed by anyone holding an old handle: a stale worker finishes the new attempt
        (
            'event = "succeed"\nsource = "running"\ndest = "succeeded"\nguards = ["owner_matches"]',
            "stale_operations_change_nothing",
        ),
    ],
)
def test_each_invariant_kind_fails_on_a_declaration_that_breaks_it(
    tmp_path: Path, edit: str, violated: str
) -> None:
    assert edit in JOB
    broken = edit.rsplit("guards = ", 1)[0] + (
        'guards = ["job_queued"]' if "job_queued" in edit else "guards = []"
    )
    outcomes = run(job(tmp_path, JOB.replace(edit, broken)))
    assert [n for n, o in outcomes.items() if o == "violated"] == [violated], outcomes


def test_a_stuck_state_is_a_deadlock(tmp_path: Path) -> None:
    """One edit in the TOML reaches the checker: with two attempts allowed but three needed
    before the sweep buries a job, a job with two attempts can go nowhere."""
    text = JOB.replace('op = "<"\nvalue = 3', 'op = "<"\nvalue = 2')
    assert text != JOB
    result = CliRunner().invoke(main, ["check", str(job(tmp_path, text))])
    assert result.exit_code == 1
    assert "deadlock: no action is enabled after" in result.output
    assert "queued e2, attempts=2" in result.output.split("deadlock")[1]


def test_a_step_that_passes_a_bound_is_no_deadlock_whoever_takes_its_event(
    tmp_path: Path,
) -> None:
    """Whether a bound stops a step is asked of every event that moves a count a bound
    limits, not of the takers alone: here the sweep's bury bumps ``attempts`` too, so with
    counts at 3 a spent job's only step (bury, to 4) passes the bound. That is a bound
    reached, not a deadlock, and no job is ever buried within it."""
    text = JOB.replace(
        '[events.bury]\nby = "sweep"', '[events.bury]\nby = "sweep"\nbumps = ["attempts"]'
    )
    assert text != JOB
    report = Checker(
        entity_model(load_spec(job(tmp_path, text)), EntityModelConfig(counts=3))
    ).run()
    assert report.complete and report.deadlock is None
    outcomes = {p.name: report.outcome(p) for p in report.model.properties}
    assert outcomes["a_job_is_dead_lettered"] == "never happens"
    assert outcomes["attempts_bounded"] == "holds"


def rename(text: str) -> str:
    """Every state, event, guard, column and invariant name of job.toml, renamed: in table
    headers and in the values of the keys that name them (not in effect or kind names)."""
    spec = load_spec(declarations_dir() / "job.toml")
    names = {*spec.states, *spec.events, *spec.guards, *spec.columns, *spec.invariants}
    naming = ("event", "source", "dest", "guards", "initial", "column", "states", "bumps")
    naming += ("from", "to", "fair", "events")

    def new(m: re.Match[str]) -> str:
        return f"zz_{m.group(1)[::-1]}" if m.group(1) in names else m.group(1)

    lines = []
    for line in text.splitlines():
        key = line.split("=", 1)[0].strip()
        if line.startswith("["):
            line = re.sub(r"(?<=\.)(\w+)(?=\])", new, line)
        elif key in naming:
            line = key + " =" + re.sub(r'(?<=")(\w+)(?=")', new, line.split("=", 1)[1])
        lines.append(line)
    return "\n".join(lines) + "\n"


def test_renaming_every_name_changes_no_count_and_no_verdict(tmp_path: Path) -> None:
    renamed = job(tmp_path, rename(JOB), name="renamed")
    spec = load_spec(renamed)
    assert not set(spec.states) & set(load_spec(declarations_dir() / "job.toml").states)
    for symmetry in (False, True):
        counts = []
        for path in (declarations_dir() / "job.toml", renamed):
            model = entity_model(load_spec(path), EntityModelConfig(workers=3))
            report = Checker(model).symmetry(symmetry).run()
            counts.append((report.unique, report.states, report.depth, report.verdict))
        assert counts[0] == counts[1]
    fenced = '["epoch_current", "executor_fenced"]'
    assert fenced in JOB
    broken = JOB.replace(fenced, '["epoch_current"]')
    outcomes = run(job(tmp_path, rename(broken), name="wrong"))
    assert outcomes["zz_" + "one_attempt_at_a_time"[::-1]] == "violated"


def test_the_world_is_read_from_the_declaration_and_flags_override_it(tmp_path: Path) -> None:
    path = job(
        tmp_path,
        JOB.replace("workers = 2", "workers = 1").replace("crashes = true", "crashes = false"),
    )
    one = CliRunner().invoke(main, ["check", str(path), "--json"])
    assert json.loads(one.output)["bounds"]["workers"] == 1
    assert json.loads(one.output)["bounds"]["crashes"] is False
    more = CliRunner().invoke(main, ["check", str(path), "--json", "--workers", "2"])
    assert json.loads(more.output)["bounds"]["workers"] == 2
    assert json.loads(more.output)["unique"] > json.loads(one.output)["unique"]


@pytest.mark.parametrize("flag", [["--drafts", "2"], ["--remote", "plain"], ["--retries", "2"]])
def test_the_claim_worlds_flags_are_refused_for_another_lifecycle(flag: list[str]) -> None:
    result = CliRunner().invoke(main, ["check", "job", *flag])
    assert result.exit_code == 2
    assert flag[0] in result.output and "the claim protocol's world only" in result.output


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (('kind = "exclusive_work"', 'kind = "exclusive"'), "unknown kind 'exclusive'"),
        (
            ('column = "attempts"\nop = "<="', 'column = "tries"\nop = "<="'),
            "column 'tries' is not a column of the row",
        ),
        (('bumps = ["attempts"]', 'bumps = ["tries"]'), "bumps ['tries'] must name each column"),
        (('by = "sweep"', 'by = "cron"'), "by 'cron' is not a role"),
        (("workers = 2", "workers = 9"), "[world]: workers must be a whole number from 1 to 6"),
        (('work = "starts"', 'work = "begins"'), "work 'begins' must be one of"),
        (("[columns.attempts]", "[columns.epoch]"), "the row already has a column of that name"),
        (('to = ["queued"]', 'to = ["orphaned"]'), "['orphaned'] are in both from and to"),
        (
            (
                "lease = true\n\n[states.succeeded]",
                "lease = true\nterminal = true\n\n[states.succeeded]",
            ),
            "an owner's event leaves 'running', which is terminal",
        ),
        (('from = ["orphaned"]', "from = []"), "kind 'eventually' needs from = [state names]"),
        (('from = ["orphaned"]', 'from = ["lost"]'), "from names states ['lost'] that are not"),
        (
            ('"requeue", "fence"]', '"requeue", "kick"]'),
            "fair names ['kick'], which are neither events nor world steps",
        ),
        (
            ('kind = "eventually"', 'kind = "row"'),
            "['fair', 'from', 'to'] belong to kind 'eventually' only",
        ),
        (
            ('kind = "eventually"', 'kind = "eventually"\nop = "<"'),
            "['op'] belong to kind 'row' only",
        ),
    ],
)
def test_bad_roles_invariants_and_worlds_are_named(
    tmp_path: Path, edit: tuple[str, str], message: str
) -> None:
    assert edit[0] in JOB
    path = job(tmp_path, JOB.replace(edit[0], edit[1], 1))
    result = CliRunner().invoke(main, ["check", str(path)])
    assert result.exit_code == 1
    assert message in result.output and str(path) in result.output
    assert "Traceback" not in result.output


def test_an_invariant_error_names_its_line(tmp_path: Path) -> None:
    path = job(tmp_path, JOB.replace('kind = "exclusive_work"', 'kind = "exclusive"'))
    with pytest.raises(SpecError) as e:
        load_spec(path)
    line = JOB.splitlines().index("[invariants.one_attempt_at_a_time]") + 1
    assert f"{path}:{line}: invariant 'one_attempt_at_a_time'" in str(e.value)


def test_exclusive_work_needs_an_event_that_starts_work(tmp_path: Path) -> None:
    path = job(tmp_path, JOB.replace('work = "starts"\n', ""))
    with pytest.raises(SpecError, match="no event starts work; mark the one that does with work"):
        load_spec(path)


def test_what_only_the_claim_world_answers_is_refused_by_name(tmp_path: Path) -> None:
    text = JOB.replace(
        'fact = "running"\nop = "="\nvalue = false', 'fact = "outcome"\nop = "="\nvalue = "absent"'
    )
    with pytest.raises(
        SpecError, match=r"reads the fact 'outcome', the remote's evidence, and no event declares"
    ):
        entity_model(load_spec(job(tmp_path, text)))
    drafts = JOB.replace('kind = "free"', 'kind = "draft_ready"')
    with pytest.raises(SpecError, match=r"linked draft, and no \[drafts\] is declared"):
        entity_model(load_spec(job(tmp_path, drafts)))


def test_the_claims_consumers_refuse_columns_and_invariants_they_would_ignore(
    tmp_path: Path,
) -> None:
    claim = (declarations_dir() / "claim.toml").read_text()
    extra = claim + '\n[columns.sends]\nmeaning = "sends so far"\n'
    path = tmp_path / "claim_plus.toml"
    path.write_text(extra)
    with pytest.raises(SpecError, match=r"also has columns \['sends'\]"):
        ClaimMachine(load_spec(path))


def test_every_shipped_declaration_is_checked_by_its_own_model() -> None:
    """The claim and its variants run on the claim model, every other lifecycle on the
    model of a declared lifecycle; no shipped declaration is refused."""
    from claimfsm.spec import is_lifecycle_of_its_own

    own = sorted(n for n, s in shipped().items() if is_lifecycle_of_its_own(s))
    assert own == [
        "job",
        "job-orphan_waits_for_readback",
        "job-requeue_on_readback",
        "job-requeue_without_evidence",
    ]


def test_a_counterexample_is_drawn_on_the_diagram_and_as_a_sequence_chart(tmp_path: Path) -> None:
    out = tmp_path / "drawn"
    result = CliRunner().invoke(
        main, ["check", "job-requeue_without_evidence", "--diagram", str(out)]
    )
    assert result.exit_code == 1, result.output
    stem = "job-requeue_without_evidence-one_attempt_at_a_time"
    dot = (out / f"{stem}.dot").read_text()
    # the path, numbered, in red; the variant's change from job.toml in blue
    assert "(2,8) start" in dot and "(6) changed: requeue" in dot
    assert "no longer checks executor_fenced" in dot
    chart = (out / f"{stem}-sequence.svg").read_text()
    assert "job store" in chart and "executor" in chart and "claim store" not in chart
    assert "work e1 running" in chart and "two epochs running at once" in chart
    assert "operator: requeue" in chart  # who acted, on the store's lifeline
    # each worker's run reaches the executor as a step of its own, after its start
    assert "3. worker 0: its run reaches the executor" in chart and "3 run" in chart
    assert (out / f"{stem}-sequence.mmd").read_text().startswith("sequenceDiagram")


def test_the_review_report_of_a_lifecycle_of_your_own(tmp_path: Path) -> None:
    out = tmp_path / "job.html"
    result = CliRunner().invoke(main, ["report", "job", "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert (
        "<h1>Design review: job</h1>" in page and "id='design-job-requeue_without_evidence'" in page
    )
    assert "one_attempt_at_a_time" in page and "at most one in-flight dispatch" not in page
    assert "executor" in page and "work e1 running" in page and "claim store" not in page
    assert "<td><code>lease</code></td><td>taker</td>" in page  # the events' roles
    assert "claimfsm check job-requeue_without_evidence --workers 2 --replay-token" in page
    assert "id='design-job-orphan_waits_for_readback'" in page
    assert "Under fairness: requeue (operator)" in page and "the run may stop there" in page
    other = tmp_path / "other.toml"
    other.write_text(JOB.replace('name = "job"', 'name = "other"'))
    wrong = CliRunner().invoke(
        main,
        [
            "report",
            str(other),
            "--variant",
            str(declarations_dir() / "wrong" / "job" / "requeue_without_evidence.toml"),
        ],
    )
    assert wrong.exit_code == 2 and "not a variant of other" in wrong.output


# -- the searches: a lifecycle's world splits into its rows and its clients --------------------
STUCK = JOB.replace('op = "<"\nvalue = 3', 'op = "<"\nvalue = 2')  # a job can go nowhere
SEARCH_CASES: dict[str, tuple[str, dict[str, Any], Any]] = {
    "two-jobs": ("job", {"workers": 2, "keys": 2, "epochs": 2, "counts": 2}, lambda c: c),
    "symmetry": ("job", {"workers": 3}, Checker.symmetry),
    "state-limit": ("job", {"workers": 3, "keys": 2}, lambda c: c.symmetry().max_states(4_000)),
    "first-counterexample": (
        "requeue_without_evidence",
        {"workers": 2},
        lambda c: c.symmetry().stop_on_violation(),
    ),
    "liveness": ("orphan_waits_for_readback", {"workers": 2}, lambda c: c),
    "deadlock": ("stuck", {"workers": 2}, lambda c: c),
}


def _case_model(tmp_path: Path, design: str, bounds: dict[str, Any]) -> Any:
    if design == "stuck":
        spec = load_spec(job(tmp_path, STUCK))
    elif design == "job":
        spec = load_spec(declarations_dir() / "job.toml")
    else:
        spec = load_spec(declarations_dir() / "wrong" / "job" / f"{design}.toml")
    return entity_model(spec, EntityModelConfig(**bounds))


@pytest.mark.parametrize("case", sorted(SEARCH_CASES))
def test_a_lifecycle_is_searched_in_arrays_with_what_the_other_searches_report(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows are the shared part and each client's handle its part (the work running
    on an entity is kept in its row), and a bound that stops a client's next step is
    decided by that client's part (``ByParts``): so a lifecycle gets the array search.
    It reports what the packed search one state at a time reports, paths, deadlocks and
    liveness loops included, and the search over the model's own worlds finds the same
    counts and verdicts."""
    import claimfsm.checker._arrays as arrays_module

    from .test_checker import _everything

    design, bounds, configure = SEARCH_CASES[case]
    model = _case_model(tmp_path, design, bounds)
    assert model.processes is not None and model.processes.shared_properties
    used = []
    real = arrays_module.array_search
    monkeypatch.setattr(arrays_module, "array_search", lambda *a: used.append(1) or real(*a))
    arrays = configure(Checker(model)).run()
    assert used, "the array search was not used"
    one_at_a_time = configure(Checker(model).arrays(False)).run()
    assert _everything(arrays) == _everything(one_at_a_time)
    worlds = configure(Checker(model).packed(False)).run()
    assert (arrays.unique, arrays.states, arrays.depth, arrays.complete) == (
        worlds.unique,
        worlds.states,
        worlds.depth,
        worlds.complete,
    )
    assert [arrays.outcome(p) for p in model.properties] == [
        worlds.outcome(p) for p in model.properties
    ]
    assert (arrays.deadlock is None) == (worlds.deadlock is None)
    for name, d in arrays.discoveries.items():
        assert len(d.path) == len(worlds.discoveries[name].path)
        assert replay(model, d.token) == d.path
    expected = {
        "deadlock": lambda r: r.deadlock is not None,
        "liveness": lambda r: "orphan_is_requeued" in r.discoveries,
        "first-counterexample": lambda r: r.stopped_by == "first counterexample",
        "state-limit": lambda r: not r.complete,
    }
    assert expected.get(case, lambda r: r.complete and r.deadlock is None)(arrays)


def test_the_work_kept_in_a_row_is_what_the_clients_say() -> None:
    """Each row's ``working`` (the epochs of the clients whose work on it runs) is the
    clients' handles, read again, in every state the search reaches."""
    model = entity_model(
        load_spec(declarations_dir() / "wrong" / "job" / "requeue_without_evidence.toml"),
        EntityModelConfig(workers=2, keys=2, epochs=2, counts=2),
    )
    start = list(model.init_states())
    reached, frontier, seen = set(start), start, 0
    while frontier:
        world = frontier.pop()
        for key, row in enumerate(world.rows):
            running = sorted(
                h.epoch for h in world.clients if h is not None and h.working and h.key == key
            )
            assert list(row.working) == running, model.show_state(world)
            seen += len(running) > 1  # a stale client's work beside the current one's
        for action in model.actions(world):
            after = model.next_state(world, action)
            if after is not None and after not in reached:
                reached.add(after)
                frontier.append(after)
    assert seen and len(reached) == Checker(model).exhaustive().run().unique


def test_against_a_remote_the_rows_keep_no_work_and_split_as_the_claim_worlds_do() -> None:
    """Against the claim's remote no guard reads ``running`` and the remote answers for
    overlapping work, so the rows keep no ``working``: the evidence is read from the
    handles (``world_facts``), and the rows (the packed search's shared part) are as many
    as the claim world's, so each client's steps are decided as rarely there."""
    from claimfsm.checker import ClaimModelConfig, claim_model, world_facts
    from claimfsm.checker._entity_world import _split

    spec = load_spec(declarations_dir() / "claim.toml")
    config = EntityModelConfig(workers=2, epochs=2, drafts=1, own_keys=False)
    reached = reachable(entity_model(spec, config))
    working = 0
    for world in reached:
        assert world.rows[0].working == ()
        running = any(
            h is not None and h.working and h.key == 0 and h.epoch == world.rows[0].epoch
            for h in world.clients
        )
        assert world_facts(world, 0, "fencing")["running"] == running
        working += running
    assert working  # states where a client's work runs were reached, and read as running
    claim = claim_model(spec, ClaimModelConfig(workers=2, epochs=2, drafts=1))
    assert claim.processes is not None
    claim_shared = {claim.processes.split(w)[0] for w in reachable(claim)}
    assert len(reached) == len(reachable(claim))
    assert len({_split(w)[0] for w in reached}) == len(claim_shared)


def test_a_working_client_refused_is_drawn_and_replayed_as_a_refusal(tmp_path: Path) -> None:
    """A client whose work runs and whose next operation is refused drops its handle: its
    work stops (the row's ``working`` changes) but the entity does not. The path drawn
    says refused, with no transition, and playing it on a store agrees."""
    from claimfsm.checker import Step
    from claimfsm.checker._entity_text import entity_path_steps
    from claimfsm.store import open_entity_store
    from claimfsm.verify import verify

    spec = load_spec(declarations_dir() / "job.toml")
    model = entity_model(spec, EntityModelConfig(workers=1))
    world = next(iter(model.init_states()))
    path = [Step(None, world)]
    for action in [("take", 0, 0, "lease"), ("own", 0, "start"), ("run", 0), ("clock", 0)]:
        world = model.next_state(world, action)
        path.append(Step(action, world))
    lapse = next(a for a in model.actions(world) if a[0] == "env" and a[2] == "lapse")
    world = model.next_state(world, lapse)
    path.append(Step(lapse, world))
    assert world.rows[0].state == "orphaned" and world.rows[0].working == (1,)
    refused = model.next_state(world, ("own", 0, "succeed"))
    assert refused is not None and refused.clients == (None,)
    assert refused.rows[0].working == () and refused.rows[0].state == "orphaned"
    path.append(Step(("own", 0, "succeed"), refused))
    last = entity_path_steps(spec, model, path)[-1]
    assert (last.event, last.label, last.source, last.dest) == (
        None,
        "refused",
        "orphaned",
        "orphaned",
    )
    # and on a store: the model's shortest paths, this refusal among them, agree
    url = f"sqlite:///{tmp_path / 'v.sqlite'}"
    result = verify(spec, lambda clock: open_entity_store(spec, url, clock=clock), examples=1)
    assert result.ok, result


def test_frees_target_means_a_transition_out_of_the_state_in_a_lifecycle(tmp_path: Path) -> None:
    """In the claim's world a ``frees_target`` state is one the next epoch is acquired
    from by the acquire out of the initial state; a lifecycle keeps one row per entity, so
    there the flag means a free guard on a transition out of the state itself. A flag no
    such transition reads would mean nothing: every command refuses it by name, and the
    store creates nothing. With the transition, the flag is what lets the guard hold."""
    from claimfsm.store import open_entity_store

    flagged = JOB.replace("[states.succeeded]\n", "[states.succeeded]\nfrees_target = true\n", 1)
    assert flagged != JOB
    path = job(tmp_path, flagged)
    db = tmp_path / "job.sqlite"
    for command in (["check", str(path)], ["verify", str(path), "--db", f"sqlite:///{db}"]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code != 0, result.output
        assert "state 'succeeded' is flagged frees_target, and no transition with a free guard" in (
            result.output
        ), result.output
        assert "Traceback" not in result.output
    with pytest.raises(SpecError, match="flagged frees_target"):
        open_entity_store(load_spec(path), f"sqlite:///{db}")
    assert not db.exists()
    rerun = (
        '[events.rerun]\nby = "taker"\nsets = ["lease"]\n\n'
        '[[transitions]]\nevent = "rerun"\nsource = "succeeded"\ndest = "leased"\n'
        'guards = ["job_queued"]\n\n[invariants.'
    )
    for text, taken in ((flagged, True), (JOB, False)):
        spec = load_spec(job(tmp_path, text.replace("[invariants.", rerun, 1), name="rerun"))
        entity_model(spec)  # the checker's world takes it
        store = open_entity_store(spec, f"sqlite:///{tmp_path / f'r{int(taken)}.sqlite'}")
        try:
            handle = store.act(store.take("j", "lease", lease_seconds=30), "start")
            store.act(handle, "succeed")
            if taken:
                assert store.take("j", "rerun", lease_seconds=30).epoch == 2
            else:
                with pytest.raises(TargetBusy, match="job_queued"):
                    store.take("j", "rerun", lease_seconds=30)
        finally:
            store.close()


EVENTS = JOB.replace(
    "[world]",
    '[invariants.a_failed_attempt_is_retried]\nkind = "reachable"\nevent = "fail"\n'
    'meaning = "an attempt fails and its job goes back to the queue"\n\n'
    '[invariants.a_spent_job_is_buried]\nkind = "reachable"\nevent = "bury"\n'
    'meaning = "the sweep buries a job that spent its attempts"\n\n[world]',
    1,
)


def test_an_example_may_name_an_event_a_step_takes(tmp_path: Path) -> None:
    """A ``reachable`` example may name an event instead of states, as the claim's
    ``stale_owner_discarded`` does: the world marks the step that takes it. Burying is
    the only way into ``dead``, so the event example and the state example agree: both
    met with four epochs, neither with two (a job never spends its three attempts). Every
    search and SPIN agree; the path to a met one ends with the event's step."""
    assert EVENTS != JOB
    spec = load_spec(job(tmp_path, EVENTS))
    examples = ("a_job_is_dead_lettered", "a_failed_attempt_is_retried", "a_spent_job_is_buried")
    for epochs, outcome in ((4, "found"), (2, "never happens")):
        model = entity_model(spec, EntityModelConfig(epochs=epochs))
        ours = Checker(model).symmetry(False).run()
        props = {p.name: p for p in model.properties}
        found = {name: ours.outcome(props[name]) for name in examples}
        assert found == {
            "a_job_is_dead_lettered": outcome,
            "a_failed_attempt_is_retried": "found",
            "a_spent_job_is_buried": outcome,
        }, found
        for other in (Checker(model).arrays(False), Checker(model).packed(False)):
            theirs = other.symmetry(False).run()
            assert theirs.unique == ours.unique
            assert {n: theirs.outcome(props[n]) for n in examples} == found
        path = ours.discoveries["a_failed_attempt_is_retried"].path
        assert "fail" in model.show_action(path[-1].action), model.show_action(path[-1].action)
        if spin_available() is None:
            spun, _ = spin_check(spec, EntityModelConfig(epochs=epochs))
            assert spun.unique == ours.unique
            met = set(spun.reached) | set(spun.discoveries)
            assert {n for n in examples if found[n] == "found"} <= met, met
            assert not {n for n in examples if found[n] != "found"} & met, met
    unmarked = entity_model(load_spec(job(tmp_path)), EntityModelConfig(epochs=2))
    # the marks are part of the state, in both engines
    assert ours.unique > Checker(unmarked).symmetry(False).run().unique
    counted = EVENTS.replace('"reachable"\nevent = "fail"', '"reachable"\nlive_drafts = 2')
    assert counted != EVENTS
    with pytest.raises(
        SpecError, match=r"live_drafts counts an entity's linked drafts: declare \[drafts\]"
    ):
        entity_model(load_spec(job(tmp_path, counted)))


def _taken(fair: str) -> str:
    return JOB.replace(
        "[world]",
        f'[invariants.a_queued_job_is_leased]\nkind = "taken"\nfair = {fair}\n'
        'meaning = "a job that may be leased is leased, or stops being leasable"\n\n[world]',
        1,
    )


def test_a_lifecycle_may_declare_taken(tmp_path: Path) -> None:
    """``taken`` is the claim world's obligation that a free target is acquired while some
    worker keeps trying; in a lifecycle, an entity that an idle worker's taker event would
    begin a new epoch on is taken or stops being takeable. With only leasing fair, two
    workers that leased and then paused on their stale handles starve the queued job: no
    worker is idle to lease it. With the workers' own steps fair too (each owner event, or
    the claim's ``steps``: some worker keeps stepping, a keep-alive aside), a stale worker
    is refused and drops its handle, and the job is leased. SPIN agrees on each."""
    owner_steps = '["lease", "release", "start", "renew", "succeed", "fail"]'
    cases = (
        ('["lease"]', "violated"),
        (owner_steps, "holds"),
        ('["lease", "steps"]', "holds"),  # some worker keeps stepping: the claim's fairness
    )
    for fair, verdict in cases:
        spec = load_spec(job(tmp_path, _taken(fair)))
        model = entity_model(spec)
        report = Checker(model).run()
        props = {p.name: p for p in model.properties}
        assert report.outcome(props["a_queued_job_is_leased"]) == verdict
        if verdict == "violated":
            last = report.discoveries["a_queued_job_is_leased"].path[-1].state
            assert last.rows[0].state == "queued", model.show_state(last)
            assert all(h is not None and h.key == 0 for h in last.clients), model.show_state(last)
        if spin_available() is None:
            spun, _ = spin_check(spec)
            assert spun.outcome(props["a_queued_job_is_leased"]) == verdict
    said = CliRunner().invoke(main, ["check", str(job(tmp_path, _taken('["lease", "steps"]')))])
    assert said.exit_code == 0 and "a_queued_job_is_leased: holds" in said.output, said.output


def test_the_fair_step_steps_counts_what_the_claim_world_counts(tmp_path: Path) -> None:
    """Both worlds read a worker's steps and its wake-ups off the declaration by role:
    ``steps`` counts an owner event but a keep-alive, and a worker woken from a crash takes
    an owner event out of the state a take leads into. claim.toml gives its acquire and
    release their roles (``by``), so the designs that drop the guard that would say so
    (release_by_target, update_returning_claim) keep the claim world's steps; an owner
    event the claim world does not model is refused by name."""
    from claimfsm.checker import claim_model
    from claimfsm.spec import step_events, wake_events
    from claimfsm.spec._vocabulary import Event, claim_steps

    for name, spec in shipped().items():
        if name.startswith("job"):
            continue
        named = claim_steps(spec)
        assert wake_events(spec) == ("begin_send", "release"), name
        assert named.woken(spec) == (Event.BEGIN_SEND, Event.RELEASE), name
        assert step_events(spec) == {"begin_send", "confirm", "timeout", "release"}, name
        assert named.stepping(spec) == {
            Event.BEGIN_SEND,
            Event.CONFIRM,
            Event.TIMEOUT,
            Event.RELEASE,
        }, name
    assert step_events(shipped()["job"]) == {"start", "succeed", "fail", "release"}
    # Without the declared role, a release with no owner guard is the operator's: the
    # wake-up and the fair step would lose it.
    text = (declarations_dir() / "claim.toml").read_text()
    unroled = text.replace('by = "owner"  #', "#", 1)
    assert unroled != text
    (tmp_path / "unroled.toml").write_text(unroled)
    overlay = tmp_path / "overlay.toml"
    overlay.write_text(
        'base = "unroled.toml"\nname = "unroled"\ndescription = "no roles declared"\n\n'
        '[[drop_guard]]\nevent = "release"\nguard = "owner_matches"\n'
    )
    assert wake_events(load_spec(overlay)) == ("begin_send",)
    assert "release" not in step_events(load_spec(overlay))
    # An owner event the claim world has no worker step for is refused, not miscounted.
    owned = tmp_path / "owned.toml"
    owned.write_text(text.replace("[events.reconcile]", '[events.reconcile]\nby = "owner"', 1))
    with pytest.raises(SpecError, match=r"reconcile.*is an owner event here.*workers take only"):
        claim_model(load_spec(owned))


def test_an_operator_fencing_only_with_readback_gives_a_design_the_fence_it_asks_for() -> None:
    """``[world] fence = "with_readback"`` (the claim world's): no fence step of its own; an
    operator's event whose guards ask for the fence and for readback's evidence fences the
    executor through the epoch first where readback finds nothing, and reads again. The
    job's requeue asks for both, so a run that never stops is never fenced off: the
    liveness that counted on the operator's fence at any step fails there, and the shipped
    job keeps ``any_step``. ``requeue_on_readback`` asks for no fence and gets none: its
    overlap is found in both worlds. SPIN's twin reaches the same states."""
    spec = load_spec(declarations_dir() / "job.toml")
    config = EntityModelConfig(fence="with_readback")
    model = entity_model(spec, config)
    report = Checker(model).symmetry(False).run()
    says = {p.name: report.outcome(p) for p in model.properties}
    assert says["orphan_is_requeued"] == "violated"
    assert all(s in ("holds", "found") for n, s in says.items() if n != "orphan_is_requeued")
    path = report.discoveries["orphan_is_requeued"].path
    assert all(step.action is None or step.action[0] != "fence" for step in path)
    assert "the operator eventually fences" not in report.text()
    assert "fence (here only inside an operator's readback that finds nothing)" in report.text()
    # the requeue on an orphan whose run came and went fences first, then takes the fence
    world = next(iter(model.init_states()))
    for action in (
        ("take", 0, 0, "lease"),
        ("own", 0, "start"),
        ("clock", 0),
        ("env", 0, "lapse"),
    ):
        nxt = model.next_state(world, action)
        assert nxt is not None, action
        world = nxt
    assert ("fence", 0) not in list(model.actions(world))
    requeued = model.next_state(world, ("env", 0, "requeue"))
    assert requeued is not None and requeued.rows[0].fence == 1
    assert requeued.rows[0].state == "queued"
    assert model.explain is not None
    text = model.explain(world, ("env", 0, "requeue"), requeued)[-1][0]
    assert "readback finds nothing, so it fences the executor through e1 first" in text
    # its due run, arriving later, is refused by that fence
    late = model.next_state(requeued, ("run", 0))
    assert late is not None and late.rows[0].working == ()
    # the same fence at any step: the operator's own step, and the liveness holds
    anywhere = entity_model(spec, EntityModelConfig(fence="any_step"))
    assert (
        Checker(anywhere)
        .run()
        .outcome(next(p for p in anywhere.properties if p.name == "orphan_is_requeued"))
        == "holds"
    )
    wrong = run(declarations_dir() / "wrong/job/requeue_on_readback.toml", fence="with_readback")
    assert wrong["one_attempt_at_a_time"] == "violated"
    if spin_available():
        theirs, _ = spin_check(spec, config)
        assert (theirs.unique, theirs.depth) == (report.unique, report.depth)
        assert {p.name: theirs.outcome(p) for p in model.properties} == says


def test_the_fence_option_is_read_from_the_declaration_and_checked(tmp_path: Path) -> None:
    """``[world] fence`` declared, overridden by ``check --fence``, and a word it does not
    know refused by name, with the file."""
    declared = job(tmp_path, JOB.replace("[world]\n", '[world]\nfence = "with_readback"\n', 1))
    out = CliRunner().invoke(main, ["check", str(declared)])
    assert out.exit_code == 1 and "orphan_is_requeued: violated" in out.output, out.output
    assert "fenced only by an operator's readback that finds nothing" in out.output
    over = CliRunner().invoke(main, ["check", str(declared), "--fence", "any_step"])
    assert over.exit_code == 0, over.output
    bad = job(tmp_path, JOB.replace("[world]\n", '[world]\nfence = "sometimes"\n', 1), "badjob")
    with pytest.raises(
        SpecError, match=r"badjob\.toml.*fence must be one of \['any_step', 'with_readback'\]"
    ):
        load_spec(bad)
    said = CliRunner().invoke(main, ["check", str(bad)])
    assert said.exit_code != 0 and "Traceback" not in said.output
    assert "fence must be one of" in said.output


def test_own_keys_is_for_a_lifecycle_with_a_remote() -> None:
    """Only a client with a request to send has a key to carry or leave behind."""
    with pytest.raises(InvalidArgument, match=r"declares no remote.*leave out own_keys"):
        entity_model(load_spec(declarations_dir() / "job.toml"), EntityModelConfig(own_keys=False))
    with pytest.raises(InvalidArgument, match="own_keys must be None, True or False"):
        EntityModelConfig(own_keys="no").resolved(load_spec(declarations_dir() / "job.toml"))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "path",
    [
        declarations_dir() / "claim.toml",
        declarations_dir() / "job.toml",
        declarations_dir() / "wrong" / "job" / "requeue_without_evidence.toml",
        Path(__file__).parent.parent / "examples" / "page.toml",
    ],
    ids=lambda p: p.stem,
)
def test_the_checker_lists_only_the_steps_that_fire_and_the_stateful_test_every_one(
    path: Path,
) -> None:
    """The checker lists an idle client's takes and resends, and the operator's and the
    sweep's events, only where they fire within the bounds; the stateful test's world
    (``lists_refused``) lists every one, to play the refused ones against the store. In
    every state both reach the same next states, and the checker's listing is the other's
    with the steps that do not fire left out, in the same order."""
    spec = load_spec(path)
    bounds: dict[str, Any] = {"workers": 2, "epochs": 2}
    checker = entity_model(spec, EntityModelConfig(**bounds))
    every = entity_model(spec, EntityModelConfig(**bounds, lists_refused=True))
    refused = 0
    start = list(every.init_states())
    assert start == list(checker.init_states())
    reached, frontier = set(start), list(start)
    while frontier:
        world = frontier.pop()
        listed = list(every.actions(world))
        nexts = [every.next_state(world, a) for a in listed]
        fires = [
            a
            for a, after in zip(listed, nexts, strict=True)
            if a[0] not in ("take", "resend", "env") or after is not None
        ]
        assert list(checker.actions(world)) == fires, every.show_state(world)
        refused += len(listed) - len(fires)
        for action, after in zip(listed, nexts, strict=True):
            assert checker.next_state(world, action) == after
            if after is not None and after not in reached:
                reached.add(after)
                frontier.append(after)
    assert refused  # the stateful test's world lists steps that do not fire
    assert len(reached) == Checker(checker).exhaustive().run().unique
    assert len(reached) == Checker(every).exhaustive().run().unique
    with pytest.raises(InvalidArgument, match="lists_refused must be None, True or False"):
        EntityModelConfig(lists_refused="yes").resolved(spec)  # type: ignore[arg-type]
