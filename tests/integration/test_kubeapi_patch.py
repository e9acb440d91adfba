"""Merge, strategic merge and JSON patches on the simulated API server, as the python client sends them."""

# The client declares every model field Optional and custom objects as `object`; a None or a non-dict
# there fails the test anyway, so these checks would only add noise.
# mypy: disable-error-code="union-attr,index"

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from serverless_karpenter.clock import ManualClock
from serverless_karpenter_sim.kubeapi import KubeApiServer

pytestmark = pytest.mark.integration


def status_of(err: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(err.body or "{}")
    return body


NODECLAIMS = ("karpenter.sh", "v1", "nodeclaims")


@dataclass
class Kube:
    server: KubeApiServer
    api: client.ApiClient
    core: client.CoreV1Api
    apps: client.AppsV1Api
    custom: client.CustomObjectsApi


@pytest.fixture
def kube() -> Iterator[Kube]:
    server = KubeApiServer(ManualClock())
    server.start()
    api = client.ApiClient(server.client_configuration())
    try:
        yield Kube(server, api, client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api))
    finally:
        api.close()
        server.stop()


def make_deployment(kube: Kube) -> client.V1Deployment:
    return kube.apps.create_namespaced_deployment(
        "default",
        client.V1Deployment(
            metadata=client.V1ObjectMeta(name="web", labels={"app": "web", "team": "a"}),
            spec=client.V1DeploymentSpec(
                selector=client.V1LabelSelector(match_labels={"app": "web"}),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels={"app": "web"}),
                    spec=client.V1PodSpec(
                        containers=[
                            client.V1Container(
                                name="app",
                                image="app:1",
                                ports=[client.V1ContainerPort(container_port=80, name="http")],
                            ),
                            client.V1Container(name="sidecar", image="proxy:1"),
                        ],
                        tolerations=[client.V1Toleration(key="a", operator="Exists")],
                    ),
                ),
            ),
        ),
    )


def make_node(kube: Kube) -> client.V1Node:
    return kube.core.create_node(
        client.V1Node(
            metadata=client.V1ObjectMeta(name="n1", finalizers=["karpenter.sh/termination"]),
            spec=client.V1NodeSpec(
                provider_id="aws:///us-east-1a/i-0123",
                taints=[
                    client.V1Taint(key="karpenter.sh/unregistered", effect="NoExecute"),
                    client.V1Taint(key="node.kubernetes.io/not-ready", effect="NoSchedule"),
                ],
            ),
            status=client.V1NodeStatus(
                conditions=[
                    client.V1NodeCondition(type="Ready", status="False"),
                    client.V1NodeCondition(type="MemoryPressure", status="False"),
                ]
            ),
        )
    )


def nodeclaim(kube: Kube) -> dict[str, Any]:
    created = kube.custom.create_cluster_custom_object(
        *NODECLAIMS,
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "name": "default-abcde",
                "labels": {"karpenter.sh/nodepool": "default"},
                "finalizers": ["karpenter.sh/termination"],
            },
            "spec": {
                "requirements": [{"key": "a", "operator": "In", "values": ["1"]}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            },
        },
    )
    assert isinstance(created, dict)
    return created


def test_merge_patch_on_custom_objects(kube: Kube) -> None:
    created = nodeclaim(kube)
    patched = kube.custom.patch_cluster_custom_object(
        *NODECLAIMS,
        "default-abcde",
        {"metadata": {"labels": {"karpenter.sh/nodepool": None, "extra": "yes"}, "finalizers": []}},
    )
    assert patched["metadata"]["labels"] == {"extra": "yes"}
    assert patched["spec"] == created["spec"]
    assert patched["metadata"]["finalizers"] == []  # lists replace
    assert patched["metadata"]["generation"] == 1  # metadata alone is no new generation
    # Karpenter's CRD makes a NodeClaim's spec immutable (x-kubernetes-validations: self == oldSelf).
    with pytest.raises(ApiException) as err:
        kube.custom.patch_cluster_custom_object(
            *NODECLAIMS, "default-abcde", {"spec": {"requirements": [{"key": "b", "operator": "Exists"}]}}
        )
    assert err.value.status == 422 and "spec is immutable" in status_of(err.value)["message"]


def test_strategic_merge_by_name_on_containers(kube: Kube) -> None:
    make_deployment(kube)
    patched = kube.apps.patch_namespaced_deployment(
        "web",
        "default",
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "sidecar", "image": "proxy:2"},
                            {"name": "app", "ports": [{"containerPort": 8080, "name": "alt"}]},
                            {"name": "logger", "image": "fluent:1"},
                        ]
                    }
                }
            },
        },
    )
    containers = {c.name: c for c in patched.spec.template.spec.containers}
    assert [c.name for c in patched.spec.template.spec.containers] == ["app", "sidecar", "logger"]
    assert containers["app"].image == "app:1"
    assert {p.container_port for p in containers["app"].ports} == {80, 8080}
    assert containers["sidecar"].image == "proxy:2"

    removed = kube.apps.patch_namespaced_deployment(
        "web",
        "default",
        {"spec": {"template": {"spec": {"containers": [{"name": "logger", "$patch": "delete"}]}}}},
    )
    assert [c.name for c in removed.spec.template.spec.containers] == ["app", "sidecar"]


def test_strategic_merge_replaces_tolerations_and_taints_whole(kube: Kube) -> None:
    make_deployment(kube)
    patched = kube.apps.patch_namespaced_deployment(
        "web",
        "default",
        {"spec": {"template": {"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}}}},
    )
    assert [t.key for t in patched.spec.template.spec.tolerations] == ["b"]

    make_node(kube)
    node = kube.core.patch_node(
        "n1", {"spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}}
    )
    assert [t.key for t in node.spec.taints] == ["karpenter.sh/disrupted"]


def test_strategic_merge_conditions_by_type_and_finalizers_as_a_set(kube: Kube) -> None:
    make_node(kube)
    node = kube.core.patch_node_status(
        "n1", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    )
    assert {c.type: c.status for c in node.status.conditions} == {"Ready": "True", "MemoryPressure": "False"}

    node = kube.core.patch_node(
        "n1", {"metadata": {"finalizers": ["example.com/other", "karpenter.sh/termination"]}}
    )
    assert node.metadata.finalizers == ["karpenter.sh/termination", "example.com/other"]
    node = kube.core.patch_node(
        "n1", {"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/other"]}}
    )
    assert node.metadata.finalizers == ["karpenter.sh/termination"]


def test_strategic_merge_owner_references_by_uid_and_map_directives(kube: Kube) -> None:
    make_node(kube)
    ref = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": "default-abcde", "uid": "u-1"}
    kube.core.patch_node("n1", {"metadata": {"ownerReferences": [ref], "labels": {"a": "1", "b": "2"}}})
    node = kube.core.patch_node(
        "n1", {"metadata": {"ownerReferences": [{**ref, "uid": "u-2", "name": "other"}]}}
    )
    assert [o.uid for o in node.metadata.owner_references] == ["u-1", "u-2"]

    node = kube.core.patch_node("n1", {"metadata": {"labels": {"$patch": "replace", "c": "3"}}})
    assert node.metadata.labels == {"c": "3"}
    node = kube.core.patch_node("n1", {"metadata": {"annotations": {"x": "y"}}})
    node = kube.core.patch_node("n1", {"metadata": {"annotations": {"$patch": "delete"}}})
    assert node.metadata.annotations is None


def test_json_patch(kube: Kube) -> None:
    make_node(kube)
    node = kube.core.patch_node(
        "n1",
        [
            {"op": "add", "path": "/metadata/labels", "value": {"karpenter.sh/initialized": "true"}},
            {"op": "remove", "path": "/spec/taints/0"},
            {"op": "add", "path": "/spec/unschedulable", "value": True},
        ],
    )
    assert node.metadata.labels == {"karpenter.sh/initialized": "true"}
    assert [t.key for t in node.spec.taints] == ["node.kubernetes.io/not-ready"]
    assert node.spec.unschedulable is True

    with pytest.raises(ApiException) as err:
        kube.core.patch_node("n1", [{"op": "test", "path": "/spec/unschedulable", "value": False}])
    assert err.value.status == 422

    nodeclaim(kube)
    claim = kube.custom.patch_cluster_custom_object(
        *NODECLAIMS,
        "default-abcde",
        [{"op": "remove", "path": "/metadata/finalizers/0"}],
        _content_type="application/json-patch+json",
    )
    assert claim["metadata"]["finalizers"] == []


def test_patch_carrying_a_resource_version_is_checked(kube: Kube) -> None:
    node = make_node(kube)
    current = node.metadata.resource_version
    patched = kube.core.patch_node("n1", {"metadata": {"resourceVersion": current, "labels": {"a": "1"}}})
    assert patched.metadata.labels == {"a": "1"}
    with pytest.raises(ApiException) as err:
        kube.core.patch_node("n1", {"metadata": {"resourceVersion": current, "labels": {"a": "2"}}})
    assert err.value.status == 409 and status_of(err.value)["reason"] == "Conflict"

    created = nodeclaim(kube)
    with pytest.raises(ApiException) as err:
        kube.custom.patch_cluster_custom_object(
            *NODECLAIMS,
            "default-abcde",
            [
                {
                    "op": "test",
                    "path": "/metadata/resourceVersion",
                    "value": created["metadata"]["resourceVersion"],
                },
                {"op": "replace", "path": "/metadata/resourceVersion", "value": "1"},
                {"op": "remove", "path": "/metadata/finalizers"},
            ],
            _content_type="application/json-patch+json",
        )
    assert err.value.status == 409


def test_strategic_merge_is_refused_on_custom_resources(kube: Kube) -> None:
    nodeclaim(kube)
    with pytest.raises(ApiException) as err:
        kube.custom.patch_cluster_custom_object(
            *NODECLAIMS,
            "default-abcde",
            {"metadata": {"labels": {"a": "b"}}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert err.value.status == 415


def test_status_and_main_resource_do_not_leak_into_each_other(kube: Kube) -> None:
    make_node(kube)
    node = kube.core.patch_node(
        "n1",
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}, "metadata": {"labels": {"a": "1"}}},
    )
    assert node.metadata.labels == {"a": "1"}
    assert {c.type: c.status for c in node.status.conditions}["Ready"] == "False"
    node = kube.core.patch_node_status(
        "n1",
        {
            "spec": {"unschedulable": True},
            "metadata": {"labels": {"b": "2"}},
            "status": {"allocatable": {"cpu": "2"}},
        },
    )
    assert node.spec.unschedulable is None and node.metadata.labels == {"a": "1"}
    assert node.status.allocatable == {"cpu": "2"}


def test_pod_spec_is_immutable_except_what_upstream_allows(kube: Kube) -> None:
    kube.core.create_namespaced_pod(
        "default",
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="p"),
            spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="i:1")]),
        ),
    )
    kube.core.patch_namespaced_pod("p", "default", {"spec": {"containers": [{"name": "c", "image": "i:2"}]}})
    with pytest.raises(ApiException) as err:
        kube.core.patch_namespaced_pod("p", "default", {"spec": {"nodeName": "n1"}})
    assert err.value.status == 422
    assert "pod updates may not change fields" in status_of(err.value)["message"]


def test_unknown_patch_types_are_unsupported(kube: Kube) -> None:
    make_node(kube)
    # the typed API refuses to send other media types, so go through the client's transport
    response = kube.api.rest_client.request(
        "PATCH",
        f"{kube.server.url}/api/v1/nodes/n1",
        headers={
            "Content-Type": "application/xml",
            "Authorization": kube.api.configuration.get_api_key_with_prefix("BearerToken"),
        },
        body="<node/>",
    )
    assert response.status == 415
    assert json.loads(response.read())["reason"] == "UnsupportedMediaType"


def test_patching_a_missing_object_is_not_found(kube: Kube) -> None:
    with pytest.raises(ApiException) as err:
        kube.core.patch_node("ghost", {"metadata": {"labels": {"a": "b"}}})
    assert err.value.status == 404


def test_apply_patch_creates_then_merges(kube: Kube) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "1"}}
    created = kube.core.patch_namespaced_config_map(
        "cfg", "default", body, field_manager="karpenter", _content_type="application/apply-patch+yaml"
    )
    assert created.data == {"a": "1"} and created.metadata.uid
    body["data"] = {"b": "2"}
    merged = kube.core.patch_namespaced_config_map(
        "cfg", "default", body, field_manager="karpenter", _content_type="application/apply-patch+yaml"
    )
    assert merged.data == {"a": "1", "b": "2"}  # no field ownership: an approximation of server-side apply
    with pytest.raises(ApiException) as err:
        kube.core.patch_namespaced_config_map(
            "cfg", "default", body, _content_type="application/apply-patch+yaml"
        )
    assert err.value.status == 400  # fieldManager is required


def test_patching_events_through_events_v1(kube: Kube) -> None:
    events = client.EventsV1Api(kube.api)
    events.create_namespaced_event(
        "default",
        client.EventsV1Event(
            metadata=client.V1ObjectMeta(name="e1"),
            event_time=datetime(2026, 1, 1, tzinfo=UTC),
            regarding=client.V1ObjectReference(kind="Node", name="n1"),
            note="first",
            reason="Unconsolidatable",
            reporting_controller="karpenter",
            reporting_instance="lambda",
            action="Consolidate",
            type="Normal",
        ),
    )
    patched = events.patch_namespaced_event(
        "e1",
        "default",
        {"note": "second", "series": {"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"}},
    )
    assert patched.note == "second" and patched.series.count == 2
    as_core = kube.core.read_namespaced_event("e1", "default")
    assert as_core.message == "second" and as_core.involved_object.name == "n1"
