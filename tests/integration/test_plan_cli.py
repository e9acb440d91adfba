"""`serverless-karpenter plan`: the offline dry run, through the CLI, against its output contract."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from serverless_karpenter.api import labels as wk
from serverless_karpenter.catalog._data import read_package_json
from serverless_karpenter_cli.main import main

from tests.builders import deployment, nodeclass, nodepool

NODECLAIM_KEYS = {
    "nodepool",
    "instance_type",
    "instance_type_options",
    "zone",
    "capacity_type",
    "price_per_hour",
    "pods",
    "labels",
    "taints",
}


def write(tmp_path: Path, name: str, *docs: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(list(docs), sort_keys=False))
    return path


def plan(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["plan", *args, "-o", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def pod_doc(name: str, cpu: str = "1", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
            **spec,
        },
    }


def test_plan_json_follows_the_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "cluster/pools.yaml", nodepool(), nodeclass())
    write(tmp_path, "cluster/apps/web.yaml", deployment("web", 20, cpu="1", memory="1536Mi"))
    out = plan(capsys, "-f", str(tmp_path / "cluster"))
    assert set(out) == {
        "nodeclaims",
        "existing_nodes",
        "unschedulable",
        "cost_per_hour",
        "lower_bound_per_hour",
        "gap",
        "first_fit_cost_per_hour",
        "ignored",
    }
    assert out["unschedulable"] == [] and out["existing_nodes"] == {} and out["ignored"] == []
    # The solver's report: never dearer than first fit, never below its proven bound.
    assert out["lower_bound_per_hour"] <= out["cost_per_hour"] + 1e-9
    assert out["cost_per_hour"] <= out["first_fit_cost_per_hour"] + 1e-9
    assert out["gap"] == pytest.approx(out["cost_per_hour"] / out["lower_bound_per_hour"] - 1, abs=1e-5)
    pods = [p for claim in out["nodeclaims"] for p in claim["pods"]]
    assert sorted(pods) == sorted(f"default/web-{i}" for i in range(20))
    for claim in out["nodeclaims"]:
        assert set(claim) == NODECLAIM_KEYS
        assert claim["nodepool"] == "default" and claim["capacity_type"] == "on-demand"
        assert claim["instance_type"] in claim["instance_type_options"]
        assert claim["labels"][wk.ZONE] == claim["zone"] and claim["labels"][wk.NODEPOOL] == "default"
        assert claim["labels"][wk.INSTANCE_TYPE] == claim["instance_type"]
        assert claim["instance_type"].split(".")[0][0] in "cmr"
    assert out["cost_per_hour"] == pytest.approx(sum(c["price_per_hour"] for c in out["nodeclaims"]))


def test_plan_table_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifests = write(
        tmp_path, "all.yaml", nodepool(), nodeclass(), deployment("web", 3), pod_doc("huge", cpu="900")
    )
    assert main(["plan", "-f", str(manifests), "-o", "table"]) == 0
    text = capsys.readouterr().out
    assert "NodeClaims to launch" in text and "Unschedulable pods" in text
    assert "default/huge" in text and "1 unschedulable pod(s)" in text


def test_workloads_expand_and_existing_nodes_come_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "existing-1",
            "labels": {wk.ZONE: "us-east-1a", wk.ARCH: "amd64", wk.OS: "linux", wk.HOSTNAME: "existing-1"},
        },
        "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}},
    }
    bound = pod_doc("resident", cpu="2", nodeName="existing-1")
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "batch", "namespace": "default"},
        "spec": {"parallelism": 3, "completions": 10, "template": deployment("x", 1)["spec"]["template"]},
    }
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "rs", "namespace": "default"},
        "spec": {"replicas": 2, "template": deployment("y", 1, cpu="500m")["spec"]["template"]},
    }
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}},
    }
    path = write(tmp_path, "m.yaml", nodepool(), nodeclass(), node, bound, job, rs, pdb)
    out = plan(capsys, "-f", str(path))
    # Largest first: two of the three 1-cpu Job pods fill the node's 2 free cpu; the rest need a new node.
    assert out["existing_nodes"] == {"existing-1": ["default/batch-0", "default/batch-1"]}
    new_pods = sorted(p for c in out["nodeclaims"] for p in c["pods"])
    assert new_pods == ["default/batch-2", "default/rs-0", "default/rs-1"]


def test_statefulset_claims_follow_their_storage_class(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "default"},
        "spec": {
            "replicas": 2,
            "template": deployment("db", 1)["spec"]["template"],
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {"storageClassName": "zonal", "accessModes": ["ReadWriteOnce"]},
                }
            ],
        },
    }
    sc = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "zonal"},
        "provisioner": "ebs.csi.aws.com",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowedTopologies": [{"matchLabelExpressions": [{"key": wk.ZONE, "values": ["us-east-1d"]}]}],
    }
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "pv-db-0"},
        "spec": {
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": wk.ZONE, "operator": "In", "values": ["us-east-1f"]}]}
                    ]
                }
            }
        },
    }
    bound_claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "data-db-0",
            "namespace": "default",
            "annotations": {"pv.kubernetes.io/bind-completed": "yes"},
        },
        "spec": {"volumeName": "pv-db-0", "storageClassName": "zonal"},
    }
    out = plan(
        capsys, "-f", str(write(tmp_path, "m.yaml", nodepool(), nodeclass(), sts, sc, pv, bound_claim))
    )
    zones = {c["pods"][0]: c["zone"] for c in out["nodeclaims"]}
    assert zones == {"default/db-0": "us-east-1f", "default/db-1": "us-east-1d"}


def test_pods_on_a_deleting_node_are_rescheduled(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "going",
            "deletionTimestamp": "2026-01-01T00:00:00Z",
            "labels": {wk.ZONE: "us-east-1a"},
        },
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    }
    out = plan(
        capsys,
        "-f",
        str(write(tmp_path, "m.yaml", nodepool(), nodeclass(), node, pod_doc("evicted", nodeName="going"))),
    )
    assert out["existing_nodes"] == {}
    assert [c["pods"] for c in out["nodeclaims"]] == [["default/evicted"]]


def test_reasons_name_the_constraint_and_the_nodepool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gpu = nodepool("gpu", weight=10)
    gpu["spec"] = json.loads(json.dumps(gpu["spec"]))
    gpu["spec"]["template"]["spec"]["taints"] = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    narrow = nodepool("x")
    narrow["spec"] = json.loads(json.dumps(narrow["spec"]))
    narrow["spec"]["template"]["spec"]["requirements"] = [
        {"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["t3.xlarge", "t3.2xlarge"]}
    ]
    eni = pod_doc("eni")
    eni["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "3310m", "memory": "3344Mi", "vpc.amazonaws.com/pod-eni": "1"},
        "limits": {"vpc.amazonaws.com/pod-eni": "1"},
    }
    out = plan(capsys, "-f", str(write(tmp_path, "m.yaml", gpu, narrow, nodeclass(), eni)))
    [entry] = out["unschedulable"]
    assert entry["pod"] == "default/eni"
    assert entry["nodepools"]["gpu"] == "did not tolerate taint dedicated=gpu:NoSchedule"
    assert entry["nodepools"]["x"] == (
        'requests cpu=3310m memory=3344Mi vpc.amazonaws.com/pod-eni=1; no instance type in nodepool "x" '
        "allowed by node.kubernetes.io/instance-type In [t3.2xlarge t3.xlarge] "
        "offers vpc.amazonaws.com/pod-eni"
    )
    assert (
        'nodepool "gpu": did not tolerate taint' in entry["reason"]
        and 'nodepool "x": requests' in entry["reason"]
    )
    for reason in entry["nodepools"].values():
        assert reason.strip() not in ("incompatible", "incompatible requirements")


def test_daemonset_overhead_and_runtime_class(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "kube-system"},
        "spec": {"template": deployment("agent", 1, cpu="1", memory="1Gi")["spec"]["template"]},
    }
    runtime = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "kata"},
        "handler": "kata",
        "overhead": {"podFixed": {"cpu": "500m", "memory": "512Mi"}},
    }
    sandboxed = pod_doc("sandboxed", cpu="2", runtimeClassName="kata")
    missing = pod_doc("orphan", runtimeClassName="gone")
    out = plan(
        capsys,
        "-f",
        str(write(tmp_path, "m.yaml", nodepool(), nodeclass(), daemonset, runtime, sandboxed, missing)),
    )
    [claim] = out["nodeclaims"]
    assert claim["pods"] == ["default/sandboxed"]
    # 2 + 0.5 overhead + 1 daemonset = 3.5 cpu: a 2-vCPU type cannot hold it.
    assert not any(name.endswith(".large") for name in claim["instance_type_options"])
    [entry] = out["unschedulable"]
    assert entry == {
        "pod": "default/orphan",
        "reason": 'nodepool "default": runtimeclass "gone" not found',
        "nodepools": {"default": 'runtimeclass "gone" not found'},
    }


def test_catalog_file_shaped_like_the_aws_apis(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = read_package_json("instance-types-us-east-1.json")
    types = [t for t in raw["instance_types"] if t["InstanceType"] in ("m5.large", "m5.xlarge", "c5.xlarge")]
    catalog = {
        "region": "us-east-1",
        "InstanceTypes": types,
        "InstanceTypeOfferings": [
            {"InstanceType": "m5.large", "Location": "us-east-1a", "LocationType": "availability-zone"},
            {"InstanceType": "m5.xlarge", "Location": "us-east-1b", "LocationType": "availability-zone"},
            {"InstanceType": "c5.xlarge", "Location": "us-east-1a", "LocationType": "availability-zone"},
            {"InstanceType": "c5.xlarge", "Location": "use1-az1", "LocationType": "availability-zone-id"},
        ],
        "SpotPriceHistory": [
            {
                "InstanceType": "m5.xlarge",
                "AvailabilityZone": "us-east-1b",
                "ProductDescription": "Linux/UNIX",
                "SpotPrice": "0.05",
                "Timestamp": "2026-01-01T00:00:00Z",
            }
        ],
        "OnDemandPrices": {"m5.large": 0.096, "m5.xlarge": 0.192, "c5.xlarge": 0.17},
    }
    catalog_path = tmp_path / "catalog.json"
    catalog_path.write_text(json.dumps(catalog))
    spot_pool = nodepool("any")
    spot_pool["spec"] = json.loads(json.dumps(spot_pool["spec"]))
    spot_pool["spec"]["template"]["spec"]["requirements"] = [
        {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]}
    ]
    manifests = write(tmp_path, "m.yaml", spot_pool, nodeclass(), pod_doc("small", cpu="1"))
    out = plan(capsys, "-f", str(manifests), "--catalog", str(catalog_path))
    [claim] = out["nodeclaims"]
    # Spot first: only m5.xlarge has a spot price, and only in us-east-1b.
    assert (claim["instance_type"], claim["zone"], claim["capacity_type"]) == (
        "m5.xlarge",
        "us-east-1b",
        "spot",
    )
    assert claim["price_per_hour"] == pytest.approx(0.05)
    assert set(claim["instance_type_options"]) == {"m5.large", "m5.xlarge", "c5.xlarge"}
    pinned = write(
        tmp_path, "z.yaml", spot_pool, nodeclass(), pod_doc("pinned", nodeSelector={wk.ZONE: "us-east-1b"})
    )
    [claim] = plan(capsys, "-f", str(pinned), "--catalog", str(catalog_path), "--region", "us-east-1")[
        "nodeclaims"
    ]
    assert claim["instance_type_options"] == ["m5.xlarge"]  # the others are not offered in us-east-1b


@pytest.mark.parametrize(
    ("docs", "expected"),
    [
        ("restricted", "restricted"),
        ("missing", "no such file"),
        ("no-nodepool", "no NodePool"),
    ],
)
def test_bad_inputs_are_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], docs: str, expected: str
) -> None:
    if docs == "restricted":
        bad = nodepool("bad")
        bad["spec"] = json.loads(json.dumps(bad["spec"]))
        bad["spec"]["template"]["metadata"] = {"labels": {"karpenter.sh/custom": "x"}}
        path = write(tmp_path, "m.yaml", bad, nodeclass())
    elif docs == "missing":
        path = tmp_path / "nope.yaml"
    else:
        path = write(tmp_path, "m.yaml", nodeclass(), pod_doc("p"))
    assert main(["plan", "-f", str(path)]) == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in captured.err
