"""Benchmark inputs: instance types from the bundled catalog and pods in Karpenter's benchmark mixes.

The ``karpenter`` mix follows Karpenter's scheduling benchmark: the pods split evenly among plain pods,
zonal topology spread, hostname topology spread, zonal pod (self-)affinity and hostname anti-affinity,
with cpu drawn from {100m, 250m, 500m, 1000m, 1500m} and memory from {100, 256, 512, 1024, 2048, 4096}Mi.
The ``heterogeneous`` mix is plain pods whose shapes vary widely (cpu-heavy, memory-heavy, tiny), where
the shape of the node matters most. Every draw comes from one seeded generator, so runs compare.
"""

from __future__ import annotations

import random
from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.catalog import InstanceType, load_bundled_catalog
from serverless_karpenter.runtime import SchedulableInstanceType
from serverless_karpenter.scheduling.scheduler import NodePoolTemplate, nodepool_requirements

REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
CPU_CHOICES = ("100m", "250m", "500m", "1000m", "1500m")
MEMORY_CHOICES = ("100Mi", "256Mi", "512Mi", "1024Mi", "2048Mi", "4096Mi")
LABEL_VALUES = ("a", "b", "c", "d", "e", "f", "g")
MIXES = ("karpenter", "heterogeneous")


def instance_types(count: int) -> list[SchedulableInstanceType]:
    """``count`` linux/amd64 non-burstable types from the bundled catalog, spread evenly over its names."""
    catalog = load_bundled_catalog(REGION, ZONES)
    usable: list[InstanceType] = [
        it
        for it in catalog
        if it.arch == "amd64"
        and not it.bare_metal
        and it.labels.get(wk.INSTANCE_CATEGORY) != "t"  # burstable cpu is not capacity to plan on
        and catalog.cheapest_offering(it) is not None
    ]
    if count < len(usable):
        step = len(usable) / count
        usable = [usable[int(i * step)] for i in range(count)]
    return [
        SchedulableInstanceType(
            it.name, it.allocatable, it.capacity, it.labels, catalog.available_offerings(it)
        )
        for it in usable
    ]


def nodepool_manifest(capacity_types: tuple[str, ...] = (wk.CAPACITY_TYPE_ON_DEMAND,)) -> dict[str, Any]:
    return {
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [
                        {"key": wk.CAPACITY_TYPE, "operator": "In", "values": list(capacity_types)},
                        {"key": wk.ZONE, "operator": "In", "values": list(ZONES)},
                    ],
                }
            }
        },
    }


def templates(types: list[SchedulableInstanceType]) -> list[NodePoolTemplate]:
    requirements, labels, taints = nodepool_requirements(nodepool_manifest())
    return [
        NodePoolTemplate(
            name="default",
            nodeclass="default",
            weight=0,
            requirements=requirements,
            labels=labels,
            taints=taints,
            instance_types=types,
        )
    ]


def _pod(name: str, cpu: str, memory: str, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": name, "labels": labels},
        "spec": {
            "containers": [{"name": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
            **spec,
        },
        "status": {"phase": "Pending"},
    }


def karpenter_mix(count: int, seed: int = 42) -> list[dict[str, Any]]:
    """Karpenter's diverse-pods benchmark: five equal groups of constraints."""
    rng = random.Random(seed)
    share = count // 5

    def shape() -> tuple[str, str]:
        return rng.choice(CPU_CHOICES), rng.choice(MEMORY_CHOICES)

    def spread(key: str, selector: dict[str, str]) -> dict[str, Any]:
        return {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": selector},
        }

    pods: list[dict[str, Any]] = []
    for i in range(count - 4 * share):
        cpu, memory = shape()
        pods.append(_pod(f"plain-{i}", cpu, memory, {"my-label": rng.choice(LABEL_VALUES)}))
    for kind, key in (("zonal-spread", wk.ZONE), ("hostname-spread", wk.HOSTNAME)):
        for i in range(share):
            cpu, memory = shape()
            labels = {"my-label": rng.choice(LABEL_VALUES)}
            pods.append(
                _pod(f"{kind}-{i}", cpu, memory, labels, topologySpreadConstraints=[spread(key, labels)])
            )
    for i in range(share):
        cpu, memory = shape()
        labels = {"my-affinity": rng.choice(LABEL_VALUES)}
        term = {"labelSelector": {"matchLabels": labels}, "topologyKey": wk.ZONE}
        affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
        pods.append(_pod(f"zonal-affinity-{i}", cpu, memory, labels, affinity=affinity))
    anti_labels = {"app": "nginx"}
    for i in range(share):
        cpu, memory = shape()
        term = {"labelSelector": {"matchLabels": anti_labels}, "topologyKey": wk.HOSTNAME}
        affinity = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
        pods.append(_pod(f"hostname-anti-affinity-{i}", cpu, memory, dict(anti_labels), affinity=affinity))
    return pods


def heterogeneous_mix(count: int, seed: int = 42) -> list[dict[str, Any]]:
    """Plain pods of very different shapes: cpu-bound, memory-bound, balanced and tiny."""
    rng = random.Random(seed)
    shapes = (
        ("2000m", "1Gi"),
        ("3500m", "2Gi"),
        ("250m", "6Gi"),
        ("500m", "12Gi"),
        ("1000m", "4Gi"),
        ("100m", "128Mi"),
        ("1500m", "3Gi"),
        ("750m", "7Gi"),
    )
    pods = []
    for i in range(count):
        cpu, memory = rng.choice(shapes)
        pods.append(_pod(f"pod-{i}", cpu, memory, {"app": f"app-{i % 11}"}))
    return pods


def pods_for(mix: str, count: int, seed: int = 42) -> list[dict[str, Any]]:
    if mix == "karpenter":
        return karpenter_mix(count, seed)
    if mix == "heterogeneous":
        return heterogeneous_mix(count, seed)
    raise ValueError(f"unknown mix {mix!r}; choose one of {MIXES}")


__all__ = ["MIXES", "instance_types", "pods_for", "templates"]
