"""Graceful termination of one node: taint, drain in priority groups, terminate, release the finalizer.

Progress lives in the NodeClaim record and the cluster, not in the invocation: each pass does what can
be done now and returns, so a drain outlives any one Lambda and resumes after a crash.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from serverless_karpenter import crashpoints
from serverless_karpenter.adapters.kubernetes import EvictionResult
from serverless_karpenter.adapters.state_store import ConflictError
from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.observability import MetricName, MetricUnit, Msg, logger, metrics
from serverless_karpenter.provisioning.context import ControlPlane
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter.scheduling.taints import Taint, tolerations_from_dicts

DISRUPTED_TAINT = {"key": wk.DISRUPTED_TAINT_KEY, "effect": "NoSchedule"}
CRITICAL_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
TERMINATED_RETENTION = timedelta(days=1)
GONE_STATES = frozenset({"shutting-down", "terminated"})


@dataclass
class DrainProgress:
    node: str
    evicted: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    force_deleted: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    terminated_instance: bool = False
    finished: bool = False


def priority_group(pod: Mapping[str, Any]) -> int:
    """Karpenter's eviction order: non-critical before critical, and non-DaemonSet before DaemonSet."""
    critical = (pod.get("spec") or {}).get("priorityClassName") in CRITICAL_PRIORITY_CLASSES
    return (2 if critical else 0) + (1 if podlib.is_daemonset_pod(pod) else 0)


def tolerates_disruption(pod: Mapping[str, Any]) -> bool:
    """A pod that tolerates the disrupted taint would come straight back, so it is not drained."""
    taint = Taint(key=wk.DISRUPTED_TAINT_KEY, value="", effect="NoSchedule")
    return any(t.tolerates(taint) for t in tolerations_from_dicts((pod.get("spec") or {}).get("tolerations")))


def do_not_disrupt(pod: Mapping[str, Any]) -> bool:
    return (pod.get("metadata", {}).get("annotations") or {}).get(wk.DO_NOT_DISRUPT) == "true"


def drainable(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [
        p
        for p in pods
        if not podlib.is_terminal(p) and not podlib.is_mirror_pod(p) and not tolerates_disruption(p)
    ]


def begin_deletion(
    plane: ControlPlane, record: NodeClaimRecord, reason: str, deadline: datetime | None = None
) -> NodeClaimRecord:
    """Start removing a NodeClaim's node: mark the record, then delete the Node so the finalizer drains it.

    A claim whose node never registered has nothing to drain: its instance is terminated at once.
    """
    now = plane.clock.now()
    if record.is_deleting or record.state == NodeClaimState.TERMINATED:
        return record
    update: dict[str, Any] = {
        "state": NodeClaimState.DISRUPTING,
        "disruption_reason": reason,
        "deletion_requested_at": now,
    }
    if deadline is not None:
        update["drain_deadline"] = deadline
    saved = plane.store.save(record.model_copy(update=update))
    if saved.node_name:
        plane.kube.delete_node(saved.node_name)
    else:
        if saved.instance_id:
            plane.launcher.terminate([saved.instance_id])
        saved = close(plane, saved)
    return saved


def close(plane: ControlPlane, record: NodeClaimRecord) -> NodeClaimRecord:
    now = plane.clock.now()
    saved = plane.store.save(
        record.model_copy(
            update={
                "state": NodeClaimState.TERMINATED,
                "terminated_at": now,
                "expires_at": now + TERMINATED_RETENTION,
            }
        )
    )
    metrics.add_metric(name=MetricName.NODECLAIMS_TERMINATED, unit=MetricUnit.Count, value=1)
    logger.info(Msg.DELETED_NODECLAIM, extra={"nodeclaim": record.name, "node": record.node_name})
    return saved


class Terminator:
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def reconcile(self) -> list[DrainProgress]:
        """One pass over every node that is being deleted and still holds our finalizer."""
        progress = []
        for node in self.plane.kube.list_nodes():
            meta = node.get("metadata", {})
            if meta.get("deletionTimestamp") and wk.TERMINATION_FINALIZER in (meta.get("finalizers") or []):
                try:
                    progress.append(self.terminate_node(node))
                except ConflictError:
                    continue
        return progress

    def _record_for(self, node: Mapping[str, Any]) -> NodeClaimRecord | None:
        store = self.plane.store
        record = store.find_by_node_name(node["metadata"]["name"])
        if record is None:
            provider_id = (node.get("spec") or {}).get("providerID") or ""
            instance_id = provider_id.rsplit("/", 1)[-1]
            record = store.find_by_instance_id(instance_id) if instance_id else None
        return record

    def terminate_node(self, node: Mapping[str, Any]) -> DrainProgress:
        plane = self.plane
        now = plane.clock.now()
        name = node["metadata"]["name"]
        progress = DrainProgress(node=name)
        record = self._record_for(node)
        if record is not None and not record.is_deleting and record.state != NodeClaimState.TERMINATED:
            # Deleted by somebody else (kubectl delete node): adopt it as a deletion.
            record = plane.store.save(
                record.model_copy(
                    update={
                        "state": NodeClaimState.DISRUPTING,
                        "disruption_reason": "NodeDeleted",
                        "deletion_requested_at": now,
                    }
                )
            )
        if record is not None and record.state == NodeClaimState.DISRUPTING:
            self._taint(node)
            deadline = record.drain_deadline
            if record.termination_grace_period_seconds is not None:
                grace_deadline = (record.deletion_requested_at or now) + timedelta(
                    seconds=record.termination_grace_period_seconds
                )
                deadline = min(deadline, grace_deadline) if deadline else grace_deadline
            record = plane.store.save(
                record.model_copy(update={"state": NodeClaimState.DRAINING, "drain_deadline": deadline})
            )
            metrics.add_metric(name=MetricName.DRAINS_STARTED, unit=MetricUnit.Count, value=1)
        deadline = record.drain_deadline if record is not None else None
        pods = drainable(plane.kube.list_pods_on_node(name))
        remaining = [p for p in pods if not podlib.is_deleting(p)]
        if remaining:
            self._drain(remaining, now, deadline, progress)
            crashpoints.hit(crashpoints.MID_DRAIN)
            return progress
        if any(podlib.is_deleting(p) for p in pods) and (deadline is None or now < deadline):
            progress.waiting = [podlib.key(p) for p in pods]
            return progress  # pods are shutting down; the kubelet finishes them
        self._finish(node, record, progress)
        return progress

    def _taint(self, node: Mapping[str, Any]) -> None:
        taints = list((node.get("spec") or {}).get("taints") or [])
        if any(t.get("key") == wk.DISRUPTED_TAINT_KEY for t in taints):
            return
        self.plane.kube.patch_node(
            node["metadata"]["name"],
            {
                "metadata": {"labels": {wk.EXCLUDE_FROM_LB: "karpenter"}},
                "spec": {"taints": [*taints, DISRUPTED_TAINT]},
            },
        )
        logger.info(
            Msg.TAINTED_NODE,
            extra={"node": node["metadata"]["name"], "taint": f"{wk.DISRUPTED_TAINT_KEY}:NoSchedule"},
        )

    def _drain(
        self, pods: list[Mapping[str, Any]], now: datetime, deadline: datetime | None, progress: DrainProgress
    ) -> None:
        kube = self.plane.kube
        # Pods past their own deletion point (deadline minus their grace period) are deleted outright.
        if deadline is not None:
            for pod in pods:
                grace = int((pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
                if now >= deadline - timedelta(seconds=grace):
                    remaining_grace = max(0, int((deadline - now).total_seconds()))
                    kube.delete_pod(pod, grace_period_seconds=min(grace, remaining_grace))
                    progress.force_deleted.append(podlib.key(pod))
            if progress.force_deleted:
                metrics.add_metric(
                    name=MetricName.PODS_FORCE_DELETED,
                    unit=MetricUnit.Count,
                    value=len(progress.force_deleted),
                )
                pods = [p for p in pods if podlib.key(p) not in set(progress.force_deleted)]
        if not pods:
            return
        group = min(priority_group(p) for p in pods)
        for pod in pods:
            if priority_group(pod) != group:
                continue
            if do_not_disrupt(pod):
                progress.waiting.append(podlib.key(pod))
                continue
            outcome = kube.evict(pod)
            if outcome == EvictionResult.EVICTED:
                progress.evicted.append(podlib.key(pod))
            elif outcome == EvictionResult.BLOCKED:
                progress.blocked.append(podlib.key(pod))
        if progress.evicted:
            metrics.add_metric(
                name=MetricName.PODS_EVICTED, unit=MetricUnit.Count, value=len(progress.evicted)
            )

    def _finish(
        self, node: Mapping[str, Any], record: NodeClaimRecord | None, progress: DrainProgress
    ) -> None:
        plane = self.plane
        name = node["metadata"]["name"]
        if record is not None and record.instance_id:
            instance = plane.launcher.describe(record.instance_id)
            if instance is not None and instance.state not in GONE_STATES:
                plane.launcher.terminate([record.instance_id])
                progress.terminated_instance = True
                if record.state != NodeClaimState.TERMINATING:
                    plane.store.save(record.model_copy(update={"state": NodeClaimState.TERMINATING}))
                return  # the finalizer stays until EC2 reports the instance going away
        plane.kube.remove_node_finalizer(dict(node), wk.TERMINATION_FINALIZER)
        logger.info(Msg.DELETED_NODE, extra={"node": name})
        if record is not None and record.state != NodeClaimState.TERMINATED:
            record = plane.store.get(record.name) or record
            started = record.deletion_requested_at
            close(plane, record)
            metrics.add_metric(name=MetricName.DRAINS_COMPLETED, unit=MetricUnit.Count, value=1)
            if started is not None:
                metrics.add_metric(
                    name=MetricName.DRAIN_DURATION,
                    unit=MetricUnit.Seconds,
                    value=(plane.clock.now() - started).total_seconds(),
                )
        progress.finished = True
