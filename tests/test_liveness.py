"""Liveness: ``eventually`` properties under weak fairness, in the built-in engine.

A toy model first, where each answer is known by hand: a loop that a fair scheduler must
leave, one it need not leave (the way out is disabled on the loop), a dead end. Then the
claim model: the correct design holds both of its liveness properties, and a wrong design
that strands a target in ``uncertain`` fails one, with a path that ends where nothing more
can happen.
"""

from __future__ import annotations

from typing import Any

from claimfsm.checker import Checker, ClaimModelConfig, Model, Property, claim_model, replay
from claimfsm.spec import claim_spec, designs


def spin_model(
    *, exit_from: tuple[int, ...], fair: bool, dead_end: bool = False
) -> Model[Any, Any]:
    """States 0 -> 1 -> 2 -> 0 ("spin"), "exit" to "done" from the states in ``exit_from``;
    with ``dead_end``, state 1 may also "stall" into a state where nothing is enabled."""

    def actions(s: Any) -> list[str]:
        if s in ("done", "stuck"):
            return []
        acts = ["spin"]
        if s in exit_from:
            acts.append("exit")
        if dead_end and s == 1:
            acts.append("stall")
        return acts

    def step(s: Any, a: str) -> Any:
        return {
            "spin": (s + 1) % 3 if isinstance(s, int) else None,
            "exit": "done",
            "stall": "stuck",
        }[a]

    prop: Property[Any] = Property(
        "leaves",
        "eventually",
        lambda s: s == "done",
        "the loop is eventually left",
        fair=(lambda a: "exit" if a == "exit" else None) if fair else None,
        fairness="exit" if fair else "",
    )
    return Model(
        init_states=lambda: [0],
        actions=actions,
        next_state=step,
        properties=[prop],
        may_stop=lambda s: s in ("done", "stuck"),
    )


def test_an_unfair_loop_is_a_lasso_counterexample() -> None:
    report = Checker(spin_model(exit_from=(0, 1, 2), fair=False)).run()
    assert report.verdict == "violated"
    found = report.discoveries["leaves"]
    assert found.loop_from is not None
    loop = found.path[found.loop_from :]
    assert loop[0].state == loop[-1].state  # it returns where the loop began
    assert {s.action for s in loop[1:]} == {"spin"}
    assert [s.state for s in replay(report.model, found.token)] == [s.state for s in found.path]
    assert "repeat forever" in report.text()


def test_weak_fairness_forces_an_action_that_stays_enabled() -> None:
    assert Checker(spin_model(exit_from=(0, 1, 2), fair=True)).run().verdict == "ok"


def test_weak_fairness_does_not_force_an_action_disabled_on_the_loop() -> None:
    report = Checker(spin_model(exit_from=(0, 1), fair=True)).run()
    assert report.verdict == "violated"
    found = report.discoveries["leaves"]
    assert found.loop_from is not None
    assert 2 in [s.state for s in found.path[found.loop_from :]]  # where exit is disabled


def test_a_dead_end_before_the_goal_is_a_counterexample() -> None:
    report = Checker(spin_model(exit_from=(0, 1, 2), fair=True, dead_end=True)).run()
    found = report.discoveries["leaves"]
    assert found.loop_from is None and found.path[-1].state == "stuck"
    assert "nothing more can happen" in report.text()


def test_with_stutter_a_run_may_stop_where_no_fair_step_is_possible() -> None:
    """0 -step-> 1 -step-> done, and nothing else: every run that goes on reaches done. With
    ``stutter`` a run may also stop where no fair step is possible: with "step" not assumed
    fair, it stops in 0; with "step" fair, it cannot."""
    for fair, stutter, verdict in (
        (False, False, "ok"),
        (False, True, "violated"),
        (True, True, "ok"),
    ):
        prop: Property[Any] = Property(
            "arrives",
            "eventually",
            lambda s: s == "done",
            fair=(lambda a: "step") if fair else (lambda a: None),
            stutter=stutter,
        )
        model: Model[Any, Any] = Model(
            init_states=lambda: [0],
            actions=lambda s: [] if s == "done" else ["step"],
            next_state=lambda s, a: 1 if s == 0 else "done",
            properties=[prop],
            may_stop=lambda s: s == "done",
        )
        report = Checker(model).run()
        assert report.verdict == verdict, (fair, stutter)
        if verdict == "violated":
            found = report.discoveries["arrives"]
            assert found.loop_from is None and [s.state for s in found.path] == [0]
            assert "no step assumed fair is possible" in report.text()


def test_the_obligation_starts_where_its_trigger_holds() -> None:
    model = spin_model(exit_from=(0, 1), fair=True)
    only_from_done = Property(
        "leaves", "eventually", lambda s: s == "done", trigger=lambda s: s == "done"
    )
    model = Model(
        model.init_states,
        model.actions,
        model.next_state,
        [only_from_done],
        may_stop=model.may_stop,
    )
    assert Checker(model).run().verdict == "ok"  # never triggered where it fails


def test_the_claim_protocol_holds_its_liveness_properties() -> None:
    report = Checker(claim_model(claim_spec(), ClaimModelConfig(workers=2))).symmetry().run()
    assert report.verdict == "ok", report.text()
    eventually = {
        p.name: report.outcome(p) for p in report.model.properties if p.kind == "eventually"
    }
    assert eventually == {"uncertain_is_reconciled": "holds", "free_target_is_acquired": "holds"}


def test_a_design_that_strands_a_target_fails_liveness() -> None:
    spec = designs()["readback_present_only"]
    report = Checker(claim_model(spec, ClaimModelConfig(workers=2))).symmetry().run()
    failed = [p.name for p in report.violations if p.kind == "eventually"]
    assert failed == ["uncertain_is_reconciled"]
    found = report.discoveries["uncertain_is_reconciled"]
    assert found.path[-1].state.targets[0].state == "uncertain"
    # Every safety property still holds: only liveness tells this design apart.
    assert not [p for p in report.violations if p.kind == "always"]


def test_taken_is_open_exactly_where_an_idle_workers_acquire_would_fire() -> None:
    """The claim world's ``taken`` reads what may be taken off the declaration's acquire, as
    a lifecycle's reads its taker events: wherever a worker is idle, the obligation is open
    exactly where one of its acquires would fire, the declared first event (lapse) applied
    where the stores would. So a reserved claim whose lease lapsed may be taken, and on the
    design that drops target_free (update_returning_claim) so may a busy target."""
    for name, busy_taken in (("claim", False), ("update_returning_claim", True)):
        spec = claim_spec() if name == "claim" else designs()[name]
        model = claim_model(spec, ClaimModelConfig(workers=2, drafts=1, epochs=2))
        taken = next(p for p in model.properties if p.name == "free_target_is_acquired")
        assert taken.trigger is not None
        start = list(model.init_states())
        seen, frontier = set(start), list(start)
        lapsed = busy = 0
        while frontier:
            w = frontier.pop()
            actions = model.actions(w)
            if any(wk.phase == "" for wk in w.workers):
                fires = any(
                    model.next_state(w, a) is not None for a in actions if a[0] == "acquire"
                )
                assert taken.trigger(w) == fires, (name, w)
                state = w.targets[0].state
                lapsed += fires and state == "reserved" and not w.targets[0].lease_live
                busy += fires and state in ("sending", "uncertain")
            for a in actions:
                after = model.next_state(w, a)
                if after is not None and after not in seen:
                    seen.add(after)
                    frontier.append(after)
        assert lapsed > 0, name
        assert (busy > 0) == busy_taken, name
