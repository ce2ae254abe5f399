"""How a lifecycle's world reads to a person: a row, a client, a world and an action of
:func:`._entity.entity_model` in words (its ``show_state`` and ``show_action``), and a path
of that world as declaration-level steps for the state diagram and the sequence chart
(:func:`entity_path_steps`). Nothing here fires an event of its own: ``explain``, which
tells a refusal from a transition and the ``first`` event from the step, replays the step
with the world's own firing (:class:`Firing`)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from claimfsm.checker._engine import Model, Step
from claimfsm.checker._entity_properties import acting, acts_on
from claimfsm.checker._entity_world import (
    DRAFT_WORDS,
    Action,
    EntityWorld,
    Handle,
    KeyShape,
    Row,
    _request,
    holds_handle,
    stored,
)
from claimfsm.checker._path import PathStep
from claimfsm.spec import RemoteRules, Spec, has_remote


class Firing(NamedTuple):
    """The world's own firing, which :meth:`WorldText.explain` replays a step with:
    readback's fence (``read_back(world, key, event)``), an event with the ``first`` one
    applied where the stores would (``fire_first``), an event alone (``fire``), and each
    event's ``first``."""

    read_back: Callable[[EntityWorld, int, str], EntityWorld]
    fire_first: Callable[..., tuple[EntityWorld, Any]]
    fire: Callable[..., Any]
    firsts: Mapping[str, str | None]


@dataclass(frozen=True)
class WorldText:
    """The words for one world's rows, clients and actions: what they read from the
    declaration (its columns, its lease states, the word for an entity, each event's role),
    and the world's options (the remote's rules and key shape, whether a crash keeps the
    handle saved)."""

    columns: tuple[str, ...]
    lease_states: frozenset[str]
    key_word: str
    roles: dict[str, str]
    rules: RemoteRules | None
    shape: KeyShape
    wakes: bool

    def row(self, key: int, row: Row) -> str:
        parts = [f"{row.state} e{row.epoch}"]
        if row.state in self.lease_states:
            parts.append("lease live" if row.live else "lease lapsed")
        parts += [f"{c}={v}" for c, v in zip(self.columns, row.columns, strict=True)]
        if row.fence:
            parts.append(f"fenced through e{row.fence}")
        if row.request_key:
            parts.append(f"request key k{row.request_key}")
        if row.outcome:
            parts.append(f"readback recorded {row.outcome}")
        if row.ran:
            parts.append(f"a run of e{row.epoch} reached the executor")
        if row.in_flight:
            parts.append("in flight " + ",".join(_request(q, self.shape) for q in row.in_flight))
        if row.landed:
            parts.append("took effect " + ",".join(_request(q, self.shape) for q in row.landed))
        if row.resent:
            parts.append(f"resent {row.resent}x")
        if row.draft >= 0:
            parts.append(f"pins draft {row.draft} v{row.version}")
        if row.drafts:
            parts.append(
                "drafts "
                + " ".join(
                    f"{d}:{DRAFT_WORDS[status]} v{version}"
                    for d, (status, version) in enumerate(row.drafts)
                    if status != "-"
                )
            )
        return f"{self.key_word} {key}: " + ", ".join(parts)

    def client(self, c: int, h: Handle | None) -> str:
        if h is None:
            return f"worker {c} idle"
        kept = f", saved handle on {self.key_word} {h.saved[0]} e{h.saved[1]}" if h.saved else ""
        if h.key < 0:
            return f"worker {c} idle{kept}"
        doing = " working" if h.working else ""
        doing += {
            "D": ", its run due at the executor",
            "S": ", about to send",
            "W": ", waiting for an answer",
            "A": ", answered",
        }.get(h.phase, "")
        return f"worker {c} holds {self.key_word} {h.key} e{h.epoch} (saw {h.seen}){doing}{kept}"

    def state(self, world: EntityWorld) -> str:
        rows = "; ".join(self.row(k, r) for k, r in enumerate(world.rows))
        return rows + " | " + "; ".join(self.client(c, h) for c, h in enumerate(world.clients))

    def action(self, action: Action) -> str:
        kind = action[0]
        if kind == "take":
            named = f" with draft {action[3]}" if len(action) == 5 else ""
            return f"worker {action[1]}: {action[-1]} {self.key_word} {action[2]}{named}"
        if kind == "draft":
            done = {"edit": "edits", "approve": "approves", "create": "creates"}[action[3]]
            return f"author: {done} draft {action[2]} of {self.key_word} {action[1]}"
        if kind == "own":
            return f"worker {action[1]}: {action[2]}"
        if kind == "env":
            return f"{self.roles[action[2]]}: {action[2]} {self.key_word} {action[1]}"
        if kind == "clock":
            return f"clock: the lease of {self.key_word} {action[1]} lapses"
        if kind == "fence":
            whose = "executor" if self.rules is None else "remote"
            return f"operator: fence the {whose} of {self.key_word} {action[1]} through its epoch"
        if kind == "resend":
            return (
                f"worker {action[1]}: {action[3]} {self.key_word} {action[2]} (takes the epoch over"
                " to send again)"
            )
        if kind == "run":
            return f"worker {action[1]}: its run reaches the executor"
        if kind == "send":
            return f"worker {action[1]}: sends its request to the remote"
        if kind == "land":
            what = _request(action[2:], self.shape)
            return f"remote: the request of {what} for {self.key_word} {action[1]} lands"
        if kind == "ack":
            return f"worker {action[1]}: hears the remote's answer"
        if kind == "wake":
            return f"worker {action[1]} wakes up: {action[2]} with its saved handle"
        if self.wakes:
            return f"worker {action[1]} crashes (its work stops; it keeps its handle saved)"
        return f"worker {action[1]} crashes (its work stops, its handle is gone)"

    def explain(
        self, before: EntityWorld, action: Action, after: EntityWorld, steps: Firing
    ) -> list[tuple[str, str | None]]:
        """Each state change of ``action`` as a step of its own: the event declared
        ``first``, where the store applied it, then the action itself (``steps``: the
        world's own firing, to replay it)."""
        text = self.action(action)
        parts: list[tuple[str, str | None]] = []
        if action[0] == "env":  # (a fence is no move of the row: one step with the event)
            base = steps.read_back(before, action[1], action[2])
            if base is not before:
                whose = "executor" if self.rules is None else "remote"
                text += (
                    f" (its readback finds nothing, so it fences the {whose} through"
                    f" e{base.rows[action[1]].epoch} first and reads again)"
                )
                before = base
        if action[0] in ("take", "env", "own", "resend", "wake") and action[-1] in steps.firsts:
            if action[0] in ("own", "wake"):
                key, caller = acting(before, action)
                named = True
            else:
                key = action[2] if action[0] in ("take", "resend") else action[1]
                caller, named = None, action[0] != "take"
            draft = action[3] if action[0] == "take" and len(action) == 5 else -1
            base, _ = steps.fire_first(before, key, action[-1], caller, named, draft)
            if base is not before:
                source, dest = before.rows[key].state, base.rows[key].state
                parts.append(
                    (
                        f"store: {steps.firsts[action[-1]]} {self.key_word} {key} first, inside"
                        f" {action[-1]} ({source} -> {dest})",
                        self.state(base),
                    )
                )
                before = base
        if action[0] == "run":
            h = after.clients[action[1]]
            if h is not None and h.working:
                text += " and runs there"
            else:
                runner = before.clients[action[1]]
                assert runner is not None
                fence = before.rows[runner.key].fence
                text += f", fenced through e{fence}, which refuses it: it never runs"
        if action[0] in ("own", "wake"):
            key, caller = acting(before, action)
            result = steps.fire(before, key, action[2], caller, True)
            if result is None:
                text += f" (from {before.rows[key].state}: no such transition; refused)"
            elif result[0] is None:
                text += f" refused ({result[1]} false): drops its handle, stops its work"
            elif caller != (before.rows[key].epoch, before.rows[key].token):
                text += f" on a stale handle (e{caller[0]}), and it changes the row"
        return [*parts, (text, None)]


def entity_path_steps(
    spec: Spec, model: Model[EntityWorld, Action], path: Sequence[Step[EntityWorld, Action]]
) -> list[PathStep]:
    """A path of :func:`entity_model` as declaration-level steps, for the state diagram and
    the sequence chart: who did what, the transition the entity took (none for a refusal),
    and the epochs whose work is running (on the executor's lifeline) after each step; with
    a remote, the requests in flight to it and the effects it applied, as (entity, epoch)."""
    roles = {e: spec.role(e) for e in spec.events}
    remote = has_remote(spec)
    steps: list[PathStep] = []
    effects: tuple[tuple[int, int], ...] = ()
    for before, after in itertools.pairwise(path):
        action = after.action
        assert action is not None
        kind = action[0]
        key = -1 if kind == "crash" else acts_on(before.state, action)  # a crash takes none
        source = before.state.rows[key].state if key >= 0 else None
        dest = after.state.rows[key].state if key >= 0 else None
        event = action[-1] if kind in ("take", "own", "env", "resend", "wake") else None
        changed = key >= 0 and stored(before.state.rows[key]) != stored(after.state.rows[key])
        if (
            kind in ("own", "wake")
            and not changed
            and not holds_handle(after.state.clients[action[1]])
        ):
            event = None  # refused: no transition taken
        actor = {
            "take": f"worker {action[1]}",
            "resend": f"worker {action[1]}",
            "own": f"worker {action[1]}",
            "wake": f"worker {action[1]}",
            "crash": f"worker {action[1]}",
            "send": f"worker {action[1]}",
            "run": f"worker {action[1]}",
            "clock": "clock",
            "fence": "operator",
            "draft": "author",
            "land": "remote",
            "ack": "remote",
        }.get(kind, roles.get(event or "", "store"))
        to = {
            "crash": actor,
            "clock": "clock",
            "fence": "remote",
            "send": "remote",
            "run": "remote",
            "land": "remote",
            "ack": f"worker {action[1]}",
        }.get(kind, "store")
        label = {
            "clock": "lease lapses",
            "fence": "fence",
            "crash": "crash",
            "send": "request",
            "run": "run",
            "land": "lands",
            "ack": "answer",
        }.get(kind, event or "refused")
        if kind == "draft":
            label = f"{action[3]} draft {action[2]}"
        if remote:  # the requests in flight to the remote, and the effects it applied
            row = after.state.rows[max(key, 0)]
            running = tuple(e for e, _ in row.in_flight)
            if kind == "land" and len(row.landed) > len(before.state.rows[key].landed):
                effects = (*effects, (key, action[2]))
        else:
            running = tuple(
                sorted(h.epoch for h in after.state.clients if h is not None and h.working)
            )
        parts = model.explain(before.state, action, after.state) if model.explain else [("", None)]
        first = spec.first(event or "")
        if len(parts) == 2 and first is not None and source is not None:
            # the store applied the declared first event, then the event itself
            between = [
                t.dest
                for t in spec.transitions
                if t.event == first
                and t.source == source
                and any(u.event == event and u.source == t.dest for u in spec.transitions)
            ]
            middle = between[0] if between else source
            steps.append(
                PathStep(
                    number=len(steps) + 1,
                    actor="store",
                    to="store",
                    text=parts[0][0],
                    event=first,
                    source=source,
                    dest=middle,
                    label=first,
                    in_flight=tuple(e for e, _ in before.state.rows[key].in_flight)
                    if remote
                    else tuple(
                        sorted(h.epoch for h in before.state.clients if h is not None and h.working)
                    ),
                    effects=effects,
                )
            )
            source = middle
        text = parts[-1][0]
        steps.append(
            PathStep(
                number=len(steps) + 1,
                actor=actor,
                to=to,
                text=text,
                event=event,
                source=source,
                dest=dest,
                label=label,
                in_flight=running,
                effects=effects,
            )
        )
    return steps
