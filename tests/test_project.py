"""The project as a newcomer meets it: the layout comment and the README's layout block name
exactly the packages there are, and ``make test -q`` says what it skips and why."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import claimfsm

ROOT = Path(__file__).parent.parent
PACKAGE = Path(claimfsm.__file__).parent
PACKAGES = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())


def test_the_layout_comment_in_init_names_every_package() -> None:
    doc = claimfsm.__doc__ or ""
    block = doc.split("::", 1)[1].split("\n\n", 2)[1]
    named = [line.split()[0] for line in block.splitlines() if line[:5].strip()]
    assert sorted(named) == PACKAGES


def test_the_readme_layout_block_names_every_package() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Layout", 1)[1].split("```", 2)[1]
    named = re.findall(r"^  (\w+)/", block, flags=re.M)
    assert sorted(named) == PACKAGES
    for top in re.findall(r"^([\w.]+[/\w.]*)\s", block, flags=re.M):
        assert (ROOT / top.rstrip("/")).exists(), top


def test_quiet_runs_say_what_they_skip_one_line_per_missing_component(tmp_path: Path) -> None:
    """Without PostgreSQL, PgBouncer, Graphviz, Chromium and SPIN, ``pytest -q`` (as ``make
    test`` runs it) prints one line for each, before any test runs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLAIMFSM_")}
    env["PATH"] = str(Path(sys.executable).parent)  # no dot, no chromium, no spin on it
    env["CLAIMFSM_PG_URL"] = "postgresql://nobody@127.0.0.1:1/none"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--co",
         "tests/test_spec.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    lines = [line for line in result.stdout.splitlines() if line.startswith("claimfsm:")]
    assert len(lines) == 5, result.stdout
    assert "PostgreSQL tests SKIPPED" in lines[0] and "CLAIMFSM_PG_URL" in lines[0]
    assert "PgBouncer" in lines[1] and "SKIPPED" in lines[1]
    assert "Graphviz" in lines[2] and "SKIPPED" in lines[2]
    assert "Chromium" in lines[3] and "SKIPPED" in lines[3]
    assert "--engine spin" in lines[4] and "apt-get install spin gcc" in lines[4]


def test_a_test_that_writes_into_the_checkout_fails_the_run(tmp_path: Path) -> None:
    stray = ROOT / f"stray-{os.getpid()}.txt"
    test = tmp_path / "test_stray.py"
    test.write_text(f"def test_writes():\n    open({str(stray)!r}, 'w').close()\n")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "-p", "tests.conftest", str(test)],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        stray.unlink(missing_ok=True)
    assert result.returncode == 1, result.stdout
    assert "changed the working tree" in result.stdout and stray.name in result.stdout


def test_the_design_document_is_in_the_repository_and_everything_cites_it() -> None:
    from claimfsm.spec import designs

    design = (ROOT / "docs" / "design.md").read_text()
    for section in ("## The problem", "## What we promise, in three tiers", "## Invariants",
                    "## The known-wrong designs", "## Alternatives we rejected"):  # fmt: skip
        assert section in design, section
    for tier in ("(plain)", "(dedup)", "(fencing)"):
        assert tier in design, tier
    for name in designs():  # every known-wrong design is explained there, by name
        assert f"(`{name}`)" in design, name
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.split()
    citing = [
        f
        for f in tracked
        if (ROOT / f).is_file()
        and f.endswith((".md", ".py", ".toml", ".dot", ".mmd", ".svg"))
        and "PROTOCOL.md" in (ROOT / f).read_text(errors="replace")
        and f != "tests/test_project.py"
    ]
    assert citing == [], "cite docs/design.md, a page every clone has"
    assert "docs/design.md" in (ROOT / "specs" / "claim.toml").read_text()


def test_the_readme_describes_no_finished_work_as_open() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "open issue" not in readme and "## Not yet" not in readme


def test_the_declaration_format_page_lists_exactly_the_loaders_keys() -> None:
    from claimfsm.spec import _load

    page = (ROOT / "docs" / "declarations.md").read_text()
    sections = dict(re.findall(r"^## (.+?)\n(.*?)(?=^## |\Z)", page, flags=re.S | re.M))

    def keys(title: str) -> set[str]:
        rows = re.findall(r"^\| `\[*([a-z_]+)(?:\.NAME)?\]*` \|", sections[title], flags=re.M)
        return set(rows)

    assert keys("Top level") == _load._TOP_KEYS
    assert keys("`[states.NAME]`") == _load._STATE_KEYS
    guards, _, kinds = sections["`[guards.NAME]`"].partition("### Guard kinds")
    sections["`[guards.NAME]`"], sections["kinds"] = guards, kinds
    assert keys("`[guards.NAME]`") == _load._GUARD_KEYS
    assert keys("kinds") == set(_load.GUARD_KINDS)
    assert keys("`[[transitions]]`") == _load._TRANSITION_KEYS
    assert keys("`[events.NAME]`") == _load._EVENT_KEYS
    assert keys('Variants: `base = "..."`') == _load._OVERLAY_KEYS
    from claimfsm.spec import _invariants, _roles

    assert keys("`[columns.NAME]`") == _roles.COLUMN_KEYS
    invariants, _, kinds = sections["`[invariants.NAME]`"].partition("### Invariant kinds")
    sections["`[invariants.NAME]`"], sections["inv kinds"] = invariants, kinds
    assert keys("`[invariants.NAME]`") == _invariants.INVARIANT_KEYS
    assert keys("inv kinds") == set(_invariants.INVARIANT_KINDS)
    assert keys("`[world]`") == set(_roles.WORLD_OPTIONS)
    assert keys("`[drafts]`") == _load._DRAFTS_KEYS
    assert keys("`[lease]`") == _load._LEASE_KEYS
    for option in _load.RETIRED_MODEL_OPTIONS:
        assert f"`{option}`" in sections['Variants: `base = "..."`']


def test_every_test_that_restarts_the_server_or_cuts_a_link_runs_alone() -> None:
    """.ci/run runs the slow suite on both cores but for the tests marked ``serial``: a
    test that restarts the shared PostgreSQL server (``local_restart_command``) or cuts a
    host's link (``_netns``) would break the tests running beside it, so it must be
    marked, and the CI script must run the marked ones by themselves."""
    import ast

    unmarked, marked = [], 0
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        if path.name == Path(__file__).name:  # this test names them, and is none of them
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
                continue
            body = ast.unparse(node)
            if "local_restart_command()" not in body and "_netns.IsolatedHost" not in body:
                continue
            serial = any("mark.serial" in ast.unparse(d) for d in node.decorator_list)
            marked += serial
            if not serial:
                unmarked.append(f"{path.name}::{node.name}")
    assert unmarked == [] and marked >= 3
    ci = (ROOT / ".ci" / "run").read_text()
    assert '-m "slow and not serial" -n 2' in ci and '-m "slow and serial"\n' in ci
