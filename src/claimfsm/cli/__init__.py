"""The command-line face of claimfsm (nothing imports it)."""

from claimfsm.cli._main import main

__all__ = ["main"]
