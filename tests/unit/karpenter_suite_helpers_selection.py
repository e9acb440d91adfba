"""Shared helpers for the ported instance-selection suites (``test_karpenter_suite_selection*.py``).

A tiny fake catalog stands in for Karpenter's ``fake.InstanceTypes``: each type has a capacity, the fake
provider's overhead (100m cpu, 10Mi memory kube-reserved) taken off for allocatable, labels, and
offerings priced by its resources as the fake prices them. ``provision`` runs what ``plan`` runs on the
new capacity: the scheduler, the cost solver and the CreateFleet truncation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from serverless_karpenter import solver
from serverless_karpenter.api import labels as wk
from serverless_karpenter.catalog import Offering
from serverless_karpenter.runtime import SchedulableInstanceType
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.scheduler import (
    NodePoolTemplate,
    Scheduler,
    SchedulingResult,
    truncate_instance_types,
)

GI = 1 << 30
MI = 1 << 20
FAKE_ZONES = ("test-zone-1", "test-zone-2", "test-zone-3")
# The fake provider's per-type overhead (kube-reserved only).
FAKE_OVERHEAD = {resources.CPU: 100, resources.MEMORY: 10 * MI}


def fake_price(cpu_millis: int, memory_bytes: int) -> float:
    """The fake provider's price: 0.1 per vCPU plus 0.1 per 10^9 bytes of memory."""
    return 0.1 * cpu_millis / 1000 + 0.1 * memory_bytes / 1e9


def fake_type(
    name: str,
    *,
    cpu: str = "4",
    memory: str = "4Gi",
    pods: int = 5,
    arch: str = "amd64",
    os: str = "linux",
    offerings: Iterable[tuple[str, str, float]] | None = None,
    labels: Mapping[str, str] | None = None,
    extended: Mapping[str, str] | None = None,
) -> SchedulableInstanceType:
    """A fake instance type. ``offerings`` are (capacity type, zone, price); by default the fake's five
    (spot in zones 1-2, on-demand in zones 1-3) at the price of its resources."""
    capacity = resources.merge(
        resources.parse_list({resources.CPU: cpu, resources.MEMORY: memory, **(extended or {})}),
        {resources.PODS: pods},
    )
    price = fake_price(capacity[resources.CPU], capacity[resources.MEMORY])
    if offerings is None:
        offerings = [
            (wk.CAPACITY_TYPE_SPOT, "test-zone-1", price),
            (wk.CAPACITY_TYPE_SPOT, "test-zone-2", price),
            (wk.CAPACITY_TYPE_ON_DEMAND, "test-zone-1", price),
            (wk.CAPACITY_TYPE_ON_DEMAND, "test-zone-2", price),
            (wk.CAPACITY_TYPE_ON_DEMAND, "test-zone-3", price),
        ]
    allocatable = resources.subtract(capacity, FAKE_OVERHEAD)
    return SchedulableInstanceType(
        name,
        allocatable,
        capacity,
        {wk.INSTANCE_TYPE: name, wk.ARCH: arch, wk.OS: os, **(labels or {})},
        [Offering(zone, ct, p, True) for ct, zone, p in offerings],
    )


def assorted_types(
    cpus: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
    memories_gi: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128),
) -> list[SchedulableInstanceType]:
    """``fake.InstanceTypesAssorted``: one type per cpu x memory x zone x capacity type x OS x arch, each
    with its single offering."""
    out = []
    for cpu in cpus:
        for mem in memories_gi:
            price = fake_price(cpu * 1000, mem * GI)
            for zone in FAKE_ZONES:
                for ct in (wk.CAPACITY_TYPE_SPOT, wk.CAPACITY_TYPE_ON_DEMAND):
                    for os in ("linux", "windows"):
                        for arch in ("amd64", "arm64"):
                            out.append(
                                fake_type(
                                    f"{cpu}-cpu-{mem}-mem-{arch}-{os}-{zone}-{ct}",
                                    cpu=str(cpu),
                                    memory=f"{mem}Gi",
                                    arch=arch,
                                    os=os,
                                    offerings=[(ct, zone, price)],
                                )
                            )
    return out


def min_price(types: Iterable[SchedulableInstanceType]) -> float:
    return min(o.price for it in types for o in it.offerings)


def affinity(*expressions: tuple[str, str, Sequence[str]]) -> dict[str, Any]:
    """A required node affinity of one term with these (key, operator, values) expressions."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": k, "operator": op, "values": list(v)} for k, op, v in expressions
                        ]
                    }
                ]
            }
        }
    }


def req(key: str, operator: str, *values: str, min_values: int | None = None) -> dict[str, Any]:
    """A NodePool requirement."""
    out: dict[str, Any] = {"key": key, "operator": operator, "values": list(values)}
    if min_values is not None:
        out["minValues"] = min_values
    return out


def provision(pods: Sequence[Mapping[str, Any]], pools: Sequence[NodePoolTemplate]) -> SchedulingResult:
    """What ``simulate_provisioning`` does with the new capacity: schedule, repack for cost, truncate."""
    result = Scheduler(list(pools)).solve(pods)
    if result.new_nodeclaims:
        result, _ = solver.improve(result, pools, solver.default_budget(len(pods)), pods)
    return truncate_instance_types(result)


def offered(it: Any, *, zone: str | None = None, capacity_type: str | None = None) -> bool:
    """Whether the type has an available offering in ``zone`` with ``capacity_type`` (None: any)."""
    return any(
        o.available
        and (zone is None or o.zone == zone)
        and (capacity_type is None or o.capacity_type == capacity_type)
        for o in it.offerings
    )
