"""An author's rules over drafts, one home for both stores: the claim protocol's
(``_core``) and a declared lifecycle's (``_entity_drafts``). Each store reads the draft and
the entity's row in its own transaction and asks here what the author may do; the refusal
is raised by the store, so nothing is written.

- A second live (pending or approved) draft of an entity is refused where the declaration
  allows one (``[drafts] one_live_per_target``), as a partial unique index would.
- A dispatched draft is never edited or approved again: its effect is known to have
  happened; a new draft says something new.
- The draft an epoch pinned is not edited while the entity is in a state a ``dispatches``
  transition leaves (``Spec.pinning_states``): the content pinned may yet go out.
"""

from __future__ import annotations

from claimfsm.errors import ClaimFSMError, IllegalTransition, TargetBusy


def one_live_refusal(entity: str, draft_id: int, status: str) -> TargetBusy:
    """The refusal of a new draft of ``entity`` (in words: "target 't'", "page 'home'"),
    which already has the live draft ``draft_id``."""
    return TargetBusy(
        f"{entity} already has a live draft (draft {draft_id}, {status}) and this declaration"
        " ([drafts] one_live_per_target) allows one; dispatch or edit it"
    )


def edit_refusal(
    draft_id: int,
    status: str,
    entity: str,
    pinned: tuple[int | None, int, str] | None,
    pinning: frozenset[str],
) -> ClaimFSMError | None:
    """Why draft ``draft_id`` (now ``status``) of ``entity`` may not be edited, or None:
    ``pinned`` is (the draft the entity's current epoch pinned, that epoch, its state), or
    None where the entity has no epoch yet; ``pinning``: where the pin is locked."""
    if status == "dispatched":
        return IllegalTransition(
            f"draft {draft_id} is dispatched and cannot be edited; create a new draft",
            state=status,
            event="edit",
        )
    if pinned is not None and pinned[0] == draft_id and pinned[2] in pinning:
        return TargetBusy(
            f"draft {draft_id} is pinned by epoch {pinned[1]} of {entity}, which is"
            f" {pinned[2]}; edit it after that epoch ends"
        )
    return None


def approve_refusal(draft_id: int, status: str) -> IllegalTransition | None:
    """Why draft ``draft_id`` (now ``status``) may not be approved, or None (approving an
    approved draft changes nothing)."""
    if status == "dispatched":
        return IllegalTransition(
            f"draft {draft_id} is already dispatched", state=status, event="approve"
        )
    return None
