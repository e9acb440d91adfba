"""Provisioner: the single writer. Finishes launches, registers nodes, provisions pending pods."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from serverless_karpenter.observability import bind_cluster, logger, metrics, tracer
from serverless_karpenter.provisioning.usecases import provisioner_lease, run_provisioner
from serverless_karpenter.runtime import control_plane


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    plane = control_plane()
    bind_cluster(plane.settings.cluster_name)
    run = run_provisioner(plane, provisioner_lease(plane, context.aws_request_id))
    return {
        "leader": run.leader,
        "launched": run.provisioning.launched + run.lifecycle.launched,
        "registered": run.lifecycle.registered,
        "initialized": run.lifecycle.initialized,
        "unschedulable": sorted(run.provisioning.unschedulable),
    }
