"""Fault injection on the simulated API server, seen through the official client."""

# The client declares every model field Optional and custom objects as `object`; a None or a non-dict
# there fails the test anyway, so these checks would only add noise.
# mypy: disable-error-code="union-attr,index"

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from serverless_karpenter.clock import ManualClock
from serverless_karpenter_sim.kubeapi import KubeApiServer

pytestmark = pytest.mark.integration


def status_of(err: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(err.body or "{}")
    return body


@dataclass
class Kube:
    server: KubeApiServer
    core: client.CoreV1Api


@pytest.fixture
def kube() -> Iterator[Kube]:
    server = KubeApiServer(ManualClock())
    server.start()
    api = client.ApiClient(server.client_configuration())
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map("default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c")))
    try:
        yield Kube(server, core)
    finally:
        api.close()
        server.stop()


def new_config_map(name: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name))


@pytest.mark.parametrize(("status", "reason"), [(500, "InternalError"), (503, "ServiceUnavailable")])
def test_server_errors_on_list(kube: Kube, status: int, reason: str) -> None:
    kube.server.faults.add(verb="list", resource="configmaps", status=status, times=1)
    with pytest.raises(ApiException) as err:
        kube.core.list_namespaced_config_map("default")
    assert err.value.status == status
    assert status_of(err.value)["reason"] == reason
    assert len(kube.core.list_namespaced_config_map("default").items) == 1  # only once
    assert kube.server.faults.injected == 1
    assert kube.server.faults.counts[("list", "configmaps", str(status))] == 1


def test_conflict_on_update(kube: Kube) -> None:
    kube.server.faults.add(verb="update", resource="configmaps", status=409)
    current = kube.core.read_namespaced_config_map("c", "default")
    with pytest.raises(ApiException) as err:
        kube.core.replace_namespaced_config_map("c", "default", current)
    assert err.value.status == 409 and status_of(err.value)["reason"] == "Conflict"
    current.data = {"a": "1"}
    assert kube.core.replace_namespaced_config_map("c", "default", current).data == {"a": "1"}


def test_throttling_with_retry_after(kube: Kube) -> None:
    kube.server.faults.add(verb="create", resource="configmaps", status=429, times=2, retry_after=1)
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            kube.core.create_namespaced_config_map("default", new_config_map("d"))
        assert err.value.status == 429
        assert err.value.headers["Retry-After"] == "1"
        assert status_of(err.value)["details"]["retryAfterSeconds"] == 1
    kube.core.create_namespaced_config_map("default", new_config_map("d"))


def test_rules_match_verb_resource_and_name(kube: Kube) -> None:
    faults = kube.server.faults
    faults.add(verb="get", resource="configmaps", name="other", status=500, times=None)
    faults.add(verb="delete", resource="pods", status=500, times=None)
    kube.core.read_namespaced_config_map("c", "default")  # another name
    kube.core.delete_namespaced_config_map("c", "default")  # another resource
    with pytest.raises(ApiException):
        kube.core.read_namespaced_config_map("other", "default")
    with pytest.raises(ApiException):
        kube.core.read_namespaced_config_map("other", "default")  # times=None: until cleared
    faults.clear()
    with pytest.raises(ApiException) as err:
        kube.core.read_namespaced_config_map("other", "default")
    assert err.value.status == 404  # the real answer again
    assert faults.injected == 2


def test_wildcards_and_subresources(kube: Kube) -> None:
    kube.core.create_namespaced_pod(
        "default",
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="p"),
            spec=client.V1PodSpec(node_name="n1", containers=[client.V1Container(name="c", image="i")]),
        ),
    )
    kube.server.faults.add(verb="create", resource="pods/eviction", status=500)
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="p", namespace="default"))
    with pytest.raises(ApiException) as err:
        kube.core.create_namespaced_pod_eviction("p", "default", eviction)
    assert err.value.status == 500
    assert kube.server.audit.evictions_allowed == 0  # refused before reaching the eviction logic

    kube.server.faults.add(status=503, times=2)  # any verb, any resource
    with pytest.raises(ApiException):
        kube.core.list_node()
    with pytest.raises(ApiException):
        kube.core.read_namespaced_pod("p", "default")
    kube.core.list_node()


def test_timeout_closes_without_an_answer(kube: Kube) -> None:
    kube.server.faults.add(verb="create", resource="configmaps", status="timeout")
    with pytest.raises(urllib3.exceptions.ProtocolError):  # a POST is never retried by urllib3
        kube.core.create_namespaced_config_map("default", new_config_map("d"))
    assert kube.server.faults.injected == 1
    with pytest.raises(ApiException) as err:
        kube.core.read_namespaced_config_map("d", "default")
    assert err.value.status == 404  # the create never happened


def test_timeout_past_the_clients_read_timeout(kube: Kube) -> None:
    kube.server.faults.add(verb="create", resource="configmaps", status="timeout", delay_seconds=2.0)
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        kube.core.create_namespaced_config_map("default", new_config_map("d"), _request_timeout=0.2)


def test_a_single_timeout_on_a_get_is_absorbed_by_urllib3_retries(kube: Kube) -> None:
    kube.server.faults.add(verb="get", resource="configmaps", status="timeout", times=1)
    assert kube.core.read_namespaced_config_map("c", "default").metadata.name == "c"
    assert kube.server.faults.injected == 1
    assert kube.server.audit.request_count["get"] == 2


def test_drop_cuts_a_list_mid_body(kube: Kube) -> None:
    kube.server.faults.add(verb="list", resource="configmaps", status="drop")
    with pytest.raises(urllib3.exceptions.ProtocolError):
        kube.core.list_namespaced_config_map("default")
    assert [c.metadata.name for c in kube.core.list_namespaced_config_map("default").items] == ["c"]


def test_drop_after_a_write_leaves_the_outcome_unknown_to_the_client(kube: Kube) -> None:
    kube.server.faults.add(verb="create", resource="configmaps", status="drop")
    with pytest.raises(urllib3.exceptions.ProtocolError):
        kube.core.create_namespaced_config_map("default", new_config_map("d"))
    assert kube.core.read_namespaced_config_map("d", "default").metadata.name == "d"  # it was written


def test_drop_cuts_a_watch_stream(kube: Kube) -> None:
    kube.server.faults.add(verb="watch", resource="configmaps", status="drop")
    with pytest.raises(urllib3.exceptions.ProtocolError):
        for _ in watch.Watch().stream(kube.core.list_namespaced_config_map, "default", timeout_seconds=5):
            pass


def test_error_status_on_a_watch(kube: Kube) -> None:
    kube.server.faults.add(verb="watch", resource="configmaps", status=500)
    with pytest.raises(ApiException) as err:
        for _ in watch.Watch().stream(kube.core.list_namespaced_config_map, "default", timeout_seconds=5):
            pass
    assert err.value.status == 500


def test_invalid_rules_are_refused(kube: Kube) -> None:
    with pytest.raises(ValueError):
        kube.server.faults.add(verb="explode")
    with pytest.raises(ValueError):
        kube.server.faults.add(status="slow")
    with pytest.raises(ValueError):
        kube.server.faults.add(status=200)
