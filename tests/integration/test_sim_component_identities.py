"""The simulated cluster's own components act under their own identities, with their upstream roles."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s
from serverless_karpenter.clock import ManualClock
from serverless_karpenter_sim.cluster_access import component_clients
from serverless_karpenter_sim.kubeapi import KubeApiServer

pytestmark = pytest.mark.integration

POD = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}


@pytest.fixture
def clients() -> Iterator[dict[str, k8s.ApiClient]]:
    with KubeApiServer(ManualClock()) as server:
        made = component_clients(server)
        core = k8s.CoreV1Api(made["driver"])
        core.create_node({"metadata": {"name": "n1"}})
        core.create_namespaced_pod("default", POD)
        yield made


def test_the_scheduler_binds_pods_and_nothing_more(clients: dict[str, k8s.ApiClient]) -> None:
    scheduler = k8s.CoreV1Api(clients["scheduler"])
    assert [n.metadata.name for n in scheduler.list_node().items] == ["n1"]
    binding = {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}}
    scheduler.create_namespaced_pod_binding("p", "default", binding)
    for forbidden in (
        lambda: scheduler.delete_node("n1"),
        lambda: scheduler.create_namespaced_pod("default", {**POD, "metadata": {"name": "q"}}),
        lambda: scheduler.patch_node("n1", {"metadata": {"labels": {"a": "b"}}}),
    ):
        with pytest.raises(k8s.ApiException) as err:
            forbidden()
        assert err.value.status == 403
        assert 'User "system:kube-scheduler" cannot' in json.loads(err.value.body)["message"]


def test_the_schedulers_rights_are_its_bootstrap_binding(clients: dict[str, k8s.ApiClient]) -> None:
    k8s.RbacAuthorizationV1Api(clients["driver"]).delete_cluster_role_binding("system:kube-scheduler")
    with pytest.raises(k8s.ApiException) as err:
        k8s.CoreV1Api(clients["scheduler"]).list_node()
    assert err.value.status == 403
