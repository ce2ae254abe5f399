"""What a lifecycle's history must be: a legal path of its declaration, entity by entity.

The auditor walks each entity's history in ``seq`` order, keeping only the row that history
leaves: its state, its epoch, the fingerprint of the token that holds it, its lease
deadline, its owner's name, and its declared columns (known from the entity's first entry on;
a ``checkpoint`` records them in its ``facts``, with readback's recorded outcome, where
pruning knew them: after one from before it did, they are unknown and not compared). For
every entry it asks:

- A ``checkpoint`` (written by pruning) may only open an entity's history
  (``checkpoint_misplaced``).
- A refused operation (``refused`` names the guard) changes nothing: it stays in the state
  the entity is in, and records the lease and the owner the entity holds
  (``refusal_changed``). It is a stale owner's by the declaration's rule, the one the
  store records by (``Spec.stale_owner``): a stale guard of its event that history shows
  failing where it can witness it, or the state the entity is in, where the rule calls
  the event a stale owner's and history shows no stale guard failing (``state:NAME``)
  (``refusal_unexplained``).
- A transition starts where the entity is (``broken_path``) and is declared: some
  transition of its event leads from its source to its destination (``undeclared_transition``).
- A taker's event begins the next epoch; every other event keeps the current one
  (``epoch_order``: a stale caller's operation never changes a row).
- The guards that history can witness hold for it, evaluated by the predicates the
  machines run (``spec._predicates``) on the row before the entry and the entry as the
  caller: ``free`` (the state), ``epoch`` (the epoch the entry names), ``owner`` (the
  entry's token fingerprint is the holder's; not for an event that draws a fresh token,
  whose entry shows the new one), ``live`` and ``lapsed`` (the lease the previous entry
  left, at the entry's time ``at``, the store's clock when it wrote) and a ``compare``,
  of a column with a constant or of a fact the caller brought (the entry's ``facts``, its
  evidence) with a constant or a column, while what it reads is known. What history from
  before it recorded leases or facts does not show is assumed, and so is a declared
  column after a checkpoint that did not record it. An entry is legal if some declared
  transition with its event, source and destination has every witnessed guard holding;
  otherwise the first failing guard names the violation of its kind (``_kinds.broken``:
  ``target_not_free``, ``stale_epoch_changed``, ``stale_owner_changed``,
  ``lapsed_lease_used``, ``live_lease_lapsed``, ``evidence_not_recorded`` for a fact
  compared, ``count_out_of_range`` for a column), as the claim's audit names it.
- The declared invariants that history shows hold after each transition: ``row``
  (``invariant_row``) and ``left_only_by`` (``invariant_left_only_by``).
- With linked drafts, each change of a draft (an author's create, edit or approve, and a
  dispatch), each take's pin and the declared ``pinned`` invariants are judged by
  ``_drafts.DraftRules`` (``draft_out_of_order``, ``pinned_draft_edited``,
  ``request_key``, ``invariant_pinned``), and the guards over drafts are witnessed where
  history holds the draft they read: ``draft_ready`` (the draft the take's request key
  names, ``draft_not_ready``) and ``draft_pinned`` (the pinned one,
  ``pinned_draft_changed``); a draft no entry shows is assumed.
- The request key (where an event declares ``fresh_key``, or a take pins a linked draft):
  only such an event changes it, and a draw gives one the entity did not hold just before
  (``request_key``); a refusal records the one the entity holds. Readback's outcome the
  row records (where an event declares ``outcome``) is the one its caller brought,
  cleared by a taker's new epoch.

At the end of an entity, its row must be what its history leaves, its lease, owner,
request key and recorded outcome included (``row_disagrees``); a row with no history must
be as the declaration begins it, and history needs a row (``history_without_row``). With
linked drafts, its drafts table must be what history leaves too (``_drafts``:
``draft_disagrees``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from claimfsm.audit._drafts import DraftRules
from claimfsm.audit._kinds import broken, left_by_another, unexplained_refusal
from claimfsm.machine._entity import CallerView, RowView
from claimfsm.spec import Spec
from claimfsm.spec._invariants import row_holds
from claimfsm.spec._predicates import build_guards
from claimfsm.store import _entity_history as entries
from claimfsm.store._core import CHECKPOINT
from claimfsm.store._entity_drafts import drawn_of
from claimfsm.store._entity_history import (
    DRAFT_ENTRIES,
    Carried,
    DraftSeen,
    checkpoint_carries,
    checkpoint_drafts,
    facts_read,
    lease_recorded,
)
from claimfsm.store._entity_sql import row_extras
from claimfsm.store._tokens import FINGERPRINT_LENGTH

#: The history columns the auditor reads, and the row columns before the declared ones
#: (the token as its fingerprint, as history shows it).
HISTORY = entries.COLUMNS
ROW = f"key, state, epoch, substr(token_hash, 1, {FINGERPRINT_LENGTH}), lease_deadline, owner"
(SEQ, KEY, EPOCH, EVENT, SOURCE, DEST, AT, REFUSED, TOKEN, LEASE, FACTS, OWNER, REQUEST_KEY, _) = (
    range(len(entries.COLUMNS))
)

Report = Callable[[str, tuple[int, ...], str], None]

#: Guard kinds whose predicate reads only what history records (the state, the epoch the
#: entry names, the fingerprint of the token it presented), evaluated by the predicates
#: the machines run; of those, the kinds that read the presented token; the kinds that
#: read the lease, witnessed while history records it; and the kinds that compare a
#: column or a fact, witnessed while the column is known (``epoch`` always, a declared one
#: unless a checkpoint did not record it) and the entry records the facts its caller brought.
WITNESSED = frozenset({"free", "epoch", "owner"})
TOKEN_READERS = frozenset({"owner"})
LEASE_READERS = frozenset({"live", "lapsed"})
COLUMN_READERS = frozenset({"compare"})
#: The kinds that read a linked draft: witnessed where history holds the draft; of those,
#: the kinds that also read the row's pin, witnessed where history holds its digest too.
DRAFT_READERS = frozenset({"draft_ready", "draft_pinned"})
PIN_READERS = frozenset({"draft_pinned"})


@dataclass
class Entity:
    """One entity's row as its history so far leaves it."""

    key: str
    state: str
    epoch: int = 0
    holder: str = "-"  # the fingerprint of the token that holds the current epoch
    lease: float | None = None  # its deadline; None: no lease; UNRECORDED: not known
    owner: str | None = None  # the owner's name ("" for none); None: not known
    columns: dict[str, int] | None = field(default_factory=dict)  # None: not known
    #: the request key it holds ("": the entity's own); None: not known
    request_key: str | None = ""
    #: readback's outcome it records ("": none in this epoch); None: not known
    outcome: str | None = ""
    entries: int = 0
    #: linked drafts: each as history left it (a draft no entry showed is not known)
    drafts: dict[int, DraftSeen] = field(default_factory=dict)
    #: the draft and version the epoch pinned, and the digest then (None: none or not known)
    pin: tuple[int, int] | None = None
    pin_digest: str | None = None
    #: whether the last entry was a transition declared ``dispatches``
    dispatching: bool = False


class EntityRules:
    """The rules above for one declaration: :meth:`entry` for each entry of an entity in
    seq order, then :meth:`finish` with its row."""

    def __init__(self, spec: Spec) -> None:
        spec = spec.lifecycle_view()  # as the store ran it: a pseudo state's takers
        self.spec = spec
        self.guards = build_guards(spec)
        self.columns = tuple(spec.columns)
        self.defaults = {c: spec.columns[c].default for c in self.columns}
        self.takers = frozenset(spec.events_by("taker"))
        self.carried = Carried(spec)  # how an entry moves the columns and the outcome
        self.fresh = spec.events_setting("fresh_token")
        self.draws = spec.events_setting("fresh_key")
        #: the rules over linked drafts (``_drafts``); with them, a request key names the
        #: pinned draft, which a take changes
        self.drafting = DraftRules(spec)
        self.linked = self.drafting.linked
        #: the row's columns after the declared ones
        self.extras = row_extras(spec)
        self.by_step: dict[tuple[str, str, str], list[tuple[str, ...]]] = {}
        for t in spec.transitions:
            self.by_step.setdefault((t.event, t.source, t.dest), []).append(t.guards)
        self.rows = [i for i in spec.invariants.values() if i.kind == "row"]
        self.left = [i for i in spec.invariants.values() if i.kind == "left_only_by"]
        self.dispatches = {(t.event, t.source, t.dest) for t in spec.transitions if t.dispatches}

    def begin(self, key: str) -> Entity:
        return Entity(key, self.spec.initial, columns=dict(self.defaults))

    def entry(self, ent: Entity, e: tuple[Any, ...], report: Report) -> None:
        seq = (e[SEQ],)
        ent.entries += 1
        if e[EVENT] == CHECKPOINT and e[REFUSED] is None:
            if ent.entries > 1:
                report("checkpoint_misplaced", seq, "a checkpoint after the first entry")
            ent.state, ent.epoch, ent.holder = e[DEST], e[EPOCH], e[TOKEN]
            ent.lease, ent.owner, ent.request_key = e[LEASE], e[OWNER], e[REQUEST_KEY]
            # the columns and the outcome, where the checkpoint recorded them
            ent.columns, ent.outcome = checkpoint_carries(e[FACTS], self.columns)
            ent.drafts = checkpoint_drafts(e[FACTS])
            self.drafting.pin(ent, e[EVENT], e[REQUEST_KEY], seq)
            return
        if e[EVENT] in DRAFT_ENTRIES and e[REFUSED] is None and self.linked:
            self.drafting.change(
                ent, seq, e[EVENT], (e[SOURCE], e[DEST], e[EPOCH]), e[FACTS], report
            )
            ent.dispatching = False
            self.drafting.pinned_invariants(ent, seq, report)
            return
        ent.dispatching = False
        if e[REFUSED] is not None:
            why = self._unexplained(ent, e)
            if why is not None:
                report("refusal_unexplained", seq, f"{e[EVENT]} refused ({e[REFUSED]}), {why}")
            if not e[SOURCE] == e[DEST] == ent.state:
                report(
                    "refusal_changed",
                    seq,
                    f"{e[EVENT]} refused ({e[REFUSED]}) but recorded {e[SOURCE]} -> {e[DEST]}"
                    f" where the entity was {ent.state}",
                )
            elif lease_recorded(ent.lease) and lease_recorded(e[LEASE]) and e[LEASE] != ent.lease:
                report(
                    "refusal_changed",
                    seq,
                    f"{e[EVENT]} refused ({e[REFUSED]}) but recorded the lease {e[LEASE]!r}"
                    f" where the entity held {ent.lease!r}",
                )
            elif None not in (ent.owner, e[OWNER]) and e[OWNER] != ent.owner:
                report(
                    "refusal_changed",
                    seq,
                    f"{e[EVENT]} refused ({e[REFUSED]}) but recorded the owner {e[OWNER]!r}"
                    f" where the entity had {ent.owner!r}",
                )
            elif None not in (ent.request_key, e[REQUEST_KEY]) and e[REQUEST_KEY] != (
                ent.request_key
            ):
                report(
                    "refusal_changed",
                    seq,
                    f"{e[EVENT]} refused ({e[REFUSED]}) but recorded another request key",
                )
            return
        event, source, dest = e[EVENT], e[SOURCE], e[DEST]
        if source != ent.state:
            report("broken_path", seq, f"{event} from {source}, but the entity was {ent.state}")
        candidates = self.by_step.get((event, source, dest))
        if candidates is None:
            report("undeclared_transition", seq, f"{event} {source} -> {dest} is not declared")
        expected = ent.epoch + 1 if event in self.takers else ent.epoch
        if e[EPOCH] != expected:
            report(
                "epoch_order",
                seq,
                f"{event} at epoch {e[EPOCH]} where epoch {ent.epoch} was current"
                + (" (a taker begins the next one)" if event in self.takers else ""),
            )
        if candidates is not None and source == ent.state:
            failing = self._failing(ent, e, candidates)
            if failing is not None:
                g = self.spec.guards[failing]
                kind, why = broken(failing, g)
                report(kind, seq, f"{event} {source} -> {dest}: {why} ({failing}: {g.meaning})")
        for broke in left_by_another(self.left, source, event, dest):
            report("invariant_left_only_by", seq, broke)
        self._request_key(ent, e, report)
        ent.state, ent.epoch, ent.lease, ent.owner = dest, e[EPOCH], e[LEASE], e[OWNER]
        if event in self.takers or event in self.fresh:
            ent.holder = e[TOKEN]
        if self.linked and event in self.takers:
            self.drafting.pin(ent, event, e[REQUEST_KEY], seq, report)
        ent.dispatching = (event, source, dest) in self.dispatches
        self.drafting.pinned_invariants(ent, seq, report)
        # the columns counted and the outcome recorded, as pruning replays them
        ent.columns, ent.outcome = self.carried.after(ent.columns, ent.outcome, event, e[FACTS])
        for inv in self.rows:
            if inv.column == "epoch":
                value: Any = ent.epoch
            elif ent.columns is not None:
                value = ent.columns[inv.column or ""]
            else:
                continue  # the columns are not known since a checkpoint
            if not row_holds(inv, dest, value):
                report(
                    "invariant_row",
                    seq,
                    f"{inv.name}: {inv.column} is {value} in {dest} ({inv.meaning})",
                )

    def _views(self, ent: Entity, e: tuple[Any, ...]) -> tuple[RowView, CallerView]:
        """The row before entry ``e`` and its caller, as the guards read them."""
        lease = ent.lease if lease_recorded(ent.lease) else None
        pin = ent.pin or (None, None)
        row = RowView(
            ent.state,
            ent.epoch,
            ent.holder,
            lease,
            ent.columns if ent.columns is not None else {},
            *(pin[0], pin[1], ent.pin_digest),
        )
        draft = (
            self.drafting.seen(ent, self.drafting.named(ent, e[EVENT], e[REQUEST_KEY]))
            if self.linked
            else None
        )
        facts = facts_read(e[FACTS]) or {}
        return row, CallerView(e[EPOCH], e[TOKEN], facts, e[AT], draft=draft, target_id=ent.key)

    def _request_key(self, ent: Entity, e: tuple[Any, ...], report: Report) -> None:
        """An event declared ``fresh_key`` draws a request key no entry of the entity held
        just before; any other event keeps the one it held. (Not judged where either entry
        does not record it.)"""
        before, after = ent.request_key, e[REQUEST_KEY]
        ent.request_key = after
        if after is None:
            return
        if e[EVENT] in self.draws and (not after or after == before):
            report(
                "request_key",
                (e[SEQ],),
                f"{e[EVENT]} draws a fresh request key (fresh_key), but the entry records"
                + (" the entity's own" if not after else " the one held before"),
            )
        elif (
            e[EVENT] not in self.draws
            and not (self.linked and e[EVENT] in self.takers)
            and before is not None
            and after != before
        ):
            report(
                "request_key",
                (e[SEQ],),
                f"{e[EVENT]} changed the request key, which only an event declared fresh_key draws",
            )

    def _failing(
        self, ent: Entity, e: tuple[Any, ...], candidates: list[tuple[str, ...]]
    ) -> str | None:
        """None if some candidate's witnessed guards all hold; else the first that fails."""
        row, caller = self._views(ent, e)
        first: str | None = None
        for guards in candidates:
            bad = [
                g for g in guards if self._witnessed(g, e, ent) and not self.guards[g](row, caller)
            ]
            if not bad:
                return None
            first = first or bad[0]
        return first

    def _unexplained(self, ent: Entity, e: tuple[Any, ...]) -> str | None:
        """Why a refusal is not a stale owner's as the declaration's rule has the store
        record one (``Spec.stale_owner``), or None: it names a stale guard of the event
        that history witnesses failing (or cannot witness), or the state the entity is
        in, where the rule calls the event a stale owner's, every stale guard history
        witnesses holding (``state:NAME``)."""
        return unexplained_refusal(
            self.spec, e[EVENT], ent.state, e[REFUSED], lambda g: self._fails(g, ent, e)
        )

    def _fails(self, guard: str, ent: Entity, e: tuple[Any, ...]) -> bool | None:
        """Whether ``guard`` failed for the caller of entry ``e``, as history shows it (a
        token's guard by the fingerprint recorded), or None where history cannot tell."""
        if self.spec.guards[guard].kind not in TOKEN_READERS and not self._witnessed(guard, e, ent):
            return None
        row, caller = self._views(ent, e)
        return not self.guards[guard](row, caller)

    def _witnessed(self, guard: str, e: tuple[Any, ...], ent: Entity) -> bool:
        """Whether history shows what ``guard`` reads, for entry ``e`` (WITNESSED)."""
        g = self.spec.guards[guard]
        if g.kind in TOKEN_READERS and e[EVENT] in self.fresh:
            return False  # the entry shows the fresh token, not the one presented
        if g.kind in WITNESSED:
            return True
        if g.kind in LEASE_READERS:
            return lease_recorded(ent.lease)
        if g.kind in DRAFT_READERS:
            named = self.drafting.named(ent, e[EVENT], e[REQUEST_KEY])
            if named is None or named not in ent.drafts:
                return False
            return g.kind not in PIN_READERS or ent.pin_digest is not None
        if g.kind not in COLUMN_READERS:
            return False
        if g.fact is not None and e[FACTS] is None:
            return False  # an entry from before history recorded the caller's facts
        return g.column in (None, "epoch") or ent.columns is not None

    def finish(self, ent: Entity | None, row: tuple[Any, ...] | None, report: Report) -> None:
        """``row``: (state, epoch, token fingerprint or None, lease deadline, owner,
        *declared columns, then the request key where the row keeps one, "" for the
        entity's own, and readback's outcome where it records one, "" for none, and with
        linked drafts the entity's drafts as its table holds them, ``_drafts.TableDraft``),
        or None: no row."""
        if row is None:
            if ent is not None:
                report("history_without_row", (), f"history of {ent.key!r} but no row")
            return
        if self.linked:
            *row_fields, table = row
            self.drafting.table(ent.drafts if ent is not None else {}, table, report)
            row = tuple(row_fields)
        state, epoch, token, lease, owner, *values = row
        found = {
            "state": state,
            "epoch": epoch,
            "token": token or "-",
            "lease": lease,
            "owner": owner or "",
            **dict(zip(self.columns, values[: len(self.columns)], strict=True)),
        }
        found.update(
            (name, value or "")
            for name, value in zip(self.extras, values[len(self.columns) :], strict=True)
        )
        base = ent or self.begin("")
        replayed = {"state": base.state, "epoch": base.epoch, "token": base.holder}
        if lease_recorded(base.lease):
            replayed["lease"] = base.lease
        if base.owner is not None:
            replayed["owner"] = base.owner
        if base.columns is not None:
            replayed.update(base.columns)
        if "request_key" in self.extras and base.request_key is not None:
            # the row keeps the key drawn; with linked drafts history names the draft too
            drawn = drawn_of(base.key, base.request_key) if self.linked else base.request_key
            replayed["request_key"] = drawn
        if "outcome" in self.extras and base.outcome is not None:
            replayed["outcome"] = base.outcome
        differ = [
            f"{k} {found[k]!r} (history: {v!r})" for k, v in replayed.items() if found[k] != v
        ]
        if differ:
            report(
                "row_disagrees",
                (),
                "the row is not what its history leaves: " + ", ".join(differ),
            )
