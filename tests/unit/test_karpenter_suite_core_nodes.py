"""Ports of Karpenter's scheduling suite (``pkg/controllers/provisioning/scheduling/suite_test.go``):
``Existing Nodes``, ``No Pre-Binding``, ``Deleting Nodes`` and ``NodePool requirements instance
filtering``. Cluster objects go through what ``plan`` and the provisioner use: ``classify`` (pending pods,
including those of nodes being deleted) and ``existing_capacity``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.scheduling.inputs import classify

from tests import builders
from tests.unit.karpenter_suite_helpers_core import (
    ALL_CAPACITY_TYPES,
    DEFAULT_TYPES,
    VENDOR_A,
    bind,
    capacity,
    daemonset,
    launch,
    node_affinity,
    node_labels,
    node_object,
    nodepool,
    not_scheduled,
    schedule,
    scheduled,
    upod,
)

DEFAULT = DEFAULT_TYPES[0]
GPU_TYPE = DEFAULT_TYPES[2]


def unowned_node(name: str, cpu: str, memory: str) -> dict[str, Any]:
    """test.Node: a node Karpenter did not launch (no NodePool label), zone us-west-2a."""
    return builders.node(name, cpu, memory, pods="110", labels={wk.INITIALIZED: "true"})


# -- Existing Nodes ---------------------------------------------------------------------------------


def test_a_pod_goes_to_an_existing_node_karpenter_does_not_own() -> None:
    """Existing Nodes > should schedule a pod to an existing node unowned by Karpenter"""
    p = upod("p", "10m")
    result = schedule([p], existing=capacity([unowned_node("n1", "10", "10Gi")]))
    assert scheduled(result, p) == "n1"


def test_many_pods_go_to_an_existing_node_karpenter_does_not_own() -> None:
    """Existing Nodes > should schedule multiple pods to an existing node unowned by Karpenter"""
    pods = [upod(f"p{i}", "10m") for i in range(100)]
    result = schedule(pods, existing=capacity([unowned_node("n1", "10", "100Gi")]))
    assert all(scheduled(result, p) == "n1" for p in pods)


def test_initialized_nodes_are_tried_before_uninitialized_ones() -> None:
    """Existing Nodes > should order initialized nodes for scheduling uninitialized nodes"""
    nodes = [node_object(f"node-{i}", DEFAULT, initialized=(i == 57)) for i in range(100)]
    p = upod("p")
    assert scheduled(schedule([p], existing=capacity(nodes)), p) == "node-57"


def test_a_pod_the_node_cannot_take_waits_for_a_nodepool() -> None:
    """Existing Nodes > should consider a pod incompatible with an existing node but compatible with
    NodePool"""
    node = unowned_node("n1", "10", "10Gi")  # zone us-west-2a
    p = upod("p", affinity=node_affinity([(wk.ZONE, "In", ["test-zone-1"])]))
    assert not_scheduled(schedule([p], [], existing=capacity([node])), p)
    assert scheduled(schedule([p], existing=capacity([node])), p).startswith("new:")


def test_daemonset_overhead_not_strictly_compatible_with_a_node_is_not_subtracted() -> None:
    """Existing Nodes > Daemonsets > should not subtract daemonset overhead that is not strictly compatible
    with an existing node"""
    ds = daemonset(
        "ds", upod("t", "100", "100Gi", affinity=node_affinity([(wk.ZONE, "In", ["test-zone-1"])]))
    )
    pools = [nodepool(daemonsets=[ds])]
    node = builders.node("n1", "1", "1Gi", pods="110", labels={wk.INITIALIZED: "true"})
    del node["metadata"]["labels"][wk.ZONE]  # no zone: the DaemonSet may or may not run there
    first = upod("first", "1", "1Gi")
    result = schedule([first], pools, existing=capacity([node], daemonsets=[ds]))
    assert scheduled(result, first) == "n1"
    second = upod("second", "1", "1Gi")
    result = schedule([second], pools, existing=capacity([node], [bind(first, "n1")], daemonsets=[ds]))
    assert not_scheduled(result, second)


# -- No Pre-Binding ---------------------------------------------------------------------------------


def test_a_launched_node_takes_the_next_pod_before_any_pod_is_bound() -> None:
    """No Pre-Binding > should not bind pods to nodes"""
    first = upod("first", containers=[{"name": "a", "resources": {"limits": {"cpu": "10m"}}}])
    nodes, _ = launch(schedule([first]), [first])
    second = upod("second", containers=[{"name": "a", "resources": {"limits": {"cpu": "10m"}}}])
    result = schedule([second], existing=capacity(nodes))  # first was never bound
    assert scheduled(result, second) == "node-0" and not result.new_nodeclaims


def test_extended_resources_zeroed_by_kubelet_at_startup_are_still_expected() -> None:
    """No Pre-Binding > should handle resource zeroing of extended resources by kubelet (the node's
    NodeClaim, as in Karpenter, says what it will have once initialized)"""
    node = node_object("node-0", GPU_TYPE)
    node["spec"]["providerID"] = "aws:///test-zone-1/i-0123456789abcdef0"
    node["status"]["capacity"] = {VENDOR_A: "0"}
    node["status"]["allocatable"] = {**node["status"]["allocatable"], VENDOR_A: "0"}
    record = NodeClaimRecord(
        name="default-abcde",
        nodepool="default",
        nodeclass="default",
        state=NodeClaimState.REGISTERED,
        provider_id=node["spec"]["providerID"],
        node_name="node-0",
        instance_type=GPU_TYPE.name,
        allocatable=dict(GPU_TYPE.allocatable),
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    p = upod("p", containers=[{"name": "a", "resources": {"limits": {"cpu": "10m", VENDOR_A: "1"}}}])
    assert scheduled(schedule([p], existing=capacity([node], records=[record])), p) == "node-0"


def test_extended_resources_a_node_reports_as_zero_are_not_assumed_without_a_nodeclaim() -> None:
    """The other side: a node we hold no NodeClaim for is taken at its word."""
    node = node_object("node-0", GPU_TYPE)
    node["status"]["allocatable"] = {**node["status"]["allocatable"], VENDOR_A: "0"}
    p = upod("p", containers=[{"name": "a", "resources": {"limits": {"cpu": "10m", VENDOR_A: "1"}}}])
    assert scheduled(schedule([p], existing=capacity([node])), p).startswith("new:")


def test_self_zone_affinity_follows_the_in_flight_node_of_an_unbound_peer() -> None:
    """No Pre-Binding > should respect self pod affinity without pod binding (zone)"""
    labels = {"security": "s2"}
    affinity = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": labels}, "topologyKey": wk.ZONE}
            ]
        }
    }
    pods = [upod(f"p{i}", labels=labels, affinity=affinity) for i in range(2)]
    nodes, _ = launch(schedule([pods[0]]), [pods[0]])
    result = schedule([pods[1]], existing=capacity(nodes))  # pods[0] is not bound
    assert scheduled(result, pods[1]) == "node-0" and not result.new_nodeclaims


# -- Deleting Nodes ---------------------------------------------------------------------------------


def deleting_cluster(p: dict[str, Any], *extra: dict[str, Any]) -> Any:
    """The pod bound to a small node that is being deleted, as plan's manifests would give them."""
    node = {"kind": "Node", **node_object("node-0", DEFAULT_TYPES[1], deleting=True)}
    return classify([node, {"kind": "Pod", **bind(p, "node-0")}, *extra])


def small_pod(name: str = "p", **fields: Any) -> dict[str, Any]:
    return upod(name, memory="100M", **fields)


def test_active_pods_of_a_deleting_node_are_rescheduled() -> None:
    """Deleting Nodes > should re-schedule pods from a deleting node when pods are active"""
    inputs = deleting_cluster(small_pod())
    assert [p["metadata"]["name"] for p in inputs.pending] == ["p"]
    result = schedule(inputs.pending, existing=capacity(inputs.nodes, inputs.bound))
    assert node_labels(result, inputs.pending[0])[wk.INSTANCE_TYPE] == "small-instance-type"


def terminating(p: dict[str, Any]) -> dict[str, Any]:
    p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return p


def test_terminating_pods_of_a_deleting_node_are_not_rescheduled() -> None:
    """Deleting Nodes > should not re-schedule pods from a deleting node when pods are not active"""
    assert deleting_cluster(terminating(small_pod())).pending == []


def test_daemonset_pods_of_a_deleting_node_are_not_rescheduled() -> None:
    """Deleting Nodes > should not re-schedule pods from a deleting node when pods are owned by a
    DaemonSet"""
    p = terminating(small_pod())
    p["metadata"]["ownerReferences"] = [builders.owner_reference("DaemonSet")]
    assert deleting_cluster(p).pending == []


def test_terminating_replicaset_pods_of_a_deleting_node_are_not_rescheduled() -> None:
    """Deleting Nodes > should not reschedule pods from a deleting node when pods are not active and they
    are owned by a ReplicaSet"""
    p = terminating(small_pod())
    p["metadata"]["ownerReferences"] = [builders.owner_reference("ReplicaSet")]
    assert deleting_cluster(p).pending == []


def test_terminating_statefulset_pods_of_a_deleting_node_are_rescheduled() -> None:
    """Deleting Nodes > should reschedule pods from a deleting node when pods are not active and they are
    owned by a StatefulSet"""
    p = terminating(small_pod())
    p["metadata"]["ownerReferences"] = [builders.owner_reference("StatefulSet")]
    inputs = deleting_cluster(p)
    assert [q["metadata"]["name"] for q in inputs.pending] == ["p"]


POD_LABELS = {"app": "blocked"}


def pdb(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": POD_LABELS}, **spec},
    }


@pytest.mark.parametrize(
    "budgets",
    [
        [pdb("pdb", maxUnavailable=0)],
        [pdb("pdb", maxUnavailable="0%")],
        [pdb("pdb", minAvailable="100%")],
        [pdb("pdb-1", minAvailable="100%"), pdb("pdb-2", minAvailable="100%")],
    ],
    ids=["0 max unavailable", "0% max unavailable", "100% min available", "multiple PDBs on the same pod"],
)
def test_pods_a_pdb_fully_blocks_are_not_rescheduled(budgets: list[dict[str, Any]]) -> None:
    """Deleting Nodes > should not reschedule pods from a deleting node when pods are blocked due to fully
    blocking PDBs"""
    inputs = deleting_cluster(small_pod(labels=POD_LABELS), *budgets)
    assert inputs.pending == []


# -- NodePool requirements instance filtering -------------------------------------------------------


def filtered_pool(*requirements: dict[str, Any]) -> list:
    return [nodepool(requirements=[ALL_CAPACITY_TYPES, *requirements])]


def assert_filtered_out(reason: str) -> None:
    # Karpenter says "nodepool requirements filtered out all available instance types"; ours names the
    # NodePool and the requirement that left no type.
    assert reason.startswith('no instance type in nodepool "default" '), reason


def test_a_nodepool_whose_requirements_leave_no_type_explains_it() -> None:
    """NodePool requirements instance filtering > should return appropriate pod error when no available
    instance types exist"""
    normal = upod("normal")
    scheduled(schedule([normal]), normal)
    p = upod("p", "32", "256Gi")
    pools = filtered_pool(
        {"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["non-existent-instance-type"]}
    )
    result = schedule([p], pools)
    assert not_scheduled(result, p)
    assert_filtered_out(result.unschedulable["default/p"]["default"])


def test_every_pod_gets_the_filtered_out_reason() -> None:
    """NodePool requirements instance filtering > should handle multiple pods when requirements filter out
    all instance types"""
    pods = [upod(f"p{i}") for i in range(3)]
    result = schedule(
        pods, filtered_pool({"key": wk.ARCH, "operator": "In", "values": ["non-existent-arch"]})
    )
    for p in pods:
        assert not_scheduled(result, p)
        assert_filtered_out(result.unschedulable[f"default/{p['metadata']['name']}"]["default"])


def test_self_conflicting_nodepool_requirements_leave_no_type() -> None:
    """NodePool requirements instance filtering > should handle conflicting requirements that eliminate all
    instance types"""
    p = upod("p")
    result = schedule(
        [p],
        filtered_pool(
            {"key": wk.ARCH, "operator": "In", "values": ["amd64"]},
            {"key": wk.ARCH, "operator": "In", "values": ["arm64"]},
        ),
    )
    assert not_scheduled(result, p)
    assert_filtered_out(result.unschedulable["default/p"]["default"])


def test_zones_no_type_is_offered_in_leave_no_type() -> None:
    """NodePool requirements instance filtering > should handle zone requirements that filter out all
    instance types"""
    p = upod("p")
    zones = {"key": wk.ZONE, "operator": "In", "values": ["non-existent-zone-1", "non-existent-zone-2"]}
    result = schedule([p], filtered_pool(zones))
    assert not_scheduled(result, p)
    assert_filtered_out(result.unschedulable["default/p"]["default"])
