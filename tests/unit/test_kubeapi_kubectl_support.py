"""What the simulated API server computes for kubectl, without a server: Table rows in kube-apiserver's
columns, CRD printer columns through JSONPath, human ages, the OpenAPI v3 documents and Strict field
validation against them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from serverless_karpenter.clock import ManualClock
from serverless_karpenter_sim.kubeapi import field_validation, kubectl_support, openapi, tables
from serverless_karpenter_sim.kubeapi.errors import ApiError
from serverless_karpenter_sim.kubeapi.jsonpath import JsonPathError, find
from serverless_karpenter_sim.kubeapi.kinds import kind_of
from serverless_karpenter_sim.kubeapi.printers import human_duration

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TABLE_ACCEPT = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,"
    "application/json"
)


def stamp(ago: timedelta) -> str:
    return (NOW - ago).strftime("%Y-%m-%dT%H:%M:%SZ")


def cells(table: dict) -> list[list]:
    return [row["cells"] for row in table["rows"]]


def names(table: dict) -> list[str]:
    return [column["name"] for column in table["columnDefinitions"] if column["priority"] == 0]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5, "5s"),
        (119, "119s"),
        (200, "3m20s"),
        (600, "10m"),
        (7500, "125m"),
        (14700, "4h5m"),
        (36000, "10h"),
        (3 * 86400 + 4 * 3600, "3d4h"),
        (20 * 86400, "20d"),
    ],
)
def test_ages_read_as_kubectl_prints_them(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


def test_only_a_meta_table_accept_asks_for_a_table() -> None:
    assert tables.wants_table(TABLE_ACCEPT)
    assert not tables.wants_table("application/json")
    assert not tables.wants_table(None)


def test_nodes_print_status_roles_age_version() -> None:
    node = {
        "metadata": {"name": "ip-10-0-1-2", "creationTimestamp": stamp(timedelta(minutes=15)), "labels": {}},
        "spec": {"unschedulable": True},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"kubeletVersion": "v1.31.0"},
        },
    }
    table = tables.table(kind_of("", "v1", "nodes"), [node], NOW)
    assert names(table) == ["Name", "Status", "Roles", "Age", "Version"]
    assert cells(table)[0][:5] == ["ip-10-0-1-2", "Ready,SchedulingDisabled", "<none>", "15m", "v1.31.0"]
    assert table["rows"][0]["object"] == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": node["metadata"],
    }


def test_pods_print_ready_status_restarts_and_terminating() -> None:
    pod = {
        "metadata": {"name": "web-1", "creationTimestamp": stamp(timedelta(seconds=30))},
        "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
        "status": {
            "phase": "Running",
            "containerStatuses": [{"ready": True, "restartCount": 2}, {"ready": False, "restartCount": 1}],
        },
    }
    kind = kind_of("", "v1", "pods")
    assert cells(tables.table(kind, [pod], NOW))[0][:5] == ["web-1", "1/2", "Running", 3, "30s"]
    deleting = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": stamp(timedelta(0))}}
    assert cells(tables.table(kind, [deleting], NOW))[0][2] == "Terminating"


def test_nodepools_print_their_crd_printer_columns() -> None:
    nodepool = {
        "metadata": {"name": "default", "creationTimestamp": stamp(timedelta(hours=3))},
        "spec": {"template": {"spec": {"nodeClassRef": {"name": "default"}}}, "weight": 10},
        "status": {
            "nodes": 2,
            "resources": {"nodes": "2"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    table = tables.table(kind_of("karpenter.sh", "v1", "nodepools"), [nodepool], NOW)
    assert names(table) == ["Name", "NodeClass", "Nodes", "Ready", "Age"]
    assert cells(table)[0][:5] == ["default", "default", "2", "True", "3h"]
    nodeclass = {"metadata": {"name": "default"}, "spec": {"role": "KarpenterNodeRole-x"}}
    table = tables.table(kind_of("karpenter.k8s.aws", "v1", "ec2nodeclasses"), [nodeclass], NOW)
    assert cells(table)[0] == ["default", None, None, "KarpenterNodeRole-x"]


def test_nodeclaims_print_karpenters_columns_from_their_labels() -> None:
    claim = {
        "metadata": {
            "name": "default-abcde",
            "labels": {
                "node.kubernetes.io/instance-type": "m5.large",
                "karpenter.sh/capacity-type": "on-demand",
                "topology.kubernetes.io/zone": "us-east-1a",
            },
        },
        "status": {"nodeName": "ip-1", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    table = tables.table(kind_of("karpenter.sh", "v1", "nodeclaims"), [claim], NOW, include_object="None")
    assert names(table) == ["Name", "Type", "Capacity", "Zone", "Node", "Ready", "Age"]
    assert cells(table)[0][:6] == ["default-abcde", "m5.large", "on-demand", "us-east-1a", "ip-1", "True"]
    assert "object" not in table["rows"][0]


def test_jsonpath_subset() -> None:
    obj = {"a": {"b.c": [{"k": "x", "v": 1}, {"k": "y", "v": 2}]}}
    assert find(obj, ".a['b\\.c'][?(@.k==\"y\")].v") == [2]
    assert find(obj, r"{.a['b\.c'][*].k}") == ["x", "y"]
    assert find(obj, r".a['b\.c'][0].v") == [1]
    assert find(obj, ".missing.field") == []
    with pytest.raises(JsonPathError):
        find(obj, ".a..b")


def test_openapi_documents_serve_patch_with_field_validation_for_every_kind() -> None:
    index = openapi.index()["paths"]
    assert {"api/v1", "apis/apps/v1", "apis/karpenter.sh/v1", "apis/karpenter.k8s.aws/v1"} <= index.keys()
    document = json.loads(openapi.document_body("apis/karpenter.sh/v1") or b"")
    patch = document["paths"]["/apis/karpenter.sh/v1/nodepools/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {
        "group": "karpenter.sh",
        "version": "v1",
        "kind": "NodePool",
    }
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}
    schema = document["components"]["schemas"]["sh.karpenter.v1.NodePool"]
    assert schema["x-kubernetes-group-version-kind"] == [
        {"group": "karpenter.sh", "version": "v1", "kind": "NodePool"}
    ]
    core = json.loads(openapi.document_body("api/v1") or b"")
    ports = core["components"]["schemas"]["io.k8s.api.v1.Container"]["properties"]["ports"]
    assert ports["x-kubernetes-patch-merge-key"] == "containerPort"
    assert openapi.document_body("apis/nothing/v1") is None


def test_strict_validation_names_each_unknown_field_and_warn_returns_them() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"any": "label"}},
        "spec": {
            "containers": [
                {"name": "a", "image": "i", "resources": {"requests": {"cpu": "1"}}, "imagePullPolicyy": "x"}
            ]
        },
        "extra": True,
    }
    kind = kind_of("", "v1", "pods")
    with pytest.raises(ApiError) as refused:
        field_validation.check(kind, "Strict", pod)
    assert refused.value.code == 400
    assert refused.value.message == (
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
        'unknown field "spec.containers[0].imagePullPolicyy", unknown field "extra"'
    )
    assert field_validation.check(kind, "Warn", pod) == [
        'unknown field "spec.containers[0].imagePullPolicyy"',
        'unknown field "extra"',
    ]
    assert field_validation.check(kind, "Ignore", pod) == []
    with pytest.raises(ApiError):
        field_validation.check(kind, "Sloppy", pod)


def test_strict_validation_accepts_a_valid_nodepool_and_patch_directives() -> None:
    kind = kind_of("karpenter.sh", "v1", "nodepools")
    nodepool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default", "annotations": {"a": "b"}},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                }
            },
            "limits": {"cpu": 1000},
        },
    }
    assert field_validation.check(kind, "Strict", nodepool) == []
    patch = {"metadata": {"$setElementOrder/finalizers": ["x"], "labels": None}, "spec": {"weight": 3}}
    assert field_validation.check(kind, "Strict", patch) == []


def test_a_table_watch_sends_the_columns_once() -> None:
    kind = kind_of("", "v1", "configmaps")
    encoder = kubectl_support.TableWatchEncoder(kind, ManualClock(NOW), {})
    first, second = (
        json.loads(encoder.line(event, {"metadata": {"name": name}, "data": {"a": "b"}}))
        for event, name in (("ADDED", "x"), ("DELETED", "y"))
    )
    assert first["type"] == "ADDED" and names(first["object"]) == ["Name", "Data", "Age"]
    assert second["type"] == "DELETED" and second["object"]["columnDefinitions"] == []
    assert cells(second["object"]) == [["y", 1, "<unknown>"]]
