"""What an embedding service calls: the Dispatcher, the Remote protocol it drives, and the
lease keep-alive; each with an asyncio face (``AsyncDispatcher``, ``AsyncRemote``,
``AsyncKeepAlive``, ``AsyncHttpRemote``) that runs the same core."""

from claimfsm.service._async import AsyncDispatcher, AsyncDispatchResult, AsyncStepHook
from claimfsm.service._dispatcher import Dispatcher, DispatchResult, StepHook
from claimfsm.service._http import AsyncHttpRemote, HttpRemote, RemoteUnavailable
from claimfsm.service._keepalive import AsyncKeepAlive, KeepAlive
from claimfsm.service._remote import (
    AsyncRemote,
    Effect,
    Faults,
    Remote,
    SendAmbiguous,
    SendRejected,
    SendRequest,
    SimulatedRemote,
    check_remote,
)
from claimfsm.spec import RemoteMode

__all__ = [
    "AsyncDispatchResult",
    "AsyncDispatcher",
    "AsyncHttpRemote",
    "AsyncKeepAlive",
    "AsyncRemote",
    "AsyncStepHook",
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
