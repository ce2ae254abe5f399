"""The guard kinds as Promela: the one place a kind's meaning is written for SPIN.

Each of the checker's worlds has a Promela twin (``_spin``: a lifecycle of your own;
``_spin_claim``: the claim protocol) that states its world field for field. What a guard
means is not the world's business: the world only says, for one situation (an owner's
handle on a row, the sweep on a row, a taker, an operator naming the current epoch), what
there is to read, as Promela expressions (:class:`Reading`). :func:`promela_guard` compiles
the declared guard from it by its kind, as ``spec._predicates`` compiles it to Python for
the machines and the built-in engine, and ``store._predicates`` to SQL. A situation with
nothing of what a kind reads (no handle for ``owner``, no draft for ``draft_pinned``, no
evidence for a ``compare``) makes the guard false, as a missing fact makes the Python
predicate false.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from claimfsm.errors import SpecError
from claimfsm.spec import Spec, compare

#: An operand of a comparison: its Promela expression, an expression that is true when it
#: has a value (a column still NULL has none), and its type: "int", "str" (an expression
#: holding a text's code) or "const" (the expression is a literal: a number, or a quoted text).
Operand = tuple[str, str, str]

#: a declared comparison operator as Promela
OPS = {"=": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def _nothing(_name: str) -> Operand | None:
    return None


@dataclass(frozen=True)
class Reading:
    """What one situation of a world gives the guard kinds to read, as Promela; ``None``:
    the situation has none of it, and a kind that reads it is false there."""

    #: the caller's handle (epoch and owner token) is the row's current one
    owner: str | None = None
    #: the epoch the caller names is the row's current one
    epoch: str | None = None
    #: the row's lease deadline lies ahead (``lapsed`` is its negation)
    live: str | None = None
    #: the row frees its key (no epoch yet, or one in a ``frees_target`` state)
    free: str | None = None
    #: the draft the caller names is approved and belongs to the row's key
    ready: str | None = None
    #: the draft the row pins is still approved at the pinned version
    pinned: str | None = None
    #: a caller's fact by name, as an operand (None: the caller brings no such fact)
    fact: Callable[[str], Operand | None] = field(default=_nothing)
    #: a row's column by name, as an operand (None: the situation reads no row)
    column: Callable[[str], Operand | None] = field(default=_nothing)
    #: a text constant's code in this world's variables (None: the world holds no text)
    text: Callable[[str], int | None] = field(default=lambda _t: None)


def constant(value: Any) -> Operand | None:
    """A declared constant as an operand (None: no constant)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return ("1" if value else "0", "1", "const")
    if isinstance(value, str):
        return (repr(value), "1", "const")
    return (str(int(value)), "1", "const")


def promela_guard(spec: Spec, name: str, at: Reading) -> str:
    """Guard ``name`` of ``spec`` as a Promela expression in the situation ``at``."""
    g = spec.guards[name]
    where = str(spec.path or spec.name)
    if g.kind == "lapsed":
        return "false" if at.live is None else f"(!{at.live})"
    simple = {
        "owner": at.owner,
        "epoch": at.epoch,
        "live": at.live,
        "free": at.free,
        "draft_ready": at.ready,
        "draft_pinned": at.pinned,
    }
    if g.kind in simple:
        return simple[g.kind] or "false"
    if g.kind != "compare":
        raise SpecError(f"{where}: guard {name!r}: no Promela for kind {g.kind!r}")
    if g.fact is not None:
        left = at.fact(g.fact)
        right = at.column(g.column) if g.column is not None else constant(g.value)
    else:
        left, right = at.column(g.column or ""), constant(g.value)
    if left is None or right is None:
        return "false"
    op = g.op or "="
    (lexpr, ldef, ltype), (rexpr, rdef, rtype) = left, right
    if ltype == "const" and rtype == "const":
        return "true" if compare(op, _value(lexpr), _value(rexpr)) else "false"
    if "str" in (ltype, rtype) and op not in ("=", "!="):
        raise SpecError(
            f"{where}: guard {name!r} orders text with {op!r}; the SPIN engine compares text"
            " with = and != only"
        )
    lcode, rcode = _code(lexpr, at, where, name), _code(rexpr, at, where, name)
    defined = [d for d in (ldef, rdef) if d != "1"]
    return "(" + " && ".join([*defined, f"({lcode} {OPS[op]} {rcode})"]) + ")"


def conjunction(parts: Sequence[str]) -> str:
    """``parts`` joined by ``&&``, folding the constants ``true`` and ``false``."""
    if "false" in parts:
        return "false"
    kept = [p for p in parts if p != "true"]
    return " && ".join(kept) if kept else "true"


def literal(value: Any) -> str:
    """A declared number or boolean as a Promela literal."""
    found = constant(value)
    if found is None or found[0].startswith(("'", '"')):
        raise SpecError(f"no Promela literal for {value!r}: a number or a boolean is needed")
    return found[0]


def _value(expr: str) -> Any:
    """A constant operand back as its Python value."""
    if expr.startswith(("'", '"')):
        return expr[1:-1]
    return int(expr)


def _code(expr: str, at: Reading, where: str, name: str) -> str:
    """A quoted text constant as the code this world stores it under; others unchanged."""
    if not expr.startswith(("'", '"')):
        return expr
    code = at.text(expr[1:-1])
    if code is None:
        raise SpecError(
            f"{where}: guard {name!r} compares with the text {expr}, which this world's SPIN"
            " model does not hold; compare numbers or booleans"
        )
    return str(code)
