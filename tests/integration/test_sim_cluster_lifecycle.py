"""Simulated kubelets (registration, readiness, pod start and finish), node and pod garbage collection, and
the DaemonSet, StatefulSet and Job controllers, against the simulated API server over HTTP."""

from __future__ import annotations

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

NODEADM_USER_DATA = """MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="//"

--//
Content-Type: application/node.eks.aws

apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  cluster:
    name: demo
  kubelet:
    flags:
      - --node-labels=karpenter.sh/nodepool=default,team=payments
      - --register-with-taints=karpenter.sh/unregistered:NoExecute

--//--
"""


def shape(instance_type: str) -> NodeShape:
    return NodeShape(
        capacity={"cpu": "2", "memory": "8Gi", "pods": "29"},
        allocatable={"cpu": "1930m", "memory": "7Gi", "pods": "29"},
        labels={
            "kubernetes.io/arch": "arm64",
            "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": instance_type,
            "karpenter.k8s.aws/instance-family": "m7g",
        },
    )


@dataclass
class Sim:
    clock: ManualClock
    api: client.ApiClient
    core: client.CoreV1Api
    apps: client.AppsV1Api
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
            instance_type="m7g.large",
            zone=zone,
            private_dns_name=f"ip-10-0-{n}-20.us-west-2.compute.internal",
            launch_time=self.clock.now(),
            state="running",
            user_data=user_data,
            tags=tags,
        )
        self.instances.put(instance)
        return instance

    def node(self, name: str) -> Obj | None:
        nodes = self.rest.list("/api/v1/nodes")
        return next((n for n in nodes if n["metadata"]["name"] == name), None)

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
        apps=client.AppsV1Api(api),
        instances=instances,
        rest=KubeRest(api),
        kubelets=KubeletFleet(clients["kubelets"], instances, shape),
        scheduler=Scheduler(clients["scheduler"]),
        controllers=WorkloadControllers(api, seed=3, job_pod_duration=5),
    )
    api.close()
    server.stop()


def ready(node: Obj) -> str:
    return next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")


def workload(kind: str, name: str, cpu: str = "100m", **spec: Any) -> Obj:
    pod_spec = spec.pop("pod_spec", {})
    return {
        "apiVersion": "batch/v1" if kind == "Job" else "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            **({} if kind == "Job" else {"selector": {"matchLabels": {"app": name}}}),
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
                    ],
                    **({"restartPolicy": "Never"} if kind == "Job" else {}),
                    **pod_spec,
                },
            },
            **spec,
        },
    }


def test_kubelet_registers_a_node_from_instance_and_user_data(sim: Sim) -> None:
    instance = sim.launch(
        zone="us-west-2b", user_data=NODEADM_USER_DATA, **{"karpenter.sh/capacity-type": "spot"}
    )
    sim.tick(29)
    assert sim.node(instance.private_dns_name) is None
    sim.tick(1)
    node = sim.node(instance.private_dns_name)
    assert node is not None
    assert node["spec"]["providerID"] == f"aws:///us-west-2b/{instance.instance_id}"
    # TaintNodesByCondition: admission adds not-ready:NoSchedule, the lifecycle controller its NoExecute
    # twin while Ready is False.
    assert node["spec"]["taints"] == [
        {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
        {
            "key": "node.kubernetes.io/not-ready",
            "effect": "NoExecute",
            "timeAdded": node["metadata"]["creationTimestamp"],
        },
    ]
    labels = node["metadata"]["labels"]
    assert labels["topology.kubernetes.io/zone"] == "us-west-2b"
    assert labels["topology.kubernetes.io/region"] == "us-west-2"
    assert labels["kubernetes.io/hostname"] == instance.private_dns_name
    assert labels["karpenter.sh/capacity-type"] == "spot"
    assert labels["karpenter.sh/nodepool"] == "default"
    assert labels["team"] == "payments"
    assert labels["kubernetes.io/arch"] == "arm64"
    assert labels["karpenter.k8s.aws/instance-family"] == "m7g"
    assert node["status"]["allocatable"]["cpu"] == "1930m"
    assert node["status"]["capacity"]["memory"] == "8Gi"
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.31.0"
    assert node["status"]["nodeInfo"]["architecture"] == "arm64"
    assert {"type": "InternalIP", "address": "10.0.1.20"} in node["status"]["addresses"]
    assert ready(node) == "False"
    sim.tick(9)
    assert ready(sim.node(instance.private_dns_name)) == "False"  # type: ignore[arg-type]
    sim.tick(1)
    ready_node = sim.node(instance.private_dns_name)
    assert ready(ready_node) == "True"  # type: ignore[arg-type]
    assert ready_node["spec"]["taints"] == [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]  # type: ignore[index]

    # A kubelet registers once: a Node deleted under a running instance does not come back.
    sim.core.delete_node(instance.private_dns_name)
    sim.tick(2)
    assert sim.node(instance.private_dns_name) is None

    # Without registration flags, only the not-ready taints until Ready, and the on-demand default.
    plain = sim.launch()
    sim.tick(30)
    plain_node = sim.node(plain.private_dns_name)
    assert plain_node is not None
    assert {(t["key"], t["effect"]) for t in plain_node["spec"]["taints"]} == {
        ("node.kubernetes.io/not-ready", "NoSchedule"),
        ("node.kubernetes.io/not-ready", "NoExecute"),
    }
    sim.tick(10)
    assert not sim.node(plain.private_dns_name)["spec"].get("taints")  # type: ignore[index]
    assert plain_node["metadata"]["labels"]["karpenter.sh/capacity-type"] == "on-demand"


def test_terminated_instance_loses_its_node_and_deployment_pods_come_back_pending(sim: Sim) -> None:
    instance = sim.launch()
    sim.tick(41)
    sim.create(workload("Deployment", "web", replicas=2))
    sim.tick(4)
    before = sim.pods("app=web")
    assert [p["status"]["phase"] for p in before] == ["Running", "Running"]
    assert all(p["status"]["podIP"] and p["status"]["hostIP"] == "10.0.1.20" for p in before)

    sim.instances.set_state(instance.instance_id, "terminated")
    # The kubelet falls silent; the Node stays Ready until the node-monitor grace period (50 s) has run
    # out, then goes Unknown, and the cloud node lifecycle controller deletes it.
    sim.tick(45)
    assert ready(sim.node(instance.private_dns_name)) == "True"  # type: ignore[arg-type]
    sim.tick(10)
    assert sim.node(instance.private_dns_name) is None
    sim.tick(2)
    after = sim.pods("app=web")
    assert len(after) == 2
    assert {p["metadata"]["uid"] for p in after}.isdisjoint({p["metadata"]["uid"] for p in before})
    for pod in after:
        assert not pod["spec"].get("nodeName")
        cond = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
        assert (cond["reason"], cond["message"]) == ("Unschedulable", "no nodes available to schedule pods")


def test_node_with_finalizer_lingers_not_ready_and_its_pods_wait_for_it(sim: Sim) -> None:
    instance = sim.launch()
    sim.tick(41)
    sim.core.patch_node(instance.private_dns_name, {"metadata": {"finalizers": ["karpenter.sh/termination"]}})
    sim.create(workload("Deployment", "web", replicas=1))
    sim.tick(4)
    (pod,) = sim.pods("app=web")
    sim.instances.remove(instance.instance_id)
    sim.tick(56)
    node = sim.node(instance.private_dns_name)
    assert node is not None
    assert node["metadata"]["deletionTimestamp"]
    assert ready(node) == "Unknown"
    # The kubelet is gone, so an eviction leaves the pod terminating until the node object goes.
    sim.core.delete_namespaced_pod(pod["metadata"]["name"], "default")
    sim.tick(3)
    assert [p["metadata"]["uid"] for p in sim.pods("app=web") if p["metadata"].get("deletionTimestamp")] == [
        pod["metadata"]["uid"]
    ]
    sim.core.patch_node(instance.private_dns_name, {"metadata": {"finalizers": None}})
    sim.tick(2)
    assert sim.node(instance.private_dns_name) is None
    remaining = sim.pods("app=web")
    assert [p["metadata"]["uid"] for p in remaining] != [pod["metadata"]["uid"]]
    assert len(remaining) == 1


def test_kubelet_finishes_deleted_pods_and_scale_down_removes_newest(sim: Sim) -> None:
    sim.launch()
    sim.tick(41)
    sim.create(workload("Deployment", "web", replicas=3))
    sim.tick(1)
    first = sim.pods("app=web")
    sim.tick(4)
    sim.apps.patch_namespaced_deployment("web", "default", {"spec": {"replicas": 1}})
    sim.tick(1)
    terminating = [p for p in sim.pods("app=web") if p["metadata"].get("deletionTimestamp")]
    assert len(terminating) == 2
    sim.tick(2)
    remaining = sim.pods("app=web")
    assert len(remaining) == 1
    oldest = min(first, key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
    assert remaining[0]["metadata"]["creationTimestamp"] == oldest["metadata"]["creationTimestamp"]
    status = sim.read("Deployment", "web")["status"]
    assert (status["replicas"], status["availableReplicas"]) == (1, 1)


def test_daemonset_runs_one_pod_on_every_ready_untainted_node(sim: Sim) -> None:
    nodes = [sim.launch().private_dns_name for _ in range(2)]
    tainted = sim.launch(user_data="--register-with-taints=karpenter.sh/unregistered:NoExecute")
    sim.tick(41)
    late = sim.launch().private_dns_name
    sim.create(workload("DaemonSet", "agent", cpu="50m"))
    sim.tick(2)
    pods = sim.pods("app=agent")
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(nodes)
    pod = pods[0]
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"
    assert pod["metadata"]["name"].startswith("agent-")
    assert {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "spec"
    ]["tolerations"]
    sim.tick(1)
    assert all(p["status"]["phase"] == "Running" for p in sim.pods("app=agent"))

    # The late node gets its pod once Ready; the tainted one once the taint is lifted.
    sim.tick(40)
    sim.core.patch_node(tainted.private_dns_name, {"spec": {"taints": None}})
    sim.tick(2)
    on = sorted(p["spec"]["nodeName"] for p in sim.pods("app=agent"))
    assert on == sorted([*nodes, late, tainted.private_dns_name])
    status = sim.read("DaemonSet", "agent")["status"]
    assert (status["desiredNumberScheduled"], status["currentNumberScheduled"]) == (4, 4)

    # Deleting the DaemonSet takes its pods with it.
    sim.apps.delete_namespaced_daemon_set("agent", "default")
    sim.tick(3)
    assert sim.pods("app=agent") == []


def test_job_runs_to_completion_with_bounded_parallelism(sim: Sim) -> None:
    sim.launch()
    sim.tick(41)
    sim.create(workload("Job", "report", completions=3, parallelism=2))
    sim.tick(1)
    assert len(sim.pods("job-name=report")) == 2
    seen: set[str] = set()
    for _ in range(30):
        sim.tick(1)
        pods = sim.pods("job-name=report")
        seen.update(p["metadata"]["name"] for p in pods)
        assert sum(1 for p in pods if p["status"].get("phase") in ("Pending", "Running")) <= 2
    status = sim.read("Job", "report")["status"]
    assert status["succeeded"] == 3
    assert status["active"] == 0
    assert any(c["type"] == "Complete" and c["status"] == "True" for c in status["conditions"])
    assert len(seen) == 3


def test_statefulset_creates_ordinals_in_order(sim: Sim) -> None:
    sim.launch()
    sim.tick(41)
    sim.create(workload("StatefulSet", "db", replicas=3, serviceName="db"))
    sim.tick(1)
    assert [p["metadata"]["name"] for p in sim.pods("app=db")] == ["db-0"]
    sim.tick(12)
    pods = sorted(sim.pods("app=db"), key=lambda p: p["metadata"]["name"])
    assert [p["metadata"]["name"] for p in pods] == ["db-0", "db-1", "db-2"]
    assert all(p["status"]["phase"] == "Running" for p in pods)
    assert pods[1]["spec"]["hostname"] == "db-1"
    assert pods[1]["metadata"]["labels"]["apps.kubernetes.io/pod-index"] == "1"


def test_deployment_rolls_out_a_new_template_without_dropping_below_availability(sim: Sim) -> None:
    sim.launch()
    sim.tick(41)
    sim.create(workload("Deployment", "web", replicas=4))
    sim.tick(4)
    old_hash = sim.pods("app=web")[0]["metadata"]["labels"]["pod-template-hash"]
    sim.apps.patch_namespaced_deployment(
        "web", "default", {"spec": {"template": {"metadata": {"annotations": {"rev": "2"}}}}}
    )
    for _ in range(30):
        sim.tick(1)
        running = [
            p
            for p in sim.pods("app=web")
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        ]
        # maxUnavailable 25% of 4: at least 3 serving pods throughout.
        assert len(running) >= 3
    pods = sim.pods("app=web")
    assert len(pods) == 4
    assert {p["metadata"]["labels"]["pod-template-hash"] for p in pods} != {old_hash}
    assert all(p["metadata"]["annotations"]["rev"] == "2" for p in pods)
    replicasets = sim.rest.list("/apis/apps/v1/namespaces/default/replicasets")
    assert sorted(rs["spec"]["replicas"] for rs in replicasets) == [0, 4]
    status = sim.read("Deployment", "web")["status"]
    assert (status["updatedReplicas"], status["availableReplicas"]) == (4, 4)
