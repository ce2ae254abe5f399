"""The ``claimfsm`` command. Every command builds library objects and calls library methods;
a library error becomes a one-line message and exit status 1 (2 for bad usage)."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from claimfsm import __version__
from claimfsm.errors import ClaimFSMError
from claimfsm.spec import event_rows, invariant_words, load_spec

if TYPE_CHECKING:
    from claimfsm.demo import DemoSummary

# The store, the service and the demo are imported by the commands that use them, so that
# `claimfsm check` (run on every change) starts without them: a third of its time at K=3.

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")


@contextmanager
def _library_errors() -> Iterator[None]:
    try:
        yield
    except ClaimFSMError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc


class Seconds(click.FloatRange):
    """A finite number of seconds in a range (click's FloatRange lets NaN through)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return seconds


class Duration(click.FloatRange):
    """A duration: ``30d``, ``12h``, ``90m``, ``45s`` or a plain number of seconds."""

    name = "duration"
    _UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}

    def __init__(self) -> None:
        super().__init__(min=0)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, float):
            text = str(value).strip().lower()
            unit = self._UNITS.get(text[-1:])
            try:
                value = float(text[:-1] if unit else text) * (unit or 1.0)
            except ValueError:
                self.fail(f"{value!r} is not a duration (like 30d, 12h, 90m, 45s)", param, ctx)
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite duration", param, ctx)
        return seconds


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="claimfsm")
def main() -> None:
    """Dispatch claims: at most one in-flight attempt per target, proved and demonstrated."""


@main.command()
@click.option(
    "--db",
    "path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("demo.sqlite"),
    show_default=True,
    help="SQLite file to create (replaced if it exists).",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=4,
    show_default=True,
    help="Concurrent worker threads, each with its own connection.",
)
@click.option(
    "--targets",
    type=click.IntRange(1, 100),
    default=3,
    show_default=True,
    help="Targets (remote destinations) to dispatch to.",
)
@click.option(
    "--drafts",
    type=click.IntRange(1, 1000),
    default=8,
    show_default=True,
    help="Approved drafts per target.",
)
@click.option(
    "--remote",
    type=click.Choice(["fencing", "dedup", "plain"]),
    default="fencing",
    show_default=True,
    help="How the simulated remote protects itself.",
)
@click.option("--seed", type=int, default=7, show_default=True, help="Random seed for faults.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
def demo(
    path: Path, workers: int, targets: int, drafts: int, remote: str, seed: int, as_json: bool
) -> None:
    """Dispatch drafts with crashing, timing-out and stale workers on a SQLite file.

    Exits 1 if an invariant is violated; with a fencing remote that includes any
    overlapping send or duplicate effect.
    """
    from claimfsm.demo import DemoConfig, run_demo

    config = DemoConfig(
        path=path,
        workers=workers,
        targets=targets,
        drafts_per_target=drafts,
        remote=remote,  # type: ignore[arg-type]
        seed=seed,
    )
    with _library_errors():
        summary = run_demo(config)
    if as_json:
        click.echo(json.dumps(summary.as_dict(), indent=2))
    else:
        _print_summary(summary, path)
    if not summary.ok:
        sys.exit(1)


def _print_summary(s: DemoSummary, path: Path) -> None:
    console = Console()
    table = Table(
        title=f"claimfsm demo: {s.workers} workers, {s.targets} targets, "
        f"{s.drafts} drafts, {s.remote} remote, {s.seconds} s"
    )
    table.add_column("what")
    table.add_column("count", justify="right")
    rows = [
        ("drafts dispatched", s.dispatched),
        ("epochs confirmed", s.confirmed),
        ("epochs uncertain (timeouts, lost acks, crashes mid-send)", s.uncertain),
        (
            f"  reconciled by readback: present {s.reconciled_present},"
            f" absent {s.reconciled_absent}",
            s.reconciled,
        ),
        ("  retried with the same key (deduping remote)", s.retried),
        ("epochs expired (worker crashed before sending)", s.expired),
        ("stale operations refused and recorded (discard)", s.discarded),
        ("worker crashes / stale wake-ups", f"{s.crashes} / {s.stale_wakeups}"),
        ("sends seen by the remote / effects applied", f"{s.sends} / {s.effects}"),
        ("overlapping sends to one target", s.overlapping_sends),
        ("duplicate effects", s.duplicate_effects),
        ("claims left uncertain / sending", f"{s.left_uncertain} / {s.left_sending}"),
        ("history replays to the claim rows", "yes" if s.history_replays else "NO"),
    ]
    for what, count in rows:
        table.add_row(what, str(count))
    console.print(table)
    console.print(_promise_line(s))
    for v in s.violations:
        console.print(f"[bold red]violation:[/] {v}")
    if s.ok:
        console.print(f"[green]every promise this remote allows held[/]; the database is {path}")


def _promise_line(s: DemoSummary) -> str:
    """What the promise is against this remote, and how to read the counts above
    (the three tiers of invariant 1, docs/design.md)."""
    if s.remote == "fencing":
        return (
            "fencing remote: the full promise. One attempt in flight per target, each effect at"
            " most once: overlapping sends and duplicate effects must both be 0."
        )
    if s.remote == "dedup":
        return (
            "deduping remote: each effect at most once (duplicate effects must be 0). Attempts"
            f" of two epochs may overlap at the remote ({s.overlapping_sends} here): a same-key"
            " retry leaves uncertain while an earlier request may still be in flight, and only"
            " a fencing remote can refuse it. That is allowed, not a violation."
        )
    return (
        "plain remote: only the store's promise (one epoch of a target sending at a time)."
        f" {s.left_uncertain} claims stay uncertain: a plain remote cannot prove an effect"
        " absent, so readback resolves only the attempts that landed."
    )


@main.command()
@click.argument("declaration", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the declaration as one JSON object.")
def spec(declaration: str | None, as_json: bool) -> None:
    """Print a declaration's states, guards and transitions, and its roles, invariants and
    world. DECLARATION is a path or a built-in name (default: the claim protocol)."""
    with _library_errors():
        from claimfsm.spec import shipped

        s = _declaration(declaration or "claim", shipped())
    flags = ("terminal", "frees_target", "lease", "stale", "pseudo")
    if as_json:
        data = {
            "name": s.name,
            "description": s.description,
            "initial": s.initial,
            "states": [
                {"name": st.name, "meaning": st.meaning, **{f: getattr(st, f) for f in flags}}
                for st in s.states.values()
            ],
            "guards": [
                {"name": g.name, "meaning": g.meaning, "refusal": g.refusal, "stale": g.stale}
                for g in s.guards.values()
            ],
            "transitions": [
                {
                    "event": t.event,
                    "source": t.source,
                    "dest": t.dest,
                    "guards": list(t.guards),
                    "internal": t.internal,
                }
                for t in s.transitions
            ],
            "events": {
                e: {
                    "by": s.role(e),
                    "work": s.work(e),
                    "remote": s.remote_role(e),
                    "sets": list(s.effects[e].sets) if e in s.effects else [],
                    "bumps": list(s.effects[e].bumps) if e in s.effects else [],
                    "durable": e in s.durable_events(),
                    "first": s.first(e),
                }
                for e in s.events
            },
            "columns": [dataclasses.asdict(c) for c in s.columns.values()],
            "invariants": [
                {  # named as the declaration names them
                    {"sources": "from", "goals": "to"}.get(k, k): v
                    for k, v in dataclasses.asdict(i).items()
                    if v not in (None, ())
                }
                for i in s.invariants.values()
            ],
            "world": dict(s.world),
            "drafts": None if s.drafts is None else dataclasses.asdict(s.drafts),
            "lease": {"kept": s.lease_kept},
        }
        click.echo(json.dumps(data, indent=2))
        return
    console = Console()
    states = Table(title=f"{s.name}: states")
    states.add_column("state", no_wrap=True)
    states.add_column("meaning", overflow="fold")
    for st in s.states.values():
        marks = [f for f in flags if getattr(st, f)]
        states.add_row(st.name + (f" [{', '.join(marks)}]" if marks else ""), st.meaning)
    console.print(states)
    guards = Table(title=f"{s.name}: guards")
    guards.add_column("guard", no_wrap=True)
    guards.add_column("meaning", overflow="fold")
    guards.add_column("refusal (exception)", no_wrap=True)
    for g in s.guards.values():
        refusal = (g.refusal or "-") + (" (stale owner)" if g.stale else "")
        guards.add_row(g.name, g.meaning, refusal)
    console.print(guards)
    trans = Table(title=f"{s.name}: transitions")
    for col in ("event", "source", "dest"):
        trans.add_column(col, no_wrap=True)
    trans.add_column("guards", overflow="fold")
    for t in s.transitions:
        if t.internal and t.source != s.initial:
            continue
        dest = "(internal, any state)" if t.internal else t.dest
        source = "*" if t.internal else t.source
        trans.add_row(t.event, source, dest, ", ".join(t.guards) or "-")
    console.print(trans)
    events = Table(title=f"{s.name}: events")
    header, rows = event_rows(s)
    for col in header:
        events.add_column(col, no_wrap=col != "writes", overflow="fold")
    for row in rows:
        events.add_row(*row)
    console.print(events)
    if s.columns:
        columns = Table(title=f"{s.name}: columns")
        for col in ("column", "default", "meaning"):
            columns.add_column(col, overflow="fold")
        for c in s.columns.values():
            columns.add_row(c.name, str(c.default), c.meaning)
        console.print(columns)
    if s.invariants:
        invariants = Table(title=f"{s.name}: invariants")
        for col in ("invariant", "kind", "meaning"):
            invariants.add_column(col, overflow="fold")
        for i in s.invariants.values():
            invariants.add_row(i.name, invariant_words(i), i.meaning)
        console.print(invariants)
    declared = [
        f"{k} {str(v).lower() if isinstance(v, bool) else v}"
        for k, v in s.world.items()
        if k in s.world_declared
    ]
    if declared:
        console.print("world: " + ", ".join(declared))
    if s.drafts is not None:
        console.print(
            "drafts: "
            + (
                "one live draft per target (a second is refused)"
                if s.drafts.one_live_per_target
                else "any number live per target (parallel drafting)"
            )
        )
    if s.lease_kept:
        console.print("lease: the row keeps its last deadline outside the lease states")


def _listing(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Columns aligned to their widest cell. Nothing is ever cut: an identifier is shown
    whole even when the line is wider than the terminal."""
    widths = [max(len(c) for c in column) for column in zip(header, *rows, strict=True)]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    ]


#: The store commands' optional argument: whose store it is.
_STORE_OF = click.argument("declaration", required=False)


def _lifecycle_of(declaration: str | None) -> Any:
    """The declaration named, where it is a lifecycle of its own (its entity store); None
    for the claim protocol (the default), a variant of it or a copy under other names."""
    from claimfsm.spec import runs_on_the_claim_model, shipped

    if declaration is None:
        return None
    spec = _declaration(declaration, shipped())
    return None if runs_on_the_claim_model(spec) else spec


def _on_store(declaration: str | None, url: str, call: Callable[[Any, Any], R]) -> tuple[Any, R]:
    """(the lifecycle DECLARATION names, or None for the claim protocol; ``call(store,
    lifecycle)`` on the store it says, opened only if it exists, and closed after)."""
    from claimfsm.cli._entities import open_existing
    from claimfsm.store import open_store

    lifecycle = _lifecycle_of(declaration)
    store = open_store(url, create=False) if lifecycle is None else open_existing(lifecycle, url)
    try:
        return lifecycle, call(store, lifecycle)
    finally:
        store.close()


@main.command()
@_STORE_OF
@click.option("--db", "url", required=True, help="Store URL, e.g. sqlite:///demo.sqlite")
@click.option("--target", "--key", "target", default=None, help="Only this target (entity key).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per entry.")
def history(declaration: str | None, url: str, target: str | None, as_json: bool) -> None:
    """Print a store's history: every transition and every refused stale operation.

    One line per entry (nothing cut), its detail wrapped beneath it to the terminal's width.
    DECLARATION (a path or a built-in name; default: the claim protocol) says whose store:
    a lifecycle of your own is read from its tables, lc_NAME_history.
    """
    with _library_errors():
        lifecycle, entries = _on_store(declaration, url, lambda store, _: store.history(target))
    if lifecycle is not None:
        from claimfsm.cli._entities import print_history

        print_history(lifecycle, url, entries, as_json, _listing)
        return
    if as_json:
        for e in entries:
            click.echo(json.dumps(dataclasses.asdict(e)))
        return
    # a discard's: the event the stale owner attempted, and the guard or state refusing it
    header = ("seq", "target", "epoch", "event", "from → to", "refused", "owner", "token")
    rows = [
        (
            str(e.seq),
            e.target_id,
            str(e.epoch),
            e.event,
            f"{e.from_state} → {e.to_state}",
            f"{e.attempted} ({e.refused})" if e.attempted is not None else "-",
            e.owner or "-",
            e.token_fingerprint or "-",
        )
        for e in entries
    ]
    lines = _listing(header, rows)
    click.echo(f"history of {url}: {len(entries)} entries")
    click.echo(lines[0])
    from claimfsm.cli._entities import beneath

    for line, e in zip(lines[1:], entries, strict=True):
        click.echo(line)
        if e.detail:
            click.echo(beneath(e.detail))


@main.command()
@_STORE_OF
@click.option("--db", "url", required=True, help="Store URL, e.g. sqlite:///demo.sqlite")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per claim.")
def claims(declaration: str | None, url: str, as_json: bool) -> None:
    """Print every target's current claim, one line each (nothing cut).

    DECLARATION (a path or a built-in name; default: the claim protocol) says whose store:
    for a lifecycle of your own, every entity's row (state, epoch, owner, token label,
    lease, declared columns).
    """
    with _library_errors():
        lifecycle, (rows, now) = _on_store(
            declaration,
            url,
            lambda store, lifecycle: (
                (store.claims(), 0.0) if lifecycle is None else (store.rows(), store.now())
            ),
        )
    if lifecycle is not None:
        from claimfsm.cli._entities import print_rows

        print_rows(lifecycle, url, rows, now, as_json, _listing)
        return
    if as_json:
        for c in rows:
            click.echo(json.dumps(dataclasses.asdict(c)))
        return
    header = ("target", "epoch", "state", "owner", "token", "draft", "key", "outcome")
    cells = [
        (
            c.target_id,
            str(c.epoch),
            c.state,
            c.owner,
            c.token_fingerprint,
            f"{c.draft_id} v{c.draft_version}",
            c.idempotency_key,
            c.outcome or "-",
        )
        for c in rows
    ]
    click.echo(f"claims in {url}: {len(rows)}")
    for line in _listing(header, cells):
        click.echo(line)


@main.command()
@_STORE_OF
@click.option("--db", "url", required=True, help="Store URL, e.g. sqlite:///claims.sqlite")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def sweep(declaration: str | None, url: str, as_json: bool) -> None:
    """Apply lease expiry, and every other sweep event, wherever it holds now.

    For the claim protocol (the default): a lapsed reserved claim expires and a lapsed
    sending claim becomes uncertain, in one transaction. For a lifecycle of your own
    (DECLARATION, a path or a built-in name): every event declared by = "sweep", on every
    entity where its guards hold by the store's clock, each in a transaction of its own.
    Run it from cron or a timer; it is safe beside running workers.
    """
    with _library_errors():
        lifecycle, done = _on_store(declaration, url, lambda store, _: store.sweep())
    if lifecycle is not None:
        from claimfsm.cli._entities import print_swept

        print_swept(lifecycle, url, done, as_json)
        return
    if as_json:
        click.echo(json.dumps({"design": "claim", "swept": [dataclasses.asdict(t) for t in done]}))
        return
    click.echo(f"swept {url}: {len(done)} applied")
    for t in done:
        click.echo(f"  {t.target_id} epoch {t.epoch}: {t.event} ({t.from_state} → {t.to_state})")


@main.command()
@click.option("--db", "url", required=True, help="Store URL, e.g. sqlite:///claims.sqlite")
@click.option(
    "--older-than",
    type=Duration(),
    required=True,
    help="Remove history entries older than this (30d, 12h, 90m, 45s), by the store's clock.",
)
@click.option(
    "--archive",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="First write the removed entries to this new file, one JSON object per line.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@_STORE_OF
def prune(
    url: str, older_than: float, archive: Path | None, as_json: bool, declaration: str | None
) -> None:
    """Remove old history, keeping a checkpoint of each claim row so what remains replays.

    One transaction: entries up to the newest one older than --older-than go; where a
    target's removed entries end, a 'checkpoint' entry records its claim row as of then.
    With --archive, the removed entries are written (and synced) to a new file before
    anything is deleted; if anything fails, nothing is deleted and the file is removed.
    DECLARATION (a path or a built-in name; default: the claim protocol) says whose store;
    a lifecycle's checkpoint records its entity's state and epoch.
    """
    with _library_errors():
        _, result = _on_store(
            declaration,
            url,
            lambda store, _: (
                store.prune_history(older_than)
                if archive is None
                else _prune_to(store, older_than, archive)
            ),
        )
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(result)))
        return
    click.echo(
        f"pruned {result.entries} entries"
        + (f" (up to entry {result.upto_seq})" if result.upto_seq is not None else "")
        + f"; wrote {result.checkpoints} checkpoint"
        + ("" if result.checkpoints == 1 else "s")
        + (f"; archived to {archive}" if archive is not None and result.entries else "")
    )


@main.command()
@click.option(
    "--db", "url", required=True, help="Store URL, e.g. sqlite:///claims.sqlite (read only)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.option(
    "--show",
    type=click.IntRange(0),
    default=50,
    show_default=True,
    help="Print at most this many violations in full (all are counted).",
)
@_STORE_OF
def audit(url: str, as_json: bool, show: int, declaration: str | None) -> None:
    """Check a store's history after the fact, read-only; exit 1 on any violation.

    Every target's history must be a legal path of the declaration and replay to its claim
    row; epochs strictly increase; no stale owner or epoch changed anything; leases were
    used only while live; uncertain was left only with readback evidence. Streams the
    history from one snapshot, with progress on stderr. DECLARATION (a path or a built-in
    name; default: the claim protocol) says whose store: a lifecycle of your own is checked
    against its declaration (its paths, epochs, the guards history shows, its row and
    left_only_by invariants, and each row against its history).
    """
    import time

    from claimfsm.audit import VIOLATIONS, audit_lifecycle
    from claimfsm.audit import audit as run_audit

    started = time.monotonic()
    shown = {"at": started}

    def progress(entries: int, targets: int) -> None:
        now = time.monotonic()
        if now - shown["at"] >= 1.0:
            shown["at"] = now
            click.echo(
                f"audit: {entries:,} entries, {targets:,} targets, {now - started:.0f} s",
                err=True,
            )

    with _library_errors():
        lifecycle = _lifecycle_of(declaration)
        if lifecycle is None:
            result = run_audit(url, progress=progress, keep=show)
        else:
            result = audit_lifecycle(lifecycle, url, progress=progress, keep=show)
    target, targets, rows = (
        ("target", "targets", "claim rows") if lifecycle is None else ("entity", "entities", "rows")
    )
    if as_json:
        click.echo(json.dumps(result.as_dict()))
    else:
        click.echo(
            f"audit: {result.entries:,} history entries, {result.targets:,} {targets},"
            f" {result.claims:,} {rows} in {time.monotonic() - started:.1f} s:"
            + (" no violations" if result.ok else f" {_count(result.total, 'violation')}")
        )
        for kind, n in sorted(result.counts.items()):
            click.echo(f"  {kind}: {n:,} ({VIOLATIONS[kind]})")
        for v in result.violations:
            seqs = ", ".join(map(str, v.seqs)) or "-"
            click.echo(f"[{v.kind}] {target} {v.target_id!r}, entries {seqs}: {v.message}")
        if result.total > len(result.violations):
            click.echo(f"({result.total - len(result.violations):,} more not shown; --show N)")
    if not result.ok:
        sys.exit(1)


def _prune_to(store: Any, older_than: float, archive: Path) -> Any:
    """Prune with the removed entries written to ``archive`` (a new file) first."""
    import os

    try:
        out = archive.open("x", encoding="utf-8")
    except FileExistsError:
        raise click.ClickException(
            f"{archive} exists; give a new file (an archive is never overwritten)"
        ) from None
    except OSError as exc:
        raise click.ClickException(f"cannot create {archive}: {exc.strerror}") from None

    def write(entries: list[Any]) -> None:
        for e in entries:
            out.write(json.dumps(dataclasses.asdict(e)) + "\n")
        out.flush()
        os.fsync(out.fileno())  # on disk before the delete can commit

    try:
        with out:
            result = store.prune_history(older_than, archive=write)
    except BaseException:
        archive.unlink(missing_ok=True)  # nothing was pruned: no archive of it either
        raise
    if not result.entries:
        archive.unlink(missing_ok=True)
    return result


#: The claim world's options that ``check`` and ``report`` share (None: the declaration's).
_DRAFTS = click.option(
    "--drafts",
    type=click.IntRange(1, 6),
    default=None,
    help="Drafts per target [the declaration's [world]: claim 2].",
)
_REMOTE = click.option(
    "--remote",
    type=click.Choice(["fencing", "dedup", "plain"]),
    default=None,
    help="The remote's mode [the declaration's [world]: claim fencing].",
)


@main.command()
@click.argument("declaration", required=False)
@click.option(
    "--design",
    default="claim",
    show_default=True,
    help="The declaration to check: claim (correct) or a wrong design (--list).",
)
@click.option("--list", "list_designs", is_flag=True, help="List the known-wrong designs.")
@click.option(
    "--workers",
    type=click.IntRange(1, 6),
    default=None,
    help="Workers [the declaration's [world]: claim 3].",
)
@click.option(
    "--targets",
    type=click.IntRange(1, 6),
    default=None,
    help="Targets, or a lifecycle's entities [the declaration's [world] keys: claim 1].",
)
@_DRAFTS
@click.option(
    "--epochs",
    type=click.IntRange(1, 8),
    default=None,
    help="Acquisitions (takes) per target, the bound that keeps the space finite"
    " [the declaration's [world]: claim 3].",
)
@click.option(
    "--retries",
    type=click.IntRange(0, 6),
    default=None,
    help="Same-key retries per epoch (deduping remote) [the declaration's [world]: claim 1].",
)
@_REMOTE
@click.option("--no-crashes", is_flag=True, help="Leave out worker crashes and stale wake-ups.")
@click.option(
    "--no-wakes",
    is_flag=True,
    help="A crashed worker forgets its handle instead of keeping it to wake up with"
    " (the declaration's [world] wakes = false).",
)
@click.option(
    "--fence",
    type=click.Choice(["any_step", "with_readback"]),
    default=None,
    help="When the operator fences: at any step, or only inside an operator's readback"
    " that finds nothing [the declaration's [world]: claim with_readback, else any_step].",
)
@click.option(
    "--world",
    type=click.Choice(["claim", "lifecycle"]),
    default=None,
    help="The checker world: claim (the claim protocol's world of workers, drafts and a"
    " remote; the claim and its variants only) or lifecycle (the world of any declared"
    " lifecycle, one row per entity, in which the claim reaches the same states)"
    " [claim for the claim and its variants, else lifecycle].",
)
@click.option("--no-symmetry", is_flag=True, help="Do not reduce by worker symmetry.")
@click.option("--max-depth", type=click.IntRange(1), default=None)
@click.option("--max-states", type=click.IntRange(1), default=None)
@click.option("--time-limit", type=Seconds(min=0.1, max=24 * 3600.0), default=None, help="Seconds.")
@click.option(
    "--replay",
    is_flag=True,
    help="Also replay the model's coverage paths on real SQLite files (one target).",
)
@click.option(
    "--replay-token",
    "token",
    default=None,
    metavar="TOKEN",
    help="Play the path a replay token names (printed with every counterexample) on the"
    " model and then on a real SQLite store, instead of searching. Give the same design and"
    " bounds the token was printed with.",
)
@click.option(
    "--diagram",
    "diagram_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write each counterexample drawn on the state diagram, and as a sequence chart.",
)
@click.option(
    "--engine",
    type=click.Choice(["builtin", "spin"]),
    default="builtin",
    show_default=True,
    help="spin: generate Promela from the declaration and search it with SPIN (needs spin and"
    " a C compiler; no symmetry reduction).",
)
@click.option(
    "--bitstate",
    is_flag=True,
    help="With --engine spin: a bitstate (supertrace) search, a few bits per state, for"
    " bounds past the memory of an exhaustive one (it may miss states).",
)
@click.option(
    "--spin-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="With --engine spin: leave the generated Promela (model.pml), the verifier and any"
    " trail in this directory.",
)
@click.option(
    "--by-target",
    is_flag=True,
    help="With --targets 2 or more: check one target (a lifecycle's entity) and carry the"
    " verdict over to T of them where the premise of their independence holds (docs/design.md,"
    " Many targets); what does not carry over is named, and the verdict is then incomplete"
    " (exit 3).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_context
def check(
    ctx: click.Context,
    declaration: str | None,
    design: str,
    list_designs: bool,
    workers: int | None,
    targets: int | None,
    drafts: int | None,
    epochs: int | None,
    retries: int | None,
    remote: str | None,
    no_crashes: bool,
    no_wakes: bool,
    fence: str | None,
    world: str | None,
    no_symmetry: bool,
    max_depth: int | None,
    max_states: int | None,
    time_limit: float | None,
    replay: bool,
    token: str | None,
    diagram_dir: Path | None,
    engine: str,
    bitstate: bool,
    spin_dir: Path | None,
    by_target: bool,
    as_json: bool,
) -> None:
    """Model-check a declaration: every interleaving, within the bounds given.

    DECLARATION is a built-in name (--list shows the wrong designs) or the path of a
    declaration: the claim protocol or a variant of it (`base = "../claim.toml"`) runs on
    the claim model (or, with --world lifecycle, on the model of a declared lifecycle,
    where it reaches the same states); any other lifecycle runs on the model of a declared
    lifecycle, its world and invariants read from the declaration. --design does the same
    by name.

    Exit status 0: every property holds and the search was complete. 1: a property is
    violated (the shortest counterexample is printed) or a deadlock was found. 3: a limit
    stopped the search before it was complete.
    """
    from claimfsm.checker import Checker, ClaimModelConfig, claim_crash_words, claim_model
    from claimfsm.cli._lifecycle import check_lifecycle
    from claimfsm.spec import (
        claim_spec,
        runs_on_the_claim_model,
        shipped,
        wrong_designs,
    )

    with _library_errors():
        if list_designs:
            for name, s in wrong_designs().items():
                click.echo(
                    json.dumps({"design": name, "description": s.description})
                    if as_json
                    else f"{name}  {s.description}"
                )
            return
        spec = _declaration(declaration or design, shipped())
        design = spec.name
        claim = runs_on_the_claim_model(spec)
        # a known-wrong claim design stops at its first counterexample, in either world
        wrong_claim = claim and design != claim_spec().name
        if world == "claim" and not claim:
            raise click.UsageError(
                f"--world claim: the claim protocol's world runs the claim and its variants"
                f" only; {spec.name} is a lifecycle of its own: leave out --world, or give"
                " --world lifecycle"
            )
        if not claim or world == "lifecycle":
            check_lifecycle(
                ctx,
                spec,
                workers=workers,
                keys=targets,
                epochs=epochs,
                no_crashes=no_crashes,
                no_wakes=no_wakes,
                remote=remote,
                retries=retries,
                fence=fence,
                no_symmetry=no_symmetry,
                limits={
                    "max_depth": max_depth,
                    "max_states": max_states,
                    "time_limit": time_limit,
                },
                token=token,
                as_json=as_json,
                draw=(lambda report: _draw_counterexamples(spec, report, diagram_dir))
                if diagram_dir
                else None,
                spin={"bitstate": bitstate, "keep": spin_dir} if engine == "spin" else None,
                replay_paths=replay,
                drafts=drafts,
                claim_keys=claim,
                stop_on_violation=wrong_claim,
                by_target=by_target,
            )
            return
        if engine != "spin" and (bitstate or spin_dir is not None):
            raise click.UsageError("--bitstate and --spin-dir go with --engine spin")
        if epochs is not None and epochs > 6:
            raise click.UsageError("--epochs: the claim model takes 1 to 6")
        if fence == "any_step":
            raise click.UsageError(
                "--fence any_step: the claim world's operator fences only inside reconcile's"
                " readback, where it finds nothing (with_readback); a lifecycle of your own"
                " may fence at any step"
            )
        config = ClaimModelConfig.declared(
            spec,
            workers=workers,
            targets=targets,
            drafts=drafts,
            epochs=epochs,
            retries=retries,
            remote=remote,
            crashes=False if no_crashes else None,
            wakes=False if no_wakes else None,
        )
        workers, targets, drafts = config.workers, config.targets, config.drafts
        epochs, retries, remote = config.epochs, config.retries, config.remote
        no_crashes = not config.crashes
        if token is not None:
            played = _replay_token(spec, config, token)
            if as_json:
                click.echo(json.dumps({"design": design, "token": token, **vars(played)}, indent=2))
            else:
                click.echo(f"design {design}: {spec.description}")
                click.echo(f"replay token {token}:")
                click.echo(played.text())
            sys.exit(1 if played.violated or played.store_error else 0)
        bounds = {
            "workers": workers,
            "targets": targets,
            "drafts": drafts,
            "epochs": epochs,
            "retries": retries,
            "remote": remote,
            "crashes": not no_crashes,
            "wakes": config.crashes and config.wakes,
        }
        heading = (
            f"bounds: {_count(workers, 'worker')}, {_count(targets, 'target')}, "
            f"{_count(drafts, 'draft')} per target, {_count(epochs, 'epoch')} per target, "
            f"{remote} remote" + claim_crash_words(config)
        )
        if by_target:
            from claimfsm.cli._by_target import check_by_target

            if targets < 2 or engine != "builtin" or replay or diagram_dir is not None:
                raise click.UsageError(
                    "--by-target goes with --targets 2 or more and the built-in engine,"
                    " without --replay or --diagram"
                )
            if max_depth is not None or max_states is not None or time_limit is not None:
                raise click.UsageError("--by-target searches whole spaces: drop the limits")
            check_by_target(spec, config, bounds, heading, not no_symmetry, as_json)
        if engine == "spin":
            from claimfsm.cli._lifecycle import _check_with_spin

            covered = _replay_on_sqlite(spec, config) if replay else None
            _check_with_spin(
                spec,
                config,
                bounds,
                heading + " (no symmetry reduction)",
                {"bitstate": bitstate, "keep": spin_dir},
                {"max_depth": max_depth, "max_states": max_states, "time_limit": time_limit},
                (lambda report: _draw_counterexamples(spec, report, diagram_dir))
                if diagram_dir
                else None,
                as_json,
                coverage=None if covered is None else (covered.text(), _coverage_json(covered)),
            )
            return
        checker = (
            Checker(claim_model(spec, config))
            .symmetry(not no_symmetry)
            .max_depth(max_depth)
            .max_states(max_states)
            .time_limit(time_limit)
            .stop_on_violation(wrong_claim)
            .progress(
                lambda unique, depth, secs: click.echo(
                    f"... {unique:,} unique states, depth {depth}, {secs:.0f} s", err=True
                )
            )
        )
        report = checker.run()
        coverage = _replay_on_sqlite(spec, config) if replay else None
        drawn = _draw_counterexamples(spec, report, diagram_dir) if diagram_dir else []
    if as_json:
        data = report.as_dict()
        if coverage is not None:
            data["replay"] = _coverage_json(coverage)
        data["design"] = design
        data["bounds"] = {**bounds, "symmetry": not no_symmetry}
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(f"design {design}: {spec.description}")
        click.echo(heading)
        click.echo(report.text())
        if coverage is not None:
            click.echo(coverage.text())
        for path in drawn:
            click.echo(f"wrote {path}")
        click.echo(f"verdict: {report.verdict}")
    sys.exit({"ok": 0, "violated": 1}.get(report.verdict, 3))


def _coverage_json(coverage: Any) -> dict[str, Any]:
    """``check --replay``'s coverage of the claim model's paths on SQLite, as JSON."""
    return {
        "paths": coverage.paths,
        "steps": coverage.steps,
        "declared_transitions": len(coverage.declared),
        "transitions_reached": len(coverage.declared & coverage.transitions),
        "missing": sorted(" ".join(t) for t in coverage.missing),
        "refusals": sorted(":".join(r) for r in coverage.refusals),
    }


@main.command()
@click.argument("declaration")
@click.option("--db", "url", required=True, help="The store: sqlite:///PATH or postgresql://...")
@click.option(
    "--examples",
    type=click.IntRange(1, 100_000),
    default=50,
    show_default=True,
    help="Random programs, after the model's guided paths.",
)
@click.option(
    "--steps",
    type=click.IntRange(1, 1000),
    default=30,
    show_default=True,
    help="Steps per random program at most.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 6),
    default=None,
    help="Workers, each with its own connection [the declaration's [world]].",
)
@click.option(
    "--seed", type=int, default=None, help="Randomise with this seed (default: derandomised)."
)
@click.option(
    "--guided/--no-guided",
    default=True,
    show_default=True,
    help="Play the model's guided paths before the random programs.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def verify(
    declaration: str,
    url: str,
    examples: int,
    steps: int,
    workers: int | None,
    seed: int | None,
    guided: bool,
    as_json: bool,
) -> None:
    """Run the generated stateful test of a declaration against a real store.

    DECLARATION is a path or a built-in name. Workers, each on its own connection, take,
    act on stale handles, crash and see the clock jump, as the checker's model of the
    declaration does; after every step the store must agree with the model, and the
    declared invariants must hold. First the model's shortest path to every transition,
    refusal and invariant violation is played, then random programs (Hypothesis). A
    lifecycle of your own uses tables verify_NAME and verify_NAME_history (and
    verify_NAME_drafts, with linked drafts), dropped afterwards. The claim protocol
    (claim.toml, a variant, or a copy under other names) uses a new schema
    claimfsm_verify_... in a PostgreSQL database, or a new SQLite file
    (the path must not exist yet), removed afterwards. Exit 0, or 1 with the failing
    program printed.
    """
    from claimfsm.cli._lifecycle import verify_lifecycle
    from claimfsm.spec import shipped

    with _library_errors():
        spec = _declaration(declaration, shipped())
        verify_lifecycle(
            spec,
            url,
            examples=examples,
            steps=steps,
            workers=workers,
            seed=seed,
            guided=guided,
            as_json=as_json,
        )


def _declaration(name: str, builtin: dict[str, Any]) -> Any:
    """A built-in declaration by name, or the declaration in the file ``name``."""
    if name in builtin:
        return builtin[name]
    path = Path(name)
    try:
        is_file = path.suffix == ".toml" or path.exists()
    except (OSError, ValueError):  # a name too long for a path, a NUL byte
        is_file = False
    if is_file:
        return load_spec(path)  # SpecError names the file and what is wrong in it
    raise click.UsageError(
        f"no declaration {name[:100]!r}: give the path of a .toml declaration or one of: "
        + ", ".join(builtin)
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _sqlite_per_path(folder: Path, workers: int, spec: Any) -> Callable[[Any], Any]:
    """A store factory for replays: a new SQLite file for each path, opened once by the
    environment and once by each worker (their own connections). The stores run the
    correct design: the base a variant overlays (a wrong design's claim.toml), or ``spec``
    itself, in its own names."""
    from claimfsm.machine import ClaimMachine
    from claimfsm.spec import base_of
    from claimfsm.store import SQLiteStore

    machine = ClaimMachine(base_of(spec) or spec)
    calls = [0]

    def open_store(clock: Any) -> SQLiteStore:
        n = calls[0] // (workers + 1)
        calls[0] += 1
        return SQLiteStore(folder / f"path-{n}.sqlite", clock=clock, machine=machine)

    return open_store


def _replay_on_sqlite(spec: Any, config: Any) -> Any:
    """Replay the coverage paths of ``spec``'s model, each on fresh SQLite files."""
    import tempfile

    from claimfsm.replay import replay_coverage

    if config.targets != 1:
        raise click.UsageError("--replay runs one-target models: use --targets 1")
    with tempfile.TemporaryDirectory(prefix="claimfsm-replay-") as tmp:
        opener = _sqlite_per_path(Path(tmp), config.workers, spec)
        return replay_coverage(spec, config, opener)


def _replay_token(spec: Any, config: Any, token: str) -> Any:
    """The path ``token`` names, on the model and on a real SQLite store."""
    import tempfile

    from claimfsm.replay import replay_token

    if config.targets != 1:
        raise click.UsageError("--replay-token plays one-target models: use --targets 1")
    with tempfile.TemporaryDirectory(prefix="claimfsm-token-") as tmp:
        opener = _sqlite_per_path(Path(tmp), config.workers, spec)
        return replay_token(spec, config, token, opener)


@main.command()
@click.argument("declaration", required=False)
@click.option(
    "--design",
    default="all",
    show_default=True,
    help="A built-in declaration (claim, job, a wrong design: check --list), or all.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("diagrams"),
    show_default=True,
    help="Folder to write into.",
)
@click.option("--no-images", is_flag=True, help="Write only the DOT and Mermaid text.")
def diagram(declaration: str | None, design: str, out: Path, no_images: bool) -> None:
    """Write state diagrams generated from declarations: DOT, Mermaid, SVG and PNG.

    DECLARATION is a path to a declaration of your own (any lifecycle) or a built-in name;
    without it, --design chooses (all: every built-in one). SVG and PNG need Graphviz's
    dot; without it the text formats are still written.
    """
    from claimfsm.diagrams import GraphvizMissing, write_diagrams
    from claimfsm.spec import shipped

    with _library_errors():
        specs = shipped()
        if declaration is None and design == "all":
            chosen = list(specs.values())
        else:
            chosen = [_declaration(declaration or design, specs)]
        images = not no_images
        for spec in chosen:
            try:
                paths = write_diagrams(spec, out, images=images)
            except GraphvizMissing as exc:
                click.echo(f"note: {exc}", err=True)
                images = False
                paths = write_diagrams(spec, out, images=False)
            click.echo(" ".join(str(p) for p in paths))


def _draw_counterexamples(spec: Any, report: Any, out: Path) -> list[Path]:
    """Each counterexample on the state diagram (DOT, SVG) and as a sequence chart (SVG,
    and Mermaid text); a variant's changes from its base drawn blue."""
    from claimfsm.checker import entity_path_steps, entity_word, path_steps
    from claimfsm.diagrams import (
        CLAIM_LANES,
        GraphvizMissing,
        lifecycle_lanes,
        render,
        sequence_mermaid,
        sequence_svg,
        to_dot,
    )
    from claimfsm.spec import base_of, differences, has_remote, runs_on_the_claim_model

    out.mkdir(parents=True, exist_ok=True)
    base = base_of(spec)
    changes = differences(base, spec) if base is not None else None
    own = not runs_on_the_claim_model(spec)
    lanes = lifecycle_lanes(entity_word(spec), has_remote(spec)) if own else CLAIM_LANES
    written = []
    for prop in report.violations:
        found = report.discoveries.get(prop.name)
        if found is None:
            continue
        if own:
            steps = entity_path_steps(spec, report.model, found.path)
        else:
            steps = path_steps(spec, report.model, found.path)
        stem = out / f"{spec.name}-{prop.name}"
        dot = to_dot(spec, steps, changes=changes, violation=prop.description)
        stem.with_suffix(".dot").write_text(dot, encoding="utf-8")
        title = f"{spec.name}: {prop.name}"
        seq = out / f"{spec.name}-{prop.name}-sequence"
        seq.with_suffix(".svg").write_text(
            sequence_svg(steps, title, prop.description, lanes), encoding="utf-8"
        )
        seq.with_suffix(".mmd").write_text(sequence_mermaid(steps, title, lanes), encoding="utf-8")
        written += [stem.with_suffix(".dot"), seq.with_suffix(".svg"), seq.with_suffix(".mmd")]
        try:
            stem.with_suffix(".svg").write_bytes(render(dot, "svg"))
            written.append(stem.with_suffix(".svg"))
        except GraphvizMissing as exc:
            click.echo(f"note: {exc}; the DOT file and the sequence charts were written", err=True)
    return written


@main.command()
@click.argument("declaration", required=False)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("review.html"),
    show_default=True,
)
@click.option(
    "--variant",
    "variants",
    multiple=True,
    metavar="PATH",
    help="A known-wrong variant of the declaration to show failing (repeat for more); the"
    " shipped ones of a built-in declaration are shown anyway.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 6),
    default=None,
    help="Workers [the declaration's [world]].",
)
@_DRAFTS
@_REMOTE
def report(
    declaration: str | None,
    out: Path,
    variants: tuple[str, ...],
    workers: int | None,
    drafts: int | None,
    remote: str | None,
) -> None:
    """Write the design-review report: one self-contained HTML page.

    DECLARATION is a path or a built-in name (default: the claim protocol). The page holds
    the declaration as tables, the state diagram, the invariants with the checker's verdict
    for these bounds, and every known-wrong design with its counterexample: for a built-in
    declaration its shipped ones, and each --variant given.
    """
    from claimfsm.checker import ClaimModelConfig, EntityModelConfig
    from claimfsm.review import ReviewInputs, review_html
    from claimfsm.spec import (
        base_of,
        is_lifecycle_of_its_own,
        shipped,
        wrong_designs,
    )

    with _library_errors():
        spec = _declaration(declaration or "claim", shipped())
        wrong = {
            name: s
            for name, s in wrong_designs().items()
            if (base := base_of(s)) is not None and base.path == spec.path
        }
        for given in variants:
            variant = _declaration(given, {})
            base = base_of(variant)
            if (
                base is None
                or base.path is None
                or spec.path is None
                or (base.path.resolve() != spec.path.resolve())
            ):
                raise click.UsageError(
                    f"--variant {given}: not a variant of {spec.name} (its base must be"
                    f" {spec.path})"
                )
            wrong[variant.name] = variant
        config: ClaimModelConfig | EntityModelConfig
        if is_lifecycle_of_its_own(spec):
            config = EntityModelConfig(workers=workers)
        else:
            config = ClaimModelConfig.declared(
                spec, workers=workers, targets=1, drafts=drafts, remote=remote
            )
        page = review_html(ReviewInputs(spec, wrong, config, __version__))
        out.write_text(page, encoding="utf-8")
    click.echo(f"wrote {out} ({len(page):,} bytes)")
