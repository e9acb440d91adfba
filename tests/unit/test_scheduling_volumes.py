"""Volume topology: bound PVs pin the zone, StorageClass allowedTopologies bound it, and volumes in states
we cannot reason about are named in the reason."""

from __future__ import annotations

from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.scheduling.volumes import VolumeIndex, volume_requirements

from tests.unit.test_scheduling_constraints import pod, pool, solve, zone_of


def pvc(name: str, *, volume: str | None = None, storage_class: str | None = "gp3") -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}
    if volume:
        spec["volumeName"] = volume
    if storage_class:
        spec["storageClassName"] = storage_class
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if volume:
        # The PV controller marks a claim bound both ways; until then it is not taken as bound.
        meta["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}
    return {"metadata": meta, "spec": spec}


def pv(name: str, zone: str) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": wk.ZONE, "operator": "In", "values": [zone]}]}
    return {"metadata": {"name": name}, "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [term]}}}}


def storage_class(name: str, zones: list[str] | None = None, default: bool = False) -> dict[str, Any]:
    sc: dict[str, Any] = {"metadata": {"name": name}, "volumeBindingMode": "WaitForFirstConsumer"}
    if default:
        sc["metadata"]["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
    if zones:
        sc["allowedTopologies"] = [{"matchLabelExpressions": [{"key": wk.ZONE, "values": zones}]}]
    return sc


def with_claim(name: str, claim: str) -> dict[str, Any]:
    return pod(name, volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": claim}}])


def test_a_pv_pinned_to_a_zone_launches_there() -> None:
    index = VolumeIndex.build(
        [pvc("data", volume="pv-1")], [pv("pv-1", "us-east-1c")], [storage_class("gp3")]
    )
    result = solve([with_claim("db", "data")], volumes=index)
    assert zone_of(result.new_nodeclaims[0]) == "us-east-1c"


def test_storage_class_allowed_topologies_bound_an_unbound_claim() -> None:
    index = VolumeIndex.build([pvc("data")], [], [storage_class("gp3", ["us-east-1b"])])
    assert zone_of(solve([with_claim("db", "data")], volumes=index).new_nodeclaims[0]) == "us-east-1b"


def test_a_pv_zone_the_nodepool_excludes_is_explained() -> None:
    index = VolumeIndex.build([pvc("data", volume="pv-1")], [pv("pv-1", "us-east-1c")], [])
    np = pool("ab", [{"key": wk.ZONE, "operator": "In", "values": ["us-east-1a", "us-east-1b"]}])
    reason = solve([with_claim("db", "data")], [np], volumes=index).unschedulable["default/db"]["ab"]
    assert 'nodepool "ab"' in reason and "topology.kubernetes.io/zone" in reason and "us-east-1c" in reason


def test_unsupported_volume_states() -> None:
    index = VolumeIndex.build([pvc("lost", volume="pv-gone"), pvc("nosc", storage_class="fast")], [], [])
    assert (
        volume_requirements(with_claim("a", "lost"), index)[1]
        == 'volume "data": persistentvolume "pv-gone" not found'
    )
    assert (
        volume_requirements(with_claim("b", "nosc"), index)[1]
        == 'volume "data": storageclass "fast" not found'
    )
    assert volume_requirements(with_claim("c", "nope"), index)[1] == (
        'volume "data": persistentvolumeclaim "default/nope" not found'
    )
    result = solve([with_claim("a", "lost")], volumes=index)
    assert not result.new_nodeclaims and "persistentvolume" in result.unschedulable["default/a"]["default"]


def test_generic_ephemeral_volumes_use_their_template_class() -> None:
    index = VolumeIndex.build([], [], [storage_class("zonal", ["us-east-1a"], default=True)])
    ephemeral = {
        "name": "scratch",
        "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}},
    }
    result = solve([pod("job", volumes=[ephemeral])], volumes=index)
    assert zone_of(result.new_nodeclaims[0]) == "us-east-1a"


def test_other_volume_kinds_are_ignored() -> None:
    p = pod("web", volumes=[{"name": "tmp", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "c"}}])
    reqs, problem = volume_requirements(p, VolumeIndex())
    assert problem is None and len(reqs) == 0
