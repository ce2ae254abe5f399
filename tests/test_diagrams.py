"""Diagrams are generated from the declarations and never drift from them."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from claimfsm.cli import main
from claimfsm.diagrams import render, to_dot, to_mermaid
from claimfsm.spec import claim_spec, designs, shipped

from .conftest import needs_dot

ROOT = Path(__file__).parent.parent
RED, BLUE = "#d62728", "#1f5fbf"  # a counterexample's path; a variant's changes
ALL = shipped()


@pytest.mark.parametrize("name", sorted(ALL))
def test_committed_diagrams_match_their_declaration(name: str) -> None:
    spec = ALL[name]
    committed = ROOT / "diagrams"
    assert (committed / f"{name}.dot").read_text() == to_dot(spec), (
        f"diagrams/{name}.dot drifted from its declaration: run `make diagrams`"
    )
    assert (committed / f"{name}.mmd").read_text() == to_mermaid(spec), (
        f"diagrams/{name}.mmd drifted from its declaration: run `make diagrams`"
    )
    assert (committed / f"{name}.svg").exists() and (committed / f"{name}.png").exists()


def test_the_readme_shows_the_generated_mermaid() -> None:
    readme = (ROOT / "README.md").read_text()
    (block,) = re.findall(r"```mermaid\n(.*?)```", readme, flags=re.S)
    assert block == to_mermaid(claim_spec())


def test_edges_carry_event_and_guards_and_styles_mark_the_states() -> None:
    spec = claim_spec()
    dot = to_dot(spec)
    for t in spec.transitions:
        if not t.internal:
            assert f"{t.event}\n[{', '.join(t.guards)}]" in dot or not t.guards
    assert re.search(r"uncertain \[[^\]]*fillcolor=\"#f6b26b\"", dot)
    for name in ("reserved", "sending"):  # the lease governs them: dashed
        assert re.search(rf"\b{name} \[[^\]]*style=\"filled,dashed\"", dot)
    for name in ("confirmed", "reconciled", "released", "discarded"):
        assert re.search(rf"\b{name} \[[^\]]*peripheries=2", dot)
    assert re.search(r"\blegend \[label=<<TABLE", dot) and "final: nothing leaves it" in dot
    mermaid = to_mermaid(spec)
    assert mermaid.startswith("stateDiagram-v2\n") and "class uncertain evidence" in mermaid


def test_rendered_svg_has_every_state(tmp_path: Path) -> None:
    needs_dot()
    svg = render(to_dot(claim_spec()), "svg").decode()
    for state in claim_spec().states:
        assert f"<title>{state}</title>" in svg


def test_without_graphviz_the_text_is_written_and_the_reason_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no dot on the PATH
    result = CliRunner().invoke(main, ["diagram", "--design", "claim", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "need Graphviz" in result.stderr and "Traceback" not in result.output
    assert (tmp_path / "claim.dot").exists() and (tmp_path / "claim.mmd").exists()
    assert not (tmp_path / "claim.svg").exists()


def test_diagram_cli_writes_every_format(tmp_path: Path) -> None:
    needs_dot()
    result = CliRunner().invoke(main, ["diagram", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for name in ALL:
        for suffix in ("dot", "mmd", "svg", "png"):
            assert (tmp_path / f"{name}.{suffix}").stat().st_size > 0
    assert CliRunner().invoke(main, ["diagram", "--design", "nope"]).exit_code == 2


def test_diagrams_depend_only_on_the_declaration() -> None:
    import ast

    import claimfsm

    for f in (Path(claimfsm.__file__).parent / "diagrams").rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("claimfsm")
            ):
                assert node.module.split(".")[1] in ("spec", "errors", "diagrams"), node.module


def test_counterexamples_are_drawn_on_the_diagram_and_as_sequence_charts(tmp_path: Path) -> None:
    needs_dot()
    from claimfsm.checker import Checker, ClaimModelConfig, claim_model, path_steps

    for name, spec in designs().items():
        result = CliRunner().invoke(
            main, ["check", "--design", name, "--workers", "2", "--diagram", str(tmp_path)]
        )
        assert result.exit_code == 1, result.output
        report = (
            Checker(claim_model(spec, ClaimModelConfig(workers=2)))
            .symmetry()
            .stop_on_violation()
            .run()
        )
        for prop in report.violations:
            found = report.discoveries.get(prop.name)
            if found is None:  # a sometimes-property never met (partial_unique_index): no path
                assert not list(tmp_path.glob(f"{name}-{prop.name}*"))
                continue
            steps = path_steps(spec, report.model, found.path)
            dot = (tmp_path / f"{name}-{prop.name}.dot").read_text()
            sequence = (tmp_path / f"{name}-{prop.name}-sequence.mmd").read_text()
            chart = (tmp_path / f"{name}-{prop.name}-sequence.svg").read_text()
            assert chart.startswith("<svg") and all(f">{s.number}. " in chart for s in steps)
            assert (tmp_path / f"{name}-{prop.name}.svg").stat().st_size > 0
            assert sequence.startswith("sequenceDiagram")
            assert len(sequence.splitlines()) == 2 + len(
                {s.actor for s in steps if s.actor.startswith("worker")}
                | {s.to for s in steps if s.to.startswith("worker")}
            ) + 2 + len(steps)
            for s in steps:  # every state change the path makes is drawn red, numbered
                if s.event and s.source != s.dest:
                    red_edge = (
                        rf'{s.source} -> {s.dest} \[label="\([\d,]+\) [^"]*\b{s.event}\b[^"]*" '
                        rf'color="{RED}"'
                    )
                    assert re.search(red_edge, dot), (name, s)
            assert f"violated after step {steps[-1].number}" in dot
    lapse = (tmp_path / "lapse_reclaims_sending-no_overlapping_sends.dot").read_text()
    assert re.search(
        rf'sending -> expired \[label="\(5\) changed: lapse[^"]*" color="{RED}"', lapse
    )
    # update_returning_claim: what went wrong is drawn, a second epoch acquired from sending.
    taken = (tmp_path / "update_returning_claim-no_overlapping_sends.dot").read_text()
    assert re.search(r'sending -> reserved \[label="\(4\) acquire\nnot declared', taken)
    # Two epochs in flight, and a duplicate effect, are visible on the remote's lifeline.
    assert (
        "two epochs in flight at once"
        in (tmp_path / "update_returning_claim-no_overlapping_sends-sequence.svg").read_text()
    )
    assert (
        "duplicate effect of draft 0"
        in (tmp_path / "fresh_key_retry-effect_at_most_once-sequence.svg").read_text()
    )


def test_a_variants_changes_are_drawn_blue_and_expired_is_not_drawn_final() -> None:
    from claimfsm.spec import claim_spec, differences

    spec = designs()["release_by_target"]
    dot = to_dot(spec, changes=differences(claim_spec(), spec))
    assert re.search(
        rf'reserved -> released \[label="changed: release\n\(no longer checks owner_matches\)"'
        rf' color="{BLUE}"',
        dot,
    )
    lapse = designs()["lapse_reclaims_sending"]
    dot = to_dot(lapse, changes=differences(claim_spec(), lapse))
    assert re.search(r'sending -> uncertain \[label="removed: lapse"[^]]*style=dashed', dot)
    plain = to_dot(claim_spec())
    assert re.search(r"\bexpired \[[^]]*peripheries=1", plain)  # discard leaves it
    assert re.search(r"\bconfirmed \[[^]]*peripheries=2", plain)
    assert "expired --> [*]" not in to_mermaid(claim_spec())
    assert "legend" not in to_dot(claim_spec(), legend=False)


def test_a_state_is_orange_where_only_evidence_leaves_it_as_declared() -> None:
    """The fill follows the guards, not the state's name: where fresh_key_retry drops the
    dedup guard, a retry leaves uncertain without evidence, and it is drawn plain; the job
    lease's orphaned state (readback or fencing only) is drawn orange, half of it: the other
    half is the grey of a state a stale owner returns to (it is declared ``stale``); where
    it is no longer declared stale, it is orange whole."""
    from claimfsm.spec import shipped

    plain = to_dot(shipped()["fresh_key_retry"])
    assert re.search(r"\buncertain \[[^\]]*fillcolor=white", plain)
    assert "only evidence leaves it" not in plain
    job = to_dot(shipped()["job"])
    assert re.search(r'\borphaned \[[^\]]*fillcolor="#f6b26b;0.5:#d9d9d9"[^\]]*style=striped', job)
    assert re.search(r'\bqueued \[[^\]]*fillcolor="#d9d9d9"', job)
    assert "only evidence leaves it" in job
    assert "class orphaned evidence_stale" in to_mermaid(shipped()["job"])
    loud = replace(
        shipped()["job"],
        states={n: replace(st, stale=False) for n, st in shipped()["job"].states.items()},
    )
    assert re.search(r'\borphaned \[[^\]]*fillcolor="#f6b26b"[^\]]*style=filled', to_dot(loud))
    assert "evidence_stale" not in to_mermaid(loud)
