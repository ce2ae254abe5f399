"""A guard's meaning is declared once, as a kind, and every consumer compiles it: one edit
to a guard in the TOML changes the machine's check, the stores' SQL, a real store's
behaviour and the checker's verdict together; a bad kind is one clear error."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from claimfsm.checker import Checker, ClaimModelConfig, claim_model
from claimfsm.errors import InsufficientEvidence, SpecError
from claimfsm.machine import ClaimMachine, ClaimRow, Facts
from claimfsm.spec import claim_spec, declarations_dir, load_spec, shipped
from claimfsm.store import Evidence, SQLiteStore
from claimfsm.store._sql import compile_writes

from .conftest import FakeClock

CLAIM = (declarations_dir() / "claim.toml").read_text()
SRC = Path(__file__).parent.parent / "src" / "claimfsm"


def edited(tmp_path: Path, old: str, new: str, name: str = "edited.toml") -> Path:
    assert CLAIM.count(old) == 1, old
    path = tmp_path / name
    path.write_text(CLAIM.replace(old, new))
    return path


STRICT_FENCE = ('op = ">="\ncolumn = "epoch"', 'op = ">"\ncolumn = "epoch"')


def row(epoch: int) -> ClaimRow:
    return ClaimRow("t", epoch, "uncertain", "w", "h", 1, 1, "d", "k", 0.0, None, 0.0)


def test_one_edit_to_a_guard_reaches_the_machine_the_sql_and_a_store(tmp_path: Path) -> None:
    spec = load_spec(edited(tmp_path, *STRICT_FENCE))
    fenced_at_3 = Facts(now=0.0, target_id="t", epoch=3, outcome="absent", fenced_through=3)
    assert ClaimMachine(claim_spec()).guards["remote_fenced"](row(3), fenced_at_3)
    assert not ClaimMachine(spec).guards["remote_fenced"](row(3), fenced_at_3)

    def reconcile_sql(s: object) -> str:
        return compile_writes(s, lambda n: f":{n}").events["reconcile"]  # type: ignore[arg-type]

    assert ":fenced_through >= claims.epoch" in reconcile_sql(claim_spec())
    assert ":fenced_through > claims.epoch" in reconcile_sql(spec)
    assert ">=" not in reconcile_sql(spec).split("fenced_through")[1][:4]

    for s, accepted in ((claim_spec(), True), (spec, False)):
        clock = FakeClock()
        store = SQLiteStore(tmp_path / f"{accepted}.sqlite", clock=clock, machine=ClaimMachine(s))
        draft = store.create_draft("t", "x")
        store.approve_draft(draft.draft_id)
        claim = store.acquire("t", draft.draft_id, "w", 30).begin_send()
        claim.mark_uncertain("timeout")
        if accepted:
            assert store.reconcile("t", 1, Evidence.absent_fenced(1)).state == "reconciled"
        else:
            with pytest.raises(InsufficientEvidence, match="readback evidence") as caught:
                store.reconcile("t", 1, Evidence.absent_fenced(1))  # the declared hint
            assert caught.value.guard == "remote_fenced"
        store.close()


def test_one_edit_to_a_guard_changes_the_checker_verdict(tmp_path: Path) -> None:
    """Fenced through the epoch no longer counts as fenced: an absent effect can never be
    reconciled, and the checker (which fences exactly through the epoch) finds the target
    stuck, where the declaration as shipped holds."""
    config = ClaimModelConfig(workers=1, drafts=1, epochs=2)
    shipped = Checker(claim_model(claim_spec(), config)).run()
    strict = Checker(claim_model(load_spec(edited(tmp_path, *STRICT_FENCE)), config)).run()
    assert shipped.verdict == "ok"
    assert strict.verdict == "violated", strict.text()
    assert strict.unique != shipped.unique


def test_an_effect_present_guard_compiled_from_its_constant(tmp_path: Path) -> None:
    """Swap the two readback constants: present evidence now satisfies effect_absent."""
    path = edited(tmp_path, 'value = "present"', 'value = "presentx"')
    machine = ClaimMachine(load_spec(path))
    facts = Facts(now=0.0, target_id="t", epoch=1, outcome="present")
    assert not machine.guards["effect_present"](row(1), facts)
    compiled = compile_writes(load_spec(path), lambda n: f":{n}")
    assert ":outcome = :const_effect_present" in compiled.events["reconcile"]  # bound
    assert compiled.constants["const_effect_present"] == "presentx"
    assert "presentx" not in compiled.events["reconcile"]  # never written into the SQL
    store = SQLiteStore(tmp_path / "s.sqlite", clock=FakeClock(), machine=machine)
    draft = store.create_draft("t", "x")
    store.approve_draft(draft.draft_id)
    store.acquire("t", draft.draft_id, "w", 30).begin_send().mark_uncertain("timeout")
    with pytest.raises(InsufficientEvidence):
        store.reconcile("t", 1, Evidence.present())
    info = store.get_claim("t")
    assert info is not None and info.state == "uncertain"
    store.close()


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('kind = "live"', 'kind = "alive"', r"unknown guard kind 'alive'; use one of \["),
        ('column = "epoch"', 'column = "epochs"', "column 'epochs' is not a declared column"),
        ('fact = "fenced_through"', 'fact = "fenced"', "fact 'fenced' is not a fact a caller"),
        ('op = ">="', 'op = "=>"', "op '=>' is not an operator"),
        ("value = true", 'value = "yes"', "value 'yes' cannot be compared with remote_dedups"),
        ('kind = "epoch"', 'kind = "epoch"\nop = "="', "belong to kind 'compare' only"),
        ('column = "epoch"', 'column = "epoch"\nvalue = 1', "either a 'column' of the row or a"),
    ],
)
def test_a_bad_guard_is_one_error_naming_the_file_and_line(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    path = edited(tmp_path, old, new)
    with pytest.raises(SpecError, match=message) as caught:
        load_spec(path)
    assert re.match(rf"{re.escape(str(path))}:\d+: guard '", str(caught.value))


def test_no_guard_name_of_the_claim_protocol_is_written_in_the_code() -> None:
    """Every consumer reads a guard's meaning from its kind: none names a claim guard."""
    names = set(claim_spec().guards)
    facts = {"remote_dedups"}  # also the name of a fact the caller brings (Facts)
    found = []
    for path in SRC.rglob("*.py"):
        for name in re.findall(r"[\"']([a-z_]+)[\"']", path.read_text()):
            if name in names - facts:
                found.append(f"{path.relative_to(SRC)}: {name}")
    assert found == []


def test_every_store_embeds_the_one_sql_compiler_of_guard_kinds() -> None:
    """The claim store's writes and a lifecycle's (the job's) embed each guard's predicate
    as ``store._predicates`` compiles it from the kind: no store has a compiler of its own.
    And the Python meaning is one compiler too: the job's machine and the claim's run
    ``machine._guards.compile_guard``'s predicates."""
    from claimfsm.machine import LifecycleMachine
    from claimfsm.machine._guards import compile_guard
    from claimfsm.store._entity_sql import compile_event
    from claimfsm.store._predicates import guard_predicate
    from claimfsm.store._sql import claim_param

    claim = claim_spec()
    writes = compile_writes(claim, lambda n: f":{n}")
    statements = " ".join([writes.acquire, *writes.events.values()])
    for name in claim.guards:
        q = claim_param(lambda n: f":{n}")
        predicate = guard_predicate(claim, name, q, lambda c: f"claims.{c}", lease_nullable=False)
        assert predicate in statements, name

    job = load_spec(declarations_dir() / "job.toml")
    # each guard a transition reads, of the job and of its readback design (whose guard
    # compares readback's `running`, which the job itself no longer reads)
    readback = shipped()["job-requeue_on_readback"]
    assert "attempt_stopped" in {g for t in readback.transitions for g in t.guards}
    for each in (job, readback):
        compiled = " ".join(compile_event(each, e, "t").sql for e in each.events)
        for name in {g for t in each.transitions for g in t.guards}:
            assert guard_predicate(each, name, lambda n: "?", str) in compiled, name

    lifecycle = LifecycleMachine(job)
    for name, g in job.guards.items():
        assert lifecycle.guards[name].__code__ is compile_guard(job, g).__code__, name
    machine = ClaimMachine(claim)
    for name, g in claim.guards.items():
        assert machine.guards[name].__code__ is compile_guard(claim, g).__code__, name


def test_a_kinds_meaning_is_written_once_per_language() -> None:
    """Only the compilers branch on what a guard kind means: one for Python
    (spec/_predicates.py, which the machines, both checker models and the audit evaluate),
    one for SQL (store/_predicates.py), one for Promela (checker/_promela.py, which both
    SPIN twins compile through) and one for the refusal's sentence (machine/_guards.py).
    Reading a declaration's shape (which event lapses a lease: spec/_vocabulary.py) or
    which world reads a kind (spec/_roles.py) is not a meaning."""
    meaning = re.compile(
        r"""kind\s*(?:==|in)\s*\(?\s*"(?:owner|epoch|live|lapsed|free|draft_ready|draft_pinned)"""
        r"""|"(?:owner|epoch|live|lapsed)":\s*lambda"""
    )
    found = {
        str(path.relative_to(SRC)) for path in SRC.rglob("*.py") if meaning.search(path.read_text())
    }
    allowed = {
        "spec/_predicates.py",
        "store/_predicates.py",
        "machine/_guards.py",
        "checker/_promela.py",
        "spec/_vocabulary.py",
        "spec/_roles.py",
    }
    assert found <= allowed, sorted(found - allowed)
    assert {"spec/_predicates.py", "store/_predicates.py", "checker/_promela.py"} <= found


class _Recorded:
    """A row or a caller that records which of its fields, columns and facts a predicate
    reads."""

    _values: dict[str, Any]
    _read: set[str]

    def __init__(self, values: dict[str, Any], read: set[str]) -> None:
        self.__dict__["_values"], self.__dict__["_read"] = values, read

    def __getattr__(self, name: str) -> Any:
        self._read.add(name)
        return self._values[name]

    def column(self, name: str) -> Any:
        self._read.add(f"column {name}")
        return self._values["columns"].get(name)

    def fact(self, name: str) -> Any:
        self._read.add(f"fact {name}")
        return self._values["facts"].get(name)


def _rows(spec: object) -> list[dict[str, Any] | None]:
    from itertools import product

    from claimfsm.spec import Spec

    assert isinstance(spec, Spec)
    rows: list[dict[str, Any] | None] = [None]
    for state, epoch, token, lease, draft, attempts in product(
        spec.states, (1, 2), ("a", None), (5.0, None), (7, 8), (0, 3)
    ):
        rows.append(
            {
                "state": state,
                "epoch": epoch,
                "token_hash": token,
                "lease_deadline": lease,
                "draft_id": draft,
                "draft_version": 1,
                "draft_digest": "d",
                "columns": {"attempts": attempts, "epoch": epoch, "outcome": "absent"},
            }
        )
    return rows


def _callers() -> list[dict[str, Any]]:
    from itertools import product

    from claimfsm.checker._entity_world import DraftSeen

    callers: list[dict[str, Any]] = []
    for epoch, token, now, draft, target, fact in product(
        (1, None), ("a", "b", None), (0.0, 10.0), (None, 7, 8), ("entity", "t"), (False, True)
    ):
        seen = None if draft is None else DraftSeen(draft, "approved", 1, "d")
        callers.append(
            {
                "epoch": epoch,
                "token_hash": token,
                "now": now,
                "draft": seen,
                "target_id": target,
                "facts": {
                    "outcome": "absent" if fact else "present",
                    "fenced_through": 2 if fact else 0,
                    "remote_dedups": fact,
                    "running": fact,
                    "ran": not fact,
                },
            }
        )
    return callers


def test_what_each_guard_kind_reads_is_what_its_predicate_reads() -> None:
    """``spec._predicates.KIND_READS`` says what each kind's compiled predicate reads, and
    the lifecycle world keeps a stale owner's refusals per the row's state, epoch, token
    and lease where the guards read no more (``reads_header_only``): a kind that read more
    than the table says would make that look-up answer for the wrong rows. Every guard of
    every shipped declaration runs on rows and callers that record what is read: each run
    reads no more than the table says, and all runs together read all of it."""
    from claimfsm.spec._predicates import KIND_READS, compile_guard, guard_reads

    kinds: set[str] = set()
    done: set[tuple[object, ...]] = set()  # each meaning once: a kind, its operands, a spec
    callers = _callers()
    for spec in shipped().values():
        rows = _rows(spec)
        free = frozenset(spec.states_where("frees_target"))
        for name, g in spec.guards.items():
            meaning = (g.kind, g.op, g.fact, g.column, g.value, spec.initial, free)
            if meaning in done:
                continue
            done.add(meaning)
            kinds.add(g.kind)
            predicate = compile_guard(spec, g)
            declared = guard_reads(g)
            said = {
                "row": set(declared.row) | {f"column {c}" for c in declared.columns},
                "caller": set(declared.caller) | {f"fact {f}" for f in declared.facts},
            }
            union: dict[str, set[str]] = {"row": set(), "caller": set()}
            for values in rows:
                for who in callers:
                    row_read: set[str] = set()
                    caller_read: set[str] = set()
                    row = None if values is None else _Recorded(values, row_read)
                    predicate(row, _Recorded(who, caller_read))
                    assert row_read <= said["row"], (spec.name, name, row_read)
                    assert caller_read <= said["caller"], (spec.name, name, caller_read)
                    union["row"] |= row_read
                    union["caller"] |= caller_read
            assert union == said, (spec.name, name)
    assert kinds == {*KIND_READS, "compare"}


def test_a_header_only_guard_answers_alike_on_world_rows_that_differ_only_off_the_header() -> None:
    """``HEADER_ROW`` and ``HEADER_CALLER`` (``checker._entity_world``) say what the lifecycle
    world's ``WorldRow`` and ``WorldCaller`` take from a row's state, epoch, token and
    lease and from a caller's epoch and token: the stale owner's look-up keys a refusal by
    those alone where every guard reads no more (``reads_header_only``). So every such
    guard of every shipped declaration must answer alike on world rows and callers that
    agree there and differ in everything else (columns, fence, running work, requests,
    resends, request key, outcome, the executor's memory, drafts, the caller's evidence
    and draft); were a view to take a header field from elsewhere, it would not."""
    from itertools import product

    from claimfsm.checker._entity_world import (
        DraftSeen,
        Row,
        WorldCaller,
        WorldRow,
        reads_header_only,
    )
    from claimfsm.spec._predicates import compile_guard

    checked = 0
    for spec in shipped().values():
        view = spec.lifecycle_view()
        col_index = {c: i for i, c in enumerate(view.columns)}
        header_only = {
            name: compile_guard(view, g) for name, g in view.guards.items() if reads_header_only(g)
        }
        n = len(col_index)
        drafts = ((("a", 1), ("p", 2)), 0, 1)
        for state, epoch, token, live in product(view.states, (0, 1, 2), (0, 1), (False, True)):
            header = Row(state, epoch, token, live)
            rows = [
                header._replace(columns=(0,) * n),
                header._replace(
                    columns=(3,) * n,
                    fence=2,
                    working=(1,),
                    in_flight=((1, 0),),
                    landed=((1, 1),),
                    resent=1,
                    request_key=2,
                    outcome="present",
                    ran=True,
                    linked=drafts,
                ),
            ]
            facts = [
                {"running": False, "ran": False, "fenced_through": 0},
                {
                    "running": True,
                    "ran": True,
                    "fenced_through": 5,
                    "outcome": "absent",
                    "remote_dedups": True,
                },
            ]
            for caller, named in ((None, False), (None, True), ((1, 0), False), ((2, 1), False)):
                for name, predicate in header_only.items():
                    answers = set()
                    for r, f, draft in product(
                        rows, facts, (None, DraftSeen(0, "approved", 1, "1"))
                    ):
                        who = WorldCaller(r, caller, named, dict(f))
                        who.draft = draft
                        answers.add(bool(predicate(WorldRow(r, col_index), who)))
                    assert len(answers) == 1, (spec.name, name, header, caller, named)
                    checked += 1
    assert checked > 0
