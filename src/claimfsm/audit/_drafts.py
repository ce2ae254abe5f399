"""What a lifecycle's history and tables must be where it has linked drafts (``[drafts]``).

History records each change of a draft beside the events (``_entity_history.DRAFT_ENTRIES``:
an author's create, edit or approve, and a dispatch), the row unchanged. The entity's
walk (``_entity``) hands each such entry, each take (which pins a draft) and each
transition to :class:`DraftRules`, which asks:

- Each change of a draft follows from the draft's history and changes no row
  (``draft_out_of_order``): a draft is created once at version 1, an edit bumps the
  version by one and never follows a dispatch, an approval approves a pending draft as it
  is, a dispatch marks the draft the epoch pinned, at the version pinned, right after a
  transition declared ``dispatches``.
- An edit of the pinned draft while the entity is in a state such a transition leaves is
  ``pinned_draft_edited``.
- A take pins the draft at the version history has (``request_key``), and the declared
  ``pinned`` invariants hold after every entry (``invariant_pinned``).
- At the end of an entity its drafts table agrees with history (``draft_disagrees``):
  every draft's content is the content its digest names (a content changed behind the
  store would be sent as approved, unseen by any guard: the digest is what was approved);
  a draft history knows is in the table, with the status, version and digest history
  leaves; and a draft names an entity that has a row (an author's first draft makes it).

The guards over drafts (``draft_ready``, ``draft_pinned``) are judged by the entity's walk
on the draft this module says they read (:meth:`DraftRules.named`, :meth:`DraftRules.seen`).
A draft no entry shows (made before history recorded drafts, or pruned away by a
checkpoint that did not record it) is assumed, and judged by its digest alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from claimfsm.spec import Spec
from claimfsm.spec._invariants import pinned_holds
from claimfsm.store._entity_drafts import pin_of
from claimfsm.store._entity_history import (
    DRAFT_CREATE,
    DRAFT_DISPATCH,
    DRAFT_EDIT,
    DraftSeen,
    draft_change,
)
from claimfsm.store._tokens import content_digest
from claimfsm.store._types import Draft

if TYPE_CHECKING:
    from claimfsm.audit._entity import Entity

Report = Callable[[str, tuple[int, ...], str], None]

#: One draft as the audit reads the drafts table: (draft id, version, digest, status,
#: content), in this order (``SELECT``, after the entity's key).
TableDraft = tuple[int, int, str, str, str]
#: The drafts table's columns the audit reads, the entity's key first.
SELECT = "target_id, draft_id, version, digest, status, content"


def draft_differences(known: Mapping[int, DraftSeen], table: Sequence[TableDraft]) -> list[str]:
    """What in an entity's drafts ``table`` is not what its history leaves (``known``: the
    drafts history shows, each as it left it), in words; empty: they agree."""
    found: list[str] = []
    held: set[int] = set()
    for draft_id, version, digest, status, content in table:
        held.add(draft_id)
        if content_digest(content) != digest:
            found.append(
                f"draft {draft_id}'s content is not the content its digest names"
                " (changed behind the store)"
            )
        seen = known.get(draft_id)
        if seen is None:
            continue
        if (status, version) != (seen.status, seen.version):
            found.append(
                f"draft {draft_id} is {status} at version {version}"
                f" (history: {seen.status} at version {seen.version})"
            )
        elif digest != seen.digest:
            found.append(f"draft {draft_id}'s digest is not the one history records")
    for draft_id in sorted(set(known) - held):
        found.append(f"draft {draft_id} is in history but not in the drafts table")
    return found


class DraftRules:
    """The rules above for one declaration (its ``[drafts]``; without them, nothing is
    pinned and nothing is asked)."""

    def __init__(self, spec: Spec) -> None:
        self.linked = spec.drafts is not None
        self.takers = frozenset(spec.events_by("taker"))
        self.pinned = [i for i in spec.invariants.values() if i.kind == "pinned"]
        self.pinning = spec.pinning_states()  # where the pinned draft may not be edited

    def pin(
        self,
        ent: Entity,
        event: str,
        request_key: str | None,
        seq: tuple[int, ...],
        report: Report | None = None,
    ) -> None:
        """The draft and version ``request_key`` names as the epoch's pin, and its digest
        where history holds the draft at that version (``report``: a take, which pins the
        draft as it is, so at the version history has)."""
        ent.pin = None if not self.linked or request_key is None else pin_of(ent.key, request_key)
        seen = None if ent.pin is None else ent.drafts.get(ent.pin[0])
        ent.pin_digest = None
        if ent.pin is None or seen is None:
            return
        if seen.version == ent.pin[1]:
            ent.pin_digest = seen.digest
        elif report is not None:
            report(
                "request_key",
                seq,
                f"{event} pinned draft {ent.pin[0]} at version {ent.pin[1]}, where history"
                f" has it at version {seen.version}",
            )

    def change(
        self,
        ent: Entity,
        seq: tuple[int, ...],
        event: str,
        recorded: tuple[str, str, int],
        facts: str | None,
        report: Report,
    ) -> None:
        """A change of one of the entity's drafts (``recorded``: the entry's source,
        destination and epoch; ``facts``: the draft as the change left it)."""

        def wrong(why: str) -> None:
            report("draft_out_of_order", seq, f"{event}: {why}")

        source, dest, epoch = recorded
        if not source == dest == ent.state or epoch != ent.epoch:
            wrong(
                f"recorded {source} -> {dest} at epoch {epoch} where the entity was"
                f" {ent.state} at epoch {ent.epoch}: a draft's change changes no row"
            )
        change = draft_change(event, facts)
        if change is None:
            wrong("the entry does not name the draft, its version and digest")
            return
        draft, after = change
        before = ent.drafts.get(draft)
        ent.drafts[draft] = after
        if event == DRAFT_CREATE:
            if before is not None:
                wrong(f"draft {draft} was created before")
            elif after.version != 1:
                wrong(f"draft {draft} was created at version {after.version}, not 1")
            return
        if event == DRAFT_DISPATCH:
            if not ent.dispatching:
                wrong(f"draft {draft} dispatched, but not by a transition declared dispatches")
            if ent.pin != (draft, after.version):
                wrong(f"draft {draft} v{after.version} dispatched; the epoch pinned {ent.pin}")
            if before is not None and before[1:] != after[1:]:
                wrong(f"draft {draft} dispatched at another version or digest than it had")
            return
        if event == DRAFT_EDIT:
            if ent.pin is not None and ent.pin[0] == draft and ent.state in self.pinning:
                report(
                    "pinned_draft_edited",
                    seq,
                    f"draft {draft} edited while epoch {ent.epoch}, which pinned it, is"
                    f" {ent.state}, from where it may be dispatched",
                )
            if before is not None and before.status == "dispatched":
                wrong(f"draft {draft} edited after it was dispatched")
            elif before is not None and after.version != before.version + 1:
                wrong(f"draft {draft} edited from version {before.version} to {after.version}")
            return
        # an approval
        if before is not None and (before.status != "pending" or before[1:] != after[1:]):
            wrong(f"draft {draft} approved, but it was {before.status} at version {before.version}")

    def pinned_invariants(self, ent: Entity, seq: tuple[int, ...], report: Report) -> None:
        """The declared ``pinned`` invariants on the entity as history now leaves it,
        where history holds the pinned draft."""
        if not self.pinned or ent.pin is None or ent.pin[0] not in ent.drafts:
            return
        seen = ent.drafts[ent.pin[0]]
        for inv in self.pinned:
            holds = pinned_holds(inv, ent.state, (seen.status, seen.version), ent.pin[1])
            if not holds or (ent.state in inv.states and seen.digest != ent.pin_digest):
                report(
                    "invariant_pinned",
                    seq,
                    f"{inv.name}: in {ent.state}, draft {ent.pin[0]} is {seen.status} at"
                    f" version {seen.version}, pinned at version {ent.pin[1]} ({inv.meaning})",
                )

    def seen(self, ent: Entity, draft: int | None) -> Draft | None:
        """A draft as the guards read it, as history leaves it (None: not known)."""
        seen = None if draft is None else ent.drafts.get(draft)
        if seen is None or draft is None:
            return None
        return Draft(draft, ent.key, seen.version, seen.digest, seen.status, "")

    def named(self, ent: Entity, event: str, request_key: str | None) -> int | None:
        """The draft a guard of ``event`` reads: a take's, the one its request key names;
        any other's, the pinned one."""
        if event in self.takers:
            pin = None if request_key is None else pin_of(ent.key, request_key)
        else:
            pin = ent.pin
        return None if pin is None else pin[0]

    def table(
        self, known: Mapping[int, DraftSeen], table: Sequence[TableDraft], report: Report
    ) -> None:
        """The entity's drafts table against what its history leaves (``known``)."""
        for said in draft_differences(known, table):
            report("draft_disagrees", (), said)


def with_drafts(
    rows: Iterable[tuple[Any, ...]],
    drafts: Iterable[tuple[Any, ...]],
    orphans: list[tuple[str, int]],
) -> Iterator[tuple[Any, ...]]:
    """``rows`` (ordered by key), each with its entity's drafts appended as one tuple of
    :data:`TableDraft`; ``drafts`` as :data:`SELECT` reads them, ordered by key (the same
    order) then id. A draft whose key has no row is added to ``orphans`` as (key, id)."""
    it = iter(drafts)
    d = next(it, None)
    for row in rows:
        key = row[0]
        mine: list[TableDraft] = []
        while d is not None and d[0] <= key:
            if d[0] == key:
                mine.append(tuple(d[1:]))
            else:
                orphans.append((d[0], d[1]))
            d = next(it, None)
        yield (*row, tuple(mine))
    while d is not None:
        orphans.append((d[0], d[1]))
        d = next(it, None)


__all__ = ["SELECT", "DraftRules", "TableDraft", "draft_differences", "with_drafts"]
