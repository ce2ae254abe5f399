"""Exhaustive model checking of declared machines (depends only on ``claimfsm.spec``).

``Checker(model).symmetry().run()`` explores every reachable state breadth-first and
reports each property as holding or violated, with the shortest counterexample.
``claim_model(spec, config)`` is the claim protocol as such a model, driven by a table
compiled from the declaration, so a wrong design (``specs/wrong/``) runs on the same code.
``entity_model(spec, config)`` is any other declared lifecycle as a model: its world
(clients, crashes, lease lapse, fencing) and its invariants are read from the declaration.
``spin_check(spec, config)`` checks either model with SPIN, from Promela generated from the
declaration (``promela`` for a lifecycle of your own, ``claim_promela`` for the claim
protocol and its wrong designs), and reads the verdict and the trail back into a ``Report``.
"""

from claimfsm.checker._claim import (
    ClaimModelConfig,
    World,
    claim_crash_words,
    claim_model,
    compile_table,
    fire,
    path_steps,
    refusal_recorded,
    workers_carry_keys,
)
from claimfsm.checker._engine import (
    Checker,
    Discovery,
    Model,
    Property,
    Report,
    Step,
    explained,
    path_from,
    reachable,
    replay,
)
from claimfsm.checker._entity import entity_model
from claimfsm.checker._entity_text import entity_path_steps
from claimfsm.checker._entity_world import (
    EntityModelConfig,
    EntityWorld,
    crash_words,
    entity_word,
    resends_in,
    world_facts,
)
from claimfsm.checker._packed import Processes
from claimfsm.checker._path import PathStep
from claimfsm.checker._spin import (
    Promela,
    SpinRun,
    SpinUnavailable,
    promela,
    spin_available,
    spin_check,
)
from claimfsm.checker._spin_claim import claim_promela
from claimfsm.spec import RemoteMode

__all__ = [
    "Checker",
    "ClaimModelConfig",
    "Discovery",
    "EntityModelConfig",
    "EntityWorld",
    "Model",
    "PathStep",
    "Processes",
    "Promela",
    "Property",
    "RemoteMode",
    "Report",
    "SpinRun",
    "SpinUnavailable",
    "Step",
    "World",
    "claim_crash_words",
    "claim_model",
    "claim_promela",
    "compile_table",
    "crash_words",
    "entity_model",
    "entity_path_steps",
    "entity_word",
    "explained",
    "fire",
    "path_from",
    "path_steps",
    "promela",
    "reachable",
    "refusal_recorded",
    "replay",
    "resends_in",
    "spin_available",
    "spin_check",
    "workers_carry_keys",
    "world_facts",
]
