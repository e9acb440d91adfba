"""The columns kube-apiserver prints for built-in kinds (its ``printers`` package), written from their
documented output: what ``kubectl get`` shows for nodes, pods, deployments and the rest."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

Obj = dict[str, Any]
NONE = "<none>"


@dataclass(frozen=True)
class Column:
    name: str
    type: str = "string"
    description: str = ""
    priority: int = 0


@dataclass(frozen=True)
class Printer:
    columns: tuple[Column, ...]
    cells: Callable[[Obj, datetime], list[Any]]


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def human_duration(seconds: float) -> str:
    """Kubernetes' short human durations: 45s, 3m20s, 15m, 2h5m, 10h, 3d4h, 20d, 2y30d, 9y."""
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    whole = int(seconds)
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        return f"{minutes}m{whole % 60}s" if whole % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // (24 * 365)}y{days}d" if days else f"{hours // (24 * 365)}y"
    return f"{hours // (24 * 365)}y"


def age(timestamp: Any, now: datetime) -> str:
    moment = _parse_time(timestamp)
    return "<unknown>" if moment is None else human_duration((now - moment).total_seconds())


def json_text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":")) if isinstance(value, dict | list) else str(value)


def name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _spec(obj: Obj) -> Obj:
    return obj.get("spec") or {}


def _status(obj: Obj) -> Obj:
    return obj.get("status") or {}


def _created(obj: Obj, now: datetime) -> str:
    return age(_meta(obj).get("creationTimestamp"), now)


def _condition(obj: Obj, kind: str) -> Obj | None:
    return next((c for c in _status(obj).get("conditions") or () if c.get("type") == kind), None)


def _selector(selector: Obj | None) -> str:
    if not selector:
        return NONE
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or ():
        values = ",".join(expression.get("values") or ())
        parts.append(f"{expression.get('key')} {str(expression.get('operator', '')).lower()} ({values})")
    return ",".join(parts) or NONE


# --- nodes ---------------------------------------------------------------------------------------------


def _node_status(node: Obj) -> str:
    ready = _condition(node, "Ready")
    state = "Unknown"
    if ready is not None:
        state = "Ready" if ready.get("status") == "True" else "NotReady"
    if _spec(node).get("unschedulable"):
        state += ",SchedulingDisabled"
    return state


def _node_roles(node: Obj) -> str:
    roles = set()
    for key, value in (_meta(node).get("labels") or {}).items():
        if key.startswith("node-role.kubernetes.io/"):
            roles.add(key.removeprefix("node-role.kubernetes.io/"))
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    return ",".join(sorted(r for r in roles if r)) or NONE


def _node_address(node: Obj, kind: str) -> str:
    found = [a.get("address") for a in _status(node).get("addresses") or () if a.get("type") == kind]
    return found[0] if found else NONE


def _node_cells(node: Obj, now: datetime) -> list[Any]:
    info = _status(node).get("nodeInfo") or {}
    return [
        _node_status(node),
        _node_roles(node),
        _created(node, now),
        info.get("kubeletVersion", ""),
        _node_address(node, "InternalIP"),
        _node_address(node, "ExternalIP"),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


# --- pods ----------------------------------------------------------------------------------------------


def _pod_status(pod: Obj) -> str:
    status = _status(pod)
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for container in status.get("containerStatuses") or ():
        state = container.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif (state.get("terminated") or {}).get("reason"):
            reason = state["terminated"]["reason"]
    if _meta(pod).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return str(reason)


def _pod_cells(pod: Obj, now: datetime) -> list[Any]:
    containers = _spec(pod).get("containers") or ()
    statuses = _status(pod).get("containerStatuses") or ()
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(int(s.get("restartCount") or 0) for s in statuses)
    nominated = _status(pod).get("nominatedNodeName") or NONE
    gates = _spec(pod).get("readinessGates") or ()
    return [
        f"{ready}/{len(containers)}",
        _pod_status(pod),
        restarts,
        _created(pod, now),
        _status(pod).get("podIP") or NONE,
        _spec(pod).get("nodeName") or NONE,
        nominated,
        f"{len(gates)}/{len(gates)}" if gates else NONE,
    ]


# --- workloads -----------------------------------------------------------------------------------------


def _containers(obj: Obj) -> list[Obj]:
    return list((((_spec(obj).get("template") or {}).get("spec")) or {}).get("containers") or ())


def _images(obj: Obj) -> list[str]:
    return [
        ",".join(c.get("name", "") for c in _containers(obj)),
        ",".join(c.get("image", "") for c in _containers(obj)),
    ]


def _deployment_cells(obj: Obj, now: datetime) -> list[Any]:
    status = _status(obj)
    desired = _spec(obj).get("replicas", 1)
    return [
        f"{status.get('readyReplicas', 0)}/{desired}",
        status.get("updatedReplicas", 0),
        status.get("availableReplicas", 0),
        _created(obj, now),
        *_images(obj),
        _selector(_spec(obj).get("selector")),
    ]


def _replicaset_cells(obj: Obj, now: datetime) -> list[Any]:
    status = _status(obj)
    return [
        _spec(obj).get("replicas", 1),
        status.get("replicas", 0),
        status.get("readyReplicas", 0),
        _created(obj, now),
        *_images(obj),
        _selector(_spec(obj).get("selector")),
    ]


def _daemonset_cells(obj: Obj, now: datetime) -> list[Any]:
    status = _status(obj)
    node_selector = ((_spec(obj).get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
    return [
        status.get("desiredNumberScheduled", 0),
        status.get("currentNumberScheduled", 0),
        status.get("numberReady", 0),
        status.get("updatedNumberScheduled", 0),
        status.get("numberAvailable", 0),
        ",".join(f"{k}={v}" for k, v in sorted(node_selector.items())) or NONE,
        _created(obj, now),
        *_images(obj),
        _selector(_spec(obj).get("selector")),
    ]


def _statefulset_cells(obj: Obj, now: datetime) -> list[Any]:
    return [
        f"{_status(obj).get('readyReplicas', 0)}/{_spec(obj).get('replicas', 1)}",
        _created(obj, now),
        *_images(obj),
    ]


def _job_status(job: Obj) -> str:
    for kind, label in (("Complete", "Complete"), ("Failed", "Failed"), ("Suspended", "Suspended")):
        condition = _condition(job, kind)
        if condition is not None and condition.get("status") == "True":
            return label
    return "Running"


def _job_cells(obj: Obj, now: datetime) -> list[Any]:
    completions = _spec(obj).get("completions")
    succeeded = _status(obj).get("succeeded", 0)
    start, end = _parse_time(_status(obj).get("startTime")), _parse_time(_status(obj).get("completionTime"))
    duration = human_duration(((end or now) - start).total_seconds()) if start else ""
    return [
        _job_status(obj),
        f"{succeeded}/{completions}"
        if completions is not None
        else f"{succeeded}/1 of {_spec(obj).get('parallelism', 1)}",
        duration,
        _created(obj, now),
        *_images(obj),
    ]


# --- the rest ------------------------------------------------------------------------------------------


def _namespace_cells(obj: Obj, now: datetime) -> list[Any]:
    return [_status(obj).get("phase", ""), _created(obj, now)]


def _service_ports(obj: Obj) -> str:
    ports = []
    for port in _spec(obj).get("ports") or ():
        text = f"{port.get('port')}"
        if port.get("nodePort"):
            text += f":{port['nodePort']}"
        ports.append(f"{text}/{port.get('protocol', 'TCP')}")
    return ",".join(ports) or NONE


def _service_cells(obj: Obj, now: datetime) -> list[Any]:
    spec = _spec(obj)
    ingress = ((_status(obj).get("loadBalancer") or {}).get("ingress")) or ()
    external = ",".join(i.get("ip") or i.get("hostname", "") for i in ingress) or (
        "<pending>" if spec.get("type") == "LoadBalancer" else NONE
    )
    return [
        spec.get("type", "ClusterIP"),
        spec.get("clusterIP") or NONE,
        external,
        _service_ports(obj),
        _created(obj, now),
        _selector({"matchLabels": spec.get("selector")} if spec.get("selector") else None),
    ]


def _configmap_cells(obj: Obj, now: datetime) -> list[Any]:
    return [len(obj.get("data") or {}) + len(obj.get("binaryData") or {}), _created(obj, now)]


def _event_cells(obj: Obj, now: datetime) -> list[Any]:
    involved = obj.get("involvedObject") or {}
    last = obj.get("lastTimestamp") or obj.get("eventTime") or _meta(obj).get("creationTimestamp")
    return [
        age(last, now),
        obj.get("type", ""),
        obj.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        str(obj.get("message", "")).strip(),
    ]


def _pdb_cells(obj: Obj, now: datetime) -> list[Any]:
    spec = _spec(obj)
    return [
        str(spec["minAvailable"]) if "minAvailable" in spec else "N/A",
        str(spec["maxUnavailable"]) if "maxUnavailable" in spec else "N/A",
        _status(obj).get("disruptionsAllowed", 0),
        _created(obj, now),
    ]


def _lease_cells(obj: Obj, now: datetime) -> list[Any]:
    return [_spec(obj).get("holderIdentity") or "", _created(obj, now)]


def _storageclass_cells(obj: Obj, now: datetime) -> list[Any]:
    return [
        obj.get("provisioner", ""),
        obj.get("reclaimPolicy", "Delete"),
        obj.get("volumeBindingMode", "Immediate"),
        bool(obj.get("allowVolumeExpansion", False)),
        _created(obj, now),
    ]


def _columns(*specs: tuple[str, str] | tuple[str, str, int]) -> tuple[Column, ...]:
    return tuple(Column(s[0], s[1], priority=s[2] if len(s) > 2 else 0) for s in specs)


_AGE = ("Age", "string")
_WORKLOAD_WIDE = (("Containers", "string", 1), ("Images", "string", 1), ("Selector", "string", 1))

BUILT_IN: dict[tuple[str, str], Printer] = {
    ("", "nodes"): Printer(
        _columns(
            ("Status", "string"),
            ("Roles", "string"),
            _AGE,
            ("Version", "string"),
            ("Internal-IP", "string", 1),
            ("External-IP", "string", 1),
            ("OS-Image", "string", 1),
            ("Kernel-Version", "string", 1),
            ("Container-Runtime", "string", 1),
        ),
        _node_cells,
    ),
    ("", "pods"): Printer(
        _columns(
            ("Ready", "string"),
            ("Status", "string"),
            ("Restarts", "string"),
            _AGE,
            ("IP", "string", 1),
            ("Node", "string", 1),
            ("Nominated Node", "string", 1),
            ("Readiness Gates", "string", 1),
        ),
        _pod_cells,
    ),
    ("", "namespaces"): Printer(_columns(("Status", "string"), _AGE), _namespace_cells),
    ("", "services"): Printer(
        _columns(
            ("Type", "string"),
            ("Cluster-IP", "string"),
            ("External-IP", "string"),
            ("Port(s)", "string"),
            _AGE,
            ("Selector", "string", 1),
        ),
        _service_cells,
    ),
    ("", "configmaps"): Printer(_columns(("Data", "integer"), _AGE), _configmap_cells),
    ("", "events"): Printer(
        _columns(
            ("Last Seen", "string"),
            ("Type", "string"),
            ("Reason", "string"),
            ("Object", "string"),
            ("Message", "string"),
        ),
        _event_cells,
    ),
    ("apps", "deployments"): Printer(
        _columns(
            ("Ready", "string"), ("Up-to-date", "string"), ("Available", "string"), _AGE, *_WORKLOAD_WIDE
        ),
        _deployment_cells,
    ),
    ("apps", "replicasets"): Printer(
        _columns(("Desired", "integer"), ("Current", "integer"), ("Ready", "integer"), _AGE, *_WORKLOAD_WIDE),
        _replicaset_cells,
    ),
    ("apps", "daemonsets"): Printer(
        _columns(
            ("Desired", "integer"),
            ("Current", "integer"),
            ("Ready", "integer"),
            ("Up-to-date", "integer"),
            ("Available", "integer"),
            ("Node Selector", "string"),
            _AGE,
            *_WORKLOAD_WIDE,
        ),
        _daemonset_cells,
    ),
    ("apps", "statefulsets"): Printer(
        _columns(("Ready", "string"), _AGE, ("Containers", "string", 1), ("Images", "string", 1)),
        _statefulset_cells,
    ),
    ("batch", "jobs"): Printer(
        _columns(
            ("Status", "string"),
            ("Completions", "string"),
            ("Duration", "string"),
            _AGE,
            ("Containers", "string", 1),
            ("Images", "string", 1),
        ),
        _job_cells,
    ),
    ("policy", "poddisruptionbudgets"): Printer(
        _columns(
            ("Min Available", "string"),
            ("Max Unavailable", "string"),
            ("Allowed Disruptions", "integer"),
            _AGE,
        ),
        _pdb_cells,
    ),
    ("coordination.k8s.io", "leases"): Printer(_columns(("Holder", "string"), _AGE), _lease_cells),
    ("storage.k8s.io", "storageclasses"): Printer(
        _columns(
            ("Provisioner", "string"),
            ("ReclaimPolicy", "string"),
            ("VolumeBindingMode", "string"),
            ("AllowVolumeExpansion", "string"),
            _AGE,
        ),
        _storageclass_cells,
    ),
}
