"""The guards' meaning in Python, compiled from each guard's declared kind, for every
declaration: the claim protocol's machine and any lifecycle's run these same predicates,
and the stores' SQL (``claimfsm.store._predicates``, compiled from the same kinds) must
agree with them.

Each guard takes the entity's current row (None when it has none yet: the claim protocol's
``ClaimRow`` or any lifecycle's ``RowView``) and the caller (``Facts`` or ``CallerView``).
Both rows give ``state``, ``epoch``, ``token_hash``, ``lease_deadline`` and ``column(name)``;
both callers ``epoch``, ``token_hash``, ``now`` and ``fact(name)``; the claim's kinds over
drafts read the claim's rows and facts alone (a lifecycle's store refuses them). The tests
prove Python and SQL agree on every declared transition; ``why`` below gives the sentence a
refusal carries, by kind too.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any

from claimfsm.errors import SpecError
from claimfsm.machine._facts import ClaimRow, Facts
from claimfsm.spec import GuardDecl, Spec, compare

Guard = Callable[[Any, Any], bool]  # (Row | None, Caller) -> bool


def build_guards(spec: Spec) -> dict[str, Guard]:
    """Every declared guard as a Python predicate, by its kind."""
    return {name: compile_guard(spec, g) for name, g in spec.guards.items()}


def compile_guard(spec: Spec, g: GuardDecl) -> Guard:
    """One guard's Python meaning: a predicate over the row (None when the entity has no
    row yet) and the caller. A row without a lease deadline is never live and always
    lapsed, as in SQL (``_predicates``)."""
    kind = g.kind
    if kind == "free":
        free = frozenset([spec.initial, *spec.states_where("frees_target")])
        return lambda row, f: row is None or row.state in free
    if kind == "draft_ready":  # the claim protocol's callers only (Facts)
        return lambda row, f: (
            f.draft is not None
            and f.draft.status == "approved"
            and f.draft.target_id == f.target_id
        )
    if kind == "owner":
        return lambda row, f: (
            row is not None
            and f.epoch == row.epoch
            and f.token_hash is not None
            and row.token_hash is not None
            and hmac.compare_digest(f.token_hash, row.token_hash)
        )
    if kind == "epoch":
        return lambda row, f: row is not None and f.epoch == row.epoch
    if kind == "live":
        return lambda row, f: (
            row is not None and row.lease_deadline is not None and f.now < row.lease_deadline
        )
    if kind == "lapsed":
        return lambda row, f: (
            row is not None and (row.lease_deadline is None or f.now >= row.lease_deadline)
        )
    if kind == "draft_pinned":  # the claim protocol's rows only (ClaimRow, Facts)
        return lambda row, f: (
            row is not None
            and f.draft is not None
            and f.draft.draft_id == row.draft_id
            and f.draft.status == "approved"
            and f.draft.version == row.draft_version
            and f.draft.digest == row.draft_digest
        )
    if kind == "compare":
        assert g.op is not None  # the loader checked
        fact, op, column, value = g.fact, g.op, g.column, g.value
        if fact is None:  # a column against a constant
            assert column is not None
            return lambda row, f: row is not None and compare(op, row.column(column), value)
        if column is None:
            return lambda row, f: compare(op, f.fact(fact), value)
        return lambda row, f: row is not None and compare(op, f.fact(fact), row.column(column))
    raise SpecError(f"{spec.name}: guard {g.name!r} has kind {kind!r}, which claimfsm cannot run")


def why(g: GuardDecl, row: ClaimRow | None, facts: Facts) -> str:
    """A sentence for a failed guard that says what is wrong and what to do: the guard's
    declared ``hint`` if it has one, else one written for its kind."""
    if g.hint:
        return g.hint
    kind = g.kind
    if kind in ("owner", "epoch"):
        if row is None:
            return "the target has no claim"
        if facts.epoch != row.epoch:
            return (
                f"epoch {facts.epoch} is not current (current epoch {row.epoch}); "
                "this worker no longer holds the claim: drop the handle and acquire again"
            )
        return "the owner token does not match the current claim"
    if kind == "live" and row is not None:
        return (
            f"the lease lapsed at {row.lease_deadline:.3f} (now {facts.now:.3f}); "
            "renew before the deadline, or release and acquire again"
        )
    if kind == "free" and row is not None:
        return f"epoch {row.epoch} is {row.state}; wait for it to end (or sweep and reconcile)"
    if kind == "draft_ready":
        d = facts.draft
        if d is None:
            return f"draft {facts.draft_id} does not exist"
        if d.target_id != facts.target_id:
            return f"draft {d.draft_id} belongs to target {d.target_id!r}"
        return f"draft {d.draft_id} is {d.status}; approve it first"
    if kind == "draft_pinned" and row is not None:
        d = facts.draft
        now = f"version {d.version}, {d.status}" if d else "missing"
        return (
            f"draft {row.draft_id} changed since it was claimed (pinned version "
            f"{row.draft_version}, now {now}); release and acquire it again"
        )
    if kind == "compare":
        other = repr(g.value) if g.column is None else f"the claim's {g.column}"
        return f"{g.name} requires {g.fact} {g.op} {other}: {g.meaning}"
    return f"{g.name} does not hold: {g.meaning}"
