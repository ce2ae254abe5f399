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
from dataclasses import dataclass
from typing import Any

from claimfsm.errors import SpecError
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


def why(spec: Spec, g: GuardDecl, row: Any, caller: Any) -> str:
    """A sentence for a failed guard that says what is wrong and what to do: the guard's
    declared ``hint`` if it has one, else one written for its kind, in the declaration's
    own words (its name, the event that takes an entity, the one that renews a lease).
    ``row`` and ``caller`` are as for the predicates (the claim's or any lifecycle's)."""
    return explained(spec, g, row, caller) or f"{g.name} does not hold: {g.meaning}"


def explained(spec: Spec, g: GuardDecl, row: Any, caller: Any) -> str | None:
    """:func:`why`'s sentence, or None when neither a hint nor the kind says more than
    the guard's declared meaning."""
    if g.hint:
        return g.hint
    kind = g.kind
    words = Words.of(spec)
    if kind in ("owner", "epoch"):
        if row is None:
            return f"the target has no {spec.name}"
        if caller.epoch != row.epoch:
            return (
                f"epoch {caller.epoch} is not current (current epoch {row.epoch}); "
                f"{words.stale_handle}"
            )
        return f"the owner token does not match the current {spec.name}"
    if kind == "live" and row is not None:
        lapsed = "has none" if row.lease_deadline is None else f"lapsed at {row.lease_deadline:.3f}"
        renew = f"{words.renew} before the deadline, or " if words.renew else ""
        return f"the lease {lapsed} (now {caller.now:.3f}); {renew}{words.take} again"
    if kind == "free" and row is not None:
        return f"epoch {row.epoch} is {row.state}; wait for it to end"
    if kind == "draft_ready":
        d = caller.draft
        if d is None:
            return f"draft {caller.draft_id} does not exist"
        if d.target_id != caller.target_id:
            return f"draft {d.draft_id} belongs to target {d.target_id!r}"
        return f"draft {d.draft_id} is {d.status}; approve it first"
    if kind == "draft_pinned" and row is not None:
        d = caller.draft
        now = f"version {d.version}, {d.status}" if d else "missing"
        return (
            f"draft {row.draft_id} changed since it was claimed (pinned version "
            f"{row.draft_version}, now {now}); {words.take} it again"
        )
    if kind == "compare":
        other = repr(g.value) if g.column is None else f"the {spec.name}'s {g.column}"
        if g.fact is None:
            return f"{g.name} requires its {g.column} {g.op} {g.value!r}: {g.meaning}"
        return f"{g.name} requires {g.fact} {g.op} {other}: {g.meaning}"
    return None


@dataclass(frozen=True)
class Words:
    """What a refusal calls things, read from the declaration: the event that takes an
    entity (a taker's) and the one that renews its lease (an owner's that sets the lease
    and changes no state), if any."""

    take: str
    renew: str | None
    noun: str

    @property
    def stale_handle(self) -> str:
        return f"this handle no longer holds the {self.noun}: drop it and {self.take} again"

    @staticmethod
    def of(spec: Spec) -> Words:
        takers = [e for e in spec.events if spec.role(e) == "taker"]
        renewing = [
            e
            for e in spec.events
            if spec.role(e) == "owner"
            and e in spec.effects
            and "lease" in spec.effects[e].sets
            and all(t.source == t.dest for t in spec.transitions if t.event == e)
        ]
        return Words(
            take=takers[0] if takers else "take it",
            renew=renewing[0] if renewing else None,
            noun=spec.name,
        )
