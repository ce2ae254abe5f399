"""What an embedding service calls: the Dispatcher and the Remote protocol it drives."""

from claimfsm.service._dispatcher import Dispatcher, DispatchResult, StepHook
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
    "Remote",
    "RemoteMode",
    "SendAmbiguous",
    "SendRejected",
    "SendRequest",
    "SimulatedRemote",
    "StepHook",
    "check_remote",
]
