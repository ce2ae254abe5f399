"""A lifecycle's linked drafts in its store (a declaration with ``[drafts]``).

Each entity has drafts, in a table of their own beside its rows (``{table}_drafts``):
an author creates one (pending, version 1), edits it (pending again, its version bumped,
its content's digest new) and approves it, at any time, as the checker's world lets an
author do. A taker's event names one (``EntityStore.take(key, event, draft=ID)``) and the
new epoch pins it: the row keeps its id, version and digest (:data:`PINS`), set by the
compiled write from the draft as the same statement reads it. The guards over drafts are
compiled from their kinds like any other (``_predicates``): ``draft_ready`` reads the draft
named, ``draft_pinned`` the pinned draft as it is now. A transition declared
``dispatches`` marks the pinned draft dispatched in the same transaction, where it is still
at the version pinned. An edit of the pinned draft is refused while the entity is in a
state such a transition leaves (``Spec.pinning_states``): what is dispatched is what was
approved. Where the declaration allows one live draft per entity
(``one_live_per_target``), a second pending or approved one is refused.

An author's operation locks the entity's row first (creating it, in the initial state,
where it has none yet), then the draft's, in the order an event's transaction takes them,
so an edit and a start of the same entity are ordered and never deadlock. History records
each change of a draft beside the events (``_entity_history.DRAFT_ENTRIES``): an author's
create, edit and approve (approving an approved draft changes nothing and records
nothing), and the dispatch, right after the entry of the transition that made it, each
with the draft's id, version and digest as the change left them and the row as it is.
So the audit judges the guards over drafts and the declared ``pinned`` invariants on
history, as it judges the others.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from claimfsm.errors import InvalidArgument, NotFound
from claimfsm.spec import Spec
from claimfsm.store import _entity_history as entries
from claimfsm.store import _validate as check
from claimfsm.store._draft_rules import approve_refusal, edit_refusal, one_live_refusal
from claimfsm.store._entity_drivers import Tx
from claimfsm.store._tokens import content_digest, fingerprint
from claimfsm.store._types import Draft

if TYPE_CHECKING:
    from claimfsm.store._entity import EntityStore

#: The row's columns that pin a draft, where the declaration has drafts: NULL before a take.
PINS = ("draft_id", "draft_version", "draft_digest")
#: Their SQL types, in that order.
PIN_TYPES = ("INTEGER", "INTEGER", "TEXT")
#: A draft as the store reads it, in this order (``Draft``'s fields).
SELECT = "draft_id, target_id, version, digest, status, content"


def pin_columns(spec: Spec) -> tuple[str, ...]:
    """The row's columns that pin a draft: :data:`PINS` with ``[drafts]``, else none."""
    return PINS if spec.drafts is not None else ()


def request_key(key: str, draft_id: int, version: int, drawn: str) -> str:
    """The idempotency key a request carries where the epoch pinned a draft: the entity's
    key, the draft and its version, and the key an event drew (``fresh_key``), where one
    did. A request carries the content it was pinned at, so two versions, or two drafts,
    are two requests to the remote, and a resend of one is the same request."""
    return f"{key}#d{draft_id}v{version}" + (f"#{drawn}" if drawn else "")


def drawn_of(key: str, request_key: str) -> str:
    """The key an event drew, in ``request_key`` as :func:`request_key` made it for entity
    ``key`` ("": none drawn; a key not made so is returned as it is)."""
    head = f"{key}#d"
    if not request_key.startswith(head):
        return request_key
    _pin, _, drawn = request_key[len(head) :].partition("#")
    return drawn


def pinned_of(key: str, request_key: str) -> int:
    """The draft named in ``request_key`` as :func:`request_key` made it for entity ``key``
    (0: none, where the key was not made so)."""
    pin = pin_of(key, request_key)
    return 0 if pin is None else pin[0]


def pin_of(key: str, request_key: str) -> tuple[int, int] | None:
    """The draft and version named in ``request_key`` as :func:`request_key` made it for
    entity ``key`` (None: none, where the key was not made so)."""
    head = f"{key}#d"
    pin = request_key[len(head) :].partition("#")[0] if request_key.startswith(head) else ""
    draft, _, version = pin.partition("v")
    return (int(draft), int(version)) if draft.isdigit() and version.isdigit() else None


def schema(table: str, name: str, serial: str, index: Callable[[str, str, str], str]) -> list[str]:
    """The drafts table ``table`` (``name``: its unqualified name, for its index, which
    ``index``, the driver's, makes where it is missing)."""
    return [
        f"CREATE TABLE IF NOT EXISTS {table} (draft_id {serial}, target_id TEXT NOT NULL,"
        " content TEXT NOT NULL, version INTEGER NOT NULL CHECK (version >= 1),"
        " digest TEXT NOT NULL,"
        " status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'dispatched')),"
        " updated_at DOUBLE PRECISION NOT NULL)",
        index(f"{name}_by_key", table, "target_id, status"),
    ]


@dataclass(frozen=True)
class DraftSql:
    """The statements over one lifecycle's drafts table (``m``: the driver's marker)."""

    table: str
    m: str

    @property
    def read(self) -> str:
        return f"SELECT {SELECT} FROM {self.table} WHERE draft_id = {self.m}"  # noqa: S608

    def of(self, status: bool) -> str:
        where = f"target_id = {self.m}" + (f" AND status = {self.m}" if status else "")
        return f"SELECT {SELECT} FROM {self.table} WHERE {where} ORDER BY draft_id"  # noqa: S608

    @property
    def insert(self) -> str:
        return (
            f"INSERT INTO {self.table} (target_id, content, version, digest, status,"  # noqa: S608
            f" updated_at) VALUES ({self.m}, {self.m}, 1, {self.m}, 'pending', {self.m})"
            f" RETURNING {SELECT}"
        )

    @property
    def update(self) -> str:
        m = self.m
        return (
            f"UPDATE {self.table} SET content = {m}, version = {m}, digest = {m},"  # noqa: S608
            f" status = {m}, updated_at = {m} WHERE draft_id = {m}"
        )

    @property
    def live(self) -> str:
        return (
            f"SELECT {SELECT} FROM {self.table} WHERE target_id = {self.m}"  # noqa: S608
            " AND status IN ('pending', 'approved') ORDER BY draft_id"
        )

    def dispatched(self, rows: str) -> str:
        """The pinned draft of the entity (``rows``: the row table) made dispatched, where
        it is still at the version pinned: run after the write, so a take that dispatches
        marks the draft it pinned."""
        m = self.m
        pinned = f"SELECT draft_id, draft_version FROM {rows} WHERE key = {m}"  # noqa: S608
        return (
            f"UPDATE {self.table} SET status = 'dispatched', updated_at = {m}"  # noqa: S608
            f" WHERE (draft_id, version) IN ({pinned}) RETURNING draft_id, version, digest"
        )


def read(tx: Tx, sql: DraftSql, draft_id: int) -> Draft | None:
    found = tx.one(sql.read, (draft_id,))
    return None if found is None else Draft(*found)


def _draft(tx: Tx, sql: DraftSql, draft_id: int) -> Draft:
    found = read(tx, sql, draft_id)
    if found is None:
        raise NotFound(f"no draft {draft_id}; create_draft returns the id to use")
    return found


def _hold(store: EntityStore, tx: Tx, key: str) -> tuple[Any, ...]:
    """The entity's row, locked (created in the initial state where it has none yet)."""
    defaults = tuple(store.spec.columns[c].default for c in store._columns)
    tx.run(store._sql["missing"], (key, store.spec.initial, *defaults))
    return store._locked(tx, key)


def _record(store: EntityStore, tx: Tx, row: tuple[Any, ...], event: str, d: Draft) -> None:
    """The entry of an author's change of draft ``d`` on the entity's (held) ``row``."""
    view = store._view(row)
    record = (
        *(row[0], view.epoch, event, view.state, view.state, store._now(tx), None),
        *(fingerprint(view.token_hash), view.lease_deadline),
        entries.draft_facts(d.draft_id, d.version, d.digest),
        *(row[5] or "", store._request_key(row), ""),
    )
    tx.defer(store._sql["append"], record)


def dispatched(record: tuple[Any, ...], found: tuple[Any, ...]) -> tuple[Any, ...]:
    """The entry of a dispatch (``found``: the draft's id, version and digest) that the
    transition recorded as ``record`` made: the row as that transition left it."""
    r = entries
    state = record[r.DEST]
    return (
        *(record[r.KEY], record[r.EPOCH], r.DRAFT_DISPATCH, state, state, record[r.AT], None),
        *(record[r.TOKEN], record[r.LEASE], r.draft_facts(*found)),
        *(record[r.OWNER], record[r.REQUEST_KEY], ""),
    )


def create(store: EntityStore, key: str, content: str) -> Draft:
    check.text_id(key, "key")
    check.content(content)
    sql = store._drafts

    def body(tx: Tx) -> Draft:
        row = _hold(store, tx, key)
        if store._one_live:
            live = tx.all(sql.live, (key,))
            if live:
                first = Draft(*live[0])
                entity = f"{store.spec.name} {key!r}"
                raise one_live_refusal(entity, first.draft_id, first.status)
        now = store._now(tx)
        made = Draft(*tx.one(sql.insert, (key, content, content_digest(content), now)))
        _record(store, tx, row, entries.DRAFT_CREATE, made)
        return made

    return store._driver.rerun(body)


def edit(store: EntityStore, draft_id: int, content: str) -> Draft:
    check.positive_int(draft_id, "draft_id")
    check.content(content)
    sql = store._drafts

    def body(tx: Tx) -> Draft:
        key = _draft(tx, sql, draft_id).target_id  # a draft's entity never changes
        held = _hold(store, tx, key)
        row = store._view(held)
        draft = _draft(tx, sql, draft_id)  # as it is now, the entity held
        pinned = (row.draft_id, row.epoch, row.state)
        entity = f"{store.spec.name} {key!r}"
        refusal = edit_refusal(draft_id, draft.status, entity, pinned, store._pinning)
        if refusal is not None:
            raise refusal
        edited = Draft(
            draft_id, key, draft.version + 1, content_digest(content), "pending", content
        )
        _write(store, tx, edited)
        _record(store, tx, held, entries.DRAFT_EDIT, edited)
        return edited

    return store._driver.rerun(body)


def approve(store: EntityStore, draft_id: int) -> Draft:
    """pending -> approved (approving an approved draft changes nothing)."""
    check.positive_int(draft_id, "draft_id")
    sql = store._drafts

    def body(tx: Tx) -> Draft:
        held = _hold(store, tx, _draft(tx, sql, draft_id).target_id)
        draft = _draft(tx, sql, draft_id)
        refusal = approve_refusal(draft_id, draft.status)
        if refusal is not None:
            raise refusal
        if draft.status == "pending":
            draft = Draft(
                draft.draft_id,
                draft.target_id,
                draft.version,
                draft.digest,
                "approved",
                draft.content,
            )
            _write(store, tx, draft)
            _record(store, tx, held, entries.DRAFT_APPROVE, draft)
        return draft

    return store._driver.rerun(body)


def _write(store: EntityStore, tx: Tx, d: Draft) -> None:
    now = store._now(tx)
    tx.run(store._drafts.update, (d.content, d.version, d.digest, d.status, now, d.draft_id))


def get(store: EntityStore, draft_id: int) -> Draft:
    check.positive_int(draft_id, "draft_id")
    return store._driver.rerun(lambda tx: _draft(tx, store._drafts, draft_id))


def listed(store: EntityStore, key: str, status: str | None) -> list[Draft]:
    check.text_id(key, "key")
    if status not in (None, "pending", "approved", "dispatched"):
        raise InvalidArgument(
            f"status must be None, 'pending', 'approved' or 'dispatched', not {status!r}"
        )
    args = (key,) if status is None else (key, status)
    found = store._driver.rerun(lambda tx: tx.all(store._drafts.of(status is not None), args))
    return [Draft(*r) for r in found]
