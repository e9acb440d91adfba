"""Label selectors, field selectors and limit/continue pagination on the simulated API server."""

# The client declares every model field Optional and custom objects as `object`; a None or a non-dict
# there fails the test anyway, so these checks would only add noise.
# mypy: disable-error-code="union-attr,index"

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
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


PODS = {
    # name: (labels, nodeName, phase)
    "web-1": ({"app": "web", "tier": "front", "rank": "1"}, "n1", "Running"),
    "web-2": ({"app": "web", "tier": "front", "rank": "5"}, "n2", "Running"),
    "db-1": ({"app": "db", "tier": "back"}, "n1", "Succeeded"),
    "batch-1": ({"app": "batch"}, None, "Pending"),
    "bare": ({}, None, "Pending"),
}


@pytest.fixture(scope="module")
def core() -> Iterator[client.CoreV1Api]:
    server = KubeApiServer(ManualClock())
    server.start()
    api = client.ApiClient(server.client_configuration())
    core = client.CoreV1Api(api)
    for name, (labels, node, phase) in PODS.items():
        core.create_namespaced_pod(
            "default",
            client.V1Pod(
                metadata=client.V1ObjectMeta(name=name, labels=labels or None),
                spec=client.V1PodSpec(node_name=node, containers=[client.V1Container(name="c", image="i")]),
                status=client.V1PodStatus(phase=phase),
            ),
        )
    core.create_namespaced_pod(
        "kube-system",
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="web-sys", labels={"app": "web"}),
            spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="i")]),
        ),
    )
    for name, unschedulable in (("n1", None), ("n2", True)):
        core.create_node(
            client.V1Node(
                metadata=client.V1ObjectMeta(name=name), spec=client.V1NodeSpec(unschedulable=unschedulable)
            )
        )
    try:
        yield core
    finally:
        api.close()
        server.stop()


def names(items: list) -> set[str]:
    return {item.metadata.name for item in items}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", {"web-1", "web-2"}),
        ("app==web", {"web-1", "web-2"}),
        ("app!=web", {"db-1", "batch-1", "bare"}),  # objects without the key match too
        ("app in (web,db)", {"web-1", "web-2", "db-1"}),
        ("app notin (web, db)", {"batch-1", "bare"}),
        ("tier", {"web-1", "web-2", "db-1"}),
        ("!tier", {"batch-1", "bare"}),
        ("app=web,tier=front", {"web-1", "web-2"}),
        ("tier in (front),!rank", set()),
        ("rank>2", {"web-2"}),
        ("rank<2", {"web-1"}),
        ("  app = web , rank in ( 1 ) ", {"web-1"}),
        ("", set(PODS)),
    ],
)
def test_label_selectors(core: client.CoreV1Api, selector: str, expected: set[str]) -> None:
    assert names(core.list_namespaced_pod("default", label_selector=selector).items) == expected


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("spec.nodeName=n1", {"web-1", "db-1"}),
        ("spec.nodeName==n2", {"web-2"}),
        ("spec.nodeName=", {"batch-1", "bare"}),
        ("spec.nodeName!=", {"web-1", "web-2", "db-1"}),
        ("status.phase=Running", {"web-1", "web-2"}),
        ("status.phase!=Succeeded,status.phase!=Failed", {"web-1", "web-2", "batch-1", "bare"}),
        ("spec.nodeName=n1,status.phase=Running", {"web-1"}),
        ("metadata.name=bare", {"bare"}),
        ("metadata.namespace=default,metadata.name!=bare", {"web-1", "web-2", "db-1", "batch-1"}),
    ],
)
def test_pod_field_selectors(core: client.CoreV1Api, selector: str, expected: set[str]) -> None:
    assert names(core.list_namespaced_pod("default", field_selector=selector).items) == expected


def test_field_and_label_selectors_combine_across_namespaces(core: client.CoreV1Api) -> None:
    found = core.list_pod_for_all_namespaces(label_selector="app=web", field_selector="spec.nodeName=")
    assert {(p.metadata.namespace, p.metadata.name) for p in found.items} == {("kube-system", "web-sys")}


def test_node_unschedulable_field(core: client.CoreV1Api) -> None:
    assert names(core.list_node(field_selector="spec.unschedulable=true").items) == {"n2"}
    assert names(core.list_node(field_selector="spec.unschedulable=false").items) == {"n1"}
    assert names(core.list_node(field_selector="spec.unschedulable!=true").items) == {"n1"}


@pytest.mark.parametrize("selector", ["app in web", "app=(x", "=web", "app in (a,b", "a$b=c"])
def test_malformed_label_selectors_are_bad_requests(core: client.CoreV1Api, selector: str) -> None:
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod("default", label_selector=selector)
    assert err.value.status == 400


def test_unsupported_field_labels_are_bad_requests(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod("default", field_selector="spec.priority=5")
    assert err.value.status == 400
    assert status_of(err.value)["message"] == "field label not supported: spec.priority"
    with pytest.raises(ApiException):
        core.list_node(field_selector="spec.nodeName=n1")


def test_pagination_is_a_consistent_snapshot(core: client.CoreV1Api) -> None:
    for i in range(7):
        core.create_namespaced_config_map(
            "kube-public", client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"page-{i}"))
        )
    first = core.list_namespaced_config_map("kube-public", limit=3)
    assert [c.metadata.name for c in first.items] == ["page-0", "page-1", "page-2"]
    assert first.metadata._continue and first.metadata.remaining_item_count == 4

    # written after the first page: a continuation does not see it, as with etcd's snapshot reads
    core.create_namespaced_config_map(
        "kube-public", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="page-9"))
    )
    second = core.list_namespaced_config_map("kube-public", limit=3, _continue=first.metadata._continue)
    assert [c.metadata.name for c in second.items] == ["page-3", "page-4", "page-5"]
    assert second.metadata.resource_version == first.metadata.resource_version
    third = core.list_namespaced_config_map("kube-public", limit=3, _continue=second.metadata._continue)
    assert [c.metadata.name for c in third.items] == ["page-6"]
    assert not third.metadata._continue

    fresh = core.list_namespaced_config_map("kube-public", limit=100)
    assert len(fresh.items) == 8 and not fresh.metadata._continue


def test_expired_continue_token_is_gone(core: client.CoreV1Api) -> None:
    token = base64.urlsafe_b64encode(json.dumps({"rv": 1, "start": 10**9}).encode()).decode()
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod("default", limit=1, _continue=token)
    assert err.value.status == 410
    assert status_of(err.value)["reason"] == "Expired"


def test_pagination_with_a_selector(core: client.CoreV1Api) -> None:
    first = core.list_namespaced_pod("default", label_selector="app=web", limit=1)
    second = core.list_namespaced_pod(
        "default", label_selector="app=web", limit=1, _continue=first.metadata._continue
    )
    assert names(first.items) | names(second.items) == {"web-1", "web-2"}
    assert not second.metadata._continue
