"""A declared lifecycle's guards and transitions in Python, for any declaration: the
``transitions`` machine of a lifecycle of your own (:class:`LifecycleMachine`), which a
store uses to explain a refusal (which guard failed, and whether the caller is a stale
owner) and to check that its compiled SQL agrees.

A guard is a predicate over the entity's row, the caller and the store's clock, as its
declared kind says (``spec.GUARD_KINDS``), compiled by the one compiler the claim
protocol's machine uses too (``spec._predicates``). The claim protocol's kinds over drafts
(``draft_ready``, ``draft_pinned``) read the row's pinned draft and the caller's draft,
where the declaration links drafts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from transitions import Machine

from claimfsm.machine._guards import Guard, build_guards
from claimfsm.spec import Spec, TransitionDecl
from claimfsm.spec._predicates import GuardCaller, GuardRow


@dataclass(frozen=True)
class RowView:
    """An entity's row as the guards read it."""

    state: str
    epoch: int = 0
    token_hash: str | None = None
    lease_deadline: float | None = None
    columns: Mapping[str, int] = field(default_factory=dict)
    #: the draft the epoch pinned, its version and digest (linked drafts; None: none)
    draft_id: int | None = None
    draft_version: int | None = None
    draft_digest: str | None = None

    def column(self, name: str) -> Any:
        """A column a declared guard compares: ``epoch`` or one of the declared columns."""
        return self.epoch if name == "epoch" else self.columns.get(name)


@dataclass(frozen=True)
class CallerView:
    """Who acts: the epoch it names (None: none), the hash of the token it presents (None:
    none), its facts (``running``, ``fenced_through``) and the store's time."""

    epoch: int | None
    token_hash: str | None
    facts: Mapping[str, Any]
    now: float
    #: linked drafts: the draft a taker names, or else the pinned one, as it is now (its
    #: ``draft_id``, ``target_id``, ``status``, ``version`` and ``digest``); None: none
    draft: Any = None
    #: the entity acting (a draft is ready for a take of its own entity only)
    target_id: str = ""

    def fact(self, name: str) -> Any:
        """A fact a declared guard compares; None (as SQL's NULL) when not given."""
        return self.facts.get(name)


class _Subject:
    """An entity's state while an event is applied to it (entities are rows, not objects)."""

    __slots__ = ("state",)

    def __init__(self, state: str) -> None:
        self.state = state


class LifecycleMachine:
    """Any declared lifecycle as one shared ``transitions`` machine: each declared transition
    is one of the machine's, with the declared guards as its conditions, tried in the order
    written. Entities are rows: :meth:`fire` applies an event to a row's state.

    What the machine decides is a function of the event, the row's state and which of the
    guards of the event's transitions from there hold: :meth:`fire` reads those guards and
    keeps the machine's decision for each such situation (a handful per declaration), so a
    store that asks beside every write runs the machine once per situation, not per write."""

    def __init__(self, spec: Spec) -> None:
        spec = spec.lifecycle_view()  # a pseudo initial state's takers, out of every state
        self.spec = spec
        #: Each guard's predicate, compiled from its kind (the one compiler: spec._predicates).
        self.guards: dict[str, Guard] = build_guards(spec)
        self.machine = Machine(
            model=None,
            states=list(spec.states),
            initial=spec.initial,
            auto_transitions=False,
            send_event=True,
        )
        #: (event, source) -> the guards its transitions from there read, in order
        self._reads: dict[tuple[str, str], tuple[str, ...]] = {}
        #: (event, state, which of those guards hold) -> the transition the machine took
        self._decided: dict[tuple[str, str, tuple[bool, ...]], int | None] = {}
        for n, t in enumerate(spec.transitions):
            read = self._reads.get((t.event, t.source), ())
            self._reads[(t.event, t.source)] = read + tuple(g for g in t.guards if g not in read)
            self.machine.add_transition(
                t.event,
                t.source,
                None if t.internal else t.dest,
                conditions=[self._condition(g) for g in t.guards],
                after=self._record(n),
            )

    def _condition(self, guard: str) -> Any:
        guards = self.guards  # looked up per call, as fire reads them

        def check(event_data: Any) -> bool:
            row, caller = event_data.kwargs["row"], event_data.kwargs["caller"]
            return guards[guard](row, caller)

        check.__name__ = guard
        return check

    @staticmethod
    def _record(n: int) -> Any:
        def taken(event_data: Any) -> None:
            event_data.kwargs["taken"].append(n)

        return taken

    def fire(self, event: str, row: GuardRow, caller: GuardCaller) -> TransitionDecl | None:
        """The transition ``event`` takes from the row's state, as the machine decides (the
        first whose guards all hold), or None when none may."""
        reads = self._reads.get((event, row.state))
        if reads is None:
            return None  # no transition of the event leaves this state
        situation = (event, row.state, tuple(self.guards[g](row, caller) for g in reads))
        if situation in self._decided:
            n = self._decided[situation]
        else:
            taken: list[int] = []
            self.machine.events[event].trigger(
                _Subject(row.state), row=row, caller=caller, taken=taken
            )
            n = self._decided[situation] = taken[0] if taken else None
        return None if n is None else self.spec.transitions[n]

    def explain(
        self, event: str, row: GuardRow, caller: GuardCaller
    ) -> tuple[TransitionDecl | None, list[str]]:
        """The transition ``event`` takes from the row's state (the machine's choice), or
        None and the guards that failed (in the order the transitions name them; empty when
        no transition of ``event`` leaves that state)."""
        taken = self.fire(event, row, caller)
        if taken is not None:
            return taken, []
        failing: list[str] = []
        for t in self.spec.transitions_for(event, row.state):
            bad = [g for g in t.guards if not self.guards[g](row, caller)]
            failing += [g for g in bad if g not in failing]
        return None, failing

    def stale_refusal(self, event: str, row: GuardRow, caller: GuardCaller) -> str | None:
        """What a store records when it refuses ``event`` to ``caller`` on ``row``, or None:
        the refusal is not a stale owner's and nothing is recorded. The declaration's one
        rule (:meth:`Spec.stale_owner`), read with this machine's guards: the first guard
        declared ``stale`` that every transition of the event from the row's state has
        and that fails here, or
        ``state:NAME`` for an owner whose epoch is current but in a state declared
        ``stale`` that its event does not leave (a job orphaned under its worker)."""
        return self.spec.stale_owner(event, row.state, lambda g: not self.guards[g](row, caller))
