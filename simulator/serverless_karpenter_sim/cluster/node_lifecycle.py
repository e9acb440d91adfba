"""The node lifecycle controllers of kube-controller-manager and cloud-controller-manager, for the Nodes of
our simulated kubelets.

Every ``NODE_MONITOR_PERIOD`` this controller:

- marks a Node whose kubelet has not reported for ``grace_period`` as Ready=Unknown ("Kubelet stopped
  posting node status."), every condition with it;
- marks the pods of an Unknown Node Ready=False, as upstream's ``MarkPodsNotReady``: nothing vouches for
  them any more, so a PodDisruptionBudget no longer counts them healthy (and the eviction API treats them
  as unhealthy pods). Upstream does this for any Node not Ready; here a Node is Ready=False only while
  its live kubelet brings it up, and that kubelet would post its pods' readiness straight back, so only
  Unknown Nodes' pods are marked. A kubelet that comes back posts Ready=True again (see ``kubelet``);
- keeps the condition taints in step with the conditions (TaintNodesByCondition): ``not-ready:NoSchedule``
  while Ready=False, ``unreachable:NoSchedule`` while Unknown, the pressure taints, ``unschedulable``;
  and the NoExecute ``not-ready`` / ``unreachable`` taints, stamped with ``timeAdded``;
- evicts, as the NoExecute taint manager does, the pods that do not tolerate a NoExecute taint, or whose
  ``tolerationSeconds`` have run out. Their kubelet is silent, so they stay Terminating;
- as the cloud node lifecycle controller does, taints ``node.cloudprovider.kubernetes.io/shutdown`` on a
  Node whose instance is stopped, and deletes a not-Ready Node whose instance no longer exists.

The grace period is kube-controller-manager's ``--node-monitor-grace-period`` default since Kubernetes
v1.32, 50 s (kubernetes/kubernetes#126287, ``pkg/controller/nodelifecycle/config/v1alpha1/defaults.go``;
it was 40 s before). Nodes no simulated kubelet runs (a test's hand-made Node) are tainted by their
conditions but never timed out: nobody is expected to report for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from serverless_karpenter.clock import parse_rfc3339, to_rfc3339

from serverless_karpenter_sim.cluster.objects import (
    KubeRest,
    Obj,
    condition,
    is_deleting,
    key_of,
    meta,
    name_of,
    namespace_of,
    node_path,
    pod_path,
    toleration_tolerates,
    uid_of,
    with_condition,
)

NODE_MONITOR_GRACE_PERIOD = timedelta(seconds=50)
NODE_MONITOR_PERIOD = timedelta(seconds=5)
NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
SHUTDOWN = "node.cloudprovider.kubernetes.io/shutdown"
# The condition taints, by condition and status (upstream's nodeConditionToTaintKeyStatusMap).
CONDITION_TAINTS: Mapping[str, Mapping[str, str]] = {
    "Ready": {"False": NOT_READY, "Unknown": UNREACHABLE},
    "MemoryPressure": {"True": "node.kubernetes.io/memory-pressure"},
    "DiskPressure": {"True": "node.kubernetes.io/disk-pressure"},
    "NetworkUnavailable": {"True": "node.kubernetes.io/network-unavailable"},
    "PIDPressure": {"True": "node.kubernetes.io/pid-pressure"},
}
_CONDITION_TAINT_KEYS = frozenset(k for by_status in CONDITION_TAINTS.values() for k in by_status.values())


@dataclass(frozen=True)
class KubeletState:
    """What the controllers learn of one Node's kubelet and machine."""

    last_heartbeat: datetime | None  # None: it never reported
    instance_state: str | None  # the EC2 state; None when the instance no longer exists


@dataclass
class NodeLifecycleReport:
    unknown_nodes: list[str] = field(default_factory=list)
    not_ready_pods: list[str] = field(default_factory=list)
    tainted_nodes: list[str] = field(default_factory=list)
    evicted_pods: list[str] = field(default_factory=list)
    deleted_nodes: list[str] = field(default_factory=list)


def _no_execute_taints(ready: str | None, now: datetime) -> list[Obj]:
    stamp = to_rfc3339(now)
    if ready == "False":
        return [{"key": NOT_READY, "effect": "NoExecute", "timeAdded": stamp}]
    if ready == "Unknown":
        return [{"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": stamp}]
    return []


def desired_taints(node: Obj, shutdown: bool, now: datetime) -> list[Obj]:
    """The node's taints with the controller-owned ones made to match its conditions (others kept)."""
    spec = node.get("spec") or {}
    current: list[Obj] = list(spec.get("taints") or [])
    owned_no_schedule = {*_CONDITION_TAINT_KEYS, UNSCHEDULABLE, SHUTDOWN}
    wanted: list[Obj] = []
    for cond in (node.get("status") or {}).get("conditions") or []:
        key = CONDITION_TAINTS.get(cond.get("type", ""), {}).get(cond.get("status", ""))
        if key:
            wanted.append({"key": key, "effect": "NoSchedule"})
    if spec.get("unschedulable"):
        wanted.append({"key": UNSCHEDULABLE, "effect": "NoSchedule"})
    if shutdown:
        wanted.append({"key": SHUTDOWN, "effect": "NoSchedule"})
    ready = condition(node, "Ready")
    if ready is not None:
        wanted.extend(_no_execute_taints(ready.get("status"), now))

    def owned(taint: Obj) -> bool:
        if taint.get("effect") == "NoSchedule":
            return taint.get("key") in owned_no_schedule
        return taint.get("effect") == "NoExecute" and taint.get("key") in (NOT_READY, UNREACHABLE)

    def same(a: Obj, b: Obj) -> bool:
        return a.get("key") == b.get("key") and a.get("effect") == b.get("effect")

    kept = [t for t in current if not owned(t) or any(same(t, w) for w in wanted)]
    added = [w for w in wanted if not any(same(w, t) for t in kept)]
    return [*kept, *added]


class NodeLifecycleController:
    """Stepped by the kubelet fleet with the Nodes and Pods it has just read (and the Nodes it wrote), so
    the simulation lists nothing twice. Condition taints follow each step, as upstream's do on every Node
    update; the health check runs every ``period``."""

    def __init__(
        self,
        rest: KubeRest,
        *,
        grace_period: timedelta = NODE_MONITOR_GRACE_PERIOD,
        period: timedelta = NODE_MONITOR_PERIOD,
    ) -> None:
        self._rest = rest
        self.grace_period = grace_period
        self.period = period
        self._last_health_check: datetime | None = None

    def step(
        self, now: datetime, nodes: list[Obj], pods: list[Obj], kubelets: Mapping[str, KubeletState]
    ) -> NodeLifecycleReport:
        report = NodeLifecycleReport()
        check_health = self._last_health_check is None or now >= self._last_health_check + self.period
        if check_health:
            self._last_health_check = now
        current: dict[str, Obj] = {}
        for node in nodes:
            fresh = self._reconcile(node, kubelets.get(name_of(node)), check_health, now, report)
            if fresh is not None:
                current[name_of(fresh)] = fresh
        pods = self._mark_pods_not_ready(current, pods, now, report)
        self._evict_for_taints(current, pods, now, report)
        return report

    def _mark_pods_not_ready(
        self, nodes: Mapping[str, Obj], pods: list[Obj], now: datetime, report: NodeLifecycleReport
    ) -> list[Obj]:
        """Ready=False on every pod of an Unknown Node (only the Ready condition, as upstream); ``pods``
        with the patched ones in their place, so what follows in this step does not write the old status
        back."""
        unknown = {
            name
            for name, node in nodes.items()
            if (condition(node, "Ready") or {}).get("status") == "Unknown"
        }
        if not unknown:
            return pods
        out: list[Obj] = []
        for pod in pods:
            ready = condition(pod, "Ready")
            on_unknown = (pod.get("spec") or {}).get("nodeName") in unknown
            if not on_unknown or ready is None or ready.get("status") == "False":
                out.append(pod)
                continue
            conditions = with_condition(
                (pod.get("status") or {}).get("conditions") or [],
                {**ready, "status": "False", "lastTransitionTime": to_rfc3339(now)},
            )
            path = pod_path(namespace_of(pod), name_of(pod))
            patched = self._rest.patch(f"{path}/status", {"status": {"conditions": conditions}})
            if patched is None:
                continue  # gone meanwhile
            report.not_ready_pods.append(key_of(pod))
            out.append(patched)
        return out

    def _reconcile(
        self,
        node: Obj,
        kubelet: KubeletState | None,
        check_health: bool,
        now: datetime,
        report: NodeLifecycleReport,
    ) -> Obj | None:
        """Health, taints and cloud deletion of one Node; the Node as it now is, None if it is gone."""
        name = name_of(node)
        if check_health and kubelet is not None and self._silent_too_long(node, kubelet, now):
            node = self._mark_unknown(node, now) or node
            report.unknown_nodes.append(name)
        shutdown = kubelet is not None and kubelet.instance_state in ("stopping", "stopped")
        taints = desired_taints(node, shutdown, now)
        if taints != list((node.get("spec") or {}).get("taints") or []):
            patched = self._rest.patch(node_path(name), {"spec": {"taints": taints}})
            if patched is None:
                return None
            node = patched
            report.tainted_nodes.append(name)
        gone = kubelet is not None and kubelet.instance_state is None
        if gone and self._may_delete(node) and self._rest.delete(node_path(name), uid=uid_of(node) or None):
            report.deleted_nodes.append(name)
        return node

    def _silent_too_long(self, node: Obj, kubelet: KubeletState, now: datetime) -> bool:
        ready = condition(node, "Ready")
        if ready is not None and ready.get("status") == "Unknown":
            return False
        created = meta(node).get("creationTimestamp")
        last = kubelet.last_heartbeat or (parse_rfc3339(created) if created else now)
        return now - last > self.grace_period

    def _mark_unknown(self, node: Obj, now: datetime) -> Obj | None:
        stamp = to_rfc3339(now)
        conditions = [
            {
                **cond,
                "status": "Unknown",
                "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status.",
                "lastTransitionTime": stamp,
            }
            for cond in (node.get("status") or {}).get("conditions") or []
        ]
        if not any(c.get("type") == "Ready" for c in conditions):
            conditions.append(
                {
                    "type": "Ready",
                    "status": "Unknown",
                    "reason": "NodeStatusNeverUpdated",
                    "message": "Kubelet never posted node status.",
                    "lastHeartbeatTime": meta(node).get("creationTimestamp"),
                    "lastTransitionTime": stamp,
                }
            )
        return self._rest.patch(node_path(name_of(node), "status"), {"status": {"conditions": conditions}})

    @staticmethod
    def _may_delete(node: Obj) -> bool:
        """The cloud node lifecycle controller deletes only Nodes that are not Ready."""
        ready = condition(node, "Ready")
        return not is_deleting(node) and (ready is None or ready.get("status") != "True")

    def _evict_for_taints(
        self, nodes: Mapping[str, Obj], pods: list[Obj], now: datetime, report: NodeLifecycleReport
    ) -> None:
        tainted = {
            name: [t for t in (n.get("spec") or {}).get("taints") or [] if t.get("effect") == "NoExecute"]
            for name, n in nodes.items()
        }
        if not any(tainted.values()):
            return
        for pod in pods:
            taints = tainted.get((pod.get("spec") or {}).get("nodeName") or "")
            if not taints or is_deleting(pod):
                continue
            due = eviction_time(pod, taints, now)
            if due is not None and now >= due and self._evict(pod, now):
                report.evicted_pods.append(key_of(pod))

    def _evict(self, pod: Obj, now: datetime) -> bool:
        path = pod_path(namespace_of(pod), name_of(pod))
        status = pod.get("status") or {}
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "DisruptionTarget"]
        conditions.append(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "DeletionByTaintManager",
                "message": "Taint manager: deleting due to NoExecute taint",
                "lastTransitionTime": to_rfc3339(now),
            }
        )
        if self._rest.patch(f"{path}/status", {"status": {"conditions": conditions}}) is None:
            return False
        return self._rest.delete(path, uid=uid_of(pod) or None)


def eviction_time(pod: Obj, no_execute_taints: list[Obj], now: datetime) -> datetime | None:
    """When the taint manager deletes ``pod``: now for a taint it does not tolerate; else once the shortest
    ``tolerationSeconds`` among the tolerations in use (the first that tolerates each taint) has run from
    when the taints were added; never when none of those has a bound."""
    tolerations = list((pod.get("spec") or {}).get("tolerations") or [])
    bounds: list[int] = []
    for taint in no_execute_taints:
        used = next((t for t in tolerations if toleration_tolerates(t, taint)), None)
        if used is None:
            return now
        if used.get("tolerationSeconds") is not None:
            bounds.append(max(0, int(used["tolerationSeconds"])))
    if not bounds:
        return None
    added = [parse_rfc3339(t["timeAdded"]) for t in no_execute_taints if t.get("timeAdded")]
    return (max(added) if added else now) + timedelta(seconds=min(bounds))
