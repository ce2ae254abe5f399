"""The guards as the machines run them: each guard's predicate, compiled from its kind by
the one compiler every Python consumer uses (``claimfsm.spec._predicates``: the machines
and the checker), and the sentence a refusal carries, written for its kind (:func:`why`)
in the declaration's own words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from claimfsm.spec import GuardDecl, Spec
from claimfsm.spec._predicates import Guard, build_guards, compile_guard

__all__ = ["Guard", "Words", "build_guards", "compile_guard", "explained", "stale_state", "why"]


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


def stale_state(spec: Spec, state: str, epoch: int) -> str:
    """The sentence for an owner refused as stale by the state its epoch is in
    (``Spec.stale_owner``'s ``state:NAME``), in the declaration's own words: the state,
    what it means, and what to do."""
    meaning = spec.states[state].meaning
    return f"epoch {epoch} is {state} ({meaning}); {Words.of(spec).stale_handle}"


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
        takers = spec.events_by("taker")
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
