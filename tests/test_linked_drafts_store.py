"""A lifecycle's linked drafts in its store, on SQLite and PostgreSQL (``[drafts]``,
``store/_entity_drafts``): the author's drafts, a take that pins one, the guards over
drafts compiled to SQL, the pinned draft locked where it may yet be dispatched, a
``dispatches`` transition marking it, and the request key naming it; the generated
stateful test comparing all of that with the checker's world at every step, and failing
where the store leaves out a piece of it; the campaign's workers authoring drafts."""

from __future__ import annotations

import functools
import json
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from claimfsm.audit import audit_lifecycle, audit_store
from claimfsm.campaign import LifecycleFindings, run_campaign
from claimfsm.cli import main
from claimfsm.errors import (
    DraftChanged,
    DraftNotApproved,
    IllegalTransition,
    InvalidArgument,
    NotFound,
    TargetBusy,
)
from claimfsm.spec import declarations_dir, load_spec
from claimfsm.store import EntityStore, open_entity_store
from claimfsm.store._entity_drafts import drawn_of, pinned_of, request_key
from claimfsm.store._tokens import content_digest, fingerprint, token_hash
from claimfsm.verify import ManualClock, guided_paths, verify
from claimfsm.verify._stateful import play

from .conftest import forge_history, sqlite_quick_postgresql_slow
from .test_lifecycle_campaign import short

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PAGE = EXAMPLES / "page.toml"
POST = EXAMPLES / "post.toml"


def open_page(
    url: str, clock: ManualClock, text: str | None = None, tmp: Path | None = None
) -> EntityStore:
    """A store of ``examples/page.toml``, or of ``text`` (written in ``tmp``) under its
    own tables."""
    if text is None:
        return open_entity_store(load_spec(PAGE), url, clock=clock)
    assert tmp is not None
    (tmp / "page.toml").write_text(text)
    return open_entity_store(load_spec(tmp / "page.toml"), url, clock=clock, prefix="alt")


def test_a_page_is_published_from_the_revision_it_pinned(url: str) -> None:
    clock = ManualClock()
    store = open_page(url, clock)
    first = store.create_draft("home", "hello")
    assert (first.status, first.version, first.target_id) == ("pending", 1, "home")
    # draft_ready, compiled to SQL: a pending revision is not picked
    with pytest.raises(DraftNotApproved, match="revision_approved does not hold"):
        store.take("home", "pick", draft=first.draft_id)
    store.approve_draft(first.draft_id)
    held = store.take("home", "pick", draft=first.draft_id, lease_seconds=10)
    row = store.row("home")
    assert row is not None and (row.draft_id, row.draft_version) == (first.draft_id, 1)
    assert row.draft_digest == first.digest and held.draft == first.draft_id
    # the request key names the pinned draft and its version
    assert held.request_key == row.request_key == f"home#d{first.draft_id}v1"
    # an edit while merely reserved is the author's right; the start then refuses
    edited = store.edit_draft(first.draft_id, "hello, edited")
    assert (edited.status, edited.version) == ("pending", 2)
    with pytest.raises(DraftChanged, match="revision_unchanged does not hold"):
        store.act(held, "start")
    store.approve_draft(first.draft_id)
    with pytest.raises(DraftChanged, match="pinned version 1, now version 2, approved"):
        store.act(held, "start")  # approved again, at another version: still refused
    assert store.row("home").state == "reserved"  # type: ignore[union-attr]
    store.act(held, "give_back")
    again = store.take("home", "pick", draft=first.draft_id, lease_seconds=10)
    assert again.request_key == f"home#d{first.draft_id}v2"  # another request: v2
    publishing = store.act(again, "start")
    # the pinned revision is locked while the publish may make it live
    with pytest.raises(TargetBusy, match="pinned by epoch 2 of page 'home', which is publishing"):
        store.edit_draft(first.draft_id, "too late")
    other = store.create_draft("home", "a second revision")  # parallel revisions are fine
    store.edit_draft(other.draft_id, "a second revision, edited")
    store.act(publishing, "finish")
    published = store.draft(first.draft_id)
    assert (published.status, published.version, published.content) == (
        "dispatched",
        2,
        "hello, edited",
    )
    assert store.draft(other.draft_id).status == "pending"  # only the pinned one is marked
    with pytest.raises(IllegalTransition, match="dispatched and cannot be edited"):
        store.edit_draft(first.draft_id, "after")
    with pytest.raises(IllegalTransition, match="already dispatched"):
        store.approve_draft(first.draft_id)
    assert [d.draft_id for d in store.drafts("home")] == [first.draft_id, other.draft_id]
    assert [d.draft_id for d in store.drafts("home", status="pending")] == [other.draft_id]
    # history records each change of a draft beside the events, the row unchanged, the
    # dispatch right after the transition that made it
    entries = store.history("home")
    assert [e.event for e in entries] == [
        *("draft:create", "draft:approve", "pick", "draft:edit"),
        *("draft:approve", "give_back", "pick", "start", "draft:create", "draft:edit"),
        *("finish", "draft:dispatch"),
    ]
    dispatch = entries[-1]
    assert dispatch.facts == {
        "draft": first.draft_id,
        "version": 2,
        "digest": published.digest,
    }
    assert (dispatch.source, dispatch.dest, dispatch.epoch) == ("published", "published", 2)
    assert all(e.source == e.dest for e in entries if e.event.startswith("draft:"))
    assert audit_store(store).ok
    # pruned, the checkpoint records the drafts it removed, and history still audits
    clock.advance(60)
    store.approve_draft(other.draft_id)
    store.act(store.take("home", "pick", draft=other.draft_id), "give_back")
    assert store.prune_history(30).checkpoints == 1
    checkpoint = store.history("home")[0]
    assert checkpoint.facts is not None
    assert checkpoint.facts["drafts"] == {
        str(first.draft_id): ["dispatched", 2, published.digest],
        str(other.draft_id): ["pending", 2, store.draft(other.draft_id).digest],
    }
    report = audit_store(store)
    assert report.ok, report.violations
    store.close()


def _forge(
    store: EntityStore, key: str, epoch: int, event: str, source: str, dest: str, **kw: Any
) -> None:
    """A history entry written past the store, as a bug or a hand edit would (its request
    key the entity's own unless ``rk`` says)."""
    forge_history(store, key, epoch, event, source, dest, **{"rk": "", **kw})


def test_each_kind_of_draft_damage_is_found_and_named(url: str) -> None:
    """With its drafts' changes in history, the audit judges the guards over drafts, the
    order of each draft's changes and the declared ``pinned`` invariant; each damage
    written past the store is named by its kind, and an undamaged page audits clean."""
    clock = ManualClock()
    store = open_page(url, clock)

    def made(key: str, approve: bool = True) -> Any:
        d = store.create_draft(key, f"{key}'s text")
        return store.approve_draft(d.draft_id) if approve else d

    def draft_facts(d: Any, version: int, digest: str) -> str:
        return json.dumps({"draft": d.draft_id, "version": version, "digest": digest})

    # clean: picked, started, finished
    ok = made("ok")
    store.act(
        store.act(store.take("ok", "pick", draft=ok.draft_id, lease_seconds=10), "start"), "finish"
    )
    # a pick that names a pending revision
    pending = made("a", approve=False)
    _forge(store, "a", 1, "pick", "idle", "reserved", rk=f"a#d{pending.draft_id}v1")
    # the pinned revision edited while publishing
    b = made("b")
    held = store.act(store.take("b", "pick", draft=b.draft_id, lease_seconds=10), "start")
    row = store.row("b")
    assert row is not None
    _forge(
        store,
        "b",
        1,
        "draft:edit",
        "publishing",
        "publishing",
        facts=draft_facts(b, 2, "edited"),
        fp=fingerprint(token_hash(held.token)),
        lease=row.lease_deadline,
        owner=row.owner,
        rk=row.request_key,
    )
    # a start after the pinned revision was edited (an edit while reserved is fine)
    c = made("c")
    held = store.take("c", "pick", draft=c.draft_id, lease_seconds=10)
    store.edit_draft(c.draft_id, "c's text, edited")
    row = store.row("c")
    assert row is not None
    _forge(
        store,
        "c",
        1,
        "start",
        "reserved",
        "publishing",
        at=clock() + 1,
        fp=fingerprint(token_hash(held.token)),
        lease=row.lease_deadline,
        owner=row.owner,
        rk=row.request_key,
    )
    # a revision created twice, and one dispatched by no transition declared to
    d = made("d")
    _forge(store, "d", 0, "draft:create", "idle", "idle", facts=draft_facts(d, 1, d.digest))
    _forge(store, "d", 0, "draft:dispatch", "idle", "idle", facts=draft_facts(d, 1, d.digest))
    found: dict[str, set[str]] = {}
    for v in audit_store(store).violations:
        found.setdefault(v.target_id, set()).add(v.kind)
    assert "ok" not in found
    assert "draft_not_ready" in found["a"]
    assert {"pinned_draft_edited", "invariant_pinned"} <= found["b"]
    assert {"pinned_draft_changed", "invariant_pinned"} <= found["c"]
    assert "draft_out_of_order" in found["d"]
    # the rows, and the drafts table, disagree with the forged entries too (b's edit and
    # d's dispatch are not in the table); nothing else is named
    assert found == {
        "a": {"draft_not_ready", "row_disagrees"},
        "b": {"pinned_draft_edited", "invariant_pinned", "draft_disagrees"},
        "c": {"pinned_draft_changed", "invariant_pinned", "row_disagrees"},
        "d": {"draft_out_of_order", "draft_disagrees"},
    }, found
    store.close()


def test_a_drafts_table_changed_behind_the_store_is_found(url: str) -> None:
    """The drafts table must be what history leaves, and each draft's content what its
    digest names: each change written past the store is named ``draft_disagrees`` on its
    entity, by the streamed audit and by the store's own, and nothing else is."""
    clock = ManualClock()
    store = open_page(url, clock)
    made = {}
    for key in ("ok", "content", "status", "version", "gone", "late"):
        draft = store.approve_draft(store.create_draft(key, f"{key}'s text").draft_id)
        made[key] = draft.draft_id
    store.act(
        store.act(store.take("ok", "pick", draft=made["ok"], lease_seconds=10), "start"), "finish"
    )
    assert audit_store(store).ok and audit_lifecycle(store.spec, url).ok
    table, m = store._drafts.table, store._driver.marker

    def behind(statement: str, *params: Any) -> None:
        store._driver.rerun(lambda tx: tx.run(statement, params))

    behind(f"UPDATE {table} SET content = {m} WHERE draft_id = {m}", "other", made["content"])  # noqa: S608
    behind(f"UPDATE {table} SET status = {m} WHERE draft_id = {m}", "dispatched", made["status"])  # noqa: S608
    behind(f"UPDATE {table} SET version = 2 WHERE draft_id = {m}", made["version"])  # noqa: S608
    behind(f"DELETE FROM {table} WHERE draft_id = {m}", made["gone"])  # noqa: S608
    behind(  # a draft of an entity that has no row (an author's first draft makes one)
        f"INSERT INTO {table} (target_id, content, version, digest, status, updated_at)"  # noqa: S608
        f" VALUES ({m}, {m}, 1, {m}, 'pending', 0)",
        "nobody",
        "x",
        content_digest("x"),
    )
    expected = {
        "content": "content is not the content its digest names",
        "status": "is dispatched at version 1 (history: approved at version 1)",
        "version": "is approved at version 2 (history: approved at version 1)",
        "gone": "is in history but not in the drafts table",
        "nobody": "names 'nobody', which has no row",
    }
    streamed = audit_lifecycle(store.spec, url)
    for report in (streamed, audit_store(store)):
        said = {v.target_id: v.message for v in report.violations}
        kinds = {v.kind for v in report.violations}
        if report is not streamed:  # the store's own audit reads drafts by their rows
            expected.pop("nobody")
        assert kinds == {"draft_disagrees"}, report.violations
        assert set(said) == set(expected), said
        for key, words in expected.items():
            assert words in said[key], (key, said[key])
    store.close()


def test_what_a_take_names_and_an_author_asks_is_checked(url: str, tmp_path: Path) -> None:
    clock = ManualClock()
    store = open_page(url, clock)
    mine = store.approve_draft(store.create_draft("home", "mine").draft_id)
    theirs = store.approve_draft(store.create_draft("about", "theirs").draft_id)
    with pytest.raises(InvalidArgument, match="draft must be"):
        store.take("home", "pick")  # a take of a lifecycle with drafts names one
    with pytest.raises(NotFound, match="no draft 999"):
        store.take("home", "pick", draft=999)
    with pytest.raises(InvalidArgument, match=r"draft \d+ is page 'about''s, not 'home''s"):
        store.take("home", "pick", draft=theirs.draft_id)
    with pytest.raises(NotFound, match="no draft 999"):
        store.edit_draft(999, "x")
    with pytest.raises(InvalidArgument, match="status must be"):
        store.drafts("home", status="live")
    assert store.row("home") is not None and store.row("home").epoch == 0  # type: ignore[union-attr]
    store.take("home", "pick", draft=mine.draft_id)
    store.close()
    # one live revision per page: a second is refused, as a partial unique index would
    one = PAGE.read_text().replace("[drafts]\n", "[drafts]\none_live_per_target = true\n")
    single = open_page(url, clock, one, tmp_path)
    single.create_draft("home", "first")
    with pytest.raises(TargetBusy, match="allows one; dispatch or edit it"):
        single.create_draft("home", "second")
    assert len(single.drafts("home")) == 1
    single.drop()
    single.close()
    # a lifecycle without drafts has none to ask for, and a take names none
    job = open_entity_store(load_spec(declarations_dir() / "job.toml"), url, clock=clock)
    with pytest.raises(InvalidArgument, match=r"declares no \[drafts\]"):
        job.create_draft("j", "x")
    with pytest.raises(InvalidArgument, match=r"declares no \[drafts\]: take\(key, event\)"):
        job.take("j", "lease", draft=1)
    job.drop()
    job.close()


def test_the_request_key_names_the_pinned_draft_and_gives_back_its_parts() -> None:
    made = request_key("page-1", 12, 2, "")
    assert made == "page-1#d12v2" and drawn_of("page-1", made) == ""
    assert pinned_of("page-1", made) == 12
    drawn = request_key("a#b", 3, 1, "k9f")
    assert drawn_of("a#b", drawn) == "k9f" and pinned_of("a#b", drawn) == 3
    assert drawn_of("x", "plain") == "plain" and pinned_of("x", "plain") == 0


def _race(
    barrier: threading.Barrier,
    done: dict[str, bool],
    name: str,
    call: Callable[[], object],
    refused: type[Exception],
) -> None:
    """``call`` once the other racer is ready too: ``done[name]``, whether it went through
    (False: refused with ``refused``)."""
    barrier.wait()
    try:
        call()
        done[name] = True
    except refused:
        done[name] = False


def _race_both(
    first: tuple[str, Callable[[], object], type[Exception]],
    second: tuple[str, Callable[[], object], type[Exception]],
) -> dict[str, bool]:
    """Two racers (name, call, its refusal) started together: whether each went through."""
    done: dict[str, bool] = {}
    barrier = threading.Barrier(2)
    threads = [threading.Thread(target=_race, args=(barrier, done, *r)) for r in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done


def test_an_edit_racing_a_start_never_leaves_changed_content_publishing(url: str) -> None:
    """The author's edit and the worker's start lock the entity's row in the same order:
    whichever comes second sees the first. Publishing with an edited revision pinned at
    its old version would be the content changing under the publish."""
    clock = ManualClock()
    store, author = open_page(url, clock), open_page(url, clock)
    outcomes: set[tuple[bool, bool]] = set()
    for n in range(25):
        key = f"page-{n}"
        draft = store.approve_draft(store.create_draft(key, "v1").draft_id)
        held = store.take(key, "pick", draft=draft.draft_id, lease_seconds=60)
        start = functools.partial(store.act, held, "start")
        edit = functools.partial(author.edit_draft, draft.draft_id, "v2")
        done = _race_both(("start", start, DraftChanged), ("edit", edit, TargetBusy))
        row, now = store.row(key), store.draft(draft.draft_id)
        assert row is not None
        outcomes.add((done["start"], done["edit"]))
        assert done["start"] != done["edit"], done  # exactly one of them goes through
        if row.state == "publishing":
            assert now.version == row.draft_version == 1 and now.status == "approved"
    assert outcomes <= {(True, False), (False, True)}
    store.close()
    author.close()


def test_an_edit_racing_a_pick_never_leaves_a_pin_history_disowns(url: str) -> None:
    """A pick reads the revision it names as the author who held the page last left it:
    one that comes second to an edit is refused (the revision is pending again), one
    that comes first pins version 1; the audit finds every pin where history has it."""
    clock = ManualClock()
    store, author = open_page(url, clock), open_page(url, clock)
    for n in range(25):
        key = f"page-{n}"
        draft = store.approve_draft(store.create_draft(key, "v1").draft_id)
        pick = functools.partial(store.take, key, "pick", draft=draft.draft_id)
        edit = functools.partial(author.edit_draft, draft.draft_id, "v2")
        done = _race_both(("pick", pick, DraftNotApproved), ("edit", edit, TargetBusy))
        assert done["edit"]  # an edit while merely reserved is the author's right
        row = store.row(key)
        assert row is not None
        if done["pick"]:
            assert (row.state, row.draft_version) == ("reserved", 1)
    report = audit_store(store)
    assert report.ok, report.violations
    store.close()
    author.close()


@sqlite_quick_postgresql_slow
@pytest.mark.parametrize("example", [PAGE, POST], ids=["page", "post"])
def test_verify_plays_the_authors_and_the_pins_against_the_model(example: Path, url: str) -> None:
    spec = load_spec(example)
    result = verify(spec, lambda clock: open_entity_store(spec, url, clock=clock), examples=15)
    assert result.ok, (result.failure, result.program)
    assert any("with draft" in step for step in result.program) or result.guided > 0
    assert result.guided_steps > 0 and result.steps_run > 0


def test_readback_asks_about_the_request_of_the_pinned_draft(url: str) -> None:
    """A post sent with its second draft, landed, then unanswered: readback must ask about
    that draft's request (its key names the draft), so settling finds it posted. The
    verify's evidence once asked about the entity's own key, right only for draft 0."""
    spec = load_spec(POST)
    path = [
        ("take", 0, 0, 1, "pick"),
        ("own", 0, "send"),
        ("send", 0),
        ("land", 0, 1, 2),
        ("own", 0, "give_up"),
        ("env", 0, "settle"),
    ]
    program, failure = play(spec, lambda clock: open_entity_store(spec, url, clock=clock), path)
    assert failure == "", (failure, program)
    assert program[-1].endswith("-> posted"), program


@pytest.mark.parametrize(
    ("broken", "found"),
    [
        pytest.param(
            lambda store: setattr(store, "_dispatch", lambda *a: []),
            "draft 0 (status, version): store ('approved', 1), model ('dispatched', 1)",
            id="no-dispatch-mark",
        ),
        pytest.param(
            lambda store: setattr(store, "_pinning", frozenset()),
            "the store took it; the model refused",
            id="no-edit-lock",
        ),
    ],
)
def test_verify_fails_a_store_that_leaves_out_a_piece_of_the_drafts(
    tmp_path: Path, broken: Any, found: str
) -> None:
    spec = load_spec(PAGE)
    url = f"sqlite:///{tmp_path / 'broken.sqlite'}"

    def open_broken(clock: ManualClock) -> EntityStore:
        store = open_entity_store(spec, url, clock=clock)
        broken(store)
        return store

    result = verify(spec, open_broken, examples=30)
    assert not result.ok and found in result.failure, result.failure
    assert result.program  # the failing program, step by step


@pytest.mark.slow  # a campaign of worker processes; the README's campaigns run in the quick suite
def test_a_page_campaign_authors_pins_and_publishes(tmp_path: Path) -> None:
    """The campaign's workers write and approve revisions, edit live ones now and then,
    and pick a page naming one: every promise holds, and each published page's pinned
    revision is the one marked published, at the version pinned."""
    report = run_campaign(short(tmp_path, str(PAGE)))
    assert report.ok, report.violations
    f = report.findings
    assert isinstance(f, LifecycleFindings) and f.runs > 0
    assert f.audit_violations == 0 and f.overlapping_runs == 0
    spec = load_spec(PAGE)
    store = open_entity_store(spec, f"sqlite:///{report.config.run_dir / 'campaign.sqlite'}")
    published = [r for r in store.rows() if r.state == "published"]
    assert published
    for row in published:
        assert row.draft_id is not None
        pinned = store.draft(row.draft_id)
        assert (pinned.status, pinned.version) == ("dispatched", row.draft_version)
    store.close()


def test_claimfsm_verify_runs_a_lifecycle_with_drafts_and_leaves_nothing(tmp_path: Path) -> None:
    """The README's `claimfsm verify examples/page.toml`: its tables, the drafts' too, are
    dropped afterwards."""
    db = tmp_path / "verify.sqlite"
    result = CliRunner().invoke(
        main, ["verify", str(PAGE), "--db", f"sqlite:///{db}", "--examples", "5", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ok"] is True
    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert not {t for t in tables if t.startswith("verify_page")}, tables


@sqlite_quick_postgresql_slow
def test_the_store_resends_an_unanswered_post_to_a_deduplicating_remote(
    url: str, tmp_path: Path
) -> None:
    """post.toml in a world with a deduplicating remote: the model's shortest path to the
    operator's resend (unknown -> sending, the same revision's key) and random programs
    play on the store, which agrees step by step."""
    text = POST.read_text()
    assert text.count('remote = "fencing"') == 1
    (tmp_path / "post.toml").write_text(text.replace('remote = "fencing"', 'remote = "dedup"'))
    spec = load_spec(tmp_path / "post.toml")
    reached = [what for what, _ in guided_paths(spec, workers=2)]
    assert "resend: unknown -> sending" in reached, reached
    result = verify(spec, lambda clock: open_entity_store(spec, url, clock=clock), examples=5)
    assert result.ok, (result.failure, result.program)
    assert result.guided == len(reached)
