"""What a guard can mean: the kinds a declaration chooses from, as data every consumer
compiles (the machine's Python check, the stores' SQL, the checker's truth value, the
refusal's sentence, the audit's rule). stdlib only.

A guard is a predicate over the entity's row (the target's current epoch), the caller's
facts and the store clock:

- ``owner``: the caller names the current epoch and presents the token that holds it.
- ``epoch``: the caller names the current epoch.
- ``live`` / ``lapsed``: the store clock is before / at or after the row's lease deadline.
- ``free``: the target has no row, or its state is one of those flagged ``frees_target``.
- ``draft_ready``: the draft the caller names exists, belongs to the target and is approved.
- ``draft_pinned``: the draft the row pinned is still approved, at the pinned version and
  digest.
- ``compare``: ``fact OP column`` or ``fact OP value``: one of the caller's facts (evidence
  from the remote) against a column of the row or a constant; or ``column OP value``: a
  column of the row (``epoch`` or a declared one) against a whole number. A missing fact
  or column (no row) makes it false.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

#: Kinds, with the sentence the loader and docs use for each.
GUARD_KINDS: dict[str, str] = {
    "owner": "the caller names the current epoch and holds its token",
    "epoch": "the caller names the current epoch",
    "live": "the store clock is before the lease deadline",
    "lapsed": "the store clock is at or after the lease deadline",
    "free": "the target has no epoch, or its epoch's state frees the target",
    "draft_ready": "the named draft exists, belongs to the target and is approved",
    "draft_pinned": "the pinned draft is still approved at the pinned version and digest",
    "compare": "a fact of the caller against a column of the row or a constant, or a column"
    " against a constant",
}

#: Facts a caller brings that a ``compare`` guard may read: name -> the Python types of
#: its constants. (Evidence from the remote or the executor: ``outcome`` is readback's
#: ``present`` or ``absent``, ``running`` is readback's answer to "is a run of the row's
#: epoch running at the executor?", ``ran`` to "did a run of the row's epoch reach it?";
#: the rest of an event's facts are what the built-in kinds read.)
FACTS: dict[str, tuple[type, ...]] = {
    "outcome": (str,),
    "fenced_through": (int,),
    "remote_dedups": (bool,),
    "running": (bool,),
    "ran": (bool,),
}

#: What readback says of an epoch's effect (the fact ``outcome``, and the outcome the claim
#: row records): present, or absent.
PRESENT, ABSENT = "present", "absent"
READBACK_OUTCOMES = (PRESENT, ABSENT)

#: Row columns a ``compare`` guard may read.
COLUMNS: dict[str, tuple[type, ...]] = {
    "epoch": (int,),
    "draft_version": (int,),
    "lease_deadline": (int, float),
    "outcome": (str,),
}

#: Comparison operators: the declaration's spelling -> (Python, SQL).
OPERATORS: dict[str, tuple[Callable[[Any, Any], bool], str]] = {
    "=": (operator.eq, "="),
    "!=": (operator.ne, "<>"),
    "<": (operator.lt, "<"),
    "<=": (operator.le, "<="),
    ">": (operator.gt, ">"),
    ">=": (operator.ge, ">="),
}


def compare(op: str, left: Any, right: Any) -> bool:
    """``left OP right``, false when either side is missing (as SQL's NULL is)."""
    if left is None or right is None:
        return False
    return bool(OPERATORS[op][0](left, right))
