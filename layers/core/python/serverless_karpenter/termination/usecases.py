"""Use cases behind the termination handler: one pass over every drain, then re-queue while unfinished.

A drain outlives one invocation without holding a Lambda idle: each pass does what it can and returns,
and, while drains remain, sends itself a delayed message on the termination-work queue. The one-minute
schedule resumes drains too, so a lost message costs a minute, never a drain.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from serverless_karpenter.adapters import aws
from serverless_karpenter.observability import logger
from serverless_karpenter.provisioning.context import ControlPlane
from serverless_karpenter.termination.terminator import DrainProgress, Terminator, WakeProvisioner


@dataclass
class TerminationRun:
    progress: list[DrainProgress] = field(default_factory=list)
    requeued: bool = False

    @property
    def unfinished(self) -> list[str]:
        return [p.node for p in self.progress if not p.finished]


def queue_termination_pass(plane: ControlPlane, delay_seconds: int, reason: str) -> bool:
    """Ask the termination function for a pass ``delay_seconds`` from now; False without a queue."""
    url = plane.settings.termination_queue_url
    if not url:
        return False
    aws.client("sqs", plane.settings.aws_region).send_message(
        QueueUrl=url,
        MessageBody=json.dumps({"reason": reason}),
        DelaySeconds=max(0, min(900, delay_seconds)),
    )
    return True


def run_termination(
    plane: ControlPlane, wake_provisioner: WakeProvisioner | None = None, *, requeue: bool = True
) -> TerminationRun:
    """One pass; ``requeue`` False when a chain of delayed messages is known to be alive already, so
    that the schedule does not start a second chain beside it."""
    run = TerminationRun(progress=Terminator(plane, wake_provisioner).reconcile())
    if run.unfinished and requeue:
        run.requeued = queue_termination_pass(
            plane, plane.settings.termination_requeue_seconds, "drains-in-progress"
        )
        logger.info(
            "drains in progress",
            extra={"nodes": run.unfinished, "requeued": run.requeued},
        )
    return run
