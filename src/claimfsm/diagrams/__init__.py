"""State diagrams generated from a declaration (depends only on ``claimfsm.spec``)."""

from claimfsm.diagrams._draw import (
    DrawnStep,
    GraphvizMissing,
    render,
    sequence_mermaid,
    to_dot,
    to_mermaid,
    write_diagrams,
)

__all__ = [
    "DrawnStep",
    "GraphvizMissing",
    "render",
    "sequence_mermaid",
    "to_dot",
    "to_mermaid",
    "write_diagrams",
]
