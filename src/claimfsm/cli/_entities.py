"""The store commands (``history``, ``claims``, ``sweep``, ``prune``) on a lifecycle of your
own: its entity store (``claimfsm.store.open_entity_store``), opened to read or keep an
existing store, never to create one. The claim protocol's store has its own listings in
``_main``; which store a declaration has is ``runs_on_the_claim_model``."""

from __future__ import annotations

import dataclasses
import json
import shutil
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

import click

from claimfsm.spec import Spec, draws_keys, records_outcome
from claimfsm.store._entity_history import lease_recorded


def beneath(detail: str) -> str:
    """An entry's detail as printed beneath its line: indented, wrapped to the terminal's
    width (COLUMNS when set; 80 in a pipe), no word cut."""
    return textwrap.fill(
        detail,
        width=max(40, shutil.get_terminal_size((80, 24)).columns),
        initial_indent="    ",
        subsequent_indent="    ",
        break_long_words=False,
        break_on_hyphens=False,
    )


def open_existing(spec: Spec, url: str) -> Any:
    """The entity store of ``spec`` at ``url``, which must exist (tables ``lc_NAME``)."""
    from claimfsm.store import open_entity_store

    return open_entity_store(spec, url, create=False)


def print_history(
    spec: Spec,
    url: str,
    entries: Sequence[Any],
    as_json: bool,
    listing: Callable[[tuple[str, ...], Sequence[tuple[str, ...]]], list[str]],
) -> None:
    if as_json:
        for e in entries:
            entry = dataclasses.asdict(e)
            if not lease_recorded(e.lease_deadline):  # JSON has no infinity
                entry["lease_deadline"] = "not recorded"
            for name in ("facts", "owner", "request_key", "detail"):
                if entry[name] is None:
                    entry[name] = "not recorded"
            click.echo(json.dumps(entry))
        return
    # the request key, where an event draws one or the epoch pins a linked draft
    keys = draws_keys(spec) or spec.drafts is not None
    header = (
        *("seq", "key", "epoch", "event", "from → to", "refused", "token", "lease until"),
        *("owner", "facts"),
        *(("request key",) if keys else ()),
    )
    rows = [
        (
            str(e.seq),
            e.key,
            str(e.epoch),
            e.event,
            f"{e.source} → {e.dest}",
            e.refused or "-",
            e.token_fingerprint,
            _deadline(e.lease_deadline),
            "not recorded" if e.owner is None else e.owner or "-",
            _facts(e.facts),
            *((_request_key(e.request_key),) if keys else ()),
        )
        for e in entries
    ]
    noun = "entry" if len(entries) == 1 else "entries"
    click.echo(f"{spec.name} history in {url}: {len(entries)} {noun}")
    lines = listing(header, rows)
    click.echo(lines[0])
    for line, e in zip(lines[1:], entries, strict=True):
        click.echo(line)
        if e.detail:  # what the caller said of it, beneath, as the claim's history shows
            click.echo(beneath(e.detail))


def print_rows(
    spec: Spec,
    url: str,
    rows: Sequence[Any],
    now: float,
    as_json: bool,
    listing: Callable[[tuple[str, ...], Sequence[tuple[str, ...]]], list[str]],
) -> None:
    """One line per entity: its state, epoch, owner, token label, the lease (the seconds
    left by the store's clock, or ``lapsed``), the declared columns, and the draft its
    epoch pinned (linked drafts) and the key its requests carry, where it has them."""
    if as_json:
        for r in rows:
            click.echo(json.dumps(dataclasses.asdict(r)))
        return
    columns = tuple(spec.columns)
    # the request key, where an event draws one or the epoch pins a linked draft
    keys = draws_keys(spec) or spec.drafts is not None
    outcomes = records_outcome(spec)  # readback's outcome, where an event records it
    header = (
        *("key", "epoch", "state", "owner", "token", "lease", *columns),
        *(("draft",) if spec.drafts is not None else ()),
        *(("request key",) if keys else ()),
        *(("outcome",) if outcomes else ()),
    )
    cells = [
        (
            r.key,
            str(r.epoch),
            r.state,
            r.owner or "-",
            r.token_fingerprint,
            _lease(r.lease_deadline, now) if r.state in spec.states_where("lease") else "-",
            *(str(r.columns[c]) for c in columns),
            *((_pinned(r.draft_id, r.draft_version),) if spec.drafts is not None else ()),
            *((_request_key("" if r.request_key == r.key else r.request_key),) if keys else ()),
            *((r.outcome or "-",) if outcomes else ()),
        )
        for r in rows
    ]
    click.echo(f"{spec.name} entities in {url}: {len(rows)}")
    for line in listing(header, cells):
        click.echo(line)


def _pinned(draft: int | None, version: int | None) -> str:
    return "-" if draft is None else f"{draft} v{version}"


def _lease(deadline: float | None, now: float) -> str:
    if deadline is None or deadline <= now:
        return "lapsed"
    return f"{deadline - now:.0f}s left"


def print_swept(spec: Spec, url: str, swept: Sequence[Any], as_json: bool) -> None:
    if as_json:
        click.echo(
            json.dumps({"design": spec.name, "swept": [dataclasses.asdict(s) for s in swept]})
        )
        return
    click.echo(f"swept {spec.name} in {url}: {len(swept)} applied")
    for s in swept:
        click.echo(f"  {s.key} epoch {s.epoch}: {s.event} ({s.source} → {s.dest})")


__all__ = ["open_existing", "print_history", "print_rows", "print_swept"]


def _request_key(key: str | None) -> str:
    """A request key as a listing shows it: "-" for the entity's own."""
    return "not recorded" if key is None else key or "-"


def _deadline(deadline: float | None) -> str:
    """A history entry's lease deadline, as the store's clock reads it."""
    if deadline is None:
        return "-"
    return f"{deadline:.3f}" if lease_recorded(deadline) else "not recorded"


def _facts(facts: dict[str, Any] | None) -> str:
    """The facts a history entry's caller brought, as ``name=value`` (JSON's values)."""
    if facts is None:
        return "not recorded"
    return " ".join(f"{k}={json.dumps(v)}" for k, v in sorted(facts.items())) or "-"
