"""How a variant differs from the declaration it overlays: what a reviewer must see first."""

from __future__ import annotations

from dataclasses import dataclass

from claimfsm.spec._declaration import Spec

#: A transition: (event, source, dest, n), n counting the transitions of that event from
#: that source to that dest in declaration order (0 for the first; the job's two ways out
#: of orphaned are 0 and 1).
TransitionKey = tuple[str, str, str, int]


def transition_keys(spec: Spec) -> list[tuple[TransitionKey, frozenset[str]]]:
    """Each transition of ``spec`` as its :data:`TransitionKey`, with its guards, in order."""
    seen: dict[tuple[str, str, str], int] = {}
    out = []
    for t in spec.transitions:
        k = (t.event, t.source, t.dest)
        seen[k] = seen.get(k, -1) + 1
        out.append(((*k, seen[k]), frozenset(t.guards)))
    return out


@dataclass(frozen=True)
class Differences:
    """Transitions are :data:`TransitionKey`; guards ``(*TransitionKey, guard)``."""

    added: tuple[TransitionKey, ...]  # in the variant only
    removed: tuple[TransitionKey, ...]  # in the base only
    guards_dropped: tuple[tuple[str, str, str, int, str], ...]
    guards_added: tuple[tuple[str, str, str, int, str], ...]
    #: What the variant changes in an event's declared table: (event, key, base's, variant's)
    events: tuple[tuple[str, str, str, str], ...] = ()
    #: What the variant changes in [drafts]: (key, base's, variant's)
    drafts: tuple[tuple[str, str, str], ...] = ()

    @property
    def changed(self) -> frozenset[TransitionKey]:
        """The variant's transitions a reviewer should look at: added, or guards changed."""
        return frozenset(
            [
                *self.added,
                *((e, s, d, n) for e, s, d, n, _ in (*self.guards_dropped, *self.guards_added)),
            ]
        )

    def lines(self) -> list[str]:
        """One line per difference, in words."""
        out = [f"adds {e}: {s} → {d}" for e, s, d, _ in self.added]
        out += [f"removes {e}: {s} → {d}" for e, s, d, _ in self.removed]
        out += [f"{e}: {s} → {d} no longer checks {g}" for e, s, d, _, g in self.guards_dropped]
        out += [f"{e}: {s} → {d} also checks {g}" for e, s, d, _, g in self.guards_added]
        out += [f"event {e}: {key} {old} → {new}" for e, key, old, new in self.events]
        out += [f"drafts: {key} {old} → {new}" for key, old, new in self.drafts]
        return out


def differences(base: Spec, variant: Spec) -> Differences:
    """What ``variant`` changes in ``base`` (internal transitions are compared too)."""

    old, new = dict(transition_keys(base)), dict(transition_keys(variant))
    both = [k for k in new if k in old]
    return Differences(
        added=tuple(k for k in new if k not in old),
        removed=tuple(k for k in old if k not in new),
        guards_dropped=tuple((*k, g) for k in both for g in sorted(old[k] - new[k])),
        guards_added=tuple((*k, g) for k in both for g in sorted(new[k] - old[k])),
        events=tuple(
            (e, key, _said(getattr(base.effects.get(e), key, None)), _said(new_value))
            for e in variant.events
            for key in ("by", "work", "remote", "sets", "bumps", "durable", "first")
            if (new_value := getattr(variant.effects.get(e), key, None))
            != getattr(base.effects.get(e), key, None)
            and (new_value or getattr(base.effects.get(e), key, None))
        ),
        drafts=tuple(
            (key, _said(getattr(base.drafts, key, None)), _said(new_value))
            for key in ("one_live_per_target",)
            if (new_value := getattr(variant.drafts, key, None)) != getattr(base.drafts, key, None)
        ),
    )


def _said(value: object) -> str:
    """A declared value as the declaration writes it ("none" when absent)."""
    if value in (None, (), False):
        return "none" if value is None or value == () else "false"
    if isinstance(value, tuple):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return "true" if value is True else str(value)
