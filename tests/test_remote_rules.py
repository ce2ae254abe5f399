"""The remote's rules (plain, fencing, dedup) are stated once, in
``claimfsm.spec.RemoteRules``: the checker's model of the remote, the simulated remote and
the crash campaign's remote process decide with them, so one edit of a rule reaches all
three (the SPIN engine's Promela states them in its own words; test_spin_claim holds the
two engines to the same states)."""

from __future__ import annotations

import pytest

from claimfsm.campaign._remote import RemoteFaults, _State
from claimfsm.checker import Checker, ClaimModelConfig, claim_model
from claimfsm.errors import InvalidArgument
from claimfsm.service import SendRequest, SimulatedRemote
from claimfsm.spec import REMOTE_MODES, Landing, RemoteRules, claim_spec


def test_the_rules_of_each_mode() -> None:
    plain, fencing, dedup = RemoteRules("plain"), RemoteRules("fencing"), RemoteRules("dedup")
    assert REMOTE_MODES == ("plain", "fencing", "dedup")
    for fence in range(4):
        for epoch in range(1, 5):
            assert plain.arrives(fence, epoch) == fence
            assert dedup.arrives(fence, epoch) == fence
            # a fencing remote rejects what is at or below its fence, and the highest epoch
            # that arrived fences every lower one
            assert fencing.arrives(fence, epoch) == (
                None if epoch <= fence else max(fence, epoch - 1)
            )
            for applied in (False, True):
                assert plain.lands(fence, epoch, applied) == "applied"
                assert dedup.lands(fence, epoch, applied) == (
                    "deduplicated" if applied else "applied"
                )
                assert fencing.lands(fence, epoch, applied) == (
                    "fenced" if epoch <= fence else "applied"
                )
            assert RemoteRules.fence_through(fence, epoch) == max(fence, epoch)
    with pytest.raises(ValueError, match="plain, fencing or dedup"):
        RemoteRules("fenced")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="plain, fencing or dedup"):
        SimulatedRemote("fenced")  # type: ignore[arg-type]


def _simulated_effects() -> int:
    remote = SimulatedRemote("dedup")
    for _ in range(2):
        remote.send(SendRequest("t", 1, 1, "key-1", "hello"))
    return len(remote.effects)


def _campaign_results() -> list[str]:
    state = _State("dedup", RemoteFaults(0.0, 0.0, (0.0, 0.0)), seed=1)
    return [state.send("t", 1, 1, "key-1") for _ in range(2)]


def _checker_violations() -> list[str]:
    # one draft, a same-key retry: the only second send of a draft is under the same key
    config = ClaimModelConfig(workers=2, drafts=1, remote="dedup")
    report = Checker(claim_model(claim_spec(), config)).symmetry().run()
    assert report.complete or report.violations
    return [p.name for p in report.violations]


def test_one_edit_of_a_rule_reaches_every_remote(monkeypatch: pytest.MonkeyPatch) -> None:
    """As written, a deduping remote applies a key once in all three; with the dedup rule
    edited away (a key applied again), all three apply it twice."""
    assert _simulated_effects() == 1
    assert _campaign_results() == ["applied", "deduplicated"]
    assert _checker_violations() == []

    def forgets_keys(self: RemoteRules, fence: int, epoch: int, key_applied: bool) -> Landing:
        return "fenced" if self.fences and epoch <= fence else "applied"

    monkeypatch.setattr(RemoteRules, "lands", forgets_keys)
    assert _simulated_effects() == 2
    assert _campaign_results() == ["applied", "applied"]
    assert _checker_violations() == ["effect_at_most_once"]
