"""What a remote adapter implements, and a simulated remote for demos and tests."""

from __future__ import annotations

import difflib
import inspect
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from claimfsm.errors import InvalidArgument, InvalidRemote
from claimfsm.spec import REMOTE_MODES, RemoteMode, RemoteRules


@dataclass(frozen=True, slots=True)
class SendRequest:
    """One external send: everything a remote needs to dedup or fence it."""

    target_id: str
    draft_id: int
    epoch: int  # a fencing remote rejects epochs at or below its fence
    idempotency_key: str  # a deduping remote applies each key at most once
    content: str


class SendAmbiguous(Exception):
    """The send may or may not have taken effect (timeout, lost acknowledgement)."""


class SendRejected(Exception):
    """The remote refused the send without applying it (for example a fenced epoch)."""


@runtime_checkable
class Remote(Protocol):
    """An adapter to the external system. claimfsm calls nothing else on it.

    ``send`` returns when the remote acknowledged the effect; any exception means the
    outcome is unknown to the caller, and the claim becomes uncertain. ``readback`` says
    whether the effect of ``idempotency_key`` is present. ``fence`` (fencing remotes only)
    makes the remote reject every send at ``epoch`` or below from now on, and returns only
    once no such send can still land. The two flags are plain bools. The whole contract,
    with an example, is docs/remote-adapters.md; ``check_remote`` checks an adapter.
    """

    fences_epochs: bool
    dedups_by_key: bool

    def send(self, request: SendRequest) -> None: ...
    def readback(self, target_id: str, idempotency_key: str, epoch: int) -> bool: ...
    def fence(self, target_id: str, epoch: int) -> None: ...


@runtime_checkable
class AsyncRemote(Protocol):
    """``Remote`` for coroutines (``AsyncDispatcher``): the same contract, the same flags,
    and ``send``, ``readback`` and ``fence`` as coroutine functions. ``check_remote(remote,
    asynchronous=True)`` checks an adapter."""

    fences_epochs: bool
    dedups_by_key: bool

    async def send(self, request: SendRequest) -> None: ...
    async def readback(self, target_id: str, idempotency_key: str, epoch: int) -> bool: ...
    async def fence(self, target_id: str, epoch: int) -> None: ...


#: A request to check a ``send`` signature with (nothing is sent).
PROBE_REQUEST = SendRequest("target", 1, 1, "key", "")
#: What claimfsm calls on an adapter: each method's parameters, and probe arguments.
_CALLS: dict[str, tuple[tuple[str, ...], tuple[Any, ...]]] = {
    "send": (("request",), (PROBE_REQUEST,)),
    "readback": (("target_id", "idempotency_key", "epoch"), ("target", "key", 1)),
    "fence": (("target_id", "epoch"), ("target", 1)),
}
_FLAGS = ("fences_epochs", "dedups_by_key")


def check_remote(remote: object, *, asynchronous: bool = False) -> None:
    """Raise :class:`InvalidRemote` naming everything wrong with ``remote`` as an adapter:
    a missing or non-bool flag (with the near-miss name it has instead, if any), a missing
    method, a method left as the protocol's stub, or one whose signature does not take the
    arguments claimfsm passes. ``asynchronous``: an ``AsyncRemote``, whose methods must be
    coroutine functions (and a ``Remote``'s must not be). Nothing is called."""
    protocol: type = AsyncRemote if asynchronous else Remote
    problems: list[str] = []
    names = [n for n in dir(remote) if not n.startswith("__")]

    def near(name: str) -> str:
        close = difflib.get_close_matches(name, [n for n in names if n != name], n=1, cutoff=0.75)
        return f" (it has {close[0]!r}: a misspelling?)" if close else ""

    for flag in _FLAGS:
        value = getattr(remote, flag, _MISSING)
        if value is _MISSING:
            problems.append(f"the flag {flag} is missing{near(flag)}; set it to True or False")
        elif not isinstance(value, bool):
            problems.append(f"the flag {flag} must be True or False, not {value!r}")
    for method, (params, args) in _CALLS.items():
        bound = getattr(remote, method, _MISSING)
        if bound is _MISSING:
            problems.append(f"the method {method} is missing{near(method)}")
            continue
        if not callable(bound):
            problems.append(f"{method} must be a method, not {type(bound).__name__}")
            continue
        if getattr(type(remote), method, None) is getattr(protocol, method):
            problems.append(
                f"the method {method} is the {protocol.__name__} protocol's stub: implement it"
            )
            continue
        if inspect.iscoroutinefunction(bound) != asynchronous:
            problems.append(
                f"{method} must be a coroutine function (async def) for AsyncDispatcher"
                if asynchronous
                else f"{method} is a coroutine function: use AsyncDispatcher, or a plain def"
            )
            continue
        try:
            inspect.signature(bound).bind(*args)
        except TypeError as exc:
            problems.append(
                f"{shown(method, bound)} cannot be called as {method}({', '.join(params)}): {exc}"
            )
        except ValueError:  # no signature to read (a builtin): leave it to the call
            pass
    if problems:
        raise InvalidRemote(
            f"{type(remote).__name__} is not a usable {protocol.__name__} adapter: "
            + "; ".join(problems)
            + " (the contract: docs/remote-adapters.md)",
            problems=problems,
        )


def shown(name: str, method: Any) -> str:
    """``name(a, b)``: a method as its parameter names, for a message."""
    return f"{name}({', '.join(inspect.signature(method).parameters)})"


_MISSING = object()


@dataclass(frozen=True, slots=True)
class Effect:
    target_id: str
    draft_id: int
    epoch: int
    idempotency_key: str
    started: float
    landed: float


@dataclass
class Faults:
    """Probabilities of what can go wrong with one send in the simulated remote."""

    lost_request: float = 0.0  # never arrives: no effect, the caller sees a timeout
    lost_ack: float = 0.0  # applied, but the caller sees a timeout
    late: float = 0.0  # the caller times out now; the request lands later (or is fenced)
    late_seconds: tuple[float, float] = (0.02, 0.15)
    latency_seconds: tuple[float, float] = (0.0005, 0.003)


@dataclass
class _InFlight:
    request: SendRequest
    started: float
    done: threading.Event = field(default_factory=threading.Event)


class SimulatedRemote:
    """A thread-safe simulated remote that records every effect and every overlap.

    ``mode``: ``plain`` applies every send; ``fencing`` rejects epochs at or below the
    target's fence (and the highest epoch seen is a fence too); ``dedup`` applies each
    idempotency key once. ``overlapping_sends`` counts sends that arrived for a target
    while another send for it was still in flight.
    """

    def __init__(
        self, mode: RemoteMode = "fencing", *, faults: Faults | None = None, seed: int = 0
    ):
        if not isinstance(mode, str) or mode not in REMOTE_MODES:
            raise InvalidArgument(f"mode must be plain, fencing or dedup, not {mode!r}")
        self.mode = mode
        self._rules = RemoteRules(mode)
        self.fences_epochs = self._rules.fences
        self.dedups_by_key = self._rules.dedups
        self.faults = faults or Faults()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._in_flight: dict[str, list[_InFlight]] = {}
        self._fence: dict[str, int] = {}  # reject epochs <= this
        self._keys: set[str] = set()
        self.effects: list[Effect] = []
        self.overlapping_sends = 0
        self.rejected = 0
        self.deduplicated = 0
        self.sends = 0

    # -- the Remote protocol ------------------------------------------------------------------
    def send(self, request: SendRequest) -> None:
        with self._lock:
            self.sends += 1
            roll = self._rng.random()
            f = self.faults
            if roll < f.lost_request:
                raise SendAmbiguous("request lost before it reached the remote")
            fence = self._rules.arrives(self._fence.get(request.target_id, 0), request.epoch)
            if fence is None:
                self.rejected += 1
                raise SendRejected(f"epoch {request.epoch} is fenced for {request.target_id!r}")
            self._fence[request.target_id] = fence
            flight = _InFlight(request, time.monotonic())
            others = self._in_flight.setdefault(request.target_id, [])
            if others:
                self.overlapping_sends += 1
            others.append(flight)
            latency = self._rng.uniform(*f.latency_seconds)
            late = roll < f.lost_request + f.late
            lost_ack = not late and roll < f.lost_request + f.late + f.lost_ack
            delay = self._rng.uniform(*f.late_seconds) if late else 0.0
        if late:
            timer = threading.Timer(latency + delay, self._land, args=(flight,))
            timer.daemon = True
            timer.start()
            raise SendAmbiguous("timed out; the request is still on its way")
        time.sleep(latency)
        applied = self._land(flight)
        if lost_ack:
            raise SendAmbiguous("acknowledgement lost")
        if not applied:
            raise SendRejected(f"epoch {request.epoch} is fenced for {request.target_id!r}")

    def readback(self, target_id: str, idempotency_key: str, epoch: int) -> bool:
        with self._lock:
            return any(
                e.target_id == target_id and e.idempotency_key == idempotency_key
                for e in self.effects
            )

    def fence(self, target_id: str, epoch: int) -> None:
        if not self.fences_epochs:
            raise SendRejected("this remote does not fence")
        with self._lock:
            self._fence[target_id] = self._rules.fence_through(self._fence.get(target_id, 0), epoch)
            waiting = [fl for fl in self._in_flight.get(target_id, []) if fl.request.epoch <= epoch]
        for fl in waiting:  # a fenced request can no longer land: settle it now
            self._land(fl)

    # -- the simulation ------------------------------------------------------------------------
    def _land(self, flight: _InFlight) -> bool:
        """Apply (or reject) one request, once; True if its effect is present afterwards."""
        r = flight.request
        with self._lock:
            if flight.done.is_set():
                return self._present(r)
            flight.done.set()
            self._in_flight[r.target_id].remove(flight)
            fence = self._fence.get(r.target_id, 0)
            landing = self._rules.lands(fence, r.epoch, r.idempotency_key in self._keys)
            if landing == "fenced":
                self.rejected += 1
                return False
            if landing == "deduplicated":
                self.deduplicated += 1
                return True
            self._keys.add(r.idempotency_key)
            self.effects.append(
                Effect(
                    r.target_id,
                    r.draft_id,
                    r.epoch,
                    r.idempotency_key,
                    flight.started,
                    time.monotonic(),
                )
            )
            return True

    def _present(self, r: SendRequest) -> bool:
        return any(e.idempotency_key == r.idempotency_key for e in self.effects)

    def duplicate_effects(self) -> int:
        """Effects beyond the first for one draft."""
        with self._lock:
            counts = Counter(e.draft_id for e in self.effects)
        return sum(n - 1 for n in counts.values() if n > 1)

    def settle(self) -> None:
        """Land every request still in flight (end of a run)."""
        with self._lock:
            flights = [fl for fls in self._in_flight.values() for fl in fls]
        for fl in flights:
            self._land(fl)
