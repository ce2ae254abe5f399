"""A store for any declared lifecycle: one row per entity key, on SQLite or PostgreSQL.

The row holds the entity's state, its epoch, the hash of the current owner token, the
lease deadline, the owner's name and the declaration's own ``[columns]``. Every event is
one guarded ``UPDATE`` compiled from the declaration (:func:`compile_event`): the guards
of each of the event's transitions become the ``WHERE``, the destination a ``CASE``, and
the event's declared effects the other assignments (a taker's new epoch and token, a
fresh token, the lease, bumped counters). History is appended in the same transaction: the
transition taken, or a stale owner's refused operation (``refused``), which changes nothing
else. When the write matches no row, the store reads the row and explains the refusal with
the declaration's ``transitions`` machine (``claimfsm.machine.LifecycleMachine``); if the
machine takes a transition the SQL refused, or the reverse, that is a
:class:`DeclarationMismatch`, never silence.

Who may take an event is its declared role (``Spec.role``): :meth:`EntityStore.take` for a
taker's (a new epoch; the caller gets a :class:`Handle` with a secret token),
:meth:`EntityStore.act` for an owner's (on its handle), :meth:`EntityStore.operate` for the
operator's and the sweep's (naming the current epoch, or the one given).

SQL text is built only from identifiers the loader checked (state, column and lifecycle
names are words) and the schema name ``split_url`` checked; every value is a bound
parameter. Hence the ``noqa: S608``.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from claimfsm.errors import (
    REFUSALS,
    DeclarationMismatch,
    IllegalTransition,
    InvalidArgument,
    Refused,
    SpecError,
    StaleClaim,
    StoreError,
)
from claimfsm.machine._entity import CallerView, LifecycleMachine, RowView
from claimfsm.machine._guards import explained
from claimfsm.spec import LIFECYCLE_FACTS, Spec, TransitionDecl, lifecycle_problem
from claimfsm.store._predicates import guard_constants, guard_predicate, literal
from claimfsm.store._tokens import fingerprint, new_token, token_hash

Clock = Callable[[], float]
_WORD = re.compile(r"[a-z][a-z0-9_]{0,40}")


@dataclass(frozen=True)
class Handle:
    """What an owner holds: the entity, the epoch and the secret token (never shown)."""

    key: str
    epoch: int
    token: str = field(repr=False)
    state: str = ""  # the state the owner's last operation left the entity in

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


@dataclass(frozen=True)
class EntityHistory:
    seq: int
    key: str
    epoch: int
    event: str
    source: str
    dest: str
    at: float
    refused: str | None  # the guard a stale owner failed; None for a transition taken
    token_fingerprint: str


@dataclass(frozen=True)
class CompiledEvent:
    """One event's guarded write: the SQL with ``?`` placeholders, and the names of the
    parameters in their order (filled from the caller's values by :meth:`bind`)."""

    sql: str
    params: tuple[str, ...]

    def bind(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(values[p] for p in self.params)


def table_names(spec: Spec, prefix: str = "lc") -> tuple[str, str]:
    """The row table and the history table of ``spec``'s entities."""
    name = f"{prefix}_{spec.name.lower().replace('-', '_')}"
    if not _WORD.fullmatch(name):
        raise SpecError(f"{spec.name}: cannot name a table after it; use a shorter name")
    return name, f"{name}_history"


def check_storable(spec: Spec) -> None:
    """What the store needs of a declaration, or one SpecError naming the file."""
    problem = lifecycle_problem(spec)
    if problem is not None:
        raise SpecError(f"{spec.path or spec.name}: {problem}")
    spec.require_sources_determined()


def compile_event(spec: Spec, event: str, table: str, marker: str = "?") -> CompiledEvent:
    """The guarded ``UPDATE`` of ``event``: one statement, whose ``WHERE`` is the guards of
    every transition of the event (each with its source) and whose ``SET`` is the state
    each leads to and the event's declared effects. (SET expressions read the row as it
    was, in SQLite and PostgreSQL alike.)"""
    params: list[str] = []

    def p(name: str) -> str:
        params.append(name)
        return marker

    decl = spec.effects.get(event)
    effects = set(decl.sets) if decl is not None else set()
    bumps = decl.bumps if decl is not None else ()
    taking = spec.role(event) == "taker"
    lease_states = set(spec.states_where("lease"))
    transitions = [t for t in spec.transitions if t.event == event]

    def cond(t: TransitionDecl) -> str:
        guards = [guard_predicate(spec, g, p, str) for g in t.guards]
        return " AND ".join([f"state = {literal(t.source)}", *guards])

    def deadline(t: TransitionDecl) -> str:
        if t.dest not in lease_states:
            return "CAST(NULL AS DOUBLE PRECISION)"  # a lease governs lease states only
        if "lease" in effects:
            return f"CAST({p('deadline')} AS DOUBLE PRECISION)"
        # A taker's new epoch has no lease unless the event sets one.
        return "CAST(NULL AS DOUBLE PRECISION)" if taking else "lease_deadline"

    sets = [
        "state = CASE " + " ".join(f"WHEN {cond(t)} THEN '{t.dest}'" for t in transitions) + " END",
        "lease_deadline = CASE "
        + " ".join(f"WHEN {cond(t)} THEN {deadline(t)}" for t in transitions)
        + " END",
    ]
    if taking:
        sets.append("epoch = epoch + 1")
    if taking or "fresh_token" in effects:
        sets.append(f"token_hash = {p('new_token_hash')}")
    if taking or "owner" in effects:
        sets.append(f"owner = {p('owner')}")
    sets += [f"{column} = {column} + 1" for column in bumps]
    key = p("key")  # parameters are named in the order the statement reads them
    where = " OR ".join(f"({cond(t)})" for t in transitions)
    sql = (
        f"UPDATE {table} SET {', '.join(sets)} WHERE key = {key} AND ({where})"  # noqa: S608
        " RETURNING state, epoch"
    )
    return CompiledEvent(sql, tuple(params))


class EntityStore:
    """The entities of one declared lifecycle in a database (see the module's docstring).

    Open it with :func:`open_entity_store`. Methods are safe to call from one thread;
    give each worker its own store (its own connection), as with the claim store.
    """

    def __init__(
        self, spec: Spec, driver: _Driver, *, clock: Clock | None = None, prefix: str = "lc"
    ) -> None:
        check_storable(spec)
        self.spec = spec
        #: The declaration's ``transitions`` machine: it explains what the SQL refused.
        self.machine = LifecycleMachine(spec)
        table, history = table_names(spec, prefix)
        self.table, self.history_table = driver.qualify(table), driver.qualify(history)
        self._driver = driver
        self._clock = clock
        self._columns = tuple(spec.columns)
        self._writes = {e: compile_event(spec, e, self.table, driver.marker) for e in spec.events}
        m, t, h = driver.marker, self.table, self.history_table
        select = ", ".join(
            ["key", "state", "epoch", "token_hash", "lease_deadline", "owner", *self._columns]
        )
        self._sql = {
            "row": f"SELECT {select} FROM {t} WHERE key = {m}",  # noqa: S608
            "rows": f"SELECT {select} FROM {t} ORDER BY key",  # noqa: S608
            "locked": f"SELECT {select} FROM {t} WHERE key = {m}{driver.lock_clause}",  # noqa: S608
            "history": "SELECT seq, key, epoch, event, source, dest, at, refused,"  # noqa: S608
            f" token_fingerprint FROM {h}",
            "append": f"INSERT INTO {h} (key, epoch, event, source, dest, at, refused,"  # noqa: S608
            f" token_fingerprint) VALUES ({', '.join([m] * 8)})",
            "missing": driver.insert_if_missing(t, self._columns),
            "reset_history": f"DELETE FROM {h}",  # noqa: S608
            "reset_rows": f"DELETE FROM {t}",  # noqa: S608
        }
        self._constants = guard_constants(spec)
        driver.create(self._schema())

    # -- the three ways to act -------------------------------------------------------------
    def take(
        self,
        key: str,
        event: str,
        *,
        owner: str = "",
        lease_seconds: float = 30.0,
        facts: Mapping[str, Any] | None = None,
    ) -> Handle:
        """A taker's event (``by = "taker"``): a new epoch begins and the caller holds it."""
        self._role(event, "taker", "take(key, event)")
        token = new_token()
        state, epoch = self._write(
            key,
            event,
            epoch=None,
            token=None,
            values={"new_token_hash": token_hash(token), "owner": owner},
            lease_seconds=lease_seconds,
            facts=facts,
        )
        return Handle(key, epoch, token, state)

    def act(
        self,
        handle: Handle,
        event: str,
        *,
        lease_seconds: float = 30.0,
        facts: Mapping[str, Any] | None = None,
    ) -> Handle:
        """An owner's event, on its handle; returns the handle to use next (a new token
        where the event declares ``fresh_token``)."""
        if not isinstance(handle, Handle):
            raise InvalidArgument(f"act() takes the Handle take() returned, not {handle!r}")
        self._role(event, "owner", "act(handle, event)")
        fresh = event in self.spec.effects and "fresh_token" in self.spec.effects[event].sets
        token = new_token() if fresh else handle.token
        state, epoch = self._write(
            handle.key,
            event,
            epoch=handle.epoch,
            token=handle.token,
            values={"new_token_hash": token_hash(token) if fresh else None, "owner": ""},
            lease_seconds=lease_seconds,
            facts=facts,
        )
        return Handle(handle.key, epoch, token, state)

    def operate(
        self,
        key: str,
        event: str,
        *,
        epoch: int | None = None,
        facts: Mapping[str, Any] | None = None,
    ) -> str:
        """The operator's or the sweep's event on ``key``, naming ``epoch`` (default: the
        current one, read in the same transaction); returns the state it leads to."""
        self._role(event, ("operator", "sweep"), "operate(key, event)")
        state, _ = self._write(
            key,
            event,
            epoch=epoch,
            token=None,
            values={"new_token_hash": None, "owner": ""},
            lease_seconds=0.0,
            facts=facts,
            current=epoch is None,
        )
        return state

    # -- reading ------------------------------------------------------------------------
    def row(self, key: str) -> EntityRow | None:
        with self._driver.transaction() as tx:
            found = tx.one(self._sql["row"], (key,))
        return None if found is None else self._entity(found)

    def rows(self) -> list[EntityRow]:
        with self._driver.transaction() as tx:
            found = tx.all(self._sql["rows"], ())
        return [self._entity(r) for r in found]

    def history(self, key: str | None = None) -> list[EntityHistory]:
        query = self._sql["history"]
        args: tuple[Any, ...] = ()
        if key is not None:
            query, args = query + f" WHERE key = {self._driver.marker}", (key,)
        with self._driver.transaction() as tx:
            found = tx.all(query + " ORDER BY seq", args)
        return [EntityHistory(*r) for r in found]

    def now(self) -> float:
        with self._driver.transaction() as tx:
            return self._now(tx)

    def reset(self) -> None:
        """Delete every entity and its history (tests and ``claimfsm verify``)."""
        with self._driver.transaction() as tx:
            tx.run(self._sql["reset_history"], ())
            tx.run(self._sql["reset_rows"], ())

    def drop(self) -> None:
        """Drop this lifecycle's two tables (``claimfsm verify`` leaves a database as it
        found it)."""
        with self._driver.transaction() as tx:
            tx.run(f"DROP TABLE IF EXISTS {self.history_table}", ())
            tx.run(f"DROP TABLE IF EXISTS {self.table}", ())

    def close(self) -> None:
        self._driver.close()

    def __enter__(self) -> EntityStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- inside -------------------------------------------------------------------------
    def _entity(self, r: tuple[Any, ...]) -> EntityRow:
        return EntityRow(
            key=r[0],
            state=r[1],
            epoch=r[2],
            lease_deadline=r[4],
            owner=r[5],
            columns=dict(zip(self._columns, r[6:], strict=True)),
            token_fingerprint=fingerprint(r[3]),
        )

    def _role(self, event: str, role: str | tuple[str, ...], call: str) -> None:
        if event not in self.spec.events:
            raise InvalidArgument(
                f"{self.spec.name} has no event {event!r}; its events: {list(self.spec.events)}"
            )
        actual = self.spec.role(event)
        if actual != role and actual not in role:
            use = {"taker": "take(key, event)", "owner": "act(handle, event)"}.get(
                actual, "operate(key, event)"
            )
            raise InvalidArgument(
                f"event {event!r} is the {actual}'s, not taken with {call}: use {use}"
            )

    def _now(self, tx: _Tx) -> float:
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
    ) -> tuple[str, int]:
        """One event in one transaction: the guarded write, and its history; or the
        refusal, explained (a stale owner's is recorded, and nothing else changes)."""
        if not isinstance(key, str) or not key:
            raise InvalidArgument(f"key must be a non-empty str, not {key!r}")
        facts = dict(facts or {})
        unknown = set(facts) - LIFECYCLE_FACTS
        if unknown:
            raise InvalidArgument(f"unknown facts {sorted(unknown)}: use {sorted(LIFECYCLE_FACTS)}")
        stale: Refused | None = None
        with self._driver.transaction(durable=event in self.spec.durable_events()) as tx:
            defaults = tuple(self.spec.columns[c].default for c in self._columns)
            tx.run(self._sql["missing"], (key, self.spec.initial, *defaults))
            now = self._now(tx)
            view = self._view(tx.one(self._sql["locked"], (key,)))
            if current:
                epoch = view.epoch
            presented = None if token is None else token_hash(token)

            def guarded(
                event: str,
                epoch: int | None,
                presented: str | None,
                values: Mapping[str, Any] = values,
                facts: Mapping[str, Any] = facts,
            ) -> Any:
                """The event's compiled guarded write: (state, epoch), or None: refused."""
                write = self._writes[event]
                return tx.one(
                    write.sql,
                    write.bind(
                        {
                            **values,
                            **self._constants,
                            **{f"fact:{f}": facts.get(f) for f in LIFECYCLE_FACTS},
                            "key": key,
                            "epoch": epoch,
                            "token_hash": presented,
                            "now": now,
                            "deadline": now + lease_seconds,
                        }
                    ),
                )

            done = guarded(event, epoch, presented)
            row_state = view.state  # where a refusal leaves the row
            sweep = self.spec.first(event)
            if done is None and sweep is not None:
                # Refused as the row is: the declared first event (the sweep's), where it
                # fires, then the event once more; both or neither are kept. A refusal is
                # explained on the row the first event left, which is why it was refused.
                tx.run("SAVEPOINT claimfsm_first", ())
                # the sweep's: it names the current epoch and brings no token, value or fact
                swept = guarded(sweep, view.epoch, None, {"new_token_hash": None, "owner": ""}, {})
                if swept is not None:
                    self._agrees(sweep, view, CallerView(view.epoch, None, {}, now), True)
                    label = fingerprint(view.token_hash)
                    swept_record = (key, swept[1], sweep, view.state, swept[0], now, None, label)
                    tx.run(self._sql["append"], swept_record)
                    view = self._view(tx.one(self._sql["locked"], (key,)))
                    done = guarded(event, epoch, presented)
                    if done is None:
                        tx.run("ROLLBACK TO SAVEPOINT claimfsm_first", ())
            caller = CallerView(epoch, presented, facts, now)
            taken, failing = self._agrees(event, view, caller, done is not None)
            if done is not None and taken is not None:
                state, new_epoch = done
                shown = values.get("new_token_hash") or presented or view.token_hash
                record = (key, new_epoch, event, view.state, state, now, None, fingerprint(shown))
                tx.run(self._sql["append"], record)
                return state, new_epoch
            if not failing:  # no transition from here: a stale caller is told it is stale
                failing = [
                    g
                    for t in self.spec.transitions
                    if t.event == event
                    for g in t.guards
                    if self.spec.guards[g].stale and not self.machine.guards[g](view, caller)
                ][:1]
            if not failing:
                raise IllegalTransition(
                    f"{self.spec.name} {key!r} is {view.state}: {event} is not declared from there",
                    state=view.state,
                    event=event,
                )
            stale_guards = [g for g in failing if self.spec.guards[g].stale]
            first = (stale_guards or failing)[0]
            refusal = self._refusal(key, event, first, view, caller, stale=bool(stale_guards))
            if not stale_guards:
                raise refusal  # nothing written: the transaction rolls back
            named = epoch if epoch is not None else view.epoch
            refused = (
                key,
                named,
                event,
                row_state,
                row_state,
                now,
                first,
                fingerprint(presented),
            )
            tx.run(self._sql["append"], refused)
            stale = refusal
        raise stale  # the refusal is recorded (committed) first

    def _view(self, row: tuple[Any, ...]) -> RowView:
        """A row as the declaration's guards read it."""
        return RowView(
            state=row[1],
            epoch=row[2],
            token_hash=row[3],
            lease_deadline=row[4],
            columns=dict(zip(self._columns, row[6:], strict=True)),
        )

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

    def _schema(self) -> list[str]:
        cols = "".join(f", {c} INTEGER NOT NULL" for c in self._columns)
        seq = self._driver.serial
        return [
            f"CREATE TABLE IF NOT EXISTS {self.table} (key TEXT PRIMARY KEY, state TEXT NOT NULL,"
            f" epoch INTEGER NOT NULL, token_hash TEXT, lease_deadline DOUBLE PRECISION,"
            f" owner TEXT{cols})",
            f"CREATE TABLE IF NOT EXISTS {self.history_table} (seq {seq}, key TEXT NOT NULL,"
            " epoch INTEGER NOT NULL, event TEXT NOT NULL, source TEXT NOT NULL, dest TEXT NOT"
            " NULL, at DOUBLE PRECISION NOT NULL, refused TEXT, token_fingerprint TEXT NOT NULL)",
        ]


# -- drivers: the one place SQLite and PostgreSQL differ ---------------------------------
class _Tx:
    def __init__(self, cursor: Any) -> None:
        self._c = cursor

    def run(self, sql: str, args: tuple[Any, ...]) -> None:
        self._c.execute(sql, args)

    def one(self, sql: str, args: tuple[Any, ...]) -> Any:
        self._c.execute(sql, args)
        row = self._c.fetchone()
        return None if row is None else tuple(row)

    def all(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        self._c.execute(sql, args)
        return [tuple(r) for r in self._c.fetchall()]


class _Driver:
    marker = "?"
    serial = "INTEGER PRIMARY KEY AUTOINCREMENT"
    lock_clause = ""

    def transaction(self, durable: bool = False) -> Any:
        raise NotImplementedError

    def create(self, statements: list[str]) -> None:
        with self.transaction() as tx:
            for s in statements:
                tx.run(s, ())

    def qualify(self, table: str) -> str:
        return table

    def insert_if_missing(self, table: str, columns: tuple[str, ...]) -> str:
        names = ", ".join(["key", "state", "epoch", *columns])
        marks = ", ".join([self.marker, self.marker, "0", *([self.marker] * len(columns))])
        return f"INSERT INTO {table} ({names}) VALUES ({marks}) ON CONFLICT (key) DO NOTHING"  # noqa: S608

    def server_now(self, tx: _Tx) -> float:
        return time.time()

    def close(self) -> None:
        raise NotImplementedError


class _SQLite(_Driver):
    def __init__(self, path: str, busy_seconds: float = 10.0) -> None:
        try:
            self._c = sqlite3.connect(
                path, isolation_level=None, timeout=busy_seconds, check_same_thread=False
            )
            self._c.execute("PRAGMA journal_mode = WAL")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the SQLite database {path!r}: {exc}") from None

    @contextmanager
    def transaction(self, durable: bool = False) -> Iterator[_Tx]:
        c = self._c
        try:
            c.execute("PRAGMA synchronous = " + ("FULL" if durable else "NORMAL"))
            c.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite: cannot begin a write: {exc}") from None
        try:
            yield _Tx(c.cursor())
        except BaseException:
            c.execute("ROLLBACK")
            raise
        try:
            c.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite: the commit failed, nothing was written: {exc}") from None

    def close(self) -> None:
        self._c.close()


class _Postgres(_Driver):
    marker = "%s"
    serial = "BIGSERIAL PRIMARY KEY"
    lock_clause = " FOR UPDATE"

    def __init__(self, url: str) -> None:
        import psycopg

        from claimfsm.store._postgres import _redacted, split_url

        libpq, self.schema, _prepared = split_url(url)
        try:
            self._c = psycopg.connect(libpq, autocommit=False, connect_timeout=10)
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot connect to {_redacted(url)}: {str(exc).strip().splitlines()[0]}"
            ) from None
        with self._c.transaction(), self._c.cursor() as cur:
            cur.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
        self._c.commit()

    def qualify(self, table: str) -> str:
        return f'"{self.schema}".{table}'

    @contextmanager
    def transaction(self, durable: bool = False) -> Iterator[_Tx]:
        import psycopg

        try:
            with self._c.transaction(), self._c.cursor() as cur:
                yield _Tx(cur)
        except psycopg.Error as exc:
            raise StoreError(
                f"PostgreSQL: {str(exc).strip().splitlines()[0]}; nothing was written"
            ) from None
        self._c.commit()

    def server_now(self, tx: _Tx) -> float:
        found = tx.one("SELECT extract(epoch FROM clock_timestamp())::float8", ())
        return float(found[0])

    def close(self) -> None:
        self._c.close()


def open_entity_store(
    spec: Spec, url: str, *, clock: Clock | None = None, prefix: str = "lc"
) -> EntityStore:
    """A store of ``spec``'s entities at ``url``: ``sqlite:///path.db``, ``sqlite://:memory:``
    or ``postgresql://user@host/db?schema=name``. Tables ``{prefix}_{name}`` and
    ``{prefix}_{name}_history`` are created if missing. ``clock``: the store's time in
    seconds (default: ``time.time`` on SQLite, the server's clock on PostgreSQL)."""
    if not isinstance(url, str):
        raise InvalidArgument(f"url must be a str, not {type(url).__name__}")
    if not _WORD.fullmatch(prefix):
        raise InvalidArgument(f"prefix must be a lower-case word, not {prefix!r}")
    driver: _Driver
    if url in ("sqlite://:memory:", "sqlite:///:memory:"):
        driver = _SQLite(":memory:")
    elif url.startswith("sqlite:///") and len(url) > len("sqlite:///"):
        driver = _SQLite(url[len("sqlite:///") :])
    elif url.startswith(("postgresql://", "postgres://")):
        driver = _Postgres(url)
    else:
        raise InvalidArgument(
            f"unsupported store url {url[:100]!r}; use sqlite:///path.db or"
            " postgresql://user@host/db"
        )
    return EntityStore(spec, driver, clock=clock, prefix=prefix)
