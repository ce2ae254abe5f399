"""What an embedding service calls: the Dispatcher, the Remote protocol it drives, and the
lease keep-alive."""

from claimfsm.service._dispatcher import Dispatcher, DispatchResult, StepHook
from claimfsm.service._http import HttpRemote, RemoteUnavailable
from claimfsm.service._keepalive import KeepAlive
from claimfsm.service._remote import (
    Effect,
    Faults,
    Remote,
    RemoteMode,
    SendAmbiguous,
    SendRejected,
    SendRequest,
    SimulatedRemote,
    check_remote,
)

__all__ = [
    "DispatchResult",
    "Dispatcher",
    "Effect",
    "Faults",
    "HttpRemote",
    "KeepAlive",
    "Remote",
    "RemoteMode",
    "RemoteUnavailable",
    "SendAmbiguous",
    "SendRejected",
    "SendRequest",
    "SimulatedRemote",
    "StepHook",
    "check_remote",
]
