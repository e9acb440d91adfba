"""Garbage collection, as Karpenter's NodeClaim garbage collection: our tagged instances with no live
record for the grace period are terminated. A record is written before its launch and the records are
read before the instances, so an instance without a record is never one being launched."""

from __future__ import annotations

from datetime import timedelta

from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.phases.base import LifecyclePass
from serverless_karpenter.observability import MetricName, MetricUnit, Msg, logger, metrics
from serverless_karpenter.termination.terminator import GONE_STATES


class GarbageCollection:
    def reconcile(self, state: LifecyclePass) -> None:
        """Terminate our tagged instances that have had no live record for the grace period, and that no
        NodeClaim object names (Karpenter's garbage collection spares those; adoption takes them)."""
        plane = state.plane
        now = plane.clock.now()
        live = {r.name for r in state.records}  # list_live: no Terminated record
        grace = timedelta(seconds=plane.settings.garbage_collection_grace_seconds)
        orphans = [
            i
            for i in state.instances.values()
            if i.state not in GONE_STATES
            and i.tags.get(wk.NODECLAIM) not in live
            and i.id not in state.claimed_instances
            and now - i.launch_time > grace
        ]
        if orphans:
            plane.launcher.terminate([i.id for i in orphans])
            for instance in orphans:
                logger.info(
                    Msg.GARBAGE_COLLECTED_INSTANCE,
                    extra={"instance": instance.id, "nodeclaim": instance.tags.get(wk.NODECLAIM)},
                )
                state.result.garbage_collected.append(instance.id)
            metrics.add_metric(
                name=MetricName.GARBAGE_COLLECTED_INSTANCES, unit=MetricUnit.Count, value=len(orphans)
            )
