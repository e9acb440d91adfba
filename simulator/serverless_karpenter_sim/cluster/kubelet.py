"""Simulated kubelets, plus the two kube-controller-manager loops that live next to them.

One :class:`KubeletFleet` stands for the kubelet of every instance the simulated cloud runs. Each step it:

- registers a Node for each running instance ``boot_delay`` after launch (labels and taints from the
  instance type, the instance and the kubelet flags in its user data), and makes it Ready ``ready_delay``
  later;
- starts the pods bound to its nodes, finishes the pods being deleted there, and completes pods that carry
  :data:`RUN_SECONDS_ANNOTATION` once they have run that long;
- reports (heartbeats) only while its instance runs: the kubelet of a stopped or vanished instance is
  silent, so its Node goes Unknown after the grace period (see :mod:`.node_lifecycle`, stepped from here)
  and the pods deleted there stay Terminating;
- like the pod garbage collector, force-deletes pods bound to Nodes that no longer exist.
"""

from __future__ import annotations

import email
import ipaddress
import re
import tomllib
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

import yaml
from kubernetes.client import ApiClient
from serverless_karpenter.api import labels as wk
from serverless_karpenter.clock import parse_rfc3339, to_rfc3339

from serverless_karpenter_sim.cluster.informer import InformedRest
from serverless_karpenter_sim.cluster.node_lifecycle import (
    NODE_MONITOR_GRACE_PERIOD,
    KubeletState,
    NodeLifecycleController,
    NodeLifecycleReport,
)
from serverless_karpenter_sim.cluster.objects import (
    NODES_PATH,
    Obj,
    condition,
    is_deleting,
    key_of,
    meta,
    name_of,
    namespace_of,
    node_path,
    pod_path,
    pod_phase,
    pods_path,
    uid_of,
    with_condition,
)
from serverless_karpenter_sim.kubeapi.store import Store

# A pod with this annotation "exits 0" after running that many seconds (the Job controller sets it when it
# is given a job_pod_duration); pods without it run until deleted.
RUN_SECONDS_ANNOTATION = "sim.serverless-karpenter.io/run-seconds"

KUBELET_VERSION = "v1.31.0"
AWS_PROVIDER_PREFIX = "aws:///"
NODE_CONFIG_API_VERSION = "node.eks.aws/v1alpha1"
TAINT_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})
# The pressure conditions a healthy kubelet posts: reason and message.
_HEALTHY_CONDITIONS = {
    "MemoryPressure": ("KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    "DiskPressure": ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    "PIDPressure": ("KubeletHasSufficientPID", "kubelet has sufficient PID available"),
}


@dataclass(frozen=True)
class SimInstance:
    """What the simulated cloud says about one instance."""

    instance_id: str
    instance_type: str
    zone: str
    private_dns_name: str
    launch_time: datetime
    state: str  # pending | running | shutting-down | terminated | stopped
    user_data: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    private_ip_address: str | None = None


class InstanceSource(Protocol):
    def running_instances(self) -> list[SimInstance]:
        """Every instance the cloud knows, whatever its state (the fleet reads ``state``)."""
        ...


class InMemoryInstances:
    """An :class:`InstanceSource` kept in memory, for tests and scenarios that need no simulated EC2."""

    def __init__(self, instances: Iterable[SimInstance] = ()) -> None:
        self._instances = {i.instance_id: i for i in instances}

    def running_instances(self) -> list[SimInstance]:
        return list(self._instances.values())

    def put(self, instance: SimInstance) -> None:
        self._instances[instance.instance_id] = instance

    def set_state(self, instance_id: str, state: str) -> None:
        self._instances[instance_id] = replace(self._instances[instance_id], state=state)

    def remove(self, instance_id: str) -> None:
        self._instances.pop(instance_id, None)


@dataclass(frozen=True)
class NodeShape:
    """What an instance type gives a node: capacity, allocatable (quantity strings) and its labels."""

    capacity: Mapping[str, str]
    allocatable: Mapping[str, str]
    labels: Mapping[str, str]


NodeShapes = Callable[[str], NodeShape]


# --- user data -----------------------------------------------------------------------------------------


@dataclass
class KubeletFlags:
    """The registration settings found in an instance's user data."""

    labels: dict[str, str] = field(default_factory=dict)
    taints: list[Obj] = field(default_factory=list)
    bottlerocket: bool = False


_FLAG_RE = {
    name: re.compile(rf"--{name}(?:=|\s+)[\"']?([^\s\"']+)")
    for name in ("node-labels", "register-with-taints")
}


def parse_label_flag(value: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in value.split(","):
        if "=" in item:
            key, label = item.split("=", 1)
            if key.strip():
                out[key.strip()] = label.strip()
    return out


def parse_taint(text: str) -> Obj | None:
    """``key=value:Effect`` or ``key:Effect``."""
    if ":" not in text:
        return None
    head, effect = text.rsplit(":", 1)
    if effect not in TAINT_EFFECTS:
        return None
    key, _, value = head.partition("=")
    if not key:
        return None
    taint: Obj = {"key": key, "effect": effect}
    if value:
        taint["value"] = value
    return taint


def parse_taint_flag(value: str) -> list[Obj]:
    return [t for t in (parse_taint(item.strip()) for item in value.split(",") if item.strip()) if t]


def _apply_flags(flags: KubeletFlags, text: str) -> None:
    for match in _FLAG_RE["node-labels"].finditer(text):
        flags.labels.update(parse_label_flag(match.group(1)))
    for match in _FLAG_RE["register-with-taints"].finditer(text):
        flags.taints.extend(parse_taint_flag(match.group(1)))


def _apply_node_config(flags: KubeletFlags, text: str) -> bool:
    """nodeadm's NodeConfig documents (AL2023). Whether any was found."""
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError:
        return False
    found = False
    for doc in documents:
        if not isinstance(doc, dict) or doc.get("kind") != "NodeConfig":
            continue
        if doc.get("apiVersion") != NODE_CONFIG_API_VERSION:
            continue
        found = True
        kubelet = (doc.get("spec") or {}).get("kubelet") or {}
        for flag in kubelet.get("flags") or []:
            _apply_flags(flags, str(flag))
        for taint in (kubelet.get("config") or {}).get("registerWithTaints") or []:
            if isinstance(taint, dict) and taint.get("key") and taint.get("effect") in TAINT_EFFECTS:
                flags.taints.append({k: taint[k] for k in ("key", "value", "effect") if taint.get(k)})
    return found


def _apply_bottlerocket(flags: KubeletFlags, text: str) -> bool:
    try:
        settings = tomllib.loads(text).get("settings") or {}
    except tomllib.TOMLDecodeError:
        return False
    kubernetes = settings.get("kubernetes")
    if not isinstance(kubernetes, dict):
        return False
    flags.bottlerocket = True
    flags.labels.update({str(k): str(v) for k, v in (kubernetes.get("node-labels") or {}).items()})
    for key, values in (kubernetes.get("node-taints") or {}).items():
        for value in values if isinstance(values, list) else [values]:
            # "value:Effect", ":Effect", or a bare effect for a taint without a value.
            taint = parse_taint(f"{key}={value}" if ":" in str(value) else f"{key}:{value}")
            if taint:
                flags.taints.append(taint)
    return True


def _apply_part(flags: KubeletFlags, text: str, content_type: str) -> None:
    if (content_type == "application/node.eks.aws" or NODE_CONFIG_API_VERSION in text) and _apply_node_config(
        flags, text
    ):
        return
    if "[settings" in text and _apply_bottlerocket(flags, text):
        return
    _apply_flags(flags, text)


def parse_user_data(user_data: str | None) -> KubeletFlags:
    """Node labels and registration taints from shell bootstrap flags, nodeadm NodeConfig (plain or in a MIME
    multipart archive) or Bottlerocket TOML."""
    flags = KubeletFlags()
    if not user_data:
        return flags
    head = user_data.lstrip()[:512].lower()
    if head.startswith("mime-version") or "content-type: multipart/" in head:
        message = email.message_from_string(user_data.lstrip())
        for part in message.walk():
            if part.is_multipart():
                continue
            payload = part.get_payload(decode=True)
            text = (
                payload.decode("utf-8", "replace") if isinstance(payload, bytes) else str(part.get_payload())
            )
            _apply_part(flags, text, part.get_content_type())
        return flags
    _apply_part(flags, user_data, "")
    return flags


# --- the fleet -----------------------------------------------------------------------------------------


_REGION_RE = re.compile(r"^([a-z]{2}(?:-[a-z]+)+-\d+)")


def region_of(zone: str) -> str:
    match = _REGION_RE.match(zone)
    return match.group(1) if match else zone.rstrip("abcdefghijklmnopqrstuvwxyz")


def instance_id_of(node: Obj) -> str | None:
    provider_id = str((node.get("spec") or {}).get("providerID") or "")
    if not provider_id.startswith(AWS_PROVIDER_PREFIX):
        return None
    return provider_id.rsplit("/", 1)[-1] or None


def _host_ip(instance: SimInstance) -> str:
    if instance.private_ip_address:
        return instance.private_ip_address
    match = re.match(r"ip-(\d+)-(\d+)-(\d+)-(\d+)", instance.private_dns_name)
    if match:
        return ".".join(match.groups())
    return str(ipaddress.IPv4Address((10 << 24) | (zlib.crc32(instance.instance_id.encode()) & 0xFFFFFF)))


@dataclass
class KubeletReport:
    """What one step did, by node name or pod key."""

    registered: list[str] = field(default_factory=list)
    became_ready: list[str] = field(default_factory=list)
    started_pods: list[str] = field(default_factory=list)
    completed_pods: list[str] = field(default_factory=list)
    finished_pods: list[str] = field(default_factory=list)
    collected_pods: list[str] = field(default_factory=list)
    restored_pods: list[str] = field(default_factory=list)  # Ready again after their node's silence
    node_lifecycle: NodeLifecycleReport = field(default_factory=NodeLifecycleReport)

    @property
    def lost_nodes(self) -> list[str]:
        """Nodes deleted because their instance is gone."""
        return self.node_lifecycle.deleted_nodes


class KubeletFleet:
    """The kubelets of every instance an :class:`InstanceSource` reports, stepped together."""

    def __init__(
        self,
        api_client: ApiClient,
        instances: InstanceSource,
        shapes: NodeShapes,
        *,
        boot_delay: float = 30.0,
        ready_delay: float = 10.0,
        pod_start_delay: float = 2.0,
        kubelet_version: str = KUBELET_VERSION,
        node_monitor_grace_period: float = NODE_MONITOR_GRACE_PERIOD.total_seconds(),
        store: Store | None = None,
    ) -> None:
        # Its LISTs from informers on ``store``'s change feed when given (``cluster/informer.py``).
        self._rest = InformedRest(api_client, store)
        self.node_lifecycle = NodeLifecycleController(
            self._rest, grace_period=timedelta(seconds=node_monitor_grace_period)
        )
        self._instances = instances
        self._shapes = shapes
        self.boot_delay = timedelta(seconds=boot_delay)
        self.ready_delay = timedelta(seconds=ready_delay)
        self.pod_start_delay = timedelta(seconds=pod_start_delay)
        self.kubelet_version = kubelet_version
        # Instances we have seen: a Node whose instance id we never saw belongs to someone else.
        self._known_instances: set[str] = set()
        self._registered: set[str] = set()
        self._bound_seen: dict[str, datetime] = {}
        self._deleting_seen: set[str] = set()
        self._heartbeats: dict[str, datetime] = {}  # node name -> when its kubelet last reported
        self._next_pod_ip = 0

    # -- step --

    def step(self, now: datetime) -> KubeletReport:
        report = KubeletReport()
        instances = {i.instance_id: i for i in self._instances.running_instances()}
        self._known_instances.update(instances)
        # Pods before nodes: a pod bound to a node must then find its node in the later, fresher list.
        pods = self._rest.list(pods_path())
        nodes = {name_of(n): n for n in self._rest.list(NODES_PATH)}
        self._registered.update(iid for iid in map(instance_id_of, nodes.values()) if iid)
        for instance in sorted(instances.values(), key=lambda i: (i.launch_time, i.instance_id)):
            # A kubelet registers once, at start-up: a Node deleted under a live instance stays gone.
            if instance.instance_id in self._registered or instance.state != "running":
                continue
            if now >= instance.launch_time + self.boot_delay:
                node = self._register(instance, nodes, now)
                if node is not None:
                    nodes[name_of(node)] = node
                    self._registered.add(instance.instance_id)
                    report.registered.append(name_of(node))
        live_nodes: dict[str, SimInstance] = {}
        kubelets: dict[str, KubeletState] = {}
        for name, node in list(nodes.items()):
            instance_id = instance_id_of(node)
            if instance_id is None or instance_id not in self._known_instances:
                continue
            backing = instances.get(instance_id)
            state = None if backing is None or backing.state == "terminated" else backing.state
            if backing is not None and state == "running":
                live_nodes[name] = backing
                self._heartbeats[name] = now
                if self._ready_due(node, backing, now):
                    ready = self._set_ready(node, now)
                    if ready is not None:
                        nodes[name] = ready
                        report.became_ready.append(name)
            kubelets[name] = KubeletState(self._heartbeats.get(name), state)
        report.node_lifecycle = self.node_lifecycle.step(now, list(nodes.values()), pods, kubelets)
        self._sync_pods(pods, nodes, live_nodes, now, report)
        return report

    # -- nodes --

    def _register(self, instance: SimInstance, nodes: Mapping[str, Obj], now: datetime) -> Obj | None:
        name = instance.private_dns_name or instance.instance_id
        if name in nodes:
            return None
        shape = self._shapes(instance.instance_type)
        flags = parse_user_data(instance.user_data)
        labels = dict(shape.labels)
        labels.setdefault(wk.ARCH, "amd64")
        labels.setdefault(wk.OS, "linux")
        labels.setdefault(wk.INSTANCE_TYPE, instance.instance_type)
        # The deprecated twins the kubelet still sets.
        labels.setdefault("beta.kubernetes.io/arch", labels[wk.ARCH])
        labels.setdefault("beta.kubernetes.io/os", labels[wk.OS])
        labels.update(
            {
                wk.ZONE: instance.zone,
                wk.REGION: region_of(instance.zone),
                wk.HOSTNAME: name,
                wk.CAPACITY_TYPE: instance.tags.get(wk.CAPACITY_TYPE, wk.CAPACITY_TYPE_ON_DEMAND),
            }
        )
        labels.update(flags.labels)
        host_ip = _host_ip(instance)
        spec: Obj = {"providerID": f"{AWS_PROVIDER_PREFIX}{instance.zone}/{instance.instance_id}"}
        if flags.taints:
            spec["taints"] = flags.taints
        status = self._initial_status(
            instance, shape=shape, labels=labels, host_ip=host_ip, bottlerocket=flags.bottlerocket, now=now
        )
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": {
                    "alpha.kubernetes.io/provided-node-ip": host_ip,
                    "node.alpha.kubernetes.io/ttl": "0",
                    "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                },
            },
            "spec": spec,
            "status": status,
        }
        created = self._rest.create(NODES_PATH, body)
        if created is None:
            return None
        if not (created.get("status") or {}).get("capacity"):
            # A server that drops status on create gets it the way a kubelet would retry it: via /status.
            created = self._rest.patch(node_path(name, "status"), {"status": status}) or created
        return created

    def _initial_status(
        self,
        instance: SimInstance,
        *,
        shape: NodeShape,
        labels: Mapping[str, str],
        host_ip: str,
        bottlerocket: bool,
        now: datetime,
    ) -> Obj:
        stamp = to_rfc3339(now)

        def cond(kind: str, status: str, reason: str, message: str) -> Obj:
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp,
            }

        arch = labels.get(wk.ARCH, "amd64")
        windows = labels.get(wk.OS) == "windows"
        if windows:
            os_image = "Windows Server 2022 Datacenter"
        elif bottlerocket:
            os_image = (
                f"Bottlerocket OS 1.26.0 (aws-k8s-{self.kubelet_version.lstrip('v').rsplit('.', 1)[0]})"
            )
        else:
            os_image = "Amazon Linux 2023.6.20241010"
        machine_id = instance.instance_id.removeprefix("i-").ljust(32, "0")[:32]
        return {
            "capacity": dict(shape.capacity),
            "allocatable": dict(shape.allocatable),
            "conditions": [
                cond(
                    "MemoryPressure",
                    "False",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond(
                    "PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"
                ),
                cond(
                    "Ready",
                    "False",
                    "KubeletNotReady",
                    "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
                    "message:Network plugin returns error: cni plugin not initialized",
                ),
            ],
            "addresses": [
                {"type": "InternalIP", "address": host_ip},
                {"type": "InternalDNS", "address": instance.private_dns_name},
                {"type": "Hostname", "address": instance.private_dns_name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": arch,
                "operatingSystem": labels.get(wk.OS, "linux"),
                "osImage": os_image,
                "kernelVersion": "6.1.112-124.190.amzn2023." + ("aarch64" if arch == "arm64" else "x86_64"),
                "containerRuntimeVersion": "containerd://1.7.22",
                "kubeletVersion": self.kubelet_version,
                "kubeProxyVersion": self.kubelet_version,
                "machineID": machine_id,
                "systemUUID": f"ec2{machine_id[3:8]}-{machine_id[8:12]}-{machine_id[12:16]}-"
                f"{machine_id[16:20]}-{machine_id[20:32]}",
                "bootID": f"{machine_id[:8]}-{machine_id[8:12]}-4{machine_id[13:16]}-a{machine_id[17:20]}-"
                f"{machine_id[20:32]}",
            },
        }

    def _ready_due(self, node: Obj, instance: SimInstance, now: datetime) -> bool:
        ready = condition(node, "Ready")
        if ready is not None and ready.get("status") == "True":
            return False
        created = meta(node).get("creationTimestamp")
        registered_at = max(
            instance.launch_time + self.boot_delay,
            parse_rfc3339(created) if created else instance.launch_time,
        )
        return now >= registered_at + self.ready_delay

    def _set_ready(self, node: Obj, now: datetime) -> Obj | None:
        """Post Ready (and healthy pressure conditions, after a silence left them Unknown); the Node."""
        stamp = to_rfc3339(now)
        updates = {
            "Ready": {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp,
            }
        }
        for kind, (reason, message) in _HEALTHY_CONDITIONS.items():
            cond = condition(node, kind)
            if cond is not None and cond.get("status") == "Unknown":
                updates[kind] = {
                    **cond,
                    "status": "False",
                    "reason": reason,
                    "message": message,
                    "lastHeartbeatTime": stamp,
                    "lastTransitionTime": stamp,
                }
        return self._patch_conditions(node, updates)

    def _patch_conditions(self, node: Obj, updates: Mapping[str, Obj]) -> Obj | None:
        # The whole list, so that merge and strategic merge patches agree on the result.
        conditions = [
            updates.get(c.get("type", ""), c) for c in (node.get("status") or {}).get("conditions") or []
        ]
        present = {c.get("type") for c in conditions}
        conditions.extend(c for kind, c in updates.items() if kind not in present)
        return self._rest.patch(node_path(name_of(node), "status"), {"status": {"conditions": conditions}})

    # -- pods --

    def _sync_pods(
        self,
        pods: list[Obj],
        nodes: Mapping[str, Obj],
        live_nodes: Mapping[str, SimInstance],
        now: datetime,
        report: KubeletReport,
    ) -> None:
        seen_bound: set[str] = set()
        seen_deleting: set[str] = set()
        for pod in pods:
            node_name = (pod.get("spec") or {}).get("nodeName") or ""
            uid = uid_of(pod)
            if not node_name:
                # podgc: a pod being deleted before it was ever scheduled has nobody else to finish it.
                if is_deleting(pod) and self._force_delete(pod):
                    report.collected_pods.append(key_of(pod))
                continue
            if node_name not in nodes:
                if self._force_delete(pod):
                    report.collected_pods.append(key_of(pod))
                continue
            if node_name not in live_nodes:
                continue
            if is_deleting(pod):
                seen_deleting.add(uid)
                # Containers stop at once here; the pod object goes on the step after we first saw it.
                if uid in self._deleting_seen and self._force_delete(pod):
                    report.finished_pods.append(key_of(pod))
                continue
            phase = pod_phase(pod)
            if phase == "Pending":
                seen_bound.add(uid)
                first_seen = self._bound_seen.setdefault(uid, now)
                if now >= first_seen + self.pod_start_delay and self._start(pod, nodes[node_name], now):
                    report.started_pods.append(key_of(pod))
            elif phase == "Running" and self._run_is_over(pod, now) and self._complete(pod, now):
                report.completed_pods.append(key_of(pod))
            elif (
                phase == "Running"
                and (condition(pod, "Ready") or {}).get("status") == "False"
                and self._set_pod_ready(pod, now)
            ):
                # Back from a silence in which the node lifecycle controller marked it not Ready: the
                # kubelet's status manager posts its own view again (its containers run; no probes here).
                report.restored_pods.append(key_of(pod))
        self._bound_seen = {u: t for u, t in self._bound_seen.items() if u in seen_bound}
        self._deleting_seen = seen_deleting

    def _set_pod_ready(self, pod: Obj, now: datetime) -> bool:
        ready = condition(pod, "Ready") or {"type": "Ready"}
        conditions = with_condition(
            (pod.get("status") or {}).get("conditions") or [],
            {**ready, "status": "True", "lastTransitionTime": to_rfc3339(now)},
        )
        path = pod_path(namespace_of(pod), name_of(pod), "status")
        return self._rest.patch(path, {"status": {"conditions": conditions}}) is not None

    def _force_delete(self, pod: Obj) -> bool:
        return self._rest.delete(
            pod_path(namespace_of(pod), name_of(pod)), grace_period_seconds=0, uid=uid_of(pod) or None
        )

    def _pod_ip(self, pod: Obj, host_ip: str) -> str:
        if (pod.get("spec") or {}).get("hostNetwork"):
            return host_ip
        self._next_pod_ip += 1
        n = self._next_pod_ip
        return f"10.{128 + (n >> 16) % 64}.{(n >> 8) % 256}.{n % 256}"

    def _start(self, pod: Obj, node: Obj, now: datetime) -> bool:
        stamp = to_rfc3339(now)
        host_ip = next(
            (
                a["address"]
                for a in (node.get("status") or {}).get("addresses") or []
                if a.get("type") == "InternalIP"
            ),
            "",
        )
        pod_ip = self._pod_ip(pod, host_ip)
        spec = pod.get("spec") or {}
        conditions = [
            {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": stamp}
            for kind in (
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled",
            )
        ]
        status: Obj = {
            "phase": "Running",
            "conditions": conditions,
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": stamp,
            "containerStatuses": [
                {
                    "name": c.get("name", ""),
                    "image": c.get("image", ""),
                    "imageID": "",
                    "containerID": f"containerd://{uid_of(pod).replace('-', '')}{i}",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": stamp}},
                }
                for i, c in enumerate(spec.get("containers") or [])
            ],
        }
        return (
            self._rest.patch(pod_path(namespace_of(pod), name_of(pod), "status"), {"status": status})
            is not None
        )

    @staticmethod
    def _run_is_over(pod: Obj, now: datetime) -> bool:
        run_seconds = (meta(pod).get("annotations") or {}).get(RUN_SECONDS_ANNOTATION)
        started = (pod.get("status") or {}).get("startTime")
        if run_seconds is None or not started:
            return False
        try:
            duration = float(run_seconds)
        except ValueError:
            return False
        return now >= parse_rfc3339(started) + timedelta(seconds=duration)

    def _complete(self, pod: Obj, now: datetime) -> bool:
        stamp = to_rfc3339(now)
        status: Any = pod.get("status") or {}
        conditions = []
        for cond in status.get("conditions") or []:
            if cond.get("type") in ("Ready", "ContainersReady"):
                conditions.append(
                    {**cond, "status": "False", "reason": "PodCompleted", "lastTransitionTime": stamp}
                )
            else:
                conditions.append(cond)
        container_statuses = [
            {
                **cs,
                "ready": False,
                "started": False,
                "state": {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": ((cs.get("state") or {}).get("running") or {}).get("startedAt"),
                        "finishedAt": stamp,
                    }
                },
            }
            for cs in status.get("containerStatuses") or []
        ]
        body = {
            "status": {
                "phase": "Succeeded",
                "conditions": conditions,
                "containerStatuses": container_statuses,
            }
        }
        return self._rest.patch(pod_path(namespace_of(pod), name_of(pod), "status"), body) is not None
