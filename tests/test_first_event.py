"""``first`` on an event, for a lifecycle of your own: the job's ``lease`` declared with
``first = "lapse"`` takes over a job whose lease lapsed in one step (the sweep's lapse,
then the lease, in one transaction), where ``job.toml`` leaves it to the sweep. The store
(both backends), the checker's model, its SPIN twin and ``claimfsm verify`` read the one
key; each test fails without what it names. (The claim protocol's acquire declares the
same: tests/test_event_effects.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from claimfsm.checker import Checker, EntityModelConfig, Report, entity_model, spin_check
from claimfsm.errors import IllegalTransition, SpecError, TargetBusy
from claimfsm.spec import Spec, declarations_dir, load_spec
from claimfsm.store import open_entity_store
from claimfsm.verify import ManualClock, verify

from .conftest import needs_spin

JOB = (declarations_dir() / "job.toml").read_text()
LEASE = '[events.lease]\nby = "taker"'


def job(tmp_path: Path, first: bool, extra: str = "") -> Spec:
    assert JOB.count(LEASE) == 1
    text = JOB.replace(LEASE, LEASE + ('\nfirst = "lapse"' if first else "") + extra)
    path = tmp_path / f"job-first-{first}.toml"
    path.write_text(text)
    return load_spec(path)


def test_the_store_lapses_first_and_keeps_both_or_neither(tmp_path: Path, url: str) -> None:
    for first in (True, False):
        clock = ManualClock()
        store = open_entity_store(job(tmp_path, first), url, clock=clock, prefix=f"f{int(first)}")
        store.take("j", "lease", owner="a", lease_seconds=30)
        clock.advance(31)  # the lease lapses; no sweep runs
        if first:
            taken = store.take("j", "lease", owner="b", lease_seconds=30)
            assert (taken.epoch, taken.state) == (2, "leased")
            assert [(h.epoch, h.event, h.source, h.dest) for h in store.history("j")] == [
                (1, "lease", "queued", "leased"),
                (1, "lapse", "leased", "queued"),
                (2, "lease", "queued", "leased"),
            ]
            # the third attempt's lease lapses too: after the lapse, the lease is refused
            # (attempts spent), so the lapse is undone with it: nothing is written
            clock.advance(31)
            assert store.take("j", "lease", owner="c", lease_seconds=30).epoch == 3
            clock.advance(31)
            seen = len(store.history("j"))
            with pytest.raises(TargetBusy, match="attempts_left"):
                store.take("j", "lease", owner="d", lease_seconds=30)
            row = store.row("j")
            assert row is not None and (row.state, row.epoch) == ("leased", 3)
            assert len(store.history("j")) == seen
        else:
            with pytest.raises(IllegalTransition, match="is leased: lease is not declared"):
                store.take("j", "lease", owner="b", lease_seconds=30)
            assert store.operate("j", "lapse") == "queued"
            assert store.take("j", "lease", owner="b", lease_seconds=30).epoch == 2
        store.drop()
        store.close()


def test_the_model_takes_over_in_one_step_and_says_so(tmp_path: Path) -> None:
    for first in (True, False):
        model = entity_model(job(tmp_path, first), EntityModelConfig(workers=2))
        world = next(iter(model.init_states()))
        for action in (("take", 0, 0, "lease"), ("clock", 0)):
            nxt = model.next_state(world, action)
            assert nxt is not None
            world = nxt
        over = model.next_state(world, ("take", 1, 0, "lease"))
        assert (over is not None) == first
        if over is not None:
            assert (over.rows[0].state, over.rows[0].epoch) == ("leased", 2)
            assert model.explain is not None
            parts = model.explain(world, ("take", 1, 0, "lease"), over)
            assert [text for text, _ in parts] == [
                "store: lapse job 0 first, inside lease (leased -> queued)",
                "worker 1: lease job 0",
            ]
        report = Checker(model).exhaustive().run()
        assert report.complete and report.verdict == "ok"


LAPSE = '[events.lapse]\nby = "sweep"'


def both_engines(path: Path, text: str, counts: int) -> tuple[Report, Report]:  # type: ignore[type-arg]
    """The built-in engine's report and SPIN's on the declaration ``text``, written to
    ``path``, with counters bounded by ``counts``."""
    path.write_text(text)
    spec = load_spec(path)
    config = EntityModelConfig(counts=counts)
    return Checker(entity_model(spec, config)).exhaustive().run(), spin_check(spec, config)[0]


@pytest.mark.parametrize(
    "writes",
    ["", '\nsets = ["fresh_token"]', '\nbumps = ["attempts"]'],
    ids=["state", "token", "bump"],
)
def test_spin_takes_the_same_steps_as_the_builtin_engine(tmp_path: Path, writes: str) -> None:
    """SPIN's transitions (stored + matched) exceed the built-in engine's generated states
    by the same few (its start and end, and steps a bound cuts) with and without
    ``first``: the twin takes exactly the steps the built-in model takes, the takeovers
    included, also where the first event writes a fresh token or a counter."""
    needs_spin()
    counts = {}
    for first in (True, False):
        text = Path(job(tmp_path, first).path or "").read_text()
        assert text.count(LAPSE) == 1
        path = tmp_path / f"writes-{first}.toml"
        builtin, spin = both_engines(path, text.replace(LAPSE, LAPSE + writes), 3)
        assert spin.unique == builtin.unique and spin.verdict == builtin.verdict == "ok"
        counts[first] = (builtin.states, spin.states)
    assert counts[True][0] > counts[False][0]  # the takeovers are steps of their own
    assert counts[True][1] - counts[True][0] == counts[False][1] - counts[False][0]


FEW_LAPSES = """[columns.lapses]
meaning = "leases that lapsed so far"
default = 0

[guards.few_lapses]
kind = "compare"
column = "lapses"
op = "<"
value = 2
meaning = "fewer than two leases lapsed"
refusal = "TargetBusy"

"""


def test_spin_reads_the_row_the_first_event_left(tmp_path: Path) -> None:
    """The lease is refused once two leases lapsed (a column the lapse bumps): a takeover
    reads the row after its first lapse, so a job whose second lease lapses is never
    leased again, a deadlock both engines find. SPIN's trail there is replayed on the
    built-in model (``spin_check`` raises when they disagree), so a twin that read the
    row as it was before the lapse fails here."""
    needs_spin()
    text = (
        Path(job(tmp_path, True).path or "")
        .read_text()
        .replace("[columns.attempts]", FEW_LAPSES + "[columns.attempts]")
        .replace(LAPSE, LAPSE + '\nbumps = ["lapses"]')
        .replace('"job_queued", "attempts_left"]', '"job_queued", "attempts_left", "few_lapses"]')
    )
    builtin, spin = both_engines(tmp_path / "few-lapses.toml", text, 3)
    assert builtin.deadlock is not None and spin.deadlock is not None
    assert spin.verdict == builtin.verdict == "violated"


def test_spin_cuts_a_takeover_where_the_first_events_counter_passes_the_bound(
    tmp_path: Path,
) -> None:
    """Leases that do not count attempts, and a lapse that counts itself: the takeover
    whose lapse passes the counter bound is cut by both engines (the built-in model checks
    the row the whole step leaves), so both store the same states."""
    needs_spin()
    lease = '[events.lease]\nby = "taker"\nsets = ["lease"]\nbumps = ["attempts"]'
    text = Path(job(tmp_path, False).path or "").read_text()
    assert text.count(lease) == 1 and text.count(LAPSE) == 1
    text = (
        text.replace("[columns.attempts]", FEW_LAPSES.split("[guards")[0] + "[columns.attempts]")
        .replace(LAPSE, LAPSE + '\nbumps = ["lapses"]')
        .replace(lease, '[events.lease]\nby = "taker"\nsets = ["lease"]\nfirst = "lapse"')
    )
    builtin, spin = both_engines(tmp_path / "counted-lapses.toml", text, 2)
    assert builtin.complete and spin.complete
    assert spin.unique == builtin.unique


def test_verify_finds_the_store_agreeing_with_the_model(tmp_path: Path) -> None:
    spec = job(tmp_path, True)
    url = f"sqlite:///{tmp_path / 'verify.sqlite'}"
    result = verify(
        spec,
        lambda clock: open_entity_store(spec, url, clock=clock, prefix="verify"),
        examples=20,
        steps=20,
    )
    assert result.ok, result.failure + "\n" + "\n".join(result.program)


def test_first_is_checked_where_it_is_declared(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="must be the sweep's"):
        job(tmp_path, False, '\nfirst = "requeue"')
    with pytest.raises(SpecError, match="leaves \\['queued'\\], where the key is already free"):
        job(tmp_path, False, '\nfirst = "bury"')
    release = '[events.release]\nby = "owner"'
    assert JOB.count(release) == 1
    path = tmp_path / "release-first.toml"
    path.write_text(JOB.replace(release, release + '\nfirst = "lapse"'))
    with pytest.raises(SpecError, match="both leave \\['leased'\\]; the event applied first"):
        load_spec(path)
