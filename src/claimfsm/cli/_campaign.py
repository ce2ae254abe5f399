"""``claimfsm campaign``: the crash and fault campaign from the command line."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.table import Table

from claimfsm.cli._main import Seconds, _declaration, _library_errors, main

if TYPE_CHECKING:
    from claimfsm.campaign import CampaignReport, RemoteFaults


@main.command()
@click.argument("declaration", required=False)
@click.option(
    "--backend",
    type=click.Choice(["sqlite", "postgresql"]),
    default="sqlite",
    show_default=True,
)
@click.option(
    "--remote",
    type=click.Choice(["fencing", "dedup", "plain"]),
    default="fencing",
    show_default=True,
    help="How the remote process protects itself.",
)
@click.option(
    "--seconds",
    type=Seconds(0.5, 24 * 3600.0),
    default=None,
    help="How long the workers run (then sweep, reconcile and judge); default 10. With"
    " --dispatches, only a limit; default 600.",
)
@click.option(
    "--dispatches",
    type=click.IntRange(1, 1_000_000),
    default=None,
    help="Run until the workers began this many sends and every fault was hit at least once"
    " (each kill moment, a stall, a resumed handle; PostgreSQL: a terminated backend, the"
    " restart), instead of for --seconds. Reaching --seconds first is a failure.",
)
@click.option("--workers", type=click.IntRange(1, 32), default=4, show_default=True)
@click.option("--targets", type=click.IntRange(1, 1000), default=4, show_default=True)
@click.option(
    "--dir",
    "run_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("campaign"),
    show_default=True,
    help="Where the SQLite file, worker logs, saved handles and the campaign's own"
    " database driver log (campaign.log) go (its old ones are replaced).",
)
@click.option(
    "--pg-url",
    default=lambda: os.environ.get("CLAIMFSM_PG_URL"),
    help="PostgreSQL database for --backend postgresql; the campaign makes and drops its own"
    " schema there. Default: $CLAIMFSM_PG_URL.",
)
@click.option(
    "--restart-server/--no-restart-server",
    default=True,
    show_default=True,
    help="PostgreSQL: restart the local server once, mid-run (pg_ctlcluster; needs root).",
)
@click.option(
    "--stall-probability",
    type=click.FloatRange(0, 1),
    default=0.02,
    show_default=True,
    help="Per dispatch: a worker stalls (SIGSTOP) before its call or its confirm and wakes"
    " after its lease lapsed.",
)
@click.option(
    "--slow-probability",
    type=click.FloatRange(0, 1),
    default=None,
    help="Per request: the remote runs it for 1.5 to 2.5 leases, past its sender's patience"
    " and lease. Default: none for the claim protocol, 0.1 for a lifecycle of your own.",
)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
def campaign(
    declaration: str | None,
    backend: str,
    remote: str,
    seconds: float | None,
    dispatches: int | None,
    workers: int,
    targets: int,
    run_dir: Path,
    pg_url: str | None,
    restart_server: bool,
    stall_probability: float,
    slow_probability: float | None,
    seed: int,
    as_json: bool,
) -> None:
    """Kill worker processes at the worst moments, break database connections, restart the
    server; then sweep, reconcile and check every promise against the remote's own log.

    Without DECLARATION, the claim protocol's workers dispatch through Dispatcher. Exits 1
    if a promise was broken (overlapping sends, duplicate effects against a fencing or
    deduping remote, claims left sending, epochs missing or reused, history that does not
    replay, or an effect the store cannot account for).

    DECLARATION (a path or a built-in name, e.g. job) runs a lifecycle of your own: its
    workers take entities, start the declared work, run it at the remote process (the
    executor) and end it (work = "ends", or the remote's answered and unanswered events);
    its operator acts with the executor's evidence. Exits 1 if two epochs of an entity ran
    at once where the declaration says exclusive_work, an entity's effect happened twice
    where it says effect_once, a lease is left held, a run is unaccounted for, or the audit
    rejects the history.
    """
    from claimfsm.campaign import CampaignConfig, local_restart_command, run_campaign

    restart = None
    if backend == "postgresql" and restart_server:
        restart = local_restart_command()
        if restart is None:
            raise click.ClickException(
                "no local PostgreSQL cluster to restart (pg_ctlcluster); use --no-restart-server"
            )
    config = CampaignConfig(
        backend=backend,  # type: ignore[arg-type]
        remote=remote,  # type: ignore[arg-type]
        run_dir=run_dir,
        postgres_url=pg_url,
        workers=workers,
        targets=targets,
        seconds=seconds if seconds is not None else 10.0 if dispatches is None else 600.0,
        dispatches=dispatches,
        restart_command=restart,
        pause_probability=stall_probability,
        seed=seed,
        design=declaration,
        faults=None if slow_probability is None else slow_faults(slow_probability),
    )
    with _library_errors():
        if declaration is not None:
            from claimfsm.spec import shipped

            _declaration(declaration, shipped())  # a name it does not know, said as such
        report = run_campaign(config)
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
    else:
        print_report(report)
    if not report.ok:
        sys.exit(1)


def slow_faults(probability: float) -> RemoteFaults:
    """The remote's faults with ``probability`` of a slow request (1.5 to 2.5 leases of
    the campaign's default lease)."""
    from claimfsm.campaign import CampaignConfig, RemoteFaults

    lease = CampaignConfig().lease_seconds
    return RemoteFaults(slow=probability, slow_seconds=(1.5 * lease, 2.5 * lease))


def print_report(r: CampaignReport) -> None:
    if r.design:
        print_lifecycle_report(r)
        return
    from claimfsm.campaign import Findings

    c, f = r.config, r.findings
    assert isinstance(f, Findings)
    rows: list[tuple[str, object]] = [
        ("drafts dispatched (of drafts created)", f"{f.dispatched} of {f.drafts}"),
        ("epochs / sends begun", f"{f.epochs} / {f.sends_begun}"),
        *_fault_rows(r),
        (
            "requests at the remote (lost on arrival / ack lost)",
            f"{f.requests} ({f.lost_requests} / {f.lost_acks})",
        ),
        ("  rejected by the fence / deduplicated", f"{f.fenced} / {f.deduplicated}"),
        ("epochs confirmed", f.confirmed),
        ("epochs uncertain", f.uncertain),
        ("  reconciled present (uncertain attempts that landed)", f.reconciled_present),
        ("  reconciled absent (remote fenced)", f.reconciled_absent),
        ("  retried with the same key", f.retried),
        (
            "  left uncertain (no effect at the remote)",
            f"{f.left_uncertain} ({f.left_uncertain_without_effect})",
        ),
        ("stale operations refused (discard records)", f.discarded),
        ("overlapping sends (two epochs of a target in flight)", f.overlapping_sends),
        ("duplicate effects (per draft)", f.duplicate_effects),
        ("claims left sending", f.left_sending),
        ("epochs missing / reused", f"{f.missing_epochs} / {f.reused_epochs}"),
        ("targets whose history does not replay", f.history_mismatches),
        ("history entries the audit rejects (claimfsm audit)", f.audit_violations),
        ("effects the store does not account for", f.effects_unaccounted),
    ]
    console = Console()
    title = f"claimfsm campaign: {c.backend}, {c.remote} remote, {c.workers} worker processes,"
    console.print(_table(r, title + f" {c.targets} targets", rows))
    if c.remote == "plain":
        console.print(
            f"plain remote: {f.reconciled_present} uncertain attempts had landed (found by"
            f" readback, not re-sent); {f.left_uncertain} stay uncertain because a plain remote"
            " cannot prove an effect absent."
        )
    _print_verdict(console, r, f.overlap_examples, f.audit_examples)


def print_lifecycle_report(r: CampaignReport) -> None:
    """A lifecycle's campaign: what the workers did, what the executor ran, the verdict."""
    from claimfsm.campaign import LifecycleFindings

    c, f = r.config, r.findings
    assert isinstance(f, LifecycleFindings)
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(r.outcomes.items())) or "-"
    ended = ", ".join(f"{k} {v}" for k, v in f.ended.items())
    operated = ", ".join(f"{k} {v}" for k, v in f.operated.items()) or "none"
    left = ", ".join(f"{k} {v}" for k, v in f.left.items()) or "none"
    rows: list[tuple[str, object]] = [
        ("epochs taken / runs started", f"{f.epochs} / {f.started}"),
        (f"  what the workers' attempts came to: {outcomes}", sum(r.outcomes.values())),
        *_fault_rows(r),
        (
            "runs asked of the executor (lost on arrival / answer lost)",
            f"{f.requests} ({f.lost_requests} / {f.lost_acks})",
        ),
        ("  ran / turned away by the fence", f"{f.runs} / {f.fenced}"),
        (f"work ended ({ended})", sum(f.ended.values())),
        (f"operator's events ({operated})", sum(f.operated.values())),
        ("stale owners' refusals recorded", f.refusals),
        (f"entities at the end ({left})", sum(f.left.values())),
        ("overlapping runs (two epochs of an entity at once)", f.overlapping_runs),
        (
            "runs that took effect beyond an entity's first (with linked drafts, a"
            " draft's; judged by effect_once)",
            f.duplicate_effects,
        ),
        ("entities left holding a lease", f.left_leased),
        ("runs the store does not account for", f.runs_unaccounted),
        ("history entries the audit rejects (claimfsm audit)", f.audit_violations),
    ]
    console = Console()
    title = f"claimfsm campaign {r.design}: {c.backend}, {c.remote} executor,"
    title += f" {c.workers} worker processes, {c.targets} entities"
    console.print(_table(r, title, rows))
    _print_verdict(console, r, f.overlap_examples, f.audit_examples)


def _fault_rows(r: CampaignReport) -> list[tuple[str, object]]:
    """What the harness did to the workers and the database, in either campaign."""
    kills = ", ".join(f"{k} {v}" for k, v in r.kills.items())
    resumes = ", ".join(f"{k} {v}" for k, v in sorted(r.resumes.items())) or "-"
    pauses = ", ".join(f"{k} {v}" for k, v in sorted(r.pauses.items())) or "none"
    rows: list[tuple[str, object]] = [
        (f"SIGKILLs ({kills})", sum(r.kills.values())),
        ("restarts", r.restarts),
        (f"stalls past the lease ({pauses})", sum(r.pauses.values())),
        (f"  restarted with the saved handle: {resumes}", sum(r.resumes.values())),
    ]
    if r.config.backend == "postgresql":
        rows += [
            ("backends terminated mid-transaction", r.backends_terminated),
            ("server restarts", r.server_restarts),
        ]
    return [*rows, ("store errors seen by workers (then retried)", r.worker_store_errors)]


def _table(r: CampaignReport, title: str, rows: list[tuple[str, object]]) -> Table:
    """The report's table: ``title`` with the run's length, then ``rows``."""
    title += f", {r.seconds:.0f} s"
    if r.config.dispatches is not None:
        title += f", stopped by {r.stopped_by}"
    table = Table(title=title)
    table.add_column("what")
    table.add_column("count", justify="right")
    for what, count in rows:
        table.add_row(what, str(count))
    return table


def _print_verdict(
    console: Console, r: CampaignReport, overlaps: list[str], audited: list[str]
) -> None:
    """The examples the verdict kept, then whether every promise held."""
    for example in overlaps:
        console.print(f"overlap: {example}")
    for example in audited:
        console.print(f"audit: {example}")
    if r.ok:
        console.print("[green]every promise held[/green]")
    for v in r.violations:
        console.print(f"[red]VIOLATED[/red] {v}")
