"""Disruption: emptiness, expiration, drift and consolidation under budgets (schedule, 1 min).

One invocation runs passes for ``DISRUPTION_LOOP_SECONDS`` (Karpenter polls every 10 s); decisions that
outlive it (the 15 s validation, waiting for replacements) are kept on the NodeClaim records. The
``disruption`` lease keeps invocations from overlapping.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, Field
from serverless_karpenter.disruption.usecases import disruption_lease, run_disruption
from serverless_karpenter.observability import bind_cluster, logger, metrics, tracer
from serverless_karpenter.runtime import control_plane


class DisruptionEvent(BaseModel):
    # The schedule sends its own event; the simulator asks for one pass (0) and schedules the next.
    loop_seconds: float | None = Field(default=None, alias="loopSeconds", ge=0)


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    request = DisruptionEvent.model_validate(event or {})
    plane = control_plane()
    bind_cluster(plane.settings.cluster_name)
    request_id = getattr(context, "aws_request_id", "local")
    lease = disruption_lease(plane, request_id)
    return run_disruption(plane, lease, request.loop_seconds, plane.provisioner.invoke).to_json()
