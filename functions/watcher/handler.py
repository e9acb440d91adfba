"""Watcher: lists the pending pods once, then watches them through its invocation, and wakes the
provisioner per batch."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, Field
from serverless_karpenter.observability import bind_cluster, logger, metrics, tracer
from serverless_karpenter.provisioning.batcher import PendingPodBatcher
from serverless_karpenter.provisioning.usecases import PendingPodWatch, StreamProgress, watcher_deadline
from serverless_karpenter.runtime import control_plane


class WatcherEvent(BaseModel):
    # The schedule sends {}. The simulator, which runs components in turns on a virtual clock, sends one
    # turn of a watch a virtual second: the lines the API server has written on each open watch stream.
    watch_progress: dict[str, tuple[int, bool]] | None = Field(default=None, alias="watchProgress")


_batcher: PendingPodBatcher | None = None
_session: PendingPodWatch | None = None  # the simulator's watch, across its turns


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    global _batcher, _session
    request = WatcherEvent.model_validate(event or {})
    plane = control_plane()
    bind_cluster(plane.settings.cluster_name)
    if _batcher is None:
        _batcher = PendingPodBatcher(plane.settings.batch_idle_seconds, plane.settings.batch_max_seconds)
    wake = plane.provisioner.invoke
    deadline = watcher_deadline(
        plane, plane.settings.watcher_poll_seconds, context.get_remaining_time_in_millis() / 1000
    )
    if request.watch_progress is None:
        watch = PendingPodWatch(plane, _batcher, wake, deadline)
        invocations = watch.run()
        logger.debug("watch ended", extra={"lists": watch.lists, "watches": watch.watches})
        return {"provisionerInvocations": invocations}
    # A turn after the last one's watch ended begins the next invocation, as the next schedule would.
    if _session is None or _session.over:
        if _session is not None:
            _session.close()
        _session = PendingPodWatch(plane, _batcher, wake, deadline)
    progress = {key: StreamProgress(lines, done) for key, (lines, done) in request.watch_progress.items()}
    before = _session.invocations
    _session.step(progress)
    return {"provisionerInvocations": _session.invocations - before}
