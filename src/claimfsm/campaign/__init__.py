"""The crash and fault campaign: kill workers, break connections, restart the database,
then prove from the store's history and the remote's own log that nothing was lost.

``run_campaign(CampaignConfig(...))`` or ``claimfsm campaign``; a lifecycle of your own's
with ``CampaignConfig(design="job")`` or ``claimfsm campaign job``. See RELIABILITY.md.
"""

from claimfsm.campaign._config import CampaignConfig, CampaignReport
from claimfsm.campaign._database import local_restart_command
from claimfsm.campaign._lifecycle_verdict import LifecycleFindings, judge_lifecycle
from claimfsm.campaign._remote import RemoteClient, RemoteFaults, Request
from claimfsm.campaign._run import run_campaign
from claimfsm.campaign._verdict import Findings, Verdict, judge, overlaps

__all__ = [
    "CampaignConfig",
    "CampaignReport",
    "Findings",
    "LifecycleFindings",
    "RemoteClient",
    "RemoteFaults",
    "Request",
    "Verdict",
    "judge",
    "judge_lifecycle",
    "local_restart_command",
    "overlaps",
    "run_campaign",
]
