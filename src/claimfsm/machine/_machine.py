"""The runtime machine: one shared ``transitions.Machine`` built from the declaration.

Claims are rows, not objects: the machine has no models of its own. To apply an event it
wraps the epoch's state in a throwaway subject and triggers the event on it, with the
declared guards as the transitions' conditions. The machine is the reference semantics
(``claimfsm.store.MemoryStore`` runs on it); the SQL stores enforce the same guards in
their WHERE clauses and use :meth:`ClaimMachine.explain` to say why a write was refused.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from transitions import Machine, MachineError

from claimfsm.errors import (
    REFUSALS,
    ClaimFSMError,
    DeclarationMismatch,
    IllegalTransition,
    InvalidArgument,
    Refused,
    StaleClaim,
)
from claimfsm.machine._facts import ClaimRow, Facts
from claimfsm.machine._guards import Guard, build_guards, stale_state, why
from claimfsm.spec import ClaimSteps, Spec, claim_spec, require_claim_protocol


class _Subject:
    """The state of one epoch while an event is applied to it."""

    __slots__ = ("state",)

    def __init__(self, state: str) -> None:
        self.state = state


class ClaimMachine:
    """The claim lifecycle as a ``transitions`` machine, shared by every claim."""

    def __init__(self, spec: Spec | None = None) -> None:
        self.spec = spec if spec is not None else claim_spec()
        #: The claim's steps and states in this declaration's names (read by its shape).
        self.steps: ClaimSteps = require_claim_protocol(self.spec, "the claim machine")
        self.guards: dict[str, Guard] = build_guards(self.spec)
        self.machine = Machine(
            model=None,
            states=list(self.spec.states),
            initial=self.spec.initial,
            auto_transitions=False,
            send_event=True,
        )
        for t in self.spec.transitions:
            self.machine.add_transition(
                t.event,
                t.source,
                None if t.internal else t.dest,
                conditions=[self._condition(g) for g in t.guards],
            )

    def _condition(self, guard: str) -> Callable[[Any], bool]:
        def check(event_data: Any) -> bool:  # looked up per call: tests may stub a guard
            return self.guards[guard](event_data.kwargs["row"], event_data.kwargs["facts"])

        check.__name__ = guard
        return check

    def is_owner_event(self, event: str) -> bool:
        """True when every transition of ``event`` requires a stale-marking guard."""
        return bool(self.spec.stale_guards(event))

    def fire(self, event: str, state: str, row: ClaimRow | None, facts: Facts) -> str:
        """Apply ``event`` to an epoch in ``state``; return the new state or raise the refusal."""
        if event not in self.machine.events:
            raise InvalidArgument(f"unknown event {event!r}; declared: {list(self.spec.events)}")
        # transitions names Enum states by their .name: hand it the plain value.
        subject = _Subject(str(state))
        try:
            ok = self.machine.events[event].trigger(subject, row=row, facts=facts)
        except MachineError:
            ok = False
        if ok:
            return subject.state
        error = self.explain(event, state, row, facts)
        if error is None:
            raise DeclarationMismatch(
                f"the machine refused {event} from {state} but no declared guard failed"
            )
        raise error

    def explain(
        self, event: str, state: str, row: ClaimRow | None, facts: Facts
    ) -> ClaimFSMError | None:
        """Why ``event`` may not fire from ``state``: the refusal, or None if it may fire."""
        where = _where(row, facts)
        stale = self.spec.stale_owner(event, state, lambda g: not self.guards[g](row, facts))
        if stale is not None and stale in self.spec.guards:
            return _refusal(
                self.spec,
                stale,
                f"{event} refused for {where}: {_why(self.spec, stale, row, facts)}",
            )
        if stale is not None:
            assert row is not None  # its stale guards held on it
            err = StaleClaim(
                f"{event} refused for {where}: {stale_state(self.spec, state, row.epoch)}"
            )
            err.guard = None
            return err
        candidates = self.spec.transitions_for(event, state)
        if not candidates:
            allowed = self.spec.sources(event)
            return IllegalTransition(
                f"{event} is not declared from state {state!r} ({where}); "
                f"it is declared from {list(allowed)}",
                state=state,
                event=event,
            )
        guard = self.spec.refusing_guard(event, state, lambda g: not self.guards[g](row, facts))
        if guard is None:
            return None
        return _refusal(
            self.spec, guard, f"{event} refused for {where}: {_why(self.spec, guard, row, facts)}"
        )


@cache
def claim_machine() -> ClaimMachine:
    """The one shared machine for the claim declaration."""
    return ClaimMachine()


def _where(row: ClaimRow | None, facts: Facts) -> str:
    target = facts.target_id if facts.target_id is not None else (row.target_id if row else "?")
    epoch = facts.epoch if facts.epoch is not None else (row.epoch if row else None)
    return f"target {target!r}" + (f" epoch {epoch}" if epoch is not None else "")


def _why(spec: Spec, guard: str, row: ClaimRow | None, facts: Facts) -> str:
    return why(spec, spec.guards[guard], row, facts)


def _refusal(spec: Spec, guard: str, message: str) -> Refused:
    name = spec.guards[guard].refusal
    err = REFUSALS[name](message) if name else Refused(message)
    err.guard = guard
    return err
