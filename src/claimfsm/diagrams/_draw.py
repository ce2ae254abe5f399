"""State diagrams generated from a declaration: Graphviz DOT (rendered by ``dot``) and Mermaid.

Never drawn by hand: ``diagrams/`` holds what these functions produce for every declaration
in ``specs/``, and a test fails when a committed diagram drifts from its declaration.

Styles, explained by the legend drawn with every diagram:
- double outline: terminal (no owner operation leaves it);
- orange fill: ``uncertain`` (only evidence leaves it);
- dashed outline: a state the lease governs (lease expiry may act on it);
- grey fill: a state a stale owner can come back to (its operation is refused and recorded);
- edges: ``event [guards]``; internal transitions (recorded, no state change) are not drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import graphviz

from claimfsm.errors import StoreError
from claimfsm.spec import Spec

_FONT = "Helvetica"


def _node_attrs(spec: Spec, name: str) -> dict[str, str]:
    state = spec.states[name]
    styles = ["filled"]
    attrs = {"shape": "box", "style": "", "fillcolor": "white", "peripheries": "1"}
    if name == spec.initial:
        attrs["shape"] = "oval"
    if state.terminal:
        attrs["peripheries"] = "2"
    if name == "uncertain":
        attrs["fillcolor"] = "#f6b26b"
    if state.stale:
        attrs["fillcolor"] = "#d9d9d9"
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


def to_dot(spec: Spec, path: Sequence[DrawnStep] = ()) -> str:
    """The declaration as DOT text: states, guarded transitions, and a legend.

    With ``path``, the transitions it takes are drawn red and labelled with their step
    numbers (a counterexample on the state diagram).
    """
    taken: dict[tuple[str, str, str], list[int]] = {}
    for step in path:
        if step.event and step.source and step.dest:
            taken.setdefault((step.event, step.source, step.dest), []).append(step.number)
    g = graphviz.Digraph(name=spec.name, comment=f"generated from {spec.name}; do not edit")
    g.attr(rankdir="LR", fontname=_FONT, label=f"{spec.name}: {spec.description}", labelloc="t")
    g.attr("node", fontname=_FONT, fontsize="11")
    g.attr("edge", fontname=_FONT, fontsize="9")
    for name, state in spec.states.items():
        g.node(name, label=name, tooltip=state.meaning, **_node_attrs(spec, name))
    for t in spec.transitions:
        if t.internal:
            continue
        guards = f"\n[{', '.join(t.guards)}]" if t.guards else ""
        numbers = taken.pop((t.event, t.source, t.dest), None)
        if numbers is None:
            g.edge(t.source, t.dest, label=f"{t.event}{guards}")
        else:
            steps = ",".join(str(n) for n in numbers)
            g.edge(
                t.source,
                t.dest,
                label=f"({steps}) {t.event}{guards}",
                color="red",
                fontcolor="red",
                penwidth="2.5",
            )
    with g.subgraph(name="cluster_legend") as legend:
        legend.attr(label="legend", fontsize="10", style="rounded", color="grey")
        legend.node("legend_terminal", "terminal", shape="box", peripheries="2", fontsize="9")
        legend.node(
            "legend_uncertain",
            "only evidence leaves",
            shape="box",
            style="filled",
            fillcolor="#f6b26b",
            fontsize="9",
        )
        legend.node(
            "legend_lease", "lease expiry may act", shape="box", style="dashed", fontsize="9"
        )
        legend.node(
            "legend_stale",
            "stale owner returns here",
            shape="box",
            style="filled",
            fillcolor="#d9d9d9",
            fontsize="9",
        )
        legend.edge("legend_terminal", "legend_uncertain", style="invis")
        legend.edge("legend_uncertain", "legend_lease", style="invis")
        legend.edge("legend_lease", "legend_stale", style="invis")
    return str(g.source)


def sequence_mermaid(steps: Sequence[DrawnStep], title: str) -> str:
    """A Mermaid sequence chart of a path: workers, the claim store and the remote."""
    actors = sorted(
        {s.actor for s in steps if s.actor.startswith("worker")}
        | {s.to for s in steps if s.to.startswith("worker")}
    )
    lines = ["sequenceDiagram", f"    title {title}"]
    for name in actors:
        lines.append(f"    participant {name.replace(' ', '')} as {name}")
    lines += ["    participant store as claim store", "    participant remote as remote"]
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
    for name, state in spec.states.items():
        if state.terminal:
            lines.append(f"    {name} --> [*]")
    lines.append("    classDef uncertain fill:#f6b26b")
    lines.append("    classDef lease stroke-dasharray: 5 5")
    lines.append("    classDef stale fill:#d9d9d9")
    if "uncertain" in spec.states:
        lines.append("    class uncertain uncertain")
    lease = [n for n, s in spec.states.items() if s.lease]
    stale = [n for n, s in spec.states.items() if s.stale]
    lines += [f"    class {name} lease" for name in lease]
    lines += [f"    class {name} stale" for name in stale]
    return "\n".join(lines) + "\n"


def render(dot_source: str, fmt: str) -> bytes:
    """Render DOT with Graphviz's ``dot`` (``svg`` or ``png``)."""
    try:
        return bytes(graphviz.Source(dot_source).pipe(format=fmt))
    except graphviz.ExecutableNotFound as exc:
        raise GraphvizMissing(
            "SVG and PNG need Graphviz's 'dot' program (Debian: apt-get install graphviz; "
            "macOS: brew install graphviz); the DOT and Mermaid files were written"
        ) from exc


class GraphvizMissing(StoreError):
    """Graphviz's ``dot`` is not installed; only the text formats could be written."""


def write_diagrams(spec: Spec, out: Path, *, images: bool = True) -> list[Path]:
    """Write ``NAME.dot`` and ``NAME.mmd`` (and ``.svg``/``.png`` with Graphviz) into ``out``.

    Raises :class:`GraphvizMissing` after writing the text formats if ``dot`` is missing.
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
            path.write_bytes(render(dot, fmt))
            written.append(path)
    return written
