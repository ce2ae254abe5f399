"""The command-line face of claimfsm (nothing imports it)."""

from claimfsm.cli import _campaign  # noqa: F401  (registers `claimfsm campaign`)
from claimfsm.cli._main import main

__all__ = ["main"]
