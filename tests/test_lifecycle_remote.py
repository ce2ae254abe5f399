"""A lifecycle of your own with a remote: requests in flight, late landings, lost answers,
and the remote's three modes, checked, stored and verified like the claim's.

The declaration is the README's ``charge.toml`` (one card charge per order) and its
wrong design ``unfenced.toml``, read from the README so that the tutorial and these tests
cannot drift apart."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from claimfsm.audit import audit_lifecycle, audit_store
from claimfsm.checker import (
    Checker,
    EntityModelConfig,
    entity_model,
    promela,
    reachable,
    replay,
    spin_available,
    spin_check,
)
from claimfsm.cli import main
from claimfsm.errors import InsufficientEvidence, InvalidArgument, SpecError, StaleClaim
from claimfsm.spec import Spec, load_spec, shipped
from claimfsm.store import open_entity_store
from claimfsm.verify import verify

from .conftest import needs_dot, needs_spin

README = (Path(__file__).parent.parent / "README.md").read_text()
FILES = dict(re.findall(r"```toml\n# (\S+\.toml)\n(.*?)```", README, flags=re.S))


@pytest.fixture
def charge_dir(tmp_path: Path) -> Path:
    for name in ("charge.toml", "unfenced.toml"):
        (tmp_path / name).write_text(f"# {name}\n{FILES[name]}")
    return tmp_path


def verdicts(spec: Spec, remote: str) -> dict[str, bool]:
    """Each safety property's verdict, and whether the search found a deadlock."""
    model = entity_model(spec, EntityModelConfig(remote=remote))
    report = Checker(model).run()
    assert report.complete
    found = {p.name: report.outcome(p) == "holds" for p in model.properties if p.kind == "always"}
    found["no deadlock"] = report.deadlock is None
    return found


def test_the_promise_s_three_tiers_hold_for_a_lifecycle_of_your_own(charge_dir: Path) -> None:
    """Fenced before it is called missing, the charge happens once and one request at a
    time is in flight; unfenced, a request that landed late is followed by a second one:
    a fencing or plain processor is charged twice, a deduplicating one once (the order's
    key) with two requests in flight."""
    charge = load_spec(charge_dir / "charge.toml")
    unfenced = load_spec(charge_dir / "unfenced.toml")
    proved = verdicts(charge, "fencing")
    assert all(proved.values()), proved
    for remote, once in (("fencing", False), ("plain", False), ("dedup", True)):
        found = verdicts(unfenced, remote)
        assert found["charged_once"] is once, (remote, found)
        assert found["one_request_at_a_time"] is False, (remote, found)
        assert found["unknown_left_by_readback"] and found["stale_operations_change_nothing"]
    # Against a processor that cannot be fenced, the correct design cannot call a charge
    # missing: an attempt whose request never left waits in unknown for ever.
    for remote in ("plain", "dedup"):
        found = verdicts(charge, remote)
        assert not found["no deadlock"] and found["charged_once"], (remote, found)


def test_the_counterexample_is_a_late_landing_after_readback(charge_dir: Path) -> None:
    result = CliRunner().invoke(main, ["check", str(charge_dir / "unfenced.toml")])
    assert result.exit_code == 1, result.output
    path = result.output.split("counterexample for charged_once")[1].split("replay token")[0]
    steps = [line.strip() for line in path.splitlines() if re.match(r"\s+\d+\. ", line)]
    said = [s.split(". ", 1)[1] for s in steps]
    missing = next(i for i, s in enumerate(said) if s.startswith("operator: missing"))
    late = next(i for i, s in enumerate(said) if "request of e1" in s and "lands" in s)
    again = next(i for i, s in enumerate(said) if "request of e2" in s and "lands" in s)
    assert missing < late < again, said
    assert "took effect e1,e2" in path


def test_requests_outlive_their_senders_and_answers_get_lost(charge_dir: Path) -> None:
    """The world has what makes a remote hard: a request that lands after its sender gave
    up (the owner's ``unanswered`` event) or crashed, and one that took effect while its
    sender never heard so (the answer lost): readback then finds it present."""
    model = entity_model(load_spec(charge_dir / "charge.toml"))
    start = next(iter(model.init_states()))
    seen, queue = {start}, [start]
    landed_unheard = found_present = landed_after_crash = False
    for world in queue:
        for action in model.actions(world):
            after = model.next_state(world, action)
            if after is None:
                continue
            row = after.rows[0]
            if action[0] == "land" and row.landed and row.state == "unknown":
                landed_unheard = True
            if action[0] == "land" and all(h is None for h in after.clients) and row.landed:
                landed_after_crash = True
            if action[0] == "env" and action[2] == "found":
                found_present = True
            if after not in seen:
                seen.add(after)
                queue.append(after)
    assert landed_unheard and found_present and landed_after_crash


def test_without_a_remote_nothing_changes() -> None:
    """A declaration without remote roles has no remote in its world: the job's counts are
    its own (test_spin holds them to SPIN's), and ``--remote`` is refused for it."""
    job = shipped()["job"]
    world = EntityModelConfig().resolved(job)
    assert "remote" not in world
    with pytest.raises(InvalidArgument, match="declares no remote"):
        EntityModelConfig(remote="plain").resolved(job)
    result = CliRunner().invoke(main, ["check", "job", "--remote", "plain"])
    assert result.exit_code == 2 and "--remote where an event declares a remote role" in (
        result.output
    )


def test_readback_of_running_is_refused_with_a_remote(charge_dir: Path) -> None:
    """With a remote the work is a request, which may still be on its way where no
    readback sees it: a guard on ``running`` would be read as a guess. Every command
    refuses it by name, pointing at the evidence a remote gives."""
    text = (charge_dir / "charge.toml").read_text()
    found = '[guards.found]\nkind = "compare"\nfact = "outcome"\nop = "="\nvalue = "present"'
    assert found in text
    (charge_dir / "running.toml").write_text(
        text.replace(
            found, '[guards.found]\nkind = "compare"\nfact = "running"\nop = "="\nvalue = false'
        )
    )
    db = charge_dir / "running.sqlite"
    for command in (["check"], ["verify", "--db", f"sqlite:///{db}"], ["campaign"]):
        result = CliRunner().invoke(
            main, [command[0], str(charge_dir / "running.toml"), *command[1:]]
        )
        assert result.exit_code != 0, (command, result.output)
        assert "guard 'found' reads the fact 'running'" in result.output, result.output
        assert "compare 'outcome'" in result.output and "Traceback" not in result.output
    assert not db.exists()  # refused before anything was made


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(EntityModelConfig(workers=2), id="K2"),
        pytest.param(EntityModelConfig(workers=3), id="K3"),
        pytest.param(EntityModelConfig(keys=2, epochs=2), id="two-orders", marks=pytest.mark.slow),
    ],
)
def test_spin_stores_exactly_the_builtin_engines_states_with_a_remote(
    charge_dir: Path, config: EntityModelConfig
) -> None:
    """The Promela twin states the remote field for field (per row, requests in flight
    and taken effect, counted by epoch; per client, its request's phase; the overlap)."""
    needs_spin()
    spec = load_spec(charge_dir / "charge.toml")
    theirs, run = spin_check(spec, config)
    ours = Checker(entity_model(spec, config)).symmetry(False).run()
    assert (theirs.unique, theirs.depth, theirs.verdict) == (ours.unique, ours.depth, "ok")
    assert theirs.complete and run.state_vector_bytes > 0
    assert "byte fly[" in promela(spec, config).text


def test_spin_gives_the_same_verdict_against_every_remote(charge_dir: Path) -> None:
    """Each tier's verdict, and each counterexample SPIN finds replays on the built-in
    model, breadth-first in both: the same length."""
    needs_spin()
    for name, remote in (
        ("charge.toml", "plain"),
        ("charge.toml", "dedup"),
        ("unfenced.toml", "fencing"),
        ("unfenced.toml", "dedup"),
        ("unfenced.toml", "plain"),
    ):
        spec = load_spec(charge_dir / name)
        config = EntityModelConfig(remote=remote)
        theirs, _ = spin_check(spec, config)
        ours = Checker(entity_model(spec, config)).symmetry(False).run()
        assert theirs.verdict == ours.verdict == "violated", (name, remote)
        assert (theirs.deadlock is None) == (ours.deadlock is None), (name, remote)
        for prop, found in theirs.discoveries.items():
            if found.property.kind != "always":
                continue
            assert len(found.path) == len(ours.discoveries[prop].path), (name, remote, prop)
            steps = replay(theirs.model, found.token)
            assert [s.state for s in steps] == [s.state for s in found.path]


def test_liveness_with_a_remote_decides_alike_in_both_engines(charge_dir: Path) -> None:
    """An unknown charge is resolved when readback and the operator's fence are fair: a
    request in flight may never land, and only the fence drops it. Without the fence
    assumed fair, both engines find the run that starves."""
    needs_spin()
    base = FILES["charge.toml"].split("[world]")[0]
    for fair, verdict in (
        ('["found", "missing", "fence"]', "ok"),
        ('["found", "missing"]', "violated"),
    ):
        path = charge_dir / "live.toml"
        path.write_text(
            base
            + "[invariants.unknown_resolved]\n"
            + 'kind = "eventually"\nfrom = ["unknown"]\nto = ["charged", "idle"]\n'
            + f'fair = {fair}\nmeaning = "an unknown charge is resolved by readback"\n'
        )
        spec = load_spec(path)
        theirs, _ = spin_check(spec, EntityModelConfig())
        ours = Checker(entity_model(spec)).symmetry(False).run()
        assert theirs.verdict == ours.verdict == verdict, fair
        assert ("unknown_resolved" in ours.discoveries) == (verdict == "violated")


def test_the_sequence_chart_draws_the_remote(charge_dir: Path) -> None:
    needs_dot()
    out = charge_dir / "drawn"
    result = CliRunner().invoke(
        main, ["check", str(charge_dir / "unfenced.toml"), "--diagram", str(out)]
    )
    assert result.exit_code == 1, result.output
    chart = (out / "unfenced-charged_once-sequence.svg").read_text()
    assert "charge store" in chart and "executor" not in chart
    assert "request e1 in flight" in chart and "effect: charge 0 (e1)" in chart
    assert "duplicate effect of charge 0 (e2)" in chart
    mermaid = (out / "unfenced-charged_once-sequence.mmd").read_text()
    assert "worker0->>remote" in mermaid and "participant remote as remote" in mermaid


def test_the_store_takes_readback_facts_and_records_them(charge_dir: Path, url: str) -> None:
    spec = load_spec(charge_dir / "charge.toml")
    store = open_entity_store(spec, url)
    try:
        handle = store.take("order-1", "take", owner="worker-1", lease_seconds=30)
        store.act(store.act(handle, "send", lease_seconds=30), "give_up")
        with pytest.raises(InsufficientEvidence, match="fence the processor through this epoch"):
            store.operate("order-1", "missing", facts={"outcome": "absent", "fenced_through": 0})
        for bad in ({"outcome": "maybe"}, {"remote_dedups": "yes"}, {"weather": 1}):
            with pytest.raises(InvalidArgument, match=r"fact"):
                store.operate("order-1", "missing", facts=bad)
        assert store.row("order-1").state == "unknown"  # type: ignore[union-attr]
        facts: dict[str, Any] = {"outcome": "absent", "fenced_through": 1}
        assert store.operate("order-1", "missing", facts=facts) == "idle"
        assert store.history("order-1")[-1].facts == facts
        again = store.take("order-1", "take", owner="worker-2", lease_seconds=30)
        store.act(store.act(again, "send", lease_seconds=30), "give_up")
        store.operate("order-1", "found", facts={"outcome": "present"})
        assert store.row("order-1").state == "charged"  # type: ignore[union-attr]
    finally:
        store.close()


def test_the_store_agrees_with_the_model_of_a_remote(charge_dir: Path, url: str) -> None:
    """The generated stateful test plays the remote's steps (send, land, answer) on the
    model and readback's truthful facts on the store."""
    spec = load_spec(charge_dir / "charge.toml")
    result = verify(
        spec, lambda clock: open_entity_store(spec, url, clock=clock), examples=10, steps=25
    )
    assert result.ok, "\n".join([result.failure, *result.program])
    assert result.guided > 0 and result.steps_run > 0


def test_the_wrong_design_fails_on_the_store_as_on_the_model(charge_dir: Path) -> None:
    spec = load_spec(charge_dir / "unfenced.toml")
    db = charge_dir / "v.sqlite"
    result = verify(
        spec, lambda clock: open_entity_store(spec, f"sqlite:///{db}", clock=clock), examples=1
    )
    assert not result.ok and "one_request_at_a_time violated" in result.failure
    assert "the declaration itself breaks it" in result.failure
    assert any("sends its request to the remote" in line for line in result.program)


#: The README's charge, with a resend: against a deduplicating processor, an unknown
#: charge is sent again with the order's key by a worker that takes the epoch over.
RETRY = (
    FILES["charge.toml"]
    .split("[world]")[0]
    .replace('events = ["found", "missing"]', 'events = ["found", "missing", "retry"]')
    + """
[guards.dedups]
kind = "compare"
fact = "remote_dedups"
op = "="
value = true
meaning = "the processor deduplicates by the order's key"
refusal = "InsufficientEvidence"

[events.retry]
by = "operator"
sets = ["owner", "fresh_token", "lease"]
remote = "resends"
durable = true  # the send follows at once

[[transitions]]
event = "retry"
source = "unknown"
dest = "charging"
guards = ["current", "dedups"]

[world]
remote = "dedup"
"""
)


@pytest.fixture
def retry_spec(tmp_path: Path) -> Spec:
    path = tmp_path / "retry.toml"
    path.write_text(RETRY)
    return load_spec(path)


def test_a_resend_resolves_unknown_against_a_deduplicating_processor(
    retry_spec: Spec, tmp_path: Path
) -> None:
    """With the resend, the correct design no longer waits in unknown for ever against a
    deduplicating processor, and still charges once; the same resend without the dedup
    guard, against a fencing processor, charges twice (two requests of one epoch: the
    fence cannot tell them apart)."""
    found = verdicts(retry_spec, "dedup")
    assert all(found.values()), found
    model = entity_model(retry_spec)
    start = next(iter(model.init_states()))
    seen, queue, resent_and_charged = {start}, [start], False
    for world in queue:
        for action in model.actions(world):
            after = model.next_state(world, action)
            if after is None or after in seen:
                continue
            if after.rows[0].state == "charged" and any(
                h is not None and h.token > 1 for h in world.clients
            ):
                resent_and_charged = True
            seen.add(after)
            queue.append(after)
    assert resent_and_charged
    anyway = tmp_path / "anyway.toml"
    anyway.write_text(RETRY.replace('guards = ["current", "dedups"]', 'guards = ["current"]'))
    found = verdicts(load_spec(anyway), "fencing")
    assert not found["charged_once"] and found["one_request_at_a_time"], found


@pytest.mark.parametrize("workers", [2, 3])
def test_spin_reaches_the_same_states_with_a_resend(retry_spec: Spec, workers: int) -> None:
    needs_spin()
    config = EntityModelConfig(workers=workers)
    theirs, _ = spin_check(retry_spec, config)
    ours = Checker(entity_model(retry_spec, config)).symmetry(False).run()
    assert (theirs.unique, theirs.depth, theirs.verdict) == (ours.unique, ours.depth, "ok")


def test_the_store_hands_the_resender_the_epoch(retry_spec: Spec, url: str) -> None:
    store = open_entity_store(retry_spec, url)
    try:
        first = store.take("order-1", "take", owner="worker-1", lease_seconds=30)
        first = store.act(first, "send", lease_seconds=30)
        store.act(first, "give_up")
        with pytest.raises(InvalidArgument, match=r"use take_over\(key, event\)"):
            store.operate("order-1", "retry", facts={"remote_dedups": True})
        for wrong_call in (lambda: store.act(first, "retry"), lambda: store.take("o", "retry")):
            with pytest.raises(
                InvalidArgument, match=r"operator's, .* use take_over\(key, event\)"
            ):
                wrong_call()
        with pytest.raises(InsufficientEvidence):
            store.take_over("order-1", "retry", facts={"remote_dedups": False})
        again = store.take_over(
            "order-1", "retry", owner="worker-2", lease_seconds=30, facts={"remote_dedups": True}
        )
        assert (again.epoch, again.state) == (first.epoch, "charging")
        assert again.token != first.token
        with pytest.raises(StaleClaim):
            store.act(first, "answer")  # the handle it replaced is stale, and recorded
        assert store.history("order-1")[-1].refused == "holder"
        assert store.act(again, "answer").state == "charged"
        row = store.row("order-1")
        assert row is not None and row.owner == "worker-2"
        with pytest.raises(InvalidArgument, match="draws no fresh token"):
            store.take_over("order-1", "found")
    finally:
        store.close()


def test_the_store_agrees_with_the_model_of_a_resend(retry_spec: Spec, url: str) -> None:
    _agrees(retry_spec, url)


def _agrees(spec: Spec, url: str) -> None:
    """The generated stateful test of ``spec`` passes against the store at ``url``."""
    result = verify(
        spec, lambda clock: open_entity_store(spec, url, clock=clock), examples=10, steps=25
    )
    assert result.ok, "\n".join([result.failure, *result.program])


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        ('by = "operator"\nsets', 'by = "owner"\nsets', "is the owner's: a resend names"),
        ('sets = ["owner", "fresh_token", "lease"]', 'sets = ["lease"]', "it sets fresh_token"),
        (
            'dest = "charging"\nguards = ["current", "dedups"]',
            'dest = "idle"\nguards = ["current", "dedups"]',
            "resends into ['idle']",
        ),
    ],
)
def test_a_resend_it_cannot_run_is_refused_by_name(
    tmp_path: Path, old: str, new: str, says: str
) -> None:
    assert old in RETRY
    path = tmp_path / "retry.toml"
    path.write_text(RETRY.replace(old, new, 1))
    result = CliRunner().invoke(main, ["check", str(path)])
    assert result.exit_code == 1 and says in result.output, result.output
    assert "Traceback" not in result.output


def test_retries_bound_the_resends_of_an_epoch(retry_spec: Spec, tmp_path: Path) -> None:
    """``[world] retries`` bounds a lifecycle's resends per epoch as it bounds the claim
    world's retries: more allowed, more states; none allowed, no resend explored, and the
    state it stops in is no deadlock. SPIN's twin keeps the same count per row."""
    counts = {}
    for retries in (0, 1, 2):
        model = entity_model(retry_spec, EntityModelConfig(retries=retries))
        found = Checker(model).symmetry(False).run()
        assert found.verdict == "ok" and found.deadlock is None, retries
        counts[retries] = found.unique
        resent = {w.rows[0].resent for w in _reachable(model)}
        assert resent == set(range(retries + 1)), (retries, resent)
    assert counts[0] < counts[1] < counts[2]
    result = CliRunner().invoke(main, ["check", str(tmp_path / "retry.toml"), "--retries", "2"])
    assert result.exit_code == 0, result.output
    assert "2 resends per charge's epoch" in result.output
    # a lifecycle without resends takes no retries, by flag or by declaration
    with pytest.raises(InvalidArgument, match="declares no resends event"):
        EntityModelConfig(retries=1).resolved(shipped()["job"])
    result = CliRunner().invoke(main, ["check", "job", "--retries", "1"])
    assert result.exit_code == 2 and "--retries where an event resends" in result.output
    job = (Path(__file__).parent.parent / "specs" / "job.toml").read_text()
    (tmp_path / "job.toml").write_text(job.replace("\n[world]\n", "\n[world]\nretries = 1\n"))
    result = CliRunner().invoke(main, ["check", str(tmp_path / "job.toml")])
    assert result.exit_code != 0 and "retries when an event resends" in result.output


@pytest.mark.parametrize("retries", [0, 2])
def test_spin_bounds_resends_alike(retry_spec: Spec, retries: int) -> None:
    needs_spin()
    config = EntityModelConfig(retries=retries)
    theirs, _ = spin_check(retry_spec, config)
    ours = Checker(entity_model(retry_spec, config)).symmetry(False).run()
    assert (theirs.unique, theirs.depth, theirs.verdict) == (ours.unique, ours.depth, "ok")
    assert "byte rs" in promela(retry_spec, config).text


#: Every world a (small) model reaches, breadth-first.
_reachable = reachable


#: The resend with a fresh request key (``fresh_key``): the claim's known-wrong
#: ``fresh_key_retry``, declared for a lifecycle of your own.
FRESH = RETRY.replace(
    'sets = ["owner", "fresh_token", "lease"]\nremote = "resends"',
    'sets = ["owner", "fresh_token", "lease", "fresh_key"]\nremote = "resends"',
)


#: ``FRESH`` without the invariant the fresh key breaks (charged_once), to run it through.
UNGUARDED = FRESH.replace(
    "[invariants.charged_once]"
    + FILES["charge.toml"].split("[invariants.charged_once]")[1].split("\n\n")[0]
    + "\n\n",
    "",
)


@pytest.fixture
def fresh_spec(tmp_path: Path) -> Spec:
    assert FRESH != RETRY and "charged_once" not in UNGUARDED
    path = tmp_path / "fresh.toml"
    path.write_text(FRESH)
    return load_spec(path)


def test_a_resend_with_a_fresh_key_charges_twice_at_a_deduplicating_processor(
    fresh_spec: Spec,
) -> None:
    """The same resend under a new request key: the deduplicating processor cannot match
    it with the request still in flight, so both take effect (the claim's
    ``fresh_key_retry``). The counterexample shows the two keys; readback then asks about
    the new key, not the one that took effect."""
    found = verdicts(fresh_spec, "dedup")
    assert not found["charged_once"], found
    assert found["stale_operations_change_nothing"] and found["unknown_left_by_readback"]
    model = entity_model(fresh_spec)
    report = Checker(model).run()
    path = report.discoveries["charged_once"].path
    lands = [model.show_action(s.action) for s in path if s.action and s.action[0] == "land"]
    assert any("(key k1)" in said for said in lands) and any("key" not in said for said in lands), (
        lands
    )
    last = path[-1].state.rows[0]
    assert last.request_key == 1 and {k for _, k in last.landed} == {0, 1}


def test_spin_reaches_the_same_states_with_a_fresh_key(fresh_spec: Spec) -> None:
    """The Promela twin keeps each request by epoch and request key, and the row's key:
    without the invariant the fresh key breaks, the same states as the built-in engine
    (keys drawn and sent); with it, the same shortest counterexample."""
    needs_spin()
    unguarded = load_spec_text(UNGUARDED)
    theirs, _ = spin_check(unguarded)
    model = entity_model(unguarded)
    ours = Checker(model).symmetry(False).run()
    assert (theirs.unique, theirs.depth, theirs.verdict) == (ours.unique, ours.depth, "ok")
    assert any(w.rows[0].request_key == 1 for w in _reachable(model))
    theirs, _ = spin_check(fresh_spec)
    ours = Checker(entity_model(fresh_spec)).symmetry(False).run()
    assert theirs.verdict == ours.verdict == "violated"
    assert len(theirs.discoveries["charged_once"].path) == len(
        ours.discoveries["charged_once"].path
    )
    assert "byte kg" in promela(fresh_spec).text
    assert "byte kg" not in promela(load_spec_text(RETRY)).text


def load_spec_text(text: str) -> Spec:
    """A declaration from its text (read at once, so its file need not outlive it)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "variant.toml"
        path.write_text(text)
        return load_spec(path)


def test_the_store_draws_a_request_key_for_a_fresh_key_resend(fresh_spec: Spec, url: str) -> None:
    """The store keeps the request key the declaration's ``fresh_key`` draws: the handle
    says which key its request carries (the order's own until one is drawn), the row and
    each history entry record it, the listing shows it, and the audit judges it: only an
    event declared ``fresh_key`` changes it, and such an event must draw a new one."""
    store = open_entity_store(fresh_spec, url)
    try:
        first = store.act(store.take("order-1", "take", owner="w1", lease_seconds=30), "send")
        assert first.request_key == "order-1"
        store.act(first, "give_up")
        again = store.take_over(
            "order-1", "retry", owner="w2", lease_seconds=30, facts={"remote_dedups": True}
        )
        assert again.request_key.startswith("cf-fresh-") and len(again.request_key) == 41
        assert store.act(again, "answer").request_key == again.request_key
        row = store.row("order-1")
        assert row is not None and row.request_key == again.request_key
        recorded = [(e.event, e.request_key) for e in store.history("order-1")]
        assert recorded == [
            ("take", ""),
            ("send", ""),
            ("give_up", ""),
            ("retry", again.request_key),
            ("answer", again.request_key),
        ]
        assert audit_store(store).ok
        listed = CliRunner().invoke(main, ["history", str(fresh_spec.path), "--db", url])
        assert listed.exit_code == 0 and "request key" in listed.output, listed.output
        assert again.request_key in listed.output
        # an entry whose request key changed by an event that draws none is found
        store._driver.rerun(
            lambda tx: tx.run(
                store._sql["append"],
                (
                    "order-2",
                    1,
                    "take",
                    "idle",
                    "held",
                    2e6,
                    None,
                    "-",
                    None,
                    "{}",
                    "w",
                    "forged",
                    "",
                ),
            )
        )
        found = {(v.kind, v.target_id) for v in audit_store(store).violations}
        assert ("request_key", "order-2") in found, found
    finally:
        store.close()


def test_a_store_gains_the_request_key_when_its_declaration_draws_one(
    fresh_spec: Spec, url: str
) -> None:
    """A store made by the declaration without ``fresh_key`` is opened by the one with it:
    its row table gains the column, its rows carry the order's own key, and the resend
    draws a new one. (The audit judges history by the declaration it is given: a resend
    recorded before would be called one that drew no key.)"""
    plain = load_spec_text(RETRY)
    store = open_entity_store(plain, url)
    handle = store.act(store.take("order-1", "take", lease_seconds=30), "send")
    assert handle.request_key == "order-1"  # no fresh_key: the order's own
    store.act(handle, "give_up")
    store.close()
    # read-only, before the store is opened by it: a row without the column keeps its own
    assert audit_lifecycle(fresh_spec, url).ok
    store = open_entity_store(fresh_spec, url)
    try:
        row = store.row("order-1")
        assert row is not None and row.request_key == "order-1"
        again = store.take_over("order-1", "retry", facts={"remote_dedups": True})
        assert again.request_key not in ("order-1", "")
        assert audit_store(store).ok
    finally:
        store.close()


def test_the_store_agrees_with_the_model_of_a_fresh_key_resend(url: str) -> None:
    """The generated stateful test compares the store's request keys with the model's:
    a key the model draws is one the store never held, and each request carries the key
    the model says (the charge's charged_once left out, which the fresh key breaks)."""
    _agrees(load_spec_text(UNGUARDED), url)


#: The README's charge whose readback records its outcome in the row (``outcome``).
RECORDED = FILES["charge.toml"].replace(
    "\n[[transitions]]\n",
    '\n[events.found]\nsets = ["outcome"]\n\n[events.missing]\nsets = ["outcome"]\n'
    "\n[[transitions]]\n",
    1,
)


def _forged_outcome_is_found(store: Any) -> None:
    """The row's outcome forged to ``present`` behind the store: the audit finds the row
    is not what its history leaves."""
    m = store._driver.marker
    store._driver.rerun(
        lambda tx: tx.run(
            f"UPDATE {store.table} SET outcome = {m} WHERE key = {m}",  # noqa: S608
            ("present", "order-1"),
        )
    )
    found = [(v.kind, v.target_id) for v in audit_store(store).violations]
    assert found == [("row_disagrees", "order-1")], found


def test_readback_s_outcome_recorded_in_the_row_is_checked_and_stored(url: str) -> None:
    """An event declared ``outcome`` records readback's outcome in the row until a take
    begins the next epoch: the model keeps it (and SPIN's twin, state for state), the
    store writes what the caller brought and refuses the event without it, the audit
    replays it from history, and verify compares it step by step."""
    assert FILES["charge.toml"] != RECORDED
    spec = load_spec_text(RECORDED)
    model = entity_model(spec)
    recorded = {(w.rows[0].state, w.rows[0].outcome) for w in _reachable(model)}
    assert ("charged", "present") in recorded and ("idle", "absent") in recorded
    assert ("held", "") in recorded and ("held", "absent") not in recorded  # a take clears it
    plain = Checker(entity_model(load_spec_text(FILES["charge.toml"]))).symmetry(False).run()
    ours = Checker(model).symmetry(False).run()
    assert ours.verdict == "ok" and ours.unique > plain.unique
    if spin_available() is None:
        theirs, _ = spin_check(spec)
        assert (theirs.unique, theirs.depth) == (ours.unique, ours.depth)
        assert "byte oc" in promela(spec).text
    store = open_entity_store(spec, url)
    try:
        handle = store.act(store.take("order-1", "take", lease_seconds=30), "send")
        store.act(handle, "give_up")
        with pytest.raises(InvalidArgument, match="records readback's outcome"):
            store.operate("order-1", "missing", facts={"fenced_through": 1})
        store.operate("order-1", "missing", facts={"outcome": "absent", "fenced_through": 1})
        assert store.row("order-1").outcome == "absent"  # type: ignore[union-attr]
        store.take("order-1", "take", lease_seconds=30)
        assert store.row("order-1").outcome is None  # type: ignore[union-attr]
        assert audit_store(store).ok
        _forged_outcome_is_found(store)
    finally:
        store.close()
    _agrees(spec, url)


def test_recording_an_outcome_or_drawing_a_key_needs_a_remote(tmp_path: Path) -> None:
    """Both are about requests to a remote: without one, every command names the event and
    what to do, and the store creates nothing."""
    job = (Path(__file__).parent.parent / "specs" / "job.toml").read_text()
    for effect in ("outcome", "fresh_key"):
        path = tmp_path / f"job-{effect}.toml"
        path.write_text(job.replace('sets = ["lease"', f'sets = ["{effect}", "lease"', 1))
        assert path.read_text() != job
        db = f"sqlite:///{tmp_path / 'job.sqlite'}"
        for command in (["check", str(path)], ["verify", str(path), "--db", db]):
            result = CliRunner().invoke(main, command)
            assert result.exit_code != 0, result.output
            assert f"sets {effect}" in result.output and "no event declares a remote" in (
                result.output
            ), result.output
            assert "Traceback" not in result.output
        assert not (tmp_path / "job.sqlite").exists()


#: The README's charge with a request key per attempt: the owner's send draws one.
PER_ATTEMPT = FILES["charge.toml"].replace(
    '[events.send]\nwork = "starts"', '[events.send]\nwork = "starts"\nsets = ["fresh_key"]', 1
)


def test_a_request_key_per_attempt(url: str) -> None:
    """An owner's event may draw the key (a key per attempt): the request it then sends
    carries it. Fenced, the charge still happens once; deduplicating, the key no longer
    joins two attempts, so what fencing would have stopped is charged twice. SPIN's twin
    reaches the same states; the store hands the sender its new key, and the generated
    stateful test agrees with the model."""
    assert FILES["charge.toml"] != PER_ATTEMPT
    spec = load_spec_text(PER_ATTEMPT)
    assert all(verdicts(spec, "fencing").values())
    unfenced = load_spec_text(
        PER_ATTEMPT.replace(
            'guards = ["current", "not_found", "fenced"]', 'guards = ["current", "not_found"]'
        )
    )
    assert not verdicts(unfenced, "dedup")["charged_once"]  # the order's own key: once
    if spin_available() is None:
        theirs, _ = spin_check(spec)
        ours = Checker(entity_model(spec)).symmetry(False).run()
        assert (theirs.unique, theirs.depth, theirs.verdict) == (ours.unique, ours.depth, "ok")
    store = open_entity_store(spec, url)
    try:
        first = store.act(store.take("order-1", "take", lease_seconds=30), "send")
        assert first.request_key.startswith("cf-fresh-")
        assert store.row("order-1").request_key == first.request_key  # type: ignore[union-attr]
    finally:
        store.close()
    _agrees(spec, url)


def test_one_edit_of_an_effect_reaches_the_sql_the_model_and_the_promela() -> None:
    """``fresh_key`` added to the resend's ``sets`` and nothing else: the store's compiled
    write of that event draws the key (and no other event's changes), the model's row
    draws it, and SPIN's twin keeps it."""
    from claimfsm.store._entity_sql import compile_event

    before, after = load_spec_text(RETRY), load_spec_text(FRESH)
    for event in before.events:
        old, new = (compile_event(s, event, "t").sql for s in (before, after))
        assert (old != new) == (event == "retry"), event
        assert ("request_key = ?" in new) == (event == "retry"), new
    drawn = {w.rows[0].request_key for w in _reachable(entity_model(after))}
    assert drawn == {0, 1} and {
        w.rows[0].request_key for w in _reachable(entity_model(before))
    } == {0}
    assert "kg" in promela(after).text and "kg" not in promela(before).text


#: The recorded charge with examples that ask for readback's word: charged on readback,
#: and called missing; and one no run reaches (missing leads to idle, found to charged).
EXAMPLES = RECORDED.replace(
    "\n[world]\n",
    '\n[invariants.found_on_readback]\nkind = "reachable"\nstates = ["charged"]\n'
    'outcome = "present"\nmeaning = "a charge found on readback"\n'
    '\n[invariants.missing_on_readback]\nkind = "reachable"\nstates = ["idle"]\n'
    'outcome = "absent"\nmeaning = "a charge called missing on readback"\n'
    '\n[invariants.{impossible}]\nkind = "reachable"\nstates = ["charged"]\n'
    'outcome = "absent"\nmeaning = "charged, with readback saying absent"\n'
    "\n[world]\n",
    1,
)


def test_an_example_may_ask_for_readback_s_outcome() -> None:
    """Where a row records readback's outcome, a ``reachable`` example may name it, as the
    claim's ``reconciled_present`` does: every search and SPIN meet the reachable ones (the
    built-in one on a path that ends with readback's event) and neither meets charged
    with readback saying absent. Without an event recording the outcome, the example is
    refused by name."""
    assert "impossible" not in RECORDED and "{impossible}" in EXAMPLES
    spec = load_spec_text(EXAMPLES.replace("{impossible}", "charged_but_absent"))
    model = entity_model(spec)
    ours = Checker(model).symmetry(False).run()
    outcomes = {p.name: ours.outcome(p) for p in model.properties if p.kind == "sometimes"}
    assert outcomes == {
        "charges": "found",
        "gives_up": "found",
        "found_on_readback": "found",
        "missing_on_readback": "found",
        "charged_but_absent": "never happens",
    }, outcomes
    for other in (Checker(model).arrays(False), Checker(model).packed(False)):
        theirs = other.symmetry(False).run()
        assert {p.name: theirs.outcome(p) for p in model.properties} == {
            p.name: ours.outcome(p) for p in model.properties
        }
    found = ours.discoveries["found_on_readback"].path
    last = found[-1].state.rows[0]
    assert (last.state, last.outcome) == ("charged", "present")
    assert "found" in model.show_action(found[-1].action)  # readback, not the answer
    if spin_available() is None:
        theirs, _ = spin_check(spec)
        assert theirs.unique == ours.unique
        met = set(theirs.reached) | set(theirs.discoveries)
        assert "charged_but_absent" not in met
        assert {"found_on_readback", "missing_on_readback"} <= met, met
    plain = FILES["charge.toml"] + (
        '\n[invariants.found_on_readback]\nkind = "reachable"\nstates = ["charged"]\n'
        'outcome = "present"\nmeaning = "a charge found on readback"\n'
    )
    with pytest.raises(SpecError, match="no row records readback's outcome"):
        entity_model(load_spec_text(plain))


def test_a_checkpoint_carries_readback_s_recorded_outcome(url: str) -> None:
    """Pruning records the outcome the row holds as of its last removed entry in the
    checkpoint, so the audit still compares it with the row after history was pruned."""
    from claimfsm.verify import ManualClock

    clock = ManualClock()
    store = open_entity_store(load_spec_text(RECORDED), url, clock=clock)
    try:
        handle = store.act(store.take("order-1", "take", lease_seconds=30), "send")
        store.act(handle, "give_up")
        store.operate("order-1", "missing", facts={"outcome": "absent", "fenced_through": 1})
        clock.advance(100)
        store.prune_history(50)
        [point] = store.history("order-1")
        assert (point.event, point.facts) == ("checkpoint", {"outcome": "absent"})
        assert audit_store(store).ok
        _forged_outcome_is_found(store)
    finally:
        store.close()
