"""A declared lifecycle's guards and transitions in Python, for any declaration: the
``transitions`` machine of a lifecycle of your own (:class:`LifecycleMachine`), which a
store uses to explain a refusal (which guard failed, and whether the caller is a stale
owner) and to check that its compiled SQL agrees.

A guard is a predicate over the entity's row, the caller and the store's clock, as its
declared kind says (``spec.GUARD_KINDS``). The claim protocol's kinds over drafts
(``draft_ready``, ``draft_pinned``) have no meaning here and are refused by the store.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from transitions import Machine

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


class _Subject:
    """An entity's state while an event is applied to it (entities are rows, not objects)."""

    __slots__ = ("state",)

    def __init__(self, state: str) -> None:
        self.state = state


class LifecycleMachine:
    """Any declared lifecycle as one shared ``transitions`` machine: each declared transition
    is one of the machine's, with the declared guards as its conditions, tried in the order
    written. Entities are rows: :meth:`fire` applies an event to a row's state."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.machine = Machine(
            model=None,
            states=list(spec.states),
            initial=spec.initial,
            auto_transitions=False,
            send_event=True,
        )
        for n, t in enumerate(spec.transitions):
            self.machine.add_transition(
                t.event,
                t.source,
                None if t.internal else t.dest,
                conditions=[self._condition(g) for g in t.guards],
                after=self._record(n),
            )

    def _condition(self, guard: str) -> Any:
        def check(event_data: Any) -> bool:
            row, caller = event_data.kwargs["row"], event_data.kwargs["caller"]
            return guard_holds(self.spec, guard, row, caller)

        check.__name__ = guard
        return check

    @staticmethod
    def _record(n: int) -> Any:
        def taken(event_data: Any) -> None:
            event_data.kwargs["taken"].append(n)

        return taken

    def fire(self, event: str, row: RowView, caller: CallerView) -> TransitionDecl | None:
        """The transition ``event`` takes from the row's state, as the machine decides (the
        first whose guards all hold), or None when none may."""
        found = self.machine.events.get(event)
        if found is None or row.state not in found.transitions:
            return None  # no transition of the event leaves this state
        taken: list[int] = []
        found.trigger(_Subject(row.state), row=row, caller=caller, taken=taken)
        return self.spec.transitions[taken[0]] if taken else None

    def explain(
        self, event: str, row: RowView, caller: CallerView
    ) -> tuple[TransitionDecl | None, list[str]]:
        """The transition ``event`` takes from the row's state (the machine's choice), or
        None and the guards that failed (in the order the transitions name them; empty when
        no transition of ``event`` leaves that state)."""
        taken = self.fire(event, row, caller)
        if taken is not None:
            return taken, []
        failing: list[str] = []
        for t in self.spec.transitions_for(event, row.state):
            bad = [g for g in t.guards if not guard_holds(self.spec, g, row, caller)]
            failing += [g for g in bad if g not in failing]
        return None, failing
