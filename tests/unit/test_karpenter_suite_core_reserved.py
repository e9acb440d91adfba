"""Ports of Karpenter's scheduling suite (``pkg/controllers/provisioning/scheduling/suite_test.go``):
``Reserved Instance Types`` and ``Dynamic Resource Allocation (DRA)``.

Karpenter's fake reserved offerings hold a count (``ReservationCapacity``, our ``reservation_capacity``);
the scheduler never plans more NodeClaims on a reservation than it has left, and a NodeClaim that could
launch into several reservations holds all of them. Each test asserts what Karpenter's first scheduling
pass plans."""

from __future__ import annotations

from typing import Any

import pytest
from serverless_karpenter.api import labels as wk
from serverless_karpenter.catalog import Offering

from tests.builders import owner_reference
from tests.unit.karpenter_suite_helpers_core import (
    GI,
    FakeType,
    claim_for,
    daemonset,
    default_offerings,
    node_affinity,
    node_labels,
    nodepool,
    not_scheduled,
    schedule,
    scheduled,
    upod,
)


def reserved(it: FakeType, reservation: str, zone: str = "test-zone-1", room: int = 1) -> FakeType:
    """``it`` with one more offering: a capacity reservation in ``zone`` with ``room`` instances left,
    nearly free."""
    offering = Offering(
        zone,
        wk.CAPACITY_TYPE_RESERVED,
        it.price / 100_000,
        True,
        reservation_id=reservation,
        reservation_capacity=room,
    )
    return FakeType(
        it.name, it.cpu, it.memory, it.pods, offering_list=(*default_offerings(it.price), offering)
    )


LARGE = FakeType("large-instance-type", cpu=6, memory=6 * GI)
MEDIUM = FakeType("medium-instance-type", cpu=3, memory=3 * GI)
SMALL = FakeType("small-instance-type", cpu=2, memory=2 * GI)
# The Describe's catalog: medium and small each have a reservation (capacity 1) in test-zone-1.
TYPES = (LARGE, reserved(MEDIUM, "r-medium-instance-type"), reserved(SMALL, "r-small-instance-type"))


def anti_hostname(name: str, *required: tuple[str, str, list[str]], **fields: Any) -> dict[str, Any]:
    affinity = node_affinity(list(required))
    affinity["podAntiAffinity"] = {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "test"}}, "topologyKey": wk.HOSTNAME}
        ]
    }
    return upod(name, labels={"app": "test"}, affinity=affinity, **fields)


def reserved_node(result: Any, p: dict[str, Any], reservation: str, instance_type: str) -> None:
    labels = node_labels(result, p)
    assert labels[wk.CAPACITY_TYPE] == wk.CAPACITY_TYPE_RESERVED
    assert labels[wk.INSTANCE_TYPE] == instance_type
    chosen = next(o for o in claim_for(result, p).instance_types if o.name == instance_type)
    assert any(o.reservation_id == reservation for o in chosen.offerings)


def test_reserved_offerings_are_used_before_falling_back_to_spot_or_on_demand() -> None:
    """Reserved Instance Types > shouldn't fallback to on-demand or spot when compatible reserved offerings
    are available (first pass: one pod, on the small reservation; the claim holds both reservations)"""
    pods = [upod(f"p{i}", "1800m") for i in range(3)]
    result = schedule(pods, [nodepool(types=TYPES)])
    placed = [p for p in pods if not not_scheduled(result, p)]
    assert len(placed) == 1
    reserved_node(result, placed[0], "r-small-instance-type", "small-instance-type")


def test_a_reservation_shared_by_two_nodepools_is_counted_once() -> None:
    """Reserved Instance Types > should correctly track reservations shared across nodepools"""
    pools = [nodepool("np-1", types=TYPES), nodepool("np-2", types=TYPES)]
    pods = [
        anti_hostname(
            f"p{i}", (wk.INSTANCE_TYPE, "In", ["small-instance-type"]), (wk.NODEPOOL, "In", [f"np-{i + 1}"])
        )
        for i in range(2)
    ]
    result = schedule(pods, pools)
    placed = [p for p in pods if not not_scheduled(result, p)]
    assert len(placed) == 1
    reserved_node(result, placed[0], "r-small-instance-type", "small-instance-type")


def test_distinct_reservations_of_two_nodepools_are_both_used() -> None:
    """Reserved Instance Types > should correctly track reservations for multiple nodepools with distinct
    reservations for the same instance pool"""
    other = (LARGE, reserved(MEDIUM, "r-medium-instance-type"), reserved(SMALL, "r-small-instance-type-np-2"))
    pools = [nodepool("np-1", types=TYPES), nodepool("np-2", types=other)]
    pods = [
        anti_hostname(
            f"p{i}", (wk.INSTANCE_TYPE, "In", ["small-instance-type"]), (wk.NODEPOOL, "In", [f"np-{i + 1}"])
        )
        for i in range(2)
    ]
    result = schedule(pods, pools)
    for p in pods:
        assert node_labels(result, p)[wk.CAPACITY_TYPE] == wk.CAPACITY_TYPE_RESERVED
    assert {claim_for(result, p).nodepool for p in pods} == {"np-1", "np-2"}


def test_two_reservations_of_one_type_hold_as_many_nodes_as_they_have_room() -> None:
    """Reserved Instance Types > should correctly track multiple reservations for the same instance pool
    (first pass: the two reservations hold 1 + 2 instances, yet only two pods are planned)"""
    small = reserved(SMALL, "r-small-instance-type")
    second = Offering(
        "test-zone-1",
        wk.CAPACITY_TYPE_RESERVED,
        SMALL.price / 100_000,
        True,
        reservation_id="r-small-2",
        reservation_capacity=2,
    )
    small = FakeType(
        small.name, small.cpu, small.memory, small.pods, offering_list=(*small.offerings, second)
    )
    pods = [anti_hostname(f"p{i}", (wk.INSTANCE_TYPE, "In", ["small-instance-type"])) for i in range(4)]
    result = schedule(pods, [nodepool(types=(LARGE, small))])
    placed = [p for p in pods if not not_scheduled(result, p)]
    assert len(placed) == 2
    for p in placed:
        assert node_labels(result, p)[wk.CAPACITY_TYPE] == wk.CAPACITY_TYPE_RESERVED


def test_a_reserved_offering_in_the_heavier_nodepool_defers_rather_than_falls_back() -> None:
    """Reserved Instance Types > shouldn't fallback to a lower weight NodePool if a reserved offering is
    available (first pass: one pod, reserved, in the heavy NodePool)"""
    fallback_types = (LARGE, reserved(MEDIUM, "r-medium-instance-type"), reserved(SMALL, "r-small-fallback"))
    pools = [
        nodepool("heavy", types=TYPES, weight=100),
        nodepool("fallback", types=fallback_types, weight=50),
    ]
    pods = [anti_hostname(f"p{i}", (wk.INSTANCE_TYPE, "In", ["small-instance-type"])) for i in range(2)]
    result = schedule(pods, pools)
    placed = [p for p in pods if not not_scheduled(result, p)]
    assert len(placed) == 1 and claim_for(result, placed[0]).nodepool == "heavy"
    reserved_node(result, placed[0], "r-small-instance-type", "small-instance-type")


def test_a_reservation_shortfall_does_not_relax_preferences() -> None:
    """Reserved Instance Types > shouldn't relax preferences when a pod fails to schedule due to a reserved
    offering error (first pass: one pod in the preferred NodePool; the other waits, unrelaxed)"""
    other = (LARGE, reserved(MEDIUM, "r-medium-instance-type"), reserved(SMALL, "r-small-np-2"))
    pools = [nodepool("np-1", types=TYPES), nodepool("np-2", types=other)]
    preference = [
        {
            "weight": 1,
            "preference": {"matchExpressions": [{"key": wk.NODEPOOL, "operator": "In", "values": ["np-1"]}]},
        }
    ]
    pods = []
    for i in range(2):
        p = anti_hostname(f"p{i}", (wk.INSTANCE_TYPE, "In", ["small-instance-type"]))
        p["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = preference
        pods.append(p)
    result = schedule(pods, pools)
    placed = [p for p in pods if not not_scheduled(result, p)]
    assert len(placed) == 1 and claim_for(result, placed[0]).nodepool == "np-1"


def test_pods_with_zone_affinity_share_one_reserved_node() -> None:
    """Reserved Instance Types > should handle multiple pods on reserved nodes"""
    affinity = node_affinity(
        [
            (wk.INSTANCE_TYPE, "In", ["small-instance-type"]),
            (wk.NODEPOOL, "In", ["np-1"]),
            (wk.CAPACITY_TYPE, "In", [wk.CAPACITY_TYPE_RESERVED]),
            (wk.ZONE, "In", ["test-zone-1"]),
        ]
    )
    affinity["podAffinity"] = {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "test"}}, "topologyKey": wk.ZONE}
        ]
    }
    pods = [upod(f"p{i}", labels={"app": "test"}, affinity=affinity) for i in range(2)]
    result = schedule(pods, [nodepool("np-1", types=TYPES)])
    assert scheduled(result, pods[0]) == scheduled(result, pods[1])
    reserved_node(result, pods[0], "r-small-instance-type", "small-instance-type")


# -- Dynamic Resource Allocation (DRA) --------------------------------------------------------------

CLAIM = [{"name": "gpu-claim"}]


def dra_pod(name: str, container_claims: bool, init_claims: bool) -> dict[str, Any]:
    p = upod(name, "1", "1Gi")
    if container_claims:
        p["spec"]["containers"][0]["resources"]["claims"] = CLAIM
    if init_claims:
        p["spec"]["initContainers"] = [
            {"name": "init", "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "claims": CLAIM}}
        ]
    if container_claims or init_claims:
        p["spec"]["resourceClaims"] = [{"name": "gpu-claim", "resourceClaimName": "gpu"}]
    return p


@pytest.mark.parametrize(
    ("container_claims", "init_claims"),
    [
        pytest.param(True, False, id="container with resource claims"),
        pytest.param(False, True, id="init container with resource claims"),
        pytest.param(True, True, id="pod with both container and init container resource claims"),
        pytest.param(False, False, id="non-DRA pod without resource claims"),
    ],
)
def test_dra_pods_get_no_nodeclaim(container_claims: bool, init_claims: bool) -> None:
    """Dynamic Resource Allocation (DRA) > should handle DRA pods correctly"""
    p = dra_pod("p", container_claims, init_claims)
    result = schedule([p], [nodepool(requirements=[])])
    if container_claims or init_claims:
        assert not result.new_nodeclaims and not_scheduled(result, p)
    else:
        assert len(result.new_nodeclaims) == 1 and not result.unschedulable


def test_daemonset_dra_requests_are_ignored_by_default() -> None:
    """Dynamic Resource Allocation (DRA) > should handle DaemonSet pods with DRA requirements based on
    IgnoreDRARequests flag value (the default, true: only the app pod sizes the node)"""
    ds_template = upod("dra-daemon", "3")
    ds_template["spec"]["containers"][0]["resources"]["claims"] = CLAIM
    ds_template["spec"]["resourceClaims"] = [{"name": "gpu-claim", "resourceClaimName": "gpu"}]
    ds_template["metadata"]["ownerReferences"] = [owner_reference("DaemonSet", "dra-daemon")]
    app = upod("app", "1")
    result = schedule([app], [nodepool(requirements=[], daemonsets=[daemonset("dra-daemon", ds_template)])])
    # Only the app pod's cpu: the 2-cpu type (1.9 allocatable) takes it.
    assert claim_for(result, app).requests.get("cpu") == 1000
    assert node_labels(result, app)[wk.INSTANCE_TYPE] == "small-instance-type"
