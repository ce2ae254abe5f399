"""The design-review report: one self-contained page, checked as text and in a real browser."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from claimfsm.cli import main
from claimfsm.spec import claim_spec, designs, event_rows

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
            assert '<svg xmlns="http://www.w3.org/2000/svg" class="sequence"' in (section.group(1))
            assert "sequenceDiagram" not in section.group(1)
        assert "How it differs from <code>claim</code>" in section.group(1)
        assert "legend" not in section.group(1)  # the legend is drawn once, at the top


def _chromium() -> str | None:
    found = chromium()
    if found is None and os.environ.get("CLAIMFSM_REQUIRE_CHROMIUM") == "1":
        pytest.fail("Chromium is required (CLAIMFSM_REQUIRE_CHROMIUM=1) but not installed")
    return found


#: Run in a copy of the report (the report itself has no script): measures what rendered.
_MEASURE = """<script>
window.addEventListener('load', () => {
  const out = {labels: [], sequenceCharts: 0, mermaidText: 0, overflowing: [], pageWidth: 0};
  const inScroller = el => el.closest('.diagram') !== null;
  for (const t of document.querySelectorAll('g.edge text, svg.sequence text')) {
    const r = t.getBoundingClientRect();
    if (r.width > 0) out.labels.push([Math.round(r.height * 10) / 10, t.textContent]);
  }
  for (const section of document.querySelectorAll('section.design')) {
    out.sequenceCharts += section.querySelectorAll('svg.sequence').length;
    out.mermaidText += (section.textContent.match(/sequenceDiagram/g) || []).length;
  }
  const width = document.documentElement.clientWidth;
  out.pageWidth = document.documentElement.scrollWidth - width;
  for (const el of document.body.querySelectorAll('*')) {
    if (inScroller(el)) continue;
    const r = el.getBoundingClientRect();
    if (r.right > width + 1) out.overflowing.push(el.tagName + ' ' + el.className);
  }
  const pre = document.createElement('pre');
  pre.id = 'measured';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def test_the_report_and_spec_show_the_same_events_table(report_file: Path) -> None:
    """Both read one table (``spec.event_rows``): who takes each event, its work, its
    remote role and what it writes, with the durable commits said."""
    spec = claim_spec()
    header, rows = event_rows(spec)
    assert header == ("event", "by", "work", "remote", "writes")
    written = {row[0]: row[-1] for row in rows}
    assert written["begin_send"] == "(durable)" and written["renew"] == "lease"
    assert written["acquire"] == "lapse first, lease"
    assert written["retry"] == "owner, fresh_token, lease (durable)"
    table = re.search(r"<table id='events'>(.*?)</table>", report_file.read_text(), re.S)
    assert table is not None
    cells = [
        tuple(
            html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<t[dh]>(.*?)</t[dh]>", r)
        )
        for r in re.findall(r"<tr>(.*?)</tr>", table.group(1))
    ]
    assert cells == [header, *rows]
    printed = CliRunner(env={"COLUMNS": "200"}).invoke(main, ["spec", "claim"]).output
    for row in rows:
        assert re.search(r"[\s│]+".join(re.escape(c) for c in row), printed), row


def test_report_renders_legibly_in_headless_chromium(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """As a reviewer sees it: every edge label and sequence-chart text at least 10 px tall
    as rendered, the sequence charts drawn as SVG (not Mermaid text), and nothing wider
    than the page (wide drawings scroll inside their own frame)."""
    chromium = _chromium()  # before the report: a missing browser is named as such
    if chromium is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium)")
    report_file: Path = request.getfixturevalue("report_file")
    measured_page = tmp_path / "measured.html"
    measured_page.write_text(report_file.read_text().replace("</body>", _MEASURE + "</body>"))
    base = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(
        [*base, "--window-size=1300,2400", "--virtual-time-budget=10000", "--dump-dom",
         measured_page.as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    for state in claim_spec().states:  # the browser parsed the inline state diagram
        assert re.search(rf'<g id="node\d+" class="node">\s*<title>{state}</title>', dom), state
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S)
    assert found, "the measuring script did not run"
    measured = json.loads(html.unescape(found.group(1)))
    heights = [h for h, _ in measured["labels"]]
    assert len(heights) > 200
    small = [(h, text) for h, text in measured["labels"] if h < 10]
    assert not small, small[:5]
    with_path = [n for n in designs() if n != "partial_unique_index"]
    assert measured["sequenceCharts"] == len(with_path) and measured["mermaidText"] == 0
    assert measured["pageWidth"] <= 0 and measured["overflowing"] == []
    shot = tmp_path / "review.png"
    subprocess.run(
        [*base, "--window-size=1300,2400", f"--screenshot={shot}", report_file.as_uri()],
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


def test_without_graphviz_the_report_says_what_is_true(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # no dot on it
    out = tmp_path / "review.html"
    result = CliRunner().invoke(main, ["report", "--out", str(out), "--workers", "2"])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert "were written" not in page
    assert "This drawing is missing" in page and "not installed" in page
    assert "Nothing was written to disk" in page and "DOT source" in page
    assert list(tmp_path.iterdir()) == [out]  # and indeed nothing else was written
    # The sequence charts need no Graphviz: they are still drawn.
    assert page.count('class="sequence"') == len(designs()) - 1
    diagram = CliRunner().invoke(
        main, ["diagram", "--design", "claim", "--out", str(tmp_path / "d")]
    )
    assert "the DOT and Mermaid files were written" in diagram.output
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["claim.dot", "claim.mmd"]
