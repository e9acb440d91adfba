"""Facts about pods, read from their Kubernetes JSON."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from serverless_karpenter.clock import parse_rfc3339
from serverless_karpenter.scheduling import resources

Pod = Mapping[str, Any]

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
# Karpenter's IsStuckTerminating: a pod still there this long past its deletionTimestamp (deletion time
# plus grace) has a kubelet that will not finish it, and no longer holds up a drain.
STUCK_TERMINATING_AFTER = timedelta(minutes=1)


def key(pod: Pod) -> str:
    meta = pod.get("metadata", {})
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"


def is_terminal(pod: Pod) -> bool:
    return pod.get("status", {}).get("phase") in TERMINAL_PHASES


def is_deleting(pod: Pod) -> bool:
    return bool(pod.get("metadata", {}).get("deletionTimestamp"))


def is_active(pod: Pod) -> bool:
    """Karpenter's IsActive: neither finished nor being deleted."""
    return not is_terminal(pod) and not is_deleting(pod)


def is_stuck_terminating(pod: Pod, now: datetime) -> bool:
    stamp = pod.get("metadata", {}).get("deletionTimestamp")
    return bool(stamp) and now - parse_rfc3339(str(stamp)) > STUCK_TERMINATING_AFTER


def started(pod: Pod) -> datetime | None:
    """When the pod started (its creation, before the kubelet reports a start)."""
    text = (pod.get("status") or {}).get("startTime") or (pod.get("metadata") or {}).get("creationTimestamp")
    try:
        return parse_rfc3339(text) if text else None
    except ValueError:
        return None


def node_name(pod: Pod) -> str | None:
    return pod.get("spec", {}).get("nodeName") or None


def owner_kind(pod: Pod) -> str | None:
    for ref in pod.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("kind"))
    return None


def is_daemonset_pod(pod: Pod) -> bool:
    return owner_kind(pod) == "DaemonSet"


def is_mirror_pod(pod: Pod) -> bool:
    return "kubernetes.io/config.mirror" in (pod.get("metadata", {}).get("annotations") or {})


def is_unschedulable(pod: Pod) -> bool:
    """The kube-scheduler tried this pod and found no node: PodScheduled=False, reason Unschedulable."""
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled":
            return condition.get("status") == "False" and condition.get("reason") == "Unschedulable"
    return False


def is_provisionable(pod: Pod) -> bool:
    """Karpenter's test: unbound, marked unschedulable, not terminal, not being deleted, not a DaemonSet's."""
    return (
        node_name(pod) is None
        and is_unschedulable(pod)
        and not is_terminal(pod)
        and not is_deleting(pod)
        and not is_daemonset_pod(pod)
    )


def _container_requests(container: Mapping[str, Any]) -> resources.ResourceList:
    spec = container.get("resources") or {}
    # Kubernetes defaults a missing request to the limit.
    merged = {**(spec.get("limits") or {}), **(spec.get("requests") or {})}
    return resources.parse_list(merged)


def _is_pod_level_resource(name: str) -> bool:
    """The resources pod-level ``spec.resources`` may set (Kubernetes' IsSupportedPodLevelResource)."""
    return name in (resources.CPU, resources.MEMORY) or name.startswith("hugepages-")


def _pod_level_requests(spec: Mapping[str, Any]) -> resources.ResourceList:
    """``spec.resources`` requests, a missing request defaulting to its limit as the API server does."""
    declared = spec.get("resources") or {}
    merged = {**(declared.get("limits") or {}), **(declared.get("requests") or {})}
    return resources.parse_list({k: v for k, v in merged.items() if _is_pod_level_resource(k)})


def requests(pod: Pod) -> resources.ResourceList:
    """Effective requests, as the kube-scheduler computes them.

    Pod-level ``spec.resources`` requests where set; for the other resources, max(sum of app containers
    + restartable (sidecar) init containers, the largest init container plus the sidecars started
    before it). Plus the RuntimeClass overhead already copied into spec.overhead, plus one pod slot.
    """
    spec = pod.get("spec", {})
    app = resources.merge(*(_container_requests(c) for c in spec.get("containers") or []))
    sidecars: resources.ResourceList = {}
    init_peak: resources.ResourceList = {}
    for container in spec.get("initContainers") or []:
        r = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            sidecars = resources.merge(sidecars, r)
            init_peak = resources.maximum([init_peak, sidecars])
        else:
            init_peak = resources.maximum([init_peak, resources.merge(sidecars, r)])
    total = resources.maximum([resources.merge(app, sidecars), init_peak])
    pod_level = _pod_level_requests(spec)
    if pod_level:
        # Pod-level resources (Kubernetes 1.34, beta): what the pod asks as a whole replaces the
        # containers' sum for the resources it names, as the kube-scheduler's and Karpenter's
        # PodRequests compute it; the rest still comes from the containers.
        total = {**total, **pod_level}
    overhead = resources.parse_list(spec.get("overhead"))
    return resources.merge(total, overhead, {resources.PODS: 1})


def total_requests(pods: Iterable[Pod]) -> resources.ResourceList:
    return resources.merge(*(requests(p) for p in pods))
