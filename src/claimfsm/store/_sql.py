"""The declared guards as SQL, and the guarded writes compiled from the declaration.

Each declared event becomes ONE conditional statement: the WHERE clause is the OR of the
event's transitions (source state AND its guards), and the new state is a CASE over the
same terms in declaration order, exactly as the machine tries them. Zero rows back means
refused. ``param`` renders a named parameter in the driver's style.

Statements are assembled from identifiers only (column names, and state names that the
loader checks are identifiers); every value is a bound parameter. Hence the ``noqa: S608``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from claimfsm.errors import SpecError
from claimfsm.machine import Facts
from claimfsm.spec import Event, Spec, State, claim_steps
from claimfsm.store._core import IDEMPOTENCY_KEY_SQL
from claimfsm.store._predicates import guard_constants, guard_predicate, literal

Param = Callable[[str], str]

CLAIM_COLUMNS = (
    "target_id",
    "epoch",
    "state",
    "owner",
    "token_hash",
    "draft_id",
    "draft_version",
    "draft_digest",
    "idempotency_key",
    "lease_deadline",
    "outcome",
    "updated_at",
)


def claim_param(p: Param) -> Param:
    """``p`` for the predicates' parameter names: a fact is the ``Facts`` field of its name
    (``outcome``), a constant ``const_GUARD`` (:attr:`Compiled.constants` holds its value)."""

    def render(name: str) -> str:
        if name.startswith("fact:"):
            return p(name[len("fact:") :])
        if name.startswith("const:"):
            return p("const_" + name[len("const:") :])
        return p(name)

    return render


def guard_sql(spec: Spec, p: Param, table: Callable[[str], str] = str) -> dict[str, str]:
    """Each guard's predicate over the ``claims`` row (and the draft ``d`` for acquire),
    compiled from its declared kind by the one compiler every store uses
    (``_predicates``). ``table`` names a table in the statement (PostgreSQL qualifies it
    with the schema)."""
    q = claim_param(p)
    return {
        name: guard_predicate(spec, name, q, lambda c: f"claims.{c}", table, lease_nullable=False)
        for name in spec.guards
    }


def claim_constants(spec: Spec) -> dict[str, Any]:
    """The values of the ``const_GUARD`` parameters (bound, as every value is)."""
    return {"const_" + k[len("const:") :]: v for k, v in guard_constants(spec).items()}


@dataclass(frozen=True)
class Compiled:
    """The guarded writes for one declaration: ``events[name]`` with and without a target."""

    events: dict[str, str]  # event -> statement for one target (``target_id`` parameter)
    everywhere: dict[str, str]  # event -> statement over every target (sweep)
    acquire: str
    constants: dict[str, Any]  # the declared constants the guards compare with

    def params(self, facts: Facts) -> dict[str, Any]:
        """The parameters of a statement: the event's facts and the declared constants."""
        return {**facts.sql_params(), **self.constants}


def compile_writes(spec: Spec, p: Param, table: Callable[[str], str] = str) -> Compiled:
    """The guarded writes of ``spec``, parameters rendered by ``p`` and tables by ``table``
    (PostgreSQL names its schema in every statement: no session state, so a transaction
    pooler can hand each transaction to any server connection)."""
    spec.require_sources_determined()
    dispatching = spec.dispatching()
    for t in spec.transitions:
        ways = dispatching.get((t.event, t.dest), ())
        if not t.dispatches and () in ways:
            raise SpecError(
                f"{spec.name}: event {t.event!r} enters {t.dest!r} by a transition that "
                "dispatches and by one that does not, and no compare guard over the caller's "
                "facts tells them apart: a store could not tell whether the draft was "
                "dispatched; add such a guard, or use two event names"
            )
    guards = guard_sql(spec, p, table)
    missing = sorted(set(spec.guards) - set(guards))
    if missing:
        raise SpecError(f"{spec.name}: guards {missing} have no SQL in claimfsm.store")
    returning = "RETURNING " + ", ".join(CLAIM_COLUMNS)
    steps = claim_steps(spec)
    take = steps.event(Event.ACQUIRE)
    events, everywhere = {}, {}
    for event in spec.events:
        decls = [t for t in spec.transitions if t.event == event and not t.internal]
        if event == take or not decls:
            continue  # acquire inserts (below); internal-only events write history alone
        terms = []
        for t in decls:
            conds = [f"claims.state = {literal(t.source)}"] + [f"({guards[g]})" for g in t.guards]
            terms.append((" AND ".join(conds), t.dest))
        # Self-loops only (renew): the state stays, so it is not written at all.
        sets = (
            []
            if all(t.source == t.dest for t in decls)
            else [f"state = {_destination(decls, terms)}"]
        )
        sets += [f"{col} = {p(field)}" for col, field in spec.event_effects(event)]
        sets.append(f"updated_at = {p('now')}")
        where = " OR ".join(f"({cond})" for cond, _ in terms)
        head = f"UPDATE {table('claims')} SET {', '.join(sets)} WHERE "  # noqa: S608
        events[event] = f"{head}claims.target_id = {p('target_id')} AND ({where}) {returning}"
        everywhere[event] = f"{head}{where} {returning}"

    (acq,) = [t for t in spec.transitions if t.event == take]
    extra = [g for g in acq.guards if spec.guards[g].kind not in ("free", "draft_ready")]
    if extra or acq.source != steps.state(State.UNCLAIMED):
        raise SpecError(
            f"{spec.name}: {take} must go from {steps.state(State.UNCLAIMED)} with guards of"
            " kinds free and draft_ready only"
        )

    def of_kind(kind: str) -> str:
        terms = [guards[g] for g in acq.guards if spec.guards[g].kind == kind]
        return terms[0] if len(terms) == 1 else " AND ".join(f"({t})" for t in terms) or "TRUE"

    acquire = (
        f"INSERT INTO {table('claims')} (" + ", ".join(CLAIM_COLUMNS) + ") "  # noqa: S608
        f"SELECT {p('target_id')}, 1, {literal(acq.dest)}, {p('owner')}, {p('token_hash')},"
        f" d.draft_id, d.version, d.digest, {IDEMPOTENCY_KEY_SQL}, {p('lease_deadline')},"
        f" NULL, {p('now')} FROM {table('drafts')} AS d WHERE d.draft_id = {p('draft_id')}"
        f" AND {of_kind('draft_ready')} "
        "ON CONFLICT (target_id) DO UPDATE SET epoch = claims.epoch + 1,"
        + ", ".join(
            f" {c} = excluded.{c}" for c in CLAIM_COLUMNS if c not in ("target_id", "epoch")
        )
        + f" WHERE {of_kind('free')} {returning}"
    )
    return Compiled(
        events=events, everywhere=everywhere, acquire=acquire, constants=claim_constants(spec)
    )


#: The history columns, in the order ``HistoryRecord.params`` gives them.
HISTORY_COLUMNS = (
    "target_id",
    "epoch",
    "event",
    "from_state",
    "to_state",
    "at",
    "owner",
    "token_fp",
    "draft_id",
    "draft_version",
    "draft_digest",
    "idempotency_key",
    "lease_deadline",
    "outcome",
    "detail",
    "attempted",  # schema version 3: a discard's event and what the stale owner rule named
    "refused",
)


def compile_single_statements(
    spec: Spec, clock: str, table: Callable[[str], str], fingerprint_length: int
) -> dict[str, str]:
    """Each event's guarded write, its history row and the draft's change as ONE statement
    (PostgreSQL's writable CTEs), on the statement's own clock: ``clock`` is the SQL for
    the time, read once. Parameters are pyformat (``%(name)s``) and hold times relative to
    that clock: ``lease_deadline`` is added to it. Zero rows back means refused and nothing
    changed. The sweep (every target) keeps the transaction path."""

    def p(name: str) -> str:
        if name == "now":
            return "(SELECT now FROM clock)"
        if name == "lease_deadline":
            return "((SELECT now FROM clock) + %(lease_deadline)s)"
        return f"%({name})s"

    writes = compile_writes(spec, p, table)
    guards = guard_sql(spec, p, table)
    dispatching = spec.dispatching()
    statements = {}
    take = claim_steps(spec).event(Event.ACQUIRE)
    for event, write in [(take, writes.acquire), *writes.events.items()]:
        sources = {t.dest: t.source for t in spec.transitions if t.event == event}
        # The draft's change, only for the transitions declared to dispatch: the state
        # written, and the fact guards that tell such a transition from another.
        dispatched = " OR ".join(
            "("
            + " AND ".join([f"w.state = {literal(dest)}", *(f"({guards[g]})" for g in way)])
            + ")"
            for (e, dest), ways in dispatching.items()
            if e == event
            for way in ways
        )
        whens = " ".join(
            f"WHEN {literal(dest)} THEN {literal(src)}" for dest, src in sources.items()
        )
        values = (
            f"w.target_id, w.epoch, {literal(event)}, CASE w.state {whens} END, w.state,"
            f" w.updated_at, w.owner, substr(w.token_hash, 1, {int(fingerprint_length)}),"
            " w.draft_id, w.draft_version, w.draft_digest, w.idempotency_key,"
            " w.lease_deadline, w.outcome, %(detail)s, NULL, NULL"
        )
        statements[event] = (
            f"WITH clock AS MATERIALIZED (SELECT {clock} AS now), w AS ({write}),"  # noqa: S608
            f" logged AS (INSERT INTO {table('history')} ({', '.join(HISTORY_COLUMNS)})"
            f" SELECT {values} FROM w)"
            + (
                f", dispatched AS (UPDATE {table('drafts')} SET status = 'dispatched',"  # noqa: S608
                " updated_at = w.updated_at FROM w WHERE drafts.draft_id = w.draft_id"
                f" AND drafts.version = w.draft_version AND ({dispatched}))"
                if dispatched
                else ""
            )
            + f" SELECT {', '.join('w.' + c for c in CLAIM_COLUMNS)} FROM w"  # noqa: S608
        )
    return statements


def _destination(decls: list[Any], terms: list[tuple[str, str]]) -> str:
    """The new state, as cheaply as the transitions allow: a constant when they all end in
    one state; a CASE on the current state when their sources differ (the WHERE clause
    already checked the guards); else a CASE over every term, as the machine tries them."""
    dests = {t.dest for t in decls}
    if len(dests) == 1:
        return literal(next(iter(dests)))
    if len({t.source for t in decls}) == len(decls):
        whens = " ".join(f"WHEN {literal(t.source)} THEN {literal(t.dest)}" for t in decls)
        return f"CASE claims.state {whens} END"
    whens = " ".join(f"WHEN {cond} THEN {literal(dest)}" for cond, dest in terms)
    return f"CASE {whens} END"
