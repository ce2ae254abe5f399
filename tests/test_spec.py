"""The declaration loads, and a malformed one is refused with a message naming the problem."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from claimfsm.errors import SpecError
from claimfsm.machine import ClaimMachine
from claimfsm.spec import (
    Event,
    State,
    available,
    claim_spec,
    declarations_dir,
    load_spec,
    parse_spec,
)


def raw() -> dict[str, Any]:
    return tomllib.loads((declarations_dir() / "claim.toml").read_text())


def test_the_claim_declaration_loads_with_the_protocols_states() -> None:
    spec = claim_spec()
    assert set(spec.states) == {s.value for s in State}
    assert set(spec.events) == {e.value for e in Event}
    assert "claim" in available()
    assert spec.states_where("frees_target") == (
        "confirmed",
        "reconciled",
        "released",
        "expired",
        "discarded",
    )
    # lease expiry may only ever move reserved -> expired and sending -> uncertain
    lapse = {(t.source, t.dest) for t in spec.transitions if t.event == "lapse"}
    assert lapse == {("reserved", "expired"), ("sending", "uncertain")}
    # uncertain is left only by reconcile (readback) or a same-key retry
    leaving = {t.event for t in spec.transitions if t.source == "uncertain" and not t.internal}
    assert leaving == {"reconcile", "retry"}


def test_repository_specs_folder_is_the_packaged_declarations() -> None:
    repo_specs = Path(__file__).parent.parent / "specs"
    assert repo_specs.resolve() == declarations_dir().resolve()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r.pop("initial"), "missing 'initial'"),
        (lambda r: r["states"]["reserved"].pop("meaning"), "needs a one-line 'meaning'"),
        (lambda r: r["states"]["reserved"].update(colour="red"), "unknown keys"),
        (lambda r: r["transitions"][0].update(dest="nowhere"), "not a declared state"),
        (lambda r: r["transitions"][0].update(guards=["wishful"]), "not declared under"),
        (lambda r: r["guards"]["lease_live"].update(refusal="Oops"), "unknown refusal"),
        (lambda r: r["transitions"].append({"event": "x", "source": "reserved"}), "either 'dest'"),
        (lambda r: r["states"].update({"it's": {"meaning": "a quote"}}), "must be an identifier"),
    ],
)
def test_malformed_declarations_are_refused(mutate: Any, message: str, tmp_path: Path) -> None:
    r = raw()
    mutate(r)
    with pytest.raises(SpecError, match=message):
        parse_spec(r, path=tmp_path / "bad.toml")


def test_unreadable_file_is_a_spec_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("states = [")
    with pytest.raises(SpecError, match=r"bad\.toml"):
        load_spec(bad)


def test_machine_refuses_a_declaration_with_other_states() -> None:
    r = raw()
    r["states"]["limbo"] = {"meaning": "not in the protocol"}
    r["transitions"].append({"event": "release", "source": "reserved", "dest": "limbo"})
    # the machine reads the claim's steps by the declaration's shape: release now has two
    with pytest.raises(SpecError, match="the claim protocol needs exactly one state 'release'"):
        ClaimMachine(parse_spec(r))


def test_machine_is_built_without_auto_transitions_and_shared() -> None:
    from claimfsm.machine import claim_machine

    m = claim_machine()
    assert m is claim_machine()
    assert not any(name.startswith("to_") for name in m.machine.events)
    assert set(m.machine.events) == set(claim_spec().events)


def test_stores_refuse_a_declaration_whose_destination_does_not_name_the_source() -> None:
    # Stores and history name a transition's source by its event and destination; the
    # checker does not need to (lapse_reclaims_sending is such a declaration).
    from claimfsm.store._sql import compile_writes

    r = raw()
    r["transitions"].append({"event": "lapse", "source": "uncertain", "dest": "expired"})
    spec = parse_spec(r)
    with pytest.raises(SpecError, match="from both"):
        compile_writes(spec, lambda name: f":{name}")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda t: t.replace('dest = "sending"', 'dest = "sendng"', 1),
            r"claim\.toml:\d+: transition #2 \(begin_send\): dest 'sendng' is not a declared",
        ),
        (
            lambda t: t.replace("terminal = true", 'terminal = "yes"', 1),
            r"claim\.toml:\d+: state 'confirmed': terminal must be true or false",
        ),
        (
            lambda t: t.replace('guards = ["owner_matches"]', 'guards = ["owner_match"]', 1),
            r"claim\.toml:\d+: transition #3 \(release\): guard 'owner_match' is not declared",
        ),
        (
            lambda t: t.replace('name = "claim"', 'name = "../claim"', 1),
            r"claim\.toml: name must be a word",
        ),
        (
            lambda t: t.replace('initial = "unclaimed"', "initial = unclaimed", 1),
            r"claim\.toml: cannot read the declaration: .*line \d+",
        ),
        (
            lambda t: t.replace("[lease]\nkept = true", '[lease]\nkept = "yes"', 1),
            r"claim\.toml: \[lease\]: kept must be true or false",
        ),
        (
            lambda t: t.replace("[lease]\nkept = true", "[lease]\nkeep = true", 1),
            r"claim\.toml: .*\[lease\].*'keep'",
        ),
        (
            # a kept deadline is never lapsed outside the lease states: no guard reads it there
            lambda t: (
                t
                + '[[transitions]]\nevent = "renew"\nsource = "uncertain"\ndest = "uncertain"\n'
                + 'guards = ["owner_matches", "lease_live"]\n'
            ),
            r"claim\.toml:\d+: transition #\d+ \(renew\): guard 'lease_live' reads the lease out of"
            r" 'uncertain', which is not a lease state; .*declare lease = true on 'uncertain',"
            r" or drop kept",
        ),
    ],
)
def test_bad_declarations_name_the_file_the_line_and_the_fix(
    tmp_path: Path, edit: Any, message: str
) -> None:
    path = tmp_path / "claim.toml"
    path.write_text(edit((declarations_dir() / "claim.toml").read_text()))
    with pytest.raises(SpecError, match=message):
        load_spec(path)


def test_an_unreachable_state_is_refused() -> None:
    r = raw()
    r["states"]["limbo"] = {"meaning": "nothing leads here"}
    with pytest.raises(SpecError, match=r"states \['limbo'\] cannot be reached"):
        parse_spec(r)


@pytest.mark.parametrize(
    ("event", "says"),
    [("begin_send", 'declares work = "starts"'), ("retry", 'declares remote = "resends"')],
)
def test_an_event_after_which_work_may_begin_must_be_durable(
    tmp_path: Path, event: str, says: str
) -> None:
    """Work may begin as soon as such an event commits: a commit that power loss could undo
    would leave the row saying no work started while it ran, so the loader asks for it."""
    text = (declarations_dir() / "claim.toml").read_text()
    at = text.index(f"[events.{event}]")
    cut = text.index("durable = true\n", at)
    path = tmp_path / "claim.toml"
    path.write_text(text[:cut] + text[cut + len("durable = true\n") :])
    with pytest.raises(SpecError, match=r"claim\.toml") as err:
        load_spec(path)
    assert says in str(err.value)
    assert f"add durable = true under [events.{event}]" in str(err.value)
