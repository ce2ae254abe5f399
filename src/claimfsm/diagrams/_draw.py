"""State diagrams generated from a declaration: Graphviz DOT (rendered by ``dot``) and Mermaid.

Never drawn by hand: ``diagrams/`` holds what these functions produce for every declaration
in ``specs/``, and a test fails when a committed diagram drifts from its declaration.

Styles, explained by the legend drawn with every diagram:
- double outline: final (terminal, and no transition leaves it);
- orange fill: only evidence leaves it (every transition out of it compares a fact the
  caller brings: the claim's ``uncertain``);
- dashed outline: a state the lease governs (lease expiry may act on it);
- grey fill: a state a stale owner can come back to (its operation is refused and recorded);
  a state that is both this and the orange one is filled half with each (in Mermaid, grey
  with a thick orange outline);
- edges: ``event [guards]``; internal transitions (recorded, no state change) are not drawn;
- red, numbered: a counterexample's steps; blue: what a variant changed from its base.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple, Protocol

import graphviz

from claimfsm.errors import StoreError
from claimfsm.spec import Differences, Spec, TransitionKey, transition_keys

_FONT = "Helvetica"
_ORANGE, _STALE_GREY = "#f6b26b", "#d9d9d9"


def _final(spec: Spec, name: str) -> bool:
    """Drawn as final (double outline) only when nothing is drawn leaving it: ``expired`` is
    terminal for its owner, yet a stale owner's return is recorded as ``discard``."""
    return spec.states[name].terminal and not any(
        t.source == name and not t.internal for t in spec.transitions
    )


def _evidence(spec: Spec, name: str) -> bool:
    """Whether only evidence leaves ``name``: something leaves it, and every transition
    that does has a ``compare`` guard over a caller's fact (readback, fencing)."""
    out = [t for t in spec.transitions if t.source == name and not t.internal]
    return bool(out) and all(
        any(spec.guards[g].kind == "compare" and spec.guards[g].fact for g in t.guards) for t in out
    )


def _node_attrs(spec: Spec, name: str) -> dict[str, str]:
    state = spec.states[name]
    styles = ["filled"]
    attrs = {"shape": "box", "style": "", "fillcolor": "white", "peripheries": "1"}
    if name == spec.initial:
        attrs["shape"] = "oval"
    if _final(spec, name):
        attrs["peripheries"] = "2"
    evidence = _evidence(spec, name)
    if evidence:
        attrs["fillcolor"] = _ORANGE
    if state.stale:
        attrs["fillcolor"] = _STALE_GREY
    if evidence and state.stale:  # both: half each (the job's orphaned)
        attrs["fillcolor"] = f"{_ORANGE};0.5:{_STALE_GREY}"
        styles[0] = "striped" if attrs["shape"] == "box" else "wedged"
    if state.lease:
        styles.append("dashed")
    attrs["style"] = ",".join(styles)
    return attrs


class DrawnStep(Protocol):
    """A step of a path to draw (``claimfsm.checker.PathStep`` is one)."""

    @property
    def number(self) -> int: ...
    @property
    def actor(self) -> str: ...
    @property
    def to(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def event(self) -> str | None: ...
    @property
    def source(self) -> str | None: ...
    @property
    def dest(self) -> str | None: ...
    @property
    def label(self) -> str: ...
    @property
    def in_flight(self) -> tuple[int, ...]: ...
    @property
    def effects(self) -> tuple[tuple[int, int], ...]: ...


_RED = "#d62728"
_BLUE = "#1f5fbf"
_GREY = "#9e9e9e"


def to_dot(
    spec: Spec,
    path: Sequence[DrawnStep] = (),
    *,
    legend: bool = True,
    changes: Differences | None = None,
    violation: str | None = None,
) -> str:
    """The declaration as DOT text: states, guarded transitions, and (``legend``) a legend.

    With ``path``, the transitions it takes are drawn red and labelled with their step
    numbers (a counterexample on the state diagram); a step the declaration has no edge for
    is drawn as a red dashed edge of its own. With ``changes`` (a variant against its base),
    changed transitions are drawn blue and removed ones grey and dashed. ``violation``
    (what went wrong) is drawn as a red note at the state the path ends in.
    """
    taken: dict[tuple[str, str, str], list[int]] = {}
    for step in path:
        if step.event and step.source and step.dest:
            taken.setdefault((step.event, step.source, step.dest), []).append(step.number)
    changed = changes.changed if changes else frozenset()
    dropped: dict[TransitionKey, list[str]] = {}
    for e, src, d, n, guard in changes.guards_dropped if changes else ():
        dropped.setdefault((e, src, d, n), []).append(guard)
    g = graphviz.Digraph(name=spec.name, comment=f"generated from {spec.name}; do not edit")
    g.attr(
        rankdir="LR",
        fontname=_FONT,
        label=f"{spec.name}: {spec.description}",
        labelloc="t",
        nodesep="0.45",
        ranksep="0.9",
    )
    g.attr("node", fontname=_FONT, fontsize="12")
    g.attr("edge", fontname=_FONT, fontsize="10")
    for name, state in spec.states.items():
        g.node(name, label=name, tooltip=state.meaning, **_node_attrs(spec, name))
    for (key, _guards), t in zip(transition_keys(spec), spec.transitions, strict=True):
        if t.internal:
            continue
        guards = f"\n[{', '.join(t.guards)}]" if t.guards else ""
        if key in dropped:
            guards += f"\n(no longer checks {', '.join(dropped[key])})"
        # A path step names (event, source, dest): of parallel transitions, the first is drawn.
        numbers = taken.pop(key[:3], None)
        mark = "changed: " if key in changed else ""
        attrs: dict[str, str] = {}
        if key in changed:
            attrs = {"color": _BLUE, "fontcolor": _BLUE, "penwidth": "2.5"}
        if numbers is not None:
            steps = ",".join(str(n) for n in numbers)
            mark = f"({steps}) {mark}"
            attrs = {"color": _RED, "fontcolor": _RED, "penwidth": "2.5"}
        g.edge(t.source, t.dest, label=f"{mark}{t.event}{guards}", **attrs)
    for e, src, d, _n in changes.removed if changes else ():
        g.edge(
            src,
            d,
            label=f"removed: {e}",
            style="dashed",
            color=_GREY,
            fontcolor="#616161",
            constraint="false",
        )
    for (e, src, d), numbers in taken.items():  # steps the declaration has no edge for
        steps = ",".join(str(n) for n in numbers)
        g.edge(
            src,
            d,
            label=f"({steps}) {e}\nnot declared from {src}",
            color=_RED,
            fontcolor=_RED,
            penwidth="2.5",
            style="dashed",
        )
    if violation and path:
        last = next((s for s in reversed(path) if s.dest), None)
        if last is not None and last.dest is not None:
            g.node(
                "violation",
                label=f"violated after step {path[-1].number}:\n{_wrap(violation, 34)}",
                shape="note",
                color=_RED,
                fontcolor=_RED,
                fontsize="11",
            )
            g.edge(last.dest, "violation", style="dotted", color=_RED, arrowhead="none")
    if legend:
        _legend(g, spec, path, changes)
    return str(g.source)


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


#: The legend's rows, each drawn only where the diagram shows what it explains.
_LEGEND_ROWS = {
    "final": """<TR><TD><TABLE BORDER="1" CELLBORDER="1" CELLSPACING="2"><TR><TD>state</TD></TR>
</TABLE></TD><TD ALIGN="LEFT">final: nothing leaves it</TD></TR>""",
    "evidence": """<TR><TD BORDER="1" BGCOLOR="#f6b26b">state</TD>
<TD ALIGN="LEFT">only evidence leaves it</TD></TR>""",
    "lease": """<TR><TD BORDER="1" STYLE="dashed">state</TD>
<TD ALIGN="LEFT">lease expiry may act on it</TD></TR>""",
    "stale": """<TR><TD BORDER="1" BGCOLOR="#d9d9d9">state</TD>
<TD ALIGN="LEFT">a stale owner returns here</TD></TR>""",
    "step": f"""<TR><TD><FONT COLOR="{_RED}">(n) event &#8594;</FONT></TD>
<TD ALIGN="LEFT">a counterexample's step n</TD></TR>""",
    "changed": f"""<TR><TD><FONT COLOR="{_BLUE}">changed: event &#8594;</FONT></TD>
<TD ALIGN="LEFT">changed from the correct design</TD></TR>""",
    "removed": """<TR><TD><FONT COLOR="#616161">removed: event &#8594;</FONT></TD>
<TD ALIGN="LEFT">removed from the correct design</TD></TR>""",
}


def _legend(
    g: graphviz.Digraph,
    spec: Spec,
    path: Sequence[DrawnStep],
    changes: Differences | None,
) -> None:
    """One compact node: the styles this diagram uses, and what its red and blue edges
    mean; nothing it does not show."""
    shown = {
        "final": any(_final(spec, n) for n in spec.states),
        "evidence": any(_evidence(spec, n) for n in spec.states),
        "lease": any(s.lease for s in spec.states.values()),
        "stale": any(s.stale for s in spec.states.values()),
        "step": bool(path),
        "changed": bool(changes and changes.changed),
        "removed": bool(changes and changes.removed),
    }
    rows = [_LEGEND_ROWS[k] for k, on in shown.items() if on]
    if not rows:
        return
    label = (
        '<<TABLE BORDER="1" COLOR="grey" CELLBORDER="0" CELLSPACING="4" CELLPADDING="3">\n'
        '<TR><TD COLSPAN="2"><B>legend</B></TD></TR>\n' + "\n".join(rows) + "\n</TABLE>>"
    )
    g.node("legend", label=label, shape="plain", fontsize="10")


class Lanes(NamedTuple):
    """What a sequence chart calls its two fixed lifelines and what runs on the second:
    the claim protocol's store and remote (requests in flight), or a lifecycle's store and
    the executor its work runs on."""

    store: str = "claim store"
    remote: str = "remote"
    item: str = "request"  # what a bar on the remote's lifeline is
    doing: str = "in flight"  # what it is doing while the bar lasts
    ends: str = "ends: no new effect"  # said when it stops without an effect
    effect: str = "draft"  # whose effect a mark on the remote's lifeline is


CLAIM_LANES = Lanes()


def lifecycle_lanes(word: str, remote: bool) -> Lanes:
    """A lifecycle's lifelines: its store (``word``: what an entity is called) and the
    executor its work runs on, or the remote its requests go to, where it declares one."""
    if remote:
        return Lanes(f"{word} store", "remote", effect=word)
    return Lanes(f"{word} store", "executor", "work", "running", "ends")


def sequence_mermaid(steps: Sequence[DrawnStep], title: str, lanes: Lanes = CLAIM_LANES) -> str:
    """A Mermaid sequence chart of a path: workers, the store and the remote."""
    actors = sorted(
        {s.actor for s in steps if s.actor.startswith("worker")}
        | {s.to for s in steps if s.to.startswith("worker")}
    )
    lines = ["sequenceDiagram", f"    title {title}"]
    for name in actors:
        lines.append(f"    participant {name.replace(' ', '')} as {name}")
    lines += [
        f"    participant store as {lanes.store}",
        f"    participant remote as {lanes.remote}",
    ]
    for s in steps:
        text = f"{s.number}. {s.text}".replace(";", ",").replace("#", "")
        if s.event and s.source and s.dest and s.source != s.dest:
            text += f" ({s.source} to {s.dest})"
        src, dst = s.actor.replace(" ", ""), s.to.replace(" ", "")
        if src in ("clock", "author") or (src == dst == "store"):
            lines.append(f"    Note over store: {text}")
        else:
            lines.append(f"    {src}->>{dst}: {text}")
    return "\n".join(lines) + "\n"


def to_mermaid(spec: Spec) -> str:
    """The declaration as Mermaid ``stateDiagram-v2`` text (GitHub renders it)."""
    lines = ["stateDiagram-v2", f"    %% generated from {spec.name}; do not edit"]
    lines.append(f"    [*] --> {spec.initial}")
    for t in spec.transitions:
        if t.internal:
            continue
        guards = f" [{', '.join(t.guards)}]" if t.guards else ""
        lines.append(f"    {t.source} --> {t.dest} : {t.event}{guards}")
    for name in spec.states:
        if _final(spec, name):
            lines.append(f"    {name} --> [*]")
    lines.append("    classDef evidence fill:#f6b26b")
    lines.append("    classDef lease stroke-dasharray: 5 5")
    lines.append("    classDef stale fill:#d9d9d9")
    evidence = [n for n in spec.states if _evidence(spec, n)]
    lease = [n for n, s in spec.states.items() if s.lease]
    stale = [n for n, s in spec.states.items() if s.stale]
    if set(evidence) & set(stale):
        lines.append("    classDef evidence_stale fill:#d9d9d9,stroke:#f6b26b,stroke-width:4px")
    lines += [f"    class {name} evidence" for name in evidence if name not in stale]
    lines += [f"    class {name} lease" for name in lease]
    lines += [
        f"    class {name} {'evidence_stale' if name in evidence else 'stale'}" for name in stale
    ]
    return "\n".join(lines) + "\n"


def render(dot_source: str, fmt: str) -> bytes:
    """Render DOT with Graphviz's ``dot`` (``svg`` or ``png``)."""
    try:
        return bytes(graphviz.Source(dot_source).pipe(format=fmt))
    except graphviz.ExecutableNotFound as exc:
        raise GraphvizMissing(
            "SVG and PNG need Graphviz's 'dot' program, which is not installed (Debian: "
            "apt-get install graphviz; macOS: brew install graphviz)"
        ) from exc


class GraphvizMissing(StoreError):
    """Graphviz's ``dot`` is not installed; only the text formats could be written."""


def write_diagrams(spec: Spec, out: Path, *, images: bool = True) -> list[Path]:
    """Write ``NAME.dot`` and ``NAME.mmd`` (and ``.svg``/``.png`` with Graphviz) into ``out``.

    Raises :class:`GraphvizMissing` after writing the text formats if ``dot`` is missing
    (its message then says they were written).
    """
    out.mkdir(parents=True, exist_ok=True)
    dot = to_dot(spec)
    written = []
    for suffix, text in (("dot", dot), ("mmd", to_mermaid(spec))):
        path = out / f"{spec.name}.{suffix}"
        path.write_text(text, encoding="utf-8")
        written.append(path)
    if images:
        for fmt in ("svg", "png"):
            path = out / f"{spec.name}.{fmt}"
            try:
                path.write_bytes(render(dot, fmt))
            except GraphvizMissing as exc:
                raise GraphvizMissing(
                    f"{exc}; the DOT and Mermaid files were written: "
                    + ", ".join(str(p) for p in written)
                ) from exc
            written.append(path)
    return written
