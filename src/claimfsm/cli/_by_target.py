"""``claimfsm check --targets T --by-target``: T targets checked by one target's check
(``claimfsm.checker._targets.by_target``; docs/design.md, "Many targets")."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from claimfsm.spec import Spec


def check_by_target(
    spec: Spec, config: Any, bounds: dict[str, Any], heading: str, symmetry: bool, as_json: bool
) -> None:
    """Print what carries over to ``config.targets`` targets, and exit 0 (ok), 1 (the
    one-target check found a violation or a deadlock) or 3 (something does not carry over,
    or a search was cut short)."""
    from claimfsm.checker._by_target import by_target

    found = by_target(spec, config, symmetry=symmetry)
    one, premise, targets = found.one, found.premise, found.targets
    p = found.premise_config
    premise_bounds = (
        f"{p.workers} workers, {p.targets} targets, {p.drafts} draft, {p.epochs} epoch per target"
    )
    missing = found.not_carried()
    props = one.model.properties
    if as_json:
        data = {
            "design": spec.name,
            "bounds": {**bounds, "symmetry": symmetry, "by_target": True},
            "verdict": found.verdict,
            "one_target": one.as_dict(),
            "premise": {
                "bounds": premise_bounds,
                "classes": premise.states,
                "steps": premise.steps,
                "complete": premise.complete,
            },
            "deadlocks": "not carried over" if "deadlocks" in missing else _deadlock(one),
            "properties": {q.name: {"kind": q.kind, "outcome": found.outcome(q)} for q in props},
            "carried": found.carried(),
            "not_carried": missing,
        }
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(f"design {spec.name}: {spec.description}")
        click.echo(heading)
        click.echo(
            f"checked as one target, carried over to {targets} (docs/design.md, Many targets)"
        )
        click.echo("one target:")
        click.echo(one.text())
        click.echo(
            f"premise, over {premise_bounds}: {premise.states:,} classes, {premise.steps:,}"
            " steps, each projected onto both targets"
            + ("" if premise.complete else " (cut short)")
        )
        click.echo(f"for {targets} targets:")
        deadlocks = "not carried over" if "deadlocks" in missing else _deadlock(one)
        click.echo(f"  deadlocks: {deadlocks}")
        ways = found.carried()
        for q in props:
            way = f" (carried over {ways[q.name]})" if q.name in ways else ""
            click.echo(f"  {q.kind:<9} {q.name}: {found.outcome(q)}{way}")
        for name, why in missing.items():
            click.echo(f"\n{name} does not carry over from one target: {why}")
        click.echo(f"verdict: {found.verdict}")
    sys.exit({"ok": 0, "violated": 1}.get(found.verdict, 3))


def _deadlock(one: Any) -> str:
    if one.deadlock is not None:
        return "found (one target)"
    return "none" if one.complete else "none so far"
