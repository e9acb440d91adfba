"""Karpenter's ``instance_selection_test.go`` (kubernetes-sigs/karpenter
``pkg/controllers/provisioning/scheduling``), It block by It block, in our words.

Each test names the Describe > It path it ports. The fake catalog (``karpenter_suite_helpers_selection``)
mirrors Karpenter's ``fake.InstanceTypesAssorted`` and hand-built ``fake.NewInstanceType`` types; the
pods go through what ``plan`` runs (scheduler, cost solver, CreateFleet truncation). The row per It block
is in docs/compat/instance-selection.md.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from typing import Any

import pytest
from serverless_karpenter.api import labels as wk
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling import scheduler as scheduler_module
from serverless_karpenter.scheduling.scheduler import SchedulingResult, choose_offering

from tests.builders import pod
from tests.unit.karpenter_suite_helpers_selection import (
    FAKE_OVERHEAD,
    affinity,
    assorted_types,
    fake_type,
    min_price,
    offered,
    provision,
    req,
)
from tests.unit.test_scheduling_constraints import pool

SPOT, ON_DEMAND = wk.CAPACITY_TYPE_SPOT, wk.CAPACITY_TYPE_ON_DEMAND
# The suite's BeforeEach NodePool: both capacity types, both architectures.
BASE_REQUIREMENTS = [
    req(wk.CAPACITY_TYPE, "In", SPOT, ON_DEMAND),
    req(wk.ARCH, "In", "arm64", "amd64"),
]
ASSORTED = assorted_types()


def _shuffled(types: Sequence[Any], seed: int = 1) -> list[Any]:
    # Karpenter shuffles the instance types so that every step must sort by price itself.
    out = list(types)
    random.Random(seed).shuffle(out)
    return out


def _bare_pod(name: str = "p", **spec: Any) -> dict[str, Any]:
    """``test.UnschedulablePod()``: no resource requests."""
    return pod(name, cpu=None, memory=None, **spec)


# -- should schedule on one of the cheapest instances (...) -------------------------------------------

# (It suffix, NodePool requirements (None: the suite's), pod node affinity, checks on every launch
# option: ("label", key, value) or ("offering", capacity type or None, zone or None)).
Check = tuple[str, str | None, str | None]
CHEAPEST: list[tuple[str, list[dict[str, Any]] | None, list[tuple[str, str, list[str]]], list[Check]]] = [
    ("", None, [], []),
    ("pod arch = amd64", None, [(wk.ARCH, "In", ["amd64"])], [("label", wk.ARCH, "amd64")]),
    ("pod arch = arm64", None, [(wk.ARCH, "In", ["arm64"])], [("label", wk.ARCH, "arm64")]),
    ("prov arch = amd64", [req(wk.ARCH, "In", "amd64")], [], [("label", wk.ARCH, "amd64")]),
    ("prov arch = arm64", [req(wk.ARCH, "In", "arm64")], [], [("label", wk.ARCH, "arm64")]),
    ("prov os = windows", [req(wk.OS, "In", "windows")], [], [("label", wk.OS, "windows")]),
    ("pod os = windows", None, [(wk.OS, "In", ["windows"])], [("label", wk.OS, "windows")]),
    ("pod os = linux", None, [(wk.OS, "In", ["linux"])], [("label", wk.OS, "linux")]),
    ("prov zone = test-zone-2", [req(wk.ZONE, "In", "test-zone-2")], [], [("offering", None, "test-zone-2")]),
    ("pod zone = test-zone-2", None, [(wk.ZONE, "In", ["test-zone-2"])], [("offering", None, "test-zone-2")]),
    ("prov ct = spot", [req(wk.CAPACITY_TYPE, "In", SPOT)], [], [("offering", SPOT, None)]),
    ("pod ct = spot", None, [(wk.CAPACITY_TYPE, "In", [SPOT])], [("offering", SPOT, None)]),
    (
        "prov ct = ondemand, prov zone = test-zone-1",
        [req(wk.CAPACITY_TYPE, "In", ON_DEMAND), req(wk.ZONE, "In", "test-zone-1")],
        [],
        [("offering", ON_DEMAND, "test-zone-1")],
    ),
    (
        "pod ct = spot, pod zone = test-zone-1",
        None,
        [(wk.CAPACITY_TYPE, "In", [SPOT]), (wk.ZONE, "In", ["test-zone-1"])],
        [("offering", SPOT, "test-zone-1")],
    ),
    (
        "prov ct = spot, pod zone = test-zone-2",
        [req(wk.CAPACITY_TYPE, "In", SPOT)],
        [(wk.ZONE, "In", ["test-zone-2"])],
        [("offering", SPOT, "test-zone-2")],
    ),
    (
        "prov ct = ondemand/test-zone-1/arm64/windows",
        [
            req(wk.ARCH, "In", "arm64"),
            req(wk.OS, "In", "windows"),
            req(wk.CAPACITY_TYPE, "In", ON_DEMAND),
            req(wk.ZONE, "In", "test-zone-1"),
        ],
        [],
        [("offering", ON_DEMAND, "test-zone-1"), ("label", wk.OS, "windows"), ("label", wk.ARCH, "arm64")],
    ),
    (
        "prov = spot/test-zone-2, pod = amd64/linux",
        [req(wk.ARCH, "In", "amd64"), req(wk.OS, "In", "linux")],
        [(wk.CAPACITY_TYPE, "In", [SPOT]), (wk.ZONE, "In", ["test-zone-2"])],
        [("offering", SPOT, "test-zone-2"), ("label", wk.OS, "linux"), ("label", wk.ARCH, "amd64")],
    ),
    (
        "pod ct = spot/test-zone-2/amd64/linux",
        None,
        [
            (wk.ARCH, "In", ["amd64"]),
            (wk.OS, "In", ["linux"]),
            (wk.CAPACITY_TYPE, "In", [SPOT]),
            (wk.ZONE, "In", ["test-zone-2"]),
        ],
        [("offering", SPOT, "test-zone-2"), ("label", wk.OS, "linux"), ("label", wk.ARCH, "amd64")],
    ),
]


@pytest.mark.parametrize(
    ("nodepool_requirements", "expressions", "checks"),
    [pytest.param(r, e, c, id=name or "plain") for name, r, e, c in CHEAPEST],
)
def test_schedules_on_one_of_the_cheapest_instances(
    nodepool_requirements: list[dict[str, Any]] | None,
    expressions: list[tuple[str, str, list[str]]],
    checks: list[Check],
) -> None:
    """Instance Type Selection > should schedule on one of the cheapest instances (<case>): the node is
    at the catalog's lowest price, and every instance type handed to CreateFleet meets the constraints."""
    types = _shuffled(ASSORTED)
    np = pool("default", nodepool_requirements or BASE_REQUIREMENTS, types=types)
    spec: dict[str, Any] = {"affinity": affinity(*expressions)} if expressions else {}
    result = provision([_bare_pod(**spec)], [np])
    [claim] = result.new_nodeclaims
    assert claim.pods == ["default/p"]
    chosen = choose_offering(claim)
    assert chosen is not None and chosen.price == pytest.approx(min_price(ASSORTED))
    assert claim.instance_types
    for it in claim.instance_types:
        for kind, key, value in checks:
            if kind == "label":
                assert key is not None and it.labels[key] == value, (it.name, key, value)
            else:
                assert offered(it, capacity_type=key, zone=value), (it.name, key, value)


# -- should not schedule if no instance type matches selector ------------------------------------------


def _without_arm_in_zone_2(types: Sequence[Any]) -> list[Any]:
    return [it for it in types if not (offered(it, zone="test-zone-2") and it.labels[wk.ARCH] != "amd64")]


def test_no_instance_type_matches_pod_arch_arm() -> None:
    """Instance Type Selection > should not schedule if no instance type matches selector (pod arch = arm)"""
    types = [it for it in ASSORTED if it.labels[wk.ARCH] == "amd64"]
    np = pool("default", BASE_REQUIREMENTS, types=types)
    result = provision([_bare_pod(affinity=affinity((wk.ARCH, "In", ["arm64"])))], [np])
    assert result.new_nodeclaims == []
    assert "default/p" in result.unschedulable


def test_no_instance_type_matches_pod_arch_arm_in_zone_2() -> None:
    """Instance Type Selection > should not schedule if no instance type matches selector (pod arch = arm
    zone=test-zone-2)"""
    np = pool("default", BASE_REQUIREMENTS, types=_without_arm_in_zone_2(ASSORTED))
    p = _bare_pod(affinity=affinity((wk.ARCH, "In", ["arm64"]), (wk.ZONE, "In", ["test-zone-2"])))
    result = provision([p], [np])
    assert result.new_nodeclaims == []
    assert "default/p" in result.unschedulable


def test_no_instance_type_matches_nodepool_arch_arm_and_pod_zone_2() -> None:
    """Instance Type Selection > should not schedule if no instance type matches selector (prov arch = arm
    / pod zone=test-zone-2)"""
    np = pool("default", [req(wk.ARCH, "In", "arm64")], types=_without_arm_in_zone_2(ASSORTED))
    result = provision([_bare_pod(affinity=affinity((wk.ZONE, "In", ["test-zone-2"])))], [np])
    assert result.new_nodeclaims == []
    assert "default/p" in result.unschedulable


# -- resources and prices ------------------------------------------------------------------------------


def test_schedules_on_an_instance_with_enough_resources() -> None:
    """Instance Type Selection > should schedule on an instance with enough resources: three equal pods
    share one node, every launch option holds them plus its overhead, and scheduling leaves the instance
    types' capacity and allocatable as they were."""
    types = _shuffled(ASSORTED)
    before = {
        it.name: (copy.deepcopy(dict(it.capacity)), copy.deepcopy(dict(it.allocatable))) for it in types
    }
    np = pool("default", BASE_REQUIREMENTS, types=types)
    for cpu in (0.1, 1.0, 2, 2.5, 4, 8, 16):
        for mem in (0.1, 1.0, 2, 4, 8, 16, 32):
            pods = [pod(f"p{i}", cpu=f"{cpu:0.1f}", memory=f"{mem:0.1f}Gi") for i in range(3)]
            result = provision(pods, [np])
            [claim] = result.new_nodeclaims
            assert sorted(claim.pods) == ["default/p0", "default/p1", "default/p2"]
            total = resources.merge(
                *(resources.parse_list({"cpu": f"{cpu:0.1f}", "memory": f"{mem:0.1f}Gi"}),) * 3
            )
            for it in claim.instance_types:
                reserved = resources.merge(total, FAKE_OVERHEAD)
                assert reserved[resources.CPU] < it.capacity[resources.CPU], (cpu, mem, it.name)
                assert reserved[resources.MEMORY] < it.capacity[resources.MEMORY], (cpu, mem, it.name)
    for it in types:
        assert (dict(it.capacity), dict(it.allocatable)) == before[it.name], it.name


def test_cheaper_on_demand_wins_over_spot_price_ordering() -> None:
    """Instance Type Selection > should schedule on cheaper on-demand instance even when spot price
    ordering would place other instance types first"""
    types = [
        fake_type(
            "test-instance1",
            cpu="1",
            memory="1Gi",
            offerings=[(ON_DEMAND, "test-zone-1a", 1.0), (SPOT, "test-zone-1a", 0.2)],
        ),
        fake_type(
            "test-instance2",
            cpu="1",
            memory="1Gi",
            offerings=[(ON_DEMAND, "test-zone-1a", 1.3), (SPOT, "test-zone-1a", 0.1)],
        ),
    ]
    np = pool("default", [req(wk.CAPACITY_TYPE, "In", ON_DEMAND)], types=types)
    [claim] = provision([_bare_pod()], [np]).new_nodeclaims
    chosen = choose_offering(claim)
    assert chosen is not None and chosen.instance_type == "test-instance1"
    assert chosen.capacity_type == ON_DEMAND


# -- MinValues -----------------------------------------------------------------------------------------

GENERATION = "karpenter/numerical-value"
TYPES_1_2 = ("instance-type-1", "instance-type-2")


def _spot_type(name: str, size: str, price: float, generation: str | None = None, arch: str = "arm64") -> Any:
    """The MinValues context's types: ``size`` vCPU and ``size`` GiB, one spot offering."""
    return fake_type(
        name,
        cpu=size,
        memory=f"{size}Gi",
        arch=arch,
        offerings=[(SPOT, "test-zone-1-spot", price)],
        labels={GENERATION: generation} if generation is not None else None,
    )


def _two_small_pods(**spec: Any) -> list[dict[str, Any]]:
    """Two pods that fit together only on the larger types."""
    return [pod(f"p{i}", cpu="0.9", memory="0.9Gi", **spec) for i in (1, 2)]


def _expect_two_nodes_each_flexible(
    pools: Sequence[Any], pods: list[dict[str, Any]], at_least: int = 2
) -> None:
    result = provision(pods, pools)
    assert not result.unschedulable, result.unschedulable
    claims = result.new_nodeclaims
    assert len(claims) == 2 and all(len(c.pods) == 1 for c in claims), [c.pods for c in claims]
    assert all(len(c.instance_types) >= 2 for c in claims), [
        [it.name for it in c.instance_types] for c in claims
    ]


def _expect_not_scheduled(pools: Sequence[Any], pods: list[dict[str, Any]]) -> SchedulingResult:
    result = provision(pods, pools)
    assert result.new_nodeclaims == []
    for p in pods:
        assert f"default/{p['metadata']['name']}" in result.unschedulable
    return result


def test_min_values_from_instance_type_requirements() -> None:
    """Instance Type Selection > MinValues > should schedule respecting the minValues from instance-type
    requirements"""
    types = [_spot_type("instance-type-1", "1", 0.52), _spot_type("instance-type-2", "4", 1.0)]
    np = pool(
        "default",
        [req(wk.INSTANCE_TYPE, "In", "instance-type-1", "instance-type-2", min_values=2)],
        types=types,
    )
    _expect_two_nodes_each_flexible([np], _two_small_pods())


def test_min_values_with_gt_operator() -> None:
    """Instance Type Selection > MinValues > should schedule respecting the minValues in Gt operator"""
    types = [
        _spot_type("instance-type-1", "1", 0.52, "2"),
        _spot_type("instance-type-2", "1", 1.0, "3"),
        _spot_type("instance-type-3", "4", 1.2, "4"),
    ]
    np = pool("default", [req(GENERATION, "Gt", "2", min_values=2)], types=types)
    _expect_two_nodes_each_flexible([np], _two_small_pods())


def test_min_values_with_gt_operator_unsatisfied_fails() -> None:
    """Instance Type Selection > MinValues > scheduler should fail if the minValues in Gt operator is not
    satisfied: the pods' Gt leaves one generation where the NodePool asks for two."""
    types = [_spot_type("instance-type-1", "1", 0.52, "2"), _spot_type("instance-type-2", "4", 1.0, "3")]
    np = pool("default", [req(GENERATION, "Exists", min_values=2)], types=types)
    result = _expect_not_scheduled([np], _two_small_pods(affinity=affinity((GENERATION, "Gt", ["2"]))))
    for reasons in result.unschedulable.values():
        assert "minValues requirement is not met for label(s)" in reasons["default"]
        assert GENERATION in reasons["default"]


def test_min_values_with_lt_operator() -> None:
    """Instance Type Selection > MinValues > should schedule respecting the minValues in Lt operator"""
    types = [
        _spot_type("instance-type-1", "1", 0.52, "2"),
        _spot_type("instance-type-2", "2", 1.0, "3"),
        _spot_type("instance-type-3", "4", 1.2, "4"),
    ]
    np = pool("default", [req(GENERATION, "Lt", "4", min_values=2)], types=types)
    _expect_two_nodes_each_flexible([np], _two_small_pods())


def test_min_values_with_lt_operator_unsatisfied_fails() -> None:
    """Instance Type Selection > MinValues > scheduler should fail if the minValues in Lt operator is not
    satisfied"""
    types = [_spot_type("instance-type-1", "2", 0.52, "2"), _spot_type("instance-type-2", "4", 1.2, "4")]
    np = pool("default", [req(GENERATION, "Lt", "4", min_values=2)], types=types)
    _expect_not_scheduled([np], _two_small_pods())


def test_min_values_max_of_in_and_not_in() -> None:
    """Instance Type Selection > MinValues > should schedule considering the max of the minValues of In and
    NotIn operators in the instance-type requirements"""
    types = [
        _spot_type("instance-type-1", "1", 0.52),
        _spot_type("instance-type-2", "2", 1.0),
        _spot_type("instance-type-3", "4", 1.2),
    ]
    np = pool(
        "default",
        [
            req(
                wk.INSTANCE_TYPE, "In", "instance-type-1", "instance-type-2", "instance-type-3", min_values=1
            ),
            req(wk.INSTANCE_TYPE, "NotIn", "instance-type-3", min_values=2),
        ],
        types=types,
    )
    _expect_two_nodes_each_flexible([np], _two_small_pods())


def test_min_values_max_of_gt_and_lt() -> None:
    """Instance Type Selection > MinValues > should schedule considering the max of the minValues of Gt and
    Lt operators."""
    types = [
        _spot_type("instance-type-1", "1", 0.52, "2"),
        _spot_type("instance-type-2", "1", 1.0, "3"),
        _spot_type("instance-type-3", "4", 1.2, "4"),
        _spot_type("instance-type-4", "4", 1.2, "5"),
    ]
    np = pool(
        "default",
        [req(GENERATION, "Gt", "2", min_values=1), req(GENERATION, "Lt", "5", min_values=2)],
        types=types,
    )
    _expect_two_nodes_each_flexible([np], _two_small_pods())


def test_min_values_more_than_the_types_available_fails() -> None:
    """Instance Type Selection > MinValues > schedule should fail if minimum number of InstanceTypes is not
    met as per the minValues in the requirement"""
    np = pool("default", [req(wk.INSTANCE_TYPE, "Exists", min_values=11)], types=_shuffled(ASSORTED)[:10])
    _expect_not_scheduled([np], [_bare_pod()])


def test_min_values_unmet_after_truncation_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """Instance Type Selection > MinValues > schedule should fail if minimum number of InstanceTypes is not
    met as per the minValues in the requirement after truncation (CreateFleet's limit set to 1)"""
    monkeypatch.setattr(scheduler_module, "MAX_INSTANCE_TYPES", 1)
    types = [_spot_type("instance-type-1", "1", 0.52), _spot_type("instance-type-2", "4", 1.0)]
    np = pool(
        "default",
        [req(wk.INSTANCE_TYPE, "In", "instance-type-1", "instance-type-2", min_values=2)],
        types=types,
    )
    result = _expect_not_scheduled([np], _two_small_pods())
    assert all("minValues" in reasons["default"] for reasons in result.unschedulable.values())


def test_min_values_max_across_operators_on_one_key() -> None:
    """Instance Type Selection > MinValues > should schedule and pick the max of minValues of InstanceTypes
    if multiple operators are used for the same requirement."""
    types = [_spot_type("instance-type-1", "1", 0.52), _spot_type("instance-type-2", "4", 1.0)]
    np = pool(
        "default",
        [
            req(wk.INSTANCE_TYPE, "Exists", min_values=1),
            req(wk.INSTANCE_TYPE, "In", *TYPES_1_2, min_values=2),
        ],
        types=types,
    )
    _expect_two_nodes_each_flexible([np], _two_small_pods())


def test_min_values_on_several_keys() -> None:
    """Instance Type Selection > MinValues > should schedule and respect multiple requirement keys with
    minValues"""
    types = [_spot_type("instance-type-1", "1", 0.52), _spot_type("instance-type-2", "4", 1.0, arch="amd64")]
    np = pool(
        "default",
        [
            req(wk.ARCH, "Exists", min_values=2),
            req(wk.INSTANCE_TYPE, "In", *TYPES_1_2, min_values=1),
        ],
        types=types,
    )
    _expect_two_nodes_each_flexible([np], _two_small_pods())
