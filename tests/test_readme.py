"""Every command the README shows runs, and its Python example works as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import drop_schema, needs_spin, pg_schema_url

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```(sh|python)\n(.*?)```", README, flags=re.S)
#: Files the README asks the reader to save (a ```toml block whose first line names it).
FILES = re.findall(r"```toml\n# (\S+\.toml)\n(.*?)```", README, flags=re.S)
#: Commands run elsewhere, with the reason.
ELSEWHERE = {
    "make test": "it is the command that runs this test (.ci/run calls it)",
    "make bench": ".ci/run runs it; it takes minutes (4 min 26 s on 2026-12-07, a quiet machine)",
}


def shell_commands() -> list[tuple[str, int]]:
    """Each command with the exit status it must have (1 or 3 where its comment says
    "exit 1" or "exit 3")."""
    commands = []
    for kind, body in BLOCKS:
        if kind != "sh":
            continue
        for line in body.splitlines():
            command, _, comment = line.partition("#")
            command = command.strip()
            if command and not command.startswith(". ") and command not in ELSEWHERE:
                status = 1 if "exit 1" in comment else 3 if "exit 3" in comment else 0
                commands.append((command, status))
    return commands


def test_readme_shows_the_two_commands_first() -> None:
    kind, first = BLOCKS[0]
    assert kind == "sh"
    assert [line.split("#")[0].strip() for line in first.splitlines()] == ["make demo", "make test"]


@pytest.fixture(scope="module")
def readme_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One directory for all the README's commands, in order (``claims`` reads what ``demo``
    wrote), and never the checkout: a user's own demo.sqlite there stays untouched. The
    files the README asks the reader to save are there, as a reader would save them."""
    folder = tmp_path_factory.mktemp("readme")
    for name, text in FILES:
        (folder / name).write_text(f"# {name}\n{text}", encoding="utf-8")
    return folder


def test_the_readme_tutorial_saves_its_declarations() -> None:
    assert [name for name, _ in FILES] == [
        "deploy.toml",
        "hasty.toml",
        "charge.toml",
        "unfenced.toml",
    ]


#: In order: each may read what an earlier one wrote (``make test`` runs on several
#: workers with ``--dist loadfile``, so one worker runs this file's tests, in order).
@pytest.mark.parametrize(("command", "status"), shell_commands())
def test_readme_command_runs(command: str, status: int, readme_dir: Path) -> None:
    if "--engine spin" in command:
        needs_spin()  # SPIN and a C compiler: skipped without them, except in CI
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["COLUMNS"] = "120"
    if command.startswith("make "):  # the checkout's Makefile, run from the temporary directory
        command = f"make -f {ROOT / 'Makefile'} {command[5:]}"
    result = subprocess.run(
        command, shell=True, cwd=readme_dir, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == status, result.stdout[-2000:] + result.stderr[-2000:]


PYTHON = [body for kind, body in BLOCKS if kind == "python"]
README_PG_URL = "postgresql://app@db.internal:5432/app?schema=claimfsm"


@pytest.mark.parametrize("code", PYTHON, ids=[f"example-{i + 1}" for i in range(len(PYTHON))])
def test_readme_python_example_runs(
    code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    monkeypatch.chdir(tmp_path)
    schema = None
    if README_PG_URL in code:  # run it against the test database instead of the example host
        database = request.getfixturevalue("pg_database")
        schema, url = pg_schema_url(database)
        code = code.replace(README_PG_URL, url)
    try:
        exec(compile(code, "README.md", "exec"), {})
    finally:
        if schema is not None:
            drop_schema(database, schema)
    if schema is None:  # each SQLite file the example names, it wrote
        named = re.findall(r"sqlite:///([\w.-]+\.sqlite)", code)
        assert named and all((tmp_path / name).exists() for name in named), named
