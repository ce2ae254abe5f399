"""The demonstration behind ``claimfsm demo`` (and the README's first command)."""

from claimfsm.demo._run import DemoConfig, DemoSummary, run_demo

__all__ = ["DemoConfig", "DemoSummary", "run_demo"]
