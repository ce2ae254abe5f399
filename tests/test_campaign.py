"""The crash and fault campaign: worker processes killed with SIGKILL at the worst moments,
a remote process that logs every request, and (on PostgreSQL) backends terminated
mid-transaction and a server restart. The quick suite runs a short SQLite campaign; the
slow suite runs the other remotes and PostgreSQL (``.ci/run``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from claimfsm.campaign import (
    CampaignConfig,
    CampaignReport,
    Request,
    judge,
    local_restart_command,
    overlaps,
    run_campaign,
)
from claimfsm.cli import main
from claimfsm.errors import InvalidArgument
from claimfsm.store import Claim, SQLiteStore

from .conftest import FakeClock, approved_draft


def request(target: str, epoch: int, start: float, end: float, draft: int = 1) -> Request:
    return Request(target, draft, epoch, f"cf-{draft}", start, end, "applied")


def test_overlaps_count_two_epochs_in_flight_at_once_and_nothing_else() -> None:
    assert overlaps([request("t", 1, 0, 1), request("t", 2, 1, 2)]) == (0, 0)  # back to back
    assert overlaps([request("t", 1, 0, 1), request("u", 2, 0.5, 2)]) == (0, 0)  # two targets
    assert overlaps([request("t", 1, 0, 1), request("t", 2, 0.5, 2)]) == (1, 0)
    assert overlaps([request("t", 1, 0, 3), request("t", 1, 1, 2)]) == (0, 1)  # same-key retry
    lost = Request("t", 1, 2, "k", 0.2, 0.2, "lost-request")
    assert overlaps([request("t", 1, 0, 1), lost]) == (0, 0)  # never reached the remote


def confirmed(store: SQLiteStore, target: str) -> Claim:
    claim = store.acquire(target, approved_draft(store, target), "w", 30)
    claim.begin_send()
    claim.confirm()
    return claim


def test_the_verdict_fails_on_each_broken_promise(tmp_path: Path, clock: FakeClock) -> None:
    store = SQLiteStore(tmp_path / "c.sqlite", clock=clock)
    a = confirmed(store, "a")
    effect = Request("a", a.draft_id, 1, a.idempotency_key, 0, 1, "applied")
    clean = judge(store, [effect], "fencing", ["a"])
    assert clean.ok, clean.violations
    assert clean.findings.confirmed == 1 and clean.findings.dispatched == 1

    # A confirmed epoch with no effect at the remote; an effect the store knows nothing of.
    stranger = Request("a", 99, 1, "cf-99", 2, 3, "applied")
    v = judge(store, [stranger], "fencing", ["a"])
    assert v.findings.confirmed_without_effect == 1 and v.findings.effects_unaccounted == 1
    assert not v.ok
    # The same draft's effect twice, by two overlapping epochs.
    again = Request("a", a.draft_id, 2, a.idempotency_key, 0.5, 1.5, "applied")
    v = judge(store, [effect, again], "dedup", ["a"])
    assert (v.findings.duplicate_effects, v.findings.overlapping_sends) == (1, 1)
    assert any("duplicate effects" in m for m in v.violations)
    assert any("overlapping sends" in m for m in v.violations)
    # A claim still sending, and one left uncertain against a remote that could resolve it.
    stuck = store.acquire("b", approved_draft(store, "b"), "w", 30)
    stuck.begin_send()
    v = judge(store, [effect], "fencing", ["a", "b"])
    assert v.findings.left_sending == 1 and any("left in sending" in m for m in v.violations)
    stuck.mark_uncertain("timeout")
    v = judge(store, [effect], "fencing", ["a", "b"])
    assert v.findings.left_uncertain == 1 and not v.ok
    assert judge(store, [effect], "plain", ["a", "b"]).ok  # plain: an honest limit, reported
    store.close()


def test_bad_configurations_are_clear_errors(tmp_path: Path) -> None:
    for bad in (
        CampaignConfig(backend="mysql", run_dir=tmp_path),  # type: ignore[arg-type]
        CampaignConfig(remote="magic", run_dir=tmp_path),  # type: ignore[arg-type]
        CampaignConfig(backend="postgresql", run_dir=tmp_path),
        CampaignConfig(workers=0, run_dir=tmp_path),
        CampaignConfig(send_timeout=2.0, lease_seconds=1.0, run_dir=tmp_path),
    ):
        with pytest.raises(InvalidArgument):
            run_campaign(bad)


def assert_promises_held(report: CampaignReport) -> None:
    f = report.findings
    assert report.ok, report.violations
    assert report.unexpected_exits == []
    # The campaign did what it says: kills at every chosen moment and at random ones,
    # restarts (some with a saved handle), uncertain attempts, and both ways out of them.
    assert all(n > 0 for n in report.kills.values()), report.kills
    if report.config.pause_probability:
        assert sum(report.pauses.values()) > 0, report.pauses
    assert report.restarts > 0 and sum(report.resumes.values()) > 0
    # Driven by counts, not seconds: it stopped because it had done what it was asked.
    assert report.config.dispatches is not None and report.stopped_by == "counts"
    assert f.sends_begun >= report.config.dispatches and f.uncertain > 0
    # The promises, read from the remote's own log and the store's history.
    assert f.overlapping_sends == 0 and f.left_sending == 0
    assert f.missing_epochs == 0 and f.reused_epochs == 0 and f.history_mismatches == 0
    assert f.audit_violations == 0 and f.audit_examples == []  # claimfsm audit: clean
    assert f.confirmed_without_effect == 0 and f.absent_but_landed == 0
    assert f.effects_unaccounted == 0
    if report.config.remote != "plain":
        assert f.duplicate_effects == 0 and f.left_uncertain == 0


def short(tmp_path: Path, **kw: object) -> CampaignConfig:
    defaults: dict[str, object] = {
        "run_dir": tmp_path / "campaign",
        "dispatches": 20,
        "seconds": 300.0,  # only a limit: a loaded machine takes longer, the test does not fail
        "kill_probability": 0.06,
        "random_kill_every": 0.8,
        "pause_probability": 0.04,  # plus the planned stall of worker 1
    }
    defaults.update(kw)
    return CampaignConfig(**defaults)  # type: ignore[arg-type]


def test_short_campaign_on_sqlite_with_a_fencing_remote(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    report = run_campaign(short(tmp_path))
    assert_promises_held(report)
    assert report.findings.reconciled_absent > 0  # killed before the call: fenced, proved absent
    assert report.findings.reconciled_present > 0  # killed after it: found by readback
    assert report.findings.fenced > 0  # stalled workers' late sends, rejected by the fence
    audit_tokens(report, capfd)


def saved_tokens(run_dir: Path) -> set[str]:
    """Every owner token the workers saved to their private handle files (a line torn by a
    kill is left out)."""
    return {
        json.loads(line)["token"]
        for f in run_dir.glob("worker-*.handles")
        for line in f.read_text().splitlines()
        if line.startswith("{") and line.endswith("}")
    }


def audit_tokens(report: CampaignReport, capfd: pytest.CaptureFixture[str]) -> None:
    """Every owner token the workers were issued (they saved each to their private handle
    file, as they must to resume) appears nowhere else: not in any worker's log, the
    harness's output, the report, the CLI's history and claims output, or the database."""
    run_dir = report.config.run_dir
    tokens = saved_tokens(run_dir)
    assert len(tokens) >= 20  # at least one per send begun
    assert all(len(t) == 43 for t in tokens)  # 32 random bytes (256 bits), base64url
    for f in run_dir.glob("worker-*.handles"):
        assert f.stat().st_mode & 0o077 == 0  # private to the worker
    db = f"sqlite:///{run_dir / 'campaign.sqlite'}"
    runner = CliRunner()
    cli = [
        runner.invoke(main, ["history", "--db", db, "--json"]),
        runner.invoke(main, ["history", "--db", db], env={"COLUMNS": "300"}),
        runner.invoke(main, ["claims", "--db", db], env={"COLUMNS": "300"}),
    ]
    assert all(r.exit_code == 0 for r in cli)
    captured = capfd.readouterr()
    haystacks = {
        "worker logs": "".join(f.read_text() for f in run_dir.glob("worker-*.log")),
        "harness output": captured.out + captured.err,
        "report": json.dumps(report.as_dict()),
        "cli output": "".join(r.output for r in cli),
        "database": b"".join(f.read_bytes() for f in run_dir.glob("campaign.sqlite*")).decode(
            "latin-1"
        ),
    }
    for where, text in haystacks.items():
        leaked = [t[:6] for t in tokens if t in text]
        assert not leaked, f"{len(leaked)} tokens found in the {where}"
    # The audit trail is there: the logs and history name owners and token fingerprints.
    assert "token=" in haystacks["worker logs"] and "worker-1" in haystacks["cli output"]


@pytest.mark.slow
@pytest.mark.parametrize("remote", ["dedup", "plain"])
def test_campaign_on_sqlite_with_other_remotes(tmp_path: Path, remote: str) -> None:
    # No stalls against the deduping remote here: a stalled worker's late request could
    # overlap the next epoch's send, which only fencing prevents (RELIABILITY.md).
    pauses = 0.0 if remote == "dedup" else 0.08
    report = run_campaign(
        short(
            tmp_path,
            remote=remote,
            dispatches=40 if remote == "dedup" else 8,  # plain strands targets: fewer sends
            targets=16,
            pause_probability=pauses,
        )
    )
    assert_promises_held(report)
    if remote == "dedup":
        assert report.findings.retried > 0  # left uncertain by a same-key retry
    else:
        # What the promise does not cover, shown honestly: uncertain attempts that landed
        # were found by readback (not re-sent); the rest stay uncertain.
        assert report.findings.reconciled_present > 0
        assert report.findings.left_uncertain == report.findings.left_uncertain_without_effect


@pytest.mark.serial
@pytest.mark.slow
@pytest.mark.parametrize("remote", ["fencing", "dedup", "plain"])
def test_campaign_on_postgresql(pg_database: str, tmp_path: Path, remote: str) -> None:
    restart = local_restart_command()
    if restart is None and os.environ.get("CLAIMFSM_REQUIRE_PG") == "1":
        pytest.fail("CI must restart the local PostgreSQL server, but pg_ctlcluster is missing")
    config = short(
        tmp_path,
        backend="postgresql",
        remote=remote,
        postgres_url=pg_database,
        dispatches=8 if remote == "plain" else 40,
        targets=16 if remote == "plain" else 4,
        restart_command=restart,
        pause_probability=0.0 if remote == "dedup" else 0.08,  # see the SQLite test above
    )
    report = run_campaign(config)
    assert_promises_held(report)
    assert report.backends_terminated > 0
    assert report.server_restarts == (1 if restart else 0)


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.slow
def test_a_killed_harness_leaves_no_worker_or_remote_process_behind(tmp_path: Path) -> None:
    exe = str(Path(sys.executable).parent / "claimfsm")
    harness = subprocess.Popen(
        [exe, "campaign", "--seconds", "60", "--dir", str(tmp_path / "c")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    children: list[int] = []
    while time.monotonic() < deadline and len(children) < 5:  # the remote and 4 workers
        time.sleep(0.2)
        children = children_of(harness.pid)
    assert len(children) >= 5, children
    harness.send_signal(signal.SIGKILL)
    harness.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{c}").exists() for c in children):
        time.sleep(0.2)
    left = [c for c in children if Path(f"/proc/{c}").exists()]
    for c in left:  # clean up before failing
        os.kill(c, signal.SIGKILL)
    assert left == []


def _asks_to_be_killed(report: Any) -> None:
    report.send(("kill", "after-ack"))
    time.sleep(60)


def test_a_worker_asking_to_be_killed_while_the_harness_stops_is_killed(
    tmp_path: Path,
) -> None:
    """The race CI hit: a worker reached a kill point just as the run ended, and waited
    for a SIGKILL that the stopping harness never sent ('did not stop within 20 s')."""
    from claimfsm.campaign._run import _Campaign, _Worker
    from claimfsm.campaign._worker import WorkerSpec

    harness = _Campaign(short(tmp_path))
    harness.prepare()
    mine, theirs = harness.ctx.Pipe(duplex=False)
    process = harness.ctx.Process(target=_asks_to_be_killed, args=(theirs,))
    process.start()
    theirs.close()
    spec = WorkerSpec(
        index=1,
        incarnation=0,
        store_url="memory://",
        remote_address=("127.0.0.1", 1),
        remote_authkey=b"",
        remote_mode="fencing",
        targets=("t",),
        lease_seconds=1.0,
        send_timeout=0.4,
        kill_probability=0.0,
        pause_probability=0.0,
        forced=None,
        resume_probability=0.0,
        run_dir=tmp_path,
        seed=1,
    )
    harness.stop_workers([_Worker(spec, process, mine)])
    assert harness.unexpected == []
    assert harness.kills["after-ack"] == 1 and process.exitcode == -signal.SIGKILL
