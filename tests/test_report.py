"""The design-review report: one self-contained page, checked as text and in a real browser."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from claimfsm.cli import main
from claimfsm.spec import claim_spec, designs

from .conftest import chromium, needs_dot

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def report_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    needs_dot()  # the report inlines the rendered diagrams
    out = tmp_path_factory.mktemp("report") / "review.html"
    result = CliRunner().invoke(main, ["report", "--out", str(out), "--workers", "2"])
    assert result.exit_code == 0, result.output
    return out


def test_report_holds_every_part_and_needs_no_network(report_file: Path) -> None:
    page = report_file.read_text()
    assert "<script" not in page and "<link" not in page and " src=" not in page
    for table in ("states", "guards", "transitions"):
        assert f"id='{table}'" in page
    for state in claim_spec().states:
        assert f"<title>{state}</title>" in page  # the inline SVG has every state node
    assert "id='verdict'>ok<" in page and "claimfsm 0.1.0" in page
    for name in designs():
        section = re.search(
            rf"<section class='design' id='design-{name}'>(.*?)</section>", page, re.S
        )
        assert section, name
        assert ">violated<" in section.group(1)
        if name != "partial_unique_index":  # the rest have a path: steps, drawing, sequence
            assert "<table class='steps'>" in section.group(1)
            assert "color=" not in section.group(1) and "<svg" in section.group(1)
            assert "sequenceDiagram" in section.group(1)


def _chromium() -> str | None:
    found = chromium()
    if found is None and os.environ.get("CLAIMFSM_REQUIRE_CHROMIUM") == "1":
        pytest.fail("Chromium is required (CLAIMFSM_REQUIRE_CHROMIUM=1) but not installed")
    return found


def test_report_renders_in_headless_chromium(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    chromium = _chromium()  # before the report: a missing browser is named as such
    if chromium is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium)")
    report_file: Path = request.getfixturevalue("report_file")
    base = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    url = report_file.as_uri()
    dom = subprocess.run(
        [*base, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    # What the browser parsed: the diagram's state nodes and a section per wrong design.
    for state in claim_spec().states:
        assert re.search(rf'<g id="node\d+" class="node">\s*<title>{state}</title>', dom), state
    for name in designs():
        assert f'id="design-{name}"' in dom
    assert dom.count("<svg") >= 1 + len(designs()) - 1
    shot = tmp_path / "review.png"
    subprocess.run(
        [*base, "--window-size=1300,2400", f"--screenshot={shot}", url],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


def test_review_depends_on_checker_diagrams_and_spec_only() -> None:
    import ast

    import claimfsm

    for f in (Path(claimfsm.__file__).parent / "review").rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("claimfsm"):
                layer = (node.module or "").split(".")[1]
                assert layer in ("spec", "errors", "checker", "diagrams", "review"), node.module
