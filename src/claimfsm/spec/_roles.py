"""What a declaration says beyond its machine: the row's own columns, who takes each event,
which events start and end the external work, the named invariants, and the world the
checker explores. stdlib only.

- ``[columns.NAME]``: an integer column of the entity's row (a counter such as
  ``attempts``), with its ``default``. Events ``bumps`` it; ``compare`` guards and ``row``
  invariants read it.
- ``by`` on ``[events.NAME]``: who takes the event (:data:`ROLES`). Without it, the guards
  say: an ``owner`` guard makes it the owner's, a ``free`` guard a taker's, a ``lapsed``
  guard the sweep's; anything else is the operator's.
- ``work`` on ``[events.NAME]``: ``starts`` (after it the owner's external work may be
  running: a send, a job's run) or ``ends`` (the owner's work is over once it takes it,
  refused or not).
- ``[invariants.NAME]``: predicates the checker proves in every reachable state, and
  ``eventually`` obligations it proves of every fair run (:data:`INVARIANT_KINDS`).
- ``[world]``: the bounds and faults of the checker's world (:data:`WORLD_OPTIONS`);
  ``claimfsm check`` flags override them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from claimfsm.spec._guards import COLUMNS, OPERATORS

#: Who takes an event, with the sentence the docs use.
ROLES: dict[str, str] = {
    "owner": "a client holding a handle (epoch and token) from an earlier take",
    "taker": "an idle client: a new epoch begins and the taker holds it (a fresh token)",
    "operator": "the operator or a reconciler, naming the current epoch, holding no token",
    "sweep": "the store's sweep, acting on the row as the store clock finds it",
}

#: What an event does to the owner's external work.
WORK = {"starts": "the owner's external work may run from now on", "ends": "the work is over"}

#: Invariant kinds, with the sentence the docs use.
INVARIANT_KINDS: dict[str, str] = {
    "exclusive_work": "at most one client's external work on an entity is running at a time,"
    " apart from work at an epoch the executor has fenced off",
    "row": "`column op value` holds for the entity's row (in the listed `states` only, if given)",
    "eventually": "an entity in one of the `from` states reaches one of the `to` states on every"
    " run where each step listed in `fair` that stays possible is eventually taken",
}

#: The world's own steps an ``eventually`` invariant may list in ``fair``, besides events.
FAIR_STEPS: dict[str, str] = {
    "clock": "a live lease's deadline eventually passes: no lease is renewed forever",
    "fence": "the operator eventually fences the executor through the entity's epoch",
}

#: ``[world]`` options: name -> (default, lowest, highest, meaning). Booleans have no range.
WORLD_OPTIONS: dict[str, tuple[int | bool, int, int, str]] = {
    "workers": (2, 1, 6, "clients that take, own and work on entities"),
    "keys": (1, 1, 4, "entities (one row each)"),
    "epochs": (3, 1, 8, "takes per entity: a take beyond it is not explored"),
    "counts": (
        4,
        1,
        16,
        "the highest value a bumped column reaches: a bump beyond it is not explored",
    ),
    "crashes": (True, 0, 0, "a client may crash: it forgets its handle and its work stops"),
}


COLUMN_KEYS = {"meaning", "type", "default"}
INVARIANT_KEYS = {"kind", "meaning", "column", "op", "value", "states", "from", "to", "fair"}


#: The evidence a lifecycle of your own compares: readback's ``running`` (is work at the
#: row's epoch still running?) and ``fenced_through`` (how far the executor is fenced).
#: The checker's world answers them truthfully; a store's caller brings them.
LIFECYCLE_FACTS = frozenset({"running", "fenced_through"})
#: Columns every row has (a declared column may not take these names).
ROW_COLUMNS = frozenset(
    {"key", "state", "epoch", "token", "token_hash", "owner", "lease_deadline", "target"}
)


@dataclass(frozen=True, slots=True)
class ColumnDecl:
    name: str
    meaning: str
    default: int = 0


@dataclass(frozen=True, slots=True)
class InvariantDecl:
    name: str
    kind: str  # one of INVARIANT_KINDS
    meaning: str
    # kind "row": column op value, in states (empty: every state but the initial one)
    column: str | None = None
    op: str | None = None
    value: int | None = None
    states: tuple[str, ...] = ()
    # kind "eventually": from a state in ``sources``, every fair run reaches one of
    # ``goals``; ``fair`` lists the events and world steps (FAIR_STEPS) assumed weakly fair
    sources: tuple[str, ...] = ()
    goals: tuple[str, ...] = ()
    fair: tuple[str, ...] = ()


_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
Fail = Callable[[str], Exception]


def parse_columns(declared: Any, fail: Fail) -> dict[str, ColumnDecl]:
    if not isinstance(declared, dict):
        raise fail("columns must be tables: [columns.NAME] with a 'meaning'")
    found = {}
    for name, body in declared.items():
        what = f"column {name!r}"
        _only(body, COLUMN_KEYS, what, fail)
        if not _WORD.fullmatch(name):
            raise fail(f"{what}: a column name is a word (letters, digits, _)")
        if name in ROW_COLUMNS or name in COLUMNS:
            raise fail(f"{what}: the row already has a column of that name; choose another")
        if not isinstance(body.get("meaning"), str) or not body["meaning"]:
            raise fail(f"{what} needs a one-line 'meaning'")
        if body.get("type", "int") != "int":
            raise fail(f'{what}: type must be "int" (counters are the columns supported)')
        default = body.get("default", 0)
        if isinstance(default, bool) or not isinstance(default, int) or not 0 <= default < 2**31:
            raise fail(f"{what}: default must be a whole number from 0, not {default!r}")
        found[name] = ColumnDecl(name, body["meaning"], default)
    return found


def parse_invariants(
    declared: Any,
    states: Mapping[str, Any],
    columns: Mapping[str, ColumnDecl],
    starts_work: bool,
    fail: Fail,
    events: frozenset[str] = frozenset(),
    fenceable: bool = False,
) -> dict[str, InvariantDecl]:
    if not isinstance(declared, dict):
        raise fail("invariants must be tables: [invariants.NAME] with a 'kind' and a 'meaning'")
    found = {}
    for name, body in declared.items():
        what = f"invariant {name!r}"
        _only(body, INVARIANT_KEYS, what, fail)
        if not _WORD.fullmatch(name):
            raise fail(f"{what}: an invariant's name is a word (letters, digits, _)")
        if not isinstance(body.get("meaning"), str) or not body["meaning"]:
            raise fail(f"{what} needs a one-line 'meaning'")
        kind = body.get("kind")
        if not isinstance(kind, str) or kind not in INVARIANT_KINDS:
            raise fail(f"{what}: unknown kind {kind!r}; use one of {sorted(INVARIANT_KINDS)}")
        operands = {"column", "op", "value", "states"} & set(body)
        obligation = {"from", "to", "fair"} & set(body)
        if kind != "eventually" and obligation:
            raise fail(f"{what}: {sorted(obligation)} belong to kind 'eventually' only")
        if kind == "eventually":
            if operands:
                raise fail(f"{what}: {sorted(operands)} belong to kind 'row' only")
            found[name] = _obligation(what, name, body, states, events, fenceable, fail)
            continue
        if kind == "exclusive_work":
            if operands:
                raise fail(f"{what}: {sorted(operands)} belong to kind 'row' only")
            if not starts_work:
                raise fail(
                    f"{what}: no event starts work; mark the one that does with"
                    ' work = "starts" under [events.NAME]'
                )
            found[name] = InvariantDecl(name, kind, body["meaning"])
            continue
        column, op, value = body.get("column"), body.get("op"), body.get("value")
        check_column_compare(what, column, op, value, columns, fail)
        listed = body.get("states", [])
        if not isinstance(listed, list) or not all(isinstance(s, str) for s in listed):
            raise fail(f"{what}: states must be a list of state names")
        unknown = [s for s in listed if s not in states]
        if unknown:
            raise fail(f"{what}: states {unknown} are not declared")
        found[name] = InvariantDecl(name, kind, body["meaning"], column, op, value, tuple(listed))
    return found


def _obligation(
    what: str,
    name: str,
    body: dict[str, Any],
    states: Mapping[str, Any],
    events: frozenset[str],
    fenceable: bool,
    fail: Fail,
) -> InvariantDecl:
    """An ``eventually`` invariant: ``from`` and ``to`` name declared states (neither empty,
    none in both); ``fair`` names declared events or :data:`FAIR_STEPS`."""
    lists: dict[str, tuple[str, ...]] = {}
    for key in ("from", "to", "fair"):
        listed = body.get(key, [])
        if not isinstance(listed, list) or not all(isinstance(x, str) for x in listed):
            raise fail(f"{what}: {key} must be a list of names")
        lists[key] = tuple(dict.fromkeys(listed))
    for key in ("from", "to"):
        if not lists[key]:
            raise fail(f"{what}: kind 'eventually' needs {key} = [state names]")
        unknown = [s for s in lists[key] if s not in states]
        if unknown:
            raise fail(f"{what}: {key} names states {unknown} that are not declared")
    both = [s for s in lists["from"] if s in lists["to"]]
    if both:
        raise fail(f"{what}: {both} are in both from and to, so the obligation says nothing")
    allowed = set(events) | set(FAIR_STEPS)
    if not fenceable:
        allowed.discard("fence")
    unknown = [x for x in lists["fair"] if x not in allowed]
    if unknown:
        extra = "" if fenceable else " ('fence' only where a guard reads fenced_through)"
        raise fail(
            f"{what}: fair names {unknown}, which are neither events nor world steps; use"
            f" events or {sorted(FAIR_STEPS)}{extra}"
        )
    return InvariantDecl(
        name,
        "eventually",
        body["meaning"],
        sources=lists["from"],
        goals=lists["to"],
        fair=lists["fair"],
    )


def check_column_compare(
    what: str, column: Any, op: Any, value: Any, columns: Mapping[str, Any], fail: Fail
) -> None:
    """``column op value`` (a compare guard without a fact, or a ``row`` invariant): the
    column is ``epoch`` or declared, the operator known, the value a whole number."""
    if not isinstance(column, str) or (column not in columns and column != "epoch"):
        raise fail(
            f"{what}: column {column!r} is not a column of the row; declare it under"
            f" [columns.NAME] or use one of {sorted(['epoch', *columns])}"
        )
    if not isinstance(op, str) or op not in OPERATORS:
        raise fail(f"{what}: op {op!r} is not an operator; use one of {list(OPERATORS)}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(f"{what}: value must be a whole number to compare with {column}, not {value!r}")


def lifecycle_problem(spec: Any) -> str | None:
    """What in ``spec`` only the claim protocol's world has, which neither the checker's
    model of a lifecycle of your own nor its store can read (None: nothing): a guard over
    the claim's drafts, over the claim remote's facts, over the claim row's own columns,
    or an event that records the claim's readback outcome."""
    for name, g in spec.guards.items():
        if g.kind in ("draft_ready", "draft_pinned"):
            return (
                f"guard {name!r} is of kind {g.kind!r}, which reads the claim protocol's"
                " drafts; a lifecycle of your own has none: compare a column of its own"
            )
        if g.kind == "compare" and g.fact is not None and g.fact not in LIFECYCLE_FACTS:
            return (
                f"guard {name!r} reads the fact {g.fact!r}, which only the claim protocol's"
                f" callers bring; a lifecycle of your own compares {sorted(LIFECYCLE_FACTS)}"
            )
        if g.kind == "compare" and g.column not in (None, "epoch", *spec.columns):
            return (
                f"guard {name!r} reads the column {g.column!r}, which only the claim row has;"
                " compare epoch or a column declared under [columns]"
            )
    for event, decl in spec.effects.items():
        if "outcome" in decl.sets:
            return (
                f"event {event!r} sets outcome, the claim row's readback evidence; count what"
                " you need in a column of your own instead"
            )
        if "fresh_key" in decl.sets:
            return (
                f"event {event!r} sets fresh_key, the claim row's idempotency key; a"
                " lifecycle of your own has none: count what you need in a column of your own"
            )
    if spec.drafts is not None:
        return "[drafts] describes the claim protocol's drafts; a lifecycle of your own has none"
    return None


def parse_world(declared: Any, fail: Fail) -> dict[str, int | bool]:
    if not isinstance(declared, dict):
        raise fail("world must be a table: [world] with " + ", ".join(WORLD_OPTIONS))
    _only(declared, set(WORLD_OPTIONS), "[world]", fail)
    world: dict[str, int | bool] = {}
    for name, (default, low, high, _meaning) in WORLD_OPTIONS.items():
        value = declared.get(name, default)
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise fail(f"[world]: {name} must be true or false, not {value!r}")
        elif isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise fail(
                f"[world]: {name} must be a whole number from {low} to {high}, not {value!r}"
            )
        world[name] = value
    return world


def _only(body: Any, allowed: set[str], what: str, fail: Fail) -> None:
    if not isinstance(body, dict):
        raise fail(f"{what} must be a table")
    unknown = set(body) - allowed
    if unknown:
        raise fail(f"{what}: unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")
