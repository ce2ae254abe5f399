"""A declared lifecycle's history: the columns of its table and of an entry, in one place.

Every operation on an entity appends one entry: an event applied (``refused`` is None) or a
stale caller's operation refused (``refused`` names the stale guard that failed, or, for an
owner whose epoch is current but in a state declared ``stale``, that state as
``state:NAME``, :data:`STALE_STATE`; the row did not change), and the ``checkpoint`` entries
pruning leaves, and, with linked drafts, each change of one of the entity's drafts
(:data:`DRAFT_ENTRIES`: an author's create, edit or approve, and the dispatch a
``dispatches`` transition makes, right after that transition's entry; the row does not
change, and ``facts`` holds the draft as it left it, :func:`draft_facts`). An entry records
the row as the operation left it: its ``epoch``, its state (``dest``; ``source`` is where it
was), the token that holds it (as ``token_fingerprint``), its lease deadline
(``lease_deadline``, None: no lease), the facts the caller brought (``facts``: the evidence
a guard compares, such as a readback's ``running``; empty for none; a ``checkpoint``'s
record the row's declared ``columns`` and recorded ``outcome`` as pruning left them) and the
name of the owner the row holds after it (``owner``; empty for none), as the claim's history
records them, and the request key the row holds after it (``request_key``: the key a request
to the remote carries, drawn by an event declared ``fresh_key``; empty while it is the
entity's own key), and what the caller said of it (``detail``: why a job failed, say; empty
for nothing). With the store's time (``at``) that is what an auditor needs to judge the
guards of the entry, the lease's and the evidence's included, and the row its history
leaves.

A history table made by an earlier claimfsm gains the columns it lacks when the store
opens it (:func:`upgrades`); the entries it already holds are marked as not recording them:
a lease of :data:`UNRECORDED`, facts, owner, request key and detail of None.

The store, its upkeep and the audit read these names and indexes from here, and how an
entry moves the row's declared columns and recorded outcome (:class:`Carried`, which
pruning writes into a checkpoint and the audit replays).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from claimfsm.store._core import CHECKPOINT

#: The history table's columns, in the order an entry reads them.
COLUMNS = (
    "seq",
    "key",
    "epoch",
    "event",
    "source",
    "dest",
    "at",
    "refused",
    "token_fingerprint",
    "lease_deadline",
    "facts",
    "owner",
    "request_key",
    "detail",
)
SELECT = ", ".join(COLUMNS)
#: What the store appends: an entry without its seq (the database numbers it).
RECORD = COLUMNS[1:]
#: Indexes into an appended record.
(KEY, EPOCH, EVENT, SOURCE, DEST, AT, REFUSED, TOKEN, LEASE, FACTS, OWNER, REQUEST_KEY, DETAIL) = (
    range(len(RECORD))
)
#: The lease deadline of an entry appended before history recorded it (a store made by an
#: earlier claimfsm, opened since): not known, so not judged.
UNRECORDED = float("-inf")


#: The entries of a linked draft's changes (never a declared name: a name has no colon),
#: each with the status it leaves the draft in.
DRAFT_CREATE, DRAFT_EDIT, DRAFT_APPROVE, DRAFT_DISPATCH = (
    "draft:create",
    "draft:edit",
    "draft:approve",
    "draft:dispatch",
)
DRAFT_ENTRIES = {
    DRAFT_CREATE: "pending",
    DRAFT_EDIT: "pending",
    DRAFT_APPROVE: "approved",
    DRAFT_DISPATCH: "dispatched",
}
#: The entry of each of an author's operations, by the name the checker's world gives it.
AUTHORED = {"create": DRAFT_CREATE, "edit": DRAFT_EDIT, "approve": DRAFT_APPROVE}


class DraftSeen(NamedTuple):
    """A linked draft as its entity's history leaves it."""

    status: str  # pending, approved or dispatched
    version: int
    digest: str


#: ``facts`` of an entry whose caller brought none.
NO_FACTS = "{}"


def lease_recorded(deadline: float | None) -> bool:
    """Whether an entry's ``lease_deadline`` is what the row held (not :data:`UNRECORDED`)."""
    return deadline is None or deadline > UNRECORDED


def facts_text(facts: Mapping[str, Any]) -> str:
    """The ``facts`` column of an entry whose caller brought ``facts`` (JSON, keys sorted)."""
    return json.dumps(dict(facts), sort_keys=True, separators=(",", ":")) if facts else NO_FACTS


def draft_facts(draft_id: int, version: int, digest: str) -> str:
    """``facts`` of a draft's entry: the draft, its version and digest as the change left it."""
    return facts_text({"draft": draft_id, "version": version, "digest": digest})


def draft_change(event: str, facts: str | None) -> tuple[int, DraftSeen] | None:
    """What a draft's entry (``event`` of :data:`DRAFT_ENTRIES`, recording ``facts``) makes
    of a draft: its id and the draft as it leaves it; None where the entry does not say."""
    read = facts_read(facts) or {}
    draft, version, digest = read.get("draft"), read.get("version"), read.get("digest")
    if type(draft) is not int or type(version) is not int or not isinstance(digest, str):
        return None
    return draft, DraftSeen(DRAFT_ENTRIES[event], version, digest)


def facts_read(text: str | None) -> dict[str, Any] | None:
    """An entry's facts as its ``facts`` column holds them; None: not recorded."""
    return None if text is None else json.loads(text)


def table(name: str, serial: str) -> str:
    """``CREATE TABLE`` of the history table ``name``; ``serial``: the driver's ``seq``."""
    return (
        f"CREATE TABLE IF NOT EXISTS {name} (seq {serial}, key TEXT NOT NULL,"
        " epoch INTEGER NOT NULL, event TEXT NOT NULL, source TEXT NOT NULL, dest TEXT NOT"
        " NULL, at DOUBLE PRECISION NOT NULL, refused TEXT, token_fingerprint TEXT NOT NULL,"
        " lease_deadline DOUBLE PRECISION, facts TEXT, owner TEXT, request_key TEXT, detail TEXT)"
    )


#: The columns an earlier history table may lack, each with its type, in the order they
#: were added.
ADDED = {
    "lease_deadline": "DOUBLE PRECISION",
    "facts": "TEXT",
    "owner": "TEXT",
    "request_key": "TEXT",
    "detail": "TEXT",
}


def unrecorded(column: str, minus_infinity: str) -> str:
    """What an entry made before ``column`` (of :data:`ADDED`) was recorded holds there,
    as a literal of the database whose minus infinity is ``minus_infinity``."""
    return minus_infinity if column == "lease_deadline" else "NULL"


def upgrades(name: str, present: set[str], minus_infinity: str, add: str) -> list[str]:
    """``ALTER TABLE`` statements that give history table ``name``, whose columns are
    ``present``, the columns of :data:`ADDED` it lacks, its entries marked as not
    recording them; ``add``: the database's words for adding a column."""
    return [
        f"ALTER TABLE {name} {add} {c} {kind} DEFAULT {unrecorded(c, minus_infinity)}"
        for c, kind in ADDED.items()
        if c not in present
    ]


@dataclass(frozen=True)
class EntityHistory:
    """One entry of a lifecycle's history (see the module's docstring)."""

    seq: int
    key: str
    epoch: int
    event: str
    source: str
    dest: str
    at: float
    #: the guard a stale owner failed, or ``state:NAME`` for a stale state (STALE_STATE);
    #: None for a transition taken
    refused: str | None
    token_fingerprint: str
    #: the lease the row holds after the entry; None: no lease; ``-inf``: not recorded
    lease_deadline: float | None = None
    #: the facts the caller brought ({} for none); None: not recorded
    facts: dict[str, Any] | None = field(default=None, hash=False)
    #: the owner's name the row holds after the entry ("" for none); None: not recorded
    owner: str | None = None
    #: the request key the row holds after the entry ("": the entity's key); None: not
    #: recorded
    request_key: str | None = None
    #: what the caller said of it (``detail=``, as the claim's ``mark_uncertain`` reason;
    #: "" for nothing; a checkpoint's says what was pruned); None: not recorded
    detail: str | None = None

    @classmethod
    def read(cls, row: tuple[Any, ...]) -> EntityHistory:
        """The entry a row of :data:`COLUMNS` holds."""
        seq, key, epoch, event, source, dest, at, refused, token, lease, facts, *said = row
        owner, rkey, detail = said
        return cls(
            *(seq, key, epoch, event, source, dest, at, refused, token, lease),
            facts_read(facts),
            owner,
            rkey,
            detail,
        )


class Carried:
    """What a checkpoint records besides the row's state, epoch, lease, owner and request
    key, in its ``facts``: the declared columns (``columns``) and readback's recorded
    outcome (``outcome``, "" for none, where an event records one) as its entity's last
    removed entry left them, each where known (an entry from before history recorded the
    facts, or a checkpoint that did not record them, leaves it unknown), and with linked
    drafts the drafts history showed (``drafts``: each as its last change left it; a
    draft no entry showed is not known). :meth:`after` and :func:`drafts_after` are how
    an entry moves them, for pruning and the audit alike."""

    def __init__(self, spec: Any) -> None:
        self.defaults = {c: spec.columns[c].default for c in spec.columns}
        self.bumps = {e: d.bumps for e, d in spec.effects.items()}
        self.takers = frozenset(spec.events_by("taker"))
        self.records = spec.events_setting("outcome")
        self.recording = bool(self.records)
        #: key -> (columns, outcome), None where not known
        self.known: dict[str, tuple[dict[str, int] | None, str | None]] = {}
        self.linked = spec.drafts is not None
        #: key -> its drafts as history showed them
        self.drafts: dict[str, dict[int, DraftSeen]] = {}

    def entry(self, key: str, event: str, refused: str | None, facts: str | None) -> None:
        """Apply one entry, in ``seq`` order; a key's first is where its history begins."""
        columns, outcome = self.known.setdefault(key, (dict(self.defaults), ""))
        drafts = self.drafts.setdefault(key, {})
        if refused is not None:
            return  # a refusal changed nothing
        if event == CHECKPOINT:
            self.known[key] = checkpoint_carries(facts, tuple(self.defaults))
            self.drafts[key] = checkpoint_drafts(facts)
            return
        if event in DRAFT_ENTRIES:
            self.drafts[key] = drafts_after(drafts, event, facts)
            return
        self.known[key] = self.after(columns, outcome, event, facts)

    def after(
        self, columns: dict[str, int] | None, outcome: str | None, event: str, facts: str | None
    ) -> tuple[dict[str, int] | None, str | None]:
        """The columns and the outcome after a transition of ``event`` (not a refusal) whose
        entry records ``facts``: the event's ``bumps`` counted, readback's outcome as its
        caller brought it where the event records one, none after a taker's new epoch."""
        if columns is not None and self.bumps.get(event):
            columns = {c: v + (c in self.bumps[event]) for c, v in columns.items()}
        if event in self.records:
            read = facts_read(facts)
            outcome = None if read is None else read.get("outcome")
        elif event in self.takers:
            outcome = ""
        return columns, outcome

    def facts(self, key: str) -> str:
        columns, outcome = self.known[key]
        said: dict[str, Any] = {}
        if columns is not None and columns:
            said["columns"] = columns
        if self.recording and outcome is not None:
            said["outcome"] = outcome
        if self.linked:
            drafts = self.drafts[key]
            said["drafts"] = {str(d): list(seen) for d, seen in sorted(drafts.items())}
        return facts_text(said)


def drafts_after(
    drafts: dict[int, DraftSeen], event: str, facts: str | None
) -> dict[int, DraftSeen]:
    """An entity's drafts after a draft's entry (``event``, recording ``facts``): the
    draft it names as the change left it (unchanged where it names none)."""
    change = draft_change(event, facts)
    return drafts if change is None else {**drafts, change[0]: change[1]}


def checkpoint_drafts(facts: str | None) -> dict[int, DraftSeen]:
    """The drafts a checkpoint's ``facts`` record (none known where it records none)."""
    found = (facts_read(facts) or {}).get("drafts")
    known: dict[int, DraftSeen] = {}
    if not isinstance(found, dict):
        return known
    for draft, seen in found.items():
        if (
            draft.isdigit()
            and isinstance(seen, list)
            and len(seen) == 3
            and seen[0] in DRAFT_ENTRIES.values()
            and type(seen[1]) is int
            and isinstance(seen[2], str)
        ):
            known[int(draft)] = DraftSeen(*seen)
    return known


def checkpoint_carries(
    facts: str | None, columns: tuple[str, ...]
) -> tuple[dict[str, int] | None, str | None]:
    """The declared columns and readback's outcome a checkpoint's ``facts`` record (None:
    not recorded; a declaration without columns has nothing unknown). Columns that are
    not the declaration's ``columns`` (it changed since) are not known."""
    read = facts_read(facts) or {}
    found = read.get("columns")
    if not columns:
        known: dict[str, int] | None = {}
    elif (
        isinstance(found, dict)
        and sorted(found) == sorted(columns)
        and all(type(v) is int for v in found.values())
    ):
        known = {c: found[c] for c in columns}
    else:
        known = None
    outcome = read.get("outcome")
    return known, (outcome if isinstance(outcome, str) else None)
