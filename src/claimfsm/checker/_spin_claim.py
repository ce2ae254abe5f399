"""The claim protocol's checker model (:func:`claimfsm.checker.claim_model`) as Promela, for
SPIN: generated from the declaration and the world's bounds, as ``_spin`` does for a
lifecycle of your own.

One process whose loop has one ``d_step`` per action of the built-in model, in the order
the built-in model lists them. Each option's guard is "the built-in model's ``next_state``
is not None"; its body is the step. Every change of a claim's state is a chain over the
declared transitions of the event from the claim's state, tried in the declared order, each
guard's truth compiled by its kind for the situation (an owner's handle, the sweep's lapse,
readback's evidence, a retry), as the built-in model's truth tables are. The world around
the claim (workers, drafts, the remote's requests in flight and landed, the ghosts that make
per-step properties invariants) is the built-in model's, field for field:

- a target: epoch, state, token, lease, pinned draft (+1; 0: none), version, nonce, outcome
  (0 none, 1 present, 2 absent), retries;
- a draft: status (0 absent, 1 approved, 2 pending, 3 dispatched) and version;
- a worker: phase (0 idle, then R S W A P Q), target (+1), epoch, token, its saved
  handle after a crash, and (against a plain or deduping remote) the key it will send
  (+1; 0: none);
- a remote: the requests in flight and landed, each a sorted array of request codes (one
  ``short`` per request, ordered as the built-in model's tuples, 0 for an empty slot), and
  its fence;
- four ghost bits.

Temporaries are ordinary variables reset to 0 at the end of every step (SPIN's breadth-first
search refuses hidden ones), so they add no states. The two engines therefore store the same
states: a test holds their counts equal without symmetry.

``always`` properties are assertions after every step; a state where no step is possible
asserts that it may stop there (the built-in engine's deadlock check). ``sometimes``
properties are C fragments that print ``SOMETIMES n`` the first time the search meets one
(they keep no state, so they add none). Each ``eventually`` property is an LTL formula with
its weak fairness as a round-robin counter (``promela(..., liveness=NAME)``), as ``_spin``'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from claimfsm.checker._claim import ClaimModelConfig, claim_model
from claimfsm.checker._claim_invariants import STALE, claim_invariants, escape_rule
from claimfsm.checker._engine import Property
from claimfsm.checker._promela import Operand, Reading, conjunction, promela_guard
from claimfsm.checker._spin import Promela, ltl_observer
from claimfsm.errors import SpecError
from claimfsm.spec import ABSENT, PRESENT, RemoteRules, Spec
from claimfsm.spec._vocabulary import Event, State, acquire_leases, claim_steps

PHASE = {"": 0, "R": 1, "S": 2, "W": 3, "A": 4, "P": 5, "Q": 6}
DRAFT = {"-": 0, "a": 1, "p": 2, "d": 3}
OUTCOME = {"": 0, PRESENT: 1, ABSENT: 2}
NONE = 255  # no transition fires

#: Every variable of the state vector (prefixed ``now.`` in the C fragments).
_STATE_VARIABLES = (
    "t_epoch",
    "t_state",
    "t_token",
    "t_lease",
    "t_draft",
    "t_version",
    "t_nonce",
    "t_outcome",
    "t_retries",
    "w_phase",
    "w_target",
    "w_epoch",
    "w_token",
    "w_saved",
    "s_target",
    "s_epoch",
    "s_token",
    "inflight",
    "landed",
    "fence",
    "g_overlap",
    "g_stale",
    "g_escaped",
    "g_discarded",
)
_TEMPORARIES = ("dest", "disp", "found", "e0", "k0", "t0", "j", "c0", "code")

Action = tuple[Any, ...]


def claim_promela(
    spec: Spec, config: ClaimModelConfig | None = None, liveness: str | None = None
) -> Promela:
    """The Promela model of the claim declaration ``spec`` (the correct design or a wrong
    one) in the world ``config``; ``liveness``: an ``eventually`` property's name, checked
    instead of the safety properties as an LTL formula."""
    cfg = config or ClaimModelConfig.declared(spec)
    model = claim_model(spec, cfg)  # validates the declaration as the built-in engine does
    g = _Generator(spec, cfg)
    options = g.options()
    head = g.head()
    names = {p.name: p for p in model.properties}
    if liveness is not None:
        prop = names.get(liveness)
        if prop is None or prop.kind != "eventually":
            raise ValueError(f"{liveness!r} is not an eventually property of the claim model")
        return Promela(g.with_ltl(liveness, prop, options, head), tuple(a for a, *_ in options))
    always = [p.name for p in model.properties if p.kind == "always"]
    sometimes = tuple(p.name for p in model.properties if p.kind == "sometimes")
    checks = [f"assert({g.property(name)}) /* {name} */" for name in always]
    marks = [
        f"if (!seen[{n}] && {_in_c(g.property(name))})"
        f' {{ seen[{n}] = 1; printf("SOMETIMES {n}\\n"); }}'
        for n, name in enumerate(sometimes)
    ]
    out = [*head, f"c_decl {{ int seen[{max(len(sometimes), 1)}]; }}", ""]
    out += ["active proctype world() {", "  do"]
    for n, (_action, guard, body) in enumerate(options):
        out.append(f"  :: d_step {{ ({guard}) ->")
        out.append(f'       printf("ACTION {n}\\n");')
        out += ["       " + line for line in _statements([*body, *g.reset()])]
        out += [f"       {c};" for c in checks]
        if marks:
            out.append("       c_code { " + " ".join(marks) + " };")
        out.append("       skip }")
    out.append("  :: d_step { timeout ->")
    out.append('       printf("DEADLOCK\\n");')
    out.append(f"       assert({g.may_stop()}) }}")
    out += ["  od", "}"]
    return Promela("\n".join(out) + "\n", tuple(a for a, *_ in options), sometimes)


def _in_c(expr: str) -> str:
    """A Promela expression over the state as C inside pan (``now.`` before each variable)."""
    names = "|".join([*_STATE_VARIABLES, r"d\d+_status", r"d\d+_version"])
    return re.sub(rf"\b({names})\b", r"now.\1", expr)


def _statements(lines: Sequence[str]) -> list[str]:
    """Lines of a body with separators: a ``;`` after each statement, except where the next
    line opens an option or closes the ``if``/``do`` (or this line opens one)."""
    out = []
    for n, line in enumerate(lines):
        bare = line.strip()
        after = lines[n + 1].strip() if n + 1 < len(lines) else ""
        opens = bare in ("if", "do") or bare.endswith("->")
        closes = after.startswith(("::", "fi", "od"))
        out.append(line if opens or closes else line + ";")
    return out


class _Generator:
    """Promela text for one declaration and one world."""

    def __init__(self, spec: Spec, cfg: ClaimModelConfig) -> None:
        self.spec, self.cfg = spec, cfg
        # the claim's steps and states as this declaration names them (its shape decides)
        named = claim_steps(spec)
        self.event_of, self.state_of = named.events, named.states
        self.states = [spec.initial, *(s for s in spec.states if s != spec.initial)]
        self.sid = {s: i for i, s in enumerate(self.states)}
        self.frees = set(spec.states_where("frees_target")) | {spec.initial}
        self.stale_states = set(spec.states_where("stale"))
        self.lease_states = set(spec.states_where("lease"))
        rules = RemoteRules(cfg.remote)
        self.fencing, self.dedup = rules.fences, rules.dedups
        self.own_keys = cfg.keys_in_workers  # w_key: the key a worker will send (+1; 0 none)
        starts = [e for e in spec.events if spec.work(e) == "starts"]
        self.send_first = starts == [self.event_of[Event.ACQUIRE]]
        self.fresh_key = any("fresh_key" in d.sets for d in spec.effects.values())
        #: a new epoch's lease, as declared (the claim world requires it)
        self.acquire_leases = acquire_leases(spec, self.event_of[Event.ACQUIRE])
        self.retry_sets = (
            spec.effects[self.event_of[Event.RETRY]].sets
            if self.event_of[Event.RETRY] in spec.effects
            else ()
        )
        self.one_live = spec.drafts is not None and spec.drafts.one_live_per_target
        # what a worker woken from a crash takes on its saved handle (as the built-in model)
        self.wakes = list(named.woken(spec)) if cfg.wakes else []
        # the declared invariants this world checks, and the one left_only_by's rule
        self.invariants = {
            inv.name: inv for inv in claim_invariants(spec, named, cfg.remote, cfg.drafts)
        }
        self.guarded_states, self.exits = escape_rule(tuple(self.invariants.values()))
        # request codes: ((epoch * D + draft) * V + version) * N + nonce, ordered as the
        # built-in model's Request tuples; epoch >= 1, so a request is never 0 (empty).
        self.V = 3  # versions 1 and 2: one edit per draft
        self.N = cfg.retries + 1  # nonces 0..retries
        self.key_mod = cfg.drafts * self.V * self.N  # code % key_mod: the idempotency key
        # slots per target: each send adds one request, and an epoch sends once after it
        # enters sending and once after each retry (a design that sends more often runs
        # out of slots, which the search reports as such: CAPACITY).
        self.cap = cfg.epochs * (1 + cfg.retries)

    # -- names -----------------------------------------------------------------------------
    def in_states(self, t: str, names: Sequence[str] | set[str] | frozenset[str]) -> str:
        terms = [f"t_state[{t}] == {self.sid[s]}" for s in sorted(names, key=lambda n: self.sid[n])]
        return "(" + " || ".join(terms) + ")" if terms else "false"

    @staticmethod
    def status(t: str, d: int) -> str:
        """Draft ``d`` of target ``t``: one array per draft, so that each starts as its own."""
        return f"d{d}_status[{t}]"

    @staticmethod
    def version(t: str, d: int) -> str:
        return f"d{d}_version[{t}]"

    def slot(self, t: str, j: str | int) -> str:
        return f"{t} * {self.cap} + {j}"

    def epoch_of(self, code: str) -> str:
        return f"({code} / {self.key_mod})"

    def draft_of(self, code: str) -> str:
        return f"(({code} / {self.V * self.N}) % {self.cfg.drafts})"

    def take_key(self, i: int, t: str) -> list[str]:
        """Worker ``i`` takes the key of target ``t``'s claim for its send (own keys only)."""
        if not self.own_keys:
            return []
        key = self.encode("0", f"t_draft[{t}] - 1", f"t_version[{t}]", f"t_nonce[{t}]")
        return [f"w_key[{i}] = {key} + 1"]

    def encode(self, epoch: str, draft: str, version: str, nonce: str) -> str:
        d, v, n = self.cfg.drafts, self.V, self.N
        return f"((({epoch} * {d} + {draft}) * {v} + {version}) * {n} + {nonce})"

    # -- guards by situation ---------------------------------------------------------------
    def pinned(self, t: str) -> str:
        terms = [
            f"(t_draft[{t}] == {d + 1} && {self.status(t, d)} == {DRAFT['a']}"
            f" && {self.version(t, d)} == t_version[{t}])"
            for d in range(self.cfg.drafts)
        ]
        return "(" + " || ".join(terms) + ")"

    def owner_truth(self, guard: str, t: str, e: str, k: str) -> str:
        """An owner's handle (epoch ``e``, token ``k``) on target ``t``: owner_truths."""
        reading = Reading(
            owner=f"(t_epoch[{t}] == {e} && t_token[{t}] == {k} && {e} > 0)",
            epoch=f"(t_epoch[{t}] == {e})",
            live=f"(t_lease[{t}] == 1)",
            pinned=self.pinned(t),
        )
        return promela_guard(self.spec, guard, reading)

    def lapse_truth(self, guard: str, t: str) -> str:
        """The sweep's lapse (a handle that is nobody's): owner_truths(w, t, -1, -1)."""
        reading = Reading(live=f"(t_lease[{t}] == 1)", pinned=self.pinned(t))
        return promela_guard(self.spec, guard, reading)

    def taker_truth(self, guard: str, free: str) -> str:
        """A taker's: the target free (``free``), the draft it names approved for the
        target (an acquire is only offered for an approved draft); nothing else holds."""
        return promela_guard(self.spec, guard, Reading(free=free, ready="true"))

    def evidence_truth(self, guard: str, t: str, facts: Mapping[str, Operand | None]) -> str:
        """Readback's or a retry's situation: the caller names the current epoch and
        brings ``facts``; ``compare`` guards read them and the row; nothing else holds."""
        reading = Reading(
            epoch="true",
            fact=lambda name: facts.get(name),
            column=lambda name: self.row_operand(name, t),
            text=lambda word: OUTCOME.get(word, 9),
        )
        return promela_guard(self.spec, guard, reading)

    def row_operand(self, column: str, t: str) -> tuple[str, str, str]:
        if column == "epoch":
            return (f"t_epoch[{t}]", "1", "int")
        if column == "draft_version":
            return (f"t_version[{t}]", "1", "int")
        if column == "outcome":
            return (f"t_outcome[{t}]", f"(t_outcome[{t}] != 0)", "str")
        raise SpecError(
            f"{self.spec.path or self.spec.name}: the claim model reads the columns epoch,"
            f" draft_version and outcome of the row, not {column!r}"
        )

    def chain(
        self, event: str, t: str, truth: Callable[[str], str], states: Sequence[str] | None = None
    ) -> list[str]:
        """``dest`` and ``disp`` of ``event`` on target ``t``: the first declared transition
        from the claim's state whose guards hold (``truth`` of each), else NONE."""
        branches: list[tuple[str, int, int]] = []
        for source in states if states is not None else self.states:
            for tr in self.spec.transitions_for(event, source):
                test = " && ".join(
                    [f"t_state[{t}] == {self.sid[source]}", *(truth(g) for g in tr.guards)]
                )
                branches.append((test, self.sid[tr.dest], int(tr.dispatches)))
        return _chain(
            [(f"({b})", [f"dest = {d}", f"disp = {f}"]) for b, d, f in branches],
            [f"dest = {NONE}"],
        )

    def fires(
        self, event: str, t: str, truth: Callable[[str], str], states: Sequence[str] | None = None
    ) -> str:
        """Whether some declared transition of ``event`` fires on target ``t``."""
        terms = []
        for source in states if states is not None else self.states:
            for tr in self.spec.transitions_for(event, source):
                terms.append(
                    "("
                    + " && ".join(
                        [f"t_state[{t}] == {self.sid[source]}", *(truth(g) for g in tr.guards)]
                    )
                    + ")"
                )
        return "(" + " || ".join(terms) + ")" if terms else "false"

    # -- effects -----------------------------------------------------------------------------
    def move(self, t: str, event: str) -> list[str]:
        """The claim of target ``t`` enters ``dest`` (uncertain left other than by evidence
        is a ghost)."""
        out = []
        if self.guarded_states and event not in self.exits:
            inside = self.in_states(t, self.guarded_states)
            outside = " && ".join(f"dest != {self.sid[s]}" for s in sorted(self.guarded_states))
            out.append(f"if :: ({inside} && {outside}) -> g_escaped = 1 :: else -> skip fi")
        out.append(f"t_state[{t}] = dest")
        return out

    def mark_dispatched(self, t: str) -> list[str]:
        return [
            "if",
            *(
                f":: (disp && t_draft[{t}] == {d + 1} && {self.version(t, d)} == t_version[{t}])"
                f" -> {self.status(t, d)} = {DRAFT['d']}"
                for d in range(self.cfg.drafts)
            ),
            ":: else -> skip",
            "fi",
        ]

    def stale(self, t: str, e: str, k: str) -> str:
        parts = [f"t_epoch[{t}] != {e}", f"t_token[{t}] != {k}"]
        if self.stale_states:
            parts.append(self.in_states(t, self.stale_states))
        return "(" + " || ".join(parts) + ")"

    def recorded(self, event: str) -> list[str]:
        """A refused ``event`` (the handle in e0, k0 on t0) is recorded, ``g_discarded``,
        where the declaration's stale owner rule says (``Spec.stale_owner``, read by the
        claim model's ``recorded`` too): a stale guard every transition of the event from
        the target's state has fails, or the state is one where ``Spec.stale_state_refuses``
        the event."""
        parts = []
        by_guards: dict[tuple[str, ...], list[str]] = {}
        for state in self.states:
            by_guards.setdefault(self.spec.stale_guards(event, state), []).append(state)
        for stale, states in by_guards.items():
            if not stale:
                continue
            fails = " || ".join(f"!({self.owner_truth(g, 't0', 'e0', 'k0')})" for g in stale)
            where = "" if len(by_guards) == 1 else f"{self.in_states('t0', states)} && "
            parts.append(f"({where}({fails}))")
        refusing = {s for s in self.stale_states if self.spec.stale_state_refuses(event, s)}
        if refusing:
            parts.append(self.in_states("t0", refusing))
        if not parts:
            return []
        return [f"if :: ({' || '.join(parts)}) -> g_discarded = 1 :: else -> skip fi"]

    def idle(self, i: int, keep_saved: bool = True) -> list[str]:
        out = [f"w_phase[{i}] = 0", f"w_target[{i}] = 0", f"w_epoch[{i}] = 0", f"w_token[{i}] = 0"]
        if self.own_keys:
            out.append(f"w_key[{i}] = 0")
        if not keep_saved:
            out += [
                f"w_saved[{i}] = 0",
                f"s_target[{i}] = 0",
                f"s_epoch[{i}] = 0",
                f"s_token[{i}] = 0",
            ]
        return out

    def owner_event(self, i: int, event: str, success: list[str]) -> list[str]:
        """``event`` with the handle in e0, k0 on target t0; a refusal drops the handle."""
        truth: Callable[[str], str] = lambda guard: self.owner_truth(guard, "t0", "e0", "k0")  # noqa: E731
        body = self.chain(event, "t0", truth)
        fired = [
            f"if :: ({self.stale('t0', 'e0', 'k0')} && dest != t_state[t0]) -> g_stale = 1"
            " :: else -> skip fi",
            *self.move("t0", event),
            *self.mark_dispatched("t0"),
            *success,
        ]
        refused = [*self.recorded(event), *self.idle(i)]
        return [*body, *_chain([(f"(dest != {NONE})", fired)], refused)]

    def insert(self, array: str, t: str) -> list[str]:
        """Insert ``code`` into ``array``'s sorted slots of target ``t``."""
        last = self.slot(t, self.cap - 1)
        return [
            f"if :: ({array}[{last}] != 0) ->"
            ' printf("CAPACITY\\n"); assert(false) :: else -> skip fi',
            f"j = {self.cap - 1}",
            "do",
            f":: (j > 0 && ({array}[{self.slot(t, 'j - 1')}] == 0"
            f" || {array}[{self.slot(t, 'j - 1')}] > code)) ->"
            f" {array}[{self.slot(t, 'j')}] = {array}[{self.slot(t, 'j - 1')}]; j = j - 1",
            ":: else -> break",
            "od",
            f"{array}[{self.slot(t, 'j')}] = code",
        ]

    def has_epoch(self, array: str, t: str, epoch: str) -> str:
        return (
            "("
            + " || ".join(
                f"({array}[{self.slot(t, j)}] != 0"
                f" && {self.epoch_of(f'{array}[{self.slot(t, j)}]')} == {epoch})"
                for j in range(self.cap)
            )
            + ")"
        )

    def present(self, t: int) -> str:
        """Readback finds the target's idempotency key among the landed effects."""
        key = self.encode("0", f"t_draft[{t}] - 1", f"t_version[{t}]", f"t_nonce[{t}]")
        return (
            "("
            + " || ".join(
                f"(landed[{self.slot(str(t), j)}] != 0"
                f" && landed[{self.slot(str(t), j)}] % {self.key_mod} == {key})"
                for j in range(self.cap)
            )
            + ")"
        )

    # -- the options -----------------------------------------------------------------------
    def options(self) -> list[tuple[Action, str, list[str]]]:
        """(the built-in model's action, its d_step guard, its body), in the built-in
        model's order of actions."""
        cfg = self.cfg
        out: list[tuple[Action, str, list[str]]] = []
        for i in range(cfg.workers):
            for t in range(cfg.targets):
                for d in range(cfg.drafts):
                    out.append(self.acquire(i, t, d))
                out.append(self.retry(i, t))
            for op in self.wakes:
                out.append(self.wake(i, op))
            out += self.owner_steps(i)
            if cfg.crashes and not cfg.wakes:  # it forgets its handle
                out.append((("crash", i), f"w_phase[{i}] != 0", self.idle(i)))
            elif cfg.crashes:
                out.append(
                    (
                        ("crash", i),
                        f"w_phase[{i}] != 0 && w_saved[{i}] == 0",
                        [
                            f"w_saved[{i}] = 1",
                            f"s_target[{i}] = w_target[{i}]",
                            f"s_epoch[{i}] = w_epoch[{i}]",
                            f"s_token[{i}] = w_token[{i}]",
                            *self.idle(i),
                        ],
                    )
                )
        for t in range(cfg.targets):
            out += self.target_steps(t)
        return [o for o in out if o[1] != "false"]

    def lapse_after(self, t: str) -> tuple[str, list[str]]:
        """Whether target ``t`` is free once the sweep's event an acquire applies first
        (``first``: the claim's lapse) is applied where it fires, and that event's body."""
        first = self.spec.first(self.event_of[Event.ACQUIRE])
        if first is None:
            return self.in_states(t, self.frees), []
        truth: Callable[[str], str] = lambda guard: self.lapse_truth(guard, t)  # noqa: E731
        terms = []
        for source in self.states:
            lapses = self.spec.transitions_for(first, source)
            tried: list[str] = []
            for tr in lapses:
                test = " && ".join(truth(g) for g in tr.guards) or "true"
                if tr.dest in self.frees:
                    terms.append(
                        "("
                        + " && ".join([f"t_state[{t}] == {self.sid[source]}", *tried, f"({test})"])
                        + ")"
                    )
                tried.append(f"!({test})")
            if source in self.frees:
                terms.append(
                    "(" + " && ".join([f"t_state[{t}] == {self.sid[source]}", *tried]) + ")"
                )
        free_after = "(" + " || ".join(terms) + ")" if terms else "false"
        body = [
            *self.chain(first, t, truth),
            f"if :: (dest != {NONE} && dest != t_state[{t}]) ->",
            *("   " + x for x in self.move(t, first)),
            ":: else -> skip",
            "fi",
        ]
        return free_after, body

    def acquire_ways(self, t: int) -> tuple[list[str], list[str], list[str]]:
        """How an acquire of an approved draft fires on target ``t``, as the stores take
        it: the ways it fires as the row is; where that is refused, the ways after the
        declared first event (``lapse_after``, none when none is declared); and that
        event's body."""
        free_after, lapse = self.lapse_after(str(t))
        acquires = self.spec.transitions_for(self.event_of[Event.ACQUIRE], self.spec.initial)

        def ways(free: str) -> list[str]:
            """The acquire's transitions that fire when the target's being free is ``free``."""
            return [
                way
                for tr in acquires
                if (way := conjunction([self.taker_truth(g, free) for g in tr.guards])) != "false"
            ]

        now = ways(self.in_states(str(t), self.frees))
        return now, (ways(free_after) if lapse else []), lapse

    def acquire(self, i: int, t: int, d: int) -> tuple[Action, str, list[str]]:
        now, after, lapse = self.acquire_ways(t)
        if not now and not after:
            return ((Event.ACQUIRE, i, t, d), "false", [])
        taken_now = "(" + " || ".join(now or ["false"]) + ")"
        guard = (
            f"w_phase[{i}] == 0 && t_epoch[{t}] < {self.cfg.epochs}"
            f" && {self.status(str(t), d)} == {DRAFT['a']} && (" + " || ".join([*now, *after]) + ")"
        )
        first = (
            [f"if :: {taken_now} -> skip", ":: else ->", *("   " + x for x in lapse), "fi"]
            if lapse
            else []
        )
        body = [
            *first,
            f"t_epoch[{t}] = t_epoch[{t}] + 1",
            f"t_state[{t}] = {self.sid[self.state_of[State.RESERVED]]}",
            f"t_token[{t}] = t_token[{t}] + 1",
            f"t_lease[{t}] = {int(self.acquire_leases)}",
            f"t_draft[{t}] = {d + 1}",
            f"t_version[{t}] = {self.version(str(t), d)}",
            f"t_nonce[{t}] = 0",
            f"t_outcome[{t}] = 0",
            f"t_retries[{t}] = 0",
            f"w_phase[{i}] = {PHASE['R']}",
            f"w_target[{i}] = {t + 1}",
            f"w_epoch[{i}] = t_epoch[{t}]",
            f"w_token[{i}] = t_token[{t}]",
            *(self.take_key(i, str(t)) if self.send_first else []),
        ]
        return ((Event.ACQUIRE, i, t, d), guard, body)

    def retry(self, i: int, t: int) -> tuple[Action, str, list[str]]:
        facts = {
            "outcome": None,
            "fenced_through": None,
            "remote_dedups": ("1" if self.dedup else "0", "1", "const"),
        }
        truth: Callable[[str], str] = lambda guard: self.evidence_truth(guard, str(t), facts)  # noqa: E731
        u = self.sid[self.state_of[State.UNCERTAIN]]
        fires = self.fires(
            self.event_of[Event.RETRY], str(t), truth, [self.state_of[State.UNCERTAIN]]
        )
        if fires == "false" or self.cfg.retries == 0:
            return ((Event.RETRY, i, t), "false", [])
        guard = (
            f"w_phase[{i}] == 0 && t_state[{t}] == {u}"
            f" && t_retries[{t}] < {self.cfg.retries} && {fires}"
        )
        body = [
            *self.chain(self.event_of[Event.RETRY], str(t), truth, [self.state_of[State.UNCERTAIN]])
        ]
        if "fresh_token" in self.retry_sets:
            body.append(f"t_token[{t}] = t_token[{t}] + 1")
        body += self.move(str(t), self.event_of[Event.RETRY])
        if "lease" in self.retry_sets:
            body.append(f"t_lease[{t}] = 1")
        body.append(f"t_retries[{t}] = t_retries[{t}] + 1")
        if self.fresh_key:
            body.append(f"t_nonce[{t}] = t_nonce[{t}] + 1")
        body += [
            f"w_phase[{i}] = {PHASE['S']}",
            f"w_target[{i}] = {t + 1}",
            f"w_epoch[{i}] = t_epoch[{t}]",
            f"w_token[{i}] = t_token[{t}]",
            *self.take_key(i, str(t)),
        ]
        return ((Event.RETRY, i, t), guard, body)

    def wake(self, i: int, op: Event) -> tuple[Action, str, list[str]]:
        success = []
        if op == Event.BEGIN_SEND:
            success = [
                f"w_phase[{i}] = {PHASE['S']}",
                f"w_target[{i}] = t0 + 1",
                f"w_epoch[{i}] = e0",
                f"w_token[{i}] = k0",
                *self.take_key(i, "t0"),
            ]
        body = [
            f"t0 = s_target[{i}] - 1",
            f"e0 = s_epoch[{i}]",
            f"k0 = s_token[{i}]",
            *self.idle(i, keep_saved=False),
            *self.owner_event(i, self.event_of[op], success),
        ]
        return (("wake", i, op), f"w_phase[{i}] == 0 && w_saved[{i}] == 1", body)

    def owner_steps(self, i: int) -> list[tuple[Action, str, list[str]]]:
        def ph(*names: str) -> str:
            return "(" + " || ".join(f"w_phase[{i}] == {PHASE[n]}" for n in names) + ")"

        handle = [f"t0 = w_target[{i}] - 1", f"e0 = w_epoch[{i}]", f"k0 = w_token[{i}]"]
        out: list[tuple[Action, str, list[str]]] = []
        begin = [
            f"if :: (w_phase[{i}] == {PHASE['R']}) -> "
            + "; ".join([f"w_phase[{i}] = {PHASE['S']}", *self.take_key(i, "t0")])
            + f" :: else -> w_phase[{i}] = {PHASE['A']} fi"
        ]
        out.append(
            (
                (Event.BEGIN_SEND, i),
                ph("R", "Q"),
                [*handle, *self.owner_event(i, self.event_of[Event.BEGIN_SEND], begin)],
            )
        )
        out.append(
            (
                (Event.RELEASE, i),
                ph("R"),
                [*handle, *self.owner_event(i, self.event_of[Event.RELEASE], self.idle(i))],
            )
        )
        if self.send_first:
            out.append(self.send(i, ph("R")))
        out.append(self.send(i, ph("S")))
        out.append(self.ack(i, ph("W", "P")))
        out.append(
            (
                (Event.TIMEOUT, i),
                ph("S", "W"),
                [*handle, *self.owner_event(i, self.event_of[Event.TIMEOUT], self.idle(i))],
            )
        )
        out.append(
            (
                (Event.RENEW, i),
                ph("R", "S", "W"),
                [*handle, *self.owner_event(i, self.event_of[Event.RENEW], [])],
            )
        )
        out.append(
            (
                (Event.CONFIRM, i),
                ph("A"),
                [*handle, *self.owner_event(i, self.event_of[Event.CONFIRM], self.idle(i))],
            )
        )
        return out

    def send(self, i: int, phases: str) -> tuple[Action, str, list[str]]:
        if self.own_keys:  # the key it took when it began the send
            code = f"w_epoch[{i}] * {self.key_mod} + w_key[{i}] - 1"
        else:
            code = self.encode(f"w_epoch[{i}]", "t_draft[t0] - 1", "t_version[t0]", "t_nonce[t0]")
        body = [
            f"t0 = w_target[{i}] - 1",
            f"code = {code}",
            *([f"w_key[{i}] = 0"] if self.own_keys else []),
            f"if :: (w_phase[{i}] == {PHASE['R']}) -> w_phase[{i}] = {PHASE['P']}"
            f" :: else -> w_phase[{i}] = {PHASE['W']} fi",
        ]
        slots = [f"inflight[{self.slot('t0', j)}]" for j in range(self.cap)]
        overlap = (
            "("
            + " || ".join(f"({x} != 0 && {self.epoch_of(x)} != w_epoch[{i}])" for x in slots)
            + ")"
        )
        accepted = [
            f"if :: {overlap} -> g_overlap = 1 :: else -> skip fi",
            *(
                [
                    f"if :: (w_epoch[{i}] - 1 > fence[t0]) -> fence[t0] = w_epoch[{i}] - 1"
                    " :: else -> skip fi"
                ]
                if self.fencing
                else []
            ),
            *self.insert("inflight", "t0"),
        ]
        if self.fencing:
            body += _chain([(f"(w_epoch[{i}] <= fence[t0])", ["skip"])], accepted)
        else:
            body += accepted
        action = ("send", i)
        return (action, phases, body)

    def ack(self, i: int, phases: str) -> tuple[Action, str, list[str]]:
        t = f"(w_target[{i}] - 1)"
        guard = (
            f"{phases} && {self.has_epoch('landed', t, f'w_epoch[{i}]')}"
            f" && !{self.has_epoch('inflight', t, f'w_epoch[{i}]')}"
        )
        body = [
            f"if :: (w_phase[{i}] == {PHASE['W']}) -> w_phase[{i}] = {PHASE['A']}"
            f" :: else -> w_phase[{i}] = {PHASE['Q']} fi"
        ]
        return (("ack", i), guard, body)

    def target_steps(self, t: int) -> list[tuple[Action, str, list[str]]]:
        cfg, ts = self.cfg, str(t)
        out: list[tuple[Action, str, list[str]]] = []
        leased = self.in_states(ts, self.lease_states)
        out.append((("lease_lapses", t), f"t_lease[{t}] == 1 && {leased}", [f"t_lease[{t}] = 0"]))
        truth: Callable[[str], str] = lambda guard: self.lapse_truth(guard, ts)  # noqa: E731
        changes = []
        for source in self.states:
            tried: list[str] = []
            for tr in self.spec.transitions_for(self.event_of[Event.LAPSE], source):
                test = " && ".join(truth(g) for g in tr.guards) or "true"
                if tr.dest != source:
                    changes.append(
                        "("
                        + " && ".join([f"t_state[{t}] == {self.sid[source]}", *tried, f"({test})"])
                        + ")"
                    )
                tried.append(f"!({test})")
        changed = "(" + " || ".join(changes) + ")" if changes else "false"
        out.append(
            (
                ("sweep", t),
                f"t_lease[{t}] == 0 && {leased} && {changed}",
                [
                    *self.chain(self.event_of[Event.LAPSE], ts, truth),
                    *self.move(ts, self.event_of[Event.LAPSE]),
                ],
            )
        )
        for k in range(self.cap):
            out.append(self.land(t, k))
        out.append(self.reconcile(t))
        live = " || ".join(
            f"{self.status(ts, e)} == {DRAFT['a']} || {self.status(ts, e)} == {DRAFT['p']}"
            for e in range(cfg.drafts)
        )
        for d in range(cfg.drafts):
            status, version = self.status(ts, d), self.version(ts, d)
            if cfg.edits:
                sending = self.in_states(ts, self.spec.pinning_states())
                out.append(
                    (
                        ("edit", t, d),
                        f"({status} == {DRAFT['a']} || {status} == {DRAFT['p']})"
                        f" && {version} < 2 && !(t_draft[{t}] == {d + 1} && {sending})",
                        [f"{status} = {DRAFT['p']}", f"{version} = {version} + 1"],
                    )
                )
            out.append(
                (("approve", t, d), f"{status} == {DRAFT['p']}", [f"{status} = {DRAFT['a']}"])
            )
            out.append(
                (
                    ("create", t, d),
                    f"{status} == {DRAFT['-']}" + (f" && !({live})" if self.one_live else ""),
                    [f"{status} = {DRAFT['p']}", f"{version} = 1"],
                )
            )
        return out

    def land(self, t: int, k: int) -> tuple[Action, str, list[str]]:
        ts = str(t)
        body = [
            f"code = inflight[{self.slot(ts, k)}]",
            f"j = {k}",
            "do",
            f":: (j < {self.cap - 1}) -> inflight[{self.slot(ts, 'j')}] ="
            f" inflight[{self.slot(ts, 'j + 1')}]; j = j + 1",
            ":: else -> break",
            "od",
            f"inflight[{self.slot(ts, self.cap - 1)}] = 0",
        ]
        conditions = []
        if self.fencing:
            conditions.append(f"{self.epoch_of('code')} > fence[{t}]")
        if self.dedup:
            applied = " || ".join(
                f"(landed[{self.slot(ts, j)}] != 0"
                f" && landed[{self.slot(ts, j)}] % {self.key_mod} == code % {self.key_mod})"
                for j in range(self.cap)
            )
            conditions.append(f"!({applied})")
        applies = " && ".join(conditions) or "true"
        body += _chain([(f"({applies})", self.insert("landed", ts))], ["skip"])
        return (("land", t, k), f"inflight[{self.slot(ts, k)}] != 0", body)

    def reconcile(self, t: int) -> tuple[Action, str, list[str]]:
        ts = str(t)
        found = self.present(t)
        fence = (
            f"(({found} || fence[{t}] >= t_epoch[{t}]) -> fence[{t}] : t_epoch[{t}])"
            if self.fencing
            else f"fence[{t}]"
        )
        as_facts = {
            "outcome": (f"({found} -> 1 : 2)", "1", "str"),
            "fenced_through": (fence, "1", "int"),
            "remote_dedups": ("0", "1", "const"),
        }
        fires = self.fires(
            self.event_of[Event.RECONCILE],
            ts,
            lambda guard: self.evidence_truth(guard, ts, as_facts),
            [self.state_of[State.UNCERTAIN]],
        )
        u = self.sid[self.state_of[State.UNCERTAIN]]
        if fires == "false":
            return ((Event.RECONCILE, t), "false", [])
        in_body = {
            "outcome": ("(found -> 1 : 2)", "1", "str"),
            "fenced_through": (f"fence[{t}]", "1", "int"),
            "remote_dedups": ("0", "1", "const"),
        }
        body = [f"found = {found}"]
        at_j = f"inflight[{self.slot(ts, 'j')}]"
        if self.fencing:
            body += [
                "if",
                ":: (!found) ->",
                "   j = 0",
                "   c0 = 0",
                "   do",
                f"   :: (j < {self.cap}) ->",
                f"      if :: ({at_j} != 0 && {self.epoch_of(at_j)} > t_epoch[{t}]) ->"
                f" inflight[{self.slot(ts, 'c0')}] = {at_j}; c0 = c0 + 1"
                " :: else -> skip fi",
                "      j = j + 1",
                "   :: else -> break",
                "   od",
                "   do",
                f"   :: (c0 < {self.cap}) -> inflight[{self.slot(ts, 'c0')}] = 0; c0 = c0 + 1",
                "   :: else -> break",
                "   od",
                f"   if :: (t_epoch[{t}] > fence[{t}]) -> fence[{t}] = t_epoch[{t}]"
                " :: else -> skip fi",
                ":: else -> skip",
                "fi",
            ]
        body += self.chain(
            self.event_of[Event.RECONCILE],
            ts,
            lambda guard: self.evidence_truth(guard, ts, in_body),
            [self.state_of[State.UNCERTAIN]],
        )
        body += [
            *self.move(ts, self.event_of[Event.RECONCILE]),
            f"t_outcome[{t}] = (found -> 1 : 2)",
            *self.mark_dispatched(ts),
        ]
        return ((Event.RECONCILE, t), f"t_state[{t}] == {u} && {fires}", body)

    # -- the rest of the text --------------------------------------------------------------
    def head(self) -> list[str]:
        cfg = self.cfg
        T, D, K = cfg.targets, cfg.drafts, cfg.workers
        return [
            f"/* {self.spec.name}: the claim model, generated by claimfsm from its declaration;"
            " do not edit. */",
            f"/* world: {K} workers, {T} targets, {D} drafts each, {cfg.epochs} epochs,"
            f" {cfg.retries} retries, {cfg.remote} remote,"
            f" crashes {'on' if cfg.crashes else 'off'},"
            f" edits {'on' if cfg.edits else 'off'} */",
            "/* states: " + ", ".join(f"{i} {s}" for s, i in self.sid.items()) + " */",
            f"byte t_epoch[{T}]; byte t_state[{T}]; byte t_token[{T}]; byte t_lease[{T}];",
            f"byte t_draft[{T}]; byte t_version[{T}]; byte t_nonce[{T}]; byte t_outcome[{T}];",
            f"byte t_retries[{T}];",
            *(
                f"byte d{d}_status[{T}] = {DRAFT['-' if self.one_live and d > 0 else 'a']};"
                f" byte d{d}_version[{T}] = 1;"
                for d in range(D)
            ),
            f"byte w_phase[{K}]; byte w_target[{K}]; byte w_epoch[{K}]; byte w_token[{K}];",
            f"byte w_saved[{K}]; byte s_target[{K}]; byte s_epoch[{K}]; byte s_token[{K}];",
            *([f"byte w_key[{K}];"] if self.own_keys else []),
            f"short inflight[{T * self.cap}]; short landed[{T * self.cap}]; byte fence[{T}];",
            "byte g_overlap; byte g_stale; byte g_escaped; byte g_discarded;",
            "/* a step's temporaries: 0 between steps */",
            "byte dest; byte disp; byte found; byte e0; byte k0; byte t0; byte j; byte c0;"
            " short code;",
        ]

    def reset(self) -> list[str]:
        return [f"{v} = 0" for v in _TEMPORARIES]

    def property(self, name: str) -> str:
        """The Promela of property ``name``: the framework's own, or a declared invariant
        compiled by its kind (as ``_claim_invariants`` compiles it for the built-in engine)."""
        cfg, T = self.cfg, range(self.cfg.targets)
        if name == STALE.name:
            return "g_stale == 0"
        inv = self.invariants[name]
        if inv.kind == "exclusive_work":
            return "g_overlap == 0"
        if inv.kind == "left_only_by":
            return "g_escaped == 0"
        if inv.kind == "effect_once":
            terms = []
            for t in T:
                for d in range(cfg.drafts):
                    slots = [f"landed[{self.slot(str(t), j)}]" for j in range(self.cap)]
                    count = " + ".join(f"({x} != 0 && {self.draft_of(x)} == {d})" for x in slots)
                    terms.append(f"({count}) <= 1")
            return "(" + " && ".join(terms) + ")"
        if inv.kind == "pinned":  # in the states, the pinned draft approved or dispatched
            kept = []
            for t in T:
                as_pinned = " || ".join(
                    f"(t_draft[{t}] == {d + 1} && {self.version(str(t), d)} == t_version[{t}]"
                    f" && ({self.status(str(t), d)} == {DRAFT['a']}"
                    f" || {self.status(str(t), d)} == {DRAFT['d']}))"
                    for d in range(cfg.drafts)
                )
                kept.append(f"(!{self.in_states(str(t), inv.states)} || ({as_pinned}))")
            return "(" + " && ".join(kept) + ")"
        if inv.kind != "reachable":
            raise ValueError(f"no Promela assertion for the invariant {name!r} ({inv.kind})")
        if inv.event is not None:
            return "g_discarded == 1"
        if inv.live_drafts is not None:
            return (
                "("
                + " || ".join(
                    "("
                    + " + ".join(
                        f"({self.status(str(t), d)} == {DRAFT['a']}"
                        f" || {self.status(str(t), d)} == {DRAFT['p']})"
                        for d in range(cfg.drafts)
                    )
                    + f") >= {inv.live_drafts}"
                    for t in T
                )
                + ")"
            )
        terms = []
        for t in T:
            term = self.in_states(str(t), inv.states)
            if inv.outcome is not None:
                term = f"({term} && t_outcome[{t}] == {OUTCOME[inv.outcome]})"
            terms.append(term)
        return "(" + " || ".join(terms) + ")"

    def waiting(self) -> str:
        """Some target may be taken: an idle worker's acquire of an approved draft would
        begin a new epoch of it within the bounds, the declared first event applied where
        the stores would (the built-in model's ``takeable``)."""
        cfg = self.cfg
        terms = []
        for t in range(cfg.targets):
            now, after, _lapse = self.acquire_ways(t)
            if not now and not after:
                continue
            approved = " || ".join(
                f"{self.status(str(t), d)} == {DRAFT['a']}" for d in range(cfg.drafts)
            )
            terms.append(
                f"(t_epoch[{t}] < {cfg.epochs} && ({approved}) && ("
                + " || ".join([*now, *after])
                + "))"
            )
        return "(" + (" || ".join(terms) or "false") + ")"

    def may_stop(self) -> str:
        cfg = self.cfg
        terms = []
        for t in range(cfg.targets):
            parts = [self.in_states(str(t), self.frees), f"t_epoch[{t}] >= {cfg.epochs}"]
            if self.dedup:
                parts.append(
                    f"(t_state[{t}] == {self.sid[self.state_of[State.UNCERTAIN]]}"
                    f" && t_retries[{t}] >= {cfg.retries})"
                )
            terms.append("(" + " || ".join(parts) + ")")
        return "(" + " && ".join(terms) + ")"

    def with_ltl(
        self,
        name: str,
        prop: Property[Any],
        options: list[tuple[Action, str, list[str]]],
        head: list[str],
    ) -> str:
        """The model with ``eventually`` property ``name`` as an LTL formula, its weak
        fairness a round-robin counter over the fairness classes (see ``_spin``). A run
        stops only where no step is possible: there one more option loops, so that the
        formula sees the run go on."""
        T = range(self.cfg.targets)
        inv = self.invariants[name]
        if inv.kind == "eventually":
            trigger = "(" + " || ".join(self.in_states(str(t), inv.sources) for t in T) + ")"
            goal = f"!{trigger}"
        elif inv.kind == "taken":
            trigger = self.waiting()
            goal = f"!{self.waiting()}"
        else:
            raise ValueError(f"no LTL for the claim model's property {name!r} ({inv.kind})")
        fair = prop.fair or _unfair  # the built-in model's fairness classes, as they are
        classes: dict[Any, int] = {}
        for action, *_ in options:
            found = fair(action)
            if found is not None:
                classes.setdefault(found, len(classes) + 1)
        steps = {found: [f"({g})" for a, g, _b in options if fair(a) == found] for found in classes}
        out = [*head, *ltl_observer(name, trigger, goal, steps)]
        out += ["", "active proctype world() {"]
        out.append("  d_step { observe() };")
        out.append("  do")
        for n, (action, guard, body) in enumerate(options):
            cls = classes.get(fair(action), 0)
            out.append(f"  :: d_step {{ ({guard}) ->")
            out.append(f'       printf("ACTION {n}\\n");')
            out += ["       " + line for line in _statements([*body, *self.reset()])]
            out.append(f"       last = {cls}; observe() }}")
        out.append('  :: d_step { timeout -> printf("STOP\\n"); last = 0; observe() }')
        out += ["  od", "}"]
        return "\n".join(out) + "\n"


def _unfair(action: Action) -> None:
    return None


def _chain(branches: list[tuple[str, list[str]]], otherwise: list[str]) -> list[str]:
    """``if`` over the branches in order (the first that holds), else ``otherwise``."""
    if not branches:
        return list(otherwise) or ["skip"]
    (test, body), rest = branches[0], branches[1:]
    lines = ["if", f":: {test} ->"]
    lines += ["   " + x for x in body or ["skip"]]
    lines.append(":: else ->")
    lines += ["   " + x for x in _chain(rest, otherwise)]
    return [*lines, "fi"]
