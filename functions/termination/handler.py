"""Termination: advances every drain in progress by one pass (its termination-work queue and schedule).

While drains remain, each pass sends a message delayed ``TERMINATION_REQUEUE_SECONDS`` (5 s), so a drain
advances every few seconds without a Lambda sleeping through it (termination/usecases.py).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from serverless_karpenter.observability import bind_cluster, logger, metrics, tracer
from serverless_karpenter.runtime import control_plane
from serverless_karpenter.termination.usecases import TerminationChain

# This container's chain of re-queue messages: warm state, as the watcher's batcher is.
chain = TerminationChain()


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    plane = control_plane()
    bind_cluster(plane.settings.cluster_name)
    records = (event or {}).get("Records") or []
    run = chain.handle(plane, records, plane.provisioner.invoke)
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
