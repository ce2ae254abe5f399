"""State diagrams generated from a declaration (depends only on ``claimfsm.spec``)."""

from claimfsm.diagrams._draw import (
    CLAIM_LANES,
    DrawnStep,
    GraphvizMissing,
    Lanes,
    lifecycle_lanes,
    render,
    sequence_mermaid,
    to_dot,
    to_mermaid,
    write_diagrams,
)
from claimfsm.diagrams._sequence import sequence_svg

__all__ = [
    "CLAIM_LANES",
    "DrawnStep",
    "GraphvizMissing",
    "Lanes",
    "lifecycle_lanes",
    "render",
    "sequence_mermaid",
    "sequence_svg",
    "to_dot",
    "to_mermaid",
    "write_diagrams",
]
