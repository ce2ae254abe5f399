"""The guards' meaning in Python: the reference semantics the stores' SQL must agree with.

Each guard takes the target's current claim row (None when the target has never been
claimed) and the event's facts. ``claimfsm.store`` holds the same guards as SQL; the
tests prove the two agree on every declared transition.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from claimfsm.errors import SpecError
from claimfsm.machine._facts import ClaimRow, Facts
from claimfsm.spec import Spec

Guard = Callable[[ClaimRow | None, Facts], bool]


def build_guards(spec: Spec) -> dict[str, Guard]:
    frees = frozenset(spec.states_where("frees_target"))

    def target_free(row: ClaimRow | None, f: Facts) -> bool:
        return row is None or row.state in frees

    def draft_approved(row: ClaimRow | None, f: Facts) -> bool:
        d = f.draft
        return d is not None and d.status == "approved" and d.target_id == f.target_id

    def owner_matches(row: ClaimRow | None, f: Facts) -> bool:
        return (
            row is not None
            and f.epoch == row.epoch
            and f.token_hash is not None
            and hmac.compare_digest(f.token_hash, row.token_hash)
        )

    def epoch_current(row: ClaimRow | None, f: Facts) -> bool:
        return row is not None and f.epoch == row.epoch

    def lease_live(row: ClaimRow | None, f: Facts) -> bool:
        return row is not None and f.now < row.lease_deadline

    def lease_lapsed(row: ClaimRow | None, f: Facts) -> bool:
        return row is not None and f.now >= row.lease_deadline

    def draft_unchanged(row: ClaimRow | None, f: Facts) -> bool:
        d = f.draft
        return (
            row is not None
            and d is not None
            and d.draft_id == row.draft_id
            and d.status == "approved"
            and d.version == row.draft_version
            and d.digest == row.draft_digest
        )

    def effect_present(row: ClaimRow | None, f: Facts) -> bool:
        return f.outcome == "present"

    def effect_absent(row: ClaimRow | None, f: Facts) -> bool:
        return f.outcome == "absent"

    def remote_fenced(row: ClaimRow | None, f: Facts) -> bool:
        return row is not None and f.fenced_through is not None and f.fenced_through >= row.epoch

    def remote_dedups(row: ClaimRow | None, f: Facts) -> bool:
        return f.remote_dedups

    implemented: dict[str, Guard] = {
        "target_free": target_free,
        "draft_approved": draft_approved,
        "owner_matches": owner_matches,
        "epoch_current": epoch_current,
        "lease_live": lease_live,
        "lease_lapsed": lease_lapsed,
        "draft_unchanged": draft_unchanged,
        "effect_present": effect_present,
        "effect_absent": effect_absent,
        "remote_fenced": remote_fenced,
        "remote_dedups": remote_dedups,
    }
    missing = sorted(set(spec.guards) - set(implemented))
    if missing:
        raise SpecError(f"{spec.name}: guards {missing} have no meaning in claimfsm.machine")
    return {name: implemented[name] for name in spec.guards}
