"""A declared lifecycle's guards and transitions in Python, for any declaration: what a
store of a lifecycle of your own uses to explain a refusal (which guard failed, and
whether the caller is a stale owner), and to check that its compiled SQL agrees.

A guard is a predicate over the entity's row, the caller and the store's clock, as its
declared kind says (``spec.GUARD_KINDS``). The claim protocol's kinds over drafts
(``draft_ready``, ``draft_pinned``) have no meaning here and are refused by the store.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from claimfsm.spec import Spec, TransitionDecl, compare


@dataclass(frozen=True)
class RowView:
    """An entity's row as the guards read it."""

    state: str
    epoch: int = 0
    token_hash: str | None = None
    lease_deadline: float | None = None
    columns: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class CallerView:
    """Who acts: the epoch it names (None: none), the hash of the token it presents (None:
    none), its facts (``running``, ``fenced_through``) and the store's time."""

    epoch: int | None
    token_hash: str | None
    facts: Mapping[str, Any]
    now: float


def guard_holds(spec: Spec, name: str, row: RowView, caller: CallerView) -> bool:
    g = spec.guards[name]
    if g.kind == "owner":
        return (
            caller.epoch == row.epoch
            and caller.token_hash is not None
            and row.token_hash is not None
            and hmac.compare_digest(caller.token_hash, row.token_hash)
        )
    if g.kind == "epoch":
        return caller.epoch == row.epoch
    if g.kind == "live":
        return row.lease_deadline is not None and caller.now < row.lease_deadline
    if g.kind == "lapsed":
        return row.lease_deadline is None or caller.now >= row.lease_deadline
    if g.kind == "free":
        return row.state == spec.initial or spec.states[row.state].frees_target
    if g.kind == "compare":
        right = g.value if g.column is None else _column(row, g.column)
        if g.fact is None:
            return compare(g.op or "=", _column(row, g.column or ""), g.value)
        return compare(g.op or "=", caller.facts.get(g.fact), right)
    raise ValueError(f"guard kind {g.kind!r} has no meaning for a lifecycle of your own")


def _column(row: RowView, column: str) -> Any:
    return row.epoch if column == "epoch" else row.columns.get(column)


def explain(
    spec: Spec, event: str, row: RowView, caller: CallerView
) -> tuple[TransitionDecl | None, list[str]]:
    """The transition ``event`` takes from the row's state (the first whose guards all
    hold), or None and the guards that failed (in the order the transitions name them;
    empty when no transition of ``event`` leaves that state)."""
    failing: list[str] = []
    for t in spec.transitions_for(event, row.state):
        bad = [g for g in t.guards if not guard_holds(spec, g, row, caller)]
        if not bad:
            return t, []
        failing += [g for g in bad if g not in failing]
    return None, failing
