"""The simulated kube-scheduler, kubelets and workload controllers against the simulated API server, over
HTTP with the official client, on virtual time."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from serverless_karpenter.clock import ManualClock
from serverless_karpenter_sim.cluster import (
    InMemoryInstances,
    KubeletFleet,
    NodeShape,
    Scheduler,
    SimInstance,
    WorkloadControllers,
)
from serverless_karpenter_sim.cluster.objects import KubeRest
from serverless_karpenter_sim.cluster_access import component_clients
from serverless_karpenter_sim.kubeapi import KubeApiServer

from tests import builders

pytestmark = pytest.mark.integration

_PLURALS = {
    "Deployment": "deployments",
    "DaemonSet": "daemonsets",
    "StatefulSet": "statefulsets",
    "Job": "jobs",
}


def collection(kind: str) -> str:
    group = "batch/v1" if kind == "Job" else "apps/v1"
    return f"/apis/{group}/namespaces/default/{_PLURALS[kind]}"


Obj = dict[str, Any]
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"


def shape(instance_type: str) -> NodeShape:
    return NodeShape(
        capacity={"cpu": "4", "memory": "16Gi", "pods": "29"},
        allocatable={"cpu": "3920m", "memory": "15Gi", "pods": "29"},
        labels={
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": instance_type,
            "karpenter.k8s.aws/instance-cpu": "4",
        },
    )


@dataclass
class Sim:
    clock: ManualClock
    api: client.ApiClient
    core: client.CoreV1Api
    instances: InMemoryInstances
    kubelets: KubeletFleet
    scheduler: Scheduler
    controllers: WorkloadControllers
    rest: KubeRest
    launched: int = 0

    def tick(self, seconds: int = 1) -> None:
        for _ in range(seconds):
            self.clock.advance(1)
            now = self.clock.now()
            self.controllers.step(now)
            self.scheduler.step(now)
            self.kubelets.step(now)

    def launch(self, zone: str = "us-west-2a", user_data: str | None = None, **tags: str) -> SimInstance:
        self.launched += 1
        n = self.launched
        instance = SimInstance(
            instance_id=f"i-{n:017x}",
            instance_type="m5.xlarge",
            zone=zone,
            private_dns_name=f"ip-10-0-{n}-10.us-west-2.compute.internal",
            launch_time=self.clock.now(),
            state="running",
            user_data=user_data,
            tags=tags,
        )
        self.instances.put(instance)
        return instance

    def ready_nodes(self, count: int, zones: tuple[str, ...] = ("us-west-2a",)) -> list[str]:
        names = [self.launch(zones[i % len(zones)]).private_dns_name for i in range(count)]
        self.tick(41)
        return names

    def pods(self, selector: str = "") -> list[Obj]:
        return self.rest.list("/api/v1/pods", **({"labelSelector": selector} if selector else {}))

    def create(self, body: Obj) -> None:
        assert self.rest.create(collection(body["kind"]), body) is not None

    def read(self, kind: str, name: str) -> Obj:
        return self.rest.request("GET", f"{collection(kind)}/{name}")


@pytest.fixture
def sim() -> Iterator[Sim]:
    clock = ManualClock()
    server = KubeApiServer(clock)
    server.start()
    clients = component_clients(server)  # each component with its own identity, the test as the admin
    api = clients["driver"]
    instances = InMemoryInstances()
    yield Sim(
        clock=clock,
        api=api,
        core=client.CoreV1Api(api),
        instances=instances,
        rest=KubeRest(api),
        kubelets=KubeletFleet(clients["kubelets"], instances, shape),
        scheduler=Scheduler(clients["scheduler"], seed=7),
        controllers=WorkloadControllers(clients["controllers"], seed=7),
    )
    api.close()
    server.stop()


def deployment(name: str, replicas: int, cpu: str = "1", **pod_spec: Any) -> Obj:
    """Pods requesting only cpu, and deleted at once (no grace period set)."""
    return builders.deployment(name, replicas, cpu, None, grace_seconds=None, **pod_spec)


def scheduled_condition(pod: Obj) -> Obj | None:
    return next((c for c in pod["status"].get("conditions") or [] if c["type"] == "PodScheduled"), None)


def test_deployment_fills_the_one_node_and_reports_the_rest_unschedulable(sim: Sim) -> None:
    (node_name,) = sim.ready_nodes(1)
    sim.create(deployment("web", 5))
    sim.tick(5)

    pods = sim.pods("app=web")
    assert len(pods) == 5
    bound = [p for p in pods if p["spec"].get("nodeName")]
    pending = [p for p in pods if not p["spec"].get("nodeName")]
    assert len(bound) == 3
    assert {p["spec"]["nodeName"] for p in bound} == {node_name}
    assert all(p["status"]["phase"] == "Running" for p in bound)
    for p in pending:
        cond = scheduled_condition(p)
        assert cond is not None
        assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
        assert cond["message"] == "0/1 nodes are available: 1 Insufficient cpu."
        key = f"default/{p['metadata']['name']}"
        assert sim.scheduler.last_unschedulable[key] == cond["message"]

    # Pod names are Kubernetes-shaped: <deployment>-<template hash>-<5 safe characters>.
    name = bound[0]["metadata"]["name"]
    prefix, template_hash, suffix = name.rsplit("-", 2)
    assert prefix == "web"
    assert bound[0]["metadata"]["labels"]["pod-template-hash"] == template_hash
    assert len(suffix) == 5
    owner = bound[0]["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["controller"], owner["name"]) == ("ReplicaSet", True, f"web-{template_hash}")

    # The condition is written once, not on every pass.
    versions = {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in pending}
    sim.tick(3)
    assert {
        p["metadata"]["name"]: p["metadata"]["resourceVersion"]
        for p in sim.pods("app=web")
        if not p["spec"].get("nodeName")
    } == versions

    status = sim.read("Deployment", "web")["status"]
    assert (status["replicas"], status["readyReplicas"], status["availableReplicas"]) == (5, 3, 3)

    # A second node takes the two that were waiting.
    sim.ready_nodes(1)
    sim.tick(3)
    assert all(p["status"]["phase"] == "Running" for p in sim.pods("app=web"))
    assert sim.scheduler.last_unschedulable == {}


def test_taints_tolerations_and_node_selectors(sim: Sim) -> None:
    tainted = sim.launch(
        user_data="#!/bin/bash\n/etc/eks/bootstrap.sh demo --kubelet-extra-args "
        "'--node-labels=team=gpu --register-with-taints=dedicated=gpu:NoSchedule'"
    )
    plain = sim.launch()
    sim.tick(41)
    sim.create(deployment("plain", 2, cpu="100m"))
    sim.create(
        deployment(
            "picky",
            2,
            cpu="100m",
            nodeSelector={"team": "gpu"},
            tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
        )
    )
    sim.create(deployment("stuck", 1, cpu="100m", nodeSelector={"team": "gpu"}))
    sim.tick(5)
    assert {p["spec"].get("nodeName") for p in sim.pods("app=plain")} == {plain.private_dns_name}
    assert {p["spec"].get("nodeName") for p in sim.pods("app=picky")} == {tainted.private_dns_name}
    (stuck,) = sim.pods("app=stuck")
    assert scheduled_condition(stuck)["message"] == (  # type: ignore[index]
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint {dedicated: gpu}."
    )


def test_required_anti_affinity_on_hostname(sim: Sim) -> None:
    sim.ready_nodes(3)
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOSTNAME}
            ]
        }
    }
    sim.create(deployment("db", 4, cpu="100m", affinity=anti))
    sim.tick(4)
    pods = sim.pods("app=db")
    nodes = [p["spec"].get("nodeName") for p in pods]
    assert len({n for n in nodes if n}) == 3
    (pending,) = [p for p in pods if not p["spec"].get("nodeName")]
    assert scheduled_condition(pending)["message"] == (  # type: ignore[index]
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."
    )


def test_zonal_topology_spread_max_skew_one(sim: Sim) -> None:
    zones = ("us-west-2a", "us-west-2b", "us-west-2c")
    names = sim.ready_nodes(3, zones=zones)
    zone_of = dict(zip(names, zones, strict=True))
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "api"}},
        }
    ]
    sim.create(deployment("api", 7, cpu="100m", topologySpreadConstraints=spread))
    sim.tick(4)
    per_zone = Counter(zone_of[p["spec"]["nodeName"]] for p in sim.pods("app=api"))
    assert sum(per_zone.values()) == 7
    assert sorted(per_zone.values()) == [2, 2, 3]


def test_most_allocated_scoring_packs(sim: Sim) -> None:
    sim.scheduler = Scheduler(sim.api, scoring="MostAllocated")
    sim.ready_nodes(3)
    sim.create(deployment("packed", 6, cpu="500m"))
    sim.tick(4)
    assert len({p["spec"]["nodeName"] for p in sim.pods("app=packed")}) == 1
