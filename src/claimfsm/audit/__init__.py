"""Audit a store's history after the fact, read-only: ``claimfsm audit --db URL``.

Every target's history must be a legal path of the declaration, and must replay to its
claim row; the invariants history can show must have held: epochs strictly increase, no
stale owner or stale epoch changed anything, leases were used only while live, and
``uncertain`` was left only with readback evidence. ``_rules`` says exactly what is
checked and how (``_entity`` for a lifecycle of your own; ``_kinds`` names the violations
both report, ``_drafts`` how a lifecycle's drafts table must agree with its history);
``_read`` streams the tables from one snapshot.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from claimfsm.audit._drafts import with_drafts
from claimfsm.audit._kinds import VIOLATIONS
from claimfsm.audit._read import streams
from claimfsm.audit._rules import Rules, Violation
from claimfsm.audit._walk import PROGRESS_EVERY, Found, walk
from claimfsm.errors import InvalidArgument
from claimfsm.spec import Spec, claim_spec

if TYPE_CHECKING:
    from claimfsm.store import EntityStore


@dataclass
class AuditReport:
    """What ``audit`` found. ``violations`` holds the first ``keep`` in full; ``counts``
    counts every violation by kind."""

    entries: int = 0
    targets: int = 0
    claims: int = 0
    violations: list[Violation] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not self.counts

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "entries": self.entries,
            "targets": self.targets,
            "claims": self.claims,
            "violations_total": self.total,
            "violations_by_kind": dict(sorted(self.counts.items())),
            "violations": [v.as_dict() for v in self.violations],
        }


def audit(
    url: str,
    *,
    spec: Spec | None = None,
    progress: Callable[[int, int], None] | None = None,
    keep: int = 1000,
) -> AuditReport:
    """Check the history of the store at ``url`` against ``spec`` (the claim protocol by
    default), streaming it from one read-only snapshot. ``progress(entries, targets)`` is
    called every ``PROGRESS_EVERY`` entries."""
    if not isinstance(keep, int) or isinstance(keep, bool) or keep < 0:
        raise InvalidArgument("keep must be a non-negative int")
    rules = Rules(spec if spec is not None else claim_spec())
    report = AuditReport()
    with streams(url) as (history, claim_rows):
        report.entries, report.targets, report.claims = walk(
            rules, history, claim_rows, _keeper(report, keep), progress
        )
    return report


def _keeper(report: AuditReport, keep: int) -> Found:
    """Count every violation in ``report``, and keep the first ``keep`` in full."""

    def violation(kind: str, key: str, seqs: tuple[int, ...], message: str) -> None:
        assert kind in VIOLATIONS, f"{kind}: not one of the audits' violation kinds"
        report.counts[kind] += 1
        if len(report.violations) < keep:
            report.violations.append(Violation(kind, key, seqs, message))

    return violation


def audit_lifecycle(
    spec: Spec,
    url: str,
    *,
    prefix: str = "lc",
    progress: Callable[[int, int], None] | None = None,
    keep: int = 1000,
) -> AuditReport:
    """Check the history of a lifecycle of your own, in the store at ``url`` (the tables
    ``open_entity_store(spec, url, prefix=prefix)`` keeps), against ``spec``: read-only,
    streamed from one snapshot (``_entity`` says what is checked). In the report, ``targets``
    counts the entities with history and ``claims`` the entity rows."""
    from claimfsm.audit._entity import HISTORY, ROW, EntityRules
    from claimfsm.audit._read import entity_streams
    from claimfsm.store._entity_history import ADDED
    from claimfsm.store._entity_sql import check_storable, row_extras, table_names

    if not isinstance(spec, Spec):
        raise InvalidArgument(f"spec must be a Spec (load_spec), not {type(spec).__name__}")
    if not isinstance(keep, int) or isinstance(keep, bool) or keep < 0:
        raise InvalidArgument("keep must be a non-negative int")
    check_storable(spec)
    table, _ = table_names(spec, prefix)
    report = AuditReport()
    row_columns = ", ".join([ROW, *spec.columns])
    older = frozenset(ADDED)  # a store made before history recorded the lease or facts
    extras = row_extras(spec)  # a request key, which a table made before may lack
    orphans: list[tuple[str, int]] | None = [] if spec.drafts is not None else None
    found = _keeper(report, keep)
    with entity_streams(url, table, HISTORY, row_columns, older, extras, orphans) as streams:
        report.entries, report.targets, report.claims = walk(
            EntityRules(spec), *streams, found, progress
        )
    _orphan_drafts(orphans or [], found)
    return report


def _orphan_drafts(orphans: list[tuple[str, int]], found: Found) -> None:
    """A draft whose entity has no row (an author's first draft makes it)."""
    for key, draft_id in orphans:
        found("draft_disagrees", key, (), f"draft {draft_id} names {key!r}, which has no row")


def audit_store(store: EntityStore, *, keep: int = 1000) -> AuditReport:
    """:func:`audit_lifecycle` of an open lifecycle store, read through its own connection
    (history and rows in two reads, not one snapshot: for a store at rest, as a test's)."""
    from claimfsm.audit._entity import EntityRules
    from claimfsm.store._entity_history import COLUMNS, facts_text
    from claimfsm.store._entity_sql import row_extras

    report = AuditReport()
    history = [  # as the history table holds them (its columns): the facts as their text
        tuple(
            (None if h.facts is None else facts_text(h.facts))
            if name == "facts"
            else getattr(h, name)
            for name in COLUMNS
        )
        for h in store.history()
    ]
    history.sort(key=lambda e: (e[1], e[0]))  # by key (code points: byte order), then seq
    # sorted here too: the database's ORDER BY key may follow its locale
    extras = row_extras(store.spec)
    rows: list[tuple[Any, ...]] = sorted(_row_fields(r, extras) for r in store.rows())
    found = _keeper(report, keep)
    orphans: list[tuple[str, int]] = []
    if store.spec.drafts is not None:  # each row's drafts, read as the audit reads them
        drafts = [
            (d.target_id, d.draft_id, d.version, d.digest, d.status, d.content)
            for row in rows
            for d in store.drafts(row[0])
        ]
        rows = list(with_drafts(rows, drafts, orphans))
    report.entries, report.targets, report.claims = walk(
        EntityRules(store.spec), history, rows, found
    )
    _orphan_drafts(orphans, found)
    return report


def _row_fields(r: Any, extras: tuple[str, ...]) -> tuple[Any, ...]:
    """An entity row as the lifecycle audit reads it (``_entity.ROW`` and the columns)."""
    fixed = (r.key, r.state, r.epoch, r.token_fingerprint, r.lease_deadline, r.owner)
    read = {"request_key": "" if r.request_key == r.key else r.request_key, "outcome": r.outcome}
    return (*fixed, *r.columns.values(), *(read[name] for name in extras))


__all__ = [
    "PROGRESS_EVERY",
    "VIOLATIONS",
    "AuditReport",
    "Violation",
    "audit",
    "audit_lifecycle",
    "audit_store",
]
