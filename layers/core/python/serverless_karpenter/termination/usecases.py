"""Use cases behind the termination handler: one pass over every drain, then re-queue while unfinished.

A drain outlives one invocation without holding a Lambda idle: each pass does what it can and returns,
and, while drains remain, sends itself a delayed message on the termination-work queue. The one-minute
schedule resumes drains too, so a lost message costs a minute, never a drain.

Invoked only by its termination-work queue's event source (so that it is never throttled): a batch of
messages is one pass and one re-queue, so parallel chains merge. The one-minute schedule sends the queue
a message of its own (reason ``schedule``); a batch of only those starts a chain only when none has run
lately. An invocation with no records (by hand, or the simulator's) counts as a scheduled one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from serverless_karpenter.adapters import aws
from serverless_karpenter.deployment import TERMINATION_SCHEDULED_PASS
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


def is_scheduled_pass(record: Mapping[str, Any]) -> bool:
    """Whether a queue record is the schedule's message rather than a drain's (or an interruption's)."""
    try:
        body = json.loads(record.get("body") or "")
    except (TypeError, ValueError):
        return False
    return isinstance(body, dict) and body.get("reason") == TERMINATION_SCHEDULED_PASS


RunTermination = Callable[..., TerminationRun]


@dataclass
class TerminationChain:
    """The chain of delayed re-queue messages, as a warm Lambda remembers it: when this container last
    re-queued. The handler keeps one per container (a new Lambda, or a new simulation, starts without)."""

    last_requeue: datetime | None = None
    # None: this module's ``run_termination``, looked up at each pass (not bound when the class is made).
    run: RunTermination | None = None

    def handle(
        self,
        plane: ControlPlane,
        records: Sequence[Mapping[str, Any]],
        wake_provisioner: WakeProvisioner | None = None,
    ) -> TerminationRun:
        """One pass for a batch of queue records: a drain's re-queued message continues its chain; the
        schedule's only revives a chain gone quiet (a lost message), so two chains never run side by side."""
        now = plane.clock.now()
        chained = any(not is_scheduled_pass(record) for record in records)
        chain_alive = self.last_requeue is not None and now - self.last_requeue < timedelta(
            seconds=3 * max(1, plane.settings.termination_requeue_seconds)
        )
        run = self.run or run_termination
        result = run(plane, wake_provisioner, requeue=chained or not chain_alive)
        if result.requeued:
            self.last_requeue = now
        return result
