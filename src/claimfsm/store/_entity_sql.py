"""A declared lifecycle's guarded writes, compiled from its declaration: each event as one
``UPDATE`` whose ``WHERE`` is the guards of the event's transitions (each with its source)
and whose ``SET`` is the state each leads to and the event's declared effects
(:func:`compile_event`); on PostgreSQL, as one statement that also locks and returns the
row it replaced and creates a new entity's (:func:`compile_one_statement`,
:func:`compile_birth`). The store that runs them is ``_entity``.

SQL text is built only from identifiers the loader checked (state, column and lifecycle
names are words) and the table names the store qualified; every value is a bound
parameter. Hence the ``noqa: S608``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from claimfsm.errors import SpecError
from claimfsm.spec import Spec, TransitionDecl, draws_keys, lifecycle_problem, records_outcome
from claimfsm.store._entity_drafts import PINS
from claimfsm.store._entity_drivers import SERVER_NOW
from claimfsm.store._pg import TRANSACTION_ID
from claimfsm.store._predicates import guard_predicate, literal

#: A table name, as a lifecycle's are made from a prefix and its name.
WORD = re.compile(r"[a-z][a-z0-9_]{0,40}")


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
    if not WORD.fullmatch(name):
        raise SpecError(f"{spec.name}: cannot name a table after it; use a shorter name")
    return name, f"{name}_history"


def row_extras(spec: Spec) -> tuple[str, ...]:
    """The row's columns besides its fixed ones and the declared counters, read after them,
    both text: the request key, where an event draws one (NULL: the entity's own), and
    readback's outcome, where an event records it (NULL: none in this epoch)."""
    return (("request_key",) if draws_keys(spec) else ()) + (
        ("outcome",) if records_outcome(spec) else ()
    )


def check_storable(spec: Spec) -> None:
    """What the store needs of a declaration, or one SpecError naming the file. (One event
    may reach one state from two sources: the store records the state the row was in, read
    in the transaction or returned by the one statement, not one derived from the
    destination, as the claim's store does.)"""
    problem = lifecycle_problem(spec)
    if problem is not None:
        raise SpecError(f"{spec.path or spec.name}: {problem}")


def compile_event(
    spec: Spec,
    event: str,
    table: str,
    marker: str = "?",
    *,
    clock: str | None = None,
    prior: str = "",
    returning: str = "state, epoch, lease_deadline, owner",
    drafts: str | None = None,
) -> CompiledEvent:
    """The guarded ``UPDATE`` of ``event``: one statement, whose ``WHERE`` is the guards of
    every transition of the event (each with its source) and whose ``SET`` is the state
    each leads to and the event's declared effects. (SET expressions read the row as it
    was, in SQLite and PostgreSQL alike.)

    ``clock``: SQL for the store's time, read in the statement (else the parameters ``now``
    and ``deadline``; then ``lease_seconds`` is bound). ``prior``: a ``FROM`` item holding
    the row as it was, whose ``"prior epoch"`` stands for the current epoch where the
    parameter ``current`` is true (:func:`compile_one_statement`). ``drafts``: the drafts
    table, where the declaration has linked drafts (``_entity_drafts``): a taker's write
    pins the draft named by the bound ``draft_id``, and the guards over drafts read it."""
    params: list[str] = []
    p = _renderer(params, marker, clock, '"prior epoch"' if prior else None)
    transitions = [t for t in spec.transitions if t.event == event]
    col: Callable[[str], str] = str
    alias = ""
    if drafts is not None:  # the drafts table has columns of the pins' names: qualified
        alias = " AS cur"
        col = _pinned_column
    sets, where_of = _writes(spec, event, transitions, p, col, drafts)
    key = p("key")  # parameters are named in the order the statement reads them
    where = where_of()
    source = f" FROM {prior}" if prior else ""
    assigned = ", ".join(f"{column} = {value}" for column, value in sets.items())
    sql = (
        f"UPDATE {table}{alias} SET {assigned}{source}"  # noqa: S608
        f" WHERE key = {key} AND ({where}) RETURNING {returning}"
    )
    return CompiledEvent(sql, tuple(params))


def _pinned_column(name: str) -> str:
    """A row's column in a write of a declaration with drafts: the pins qualified."""
    return f"cur.{name}" if name in PINS else name


def _writes(
    spec: Spec,
    event: str,
    transitions: list[TransitionDecl],
    p: Callable[[str], str],
    col: Callable[[str], str],
    drafts: str | None = None,
) -> tuple[dict[str, str], Callable[[], str]]:
    """What ``event`` writes, once for every compiled form: each column it assigns and the
    expression, read on the row as it was (``col``), in the order the statement binds
    their parameters: the state each transition leads to, the lease, a taker's new epoch,
    the token, the owner, the bumped counters, a drawn request key and the draft a taker
    pins (from ``drafts``, the drafts table); and a function that
    renders the condition that some transition's source and guards hold (rendered after
    them)."""
    decl = spec.effects.get(event)
    effects = set(decl.sets) if decl is not None else set()
    bumps = decl.bumps if decl is not None else ()
    taking = spec.role(event) == "taker"
    cleared = spec.lease_cleared_in()

    def table(name: str) -> str:
        assert drafts is not None  # the loader refuses a guard over drafts without [drafts]
        return drafts

    # transitions alike but for their source (a pseudo initial state's takers, out of
    # every state: ``Spec.lifecycle_view``) are written once, over all their sources
    grouped = _by_sources(transitions)
    sources = {id(t): group for t, group in grouped}
    transitions = [t for t, _ in grouped]

    def cond(t: TransitionDecl) -> str:
        guards = [guard_predicate(spec, g, p, col, table, draft_joined=False) for g in t.guards]
        group = sources[id(t)]
        where = (
            f"{col('state')} = {literal(t.source)}"
            if len(group) == 1
            else f"{col('state')} IN ({', '.join(literal(s) for s in group)})"
        )
        return " AND ".join([where, *guards])

    def deadline(t: TransitionDecl) -> str:
        if t.dest in cleared:
            return "CAST(NULL AS DOUBLE PRECISION)"  # a lease governs lease states only
        if "lease" in effects:
            return f"CAST({p('deadline')} AS DOUBLE PRECISION)"
        # A taker's new epoch has no lease unless the event sets one.
        return "CAST(NULL AS DOUBLE PRECISION)" if taking else col("lease_deadline")

    if len({t.dest for t in transitions}) == 1:
        # One destination (a take out of each freeing state, say): the WHERE lets the
        # write through only where some transition holds, and each leads to the same
        # state and lease, so no CASE need say which (the statement stays short: psycopg
        # converts a statement over 4,096 characters anew on every call).
        sets = {"state": literal(transitions[0].dest), "lease_deadline": deadline(transitions[0])}
    else:
        sets = {
            "state": "CASE "
            + " ".join(f"WHEN {cond(t)} THEN '{t.dest}'" for t in transitions)
            + " END",
            "lease_deadline": "CASE "
            + " ".join(f"WHEN {cond(t)} THEN {deadline(t)}" for t in transitions)
            + " END",
        }
    if taking:
        sets["epoch"] = f"{col('epoch')} + 1"
    if taking or "fresh_token" in effects:
        sets["token_hash"] = p("new_token_hash")
    if taking or "owner" in effects:
        sets["owner"] = p("owner")
    for column in bumps:
        sets[column] = f"{col(column)} + 1"
    if "fresh_key" in effects:
        sets["request_key"] = p("new_request_key")
    if "outcome" in effects:  # readback's, as the caller brought it
        sets["outcome"] = f"CAST({p('fact:outcome')} AS TEXT)"
    elif taking and records_outcome(spec):
        sets["outcome"] = "CAST(NULL AS TEXT)"  # a new epoch has recorded none yet
    if taking and drafts is not None:  # the new epoch pins the draft named, as it is now

        def named(column: str) -> str:
            return f"(SELECT {column} FROM {drafts} WHERE draft_id = {p('draft_id')})"  # noqa: S608

        sets.update(draft_id=named("draft_id"), draft_version=named("version"))
        sets["draft_digest"] = named("digest")
    return sets, lambda: " OR ".join(f"({cond(t)})" for t in transitions)


def _by_sources(
    transitions: list[TransitionDecl],
) -> list[tuple[TransitionDecl, tuple[str, ...]]]:
    """``transitions`` in order, each that differs from an earlier one by its source alone
    joined to it (its sources listed), where no transition between them leaves its source,
    so that the first whose guards hold from any state is still the one declared first."""
    groups: list[tuple[int, TransitionDecl, list[str]]] = []  # (where the first is, ...)
    for at, t in enumerate(transitions):
        alike = (t.event, t.dest, t.guards, t.internal, t.dispatches)
        for where, first, group in groups:
            if (first.event, first.dest, first.guards, first.internal, first.dispatches) != alike:
                continue
            if all(b.source != t.source for b in transitions[where + 1 : at]):
                group.append(t.source)
                break
        else:
            groups.append((at, t, [t.source]))
    return [(t, tuple(group)) for _, t, group in groups]


def _renderer(
    params: list[str], marker: str, clock: str | None, current_epoch: str | None
) -> Callable[[str], str]:
    """How a compiled write renders a value (``guard_predicate``'s ``p``), appending the
    parameters it binds to ``params`` in the order the statement reads them: the time
    from ``clock`` where given (else bound ``now`` and ``deadline``), and the epoch named
    as ``current_epoch`` where the parameter ``current`` is true, where given."""

    def p(name: str) -> str:
        if clock is not None and name == "now":
            return clock
        if clock is not None and name == "deadline":
            params.append("lease_seconds")
            return f"({clock} + CAST({marker} AS DOUBLE PRECISION))"
        if current_epoch is not None and name == "epoch":
            params.extend(["current", "epoch"])
            return (
                f"CASE WHEN CAST({marker} AS BOOLEAN) THEN {current_epoch}"
                f" ELSE CAST({marker} AS BIGINT) END"
            )
        params.append(name)
        return marker

    return p


def compile_birth(
    spec: Spec,
    event: str,
    table: str,
    marker: str,
    clock: str,
    prior: str,
    drafts: str | None = None,
) -> CompiledEvent | None:
    """``event`` on an entity that has no row yet, as one ``INSERT … SELECT``: the row it
    would be created as (the initial state, epoch 0, no token or lease, the columns'
    defaults), the guards of the event's transitions from the initial state read on it,
    and the row the event leaves written, unless ``prior`` (the entity's row, locked) has
    one or a concurrent writer created it first. None: the event has no transition from
    the initial state. Returns what :func:`compile_one_statement` returns (``drafts``:
    the draft it read, as there)."""
    transitions = [t for t in spec.transitions if t.event == event and t.source == spec.initial]
    if not transitions:
        return None
    params: list[str] = []
    p = _renderer(params, marker, clock, "0")
    fresh = {
        "state": literal(spec.initial),
        "epoch": "0",
        "token_hash": "CAST(NULL AS TEXT)",
        "lease_deadline": "CAST(NULL AS DOUBLE PRECISION)",
        "owner": "CAST(NULL AS TEXT)",
        **{c: str(int(d.default)) for c, d in spec.columns.items()},
        **{c: "CAST(NULL AS TEXT)" for c in row_extras(spec)},
    }
    pins = PINS if drafts is not None else ()
    if drafts is not None:
        nulls = ("CAST(NULL AS BIGINT)", "CAST(NULL AS BIGINT)", "CAST(NULL AS TEXT)")
        fresh.update(zip(PINS, nulls, strict=True))
    sets, where_of = _writes(spec, event, transitions, p, fresh.__getitem__, drafts)
    key = p("key")
    kept = [c for c in fresh if c not in sets]  # what the event leaves as it was created
    names = ", ".join([*sets, "key", *kept])
    values = ", ".join([*sets.values(), key, *(fresh[c] for c in kept)])
    returning = ", ".join(
        [
            *("state", "epoch", "lease_deadline", clock),
            *(fresh[c] for c in [*PRIOR, *spec.columns, *row_extras(spec), *pins]),
            "owner",  # the new row's
            *(["draft_id", "draft_version", *NAMED_READ] if drafts is not None else []),
            TRANSACTION_ID,
        ]
    )
    sql = (
        f"INSERT INTO {table} ({names}) SELECT {values}"  # noqa: S608
        f" WHERE NOT EXISTS (SELECT 1 FROM {prior}) AND ({where_of()})"
        f" ON CONFLICT (key) DO NOTHING RETURNING {returning}"
    )
    return CompiledEvent(sql, tuple(params))


#: What the one statement reads back of the row it replaced, besides the declared columns.
PRIOR = ("state", "epoch", "token_hash", "lease_deadline")
#: What it reads back of the draft its guards read (``Draft``'s fields but the content).
NAMED = ("draft_id", "target_id", "version", "digest", "status")
#: Each read from the statement's ``named``, as its ``RETURNING`` reads it.
NAMED_READ = tuple(f"(SELECT {c} FROM named)" for c in NAMED)  # noqa: S608


def compile_one_statement(
    spec: Spec, event: str, table: str, marker: str = "%s", drafts: str | None = None
) -> CompiledEvent:
    """``event``'s guarded write as one PostgreSQL statement on the server's clock (or the
    bound ``clock_now``), which also returns the row it replaced, locked first (``FOR
    UPDATE``), so that the declaration's machine can judge the write on it before the
    commit. Its columns are named ``"prior NAME"``, which no declared column can be. An
    entity with no row yet is created by the same statement where the event's transitions
    from the initial state allow (:func:`compile_birth`). Zero rows back: refused, or a
    concurrent writer created the entity first; nothing changed.

    ``drafts``: the drafts table, where the declaration has linked drafts. The statement
    then reads the draft its guards read (a taker's, the one named by the bound
    ``draft_id``; any other event's, the pinned one) into ``named``, locked (``FOR SHARE``)
    only once the entity's row is, so that it reads the draft as the author who held the row
    last left it, not as the statement's snapshot saw it (a lock that does not conflict with
    an edit, ``FOR KEY SHARE``, would read the snapshot's: the race test catches that); the
    guards and a take's pins read ``named``. After the row's columns it returns the pins the
    write left and the draft read (:data:`NAMED`; NULLs: none)."""
    clock = "(SELECT now FROM clock)"
    pins = PINS if drafts is not None else ()
    names = [*PRIOR, *spec.columns, *row_extras(spec), *pins]
    priors = ", ".join(f'{c} AS "prior {c}"' for c in names)
    read = "named" if drafts is not None else None
    tail = ["cur.draft_id", "cur.draft_version", *NAMED_READ] if read else []
    write = compile_event(
        spec,
        event,
        table,
        marker,
        clock=clock,
        prior="prior",
        returning=", ".join(
            [
                *("state", "epoch", "lease_deadline", clock),
                *(f'"prior {c}"' for c in names),
                "owner",
                *tail,
                TRANSACTION_ID,
            ]
        ),
        drafts=read,
    )
    now = f"COALESCE(CAST({marker} AS DOUBLE PRECISION), {SERVER_NOW})"
    locked = f"SELECT {priors} FROM {table} WHERE key = {marker} FOR UPDATE"  # noqa: S608
    head = f"WITH clock AS MATERIALIZED (SELECT {now} AS now), prior AS ({locked})"
    params: list[str] = ["clock_now", "key"]
    if drafts is not None:
        columns = ", ".join(f"d.{c}" for c in NAMED)
        if spec.role(event) == "taker":  # the draft named; the row locked first
            params.append("draft_id")
            source = (
                f"{drafts} AS d WHERE d.draft_id = CAST({marker} AS BIGINT)"  # noqa: S608
                " AND (SELECT count(*) FROM prior) >= 0"
            )
        else:  # the pinned draft, joined to the row locked
            source = f'prior JOIN {drafts} AS d ON d.draft_id = prior."prior draft_id"'
        head += f", named AS MATERIALIZED (SELECT {columns} FROM {source} FOR SHARE OF d)"  # noqa: S608
    birth = compile_birth(spec, event, table, marker, clock, "prior", read)
    if birth is None:
        return CompiledEvent(f"{head} {write.sql}", (*params, *write.params))
    both = "SELECT * FROM w UNION ALL SELECT * FROM born"
    sql = f"{head}, w AS ({write.sql}), born AS ({birth.sql}) {both}"
    return CompiledEvent(sql, (*params, *write.params, *birth.params))
