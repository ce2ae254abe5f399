"""Copies of claim.toml and its wrong designs with every state, event and guard renamed.

Shared by the tests that show renaming changes nothing: to the checker and the diagrams
(test_renamed.py), to the stores (test_agreement.py) and to the CLI's replays and report.
"""

from __future__ import annotations

import re
from pathlib import Path

from claimfsm.spec import claim_spec, declarations_dir

WRONG = sorted(p.stem for p in (declarations_dir() / "wrong").glob("*.toml"))


def names() -> dict[str, str]:
    """Every state, event and guard of claim.toml -> a new name that shares no word with it."""
    spec = claim_spec()
    found: dict[str, str] = {}
    for prefix, group in (("q", spec.states), ("x", spec.events), ("g", spec.guards)):
        for i, name in enumerate(group):
            found[name] = f"{prefix}{i}_{name[::-1]}"  # e.g. reserved -> q1_devreser
    return found


def rename(text: str, table: dict[str, str]) -> str:
    """Whole words renamed, but not a guard's ``fact`` (``remote_dedups`` is both a guard's
    name and the fact it reads: the fact is the caller's word, not the declaration's)."""
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, table)) + r")\b")
    return "".join(
        line if line.lstrip().startswith("fact =") else pattern.sub(lambda m: table[m[1]], line)
        for line in text.splitlines(keepends=True)
    )


def back(text: str, table: dict[str, str]) -> str:
    """``text`` in claim.toml's names again."""
    return rename(text, {new: old for old, new in table.items()})


def write_renamed(root: Path) -> Path:
    """claim.toml and wrong/*.toml, renamed, under ``root`` in the same layout (so the
    variants' bases still resolve); the renamed claim.toml's path."""
    (root / "wrong").mkdir(parents=True, exist_ok=True)
    table = names()
    source = declarations_dir()
    (root / "claim.toml").write_text(rename((source / "claim.toml").read_text(), table))
    for design in WRONG:
        text = (source / "wrong" / f"{design}.toml").read_text()
        (root / "wrong" / f"{design}.toml").write_text(rename(text, table))
    return root / "claim.toml"
