"""Termination: advances every drain in progress by one pass (schedule and delayed SQS messages)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from serverless_karpenter.observability import logger, metrics, tracer
from serverless_karpenter.runtime import control_plane
from serverless_karpenter.termination.terminator import Terminator


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    plane = control_plane()
    logger.append_keys(cluster=plane.settings.cluster_name)
    progress = Terminator(plane).reconcile()
    return {
        "nodes": [p.node for p in progress],
        "finished": [p.node for p in progress if p.finished],
        "evicted": sum(len(p.evicted) for p in progress),
        "blocked": sum(len(p.blocked) for p in progress),
    }
