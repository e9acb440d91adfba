"""A small analogue of the harness Karpenter's scheduling suites run on: its fake cloud provider's instance
types (``fake.InstanceTypes``), NodePools, and ``ExpectProvisioned`` / ``ExpectSkew`` over a cluster that
keeps the nodes each provisioning launches, so that a later batch sees them with their pods bound.

Our own code, written from the behaviour those helpers have: a launched NodeClaim becomes a node of the
cheapest instance type it allows, on the first offering (in the fake provider's order) its requirements
allow, labelled with its NodePool's labels, its single-valued requirements and the type's labels.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.catalog.offerings import Offering
from serverless_karpenter.provisioning.provisioner import existing_capacity
from serverless_karpenter.runtime import SchedulableInstanceType
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.scheduler import NodePoolTemplate, Scheduler, SchedulingResult
from serverless_karpenter.scheduling.topology import Selector
from serverless_karpenter.scheduling.volumes import VolumeIndex

from tests import builders
from tests.unit.test_scheduling_constraints import pool as _pool

Obj = dict[str, Any]

ZONE_1, ZONE_2, ZONE_3 = "test-zone-1", "test-zone-2", "test-zone-3"
SPOT, ON_DEMAND = "spot", "on-demand"
# The fake provider's default offerings: spot in zones 1 and 2, on-demand in all three, in this order.
DEFAULT_OFFERINGS = (
    (SPOT, ZONE_1),
    (SPOT, ZONE_2),
    (ON_DEMAND, ZONE_1),
    (ON_DEMAND, ZONE_2),
    (ON_DEMAND, ZONE_3),
)
GI = 1 << 30
MI = 1 << 20
LABELS = {"test": "test"}


def fake_type(
    name: str,
    *,
    cpu: int = 4,
    memory_gi: int = 4,
    pods: int = 5,
    arch: str = "amd64",
    offerings: Sequence[tuple[str, str]] = DEFAULT_OFFERINGS,
) -> SchedulableInstanceType:
    """A fake instance type: its price follows its size (as the fake provider's PriceFromResources), and its
    allocatable is its capacity less the fake kube-reserved (100m cpu, 10Mi memory)."""
    capacity = {resources.CPU: cpu * 1000, resources.MEMORY: memory_gi * GI, resources.PODS: pods}
    allocatable = {**capacity, resources.CPU: cpu * 1000 - 100, resources.MEMORY: memory_gi * GI - 10 * MI}
    price = 0.1 * cpu + 0.1 * memory_gi * GI / 1e9
    return SchedulableInstanceType(
        name,
        allocatable,
        capacity,
        {wk.INSTANCE_TYPE: name, wk.ARCH: arch, wk.OS: "linux"},
        [Offering(zone, capacity_type, price, True) for capacity_type, zone in offerings],
    )


# fake.InstanceTypes' defaults, without the two GPU-vendor types (topology never reaches for them: they are
# dearer than default-instance-type with the same cpu, memory and pods).
FAKE_TYPES: tuple[SchedulableInstanceType, ...] = (
    fake_type("default-instance-type"),
    fake_type("small-instance-type", cpu=2, memory_gi=2),
    fake_type("arm-instance-type", cpu=16, memory_gi=128, arch="arm64"),
    fake_type("single-pod-instance-type", pods=1),
)


def assorted_types() -> list[SchedulableInstanceType]:
    """An analogue of fake.InstanceTypesAssorted: one type per (cpu, memory, arch, offering), so that every
    zone and capacity type pair can be launched."""
    out = []
    for cpu, memory, arch in itertools.product((1, 2, 4, 8), (1, 4, 16), ("amd64", "arm64")):
        for capacity_type, zone in itertools.product((SPOT, ON_DEMAND), (ZONE_1, ZONE_2, ZONE_3)):
            name = f"{cpu}-cpu-{memory}-mem-{arch}-{capacity_type}-{zone}"
            out.append(
                fake_type(
                    name,
                    cpu=cpu,
                    memory_gi=memory,
                    arch=arch,
                    offerings=[(capacity_type, zone)],
                )
            )
    return out


def requirement(key: str, operator: str, *values: str, **extra: Any) -> Obj:
    return {"key": key, "operator": operator, "values": list(values), **extra}


CAPACITY_TYPE_EXISTS = requirement(wk.CAPACITY_TYPE, "Exists")


def nodepool(
    name: str = "default",
    requirements: Sequence[Obj] = (CAPACITY_TYPE_EXISTS,),
    *,
    types: Sequence[Any] = FAKE_TYPES,
    **kwargs: Any,
) -> NodePoolTemplate:
    """A NodePool over the fake types; by default, as the suite's, it requires only that a capacity type
    exists."""
    return _pool(name, list(requirements), types=types, **kwargs)


_names = itertools.count()


def pending(
    count: int = 1,
    *,
    labels: Mapping[str, str] | None = None,
    cpu: str | None = None,
    spread: Sequence[Obj] = (),
    node_selector: Mapping[str, str] | None = None,
    node_requirements: Sequence[Obj] = (),
    node_preferences: Sequence[Obj] = (),
    pod_affinity: Sequence[Obj] = (),
    pod_anti_affinity: Sequence[Obj] = (),
    preferred_pod_affinity: Sequence[Obj] = (),
    preferred_pod_anti_affinity: Sequence[Obj] = (),
    tolerations: Sequence[Obj] = (),
    namespace: str = "default",
    name: str = "pod",
    owner: str | None = None,
    **spec: Any,
) -> list[Obj]:
    """``count`` pending pods shaped as the suite's test.UnschedulablePods (no requests unless ``cpu``)."""
    affinity: Obj = {}
    if node_requirements:
        affinity.setdefault("nodeAffinity", {})["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [{"matchExpressions": list(node_requirements)}]
        }
    if node_preferences:
        affinity.setdefault("nodeAffinity", {})["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": 1, "preference": {"matchExpressions": list(node_preferences)}}
        ]
    for kind, required, preferred in (
        ("podAffinity", pod_affinity, preferred_pod_affinity),
        ("podAntiAffinity", pod_anti_affinity, preferred_pod_anti_affinity),
    ):
        if required:
            affinity.setdefault(kind, {})["requiredDuringSchedulingIgnoredDuringExecution"] = list(required)
        if preferred:
            affinity.setdefault(kind, {})["preferredDuringSchedulingIgnoredDuringExecution"] = list(preferred)
    extra: Obj = dict(spec)
    if affinity:
        extra["affinity"] = affinity
    if spread:
        extra["topologySpreadConstraints"] = list(spread)
    if node_selector:
        extra["nodeSelector"] = dict(node_selector)
    if tolerations:
        extra["tolerations"] = list(tolerations)
    return [
        builders.pod(
            f"{name}-{next(_names)}",
            cpu=cpu,
            memory=None,
            namespace=namespace,
            labels=dict(labels or {}),
            owner=owner,
            unschedulable=True,
            **extra,
        )
        for _ in range(count)
    ]


def tsc(
    key: str = wk.ZONE,
    max_skew: int = 1,
    when: str = "DoNotSchedule",
    selector: Mapping[str, str] | None = LABELS,
    **extra: Any,
) -> Obj:
    """A topology spread constraint; ``selector=None`` leaves its labelSelector out."""
    out: Obj = {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when, **extra}
    if selector is not None:
        out["labelSelector"] = {"matchLabels": dict(selector)}
    return out


def affinity_term(key: str, selector: Mapping[str, str], **extra: Any) -> Obj:
    return {"labelSelector": {"matchLabels": dict(selector)}, "topologyKey": key, **extra}


def weighted(term: Obj, weight: int = 50) -> Obj:
    return {"weight": weight, "podAffinityTerm": term}


@dataclass
class FakeCluster:
    """Nodes and bound pods, as the API server would hold them after each ``provision``."""

    nodes: list[Obj] = field(default_factory=list)
    pods: list[Obj] = field(default_factory=list)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    volumes: VolumeIndex | None = None
    launched: int = 0
    last: SchedulingResult | None = None

    def add_node(
        self,
        name: str,
        labels: Mapping[str, str] | None = None,
        *,
        taints: Sequence[Obj] = (),
        cpu: str = "0",
        memory: str = "0",
        pods: str = "0",
    ) -> Obj:
        """A node not made by provisioning; as test.Node, with no allocatable unless given (nothing fits)."""
        body = builders.node(name, cpu, memory, pods=pods, labels=dict(labels or {}), taints=taints)
        # test.Node carries only the labels it is given (no zone unless asked).
        body["metadata"]["labels"] = {wk.HOSTNAME: name, **(labels or {})}
        self.nodes.append(body)
        return body

    def bind(self, pod: Obj, node: str) -> Obj:
        """The pod, now Running on ``node`` (the test's pod object itself, so tests read where it went)."""
        pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": "Running"}
        self.pods.append(pod)
        return pod

    def provision(self, pools: Sequence[NodePoolTemplate], pods: Sequence[Obj]) -> SchedulingResult:
        """Karpenter's ExpectProvisioned: schedule ``pods`` against the nodes (with their bound pods), launch
        each new NodeClaim as a node and bind the pods to where they were scheduled."""
        capacity = existing_capacity(self.nodes, self.pods, [])
        result = Scheduler(pools, capacity, namespaces=self.namespaces, volumes=self.volumes).solve(pods)
        by_key = {podlib.key(p): p for p in pods}
        for node_name, keys in result.existing.items():
            for key in keys:
                self.bind(by_key[key], node_name)
        for claim in result.new_nodeclaims:
            node = self._launch(claim)
            for key in claim.pods:
                self.bind(by_key[key], node["metadata"]["name"])
        self.last = result
        return result

    def _launch(self, claim: Any) -> Obj:
        requirements = claim.requirements
        it = claim.instance_types[0]  # cheapest first
        offering = next(
            o
            for o in it.offerings
            if o.available
            and requirements.get(wk.ZONE).has(o.zone)
            and requirements.get(wk.CAPACITY_TYPE).has(o.capacity_type)
        )
        self.launched += 1
        name = f"node-{self.launched}"
        labels = {
            **requirements.single_valued_labels(),
            **claim.labels,
            **it.labels,
            wk.ZONE: offering.zone,
            wk.CAPACITY_TYPE: offering.capacity_type,
            wk.NODEPOOL: claim.nodepool,
            wk.HOSTNAME: name,
        }
        body = builders.node(
            name,
            f"{it.allocatable[resources.CPU]}m",
            str(it.allocatable[resources.MEMORY]),
            pods=str(it.allocatable[resources.PODS]),
            labels=labels,
            taints=[{"key": t.key, "value": t.value, "effect": t.effect} for t in claim.taints],
        )
        body["metadata"]["labels"] = labels
        self.nodes.append(body)
        return body

    # -- what the suite's Expect helpers read ------------------------------------------------------

    def node_of(self, pod: Obj) -> Obj | None:
        name = pod["spec"].get("nodeName")
        return next((n for n in self.nodes if n["metadata"]["name"] == name), None) if name else None

    def labels_of(self, pod: Obj) -> dict[str, str]:
        node = self.node_of(pod)
        assert node is not None, f"{podlib.key(pod)} is not scheduled"
        return dict(node["metadata"]["labels"])

    def scheduled(self, pod: Obj) -> bool:
        return self.node_of(pod) is not None

    def skew(
        self, key: str, selector: Mapping[str, str] | None = LABELS, namespace: str | None = "default"
    ) -> Counter[str]:
        """ExpectSkew: bound, non-terminal pods the selector picks, counted per node value of ``key`` (per
        node name for hostname); ``selector=None`` picks every pod, ``namespace=None`` every namespace."""
        parsed = Selector.from_dict({"matchLabels": dict(selector)} if selector is not None else {})
        counts: Counter[str] = Counter()
        for pod in self.pods:
            meta = pod["metadata"]
            if podlib.is_terminal(pod) or meta.get("deletionTimestamp"):
                continue
            if namespace is not None and meta.get("namespace", "default") != namespace:
                continue
            if not parsed.matches(meta.get("labels") or {}):
                continue
            node = self.node_of(pod)
            if node is None:
                continue
            if key == wk.HOSTNAME:
                counts[node["metadata"]["name"]] += 1
            elif key in node["metadata"]["labels"]:
                counts[node["metadata"]["labels"][key]] += 1
        return counts

    def delete(self, pod: Obj) -> None:
        self.pods = [p for p in self.pods if p is not pod]
        pod["spec"].pop("nodeName", None)


def max_skew(counts: Counter[str]) -> int:
    """ExpectMaxSkew: the largest count less the smallest, over the domains that hold a pod."""
    return max(counts.values()) - min(counts.values()) if counts else 0


def values(counts: Counter[str]) -> list[int]:
    """ConsistOf: the counts, order aside."""
    return sorted(counts.values())
