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

from claimfsm.cli._main import Seconds, _library_errors, main

if TYPE_CHECKING:
    from claimfsm.campaign import CampaignReport


@main.command()
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
    default=10.0,
    show_default=True,
    help="How long the workers run (then sweep, reconcile and judge); with --dispatches,"
    " only a limit.",
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
    help="Where the SQLite file, worker logs and saved handles go (its old ones are replaced).",
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
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
def campaign(
    backend: str,
    remote: str,
    seconds: float,
    dispatches: int | None,
    workers: int,
    targets: int,
    run_dir: Path,
    pg_url: str | None,
    restart_server: bool,
    stall_probability: float,
    seed: int,
    as_json: bool,
) -> None:
    """Kill worker processes at the worst moments, break database connections, restart the
    server; then sweep, reconcile and check every promise against the remote's own log.

    Exits 1 if a promise was broken (overlapping sends, duplicate effects against a fencing
    or deduping remote, claims left sending, epochs missing or reused, history that does
    not replay, or an effect the store cannot account for).
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
        seconds=seconds,
        dispatches=dispatches,
        restart_command=restart,
        pause_probability=stall_probability,
        seed=seed,
    )
    with _library_errors():
        report = run_campaign(config)
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
    else:
        print_report(report)
    if not report.ok:
        sys.exit(1)


def print_report(r: CampaignReport) -> None:
    c, f = r.config, r.findings
    table = Table(
        title=f"claimfsm campaign: {c.backend}, {c.remote} remote, {c.workers} worker processes,"
        f" {c.targets} targets, {r.seconds:.0f} s"
        + (f", stopped by {r.stopped_by}" if c.dispatches is not None else "")
    )
    table.add_column("what")
    table.add_column("count", justify="right")
    kills = ", ".join(f"{k} {v}" for k, v in r.kills.items())
    resumes = ", ".join(f"{k} {v}" for k, v in sorted(r.resumes.items())) or "-"
    rows: list[tuple[str, object]] = [
        ("drafts dispatched (of drafts created)", f"{f.dispatched} of {f.drafts}"),
        ("epochs / sends begun", f"{f.epochs} / {f.sends_begun}"),
        (f"SIGKILLs ({kills})", sum(r.kills.values())),
        ("restarts", r.restarts),
        (
            "stalls past the lease ("
            + (", ".join(f"{k} {v}" for k, v in sorted(r.pauses.items())) or "none")
            + ")",
            sum(r.pauses.values()),
        ),
        (f"  restarted with the saved handle: {resumes}", sum(r.resumes.values())),
    ]
    if c.backend == "postgresql":
        rows += [
            ("backends terminated mid-transaction", r.backends_terminated),
            ("server restarts", r.server_restarts),
        ]
    rows += [
        ("store errors seen by workers (then retried)", r.worker_store_errors),
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
    for what, count in rows:
        table.add_row(what, str(count))
    console = Console()
    console.print(table)
    if c.remote == "plain":
        console.print(
            f"plain remote: {f.reconciled_present} uncertain attempts had landed (found by"
            f" readback, not re-sent); {f.left_uncertain} stay uncertain because a plain remote"
            " cannot prove an effect absent."
        )
    for example in f.overlap_examples:
        console.print(f"overlap: {example}")
    for example in f.audit_examples:
        console.print(f"audit: {example}")
    if r.ok:
        console.print("[green]every promise held[/green]")
    for v in r.violations:
        console.print(f"[red]VIOLATED[/red] {v}")
