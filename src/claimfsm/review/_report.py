"""The design-review report: one self-contained HTML page a team can attach to a review.

It holds the declaration as tables, its state diagram inline as SVG (with the legend, once),
the invariants with the checker's verdict and state counts for the bounds used, and every
known-wrong design: how it differs from the declaration, and its counterexample as
numbered steps, as the path drawn on the design's diagram (its changes in blue), and as a
sequence chart drawn as SVG. Drawings are shown at full size (a wide one scrolls
sideways), so every label stays legible. No script and no network access: it opens
anywhere.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from claimfsm.checker import (
    Checker,
    ClaimModelConfig,
    EntityModelConfig,
    PathStep,
    Report,
    claim_crash_words,
    claim_model,
    crash_words,
    entity_model,
    entity_path_steps,
    entity_word,
    explained,
    path_steps,
)
from claimfsm.diagrams import (
    CLAIM_LANES,
    GraphvizMissing,
    Lanes,
    lifecycle_lanes,
    render,
    sequence_svg,
    to_dot,
    to_mermaid,
)
from claimfsm.spec import (
    Spec,
    declarations_dir,
    differences,
    event_rows,
    invariant_words,
    is_lifecycle_of_its_own,
)

_CSS = """
body { font-family: Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1200px;
       color: #222; line-height: 1.4; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .8em 0; font-size: .9em; }
th, td { border: 1px solid #ccc; padding: .3em .6em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
.ok { color: #1a7f37; font-weight: bold; } .bad { color: #c62828; font-weight: bold; }
.diagram { overflow-x: auto; border: 1px solid #eee; padding: .5em; }
.diagram svg { max-width: none; height: auto; }
.differs { color: #1f5fbf; }
.missing { background: #fff4e5; border-left: 4px solid #f6b26b; padding: .5em 1em; }
pre { background: #f7f7f7; padding: .8em; overflow-x: auto; font-size: .85em; }
code { font-size: .95em; }
"""


@dataclass(frozen=True)
class ReviewInputs:
    """What the report is of: the declaration, its known-wrong variants, the checker's
    bounds (``ClaimModelConfig`` for the claim protocol, ``EntityModelConfig`` for a
    lifecycle of your own) and claimfsm's version."""

    spec: Spec
    wrong: dict[str, Spec]
    config: ClaimModelConfig | EntityModelConfig
    version: str


@dataclass(frozen=True)
class _Kind:
    """How the report speaks of one kind of declaration: the claim protocol's world, or a
    lifecycle of your own."""

    model: Any  # (spec) -> Model
    steps: Any  # (spec, model, path) -> list[PathStep]
    lanes: Lanes
    bounds: str
    after: str  # the steps table's last column
    bars: str  # what a bar on the sequence chart is
    replay: str  # the check options a replay token needs


def _kind(spec: Spec, config: ClaimModelConfig | EntityModelConfig) -> _Kind:
    if is_lifecycle_of_its_own(spec):
        cfg = config if isinstance(config, EntityModelConfig) else EntityModelConfig()
        world = cfg.resolved(spec)
        word = entity_word(spec)
        return _Kind(
            model=lambda s: entity_model(s, cfg),
            steps=entity_path_steps,
            lanes=lifecycle_lanes(word, "remote" in world),
            bounds=f"{_count(world['workers'], 'worker')}, {_count(world['keys'], word)}, "
            f"{_count(world['epochs'], 'epoch')} per {word}"
            + (f", {crash_words(world)}" if world["crashes"] else "")
            + (f", a {world['remote']} remote" if "remote" in world else "")
            + (
                f", {_count(world['drafts'], 'linked draft')} per {word}"
                if "drafts" in world
                else ""
            ),
            after=f"{word} and workers after it",
            bars="the bars are each epoch's work running",
            replay=f"--workers {world['workers']}",
        )
    assert isinstance(config, ClaimModelConfig)
    return _Kind(
        model=lambda s: claim_model(s, config),
        steps=path_steps,
        lanes=CLAIM_LANES,
        bounds=f"{_count(config.workers, 'worker')}, {_count(config.targets, 'target')}, "
        f"{_count(config.drafts, 'draft')} per target, {_count(config.epochs, 'epoch')} per "
        f"target, {config.remote} remote" + claim_crash_words(config),
        after="claim, remote and workers after it",
        bars="the bars are requests in flight",
        replay=f"--workers {config.workers}",
    )


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _svg(dot: str) -> str:
    """Inline SVG for ``dot`` (prolog and doctype removed), or what is true without it."""
    try:
        svg = render(dot, "svg").decode("utf-8")
    except GraphvizMissing as exc:
        return (
            f"<div class='missing'><p>This drawing is missing: {_e(exc)}. Nothing was written"
            " to disk; the drawing's DOT source follows, for any Graphviz viewer.</p>"
            f"<details><summary>DOT source</summary><pre>{_e(dot)}</pre></details></div>"
        )
    svg = re.sub(r"^.*?(<svg\b)", r"\1", svg, flags=re.S)
    return f'<div class="diagram">{svg}</div>'


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _declaration(spec: Spec) -> str:
    rows = []
    for s in spec.states.values():
        flags = ", ".join(
            f for f in ("terminal", "frees_target", "lease", "stale", "pseudo") if getattr(s, f)
        )
        rows.append(
            f"<tr><td><code>{_e(s.name)}</code></td><td>{_e(s.meaning)}</td>"
            f"<td>{_e(flags)}</td></tr>"
        )
    states = (
        "<table id='states'><tr><th>state</th><th>meaning</th><th>flags</th></tr>"
        + "".join(rows)
        + "</table>"
    )
    rows = [
        f"<tr><td><code>{_e(g.name)}</code></td><td>{_e(g.meaning)}</td>"
        f"<td>{_e(g.refusal or '-')}</td></tr>"
        for g in spec.guards.values()
    ]
    guards = (
        "<table id='guards'><tr><th>guard</th><th>meaning</th><th>refusal</th></tr>"
        + "".join(rows)
        + "</table>"
    )
    rows = [
        f"<tr><td><code>{_e(t.event)}</code></td><td>{_e(t.source)}</td><td>{_e(t.dest)}</td>"
        f"<td>{_e(', '.join(t.guards) or '-')}</td></tr>"
        for t in spec.transitions
        if not t.internal
    ]
    transitions = (
        "<table id='transitions'><tr><th>event</th><th>from</th><th>to</th>"
        "<th>guards</th></tr>" + "".join(rows) + "</table>"
    )
    header, table = event_rows(spec)
    events = (
        "<table id='events'><tr>"
        + "".join(f"<th>{_e(col)}</th>" for col in header)
        + "</tr>"
        + "".join(
            f"<tr><td><code>{_e(row[0])}</code></td>"
            + "".join(f"<td>{_e(cell)}</td>" for cell in row[1:])
            + "</tr>"
            for row in table
        )
        + "</table>"
    )
    extra = ""
    if spec.columns:
        extra += "<h3>Columns</h3><table id='columns'><tr><th>column</th><th>default</th>"
        extra += "<th>meaning</th></tr>" + "".join(
            f"<tr><td><code>{_e(c.name)}</code></td><td>{c.default}</td><td>{_e(c.meaning)}"
            "</td></tr>"
            for c in spec.columns.values()
        )
        extra += "</table>"
    return (
        f"<h3>States</h3>{states}<h3>Guards</h3>{guards}<h3>Transitions</h3>{transitions}"
        f"<h3>Events</h3>{events}{extra}"
    )


def _summary(report: Report[Any, Any]) -> str:
    return (
        f"states={report.states:,}, unique={report.unique:,}, depth={report.depth}, "
        f"seconds={report.seconds:.2f}, states/s={report.states_per_second:,.0f}"
    )


def _properties(report: Report[Any, Any], spec: Spec) -> str:
    rows = []
    for p in report.model.properties:
        outcome = report.outcome(p)
        good = outcome in ("holds", "found")
        declared = spec.invariants.get(p.name)
        kind = p.kind + (
            f" ({invariant_words(declared)})" if declared else " (the framework's own)"
        )
        rows.append(
            f"<tr><td><code>{_e(p.name)}</code></td><td>{_e(kind)}</td>"
            f"<td>{_e(p.description)}</td>"
            f"<td class='{'ok' if good else 'bad'}'>{_e(outcome)}</td></tr>"
        )
    return (
        "<table class='properties'><tr><th>property</th><th>kind</th><th>meaning</th>"
        "<th>verdict</th></tr>" + "".join(rows) + "</table>"
    )


def _wrong_design(name: str, spec: Spec, base: Spec, kind: _Kind) -> str:
    report = Checker(kind.model(spec)).symmetry().stop_on_violation().run()
    changes = differences(base, spec)
    parts = [
        f"<section class='design' id='design-{_e(name)}'>",
        f"<h3>{_e(name)}</h3><p>{_e(spec.description)}</p>",
        f"<p>How it differs from <code>{_e(base.name)}</code>:</p><ul class='differs'>"
        + "".join(f"<li>{_e(line)}</li>" for line in changes.lines())
        + "</ul>",
        f"<p>Checker: {_e(_summary(report))}; verdict "
        f"<span class='{'bad' if report.verdict == 'violated' else 'ok'}'>"
        f"{_e(report.verdict)}</span>.</p>",
    ]
    for prop in report.violations:
        found = report.discoveries.get(prop.name)
        if found is None:
            parts.append(
                f"<p><b>{_e(prop.name)}</b> ({_e(prop.kind)}): never happens in a "
                f"complete search: {_e(prop.description)}.</p>"
                "<p>The design's diagram, its changes in blue:</p>"
                + _svg(to_dot(spec, legend=False, changes=changes))
            )
            continue
        steps: list[PathStep] = kind.steps(spec, report.model, found.path)
        shown = explained(report.model, found.path)
        rows = "".join(
            f"<tr><td>{n}</td><td>{_e(text)}</td><td>{_e(state)}</td></tr>"
            for n, (text, state) in enumerate(shown[1:], start=1)
        )
        parts += [
            f"<p>Violates <b>{_e(prop.name)}</b>: {_e(prop.description)}. "
            f"Shortest counterexample, {len(shown) - 1} steps "
            f"(replay it: <code>claimfsm check {_e(_reference(spec, name))} {_e(kind.replay)}"
            f" --replay-token {_e(found.token)}</code>):</p>",
            f"<table class='steps'><tr><th>#</th><th>step</th><th>{_e(kind.after)}</th></tr>"
            f"{rows}</table>",
            (
                f"<p>Under fairness: {_e(prop.fairness or 'none')}; {_e(found.ending())}.</p>"
                if prop.kind == "eventually"
                else ""
            ),
            "<p>The path on the design's diagram (red, numbered; its changes in blue):</p>",
            _svg(to_dot(spec, steps, legend=False, changes=changes, violation=prop.description)),
            f"<p>The same path as a sequence chart; {_e(kind.bars)}:</p>",
            "<div class='diagram'>"
            + sequence_svg(steps, f"{name}: {prop.name}", prop.description, kind.lanes)
            + "</div>",
        ]
    parts.append("</section>")
    return "".join(parts)


def _reference(spec: Spec, name: str) -> str:
    """How ``claimfsm check`` names a design: a shipped one by name, another by path."""
    shipped = spec.path is None or spec.path.resolve().is_relative_to(declarations_dir().resolve())
    return name if shipped else str(spec.path)


def review_html(inputs: ReviewInputs) -> str:
    """The whole report as one HTML document."""
    spec = inputs.spec
    kind = _kind(spec, inputs.config)
    proved = Checker(kind.model(spec)).symmetry().exhaustive().run()
    bounds = kind.bounds
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    verdict_class = "ok" if proved.verdict == "ok" else "bad"
    body = [
        f"<h1>Design review: {_e(spec.name)}</h1>",
        f"<p>{_e(spec.description)}</p>",
        f"<p>claimfsm {_e(inputs.version)}, generated {_e(now)} by "
        "<code>claimfsm report</code>.</p>",
        ""
        if is_lifecycle_of_its_own(spec)
        else "<p><b>The promise:</b> at most one in-flight dispatch attempt per target; "
        "exactly-once effect only when the remote dedups by a stable idempotency key or "
        "rejects stale epochs (is fenced).</p>",
        "<h2 id='declaration'>The declaration</h2>",
        _declaration(spec),
        "<h2 id='diagram'>State diagram</h2>",
        _svg(to_dot(spec)),
        f"<details><summary>Mermaid text</summary><pre>{_e(to_mermaid(spec))}</pre></details>",
        "<h2 id='invariants'>Invariants and examples, checked</h2>",
        f"<p>Bounds: {_e(bounds)}. {_e(_summary(proved))}. Verdict: "
        f"<span class='{verdict_class}' id='verdict'>{_e(proved.verdict)}</span>"
        + (" (every reachable state explored)." if proved.complete else ".")
        + "</p>",
        _properties(proved, spec),
        "<h2 id='wrong-designs'>Known-wrong designs, and how each fails</h2>",
    ]
    if not inputs.wrong:
        body.append("<p>None given.</p>")
    body += [_wrong_design(name, s, spec, kind) for name, s in inputs.wrong.items()]
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>Design review: {_e(spec.name)}</title><style>{_CSS}</style></head><body>"
        + "\n".join(body)
        + "</body></html>\n"
    )
