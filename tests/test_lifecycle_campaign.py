"""The crash and fault campaign of a lifecycle of your own (``claimfsm campaign job``):
worker processes that take, start, run the work at the executor and end it, killed at each
of those moments, stalled past their lease and restarted with their saved handle; the
operator requeuing with the executor's evidence; the verdict on the declared invariants
from the executor's own log, and the audit of the store. The quick suite runs the job on
SQLite, and its wrong design, which the campaign must catch; the slow suite runs the job
on PostgreSQL with backends terminated and the server restarted (``.ci/run``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from claimfsm.campaign import (
    CampaignConfig,
    CampaignReport,
    LifecycleFindings,
    RemoteFaults,
    Request,
    judge_lifecycle,
    local_restart_command,
    run_campaign,
)
from claimfsm.campaign._lifecycle_worker import KILL_POINTS, WorkPlan
from claimfsm.cli import main
from claimfsm.errors import InvalidArgument, StaleClaim
from claimfsm.spec import load_spec, shipped
from claimfsm.store import open_entity_store

from .conftest import FakeClock
from .test_campaign import saved_tokens
from .test_campaign import short as claim_campaign

SPECS = Path(__file__).parent.parent / "specs"


def short(tmp_path: Path, design: str = "job", **kw: object) -> CampaignConfig:
    """The claim's short campaign (``test_campaign.short``), run by ``design``'s workers."""
    return claim_campaign(tmp_path, design=design, **kw)


def findings(report: CampaignReport) -> LifecycleFindings:
    assert isinstance(report.findings, LifecycleFindings)
    return report.findings


def assert_promises_held(report: CampaignReport) -> None:
    f = findings(report)
    assert report.ok, report.violations
    assert report.unexpected_exits == []
    # It did what it says: a kill at each moment of the work and at random ones, stalls,
    # restarts, some with the saved handle; and it stopped because it had done that.
    assert set(report.kills) == {*KILL_POINTS, "random"}
    assert all(n > 0 for n in report.kills.values()), report.kills
    assert sum(report.pauses.values()) > 0 and report.restarts > 0
    assert sum(report.resumes.values()) > 0
    assert report.config.dispatches is not None and report.stopped_by == "counts"
    # Runs outlived their lease; the operator took the job out of `orphaned` with the
    # executor's evidence (the audit judges that evidence, entry by entry).
    assert f.runs > 0 and f.operated.get("requeue", 0) > 0
    # The promises, from the executor's own log and the store's history.
    assert f.overlapping_runs == 0 and f.left_leased == 0 and f.runs_unaccounted == 0
    assert f.audit_violations == 0 and f.audit_examples == []
    assert f.started >= f.runs  # every run was begun by a recorded start


def test_a_job_campaign_on_sqlite_keeps_every_declared_promise(tmp_path: Path) -> None:
    report = run_campaign(short(tmp_path))
    assert_promises_held(report)
    f = findings(report)
    # A stalled worker's late run met the fence the operator raised to requeue its job.
    assert f.fenced > 0
    assert report.design == "job" and report.as_dict()["design"] == "job"
    # Owner tokens: saved privately by the workers, nowhere else.
    run_dir = report.config.run_dir
    tokens = saved_tokens(run_dir)
    assert len(tokens) >= 20
    for h in run_dir.glob("worker-*.handles"):
        assert h.stat().st_mode & 0o077 == 0
    elsewhere = "".join(w.read_text() for w in run_dir.glob("worker-*.log"))
    elsewhere += json.dumps(report.as_dict())
    elsewhere += b"".join(d.read_bytes() for d in run_dir.glob("campaign.sqlite*")).decode(
        "latin-1"
    )
    assert not [t[:6] for t in tokens if t in elsewhere]


@pytest.mark.slow  # a campaign of worker processes; the README's campaigns run in the quick suite
def test_the_campaign_catches_the_job_that_requeues_without_evidence(tmp_path: Path) -> None:
    """The wrong design the checker catches is caught on real processes too: a run that
    outlives its lease, an orphaned job requeued at once, a second worker running it."""
    slow = RemoteFaults(slow=0.5, slow_seconds=(1.5, 2.5))  # half the runs outlive the lease
    design = "job-requeue_without_evidence"
    report = run_campaign(short(tmp_path, design, faults=slow, dispatches=30))
    f = findings(report)
    assert report.stopped_by == "counts"  # it did all it was asked: the verdict stands
    assert f.outlived_lease > 0
    assert f.overlapping_runs > 0 and f.overlap_examples
    assert not report.ok
    assert any("one_attempt_at_a_time" in v for v in report.violations), report.violations
    # The store kept its promises: the flaw is the declaration's, not the store's.
    assert f.audit_violations == 0 and f.runs_unaccounted == 0 and f.left_leased == 0


def test_the_verdict_reads_the_history_once_as_a_stream(tmp_path: Path, clock: FakeClock) -> None:
    """The campaign judges a store's history as ``iter_history`` streams it, in one pass:
    the figures from a one-shot stream are those from the whole list, refusals, starts,
    ends and the operator's events included."""
    spec = shipped()["job"]
    store = open_entity_store(spec, f"sqlite:///{tmp_path / 'j.sqlite'}", clock=clock)
    for key in ("a", "b"):
        handle = store.act(store.take(key, "lease", owner="w", lease_seconds=10), "start")
        clock.advance(11)
        store.sweep()
        with pytest.raises(StaleClaim):
            store.act(handle, "succeed")
        store.operate(key, "requeue", facts={"running": False, "ran": True})
    store.act(store.act(store.take("a", "lease", owner="w"), "start"), "succeed")
    log = [Request("a", 0, 2, "a", 0, 1, "applied"), Request("b", 0, 9, "b", 2, 3, "applied")]
    whole = judge_lifecycle(spec, store.rows(), store.history(), log)
    streamed = judge_lifecycle(spec, store.rows(), store.iter_history(page=2), log)
    assert streamed.findings == whole.findings and streamed.violations == whole.violations
    f = whole.findings
    assert (f.refusals, f.started, f.ended["succeed"], f.runs_unaccounted) == (2, 3, 1, 1)
    assert f.operated == {"requeue": 2}
    store.close()


def test_the_verdict_fails_on_each_broken_promise(tmp_path: Path, clock: FakeClock) -> None:
    spec = shipped()["job"]
    store = open_entity_store(spec, f"sqlite:///{tmp_path / 'j.sqlite'}", clock=clock)
    handle = store.take("a", "lease", owner="w")
    store.act(store.act(handle, "start"), "succeed")

    def run(key: str, epoch: int, start: float, end: float) -> Request:
        return Request(key, 0, epoch, key, start, end, "applied")

    def verdict(log: list[Request]) -> tuple[LifecycleFindings, list[str]]:
        v = judge_lifecycle(spec, store.rows(), store.history(), log)
        return v.findings, v.violations

    f, violated = verdict([run("a", 1, 0, 1)])
    assert violated == [] and (f.runs, f.started, f.ended) == (1, 1, {"succeed": 1, "fail": 0})
    # A run of an epoch the store never started.
    f, violated = verdict([run("a", 1, 0, 1), run("a", 7, 2, 3)])
    assert f.runs_unaccounted == 1 and any("account for" in v for v in violated)
    # Two epochs of one job running at once, against the declared exclusive_work.
    store.take("b", "lease", owner="w")
    handle = store.take("c", "lease", owner="w")
    store.act(handle, "start")
    f, violated = verdict([run("a", 1, 0, 1), run("a", 2, 0.5, 2)])
    assert f.overlapping_runs == 1
    assert any("one_attempt_at_a_time" in v for v in violated)
    # b and c still hold their leases: nothing lapsed them.
    assert f.left_leased == 2 and any("holding a lease" in v for v in violated)
    # A run the fence turned away never ran: no overlap.
    fenced = Request("a", 0, 2, "a", 0.5, 0.5, "fenced")
    assert verdict([run("a", 1, 0, 1), fenced])[0].overlapping_runs == 0
    store.close()


def test_the_worker_s_plan_is_read_off_the_declaration() -> None:
    plan = WorkPlan.of(shipped()["job"])
    assert (plan.takers, plan.starts, plan.ends) == (("lease",), "start", ("succeed", "fail"))
    assert plan.start_sources == {"leased"} and plan.towards == {}
    assert set(plan.wakes) == {"start", "release"}


def deploy_dir(tmp_path: Path) -> Path:
    """The README's deploy.toml, with a state between the take and the start that an
    owner's event of its own leaves: the worker walks it on its way to the work."""
    from .test_lifecycle_remote import FILES

    text = FILES["deploy.toml"]
    (tmp_path / "deploy.toml").write_text(text)
    staged = text.replace(
        'event = "start"\nsource = "held"',
        'event = "start"\nsource = "staged"',
    ).replace(
        "[events.take]",
        '[states.staged]\nmeaning = "staged"\nlease = true\n\n'
        '[[transitions]]\nevent = "stage"\nsource = "held"\ndest = "staged"\n'
        'guards = ["holder"]\n\n[[transitions]]\nevent = "lapse"\nsource = "staged"\n'
        'dest = "idle"\nguards = ["lapsed"]\n\n[events.take]',
    )
    (tmp_path / "staged.toml").write_text(staged.replace('name = "deploy"', 'name = "staged"'))
    return tmp_path


def test_the_worker_walks_the_owner_s_steps_to_the_start(tmp_path: Path) -> None:
    plan = WorkPlan.of(load_spec(deploy_dir(tmp_path) / "staged.toml"))
    assert plan.towards == {"held": "stage"} and plan.start_sources == {"staged"}


def test_what_a_campaign_cannot_run_is_one_clear_error(tmp_path: Path) -> None:
    workless = (SPECS / "job.toml").read_text().replace('work = "starts"', "")
    workless = workless.replace('kind = "exclusive_work"', 'kind = "left_only_by"\nstates'
                                ' = ["running"]\nevents = ["succeed"]')  # fmt: skip
    (tmp_path / "workless.toml").write_text(workless.replace('name = "job"', 'name = "wl"'))
    runner = CliRunner()
    cases = {
        "release_by_target": "the claim protocol's campaign runs claim.toml",
        str(tmp_path / "workless.toml"): 'starts the work (work = "starts")',
        "no-such-design": "no declaration 'no-such-design'",
        str(tmp_path / "missing.toml"): "missing.toml",
    }
    for design, said in cases.items():
        result = runner.invoke(main, ["campaign", design, "--dir", str(tmp_path / "c")])
        assert result.exit_code != 0, design
        assert said in result.output, (design, result.output)
        assert "Traceback" not in result.output
        assert not (tmp_path / "c").exists()  # refused before anything was made
    with pytest.raises(InvalidArgument, match="starts the work"):
        run_campaign(short(tmp_path, str(tmp_path / "workless.toml")))


@pytest.mark.slow  # a campaign of worker processes; the README's campaigns run in the quick suite
def test_a_charge_is_made_once_against_a_fencing_processor_and_twice_unfenced(
    tmp_path: Path,
) -> None:
    """The README's charge.toml, whose work is a request to a remote: the worker takes
    `answer` once the charge took effect and `give_up` when it cannot tell; the operator
    calls an unknown charge found or missing by readback, and missing only once the
    processor is fenced. Its wrong design unfenced.toml calls it missing on readback alone,
    and against a plain processor a request that landed late is a second charge."""
    from .test_lifecycle_remote import FILES

    for name in ("charge.toml", "unfenced.toml"):
        (tmp_path / name).write_text(f"# {name}\n{FILES[name]}")
    held = run_campaign(short(tmp_path, str(tmp_path / "charge.toml")))
    f = findings(held)
    assert held.ok, held.violations
    assert held.stopped_by == "counts" and f.outlived_lease > 0
    assert f.duplicate_effects == 0 and f.overlapping_runs == 0
    assert f.ended["answer"] > 0 and f.ended["give_up"] > 0
    assert f.operated.get("missing", 0) > 0  # fenced first, then called missing
    assert f.audit_violations == 0
    slow = RemoteFaults(slow=0.5, slow_seconds=(1.5, 2.5))
    caught = run_campaign(
        short(tmp_path, str(tmp_path / "unfenced.toml"), remote="plain", faults=slow)
    )
    g = findings(caught)
    assert caught.stopped_by == "counts" and g.duplicate_effects > 0
    assert any("charged_once" in v for v in caught.violations), caught.violations
    assert g.audit_violations == 0  # the store kept its promises: the flaw is the design's


@pytest.mark.slow  # a campaign of worker processes; the README's campaigns run in the quick suite
def test_the_operator_resends_an_unknown_charge_to_a_deduplicating_processor(
    tmp_path: Path,
) -> None:
    """A `resends` event (the charge's retry, test_lifecycle_remote.RETRY): the operator
    takes the epoch over with a fresh token and sends the request again under the order's
    key, with the evidence its guard reads (the processor deduplicates), then takes the
    event the answer calls for. The charge is still made once."""
    from .test_lifecycle_remote import RETRY

    (tmp_path / "retry.toml").write_text(RETRY)
    report = run_campaign(short(tmp_path, str(tmp_path / "retry.toml"), remote="dedup"))
    f = findings(report)
    assert report.ok, report.violations
    assert f.operated.get("retry", 0) > 0 and f.duplicate_effects == 0
    assert f.audit_violations == 0


def test_the_operator_fences_only_where_the_event_s_guards_read_the_fence(
    tmp_path: Path,
) -> None:
    """The operator gives an event the evidence its guards read, and no fence it never
    asked for: a fence it did not ask for would turn away the late run that makes a design
    without one wrong, and the campaign would miss it. Refused as is, the job's requeue is
    tried again with the executor fenced and read back after the fence; the readback
    designs', with readback alone."""
    from types import SimpleNamespace

    from claimfsm.campaign._lifecycle import LifecycleCampaign
    from claimfsm.errors import InsufficientEvidence

    class Executor:
        def __init__(self) -> None:
            self.asked: list[str] = []

        def fence(self, key: str, epoch: int) -> None:
            self.asked.append(f"fence {key} e{epoch}")

        def ran(self, key: str, epoch: int) -> bool:
            self.asked.append(f"ran {key} e{epoch}")
            return True

        def running(self, key: str, epoch: int) -> bool:
            self.asked.append(f"running {key} e{epoch}")
            return False

    def store_call(facts: dict[str, object] | None, how: str) -> dict[str, object]:
        if facts is None:
            raise InsufficientEvidence("refused as is")
        return facts

    row = SimpleNamespace(key="job-1", epoch=2, request_key=None, state="orphaned")
    readback = ["ran job-1 e2", "running job-1 e2"]  # "it ran" first, then "not running"
    for design, asked, facts in (
        (
            "job",  # the fence first, then readback after it
            ["fence job-1 e2", *readback],
            {"fenced_through": 2, "ran": True, "running": False},
        ),
        ("job-requeue_on_readback", ["running job-1 e2"], {"running": False}),
        ("job-orphan_waits_for_readback", readback, {"ran": True, "running": False}),
        ("job-requeue_without_evidence", [], None),  # it reads no evidence: refused as is
    ):
        campaign = LifecycleCampaign(short(tmp_path, design=design))
        executor = Executor()
        got = campaign.tried(executor, row, "requeue", {}, store_call)  # type: ignore[arg-type]
        assert (executor.asked, got) == (asked, facts), design


def test_a_harness_thread_that_fails_ends_the_run_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator that raises (a declaration it cannot act on, a bug) must not leave the
    run to its limit with leases never lapsing: the run ends and says why."""
    from claimfsm.campaign._lifecycle import LifecycleCampaign

    def broken(*_: object) -> int:
        raise RuntimeError("the operator broke")

    monkeypatch.setattr(LifecycleCampaign, "operate", broken)
    report = run_campaign(short(tmp_path, seconds=120.0))
    assert report.stopped_by == "a harness thread failed" and report.seconds < 60
    assert any("the operator broke" in v for v in report.violations), report.violations
    assert not report.ok


def test_the_drivers_words_go_to_the_campaigns_log_not_the_console(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A PostgreSQL campaign loses connections and restarts the server on purpose; the
    driver's warnings about it (psycopg's, its pool's) go to campaign.log in its
    directory, while the campaign runs, and nowhere once it ended."""
    import logging

    from claimfsm.campaign._run import DRIVER_LOG, _driver_log

    config = short(tmp_path)
    with _driver_log(config):
        logging.getLogger("psycopg.pool").warning("discarding closed connection: test")
    logging.getLogger("psycopg").warning("after the campaign")
    assert "discarding closed connection: test" in (config.run_dir / DRIVER_LOG).read_text()
    assert "after the campaign" not in (config.run_dir / DRIVER_LOG).read_text()
    assert "discarding closed connection" not in capfd.readouterr().err


@pytest.mark.serial
@pytest.mark.slow
def test_a_job_campaign_on_postgresql(
    pg_database: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    restart = local_restart_command()
    if restart is None and os.environ.get("CLAIMFSM_REQUIRE_PG") == "1":
        pytest.fail("CI must restart the local PostgreSQL server, but pg_ctlcluster is missing")
    report = run_campaign(
        short(
            tmp_path,
            backend="postgresql",
            postgres_url=pg_database,
            dispatches=30,
            restart_command=restart,
        )
    )
    assert_promises_held(report)
    assert report.backends_terminated > 0
    assert report.server_restarts == (1 if restart else 0)
    assert "psycopg" not in capfd.readouterr().err  # its words are in campaign.log
