"""The world of a declared lifecycle seen from one of its entities, for the carry-over of
one entity's check to many (``claimfsm check --targets T --by-target``; the argument is
``_targets``'s, docs/design.md "Many targets").

Every action of the lifecycle world names one entity (a row) and at most one client, and
reads and writes that row and that client's handle alone: a take, a resend or an
environment event names its entity; an owner event, a send, an answer, a run or a crash
acts on the entity of the handle the client holds; a wake-up on the entity of the handle
it saved. So, seen from entity ``t``:

- a client holding a handle on another entity looks idle, and a handle it saved on
  another entity is not seen;
- a step on another entity changes nothing seen from ``t`` (a stutter);
- the sticky flags (a stale change, the marks, an overlap at the remote) are each set by
  one entity's step, and combine by "or" (the marks by union).

The premise is checked, not assumed (``_targets.targets_independent``). A lifecycle's
``eventually`` invariants speak of entity 0 alone (``_entity._obligation``), so they carry
over as of key 0 (``Projection.scope``).
"""

from __future__ import annotations

from dataclasses import replace

from claimfsm.checker._entity import entity_model
from claimfsm.checker._entity_properties import (
    HANDLE_STEPS,
    NAMING_STEPS,
    WORLD_STEPS,
    acts_on,
)
from claimfsm.checker._entity_world import (
    EntityModelConfig,
    EntityWorld,
    Handle,
    entity_word,
    holds_handle,
    resting,
)
from claimfsm.checker._targets import Action, Projection
from claimfsm.spec import Spec


def project(world: EntityWorld, key: int) -> EntityWorld:
    """``world`` as the one-entity world sees entity ``key`` (numbered 0 there); the flags
    are kept as they are."""

    def client(h: Handle | None) -> Handle | None:
        if h is None:
            return None
        saved = (0, *h.saved[1:]) if h.saved and h.saved[0] == key else ()
        if h.key == key:
            return h._replace(key=0, saved=saved)
        return resting(saved)

    return EntityWorld(
        (world.rows[key],),
        tuple(client(h) for h in world.clients),
        world.stale_changed,
        world.marks,
        world.overlap,
    )


def join(views: list[EntityWorld], world: EntityWorld) -> EntityWorld:
    """The world whose projections are ``views``, with ``world``'s flags (the inverse of
    :func:`project` where each client holds a handle on one entity at most)."""
    clients: list[Handle | None] = []
    for i in range(len(views[0].clients)):
        held: Handle | None = None
        saved: tuple[int, ...] = ()
        for t, v in enumerate(views):
            seen = v.clients[i]
            if seen is None:
                continue
            if seen.saved:
                saved = (t, *seen.saved[1:])
            if holds_handle(seen):
                held = seen._replace(key=t)
        clients.append(resting(saved) if held is None else held._replace(saved=saved))
    return EntityWorld(
        tuple(v.rows[0] for v in views),
        tuple(clients),
        world.stale_changed,
        world.marks,
        world.overlap,
    )


def project_action(world: EntityWorld, action: Action, key: int) -> Action | None:
    """The one-entity world's action that ``action`` is from entity ``key``'s side, or
    None when it acts on another entity."""
    try:
        if acts_on(world, action) != key:
            return None
    except ValueError as unknown:
        raise ValueError(f"the entity projection does not know {action!r}") from unknown
    kind = action[0]
    if kind in WORLD_STEPS:  # the entity it names is entity 0 there
        return (kind, 0, *action[2:])
    if kind in NAMING_STEPS:
        return (kind, action[1], 0, *action[3:])
    return action  # a client's step on its handle, or a wake-up: the handle says where


def _keys(spec: Spec, config: EntityModelConfig) -> int:
    """The entities a config names (T: it bounds no search here, so it may pass the
    world's bound for a whole search)."""
    keys = config.keys if config.keys is not None else spec.world["keys"]
    assert isinstance(keys, int)
    return keys


def _premise(spec: Spec, config: EntityModelConfig) -> EntityModelConfig:
    """Two entities that share two workers, one epoch each (one draft each, where the
    declaration links drafts): the smallest space where entities share workers."""
    drafts = 1 if spec.drafts is not None else None
    return replace(config, workers=2, keys=2, epochs=1, drafts=drafts)


def _describe(spec: Spec, config: EntityModelConfig) -> str:
    world = config.resolved(spec)
    word = entity_word(spec)
    drafts = f", {world['drafts']} draft" if "drafts" in world else ""
    return (
        f"{world['workers']} workers, {world['keys']} {word}s{drafts},"
        f" {world['epochs']} epoch per {word}"
    )


def _flags(world: EntityWorld) -> tuple[bool, frozenset[str], bool]:
    return world.stale_changed, world.marks, world.overlap


def _merged(
    a: tuple[bool, frozenset[str], bool], b: tuple[bool, frozenset[str], bool]
) -> tuple[bool, frozenset[str], bool]:
    return a[0] or b[0], a[1] | b[1], a[2] or b[2]


def entity_keys(spec: Spec) -> Projection:
    """How the world of ``spec`` (a declared lifecycle, or the claim in the lifecycle
    world) is seen from one of its entities."""
    return Projection(
        model=lambda s, config: entity_model(s, config),
        keys=_keys,
        with_keys=lambda config, n: replace(config, keys=n),
        premise_config=_premise,
        describe=_describe,
        project=project,
        join=join,
        project_action=project_action,
        strip=lambda w: w._replace(stale_changed=False, marks=frozenset(), overlap=False),
        flags=_flags,
        merged=_merged,
        holders=lambda w: [i for i, h in enumerate(w.clients) if holds_handle(h)],
        takes=lambda a: a[0] in NAMING_STEPS or a[0] == "wake",
        holds_step=lambda a, i: a[0] in HANDLE_STEPS and a[1] == i,
        scope="first",
        key_word=entity_word(spec),
    )


__all__ = ["entity_keys", "join", "project", "project_action"]
