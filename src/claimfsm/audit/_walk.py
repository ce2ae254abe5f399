"""One walk for both auditors: a store's history, key by key, beside its rows.

Both streams come ordered by key (byte order), the history by ``seq`` within a key. Each
history entry has its ``seq`` at index 0 and its key at index 1; each row its key at
index 0. The rules (the claim's ``_rules.Rules``, a lifecycle's ``_entity.EntityRules``)
say what a key's history must be: ``begin(key)`` starts a key's track, ``entry(track,
entry, report)`` checks and applies one entry, ``finish(track, row, report)`` compares
the track with the key's row (None: no history, or no row). A key's report takes
``(kind, seqs, message)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from claimfsm.errors import StoreError

Report = Callable[[str, tuple[int, ...], str], None]
#: (kind, key, seqs, message): a violation, for the key it was found on
Found = Callable[[str, str, tuple[int, ...], str], None]
#: How often (in entries) the walk calls its ``progress`` callback.
PROGRESS_EVERY = 100_000


class Rules(Protocol):
    def begin(self, key: str) -> Any: ...

    def entry(self, track: Any, e: tuple[Any, ...], report: Report) -> None: ...

    def finish(self, track: Any, row: tuple[Any, ...] | None, report: Report) -> None: ...


def walk(
    rules: Rules,
    history: Iterable[tuple[Any, ...]],
    rows: Iterable[tuple[Any, ...]],
    found: Found,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[int, int, int]:
    """Both streams, merged by key: (entries, keys with history, rows). A row is passed to
    ``finish`` without its key. ``progress(entries, keys)`` is called every
    ``PROGRESS_EVERY`` entries. History out of key order is a ``StoreError``: the merge
    would pair rows wrongly."""
    entries = keys = seen_rows = 0
    row_iter = iter(rows)
    row = next(row_iter, None)

    def for_key(key: str) -> Report:
        return lambda kind, seqs, message: found(kind, key, seqs, message)

    def rows_before(key: str | None) -> None:
        """The rows (without history) before ``key``; None: all that are left."""
        nonlocal row, seen_rows
        while row is not None and (key is None or row[0] < key):
            seen_rows += 1
            rules.finish(None, tuple(row[1:]), for_key(row[0]))
            row = next(row_iter, None)

    def close(track: Any, key: str) -> None:
        nonlocal row, seen_rows
        rows_before(key)
        if row is not None and row[0] == key:
            seen_rows += 1
            rules.finish(track, tuple(row[1:]), for_key(key))
            row = next(row_iter, None)
        else:
            rules.finish(track, None, for_key(key))

    track: Any = None
    key: str | None = None
    report: Report = for_key("")
    for e in history:
        if key is None or e[1] != key:
            if key is not None:
                close(track, key)
                if e[1] < key:
                    raise StoreError(
                        "the database returned history out of key order; the audit needs"
                        " byte-order (C) sorting of keys"
                    )
            key = e[1]
            track, report = rules.begin(key), for_key(key)
            keys += 1
        rules.entry(track, e, report)
        entries += 1
        if progress is not None and entries % PROGRESS_EVERY == 0:
            progress(entries, keys)
    if key is not None:
        close(track, key)
    rows_before(None)
    return entries, keys, seen_rows


__all__ = ["PROGRESS_EVERY", "Found", "Report", "Rules", "walk"]
