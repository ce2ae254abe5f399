"""A store for any declared lifecycle: one row per entity key, on SQLite or PostgreSQL.

The row holds the entity's state, its epoch, the hash of the current owner token, the
lease deadline, the owner's name, the declaration's own ``[columns]``, where an event
draws one (``fresh_key``), the request key a request to the remote carries (NULL: the
entity's own key), and with linked drafts the draft the epoch pinned (``_entity_drafts``).
Every event is one guarded ``UPDATE`` compiled from the declaration
(``_entity_sql.compile_event``): the guards of each of the event's transitions become the
``WHERE``, the destination a ``CASE``, and the event's declared effects the other
assignments (a taker's new epoch and token, a fresh token, the lease, bumped counters, a
fresh request key). History is appended in the same transaction: the
transition taken, or a stale owner's refused operation (``refused``), which changes nothing
else; each entry records the row as it left it, its lease included (``_entity_history``).
When the write matches no row, the store reads the row and explains the refusal with the
declaration's ``transitions`` machine (``claimfsm.machine.LifecycleMachine``); if the
machine takes a transition the SQL refused, or the reverse, that is a
:class:`DeclarationMismatch`, never silence.

On PostgreSQL an event is first tried as one statement (``_entity_sql.compile_one_statement``):
the row locked, the guarded write (or, for an entity with no row yet, the row created as
the event leaves it), and the row it replaced returned, on which the machine must agree
before the commit; BEGIN goes with it and the history record with COMMIT, so the common
case is two round trips. Refused, and the same transaction goes on as above. A
transaction the database rolls back (a deadlock, a serialization failure, a connection
lost before COMMIT) is run again on a fresh connection, up to ``retries`` times; a COMMIT
whose answer was lost is settled by the server's word on the transaction, whose id the one
statement returns, or the locked row on the transaction path (no round trip of its own),
waiting while the old backend still commits; or else from history:
its record there means it happened (the drivers: ``_entity_drivers``).

Who may take an event is its declared role (``Spec.role``): :meth:`EntityStore.take` for a
taker's (a new epoch; the caller gets a :class:`Handle` with a secret token),
:meth:`EntityStore.act` for an owner's (on its handle), :meth:`EntityStore.operate` for the
operator's and the sweep's (naming the current epoch, or the one given).

SQL text is built only from identifiers the loader checked (state, column and lifecycle
names are words) and the schema name ``split_url`` checked; every value is a bound
parameter. Hence the ``noqa: S608``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from claimfsm.errors import (
    REFUSALS,
    DeclarationMismatch,
    IllegalTransition,
    InvalidArgument,
    NotFound,
    Refused,
    SpecError,
    StaleClaim,
)
from claimfsm.machine._entity import CallerView, LifecycleMachine, RowView
from claimfsm.machine._guards import explained, stale_state
from claimfsm.spec import (
    STALE_STATE,
    Spec,
    TransitionDecl,
    lifecycle_facts,
)
from claimfsm.spec._roles import FACT_KINDS, FACT_WORDS
from claimfsm.store import _entity_drafts as drafting
from claimfsm.store import _entity_history as entries
from claimfsm.store import _entity_upkeep as _upkeep
from claimfsm.store import _validate as check
from claimfsm.store._core import Pruned
from claimfsm.store._entity_drafts import PIN_TYPES, DraftSql, pin_columns
from claimfsm.store._entity_drivers import (
    Driver,
    LostCommit,
    Postgres,
    Retry,
    SQLite,
    Tx,
    rerun,
)
from claimfsm.store._entity_history import (
    DEST,
    EPOCH,
    REQUEST_KEY,
    EntityHistory,
    facts_text,
)
from claimfsm.store._entity_sql import (
    PRIOR,
    WORD,
    check_storable,
    compile_event,
    compile_one_statement,
    row_extras,
    table_names,
)
from claimfsm.store._entity_upkeep import Swept
from claimfsm.store._predicates import guard_constants
from claimfsm.store._tokens import fingerprint, fresh_idempotency_key, new_token, token_hash
from claimfsm.store._types import Draft

Clock = Callable[[], float]


@dataclass(frozen=True)
class Handle:
    """What an owner holds: the entity, the epoch and the secret token (never shown)."""

    key: str
    epoch: int
    token: str = field(repr=False)
    state: str = ""  # the state the owner's last operation left the entity in
    #: the idempotency key a request to the remote carries: the entity's key, or the one
    #: an event declared ``fresh_key`` drew, as the owner's last operation left the row
    #: (with linked drafts, naming the pinned draft and its version as well)
    request_key: str = ""
    #: the draft the epoch pinned (linked drafts; 0: none)
    draft: int = 0

    def __repr__(self) -> str:
        return (
            f"Handle(key={self.key!r}, epoch={self.epoch}, state={self.state!r}, "
            f"token={fingerprint(token_hash(self.token))}…)"
        )


@dataclass(frozen=True)
class EntityRow:
    key: str
    state: str
    epoch: int
    lease_deadline: float | None
    owner: str | None
    columns: Mapping[str, int]
    token_fingerprint: str  # a non-secret label of the current token
    #: the idempotency key a request to the remote carries now: the entity's key, or the
    #: one an event declared ``fresh_key`` drew last
    request_key: str = ""
    #: readback's outcome the row records (an event declared ``outcome``) in this epoch:
    #: ``present`` or ``absent``; None: none
    outcome: str | None = None
    #: the draft the epoch pinned, its version and its content's digest, as the take read
    #: them (a declaration with ``[drafts]``); None: none pinned
    draft_id: int | None = None
    draft_version: int | None = None
    draft_digest: str | None = None


@dataclass(frozen=True)
class _Call:
    """One event as the caller asked for it (what a retry runs again)."""

    key: str
    event: str
    epoch: int | None
    token: str | None = field(repr=False)
    values: dict[str, Any]
    lease_seconds: float
    facts: dict[str, Any]
    current: bool
    detail: str = ""


class EntityStore:
    """The entities of one declared lifecycle in a database (see the module's docstring).

    Open it with :func:`open_entity_store`. Methods are safe to call from several
    threads: on PostgreSQL each transaction takes a connection of the store's pool, on
    SQLite the store's one connection runs one transaction at a time.
    """

    def __init__(
        self,
        spec: Spec,
        driver: Driver,
        *,
        clock: Clock | None = None,
        prefix: str = "lc",
        retries: int = 5,
        create: bool = True,
    ) -> None:
        try:
            self._open(spec, driver, clock, prefix, retries, create)
        except BaseException:
            driver.close()  # the store owns the driver from here: nothing is left open
            raise

    def _open(
        self,
        spec: Spec,
        driver: Driver,
        clock: Clock | None,
        prefix: str,
        retries: int,
        create: bool,
    ) -> None:
        """Compile ``spec``'s writes for ``driver``, then create or check the tables."""
        check_storable(spec)
        spec = spec.lifecycle_view()  # a pseudo initial state's takers, out of every state
        self.spec = spec
        #: The declaration's ``transitions`` machine: it explains what the SQL refused.
        self.machine = LifecycleMachine(spec)
        table, history = table_names(spec, prefix)
        self.table, self.history_table = driver.qualify(table), driver.qualify(history)
        #: while a row here allows it, history up to its seq may be deleted (pruning, reset)
        self._permit = driver.qualify(f"{history}_permit")
        self._history_name, self._table_name = history, table
        self._driver = driver
        self._clock = clock
        self._columns = tuple(spec.columns)
        #: the row's columns read after the counters (a drawn request key, an outcome)
        self._extras = row_extras(spec)
        #: the events that draw a fresh request key (``fresh_key``)
        self._draws = spec.events_setting("fresh_key")
        #: the events that record readback's outcome (``outcome``): their caller brings it
        self._records = spec.events_setting("outcome")
        #: the pins of a declaration with linked drafts, read after the extras
        self._pins = pin_columns(spec)
        #: the statements over the drafts table (``_entity_drafts``); unused without drafts
        self._drafts = DraftSql(driver.qualify(f"{table}_drafts"), driver.marker)
        self._drafts_name = f"{table}_drafts"
        #: where an edit of the pinned draft is refused: it may yet be dispatched
        self._pinning = spec.pinning_states()
        self._one_live = spec.drafts is not None and spec.drafts.one_live_per_target
        drafts = self._drafts.table if self._pins else None
        returning = "state, epoch, lease_deadline, owner" + (
            ", draft_id, draft_version" if self._pins else ""
        )
        self._writes = {
            e: compile_event(spec, e, self.table, driver.marker, drafts=drafts, returning=returning)
            for e in spec.events
        }
        self._durable = spec.durable_events()  # read by every write: once
        #: each event's write as one statement, where the database can also return the row
        #: it replaced and create a new entity's (PostgreSQL), with linked drafts the draft
        #: its guards read too
        self._one_statement = (
            {
                e: compile_one_statement(spec, e, self.table, driver.marker, drafts)
                for e in spec.events
            }
            if driver.one_statement
            else {}
        )
        #: how many columns of the row it replaced the one statement returns
        self._prior_width = len(PRIOR) + len(self._columns) + len(self._extras) + len(self._pins)
        #: how many times a transaction the database rolled back is run again
        self.retries = retries
        m, t, h = driver.marker, self.table, self.history_table
        select = ", ".join(
            [
                *("key", "state", "epoch", "token_hash", "lease_deadline", "owner"),
                *self._columns,
                *self._extras,
                *self._pins,
            ]
        )
        self._sql = {
            "row": f"SELECT {select} FROM {t} WHERE key = {m}",  # noqa: S608
            "rows": f"SELECT {select} FROM {t} ORDER BY key",  # noqa: S608
            # the row, locked; on PostgreSQL also the transaction's id (the lock gives it
            # one), which settles a lost commit without a round trip of its own
            "locked": f"SELECT {select}{driver.transaction_id_column}"  # noqa: S608
            f" FROM {t} WHERE key = {m}{driver.lock_clause}",
            "history": f"SELECT {entries.SELECT} FROM {h}",  # noqa: S608
            "append": f"INSERT INTO {h} ({', '.join(entries.RECORD)})"  # noqa: S608
            f" VALUES ({', '.join([m] * len(entries.RECORD))})",
            "missing": driver.insert_if_missing(t, self._columns),
            # a record appended by a commit whose answer was lost: there, it happened
            "recorded": f"SELECT 1 FROM {h} WHERE key = {m} AND epoch = {m} AND event = {m}"  # noqa: S608
            f" AND source = {m} AND dest = {m} AND at = {m}"
            f" AND COALESCE(refused, '') = COALESCE({m}, '') AND token_fingerprint = {m}",
            "permit": f"INSERT INTO {self._permit} (upto) VALUES ({m})",  # noqa: S608
            "unpermit": f"DELETE FROM {self._permit}",  # noqa: S608
            "reset_history": f"DELETE FROM {h}",  # noqa: S608
            "reset_rows": f"DELETE FROM {t}",  # noqa: S608
        }
        self._constants = guard_constants(spec)
        #: the evidence its callers may bring (the remote's too, where it declares one)
        self._facts = lifecycle_facts(spec)
        if create:
            driver.rerun(lambda tx: self._prepare(tx, create=True))
        elif not driver.has_table(table):
            raise NotFound(
                f"no {spec.name} store here: table {self.table} does not exist; open it"
                " once from the library (open_entity_store) to create it, or check the"
                " URL and the declaration"
            )
        else:
            driver.rerun(lambda tx: self._prepare(tx, create=False))

    # -- the three ways to act -------------------------------------------------------------
    def take(
        self,
        key: str,
        event: str,
        *,
        owner: str = "",
        lease_seconds: float = 30.0,
        facts: Mapping[str, Any] | None = None,
        detail: str = "",
        draft: int | None = None,
    ) -> Handle:
        """A taker's event (``by = "taker"``): a new epoch begins and the caller holds it.
        ``detail``: what the caller says of it, recorded in history (as every call's).
        ``draft``: the entity's draft the new epoch pins, where the declaration has linked
        drafts (``[drafts]``; :meth:`create_draft` returns its id): required there, and
        refused elsewhere."""
        self._role(event, "taker", "take(key, event)")
        if self._pins:
            check.positive_int(draft, "draft")
        elif draft is not None:
            raise InvalidArgument(
                f"{self.spec.name} declares no [drafts]: take(key, event) names no draft"
            )
        return self._hand_over(
            key, event, owner, lease_seconds, facts, detail, current=False, draft=draft
        )

    def act(
        self,
        handle: Handle,
        event: str,
        *,
        lease_seconds: float = 30.0,
        facts: Mapping[str, Any] | None = None,
        detail: str = "",
    ) -> Handle:
        """An owner's event, on its handle; returns the handle to use next (a new token
        where the event declares ``fresh_token``). ``detail``: what the caller says of it
        (why a job failed, say), recorded in history."""
        if not isinstance(handle, Handle):
            raise InvalidArgument(f"act() takes the Handle take() returned, not {handle!r}")
        self._role(event, "owner", "act(handle, event)")
        fresh = self._fresh(event)
        token = new_token() if fresh else handle.token
        record = self._write(
            handle.key,
            event,
            epoch=handle.epoch,
            token=handle.token,
            values={"new_token_hash": token_hash(token) if fresh else None, "owner": ""},
            lease_seconds=lease_seconds,
            facts=facts,
            detail=detail,
        )
        return Handle(
            handle.key,
            record[EPOCH],
            token,
            record[DEST],
            record[REQUEST_KEY] or handle.key,
            handle.draft,
        )

    def take_over(
        self,
        key: str,
        event: str,
        *,
        owner: str = "",
        lease_seconds: float = 30.0,
        facts: Mapping[str, Any] | None = None,
        detail: str = "",
    ) -> Handle:
        """The operator's event that draws a fresh token (``fresh_token``; a remote's
        ``resends``: take the current epoch over and send again), naming the current
        epoch: the caller holds it with the new token, and every earlier handle is stale."""
        self._role(event, "operator", "take_over(key, event)")
        if not self._fresh(event):
            raise InvalidArgument(
                f"event {event!r} draws no fresh token, so nobody takes the epoch over with"
                " it: use operate(key, event)"
            )
        return self._hand_over(key, event, owner, lease_seconds, facts, detail, current=True)

    def _hand_over(
        self,
        key: str,
        event: str,
        owner: str,
        lease_seconds: float,
        facts: Mapping[str, Any] | None,
        detail: str,
        *,
        current: bool,
        draft: int | None = None,
    ) -> Handle:
        """``event`` with a new token, held by its caller: a taker's (a new epoch) or,
        ``current``, a take-over naming the current epoch; the caller's handle."""
        token = new_token()
        record = self._write(
            key,
            event,
            epoch=None,
            token=None,
            values={"new_token_hash": token_hash(token), "owner": owner, "draft_id": draft},
            lease_seconds=lease_seconds,
            facts=facts,
            current=current,
            detail=detail,
        )
        request_key = record[REQUEST_KEY] or key
        # the draft pinned: the one a taker named, or the current epoch's (a take-over)
        pinned = draft if draft is not None else drafting.pinned_of(key, request_key)
        return Handle(key, record[EPOCH], token, record[DEST], request_key, pinned)

    def operate(
        self,
        key: str,
        event: str,
        *,
        epoch: int | None = None,
        facts: Mapping[str, Any] | None = None,
        detail: str = "",
    ) -> str:
        """The operator's or the sweep's event on ``key``, naming ``epoch`` (default: the
        current one, read in the same transaction); returns the state it leads to.
        ``detail``: what the caller says of it, recorded in history."""
        self._role(event, ("operator", "sweep"), "operate(key, event)")
        if self._fresh(event):
            raise InvalidArgument(
                f"event {event!r} draws a fresh token: its caller takes the epoch over and"
                " holds it; use take_over(key, event), which returns the handle"
            )
        state: str = self._operate(key, event, epoch=epoch, facts=facts, detail=detail)[DEST]
        return state

    def _fresh(self, event: str) -> bool:
        """Whether ``event`` draws a fresh owner token (``fresh_token``)."""
        decl = self.spec.effects.get(event)
        return decl is not None and "fresh_token" in decl.sets

    def _operate(
        self,
        key: str,
        event: str,
        *,
        epoch: int | None,
        facts: Mapping[str, Any] | None,
        detail: str = "",
    ) -> tuple[Any, ...]:
        """The operator's or the sweep's event; the history record it appended."""
        return self._write(
            key,
            event,
            epoch=epoch,
            token=None,
            values={"new_token_hash": None, "owner": ""},
            lease_seconds=0.0,
            facts=facts,
            current=epoch is None,
            detail=detail,
        )

    # -- linked drafts (``_entity_drafts``) ----------------------------------------------
    def create_draft(self, key: str, content: str) -> Draft:
        """A new pending draft of entity ``key`` (version 1). Refused (``TargetBusy``) where
        the declaration allows one live draft per entity and ``key`` has one."""
        return drafting.create(self._drafting(), key, content)

    def edit_draft(self, draft_id: int, content: str) -> Draft:
        """New content: the draft is pending again, at the next version. Refused for a
        dispatched draft, and (``TargetBusy``) for the draft an epoch pinned while that
        epoch may yet dispatch it (``Spec.pinning_states``)."""
        return drafting.edit(self._drafting(), draft_id, content)

    def approve_draft(self, draft_id: int) -> Draft:
        """pending -> approved (approving an approved draft changes nothing)."""
        return drafting.approve(self._drafting(), draft_id)

    def draft(self, draft_id: int) -> Draft:
        return drafting.get(self._drafting(), draft_id)

    def drafts(self, key: str, *, status: str | None = None) -> list[Draft]:
        """Entity ``key``'s drafts, oldest first, optionally only those with ``status``."""
        return drafting.listed(self._drafting(), key, status)

    def _drafting(self) -> EntityStore:
        if not self._pins:
            raise InvalidArgument(
                f"{self.spec.name} declares no [drafts]: its entities have no linked drafts"
            )
        return self

    # -- reading ------------------------------------------------------------------------
    def row(self, key: str) -> EntityRow | None:
        found = self._driver.rerun(lambda tx: tx.one(self._sql["row"], (key,)))
        return None if found is None else self._entity(found)

    def rows(self) -> list[EntityRow]:
        found = self._driver.rerun(lambda tx: tx.all(self._sql["rows"], ()))
        return [self._entity(r) for r in found]

    def history(self, key: str | None = None) -> list[EntityHistory]:
        query = self._sql["history"]
        args: tuple[Any, ...] = ()
        if key is not None:
            query, args = query + f" WHERE key = {self._driver.marker}", (key,)
        found = self._driver.rerun(lambda tx: tx.all(query + " ORDER BY seq", args))
        return [EntityHistory.read(r) for r in found]

    def iter_history(self, page: int = 10_000) -> Iterator[EntityHistory]:
        """Every entity's history in ``seq`` order, read ``page`` entries at a time: for a
        history too long to hold at once, the entries :meth:`history` would have returned
        when the first page was read.

        The pages are one snapshot, read in one read transaction on a connection of its
        own (SQLite: a second connection to the file; PostgreSQL: one of the pool's,
        ``REPEATABLE READ``, through a server-side cursor). The store may write and prune
        meanwhile; none of it is seen, so a :meth:`prune_history` between two pages leaves
        the entries it removed in the stream and no checkpoint among them. The connection
        is held until the last page is read or the iterator is closed (``close()``, or
        dropped): close one read only in part. An in-memory SQLite store is read whole in
        one transaction, then handed out a page at a time."""
        if not isinstance(page, int) or isinstance(page, bool) or page < 1:
            raise InvalidArgument(f"page must be a positive int, not {page!r}")
        query = self._sql["history"] + " ORDER BY seq"
        for rows in self._driver.stream(query, (), page):
            for r in rows:
                yield EntityHistory.read(r)

    def now(self) -> float:
        return self._driver.rerun(self._now)

    # -- upkeep (``_entity_upkeep``) ------------------------------------------------------
    def sweep(self) -> list[Swept]:
        """Apply the sweep's events (``by = "sweep"``) to every entity where they hold now,
        each in a transaction of its own as :meth:`operate` applies it; returns what was
        applied. A row that moved on since it was read is left to the next sweep."""
        return _upkeep.sweep(self)

    def prune_history(
        self,
        older_than: float,
        *,
        archive: Callable[[list[EntityHistory]], None] | None = None,
        batch: int = 10_000,
    ) -> Pruned:
        """Remove history entries older than ``older_than`` seconds (by the store's clock),
        in one transaction: every entry up to the newest such one, so each entity loses a
        prefix of its history, and a ``checkpoint`` entry (same seq) records its state and
        epoch where its removed entries end. ``archive`` is given the removed entries first,
        in seq order and in batches; if it raises, nothing is removed."""
        seconds = check.duration(older_than, "older_than")
        if archive is not None and not callable(archive):
            raise InvalidArgument("archive must be None or a callable taking a list of entries")
        check.positive_int(batch, "batch")
        return _upkeep.prune(self, seconds, archive, batch)

    def reset(self) -> None:
        """Delete every entity and its history (tests and ``claimfsm verify``)."""

        def reset(tx: Tx) -> None:
            tx.run(self._sql["permit"], (2**62,))
            tx.run(self._sql["reset_history"], ())
            tx.run(self._sql["unpermit"], ())
            tx.run(self._sql["reset_rows"], ())
            if self._pins:
                tx.run(f"DELETE FROM {self._drafts.table}", ())  # noqa: S608

        self._driver.rerun(reset)

    def drop(self) -> None:
        """Drop this lifecycle's two tables (``claimfsm verify`` leaves a database as it
        found it)."""
        self._driver.run_all(
            [
                f"DROP TABLE IF EXISTS {self.history_table}",
                f"DROP TABLE IF EXISTS {self._permit}",
                f"DROP TABLE IF EXISTS {self.table}",
                f"DROP TABLE IF EXISTS {self._drafts.table}",
                *self._driver.drop_function(f"{self._history_name}_append_only"),
            ]
        )

    def close(self) -> None:
        self._driver.close()

    def __enter__(self) -> EntityStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- inside -------------------------------------------------------------------------
    def _entity(self, r: tuple[Any, ...]) -> EntityRow:
        draft_id, draft_version, draft_digest = self._pinned(r)
        return EntityRow(
            key=r[0],
            state=r[1],
            epoch=r[2],
            lease_deadline=r[4],
            owner=r[5],
            columns=dict(zip(self._columns, r[6 : 6 + len(self._columns)], strict=True)),
            token_fingerprint=fingerprint(r[3]),
            request_key=self._request_key(r) or r[0],
            outcome=self._extra(r, "outcome"),
            draft_id=draft_id,
            draft_version=draft_version,
            draft_digest=draft_digest,
        )

    def _extra(self, r: tuple[Any, ...], name: str) -> Any:
        """Column ``name`` of :func:`row_extras` in a row as ``row`` reads it (None: the
        row has no such column)."""
        if name not in self._extras:
            return None
        return r[6 + len(self._columns) + self._extras.index(name)]

    def _request_key(self, r: tuple[Any, ...], drawn: str | None = None) -> str:
        """The request key a row (as ``row`` reads it) holds, or would hold with the key
        ``drawn`` instead of its own: "" for the entity's own. With linked drafts, it
        names the pinned draft and version as well (``_entity_drafts.request_key``)."""
        own = drawn or self._extra(r, "request_key") or ""
        pinned, version, _ = self._pinned(r)
        if pinned is None:
            return own
        return drafting.request_key(r[0], pinned, version, own)

    def _role(self, event: str, role: str | tuple[str, ...], call: str) -> None:
        if event not in self._writes:
            raise InvalidArgument(
                f"{self.spec.name} has no event {event!r}; its events: {list(self.spec.events)}"
            )
        actual = self.spec.role(event)
        if actual == "refusal":
            raise InvalidArgument(
                f"event {event!r} is the record of a stale owner's refused operation"
                ' (by = "refusal"): no one takes it; the store records a refusal itself'
            )
        if actual not in ((role,) if isinstance(role, str) else role):
            use = {"taker": "take(key, event)", "owner": "act(handle, event)"}.get(actual) or (
                "take_over(key, event)" if self._fresh(event) else "operate(key, event)"
            )
            raise InvalidArgument(
                f"event {event!r} is the {actual}'s, not taken with {call}: use {use}"
            )

    def _now(self, tx: Tx) -> float:
        return self._clock() if self._clock is not None else self._driver.server_now(tx)

    def _write(
        self,
        key: str,
        event: str,
        *,
        epoch: int | None,
        token: str | None,
        values: dict[str, Any],
        lease_seconds: float,
        facts: Mapping[str, Any] | None,
        current: bool = False,
        detail: str = "",
    ) -> tuple[Any, ...]:
        """One event in one transaction: the guarded write, and its history; or the
        refusal, explained (a stale owner's is recorded, and nothing else changes). Run
        again where the database rolled it back (a deadlock, a serialization failure, a
        connection lost before the commit), up to ``retries`` times. Returns the history
        record appended (``EPOCH`` and ``DEST`` index the epoch and state it left)."""
        if not isinstance(key, str) or not key:
            raise InvalidArgument(f"key must be a non-empty str, not {key!r}")
        check.reason(detail, "detail")
        facts = dict(facts or {})
        unknown = set(facts) - self._facts
        if unknown:
            raise InvalidArgument(f"unknown facts {sorted(unknown)}: use {sorted(self._facts)}")
        for name, value in facts.items():
            kind, said = FACT_KINDS[name]
            if (
                not isinstance(value, kind)
                or (kind is int and isinstance(value, bool))
                or (name in FACT_WORDS and value not in FACT_WORDS[name])
            ):
                raise InvalidArgument(f"fact {name} must be {said}, not {value!r}")
        if event in self._records and "outcome" not in facts:
            raise InvalidArgument(
                f"event {event!r} records readback's outcome (sets outcome): bring it,"
                ' facts={"outcome": "present"} or {"outcome": "absent"}'
            )
        if event in self._draws:  # a fresh request key, written by the event's write
            values = {**values, "new_request_key": fresh_idempotency_key()}
        call = _Call(key, event, epoch, token, values, lease_seconds, facts, current, detail)
        record, outcome = rerun(
            lambda: self._attempt(call),
            retries=self.retries,
            what=f"{self.spec.name} {key!r}: {event}",
        )
        if isinstance(outcome, Refused):
            raise outcome  # a stale owner's refusal, recorded (committed) first
        return record

    def _attempt(self, call: _Call) -> tuple[tuple[Any, ...], tuple[str, int] | Refused]:
        """One transaction of ``call``. A commit lost in flight is settled by the driver
        where the server can say (the transaction's id); else from history: its record
        there means it happened; none means it did not (run it again)."""
        decided: list[tuple[tuple[Any, ...], tuple[str, int] | Refused]] = []
        try:
            with self._driver.transaction(durable=call.event in self._durable) as tx:
                decided.append(self._decide(tx, call))
        except LostCommit as lost:
            identity = decided[0][0][: entries.LEASE] if decided else ()
            if not decided or not self._driver.recorded(self._sql["recorded"], identity):
                raise Retry() from lost.__cause__
        return decided[0]

    def _decide(self, tx: Tx, call: _Call) -> tuple[tuple[Any, ...], tuple[str, int] | Refused]:
        """What the event does to the row, written in ``tx``: the history record appended
        (deferred to the commit) and the outcome, the (state, epoch) the event led to or a
        stale owner's refusal. Any other refusal is raised: nothing is written."""
        key, event, epoch, values, facts = call.key, call.event, call.epoch, call.values, call.facts
        presented = None if call.token is None else token_hash(call.token)
        bound = self._params(key, values, facts, presented)
        one = self._one_statement.get(event)
        if one is not None:
            # An existing entity's write, one statement: it returns the row it replaced,
            # on which the declaration's machine must agree before the commit.
            found = tx.one(
                one.sql,
                one.bind(
                    {
                        **bound,
                        "clock_now": None if self._clock is None else self._clock(),
                        "current": call.current,
                        "epoch": epoch,
                        "lease_seconds": call.lease_seconds,
                    }
                ),
            )
            if found is not None:
                tx.transaction_id, found = found[-1], found[:-1]
                state, new_epoch, lease, now = found[0], found[1], found[2], float(found[3])
                width = 4 + self._prior_width  # the row it replaced, then its owner now
                replaced, owner, tail = found[4:width], found[width], found[width + 1 :]
                prior = (key, *replaced[:4], None, *replaced[4:])
                view = self._view(prior)
                left, draft = prior, None
                if self._pins:  # the pins it left, and the draft its guards read
                    at = 6 + len(self._columns) + len(self._extras)
                    left = (*prior[:at], tail[0], tail[1], None)
                    named = tail[2:]  # the draft its guards read (NULLs: none)
                    draft = None
                    if named[0] is not None:
                        draft_id, target_id, version, digest, status = named[:5]
                        draft = Draft(draft_id, target_id, version, digest, status, "")
                    self._named_draft(key, values.get("draft_id"), draft)
                caller = CallerView(
                    view.epoch if call.current else epoch,
                    presented,
                    facts,
                    now,
                    draft=draft,
                    target_id=key,
                )
                taken, _ = self._agrees(event, view, caller, True)
                made = self._dispatch(tx, key, taken, now)
                shown = values.get("new_token_hash") or presented or view.token_hash
                record = self._record_taken(
                    tx,
                    (key, new_epoch, event, view.state, state, now),
                    (shown, lease, facts, owner),
                    self._request_key(left, values.get("new_request_key")),
                    call.detail,
                    made,
                )
                return record, (state, new_epoch)
        defaults = tuple(self.spec.columns[c].default for c in self._columns)
        tx.run(self._sql["missing"], (key, self.spec.initial, *defaults))
        now = self._now(tx)
        locked = self._locked(tx, key)
        view, row_owner = self._view(locked), locked[5] or ""  # history: "" for none
        row_key = self._request_key(locked)  # where a refusal leaves it
        if call.current:
            epoch = view.epoch

        def guarded(
            event: str,
            epoch: int | None,
            presented: str | None,
            values: Mapping[str, Any] = values,
            facts: Mapping[str, Any] = facts,
        ) -> Any:
            """The event's compiled guarded write: (state, epoch, lease deadline, owner) of
            the row it left, or None: refused."""
            write = self._writes[event]
            params = self._params(key, values, facts, presented)
            times = {"epoch": epoch, "now": now, "deadline": now + call.lease_seconds}
            return tx.one(write.sql, write.bind({**params, **times}))

        done = guarded(event, epoch, presented)
        row_state, row_lease = view.state, view.lease_deadline  # where a refusal leaves it
        sweep = self.spec.first(event)
        if done is None and sweep is not None:
            # Refused as the row is: the declared first event (the sweep's), where it
            # fires, then the event once more; both or neither are kept. A refusal is
            # explained on the row the first event left, which is why it was refused.
            tx.run("SAVEPOINT claimfsm_first", ())
            # the sweep's: it names the current epoch and brings no token, value or fact
            nothing = {"new_token_hash": None, "owner": ""}
            if sweep in self._draws:
                nothing["new_request_key"] = fresh_idempotency_key()
            swept = guarded(sweep, view.epoch, None, nothing, {})
            if swept is not None:
                judged = self._caller(tx, key, view, view.epoch, None, {}, now, None)
                first_taken, _ = self._agrees(sweep, view, judged, True)
                first_dispatched = self._dispatch(tx, key, first_taken, now)
                label = fingerprint(view.token_hash)
                swept_record = (
                    key,
                    swept[1],
                    sweep,
                    view.state,
                    swept[0],
                    now,
                    None,
                    label,
                    swept[2],
                    entries.NO_FACTS,
                    swept[3] or "",
                    self._request_key(locked, nothing.get("new_request_key")),
                    "",
                )
                tx.run(self._sql["append"], swept_record)
                for found in first_dispatched:  # recorded after the transition that made it
                    tx.run(self._sql["append"], drafting.dispatched(swept_record, found))
                locked = self._locked(tx, key)
                view = self._view(locked)
                done = guarded(event, epoch, presented)
                if done is None:
                    tx.run("ROLLBACK TO SAVEPOINT claimfsm_first", ())
        caller = self._caller(tx, key, view, epoch, presented, facts, now, values.get("draft_id"))
        taken, failing = self._agrees(event, view, caller, done is not None)
        if done is not None and taken is not None:
            made = self._dispatch(tx, key, taken, now)
            state, new_epoch, lease, owner = done[:4]
            shown = values.get("new_token_hash") or presented or view.token_hash
            left = locked  # the row as the write left it, as far as its request key goes
            if self._pins:  # a take pins another draft: the write returned the pins
                at = 6 + len(self._columns) + len(self._extras)
                left = (*locked[:at], *done[4:6], None)
            record = self._record_taken(
                tx,
                (key, new_epoch, event, view.state, state, now),
                (shown, lease, facts, owner),
                self._request_key(left, values.get("new_request_key")),
                call.detail,
                made,
            )
            return record, (state, new_epoch)
        first = self.machine.stale_refusal(event, view, caller)
        if first is not None and first.startswith(STALE_STATE):
            # the owner's epoch is current, but in a state declared stale: it no longer
            # holds it (its lease lapsed while it ran, say), whatever else would fail
            refusal: Refused = StaleClaim(
                f"{self.spec.name} {key!r}: {event} refused:"
                f" {stale_state(self.spec, view.state, view.epoch)}; recorded in history"
            )
            refusal.guard = None
        elif first is not None:
            refusal = self._refusal(key, event, first, view, caller, stale=True)
        elif failing:
            told = self.spec.refusing_guard(event, view.state, lambda g: g in failing)
            assert told is not None  # a guard of each transition from here failed
            raise self._refusal(key, event, told, view, caller, stale=False)
        else:
            raise IllegalTransition(
                f"{self.spec.name} {key!r} is {view.state}: {event} is not declared from there",
                state=view.state,
                event=event,
            )
        named = epoch if epoch is not None else view.epoch
        refused = (
            *(key, named, event, row_state, row_state, now),
            *(first, fingerprint(presented), row_lease, facts_text(facts), row_owner),
            row_key,
            call.detail,
        )
        tx.defer(self._sql["append"], refused)
        return refused, refusal

    def _params(
        self,
        key: str,
        values: Mapping[str, Any],
        facts: Mapping[str, Any],
        presented: str | None,
    ) -> dict[str, Any]:
        """What a compiled write binds besides the epoch and the times."""
        return {
            **values,
            **self._constants,
            **{f"fact:{f}": facts.get(f) for f in self._facts},
            "key": key,
            "target_id": key,  # an entity's drafts are its own (draft_ready)
            "token_hash": presented,
        }

    def _caller(
        self,
        tx: Tx,
        key: str,
        view: RowView,
        epoch: int | None,
        presented: str | None,
        facts: Mapping[str, Any],
        now: float,
        named: int | None,
    ) -> CallerView:
        """The caller as the declaration's guards read it; with linked drafts, the draft a
        taker names (``named``) or else the pinned one, read in ``tx`` (the entity held)."""
        draft = None
        if self._pins:
            which = named if named is not None else view.draft_id
            draft = None if which is None else drafting.read(tx, self._drafts, which)
            self._named_draft(key, named, draft)
        return CallerView(epoch, presented, facts, now, draft=draft, target_id=key)

    def _named_draft(self, key: str, named: int | None, draft: Draft | None) -> None:
        """A take names one of the entity's own drafts (``named``; ``draft``: as read)."""
        if named is not None and draft is None:
            raise NotFound(f"no draft {named}; create_draft returns the id to use")
        if named is not None and draft is not None and draft.target_id != key:
            raise InvalidArgument(
                f"draft {named} is {self.spec.name} {draft.target_id!r}'s, not {key!r}'s:"
                " a take names one of the entity's own drafts"
            )

    def _dispatch(
        self, tx: Tx, key: str, taken: TransitionDecl | None, now: float
    ) -> list[tuple[Any, ...]]:
        """The pinned draft made dispatched, where ``taken`` is declared ``dispatches`` and
        the draft is still at the version pinned: (draft id, version, digest) of each draft
        it made so, for history (none, or the one)."""
        if self._pins and taken is not None and taken.dispatches:
            return tx.all(self._drafts.dispatched(self.table), (now, key))
        return []

    def _locked(self, tx: Tx, key: str) -> tuple[Any, ...]:
        """The entity's row, locked for the rest of ``tx`` (its transaction id kept in
        ``tx`` where the driver reads one with it)."""
        found = tx.one(self._sql["locked"], (key,))
        if self._driver.transaction_id_column:
            tx.transaction_id, found = found[-1], found[:-1]
        return tuple(found)

    def _view(self, row: tuple[Any, ...]) -> RowView:
        """A row as the declaration's guards read it."""
        pins = self._pinned(row)
        return RowView(
            state=row[1],
            epoch=row[2],
            token_hash=row[3],
            lease_deadline=row[4],
            columns=dict(zip(self._columns, row[6 : 6 + len(self._columns)], strict=True)),
            draft_id=pins[0],
            draft_version=pins[1],
            draft_digest=pins[2],
        )

    def _pinned(self, r: tuple[Any, ...]) -> tuple[Any, Any, Any]:
        """The draft pinned in a row as ``row`` reads it (Nones: none, or no drafts)."""
        if not self._pins:
            return None, None, None
        at = 6 + len(self._columns) + len(self._extras)
        return r[at], r[at + 1], r[at + 2]

    def _agrees(
        self, event: str, view: RowView, caller: CallerView, wrote: bool
    ) -> tuple[TransitionDecl | None, list[str]]:
        """What the declaration's machine decides (the transition taken, or the guards
        failing); ``DeclarationMismatch`` unless it decides as the SQL did."""
        taken, failing = self.machine.explain(event, view, caller)
        if (taken is not None) != wrote:
            said = f"({taken.source} -> {taken.dest})" if taken else f"(guards {failing} fail)"
            raise DeclarationMismatch(
                f"{self.spec.name}: {event} from {view.state}: the store's guarded write "
                + ("took it" if wrote else "refused it")
                + f" and the declaration's guards do not agree {said}"
            )
        return taken, failing

    def _record_taken(
        self,
        tx: Tx,
        step: tuple[str, int, str, str, str, float],
        by: tuple[str | None, float | None, Mapping[str, Any], str | None],
        request_key: str | None,
        detail: str | None,
        made: list[Any],
    ) -> tuple[Any, ...]:
        """The history entry of a transition taken (``step``: key, epoch, event, source,
        dest, time; ``by``: the token shown, the lease, the caller's facts, the owner),
        deferred to the commit, with each draft it dispatched recorded after it."""
        shown, lease, facts, owner = by
        record = (
            *step,
            *(None, fingerprint(shown), lease, facts_text(facts), owner or ""),
            request_key,
            detail,
        )
        tx.defer(self._sql["append"], record)
        for dispatched in made:  # recorded after the transition that made it
            tx.defer(self._sql["append"], drafting.dispatched(record, dispatched))
        return record

    def _refusal(
        self,
        key: str,
        event: str,
        guard: str,
        row: RowView,
        caller: CallerView,
        *,
        stale: bool,
    ) -> Refused:
        """The refusal: the guard, its meaning, and what its kind (or its hint) says of this
        row and caller, in the words the claim machine's refusals use (``machine._guards``)."""
        g = self.spec.guards[guard]
        kind = REFUSALS.get(g.refusal or "", StaleClaim if stale else Refused)
        detail = explained(self.spec, g, row, caller)
        error = kind(
            f"{self.spec.name} {key!r}: {event} refused: {guard} does not hold ({g.meaning})"
            + (f"; {detail}" if detail else "")
            + ("; recorded in history" if stale else "")
        )
        error.guard = guard
        return error

    def _create(self, tx: Tx) -> None:
        """The tables, made where missing, and upgraded where older: one transaction."""
        for statement in self._schema():
            tx.run(statement, ())
        self._upgrade(tx)

    def _upgrade(self, tx: Tx) -> None:
        """A history table made before history recorded the lease, the caller's facts, the
        owner or the request key gets the columns; the entries it holds are marked as not
        recording them (``entries.upgrades``). A row table made before its declaration drew
        request keys gets the column (NULL: the entity's own key). Either gets the indexes
        it lacks (``_indexes``): without the state index, reading the states present would
        take a pass over the rows per state."""
        driver = self._driver
        if self._extras or self._pins:  # a row table made before the declaration said so
            have = driver.columns(tx, self._table_name)
            typed = [*((c, "TEXT") for c in self._extras), *self._typed_pins()]
            for c, kind in typed:
                if c not in have:
                    tx.run(f"ALTER TABLE {self.table} {driver.add_column} {c} {kind}", ())
        present = driver.columns(tx, self._history_name)
        for statement in entries.upgrades(
            self.history_table, present, driver.minus_infinity, driver.add_column
        ):
            tx.run(statement, ())
        for statement in self._indexes():
            tx.run(statement, ())

    def _prepare(self, tx: Tx, *, create: bool) -> None:
        """The tables made where missing (``create``) or upgraded, and their rows checked
        against the declaration: one transaction."""
        if create:
            self._create(tx)
        else:
            self._upgrade(tx)
        self._rows_declared(tx)

    def _rows_declared(self, tx: Tx) -> None:
        """Every row is in a state the declaration declares: a row a changed declaration
        no longer knows would fail deep inside the first operation on it, and the sweep
        would pass it by. ``SpecError`` naming the states (and how many rows each), in the
        transaction that made or upgraded the tables, so nothing of the opening is kept."""
        states = tuple(self.spec.states)
        m = self._driver.marker
        # The states present, read off the state index one distinct value at a time (a
        # loose index scan: a step per state present, not per row), so that opening a
        # store costs the same whatever its table holds; rows are counted only where
        # some state is undeclared.
        t = self.table
        present = tx.all(
            "WITH RECURSIVE present(state) AS ("  # noqa: S608
            f" SELECT MIN(state) FROM {t}"
            " UNION ALL"
            f" SELECT (SELECT MIN(r.state) FROM {t} AS r WHERE r.state > present.state)"
            " FROM present WHERE present.state IS NOT NULL)"
            " SELECT state FROM present"
            f" WHERE state IS NOT NULL AND state NOT IN ({', '.join([m] * len(states))})",
            states,
        )
        found = (
            tx.all(
                f"SELECT state, COUNT(*) FROM {t}"  # noqa: S608
                f" WHERE state IN ({', '.join([m] * len(present))}) GROUP BY state ORDER BY state",
                tuple(state for (state,) in present),
            )
            if present
            else []
        )
        if found:
            said = ", ".join(f"{state!r} ({n} row{'' if n == 1 else 's'})" for state, n in found)
            raise SpecError(
                f"{self.spec.path or self.spec.name}: table {self.table} has rows in states this"
                f" declaration does not declare: {said}. The declaration changed since they"
                " were written: declare those states again, or move those rows on with the"
                " declaration that wrote them, then open the store with this one"
            )

    def _typed_pins(self) -> list[tuple[str, str]]:
        """The pins' columns with their SQL types (none without linked drafts)."""
        return list(zip(self._pins, PIN_TYPES[: len(self._pins)], strict=True))

    def _schema(self) -> list[str]:
        cols = "".join(f", {c} INTEGER NOT NULL" for c in self._columns)
        cols += "".join(f", {c} TEXT" for c in self._extras)
        cols += "".join(f", {c} {kind}" for c, kind in self._typed_pins())
        seq = self._driver.serial
        drafts = (
            drafting.schema(self._drafts.table, self._drafts_name, seq, self._driver.index)
            if self._pins
            else []
        )
        return [
            *drafts,
            f"CREATE TABLE IF NOT EXISTS {self.table} (key TEXT PRIMARY KEY, state TEXT NOT NULL,"
            f" epoch INTEGER NOT NULL, token_hash TEXT, lease_deadline DOUBLE PRECISION,"
            f" owner TEXT{cols})",
            entries.table(self.history_table, seq),
            *self._driver.append_only(self.history_table, self._permit, self._history_name),
        ]

    def _indexes(self) -> list[str]:
        """The indexes, each made only where missing (``Driver.index``): part of the schema,
        and made by every opening (``_upgrade``), so that a table made before an index
        existed gets it whether or not the store was opened to create."""
        return [
            # the rows by state: the sweep reads those in its events' sources, and opening
            # reads the states present (``_rows_declared``), without a pass over every row
            self._driver.index(f"{self._table_name}_by_state", self.table, "state, lease_deadline"),
            # one entity's history in seq order (history(key), and the sweep's and pruning's)
            self._driver.index(f"{self._history_name}_by_key", self.history_table, "key, seq"),
        ]


def open_entity_store(
    spec: Spec,
    url: str,
    *,
    clock: Clock | None = None,
    prefix: str = "lc",
    create: bool = True,
    pool_size: int = 4,
    busy_seconds: float = 30.0,
) -> EntityStore:
    """A store of ``spec``'s entities at ``url``: ``sqlite:///path.db``, ``sqlite://:memory:``
    or ``postgresql://user@host/db?schema=name``. Tables ``{prefix}_{name}`` and
    ``{prefix}_{name}_history`` are created if missing. ``clock``: the store's time in
    seconds (default: ``time.time`` on SQLite, the server's clock on PostgreSQL).
    ``create=False`` opens only a store that exists (to read one, say): a missing SQLite
    file or missing tables are ``NotFound``, and nothing is created. Threads may share the
    store: on PostgreSQL each transaction takes a connection from its pool (at most
    ``pool_size``); on SQLite its one connection runs one transaction at a time, and a
    file another process keeps locked is waited for up to ``busy_seconds``, then
    ``StoreBusy`` (as the claim's ``SQLiteStore``: ``_sqlite_file``)."""
    if not isinstance(spec, Spec):
        raise InvalidArgument(
            f"spec must be a declaration, not {type(spec).__name__}: load it first"
            " (claimfsm.spec.load_spec(path))"
        )
    if isinstance(pool_size, bool) or not isinstance(pool_size, int) or not 1 <= pool_size <= 100:
        raise InvalidArgument(f"pool_size must be an int from 1 to 100, not {pool_size!r}")
    if (
        isinstance(busy_seconds, bool)
        or not isinstance(busy_seconds, int | float)
        or not 0 < busy_seconds <= 3600
    ):
        raise InvalidArgument(
            f"busy_seconds must be a number of seconds above 0, at most 3600, not {busy_seconds!r}"
        )
    if not isinstance(url, str):
        raise InvalidArgument(f"url must be a str, not {type(url).__name__}")
    if not WORD.fullmatch(prefix):
        raise InvalidArgument(f"prefix must be a lower-case word, not {prefix!r}")
    check_storable(spec)  # before the driver opens: a refused declaration creates nothing
    driver: Driver
    if url in ("sqlite://:memory:", "sqlite:///:memory:"):
        driver = SQLite(":memory:", busy_seconds)
    elif url.startswith("sqlite:///") and len(url) > len("sqlite:///"):
        if not create:
            check.database_file(Path(url[len("sqlite:///") :]))
        driver = SQLite(url[len("sqlite:///") :], busy_seconds, create=create)
    elif url.startswith(("postgresql://", "postgres://")):
        driver = Postgres(url, create=create, pool_size=pool_size)
    else:
        raise InvalidArgument(
            f"unsupported store url {url[:100]!r}; use sqlite:///path.db or"
            " postgresql://user@host/db"
        )
    return EntityStore(spec, driver, clock=clock, prefix=prefix, create=create)
