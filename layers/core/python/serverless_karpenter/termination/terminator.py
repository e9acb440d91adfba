"""Graceful termination of one node: taint, drain in priority groups, terminate, release the finalizer.

Progress lives in the NodeClaim record and the cluster, not in the invocation: each pass does what can
be done now and returns, so a drain outlives any one Lambda and resumes after a crash. What a pass must
remember for the next (PDB back-off, replace-first deadline) is kept in the record's annotations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from serverless_karpenter import crashpoints
from serverless_karpenter.adapters.kubernetes import EvictionResult, KubernetesError
from serverless_karpenter.adapters.state_store import ConflictError
from serverless_karpenter.api import labels as wk
from serverless_karpenter.clock import parse_rfc3339, to_rfc3339
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.lifecycle.nodeclaim_writer import NodeClaimObjects
from serverless_karpenter.observability import MetricName, MetricUnit, Msg, logger, metrics, tracer
from serverless_karpenter.provisioning.context import ControlPlane
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter.termination.backoff import EVICTION_BACKOFF, EvictionBackoff
from serverless_karpenter.termination.handoff import (
    has_disrupted_taint,
    reschedulable_pods,
    tolerates_disruption,
)

DISRUPTED_TAINT = {"key": wk.DISRUPTED_TAINT_KEY, "effect": "NoSchedule"}
CRITICAL_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
TERMINATED_RETENTION = timedelta(days=1)
GONE_STATES = frozenset({"shutting-down", "terminated"})
# An instance going down or off: no kubelet runs on it, or none for long.
STOPPING_STATES = frozenset({"stopping", "stopped"})

# Record annotations that carry a drain's memory from one pass to the next.
REPLACE_FIRST_UNTIL = "serverless-karpenter.io/replace-first-until"  # and EVICTION_BACKOFF (backoff.py)
# Replace-first: when the provisioner has launched nothing for the node's pods by then, they fit
# capacity that already exists, and the drain may start.
REPLACEMENT_SETTLE = timedelta(seconds=30)
# Karpenter's eviction reason (the Evicted Event's) for a node whose NodeClaim records no disruption reason.
FORCEFUL_TERMINATION = "Forceful Termination"

WakeProvisioner = Callable[[dict[str, object]], None]

__all__ = [
    "EVICTION_BACKOFF",
    "DrainProgress",
    "Terminator",
    "begin_deletion",
    "close",
    "do_not_disrupt",
    "drainable",
    "priority_group",
    "tolerates_disruption",
]


@dataclass
class DrainProgress:
    node: str
    evicted: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    force_deleted: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    handed_off: list[str] = field(default_factory=list)
    awaiting_replacement: bool = False
    terminated_instance: bool = False
    finished: bool = False


def priority_group(pod: Mapping[str, Any]) -> int:
    """Karpenter's eviction order: non-critical before critical, and non-DaemonSet before DaemonSet."""
    critical = (pod.get("spec") or {}).get("priorityClassName") in CRITICAL_PRIORITY_CLASSES
    return (2 if critical else 0) + (1 if podlib.is_daemonset_pod(pod) else 0)


def do_not_disrupt(pod: Mapping[str, Any]) -> bool:
    return (pod.get("metadata", {}).get("annotations") or {}).get(wk.DO_NOT_DISRUPT) == "true"


def node_is_ready(node: Mapping[str, Any]) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def drainable(pods: Sequence[Mapping[str, Any]], now: datetime) -> list[Mapping[str, Any]]:
    """The pods a drain waits for, as Karpenter's IsDrainable: not finished, not mirror pods, not
    tolerating the disrupted taint, and not stuck terminating (their kubelet is gone; the pod garbage
    collector removes them once the Node is deleted)."""
    return [
        p
        for p in pods
        if not podlib.is_terminal(p)
        and not podlib.is_mirror_pod(p)
        and not tolerates_disruption(p)
        and not podlib.is_stuck_terminating(p, now)
    ]


def taint_for_disruption(plane: ControlPlane, node: Mapping[str, Any]) -> bool:
    """Taint ``karpenter.sh/disrupted:NoSchedule`` and exclude the node from external load balancers.

    Returns whether the node had to be changed.
    """
    name = node["metadata"]["name"]
    taints = list((node.get("spec") or {}).get("taints") or [])
    labels = (node.get("metadata") or {}).get("labels") or {}
    tainted = has_disrupted_taint(node)
    if tainted and labels.get(wk.EXCLUDE_FROM_LB):
        return False
    patch: dict[str, Any] = {"metadata": {"labels": {wk.EXCLUDE_FROM_LB: "karpenter"}}}
    if not tainted:
        patch["spec"] = {"taints": [*taints, DISRUPTED_TAINT]}
    plane.kube.patch_node(name, patch)
    logger.info(Msg.TAINTED_NODE, extra={"node": name, "taint": f"{wk.DISRUPTED_TAINT_KEY}:NoSchedule"})
    return True


def set_disrupted_taint(plane: ControlPlane, node_name: str, present: bool) -> bool:
    """Put ``karpenter.sh/disrupted:NoSchedule`` on the node, or take it off, reading the node fresh so
    other taints are kept. The disruption pass taints its candidates while their replacements launch,
    as Karpenter does, and untaints them when the command is abandoned. Returns whether it changed."""
    node = plane.kube.get_node(node_name)
    if node is None or has_disrupted_taint(node) == present:
        return False
    current = (node.get("spec") or {}).get("taints") or []
    taints = [t for t in current if t.get("key") != wk.DISRUPTED_TAINT_KEY]
    plane.kube.patch_node(node_name, {"spec": {"taints": [*taints, DISRUPTED_TAINT] if present else taints}})
    message = Msg.TAINTED_NODE if present else Msg.UNTAINTED_NODE
    logger.info(message, extra={"node": node_name, "taint": f"{wk.DISRUPTED_TAINT_KEY}:NoSchedule"})
    return True


def begin_deletion(
    plane: ControlPlane,
    record: NodeClaimRecord,
    reason: str,
    deadline: datetime | None = None,
    *,
    replace_first: bool = False,
    replace_timeout: timedelta | None = None,
    disruption_event: bool = True,
) -> NodeClaimRecord:
    """Start removing a NodeClaim's node: mark the record, taint the node, then delete the Node so our
    finalizer drains it.

    Safe to call again after a failure part-way (a retried message): each step checks what is done.
    The node is tainted here, not on the terminator's next pass, so nothing new lands on it from now on.
    ``replace_first`` holds evictions until replacement capacity for the node's pods is initialized, or
    ``replace_timeout`` has passed. A claim whose node never registered has nothing to drain: its
    instance is terminated at once. ``disruption_event`` records Karpenter's disruption controller's
    DisruptionTerminating on the node; the interruption handler records its own Events instead.
    """
    now = plane.clock.now()
    if record.state == NodeClaimState.TERMINATED:
        return record
    saved = record
    if not record.is_deleting:
        update: dict[str, Any] = {
            "state": NodeClaimState.DISRUPTING,
            "disruption_reason": reason,
            "deletion_requested_at": now,
        }
        if deadline is not None:
            update["drain_deadline"] = deadline
        if replace_first:
            until = now + (timedelta(minutes=10) if replace_timeout is None else replace_timeout)
            update["annotations"] = {**record.annotations, REPLACE_FIRST_UNTIL: to_rfc3339(until)}
        saved = plane.store.save(record.model_copy(update=update))
    elif deadline is not None and (record.drain_deadline is None or deadline < record.drain_deadline):
        # Already being deleted (consolidation, say) when a spot warning comes: the warning's deadline wins.
        saved = plane.store.save(record.model_copy(update={"drain_deadline": deadline}))
    node = plane.kube.get_node(saved.node_name) if saved.node_name else None
    if node is not None:
        taint_for_disruption(plane, node)
        if not node["metadata"].get("deletionTimestamp"):
            if disruption_event:
                plane.kube.record_event(node, "DisruptionTerminating", f"Disrupting Node: {reason}")
                # Karpenter records it on the NodeClaim too (kubectl describe nodeclaim).
                NodeClaimObjects(plane.kube, plane.clock).event(
                    saved.name, "DisruptionTerminating", f"Disrupting NodeClaim: {reason}"
                )
            plane.kube.delete_node(saved.node_name or "")
        return saved
    # No Node (never registered, or already gone): nothing to drain.
    if saved.instance_id:
        plane.launcher.terminate([saved.instance_id])
    return close(plane, saved)


def close(plane: ControlPlane, record: NodeClaimRecord) -> NodeClaimRecord:
    now = plane.clock.now()
    annotations = {k: v for k, v in record.annotations.items() if k not in (EVICTION_BACKOFF,)}
    saved = plane.store.save(
        record.model_copy(
            update={
                "state": NodeClaimState.TERMINATED,
                "terminated_at": now,
                "expires_at": now + TERMINATED_RETENTION,
                "annotations": annotations,
            }
        )
    )
    metrics.add_metric(name=MetricName.NODECLAIMS_TERMINATED, unit=MetricUnit.Count, value=1)
    logger.info(Msg.DELETED_NODECLAIM, extra={"nodeclaim": record.name, "node": record.node_name})
    return saved


def _failure(doing: str, pod: Mapping[str, Any], error: KubernetesError) -> str:
    what = f"returned {error.status}" if error.status is not None else f"failed: {error}"
    return f"{doing} {what} (Pod={podlib.key(pod)})"


class Terminator:
    def __init__(self, plane: ControlPlane, wake_provisioner: WakeProvisioner | None = None) -> None:
        self.plane = plane
        self.wake_provisioner = wake_provisioner

    @tracer.capture_method(capture_response=False)
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
        instance_gone = instance_down = False
        if record is not None and record.instance_id:
            instance = plane.launcher.describe(record.instance_id)
            instance_gone = instance is None or instance.state in GONE_STATES
            instance_down = instance is not None and instance.state in STOPPING_STATES
        if instance_gone:
            # Terminated outside our control: nothing can be drained gracefully any more; the pods'
            # controllers recreate them once the Node object is gone.
            self._finish(node, record, progress, instance_gone=True)
            return progress
        if instance_down and not node_is_ready(node):
            # Stopped outside our control, and Kubernetes has noticed (the kubelet stopped posting): as
            # for an instance that is gone, nothing on it can be drained gracefully. An evicted pod would
            # stay Terminating with no kubelet to confirm it, and the node lifecycle controller has
            # marked its pods not Ready, so a budget that counts them short refuses their eviction
            # (unhealthyPodEvictionPolicy IfHealthyBudget) until the taint manager deletes them 5
            # minutes on. Karpenter keeps draining a stopped instance and so waits that long; we
            # terminate it now (its pods' processes are already gone with it) and release the Node once
            # EC2 reports it going, after which pod GC removes its pods and their controllers replace
            # them. While the Node still reads Ready its pods count in their budgets: they are drained
            # as any others.
            logger.info(
                "instance stopped under a not-Ready node: terminating it without a drain",
                extra={"node": name, "instance": record.instance_id if record else None},
            )
            self._finish(node, record, progress, instance_gone=False)
            return progress
        pods = drainable(plane.kube.list_pods_on_node(name), now)
        if record is not None and record.state == NodeClaimState.DISRUPTING:
            taint_for_disruption(plane, node)
            record = self._start_drain(node, record, now)
            self._hand_off(name, pods, progress)
        deadline = record.drain_deadline if record is not None else None
        if record is not None and self._awaiting_replacement(record, pods, now):
            progress.awaiting_replacement = True
            progress.waiting = [podlib.key(p) for p in pods]
            return progress
        remaining = [p for p in pods if not podlib.is_deleting(p)]
        if remaining:
            self._drain(node, record, remaining, now, deadline, progress)
            crashpoints.hit(crashpoints.MID_DRAIN)
            return progress
        if any(podlib.is_deleting(p) for p in pods) and (deadline is None or now < deadline):
            progress.waiting = [podlib.key(p) for p in pods]
            return progress  # pods are shutting down; the kubelet finishes them
        self._finish(node, record, progress, instance_gone=False)
        return progress

    def _start_drain(
        self, node: Mapping[str, Any], record: NodeClaimRecord, now: datetime
    ) -> NodeClaimRecord:
        deadline = record.drain_deadline
        if record.termination_grace_period_seconds is not None:
            grace_deadline = (record.deletion_requested_at or now) + timedelta(
                seconds=record.termination_grace_period_seconds
            )
            deadline = min(deadline, grace_deadline) if deadline else grace_deadline
        saved = self.plane.store.save(
            record.model_copy(update={"state": NodeClaimState.DRAINING, "drain_deadline": deadline})
        )
        if record.termination_grace_period_seconds is not None and deadline is not None:
            # Karpenter's Warning for a node with a terminationGracePeriod, recorded once when its drain
            # starts (Karpenter repeats it each reconcile, deduplicated).
            self.plane.kube.record_event(
                node,
                "TerminationGracePeriodExpiring",
                f"All pods will be deleted by {to_rfc3339(deadline)}",
                "Warning",
            )
        metrics.add_metric(name=MetricName.DRAINS_STARTED, unit=MetricUnit.Count, value=1)
        logger.info(
            "draining node",
            extra={
                "nodeclaim": record.name,
                "node": record.node_name,
                "reason": record.disruption_reason,
                "deadline": to_rfc3339(deadline) if deadline else None,
            },
        )
        return saved

    def _hand_off(self, node_name: str, pods: Sequence[Mapping[str, Any]], progress: DrainProgress) -> None:
        """Wake the provisioner now, rather than on its schedule: it counts pods on deleting nodes as
        pending, so their replacement capacity launches while the drain runs."""
        keys = [podlib.key(p) for p in reschedulable_pods(pods)]
        if not keys or self.wake_provisioner is None:
            return
        try:
            self.wake_provisioner({"reason": "draining-node", "node": node_name, "pods": len(keys)})
        except Exception as error:  # the provisioner's schedule picks the pods up anyway
            logger.warning("could not wake the provisioner", extra={"node": node_name, "error": str(error)})
            return
        progress.handed_off = keys

    def _awaiting_replacement(
        self, record: NodeClaimRecord, pods: Sequence[Mapping[str, Any]], now: datetime
    ) -> bool:
        """Replace-first (rebalance recommendations): hold evictions until the claims launched for this
        node's pods are initialized, or the replace-first deadline passes."""
        until_text = record.annotations.get(REPLACE_FIRST_UNTIL)
        if not until_text or now >= parse_rfc3339(until_text):
            return False
        keys = {podlib.key(p) for p in reschedulable_pods(pods)}
        if not keys:
            return False
        started = record.deletion_requested_at or now
        replacements = [
            r
            for r in self.plane.store.list()
            if r.name != record.name and r.created_at >= started and keys & set(r.pods)
        ]
        if not replacements:
            return now < started + REPLACEMENT_SETTLE
        return any(r.state != NodeClaimState.INITIALIZED for r in replacements if not r.is_deleting)

    def _drain(
        self,
        node: Mapping[str, Any],
        record: NodeClaimRecord | None,
        pods: list[Mapping[str, Any]],
        now: datetime,
        deadline: datetime | None,
        progress: DrainProgress,
    ) -> None:
        kube = self.plane.kube
        failures: list[str] = []  # Karpenter's words for each eviction the API refused or failed
        # Pods past their own deletion point (deadline minus their grace period) are deleted outright.
        if deadline is not None:
            for pod in pods:
                grace = int((pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
                if now >= deadline - timedelta(seconds=grace):
                    remaining_grace = max(0, int((deadline - now).total_seconds()))
                    granted = min(grace, remaining_grace)
                    try:
                        kube.delete_pod(pod, grace_period_seconds=granted)
                    except KubernetesError as error:
                        logger.warning(
                            "failed deleting pod", extra={"pod": podlib.key(pod), "error": str(error)}
                        )
                        failures.append(_failure("deleting pod", pod, error))
                        continue
                    kube.record_event(
                        pod,
                        "Disrupted",
                        f"Deleting the pod to accommodate the terminationTime {to_rfc3339(deadline)} of the "
                        f"node. The pod was granted {granted} seconds of grace-period of its {grace} "
                        "terminationGracePeriodSeconds. This bypasses the PDB of the pod and the "
                        "do-not-disrupt annotation.",
                    )
                    progress.force_deleted.append(podlib.key(pod))
            if progress.force_deleted:
                metrics.add_metric(
                    name=MetricName.PODS_FORCE_DELETED,
                    unit=MetricUnit.Count,
                    value=len(progress.force_deleted),
                )
                pods = [p for p in pods if podlib.key(p) not in set(progress.force_deleted)]
        if pods:
            self._evict(record, pods, now, progress, failures)
        # Once per node and pass, as Karpenter's FailedDraining: what the API refused or failed, else how
        # many pods are still to go (shutting down, do-not-disrupt, in back-off, in a later group), as
        # Karpenter's drain error says. Repeats raise the count of one Event (see record_event).
        if failures:
            more = f" and {len(failures) - 1} more" if len(failures) > 1 else ""
            kube.record_event(node, "FailedDraining", f"Failed to drain node, {failures[0]}{more}", "Warning")
        elif pods:
            waiting = f"{len(pods)} pod{'s are' if len(pods) != 1 else ' is'} waiting to be evicted"
            kube.record_event(node, "FailedDraining", f"Failed to drain node, {waiting}", "Warning")

    def _evict(
        self,
        record: NodeClaimRecord | None,
        pods: list[Mapping[str, Any]],
        now: datetime,
        progress: DrainProgress,
        failures: list[str],
    ) -> None:
        """Evict the pods of the first priority group through the Eviction API, honouring PDB back-off."""
        kube = self.plane.kube
        reason = (record.disruption_reason if record is not None else None) or FORCEFUL_TERMINATION
        saved = record.annotations.get(EVICTION_BACKOFF) if record is not None else None
        backoff = EvictionBackoff.from_annotation(saved)
        before = backoff.to_annotation()
        backoff.keep_only({podlib.key(p) for p in pods})
        group = min(priority_group(p) for p in pods)
        for pod in pods:
            if priority_group(pod) != group:
                continue
            pod_key = podlib.key(pod)
            if do_not_disrupt(pod):
                progress.waiting.append(pod_key)
                continue
            if backoff.blocked(pod_key, now):
                progress.blocked.append(pod_key)
                continue
            try:
                outcome = kube.evict(pod)
            except KubernetesError as error:
                # A 5xx or a timeout: this pod waits for the next pass; the other pods go on.
                logger.warning(
                    Msg.FAILED_EVICTING_POD,
                    extra={"pod": pod_key, "node": podlib.node_name(pod), "error": str(error)},
                )
                failures.append(_failure("evicting pod", pod, error))
                continue
            if outcome == EvictionResult.EVICTED:
                kube.record_event(pod, "Evicted", f"Evicted pod: {reason}")
                progress.evicted.append(pod_key)
                backoff.clear(pod_key)
            elif outcome == EvictionResult.BLOCKED:
                failures.append(f"evicting pod violates a PDB (Pod={pod_key})")
                progress.blocked.append(pod_key)
                backoff.refused(pod_key, now)
            else:
                backoff.clear(pod_key)
        if progress.evicted:
            metrics.add_metric(
                name=MetricName.PODS_EVICTED, unit=MetricUnit.Count, value=len(progress.evicted)
            )
        after = backoff.to_annotation()
        if record is not None and after != before:
            annotations = {k: v for k, v in record.annotations.items() if k != EVICTION_BACKOFF}
            if after is not None:
                annotations[EVICTION_BACKOFF] = after
            self.plane.store.save(record.model_copy(update={"annotations": annotations}))

    def _finish(
        self,
        node: Mapping[str, Any],
        record: NodeClaimRecord | None,
        progress: DrainProgress,
        *,
        instance_gone: bool,
    ) -> None:
        plane = self.plane
        name = node["metadata"]["name"]
        if record is not None and record.instance_id and not instance_gone:
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
            # The instance is gone: the NodeClaim object goes with it (our finalizer released).
            NodeClaimObjects(plane.kube, plane.clock).release(record.name)
            metrics.add_metric(name=MetricName.DRAINS_COMPLETED, unit=MetricUnit.Count, value=1)
            if started is not None:
                metrics.add_metric(
                    name=MetricName.DRAIN_DURATION,
                    unit=MetricUnit.Seconds,
                    value=(plane.clock.now() - started).total_seconds(),
                )
        progress.finished = True
