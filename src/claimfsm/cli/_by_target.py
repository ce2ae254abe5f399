"""``claimfsm check --targets T --by-target``: T targets checked by one target's check
(``claimfsm.checker._targets.by_target``; docs/design.md, "Many targets")."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from claimfsm.spec import Spec


def check_by_target(
    spec: Spec,
    config: Any,
    bounds: dict[str, Any],
    heading: str,
    symmetry: bool,
    as_json: bool,
    projection: Any = None,
) -> None:
    """Print what carries over to the config's T keys (the claim world's targets; a
    lifecycle's entities with its ``projection``), and exit 0 (ok), 1 (the one-key check
    found a violation or a deadlock) or 3 (something does not carry over, or a search was
    cut short)."""
    from claimfsm.checker._by_target import by_target
    from claimfsm.checker._targets import CLAIM_TARGETS

    pr = projection or CLAIM_TARGETS
    found = by_target(spec, config, symmetry=symmetry, projection=pr)
    one, premise, targets = found.one, found.premise, found.targets
    kw = pr.key_word
    premise_bounds = found.premise_words
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
            "deadlocks": "not carried over" if "deadlocks" in missing else _deadlock(one, kw),
            "properties": {q.name: {"kind": q.kind, "outcome": found.outcome(q)} for q in props},
            "carried": found.carried(),
            "not_carried": missing,
        }
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(f"design {spec.name}: {spec.description}")
        click.echo(heading)
        click.echo(f"checked as one {kw}, carried over to {targets} (docs/design.md, Many targets)")
        click.echo(f"one {kw}:")
        click.echo(one.text())
        click.echo(
            f"premise, over {premise_bounds}: {premise.states:,} classes, {premise.steps:,}"
            f" steps, each projected onto both {kw}s" + ("" if premise.complete else " (cut short)")
        )
        click.echo(f"for {targets} {kw}s:")
        deadlocks = "not carried over" if "deadlocks" in missing else _deadlock(one, kw)
        click.echo(f"  deadlocks: {deadlocks}")
        ways = found.carried()
        for q in props:
            way = f" (carried over {ways[q.name]})" if q.name in ways else ""
            click.echo(f"  {q.kind:<9} {q.name}: {found.outcome(q)}{way}")
        for name, why in missing.items():
            click.echo(f"\n{name} does not carry over from one {kw}: {why}")
        click.echo(f"verdict: {found.verdict}")
    sys.exit({"ok": 0, "violated": 1}.get(found.verdict, 3))


def _deadlock(one: Any, kw: str) -> str:
    if one.deadlock is not None:
        return f"found (one {kw})"
    return "none" if one.complete else "none so far"
