"""State diagrams generated from a declaration (depends only on ``claimfsm.spec``)."""

from claimfsm.diagrams._draw import GraphvizMissing, render, to_dot, to_mermaid, write_diagrams

__all__ = ["GraphvizMissing", "render", "to_dot", "to_mermaid", "write_diagrams"]
