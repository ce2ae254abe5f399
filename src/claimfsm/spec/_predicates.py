"""Each guard's meaning in Python, compiled from its declared kind, for every declaration
and every consumer that runs Python: the claim protocol's machine and any lifecycle's
(``claimfsm.machine``) and the checker's models of both worlds, which evaluate these same
predicates on the rows of their worlds. The stores' SQL (``claimfsm.store._predicates``)
is compiled from the same kinds; the tests run both on every declared transition. stdlib
only.

Each predicate takes the entity's current row (None when it has none yet) and the caller.
A row gives ``state``, ``epoch``, ``token_hash``, ``lease_deadline`` and ``column(name)``;
a caller ``epoch``, ``token_hash``, ``now`` and ``fact(name)``: the claim protocol's
``ClaimRow`` and ``Facts``, any lifecycle's ``RowView`` and ``CallerView``, and the
checkers' views of their worlds' rows all do. The claim's kinds over drafts also read the
caller's ``draft`` and ``target_id`` and the row's pinned draft (a lifecycle's store and
world refuse those kinds).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from claimfsm.errors import SpecError
from claimfsm.spec._declaration import GuardDecl, Spec
from claimfsm.spec._guards import compare

Guard = Callable[[Any, Any], bool]  # (Row | None, Caller) -> bool


class GuardRow(Protocol):
    """What a guard reads of an entity's row (any lifecycle's ``RowView``, the checker's
    view of its world's row, the audit's of history)."""

    @property
    def state(self) -> str: ...
    @property
    def epoch(self) -> int: ...
    @property
    def token_hash(self) -> str | None: ...
    @property
    def lease_deadline(self) -> float | None: ...
    def column(self, name: str) -> Any: ...


class GuardCaller(Protocol):
    """What a guard reads of the caller: the epoch it names, the token hash it presents,
    the store's time and its facts."""

    @property
    def epoch(self) -> int | None: ...
    @property
    def token_hash(self) -> str | None: ...
    @property
    def now(self) -> float: ...
    def fact(self, name: str) -> Any: ...


@dataclass(frozen=True)
class GuardReads:
    """What one guard's predicate reads: fields of the row and of the caller (the names
    of :class:`GuardRow`'s and :class:`GuardCaller`'s properties, and the claim's
    drafts'), the row's columns (``column(name)``) and the caller's facts
    (``fact(name)``). Whether the row exists is read by every kind but ``draft_ready``
    and is not listed. A consumer that knows a guard reads only some of what it holds
    may keep its answers per those (the lifecycle world's stale owners do)."""

    row: frozenset[str] = frozenset()
    caller: frozenset[str] = frozenset()
    columns: frozenset[str] = frozenset()
    facts: frozenset[str] = frozenset()


#: What each built-in kind's predicate (compiled below) reads; ``compare`` reads the
#: column and the fact it names (:func:`guard_reads`). A test runs every compiled
#: predicate on rows and callers that record what is read, and holds this table to it.
KIND_READS: dict[str, GuardReads] = {
    "free": GuardReads(row=frozenset({"state"})),
    "draft_ready": GuardReads(caller=frozenset({"draft", "target_id"})),
    "owner": GuardReads(
        row=frozenset({"epoch", "token_hash"}), caller=frozenset({"epoch", "token_hash"})
    ),
    "epoch": GuardReads(row=frozenset({"epoch"}), caller=frozenset({"epoch"})),
    "live": GuardReads(row=frozenset({"lease_deadline"}), caller=frozenset({"now"})),
    "lapsed": GuardReads(row=frozenset({"lease_deadline"}), caller=frozenset({"now"})),
    "draft_pinned": GuardReads(
        row=frozenset({"draft_id", "draft_version", "draft_digest"}), caller=frozenset({"draft"})
    ),
}


def guard_reads(g: GuardDecl) -> GuardReads:
    """What guard ``g``'s predicate reads (:data:`KIND_READS`, or a comparison's column
    and fact)."""
    if g.kind == "compare":
        return GuardReads(
            columns=frozenset(() if g.column is None else (g.column,)),
            facts=frozenset(() if g.fact is None else (g.fact,)),
        )
    return KIND_READS[g.kind]


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
