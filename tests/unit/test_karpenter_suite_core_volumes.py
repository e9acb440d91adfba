"""Ports of Karpenter's scheduling suite (``pkg/controllers/provisioning/scheduling/suite_test.go``),
``Describe("VolumeUsage")``. The objects go through ``plan``'s own path: ``classify`` sorts the manifests,
``VolumeIndex.build`` indexes claims, volumes and classes, ``existing_capacity`` reads the nodes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from serverless_karpenter.api import labels as wk
from serverless_karpenter.scheduling.inputs import classify
from serverless_karpenter.scheduling.scheduler import SchedulingResult
from serverless_karpenter.scheduling.volumes import VolumeIndex

from tests.unit.karpenter_suite_helpers_core import (
    EXOTIC,
    GI,
    FakeType,
    bind,
    capacity,
    launch,
    node_labels,
    nodepool,
    not_scheduled,
    schedule,
    scheduled,
    upod,
)

CSI = "fake.csi.provider"
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
# The suite's VolumeUsage catalog: one big type, so only volumes decide how many nodes there are.
BIG = FakeType("instance-type", cpu=1024, pods=1024)
POOLS = [nodepool(types=[BIG])]


def zone_terms(*zones: str) -> list[dict[str, Any]]:
    return [{"matchExpressions": [{"key": wk.ZONE, "operator": "In", "values": [z]}]} for z in zones]


def storage_class(
    name: str,
    provisioner: str = CSI,
    *,
    zones: Sequence[str] = (),
    mode: str = "WaitForFirstConsumer",
    default: bool = False,
    topologies: Sequence[Sequence[tuple[str, Sequence[str]]]] = (),
) -> dict[str, Any]:
    """test.StorageClass: ``zones`` is one allowedTopologies term; ``topologies`` gives several."""
    terms = [[(wk.ZONE, zones)]] if zones else list(topologies)
    body: dict[str, Any] = {
        "kind": "StorageClass",
        "metadata": {"name": name, **({"annotations": {DEFAULT_CLASS: "true"}} if default else {})},
        "provisioner": provisioner,
        "volumeBindingMode": mode,
    }
    if terms:
        body["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": k, "values": list(v)} for k, v in term]} for term in terms
        ]
    return body


def persistent_volume(
    name: str,
    *,
    terms: Sequence[dict[str, Any]] = (),
    source: dict[str, Any] | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    spec: dict[str, Any] = source or {"csi": {"driver": CSI, "volumeHandle": name}}
    if terms:
        spec = {**spec, "nodeAffinity": {"required": {"nodeSelectorTerms": list(terms)}}}
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"kind": "PersistentVolume", "metadata": meta, "spec": spec}


def claim(
    name: str,
    storage_class_name: str | None = None,
    *,
    volume: str | None = None,
    bind_completed: bool = True,
    phase: str | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    """test.PersistentVolumeClaim: a claim given a volume carries the bind-completed annotation."""
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if volume and bind_completed:
        meta["annotations"] = {BIND_COMPLETED: "yes"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    if storage_class_name is not None:
        spec["storageClassName"] = storage_class_name
    if volume:
        spec["volumeName"] = volume
    body: dict[str, Any] = {"kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}
    if phase:
        body["status"] = {"phase": phase}
    return body


def with_claims(name: str, *claims: str, **fields: Any) -> dict[str, Any]:
    volumes = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    return upod(name, volumes=volumes, **fields)


def with_ephemeral(name: str, storage_class_name: str | None = None, **fields: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    if storage_class_name is not None:
        spec["storageClassName"] = storage_class_name
    volume = {"name": "tmp-ephemeral", "ephemeral": {"volumeClaimTemplate": {"spec": spec}}}
    return upod(name, volumes=[volume], **fields)


def as_pod(p: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "Pod", **p}


def plan(objects: Sequence[dict[str, Any]], pools: Any = POOLS) -> tuple[Any, SchedulingResult]:
    """plan's scheduling of the manifests: pending pods against the nodes, with volume topology."""
    inputs = classify(objects)
    volumes = VolumeIndex.build(inputs.pvcs, inputs.pvs, inputs.storage_classes, inputs.csinodes)
    result = schedule(inputs.pending, pools, existing=capacity(inputs.nodes, inputs.bound), volumes=volumes)
    return inputs, result


def in_flight_node(zone: str = "test-zone-1") -> dict[str, Any]:
    """The node Karpenter launched for the suite's initial pod (in ``zone``)."""
    first = upod("initial")
    nodes, _ = launch(schedule([first], POOLS), [first])
    node = nodes[0]
    node["metadata"]["labels"][wk.ZONE] = zone
    return {"kind": "Node", **node}


def csi_node(driver_counts: dict[str, int], node: str = "node-0") -> dict[str, Any]:
    drivers = [
        {"name": d, "nodeID": "fake-node-id", "allocatable": {"count": c}} for d, c in driver_counts.items()
    ]
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": node},
        "spec": {"drivers": drivers},
    }


def test_volume_limits_of_a_node_open_a_second_node() -> None:
    """VolumeUsage > should launch multiple nodes if required due to volume limits"""
    objects: list[dict[str, Any]] = [in_flight_node(), csi_node({CSI: 10})]
    objects.append(storage_class("my-storage-class", zones=["test-zone-1"]))
    for i in range(6):
        objects += [
            claim(f"my-claim-a-{i}", "my-storage-class"),
            claim(f"my-claim-b-{i}", "my-storage-class"),
        ]
        objects.append(as_pod(with_claims(f"p{i}", f"my-claim-a-{i}", f"my-claim-b-{i}")))
    _, result = plan(objects)
    assert len(result.existing.get("node-0", [])) == 5 and len(result.new_nodeclaims) == 1


def test_pods_sharing_one_claim_share_one_node() -> None:
    """VolumeUsage > should launch a single node if all pods use the same PVC"""
    objects = [
        in_flight_node(),
        csi_node({CSI: 10}),
        storage_class("my-storage-class", zones=["test-zone-1"]),
        persistent_volume("my-volume", terms=zone_terms("test-zone-1")),
        claim("my-claim", "my-storage-class", volume="my-volume"),
        *(as_pod(with_claims(f"p{i}", "my-claim")) for i in range(100)),
    ]
    _, result = plan(objects)
    assert not result.new_nodeclaims and len(result.existing["node-0"]) == 100


def test_nfs_volumes_do_not_count_against_csi_limits() -> None:
    """VolumeUsage > should not fail for NFS volumes"""
    nfs = {"nfs": {"server": "fake.server", "path": "/some/path"}}
    objects = [
        in_flight_node(),
        persistent_volume("my-volume", terms=zone_terms("test-zone-1"), source=nfs),
        claim("my-claim", "", volume="my-volume"),
        *(as_pod(with_claims(f"p{i}", "my-claim", "my-claim")) for i in range(5)),
    ]
    _, result = plan(objects)
    assert not result.new_nodeclaims and len(result.existing["node-0"]) == 5


def zone_anti_affinity(app: str) -> dict[str, Any]:
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": wk.ZONE}
            ]
        }
    }


def test_a_pv_with_alternative_zones_lets_pods_spread() -> None:
    """VolumeUsage > should schedule pods using a PV with multiple zones"""
    objects: list[dict[str, Any]] = []
    pods = []
    for i in range(2):
        objects += [
            persistent_volume(f"multi-zone-pv-{i}", terms=zone_terms("test-zone-1", "test-zone-2")),
            claim(f"multi-zone-pvc-{i}", volume=f"multi-zone-pv-{i}"),
        ]
        pods.append(
            with_claims(
                f"pod-{i}",
                f"multi-zone-pvc-{i}",
                labels={"app": "multi-zone-app"},
                affinity=zone_anti_affinity("multi-zone-app"),
            )
        )
    _, result = plan(objects + [as_pod(p) for p in pods], [nodepool()])
    zones = {node_labels(result, p)[wk.ZONE] for p in pods}
    assert zones == {"test-zone-1", "test-zone-2"}


@pytest.mark.parametrize(
    "source",
    [{"local": {"path": "/mnt/local"}}, {"hostPath": {"path": "/mnt/host"}}],
    ids=["for local volumes", "for hostpath volumes"],
)
def test_hostname_pinned_local_volumes_keep_their_other_alternatives(source: dict[str, Any]) -> None:
    """VolumeUsage > should preserve unconstrained PV alternatives after ignoring hostname affinity"""
    terms = [
        {"matchExpressions": [{"key": wk.HOSTNAME, "operator": "In", "values": ["existing-host"]}]},
        {"matchExpressions": [{"key": wk.ZONE, "operator": "In", "values": ["invalid-zone"]}]},
    ]
    p = with_claims("hostname-or-zone-pod", "hostname-or-zone-pvc")
    objects = [
        persistent_volume("hostname-or-zone-pv", terms=terms, source=source),
        claim("hostname-or-zone-pvc", volume="hostname-or-zone-pv"),
        as_pod(p),
    ]
    _, result = plan(objects, [nodepool()])
    scheduled(result, p)


def test_storage_class_alternative_zones_let_pods_spread() -> None:
    """VolumeUsage > should schedule pods using a StorageClass with multiple zones in AllowedTopologies"""
    sc = storage_class(
        "multi-zone-sc", topologies=[[(wk.ZONE, ["test-zone-1"])], [(wk.ZONE, ["test-zone-2"])]]
    )
    pods = [
        with_claims(
            f"sc-pod-{i}",
            f"multi-zone-pvc-{i}",
            labels={"app": "sc-app"},
            affinity=zone_anti_affinity("sc-app"),
        )
        for i in range(2)
    ]
    objects = [
        sc,
        *(claim(f"multi-zone-pvc-{i}", "multi-zone-sc") for i in range(2)),
        *(as_pod(p) for p in pods),
    ]
    _, result = plan(objects, [nodepool()])
    assert {node_labels(result, p)[wk.ZONE] for p in pods} == {"test-zone-1", "test-zone-2"}


def test_the_one_compatible_combination_of_volume_alternatives_is_found() -> None:
    """VolumeUsage > should schedule pods when a valid multi-volume topology alternative remains after
    pruning disjoint branches (our ``instance-local-nvme`` stands for the fake optional ``special``)"""
    types = [
        FakeType(f"fake-it-{i}", cpu=i + 1, memory=2 * (i + 1) * GI, pods=10 * (i + 1)) for i in range(4)
    ] + [FakeType("fake-it-4", cpu=5, memory=10 * GI, pods=50, extra_labels={EXOTIC: "optional"})]
    sc_a = storage_class("pruned-overlap-a", topologies=[[(EXOTIC, ["required"])], [(EXOTIC, ["optional"])]])
    sc_b = storage_class(
        "pruned-overlap-b",
        topologies=[
            [(wk.ZONE, ["test-zone-1"]), (EXOTIC, ["optional"])],
            [(wk.ZONE, ["test-zone-2"]), (EXOTIC, ["required"])],
        ],
    )
    p = with_claims("pruned-overlap-pod", "pvc-a", "pvc-b")
    objects = [sc_a, sc_b, claim("pvc-a", "pruned-overlap-a"), claim("pvc-b", "pruned-overlap-b"), as_pod(p)]
    _, result = plan(objects, [nodepool(types=types)])
    labels = node_labels(result, p)
    assert (labels[wk.ZONE], labels.get(EXOTIC)) == ("test-zone-1", "optional")


def csi_limited_ephemeral(classes: list[dict[str, Any]], storage_class_name: str | None) -> SchedulingResult:
    """An in-flight node whose CSINode allows one volume of the fake driver; it already has one (the
    initial pod's ephemeral claim); a second pod's ephemeral volume of the same class must go elsewhere."""
    node = in_flight_node()
    initial = bind(with_ephemeral("initial", storage_class_name), "node-0")
    pod = with_ephemeral("second", storage_class_name)
    objects = [
        node,
        csi_node({CSI: 1, "other-provider": 10}),
        *classes,
        claim("initial-tmp-ephemeral", storage_class_name),
        claim("second-tmp-ephemeral", storage_class_name),
        as_pod(initial),
        as_pod(pod),
    ]
    _, result = plan(objects)
    return result


def test_an_ephemeral_volume_of_a_named_class_counts_against_its_driver() -> None:
    """VolumeUsage > should launch nodes for pods with ephemeral volume using the specified storage class
    name"""
    classes = [
        storage_class("my-storage-class", zones=["test-zone-1"]),
        storage_class("default-storage-class", "other-provider", zones=["test-zone-1"], default=True),
    ]
    result = csi_limited_ephemeral(classes, "my-storage-class")
    assert "node-0" not in result.existing and len(result.new_nodeclaims) == 1


def test_an_ephemeral_volume_without_a_class_counts_against_the_default_class_driver() -> None:
    """VolumeUsage > should launch nodes for pods with ephemeral volume using a default storage class"""
    classes = [storage_class("default-storage-class", zones=["test-zone-1"], default=True)]
    result = csi_limited_ephemeral(classes, None)
    assert "node-0" not in result.existing and len(result.new_nodeclaims) == 1


def test_an_ephemeral_volume_without_a_class_uses_the_newest_default_class() -> None:
    """VolumeUsage > should launch nodes for pods with ephemeral volume using the newest storage class"""
    older = storage_class("default-storage-class", "other-provider", zones=["test-zone-1"], default=True)
    newer = storage_class("newer-default-storage-class", zones=["test-zone-1"], default=True)
    older["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    newer["metadata"]["creationTimestamp"] = "2026-01-01T00:00:02Z"
    result = csi_limited_ephemeral([older, newer], None)
    assert "node-0" not in result.existing and len(result.new_nodeclaims) == 1


def test_an_unbound_immediate_claim_waits() -> None:
    """VolumeUsage > should not launch nodes for pod with unbound volume for volumeBindingMode immediate"""
    p = with_claims("p", "tmp-ephemeral")
    sc = storage_class("default-storage-class", "other-provider", zones=["test-zone-1"], mode="Immediate")
    _, result = plan([sc, claim("tmp-ephemeral", "default-storage-class"), as_pod(p)])
    assert not_scheduled(result, p)


def test_a_deleting_claim_is_not_scheduled() -> None:
    """VolumeUsage > should not launch nodes for pod with deleting persistentVolumeClaim"""
    p = with_claims("p", "tmp-ephemeral")
    sc = storage_class("default-storage-class", "other-provider", zones=["test-zone-1"])
    _, result = plan([sc, claim("tmp-ephemeral", "default-storage-class", deleting=True), as_pod(p)])
    assert not_scheduled(result, p)


def test_a_deleting_bound_volume_is_not_scheduled() -> None:
    """VolumeUsage > should not launch nodes for pod with bound persistentVolume that is marked for
    deletion"""
    p = with_ephemeral("p")
    objects = [
        persistent_volume(
            "pv", source={"csi": {"driver": "other-provider", "volumeHandle": "pv"}}, deleting=True
        ),
        claim("p-tmp-ephemeral", volume="pv"),
        as_pod(p),
    ]
    _, result = plan(objects)
    assert not_scheduled(result, p)


def test_a_lost_claim_is_not_scheduled() -> None:
    """VolumeUsage > should not launch nodes for pod with Lost persistentVolumeClaim"""
    p = with_claims("p", "tmp-ephemeral")
    sc = storage_class("default-storage-class", "other-provider", zones=["test-zone-1"])
    _, result = plan([sc, claim("tmp-ephemeral", "default-storage-class", phase="Lost"), as_pod(p)])
    assert not_scheduled(result, p)


@pytest.mark.parametrize(
    "bind_completed",
    [
        pytest.param(False, id="when pv.kubernetes.io/bind-completed is missing"),
        pytest.param(True, id="when pv.kubernetes.io/bind-completed is present"),
    ],
)
def test_a_claim_naming_its_volume_is_bound_once_bind_completed(bind_completed: bool) -> None:
    """VolumeUsage > should handle pods with PVCs with defined volumeName"""
    p = with_claims("p", "tmp-ephemeral")
    objects = [
        storage_class("default-storage-class", "other-provider", zones=["test-zone-1"]),
        persistent_volume("pv", source={"csi": {"driver": "other-provider", "volumeHandle": "pv"}}),
        claim("tmp-ephemeral", "default-storage-class", volume="pv", bind_completed=bind_completed),
        as_pod(p),
    ]
    _, result = plan(objects)
    if bind_completed:
        scheduled(result, p)
    else:
        assert not_scheduled(result, p)


@pytest.mark.parametrize(
    "storage_class_name",
    ["non-existent", ""],
    ids=["non-existent storage class", "explicitly disabled storage class (empty string)"],
)
def test_a_bound_ephemeral_claim_needs_no_storage_class(storage_class_name: str) -> None:
    """VolumeUsage > should launch nodes for pods with ephemeral volume without a storage class when the
    PVC is bound"""
    p = with_ephemeral("p", storage_class_name)
    objects = [
        persistent_volume("test-pv"),
        claim("p-tmp-ephemeral", storage_class_name, volume="test-pv"),
        as_pod(p),
    ]
    _, result = plan(objects)
    assert len(result.new_nodeclaims) == 1 and scheduled(result, p) == "new:0"


@pytest.mark.parametrize(
    "storage_class_name",
    [
        pytest.param("non-existent", id="non-existent storage class"),
        pytest.param("", id="explicitly disabled storage class (empty string)"),
    ],
)
def test_an_unbound_ephemeral_claim_without_a_usable_class_launches_nothing(storage_class_name: str) -> None:
    """VolumeUsage > should not launch nodes for pods with ephemeral volume without a storage class when
    the PVC is unbound"""
    p = with_ephemeral("p", storage_class_name)
    _, result = plan([as_pod(p)])
    assert not result.new_nodeclaims and not_scheduled(result, p)


IN_TREE_EBS = "kubernetes.io/aws-ebs"
EBS_CSI = "ebs.csi.aws.com"


def test_a_migrated_in_tree_claim_counts_against_the_csi_driver() -> None:
    """VolumeUsage > CSIMigration > should launch nodes for pods with non-dynamic PVC using a migrated
    PVC/PV"""
    sc = storage_class("in-tree-storage-class", IN_TREE_EBS, zones=["test-zone-1"], default=True)
    ebs = {"awsElasticBlockStore": {"volumeID": "vol-1"}}
    initial = bind(with_claims("initial", "first"), "node-0")
    pod = with_claims("second", "second-claim")
    objects = [
        in_flight_node(),
        csi_node({EBS_CSI: 1}),
        sc,
        persistent_volume("my-volume", terms=zone_terms("test-zone-1"), source=ebs),
        claim("first", "in-tree-storage-class", volume="my-volume"),
        claim("second-claim", "in-tree-storage-class"),
        as_pod(initial),
        as_pod(pod),
    ]
    _, result = plan(objects)
    assert "node-0" not in result.existing and len(result.new_nodeclaims) == 1


def test_a_migrated_in_tree_ephemeral_volume_counts_against_the_csi_driver() -> None:
    """VolumeUsage > CSIMigration > should launch nodes for pods with ephemeral volume using a migrated
    PVC/PV"""
    sc = storage_class("in-tree-storage-class", IN_TREE_EBS, zones=["test-zone-1"], default=True)
    initial = bind(with_ephemeral("initial", "in-tree-storage-class"), "node-0")
    pod = with_ephemeral("second", "in-tree-storage-class")
    objects = [
        in_flight_node(),
        csi_node({EBS_CSI: 1}),
        sc,
        claim("initial-tmp-ephemeral", "in-tree-storage-class"),
        as_pod(initial),
        as_pod(pod),
    ]
    _, result = plan(objects)
    assert "node-0" not in result.existing and len(result.new_nodeclaims) == 1
