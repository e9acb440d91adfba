"""The cluster actors' informers (``cluster/informer.py``): what they hold is what a LIST over HTTP returns,
at the cost of the changes since their last read; a cursor past the watch history relists."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from serverless_karpenter.clock import ManualClock
from serverless_karpenter_sim.cluster import InMemoryInstances, KubeletFleet, Scheduler, WorkloadControllers
from serverless_karpenter_sim.cluster.informer import InformedRest, kind_of_path
from serverless_karpenter_sim.cluster.objects import KubeRest
from serverless_karpenter_sim.cluster_access import component_clients
from serverless_karpenter_sim.kubeapi import KubeApiServer

from tests.integration.test_sim_cluster_scheduling import Sim, deployment, shape

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
PODS = "/api/v1/pods"


@pytest.fixture
def server() -> Iterator[KubeApiServer]:
    # A short watch history, so that a few writes push an idle informer's cursor out of its window.
    api_server = KubeApiServer(ManualClock(), watch_history=16)
    api_server.start()
    yield api_server
    api_server.stop()


def pod(name: str, **labels: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "pause"}]},
    }


def http_list(rest: KubeRest, path: str) -> list[Obj]:
    items: list[Obj] = rest.request("GET", path).get("items") or []
    return items


def test_paths_name_their_kinds() -> None:
    pods, deployments = kind_of_path(PODS), kind_of_path("/apis/apps/v1/deployments")
    assert pods is not None and pods.plural == "pods" and pods.group == ""
    assert deployments is not None and deployments.group == "apps"
    assert kind_of_path("/api/v1/namespaces/default/pods") is None  # a namespaced path: over HTTP


def test_informer_holds_what_a_list_returns_after_creates_patches_and_deletes(server: KubeApiServer) -> None:
    api = component_clients(server)["driver"]
    admin = KubeRest(api)
    informed = InformedRest(api, server.store)
    for i in range(5):
        admin.create("/api/v1/namespaces/default/pods", pod(f"p{i}", app="a"))
    assert informed.list(PODS) == http_list(admin, PODS)
    informer = informed._informers[PODS]
    first = informed.list(PODS)
    assert informed.list(PODS) is first  # nothing written: the same list, nothing decoded

    admin.patch("/api/v1/namespaces/default/pods/p1", {"metadata": {"labels": {"app": "b"}}})
    admin.delete("/api/v1/namespaces/default/pods/p3", grace_period_seconds=0)
    admin.create("/api/v1/namespaces/default/pods", pod("p0a"))
    before = informer.events
    assert informed.list(PODS) == http_list(admin, PODS)  # in the LIST's (key) order too
    assert informer.events - before == 3  # only the three writes were read
    assert informer.relists == 1
    # A filtered LIST still goes to the server, selector and all.
    assert [p["metadata"]["name"] for p in informed.list(PODS, labelSelector="app=b")] == ["p1"]


def test_a_cursor_older_than_the_watch_history_relists(server: KubeApiServer) -> None:
    api = component_clients(server)["driver"]
    admin = KubeRest(api)
    informed = InformedRest(api, server.store)
    admin.create("/api/v1/namespaces/default/pods", pod("first"))
    assert len(informed.list(PODS)) == 1
    for i in range(30):  # past the 16 (+25%) events the pods' history keeps
        admin.create("/api/v1/namespaces/default/pods", pod(f"p{i:02d}"))
    assert informed.list(PODS) == http_list(admin, PODS)
    assert informed._informers[PODS].relists == 2  # 410 Gone, met by a new LIST as a reflector meets it


def test_actors_on_informers_run_a_deployment_as_over_http(server: KubeApiServer) -> None:
    clock = server.clock
    assert isinstance(clock, ManualClock)
    clients = component_clients(server)
    instances = InMemoryInstances()
    store = server.store
    kubelets = KubeletFleet(clients["kubelets"], instances, shape, store=store)
    scheduler = Scheduler(clients["scheduler"], seed=7, store=store)
    controllers = WorkloadControllers(clients["controllers"], seed=7, store=store)
    api = clients["driver"]
    sim = Sim(clock, api, client.CoreV1Api(api), instances, kubelets, scheduler, controllers, KubeRest(api))
    sim.ready_nodes(2)
    sim.create(deployment("web", 6, cpu="1"))
    sim.tick(10)
    pods = sim.pods("app=web")
    assert len(pods) == 6
    assert all(p["status"].get("phase") == "Running" for p in pods)
    assert len({p["spec"]["nodeName"] for p in pods}) == 2
