"""A lifecycle store's upkeep: the sweep over every entity, and pruning old history.

:func:`sweep` applies the declaration's sweep events (``by = "sweep"``, such as a lapse
after the lease deadline) to every entity where they hold now. The entities in a state the
sweep's events leave are read in one query; the declaration's machine picks, for each, the
first sweep event (in declared order) whose guards hold on the row as read, by the store's
clock. That event is then applied as :meth:`EntityStore.operate` applies it: one
transaction, the guarded write naming the current epoch and re-judged there, its history
record. A row that moved on in between is refused there and left to the next sweep; nothing
is written for it. The row is read again and the next event that holds is applied (a
lapse, then the bury that a lapse made possible), each sweep event at most once per entity
per sweep, so a sweep always ends.

:func:`prune` removes every history entry up to the newest one older than a given age, in
one transaction, so each entity loses a prefix of its history. Where an entity's removed
entries end, a ``checkpoint`` entry (the same ``seq``) records its state, epoch, lease,
owner and request key as of then, and in its ``facts`` its declared columns and readback's
recorded outcome (``_entity_history.Carried``): the history that remains still starts where
the entity was, and a reader knows older entries were removed. An ``archive`` callable is given the
removed entries first, in ``seq`` order and in batches; if it raises, nothing is removed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from claimfsm.errors import IllegalTransition, Refused, StoreError
from claimfsm.machine._entity import CallerView
from claimfsm.store import _entity_history as entries
from claimfsm.store._core import CHECKPOINT, Pruned
from claimfsm.store._entity_drivers import LostCommit, Retry, Tx
from claimfsm.store._entity_history import AT, DEST, EPOCH, SOURCE, Carried, EntityHistory

if TYPE_CHECKING:
    from claimfsm.store._entity import EntityStore


@dataclass(frozen=True)
class Swept:
    """One sweep event a sweep applied: on ``key``, at ``epoch``, ``source`` -> ``dest``."""

    key: str
    epoch: int
    event: str
    source: str
    dest: str
    at: float


def sweep(store: EntityStore) -> list[Swept]:
    """Every sweep event, on every entity where it holds now (see the module's docstring)."""
    spec, driver = store.spec, store._driver
    events = spec.events_by("sweep")
    if not events:
        return []
    sources = sorted({t.source for t in spec.transitions if t.event in events})
    query = store._sql["rows"].replace(
        " ORDER BY", f" WHERE state IN ({', '.join([driver.marker] * len(sources))}) ORDER BY"
    )
    found = driver.rerun(lambda tx: tx.all(query, tuple(sources)))
    now = store.now()  # a guard that holds by this clock holds later too, or is re-judged
    done: list[Swept] = []
    for row in found:
        key, view, applied = row[0], store._view(row), set[str]()
        while True:
            caller = CallerView(view.epoch, None, {}, now)
            event = next(
                (
                    e
                    for e in events
                    if e not in applied and store.machine.fire(e, view, caller) is not None
                ),
                None,
            )
            if event is None:
                break
            applied.add(event)
            try:
                record = store._operate(key, event, epoch=None, facts=None)
            except (Refused, IllegalTransition):
                break  # the row moved on since it was read: the next sweep sees it
            done.append(
                Swept(key, record[EPOCH], event, record[SOURCE], record[DEST], float(record[AT]))
            )
            view = store._view(store._driver.rerun(_reader(store._sql["row"], key)))
    return done


def _reader(sql: str, key: str) -> Callable[[Tx], Any]:
    return lambda tx: tx.one(sql, (key,))


def prune(
    store: EntityStore,
    seconds: float,
    archive: Callable[[list[EntityHistory]], None] | None,
    batch: int,
) -> Pruned:
    """Remove history older than ``seconds`` by the store's clock (see the module's
    docstring). One transaction; not run again if the database rolls it back, since
    ``archive`` has then seen entries that were not removed: call it again."""
    h, m = store.history_table, store._driver.marker
    columns = entries.SELECT

    def run(tx: Tx) -> Pruned:
        before = store._now(tx) - seconds
        found = tx.one(f"SELECT MAX(seq) FROM {h} WHERE at < {m}", (before,))  # noqa: S608
        cut = None if found is None or found[0] is None else int(found[0])
        if cut is None:
            return Pruned(before, None, 0, 0)
        # Each entity's state, epoch and lease as of its last removed entry: a transition
        # taken (or an earlier checkpoint) moves them; a refused operation changed nothing.
        # key: seq, epoch, state, at, fp, lease, owner, request key
        last: dict[str, tuple[Any, ...]] = {}
        # and its declared columns and recorded outcome as of then, replayed from where its
        # history begins (its first entry, or a checkpoint that recorded them)
        carried = Carried(store.spec)
        after = removed = 0
        while rows := tx.all(
            f"SELECT {columns} FROM {h} WHERE seq > {m} AND seq <= {m} ORDER BY seq LIMIT {m}",  # noqa: S608
            (after, cut, batch),
        ):
            if archive is not None:
                archive([EntityHistory.read(r) for r in rows])
            for row in rows:
                seq, key, epoch, event, _source, dest, at, refused, fp, lease, facts, *rest = row
                owner, rk = rest[0], rest[1]
                carried.entry(key, event, refused, facts)
                if refused is None:
                    last[key] = (seq, epoch, dest, at, fp, lease, owner, rk)
                elif key in last:
                    last[key] = (seq, *last[key][1:])
                else:  # only refusals so far: the entity was where it began
                    last[key] = (seq, 0, store.spec.initial, at, "-", None, "", rk)
            after, removed = rows[-1][0], removed + len(rows)
        # the delete trigger lets through only what this transaction's permit allows
        tx.run(store._sql["permit"], (cut,))
        tx.run(f"DELETE FROM {h} WHERE seq <= {m}", (cut,))  # noqa: S608
        tx.run(store._sql["unpermit"], ())
        marks = ", ".join([m] * len(entries.COLUMNS))
        insert = f"INSERT INTO {h} ({columns}) VALUES ({marks})"  # noqa: S608
        for key, (seq, epoch, state, at, fp, lease, owner, rk) in sorted(
            last.items(), key=lambda kv: kv[1][0]
        ):
            checkpoint = (seq, key, epoch, CHECKPOINT, state, state, at, None, fp, lease)
            pruned = f"history up to entry {cut} was pruned; the row as of entry {seq}"
            tx.run(insert, (*checkpoint, carried.facts(key), owner, rk, pruned))
        return Pruned(before, cut, removed, len(last))

    try:
        with store._driver.transaction() as tx:
            return run(tx)
    except Retry as exc:
        raise StoreError(
            f"{store.spec.name}: pruning was rolled back ({exc.__cause__}); nothing was"
            " removed, though the archive may have been given entries: prune again"
        ) from None
    except LostCommit as exc:
        raise StoreError(
            f"{store.spec.name}: the connection broke while pruning committed"
            f" ({exc.__cause__}); history shows whether it was removed: prune again"
        ) from None


__all__ = ["Swept", "prune", "sweep"]
