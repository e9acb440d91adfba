"""Disruption: one pass of emptiness, expiration, drift and consolidation under budgets (schedule, 1 min).

Decisions that outlive the invocation (the 15 s validation, waiting for replacements) are kept on the
NodeClaim records, so each invocation does one pass and returns. The ``disruption`` lease keeps passes
from overlapping.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from serverless_karpenter.disruption.usecases import disruption_lease, run_disruption
from serverless_karpenter.observability import bind_cluster, logger, metrics, tracer
from serverless_karpenter.runtime import control_plane


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    plane = control_plane()
    bind_cluster(plane.settings.cluster_name)
    request_id = getattr(context, "aws_request_id", "local")
    return run_disruption(plane, disruption_lease(plane, request_id)).to_json()
