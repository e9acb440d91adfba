"""Shared helpers for the ports of Karpenter's ``pkg/controllers/provisioning/scheduling/suite_test.go``.

Karpenter runs that suite against its fake cloud provider: a handful of instance types in three test zones
(``fake.NewInstanceType``). ``FakeType`` is our analogue, and ``DEFAULT_TYPES`` the fake provider's
default catalog, so that each port reads like the It block it follows. What Karpenter's fake marks with its
own labels maps onto our well-known ones: ``integer`` (the vCPU count) is ``instance-cpu``, ``size`` is
``instance-size``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.catalog import Offering
from serverless_karpenter.scheduling.daemonsets import daemonset_pod
from serverless_karpenter.scheduling.scheduler import (
    ExistingCapacity,
    NodePoolTemplate,
    Scheduler,
    SchedulingResult,
    choose_offering,
    nodepool_requirements,
)
from serverless_karpenter.scheduling.taints import Taint

GI = 1 << 30
MI = 1 << 20
ZONES = ("test-zone-1", "test-zone-2", "test-zone-3")
VENDOR_A = "fake.com/vendor-a"
VENDOR_B = "fake.com/vendor-b"
# Karpenter's default NodePool in the suite allows every capacity type.
ALL_CAPACITY_TYPES = {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand", "reserved"]}


def default_offerings(price: float) -> tuple[Offering, ...]:
    """fake.NewInstanceType's offerings: spot in zones 1-2, on-demand in zones 1-3, one price."""
    spot = tuple(Offering(z, "spot", price, True) for z in ZONES[:2])
    return spot + tuple(Offering(z, "on-demand", price, True) for z in ZONES)


@dataclass(frozen=True)
class FakeType:
    """fake.NewInstanceType: 4 cpu, 4Gi and 5 pods unless told, amd64 linux, kube-reserved 100m/10Mi."""

    name: str
    cpu: float = 4
    memory: int = 4 * GI
    pods: int = 5
    arch: str = "amd64"
    os: str = "linux"
    extended: Mapping[str, int] = field(default_factory=dict)
    offering_list: tuple[Offering, ...] | None = None
    extra_labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def price(self) -> float:
        # fake.PriceFromResources: 0.1 a vCPU, 0.1 a GB, 1.0 for a GPU resource.
        gpus = sum(1.0 for k in self.extended if k in (VENDOR_A, VENDOR_B))
        return round(self.cpu * 0.1 + self.memory / 1e9 * 0.1 + gpus, 6)

    @property
    def capacity(self) -> dict[str, int]:
        return {"cpu": int(self.cpu * 1000), "memory": self.memory, "pods": self.pods, **self.extended}

    @property
    def allocatable(self) -> dict[str, int]:
        cap = self.capacity
        return {**cap, "cpu": cap["cpu"] - 100, "memory": cap["memory"] - 10 * MI}

    @property
    def labels(self) -> dict[str, str]:
        large = self.cpu > 4 and self.memory > 8 * GI
        return {
            wk.INSTANCE_TYPE: self.name,
            wk.ARCH: self.arch,
            wk.OS: self.os,
            wk.INSTANCE_CPU: str(int(self.cpu)),
            wk.INSTANCE_SIZE: "large" if large else "small",
            **self.extra_labels,
        }

    @property
    def offerings(self) -> tuple[Offering, ...]:
        return self.offering_list if self.offering_list is not None else default_offerings(self.price)


# The fake cloud provider's default instance types (fake.CloudProvider.GetInstanceTypes).
DEFAULT_TYPES: tuple[FakeType, ...] = (
    FakeType("default-instance-type"),
    FakeType("small-instance-type", cpu=2, memory=2 * GI),
    FakeType("gpu-vendor-instance-type", extended={VENDOR_A: 2}),
    FakeType("gpu-vendor-b-instance-type", extended={VENDOR_B: 2}),
    FakeType("arm-instance-type", cpu=16, memory=128 * GI, arch="arm64"),
    FakeType("single-pod-instance-type", pods=1),
)


def fake_instance_types(total: int) -> tuple[FakeType, ...]:
    """fake.InstanceTypes(n): fake-it-<i> with i+1 cpu, 2(i+1)Gi and 10(i+1) pods. Karpenter's fake marks
    the large ones with an optional ``special`` label; ``instance-local-nvme`` plays that part here (a label
    only some types have)."""
    out = []
    for i in range(total):
        it = FakeType(f"fake-it-{i}", cpu=i + 1, memory=2 * (i + 1) * GI, pods=10 * (i + 1))
        if it.labels[wk.INSTANCE_SIZE] == "large":
            it = FakeType(it.name, it.cpu, it.memory, it.pods, extra_labels={EXOTIC: "100"})
        out.append(it)
    return tuple(out)


EXOTIC = wk.INSTANCE_LOCAL_NVME


def nodepool(
    name: str = "default",
    requirements: Sequence[Mapping[str, Any]] | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    weight: int = 0,
    types: Sequence[Any] = DEFAULT_TYPES,
    overhead: Mapping[str, int] | None = None,
    remaining: Mapping[str, int] | None = None,
    daemonsets: Sequence[Mapping[str, Any]] = (),
) -> NodePoolTemplate:
    """The suite's NodePool (all capacity types unless ``requirements`` replace them) over ``types``;
    ``daemonsets`` (DaemonSet objects) run on its nodes as the provisioner charges them, per type."""
    manifest = {
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": dict(labels or {})},
                "spec": {
                    "requirements": list(requirements) if requirements is not None else [ALL_CAPACITY_TYPES],
                    "taints": list(taints),
                    "nodeClassRef": {"name": "default"},
                },
            }
        },
    }
    reqs, pool_labels, pool_taints = nodepool_requirements(manifest)
    return NodePoolTemplate(
        name,
        "default",
        weight,
        reqs,
        pool_labels,
        pool_taints,
        list(types),
        dict(overhead or {}),
        dict(remaining) if remaining is not None else None,
        daemonsets=[daemonset_pod(ds) for ds in daemonsets],
    )


def schedule(
    pods: Sequence[Mapping[str, Any]],
    pools: Sequence[NodePoolTemplate] | None = None,
    existing: Sequence[ExistingCapacity] = (),
    **kwargs: Any,
) -> SchedulingResult:
    return Scheduler(list(pools) if pools is not None else [nodepool()], existing, **kwargs).solve(pods)


def key(p: Mapping[str, Any]) -> str:
    return f"{p['metadata'].get('namespace', 'default')}/{p['metadata']['name']}"


def scheduled(result: SchedulingResult, p: Mapping[str, Any]) -> str:
    """Where ``p`` went: an existing capacity's name, or ``new:<index>`` for a new NodeClaim."""
    k = key(p)
    for name, keys in result.existing.items():
        if k in keys:
            return name
    for i, claim in enumerate(result.new_nodeclaims):
        if k in claim.pods:
            return f"new:{i}"
    raise AssertionError(f"{k} not scheduled: {result.unschedulable.get(k)}")


def not_scheduled(result: SchedulingResult, p: Mapping[str, Any]) -> bool:
    k = key(p)
    placed = any(k in keys for keys in result.existing.values()) or any(
        k in c.pods for c in result.new_nodeclaims
    )
    return not placed and k in result.unschedulable


def node_labels(result: SchedulingResult, p: Mapping[str, Any]) -> dict[str, str]:
    """The labels of the node ``p`` lands on, as Karpenter's fake provider would launch it: the claim's
    requirement labels, then the cheapest compatible type's labels and its offering's zone/capacity."""
    where = scheduled(result, p)
    assert where.startswith("new:"), f"{key(p)} went to existing {where}"
    claim = result.new_nodeclaims[int(where[4:])]
    chosen = choose_offering(claim)
    assert chosen is not None
    it = next(t for t in claim.instance_types if t.name == chosen.instance_type)
    return {
        **claim.requirements.labels(),
        **claim.labels,
        **it.labels,
        wk.ZONE: chosen.zone,
        wk.CAPACITY_TYPE: chosen.capacity_type,
    }


def claim_for(result: SchedulingResult, p: Mapping[str, Any]) -> Any:
    where = scheduled(result, p)
    assert where.startswith("new:"), f"{key(p)} went to existing {where}"
    return result.new_nodeclaims[int(where[4:])]


def type_names(claim: Any) -> set[str]:
    return {it.name for it in claim.instance_types}


def expressions(*items: tuple[str, str, Sequence[str]]) -> list[dict[str, Any]]:
    return [{"key": k, "operator": op, **({"values": list(v)} if v else {})} for k, op, v in items]


def node_affinity(
    required: Sequence[tuple[str, str, Sequence[str]]] = (),
    preferred: Sequence[tuple[str, str, Sequence[str]]] = (),
) -> dict[str, Any]:
    """test.PodOptions' NodeRequirements (one required term) and NodePreferences (one weight-1 term)."""
    affinity: dict[str, Any] = {}
    if required:
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [{"matchExpressions": expressions(*required)}]
        }
    if preferred:
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": 1, "preference": {"matchExpressions": expressions(*preferred)}}
        ]
    return {"nodeAffinity": affinity}


def existing_node(
    name: str,
    labels: Mapping[str, str],
    available: Mapping[str, int],
    *,
    taints: Sequence[Taint] = (),
    bound_pods: Sequence[Mapping[str, Any]] = (),
    in_flight: bool = False,
) -> ExistingCapacity:
    return ExistingCapacity(
        name=name,
        labels={wk.HOSTNAME: name, **labels},
        taints=tuple(taints),
        available=dict(available),
        in_flight=in_flight,
        bound_pods=list(bound_pods),
    )


def upod(name: str, cpu: str | None = None, memory: str | None = None, **fields: Any) -> dict[str, Any]:
    """test.UnschedulablePod: pending, and requesting nothing unless told."""
    from tests.builders import pod

    return pod(name, cpu, memory, unschedulable=True, **fields)


# -- cluster state: nodes as the fake provider launches them, read back the way plan reads a cluster --


def node_object(
    name: str,
    it: FakeType,
    *,
    zone: str = "test-zone-1",
    capacity_type: str = "on-demand",
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    initialized: bool = False,
    deleting: bool = False,
) -> dict[str, Any]:
    """A Node of type ``it`` launched for the suite's NodePool (``initialized`` adds Karpenter's label)."""
    from tests.builders import node

    alloc = it.allocatable
    all_labels = {
        **it.labels,
        wk.CAPACITY_TYPE: capacity_type,
        wk.NODEPOOL: "default",
        **({wk.INITIALIZED: "true", wk.REGISTERED: "true"} if initialized else {}),
        **(labels or {}),
    }
    body = node(
        name,
        f"{alloc['cpu']}m",
        str(alloc["memory"]),
        pods=str(alloc["pods"]),
        zone=zone,
        labels=all_labels,
        taints=taints,
        extended={k: str(v) for k, v in alloc.items() if k not in ("cpu", "memory", "pods")},
    )
    if deleting:
        body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return body


def bind(p: Mapping[str, Any], node_name: str) -> dict[str, Any]:
    return {
        **p,
        "spec": {**p["spec"], "nodeName": node_name},
        "status": {"phase": "Running"},
    }


def launch(
    result: SchedulingResult, pods: Sequence[Mapping[str, Any]], prefix: str = "node"
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The fake provider's launch of every new NodeClaim (cheapest type and offering) with its pods bound,
    and the pods placed on existing capacity bound there: the cluster the next provisioning pass sees."""
    by_key = {key(p): p for p in pods}
    nodes: list[dict[str, Any]] = []
    bound: list[dict[str, Any]] = []
    for i, claim in enumerate(result.new_nodeclaims):
        chosen = choose_offering(claim)
        assert chosen is not None
        it = next(t for t in claim.instance_types if t.name == chosen.instance_type)
        name = f"{prefix}-{i}"
        nodes.append(
            node_object(name, it, zone=chosen.zone, capacity_type=chosen.capacity_type, labels=claim.labels)
        )
        bound += [bind(by_key[k], name) for k in claim.pods]
    for name, keys in result.existing.items():
        bound += [bind(by_key[k], name) for k in keys]
    return nodes, bound


def capacity(
    nodes: Sequence[Mapping[str, Any]],
    bound_pods: Sequence[Mapping[str, Any]] = (),
    records: Sequence[Any] = (),
    *,
    nodepools: Sequence[Mapping[str, Any]] = (),
    daemonsets: Sequence[Mapping[str, Any]] = (),
) -> list[ExistingCapacity]:
    """What plan and the provisioner make of the cluster: ``existing_capacity`` (``nodepools`` as manifests,
    for their startupTaints; ``daemonsets`` as DaemonSet objects, for the room they keep on nodes)."""
    from serverless_karpenter.provisioning.provisioner import existing_capacity

    return existing_capacity(
        nodes,
        bound_pods,
        records,
        nodepools=nodepools,
        daemon_pods=[daemonset_pod(ds) for ds in daemonsets],
    )


def daemonset(name: str, template: Mapping[str, Any]) -> dict[str, Any]:
    """test.DaemonSet: a DaemonSet whose pods are ``template`` (a pod)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"template": {"metadata": dict(template.get("metadata") or {}), "spec": template["spec"]}},
    }
