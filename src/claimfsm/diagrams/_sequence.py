"""A counterexample as a sequence chart, laid out here as SVG: no script, no Graphviz.

The workers, the claim store and the remote are lifelines; each numbered step is a row, its
words on the left and its arrow on the right. What a reviewer must *see* is drawn on the
remote's lifeline: a bar for every request in flight (red where two epochs of the target
are in flight at once) and a mark for every effect applied (red for a second effect of the
same draft).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from html import escape

from claimfsm.diagrams._draw import CLAIM_LANES, DrawnStep, Lanes

_FONT = "Helvetica, Arial, sans-serif"
_TEXT_WIDTH = 400  # the column of step descriptions
_CHARS = 50  # characters per line there, at 13 px
_COLUMN = 150  # between lifelines
_LINE = 17
_RED = "#d62728"
_BLUE = "#1f5fbf"


def _participants(steps: Sequence[DrawnStep]) -> list[str]:
    workers = sorted(
        {s.actor for s in steps if s.actor.startswith("worker")}
        | {s.to for s in steps if s.to.startswith("worker")},
        key=lambda name: (len(name), name),
    )
    return [*workers, "store", "remote"]


def sequence_svg(
    steps: Sequence[DrawnStep],
    title: str,
    violation: str | None = None,
    lanes: Lanes = CLAIM_LANES,
) -> str:
    """The steps as an SVG sequence chart (see the module's docstring); ``lanes`` names
    the store's and the remote's lifelines and what runs on the remote's."""
    names = _participants(steps)
    x0 = 16 + _TEXT_WIDTH + 70
    xs = {name: x0 + i * _COLUMN for i, name in enumerate(names)}
    width = xs["remote"] + 250
    rows: list[tuple[DrawnStep, list[str], float, float]] = []  # step, lines, top, middle
    y = 96.0
    for s in steps:
        lines = textwrap.wrap(f"{s.number}. {s.text}", _CHARS) or [""]
        height = max(38.0, _LINE * len(lines) + 14)
        rows.append((s, lines, y, y + height / 2))
        y += height
    bottom = y + 10
    out: list[str] = []
    add = out.append
    add(f'<text x="16" y="26" font-size="16" font-weight="bold">{escape(title)}</text>')
    for i, (_s, _lines, top, _mid) in enumerate(rows):  # row shading first: lines go on top
        if i % 2 == 0:
            add(
                f'<rect x="8" y="{top}" width="{width - 16}" height="{_rows_height(rows, i)}" '
                'fill="#f6f6f6"/>'
            )
    for name, x in xs.items():
        label = {"store": lanes.store, "remote": lanes.remote}.get(name, name)
        add(
            f'<rect x="{x - 55}" y="44" width="110" height="30" rx="4" fill="#f2f2f2" '
            f'stroke="#555"/>'
        )
        add(f'<text x="{x}" y="64" font-size="13" text-anchor="middle">{escape(label)}</text>')
        add(f'<line x1="{x}" y1="74" x2="{x}" y2="{bottom}" stroke="#999" stroke-dasharray="4 4"/>')
    for s, lines, top, mid in rows:
        for k, line in enumerate(lines):
            add(f'<text x="16" y="{top + 20 + k * _LINE}" font-size="13">{escape(line)}</text>')
        _arrow(add, s, xs, mid)
    _remote_bars(add, rows, xs["remote"], lanes)
    if violation:
        add(
            f'<text x="16" y="{bottom + 26}" font-size="14" font-weight="bold" fill="{_RED}">'
            f"violated: {escape(violation)}</text>"
        )
    height = bottom + (40 if violation else 12)
    body = "\n".join(out)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="sequence" width="{width}" '
        f'height="{height:.0f}" viewBox="0 0 {width} {height:.0f}" font-family="{_FONT}" '
        f'role="img" aria-label="{escape(title)}">\n'
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
        'fill="#333"/></marker></defs>\n'
        f"{body}\n</svg>"
    )


def _rows_height(rows: list[tuple[DrawnStep, list[str], float, float]], i: int) -> float:
    top = rows[i][2]
    return (rows[i + 1][2] if i + 1 < len(rows) else top + 2 * (rows[i][3] - top)) - top


def _arrow(emit: Callable[[str], None], s: DrawnStep, xs: dict[str, int], mid: float) -> None:
    label = escape(f"{s.number} {s.label or s.event or ''}".strip())
    actor = s.actor if s.actor in xs else "store"
    to = s.to if s.to in xs else "store"
    if actor == to == "remote":  # drawn on the remote's lifeline (bars and marks), not an arrow
        return
    if actor == to:  # a note on one lifeline: the clock, an author, the store itself
        x = xs[actor]
        who = "" if s.actor in xs else f"{s.actor}: "
        text = escape(f"{s.number} {who}{s.label or s.event or ''}")
        emit(
            f'<rect x="{x - 62}" y="{mid - 12}" width="124" height="22" rx="3" fill="#fff8dc" '
            'stroke="#b8a956"/>'
        )
        emit(f'<text x="{x}" y="{mid + 4}" font-size="12" text-anchor="middle">{text}</text>')
        return
    x1, x2 = xs[actor], xs[to]
    emit(
        f'<line x1="{x1}" y1="{mid}" x2="{x2 - 6 if x2 > x1 else x2 + 6}" y2="{mid}" '
        'stroke="#333" stroke-width="1.5" marker-end="url(#arrow)"/>'
    )
    emit(f'<text x="{min(x1, x2) + 8}" y="{mid - 6}" font-size="12">{label}</text>')


def _lanes(in_flight: tuple[int, ...]) -> set[tuple[int, int]]:
    """Requests in flight as (epoch, n): the n-th request of that epoch (a retry sends the
    same epoch again)."""
    return {(e, n) for e in set(in_flight) for n in range(in_flight.count(e))}


def _remote_bars(
    emit: Callable[[str], None],
    rows: list[tuple[DrawnStep, list[str], float, float]],
    x: int,
    names: Lanes,
) -> None:
    """Requests in flight (or work running) as bars beside the remote's lifeline; effects
    as marks."""
    lanes = sorted(set().union(*(_lanes(s.in_flight) for s, *_ in rows)))
    text_x = x + 12 + 12 * len(lanes)
    overlap_said = False
    prev_lanes: set[tuple[int, int]] = set()
    prev_effects: tuple[tuple[int, int], ...] = ()
    drafts_done: set[int] = set()
    for i, (s, _lines, top, mid) in enumerate(rows):
        bottom = top + _rows_height(rows, i)
        now = _lanes(s.in_flight)
        two = len(set(s.in_flight)) >= 2  # two epochs, not two requests of one epoch
        notes: list[tuple[str, str, str]] = []  # (colour, weight, words)
        for k, lane in enumerate(lanes):
            if lane not in now:
                continue
            colour = _RED if two else _BLUE
            start = top if lane in prev_lanes else mid  # a bar runs on from the row above
            emit(
                f'<rect x="{x + 10 + 12 * k}" y="{start}" width="8" height="{bottom - start}" '
                f'fill="{colour}" opacity="0.85"/>'
            )
            if lane not in prev_lanes:
                notes.append((colour, "normal", f"{names.item} e{lane[0]} {names.doing}"))
        if two and not overlap_said:
            overlap_said = True
            notes.append((_RED, "bold", f"two epochs {names.doing} at once"))
        new_effects = s.effects[len(prev_effects) :]
        for draft, epoch in new_effects:
            again = draft in drafts_done
            drafts_done.add(draft)
            colour = _RED if again else "#2e7d32"
            emit(f'<circle cx="{x}" cy="{mid}" r="6" fill="{colour}"/>')
            whose = f"{names.effect} {draft}"
            words = f"duplicate effect of {whose}" if again else f"effect: {whose}"
            notes.append((colour, "bold" if again else "normal", f"{words} (e{epoch})"))
        ended = prev_lanes - now
        if ended and not new_effects:
            epochs = ", ".join(f"e{e}" for e, _ in sorted(ended))
            notes.append(("#616161", "normal", f"{names.item} {epochs} {names.ends}"))
        for n, (colour, weight, words) in enumerate(notes):
            emit(
                f'<text x="{text_x}" y="{mid + 4 + 15 * n}" font-size="12" '
                f'font-weight="{weight}" fill="{colour}">{escape(words)}</text>'
            )
        prev_lanes, prev_effects = now, s.effects
