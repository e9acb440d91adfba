"""Existing nodes' attachable-volume limits (CSINode counts per CSI driver), the claims that count against
them, the default class a claim without one gets, and the provisioner's live read of CSINodes."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from serverless_karpenter.adapters.kubernetes import KubernetesError
from serverless_karpenter.api import labels as wk
from serverless_karpenter.provisioning.provisioner import Provisioner
from serverless_karpenter.scheduling.volumes import VolumeIndex, volume_requirements
from serverless_karpenter.scheduling.volumeusage import EBS_CSI_DRIVER, VolumeUsage, pod_volumes
from serverless_karpenter_cli.main import main

from tests.builders import nodeclass, nodepool

EBS = EBS_CSI_DRIVER


def claim(name: str, storage_class: str | None = None, volume: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if volume:
        spec["volumeName"] = volume
        meta["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}
    return {"metadata": meta, "spec": spec}


def storage_class(
    name: str, provisioner: str, *, default: bool = False, created: str | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if default:
        meta["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
    if created:
        meta["creationTimestamp"] = created
    return {"metadata": meta, "provisioner": provisioner, "volumeBindingMode": "WaitForFirstConsumer"}


def csinode(node: str, **counts: int) -> dict[str, Any]:
    drivers = [{"name": d.replace("_", "."), "allocatable": {"count": c}} for d, c in counts.items()]
    drivers.append({"name": "no.count.csi"})  # a driver that reports no count limits nothing
    return {"kind": "CSINode", "metadata": {"name": node}, "spec": {"drivers": drivers}}


def pod(name: str, *claims: str) -> dict[str, Any]:
    volumes = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    return {"metadata": {"name": name, "namespace": "default"}, "spec": {"volumes": volumes}}


def test_claims_count_once_per_driver_and_only_with_a_driver() -> None:
    index = VolumeIndex.build(
        [claim("a", "gp3"), claim("b", "in-tree"), claim("nfs", "", "nfs-pv"), claim("static", "", "ebs-pv")],
        [
            {"metadata": {"name": "nfs-pv"}, "spec": {"nfs": {"server": "s", "path": "/"}}},
            {"metadata": {"name": "ebs-pv"}, "spec": {"awsElasticBlockStore": {"volumeID": "vol-1"}}},
        ],
        [storage_class("gp3", EBS), storage_class("in-tree", "kubernetes.io/aws-ebs")],
    )
    # The in-tree provisioner and the in-tree EBS volume count against ebs.csi.aws.com; NFS against nothing.
    assert pod_volumes(pod("p", "a", "a", "b", "nfs", "static", "missing"), index) == {
        EBS: frozenset({"default/a", "default/b", "default/static"})
    }


def test_a_node_takes_claims_up_to_its_count_and_shared_claims_are_free() -> None:
    index = VolumeIndex.build(
        [claim(n, "gp3") for n in ("a", "b", "c")],
        [],
        [storage_class("gp3", EBS)],
        [csinode("n1", ebs_csi_aws_com=2)],
    )
    usage = VolumeUsage.of_node("n1", [pod("running", "a")], index)
    assert usage is not None and usage.limits == {EBS: 2}
    assert usage.exceeds(pod_volumes(pod("p", "a", "b"), index)) is None
    usage.add(pod_volumes(pod("p", "a", "b"), index))
    assert usage.exceeds(pod_volumes(pod("q", "b"), index)) is None
    assert usage.exceeds(pod_volumes(pod("r", "c"), index)) == (
        f"would exceed the volume limit of {EBS} (3 > 2)"
    )
    # A node without a CSINode (an in-flight NodeClaim) is not limited.
    assert VolumeUsage.of_node("n2", [], index) is None


def test_a_claim_without_a_class_gets_the_newest_default_class() -> None:
    classes = [
        storage_class("old", "other", default=True, created="2026-01-01T00:00:00Z"),
        storage_class("new", EBS, default=True, created="2026-01-02T00:00:00Z"),
        storage_class("newest-but-not-default", "x", created="2026-01-03T00:00:00Z"),
    ]
    index = VolumeIndex.build([claim("a")], [], classes)
    assert index.default_class == "new"
    assert pod_volumes(pod("p", "a"), index) == {EBS: frozenset({"default/a"})}


def test_an_unbound_claim_without_any_class_is_not_provisioned_for() -> None:
    _, reason = volume_requirements(pod("p", "a"), VolumeIndex.build([claim("a")], [], []))
    assert reason == 'volume "v0": persistentvolumeclaim "default/a" is unbound and names no storageclass'


class _Kube:
    def __init__(self, csinodes: list[dict[str, Any]] | Exception) -> None:
        self.csinodes = csinodes

    def list_csi_nodes(self) -> list[dict[str, Any]]:
        if isinstance(self.csinodes, Exception):
            raise self.csinodes
        return self.csinodes

    def list_storage_classes(self) -> list[dict[str, Any]]:
        return [storage_class("gp3", EBS)]

    def __getattr__(self, name: str) -> Any:
        # Every other list the provisioner reads is empty here.
        return lambda **_: []


@pytest.mark.parametrize("denied", [False, True], ids=["read", "csinodes denied"])
def test_the_provisioner_reads_csinodes_live(denied: bool) -> None:
    kube = _Kube(KubernetesError("forbidden", 403) if denied else [csinode("n1", ebs_csi_aws_com=25)])
    state = Provisioner(SimpleNamespace(kube=kube, resolver=None)).cluster_state([])
    assert state.volumes is not None and "gp3" in state.volumes.classes
    assert state.volumes.limits == ({} if denied else {"n1": {EBS: 25}})


def test_plan_reads_csinode_manifests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``serverless-karpenter plan``: a CSINode among the manifests limits its node, and is not ignored."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "labels": {wk.ZONE: "us-east-1a", wk.HOSTNAME: "n1"}},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    }
    gp3 = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", **storage_class("gp3", EBS)}
    claims = [{"apiVersion": "v1", "kind": "PersistentVolumeClaim", **claim(n, "gp3")} for n in ("a", "b")]
    pods = []
    for name in ("a", "b"):
        p = pod(name, name)
        p["spec"]["containers"] = [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]
        pods.append({"apiVersion": "v1", "kind": "Pod", **p})
    limit = {"apiVersion": "storage.k8s.io/v1", **csinode("n1", ebs_csi_aws_com=1)}
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump_all([nodepool(), nodeclass(), node, gp3, *claims, *pods, limit]))
    assert main(["plan", "-f", str(path), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sum(len(pods) for pods in out["existing_nodes"].values()) == 1
    assert [len(c["pods"]) for c in out["nodeclaims"]] == [1]
