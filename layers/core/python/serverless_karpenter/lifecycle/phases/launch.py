"""Launch, as Karpenter's lifecycle ``launch.go``: a Pending record gets its instance.

The provisioner writes the record before CreateFleet, so a Pending record seen here is one whose launch
answered after the record was read (its instance, found by the NodeClaim tag, is adopted as launched),
one a provisioner died before launching (launched here), or one past the launch TTL (deleted, as
Karpenter's liveness does a claim that never launched)."""

from __future__ import annotations

from datetime import timedelta

from serverless_karpenter.lifecycle.launch import launch_record, mark_launched
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.lifecycle.phases.base import NEXT, LifecyclePass, Outcome
from serverless_karpenter.observability import logger


class Launch:
    def reconcile(self, record: NodeClaimRecord, state: LifecyclePass) -> Outcome:
        if record.state != NodeClaimState.PENDING:
            return NEXT
        plane, result = state.plane, state.result
        now = plane.clock.now()
        settings = plane.settings
        instance = state.instances_by_claim.get(record.name)
        if instance is not None:
            result.launched.append(record.name)
            return mark_launched(plane, record, instance)
        if now - record.created_at > timedelta(seconds=settings.launch_timeout_seconds):
            logger.warning("deleting nodeclaim, launch ttl exceeded", extra={"nodeclaim": record.name})
            plane.store.delete(record)
            result.deleted.append(record.name)
            return None
        # A provisioner died between writing the record and CreateFleet: finish its work.
        if result.nodepools is None:
            result.nodepools = plane.kube.list_nodepools()
        launched = launch_record(plane, record, state.resolved.get(record.nodeclass), result.nodepools)
        if launched.state == NodeClaimState.LAUNCHED:
            result.launched.append(record.name)
        # A launch that failed deleted the record, to plan its pods afresh.
        return launched if launched.state == NodeClaimState.LAUNCHED else None
