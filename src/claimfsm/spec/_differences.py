"""How a variant differs from the declaration it overlays: what a reviewer must see first."""

from __future__ import annotations

from dataclasses import dataclass

from claimfsm.spec._declaration import Spec


@dataclass(frozen=True)
class Differences:
    """Transitions are ``(event, source, dest)``; guards ``(event, source, dest, guard)``."""

    added: tuple[tuple[str, str, str], ...]  # in the variant only
    removed: tuple[tuple[str, str, str], ...]  # in the base only
    guards_dropped: tuple[tuple[str, str, str, str], ...]
    guards_added: tuple[tuple[str, str, str, str], ...]
    options: tuple[str, ...]  # model options the variant turns on (MODEL_OPTIONS)

    @property
    def changed(self) -> frozenset[tuple[str, str, str]]:
        """The variant's transitions a reviewer should look at: added, or guards changed."""
        return frozenset(
            [*self.added, *((e, s, d) for e, s, d, _ in (*self.guards_dropped, *self.guards_added))]
        )

    def lines(self) -> list[str]:
        """One line per difference, in words."""
        from claimfsm.spec._load import MODEL_OPTIONS

        out = [f"adds {e}: {s} → {d}" for e, s, d in self.added]
        out += [f"removes {e}: {s} → {d}" for e, s, d in self.removed]
        out += [f"{e}: {s} → {d} no longer checks {g}" for e, s, d, g in self.guards_dropped]
        out += [f"{e}: {s} → {d} also checks {g}" for e, s, d, g in self.guards_added]
        out += [f"the model: {MODEL_OPTIONS.get(o, o)}" for o in self.options]
        return out


def differences(base: Spec, variant: Spec) -> Differences:
    """What ``variant`` changes in ``base`` (internal transitions are compared too)."""

    def index(spec: Spec) -> dict[tuple[str, str, str], frozenset[str]]:
        return {(t.event, t.source, t.dest): frozenset(t.guards) for t in spec.transitions}

    old, new = index(base), index(variant)
    both = [k for k in new if k in old]
    return Differences(
        added=tuple(k for k in new if k not in old),
        removed=tuple(k for k in old if k not in new),
        guards_dropped=tuple((*k, g) for k in both for g in sorted(old[k] - new[k])),
        guards_added=tuple((*k, g) for k in both for g in sorted(new[k] - old[k])),
        options=tuple(o for o, on in variant.options.items() if on),
    )
