"""Watcher: polls for provisionable pods through its invocation and wakes the provisioner per batch."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, Field
from serverless_karpenter.adapters.invoker import invoke_provisioner as wake_provisioner
from serverless_karpenter.observability import bind_cluster, logger, metrics, tracer
from serverless_karpenter.provisioning.batcher import PendingPodBatcher
from serverless_karpenter.provisioning.usecases import watch
from serverless_karpenter.runtime import control_plane


class WatcherEvent(BaseModel):
    # The schedule sends {}; the simulator asks for one poll per virtual second.
    poll_seconds: float | None = Field(default=None, alias="pollSeconds")


_batcher: PendingPodBatcher | None = None


def _invoke_provisioner(payload: dict[str, object]) -> None:
    wake_provisioner(control_plane(), payload)


# Replaced by the simulator, which runs the provisioner in-process.
invoke_provisioner = _invoke_provisioner


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    global _batcher
    request = WatcherEvent.model_validate(event or {})
    plane = control_plane()
    bind_cluster(plane.settings.cluster_name)
    if _batcher is None:
        _batcher = PendingPodBatcher(plane.settings.batch_idle_seconds, plane.settings.batch_max_seconds)
    seconds = plane.settings.watcher_poll_seconds if request.poll_seconds is None else request.poll_seconds
    # Looked up at call time, so the simulator can route invocations in-process.
    invocations = watch(plane, _batcher, lambda payload: invoke_provisioner(payload), seconds)  # noqa: PLW0108
    return {"provisionerInvocations": invocations}
