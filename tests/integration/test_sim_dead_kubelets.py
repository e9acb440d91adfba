"""Kubelets that die with their instance: the Node stays Ready until the node-monitor grace period runs
out, then goes Unknown with the unreachable taints; pods deleted there stay Terminating; the NoExecute
taint evicts pods when their tolerationSeconds run out; pod GC removes them once the Node is deleted."""

# mypy: disable-error-code="index"

from __future__ import annotations

import pytest
from serverless_karpenter.clock import parse_rfc3339
from serverless_karpenter_sim.cluster.node_lifecycle import NODE_MONITOR_GRACE_PERIOD

from tests.integration.test_sim_cluster_lifecycle import Obj, Sim, ready, sim, workload

__all__ = ["sim"]  # the fixture, shared with the kubelet tests

pytestmark = pytest.mark.integration

UNREACHABLE = "node.kubernetes.io/unreachable"


def taints(node: Obj) -> set[tuple[str, str]]:
    return {(t["key"], t["effect"]) for t in node["spec"].get("taints") or []}


def started_web_on_one_node(sim: Sim, replicas: int = 2, **pod_spec: object) -> tuple[str, str]:
    instance = sim.launch()
    sim.tick(41)
    sim.create(workload("Deployment", "web", replicas=replicas, pod_spec=pod_spec))
    sim.tick(4)
    assert all(p["status"]["phase"] == "Running" for p in sim.pods("app=web"))
    return instance.instance_id, instance.private_dns_name


def test_a_stopped_instance_leaves_its_node_unknown_after_the_grace_period(sim: Sim) -> None:
    assert NODE_MONITOR_GRACE_PERIOD.total_seconds() == 50
    instance_id, name = started_web_on_one_node(sim)
    sim.instances.set_state(instance_id, "stopped")
    sim.tick(49)
    node = sim.node(name)
    assert ready(node) == "True" and UNREACHABLE not in {k for k, _ in taints(node)}
    sim.tick(6)  # past 50 s of silence, and the controller's 5 s monitor period
    node = sim.node(name)
    assert ready(node) == "Unknown"
    assert all(c["status"] == "Unknown" for c in node["status"]["conditions"])
    assert {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")} <= taints(node)
    assert ("node.cloudprovider.kubernetes.io/shutdown", "NoSchedule") in taints(node)
    # A stopped instance still exists: its Node is not deleted.
    sim.tick(120)
    assert sim.node(name) is not None

    # Deleted pods stay Terminating for good: no kubelet confirms them.
    (victim, _) = sim.pods("app=web")
    sim.core.delete_namespaced_pod(victim["metadata"]["name"], "default")
    sim.tick(200)
    still = {p["metadata"]["uid"]: p for p in sim.pods("app=web")}
    assert still[victim["metadata"]["uid"]]["metadata"]["deletionTimestamp"]

    # The node comes back: Ready again, the unreachable taints lifted.
    sim.instances.set_state(instance_id, "running")
    sim.tick(2)
    node = sim.node(name)
    assert ready(node) == "True"
    assert all(c["status"] != "Unknown" for c in node["status"]["conditions"])
    assert not {k for k, _ in taints(node)} & {UNREACHABLE, "node.cloudprovider.kubernetes.io/shutdown"}


def pod_condition(pod: Obj, kind: str) -> str | None:
    return next((c["status"] for c in pod["status"].get("conditions") or [] if c["type"] == kind), None)


def test_the_pods_of_an_unknown_node_are_not_ready_until_its_kubelet_is_back(sim: Sim) -> None:
    # As upstream's MarkPodsNotReady: a PDB no longer counts them healthy, and the eviction API treats
    # them as unhealthy pods.
    instance_id, name = started_web_on_one_node(sim)
    sim.instances.set_state(instance_id, "stopped")
    sim.tick(49)
    assert [pod_condition(p, "Ready") for p in sim.pods("app=web")] == ["True", "True"]
    sim.tick(6)
    assert ready(sim.node(name)) == "Unknown"
    pods = sim.pods("app=web")
    assert [pod_condition(p, "Ready") for p in pods] == ["False", "False"]
    assert [pod_condition(p, "ContainersReady") for p in pods] == ["True", "True"]  # Ready alone, as upstream
    assert all(p["status"]["phase"] == "Running" for p in pods)
    sim.instances.set_state(instance_id, "running")
    sim.tick(2)
    assert [pod_condition(p, "Ready") for p in sim.pods("app=web")] == ["True", "True"]


def test_the_unreachable_taint_evicts_pods_when_their_toleration_seconds_run_out(sim: Sim) -> None:
    short = [{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 20}]
    instance_id, name = started_web_on_one_node(sim, replicas=1, tolerations=short)
    sim.create(workload("Deployment", "api", replicas=1))
    sim.tick(4)
    sim.instances.set_state(instance_id, "stopped")
    sim.tick(55)
    node = sim.node(name)
    added = parse_rfc3339(next(t["timeAdded"] for t in node["spec"]["taints"] if t["effect"] == "NoExecute"))
    web_uid = sim.pods("app=web")[0]["metadata"]["uid"]
    sim.tick(int((added - sim.clock.now()).total_seconds()) + 21)
    (web,) = [p for p in sim.pods("app=web") if p["metadata"]["uid"] == web_uid]
    assert web["metadata"]["deletionTimestamp"]  # 20 s after the taint
    cause = next(c for c in web["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert cause["reason"] == "DeletionByTaintManager"
    # The api pod has only the default 300 s toleration.
    (api,) = [p for p in sim.pods("app=api") if p["spec"].get("nodeName") == name]
    assert not api["metadata"].get("deletionTimestamp")
    sim.tick(300 - 21)
    (api,) = [p for p in sim.pods("app=api") if p["spec"].get("nodeName") == name]
    assert api["metadata"]["deletionTimestamp"]


def test_pod_gc_removes_the_pods_of_a_deleted_node(sim: Sim) -> None:
    instance_id, name = started_web_on_one_node(sim)
    sim.instances.set_state(instance_id, "stopped")
    sim.tick(60)
    for pod in sim.pods("app=web"):
        sim.core.delete_namespaced_pod(pod["metadata"]["name"], "default")
    sim.tick(30)
    terminating = [p for p in sim.pods("app=web") if p["spec"].get("nodeName") == name]
    assert len(terminating) == 2 and all(p["metadata"]["deletionTimestamp"] for p in terminating)
    sim.core.delete_node(name)
    sim.tick(2)
    assert not [p for p in sim.pods("app=web") if p["spec"].get("nodeName") == name]


def test_a_terminated_instance_node_is_deleted_once_unknown(sim: Sim) -> None:
    instance_id, name = started_web_on_one_node(sim)
    sim.instances.remove(instance_id)
    sim.tick(45)
    assert sim.node(name) is not None  # not before the kubelet's silence is noticed
    sim.tick(15)
    assert sim.node(name) is None
