"""The violations an audit reports: one vocabulary for the claim's history (``_rules``) and a
lifecycle's (``_entity``), each kind with what it means. A guard that history witnesses
failing names the violation of its kind (:func:`broken`), in both audits alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from claimfsm.spec import STALE_STATE, Spec
from claimfsm.spec._invariants import leaves_by_another

#: Every violation kind, with what it means. Both audits report by these names; a kind the
#: claim's history cannot show (the lifecycle's refusals, invariants and request keys) is
#: reported by the lifecycle's audit alone.
VIOLATIONS: dict[str, str] = {
    "checkpoint_misplaced": "a checkpoint (written by pruning) after other entries",
    "undeclared_transition": "an entry's (event, source, destination) is not declared",
    "broken_path": "an entry starts where its entity was not",
    "epoch_order": "a new epoch is not the previous one plus one, or another event moved it",
    "stale_epoch_changed": "an epoch that is not the current one was changed",
    "stale_owner_changed": "a token that does not hold the epoch changed it",
    "lapsed_lease_used": "an owner acted at or after its lease deadline",
    "live_lease_lapsed": "a lease was lapsed before its deadline",
    "target_not_free": "an entity was taken while its state did not free it",
    "evidence_not_recorded": "the evidence the entry records does not meet the guard's",
    "count_out_of_range": "a declared column was outside what the event's guard allows",
    "refusal_changed": "a refused operation recorded a change",
    "refusal_unexplained": "a recorded refusal names no stale guard failing nor a stale state",
    "invariant_row": "a declared row invariant did not hold after a transition",
    "invariant_left_only_by": "a state was left by an event its invariant does not allow",
    "request_key": "the request key changed other than by an event declared fresh_key",
    "draft_not_ready": "an epoch was taken with a draft that was not approved",
    "pinned_draft_changed": "an owner went on while its pinned draft was not as pinned",
    "pinned_draft_edited": "a draft was edited while the epoch that pinned it may dispatch it",
    "draft_out_of_order": "a draft's entry does not follow from its history",
    "invariant_pinned": "a declared pinned invariant did not hold after an entry",
    "row_disagrees": "the row is not what its history leaves",
    "draft_disagrees": "a linked draft is not what its history leaves, or its content not"
    " what its digest names",
    "history_without_row": "history records transitions of an entity that has no row",
    "row_without_history": "a row that no history leads to",
}

#: The violation a failing guard of each witnessed kind names (a ``compare``: by what it
#: reads, :func:`broken`).
_BROKEN = {
    "owner": "stale_owner_changed",
    "epoch": "stale_epoch_changed",
    "live": "lapsed_lease_used",
    "lapsed": "live_lease_lapsed",
    "free": "target_not_free",
    "draft_ready": "draft_not_ready",
    "draft_pinned": "pinned_draft_changed",
}


def broken(name: str, guard: Any) -> tuple[str, str]:
    """The violation a failing ``guard`` (declared as ``name``) names, and why, in words: by
    its kind; a ``compare`` of a fact the caller brought is the evidence's, one of a
    column alone the count's."""
    if guard.kind in _BROKEN:
        kind = _BROKEN[guard.kind]
        return kind, VIOLATIONS[kind]
    assert guard.kind == "compare", guard.kind
    if guard.fact is not None:  # fact OP column, or fact OP value
        than = guard.column if guard.column is not None else repr(guard.value)
        return (
            "evidence_not_recorded",
            f"{name} needs {guard.fact} {guard.op} {than}; the entry records no evidence that does",
        )
    return ("count_out_of_range", f"{name} needs {guard.column} {guard.op} {guard.value!r}")


def left_by_another(invariants: Iterable[Any], source: str, event: str, dest: str) -> Iterator[str]:
    """Each declared ``left_only_by`` invariant a transition of ``event`` from ``source``
    to ``dest`` breaks (``invariant_left_only_by``), in words: read as the checkers read
    it (``spec._invariants.leaves_by_another``), for both audits alike."""
    for inv in invariants:
        if inv.kind == "left_only_by" and leaves_by_another(inv, source, event, dest):
            yield f"{inv.name}: left {source} by {event} ({inv.meaning})"


def unexplained_refusal(
    spec: Spec,
    event: str,
    state: str,
    refused: str,
    fails: Callable[[str], bool | None],
    noun: str = "entity",
) -> str | None:
    """Why a recorded refusal of ``event``, naming ``refused``, is not a stale owner's as
    the declaration's rule (``Spec.stale_owner``) has the stores record one on a row in
    ``state``, or None: it names a stale guard that every transition of the event from
    there has, which history shows failing or cannot show (``fails``: True, False, or
    None where history cannot tell), or the state itself (``state:NAME``) where the rule
    calls the event a stale owner's there, no stale guard shown failing. Both audits judge
    a record by this: a lifecycle's refusal entry, a claim's discard (``noun``: what the
    row is of, for the sentence)."""
    if event not in spec.events:
        return f"but no event {event!r} is declared"
    if refused.startswith(STALE_STATE):
        named = refused[len(STALE_STATE) :]
        if named != state:
            return f"but the {noun} was {state}"
        if not spec.states[named].stale:
            return f"but {named} is not declared stale"
        if not spec.stale_state_refuses(event, named):
            return f"but {event} in {named} is no stale owner's (it is declared from there)"
        failing = [g for g in spec.stale_guards(event, named) if fails(g) is True]
        if failing:
            return f"but history shows {failing[0]} failing: the record names that guard"
        return None
    g = spec.guards.get(refused)
    if g is None or not g.stale:
        return "but that is no guard declared stale"
    if refused not in spec.stale_guards(event, state):
        return f"but not every transition of {event} from {state} has that guard"
    if fails(refused) is False:
        return "but history shows it holding: the caller held the epoch"
    return None
