"""Each declared guard as an SQL predicate, compiled from its kind: the one SQL meaning of
a guard, which the claim store's writes (``_sql``) and any lifecycle's (``_entity``) both
embed. The Python meaning is ``claimfsm.spec._predicates``; the tests run both on every
declared transition and fail when they disagree.

A store says how its statement reads the row and the caller: ``col(name)`` renders a
column of the row (``claims.epoch``, or ``epoch``), ``p(name)`` a bound parameter. The
parameters a predicate asks for are the caller's ``epoch``, ``token_hash`` and ``target_id``,
the store clock ``now``, each compared fact as ``fact:NAME`` and each compared constant
as ``const:GUARD`` (:func:`guard_constants` gives their values): the declaration's
constants are bound like any value, never written into the statement.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from claimfsm.errors import SpecError
from claimfsm.spec import OPERATORS, Spec

Render = Callable[[str], str]


def guard_predicate(
    spec: Spec,
    name: str,
    p: Render,
    col: Render,
    table: Render = str,
    *,
    lease_nullable: bool = True,
    draft_joined: bool = True,
) -> str:
    """The predicate of guard ``name``. ``table`` names a table the predicate reads besides
    the row (the drafts: ``drafts``); ``lease_nullable`` says whether the row's lease
    deadline may be NULL (no lease: never live, always lapsed); ``draft_joined`` whether
    the statement reads the draft a caller names as ``d`` (the claim's acquire), or the
    predicate reads it by the bound ``draft_id`` (a lifecycle's take)."""
    g = spec.guards[name]
    kind = g.kind
    if kind == "owner":
        return f"({col('epoch')} = {p('epoch')} AND {col('token_hash')} = {p('token_hash')})"
    if kind == "epoch":
        return f"{col('epoch')} = {p('epoch')}"
    if kind == "live":  # a NULL deadline compares as unknown: not live
        return f"{col('lease_deadline')} > {p('now')}"
    if kind == "lapsed":
        lapsed = f"{col('lease_deadline')} <= {p('now')}"
        return f"({col('lease_deadline')} IS NULL OR {lapsed})" if lease_nullable else lapsed
    if kind == "free":
        free = dict.fromkeys([spec.initial, *spec.states_where("frees_target")])
        return f"{col('state')} IN ({', '.join(literal(s) for s in free)})"
    if kind == "draft_ready" and draft_joined:
        return f"d.status = 'approved' AND d.target_id = {p('target_id')}"
    if kind == "draft_ready":
        return (
            f"EXISTS (SELECT 1 FROM {table('drafts')} AS d"  # noqa: S608
            f" WHERE d.draft_id = {p('draft_id')}"
            f" AND d.status = 'approved' AND d.target_id = {p('target_id')})"
        )
    if kind == "draft_pinned":
        return (
            f"EXISTS (SELECT 1 FROM {table('drafts')} AS pinned"  # noqa: S608
            f" WHERE pinned.draft_id = {col('draft_id')}"
            f" AND pinned.status = 'approved' AND pinned.version = {col('draft_version')}"
            f" AND pinned.digest = {col('draft_digest')})"
        )
    if kind == "compare":
        assert g.op is not None  # the loader checked
        op = OPERATORS[g.op][1]
        # Rendered left to right: a positional store binds parameters in this order.
        if g.fact is None:  # a column against a constant
            assert g.column is not None
            left = col(g.column)
            return f"{left} {op} {p(f'const:{name}')}"
        left = p(f"fact:{g.fact}")
        right = col(g.column) if g.column is not None else p(f"const:{name}")
        return f"{left} {op} {right}"
    raise SpecError(f"{spec.name}: guard {name!r} has kind {kind!r}, which has no SQL")


def guard_constants(spec: Spec) -> dict[str, Any]:
    """The value of each ``const:GUARD`` parameter the predicates bind."""
    return {f"const:{n}": g.value for n, g in spec.guards.items() if g.kind == "compare"}


def literal(name: str) -> str:
    """A state name as an SQL string. State names are identifiers (the loader checks), so
    quoting is enough; anything else is refused."""
    if not name.isidentifier():
        raise SpecError(f"state name {name!r} is not an identifier")
    return f"'{name}'"
