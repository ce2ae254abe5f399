"""A lifecycle's linked drafts as its drafts table holds them, against what history leaves.

History records each change of a draft (``_entity_history.DRAFT_ENTRIES``), so the
audit knows each draft's status, version and digest as history leaves them
(``_entity.Entity.drafts``). At the end of an entity its drafts table must agree
(``draft_disagrees``):

- every draft's content is the content its digest names (a content changed behind the
  store would be sent as approved, unseen by any guard: the digest is what was approved);
- a draft history knows is in the table, with the status, version and digest history
  leaves;
- a draft names an entity that has a row (an author's first draft makes the row).

A draft history does not show (written before history recorded drafts, or pruned by a
checkpoint that did not record it) is judged by its digest alone, as the guards over it
are assumed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from claimfsm.store._entity_history import DraftSeen
from claimfsm.store._tokens import content_digest

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


__all__ = ["SELECT", "TableDraft", "draft_differences", "with_drafts"]
