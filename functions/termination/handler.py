"""Termination: advances every drain in progress by one pass (schedule and delayed SQS messages).

Invoked only by its termination-work queue's event source (so that it is never throttled): while drains
remain, each pass sends a message delayed ``TERMINATION_REQUEUE_SECONDS`` (5 s), so a drain advances every
few seconds without a Lambda sleeping through it. A batch of such messages is one pass and one re-queue,
so parallel chains merge. The one-minute schedule sends the queue a message of its own (reason
``schedule``); a batch of only those starts a chain only when none has run lately. An invocation with no
records (by hand, or the simulator's) counts as a scheduled one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from serverless_karpenter.adapters.invoker import invoke_provisioner as wake_provisioner
from serverless_karpenter.deployment import TERMINATION_SCHEDULED_PASS
from serverless_karpenter.observability import bind_cluster, logger, metrics, tracer
from serverless_karpenter.runtime import control_plane
from serverless_karpenter.termination.usecases import run_termination

_last_requeue: datetime | None = None


def _invoke_provisioner(payload: dict[str, object]) -> None:
    wake_provisioner(control_plane(), payload)


# Replaced by the simulator, which runs the provisioner in-process.
invoke_provisioner = _invoke_provisioner


def _scheduled(record: Mapping[str, Any]) -> bool:
    """Whether a queue record is the schedule's message rather than a drain's (or an interruption's)."""
    try:
        body = json.loads(record.get("body") or "")
    except (TypeError, ValueError):
        return False
    return isinstance(body, dict) and body.get("reason") == TERMINATION_SCHEDULED_PASS


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    global _last_requeue
    plane = control_plane()
    bind_cluster(plane.settings.cluster_name)
    now = plane.clock.now()
    records = (event or {}).get("Records") or []
    # A drain's re-queued message continues its chain; the schedule's only revives a chain gone quiet.
    chained = any(not _scheduled(record) for record in records)
    chain_alive = _last_requeue is not None and now - _last_requeue < timedelta(
        seconds=3 * max(1, plane.settings.termination_requeue_seconds)
    )
    run = run_termination(
        plane,
        lambda payload: invoke_provisioner(payload),  # noqa: PLW0108 - looked up at call time
        requeue=chained or not chain_alive,
    )
    if run.requeued:
        _last_requeue = now
    progress = run.progress
    # Messages are only a wake-up call: a batch is always acknowledged whole.
    return {
        "nodes": [p.node for p in progress],
        "finished": [p.node for p in progress if p.finished],
        "evicted": sum(len(p.evicted) for p in progress),
        "blocked": sum(len(p.blocked) for p in progress),
        "requeued": run.requeued,
        "batchItemFailures": [],
    }
