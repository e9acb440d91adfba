"""The terminator's passes on fakes: priority groups, PDB back-off, do-not-disrupt, grace deadlines,
hand-off to provisioning, replace-first, terminate then release; and the termination-work queue."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from serverless_karpenter.adapters.kubernetes import EvictionResult, KubernetesError
from serverless_karpenter.api import labels as wk
from serverless_karpenter.clock import ManualClock, to_rfc3339
from serverless_karpenter.config import Settings
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.provisioning.context import ControlPlane
from serverless_karpenter.termination.handoff import pods_on_deleting_nodes
from serverless_karpenter.termination.terminator import (
    EVICTION_BACKOFF,
    REPLACE_FIRST_UNTIL,
    Terminator,
    priority_group,
)
from serverless_karpenter.termination.usecases import queue_termination_pass, run_termination

from tests import builders

NOW = datetime(2026, 1, 1, tzinfo=UTC)
NODE = "ip-10-0-0-1.ec2.internal"


def pod(
    name: str,
    *,
    node: str = NODE,
    daemonset: bool = False,
    critical: bool = False,
    grace: int = 30,
    annotations: dict[str, str] | None = None,
    tolerations: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"terminationGracePeriodSeconds": grace}
    if critical:
        spec["priorityClassName"] = "system-node-critical"
    if tolerations:
        spec["tolerations"] = tolerations
    owner = "DaemonSet" if daemonset else "ReplicaSet"
    return builders.pod(name, node=node, owner=owner, annotations=annotations or {}, **spec)


@dataclass
class FakeInstance:
    state: str


@dataclass
class Cluster:
    """Nodes, pods and a PDB that refuses evictions of the pods named in ``refuse``."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    refuse: set[str] = field(default_factory=set)
    failing: set[str] = field(default_factory=set)  # pods whose eviction the API server fails (503)
    eviction_attempts: list[str] = field(default_factory=list)
    deletions: list[tuple[str, int | None]] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (object name, reason, message)
    nodeclaims: dict[str, dict[str, Any]] = field(default_factory=dict)

    def get_nodeclaim(self, name: str) -> dict[str, Any] | None:
        return self.nodeclaims.get(name)

    def delete_nodeclaim(self, name: str) -> None:
        claim = self.nodeclaims.get(name)
        if claim is not None:
            claim["metadata"]["deletionTimestamp"] = to_rfc3339(NOW)

    def patch_nodeclaim(self, name: str, patch: list[dict[str, Any]]) -> dict[str, Any]:
        claim = self.nodeclaims[name]
        for op in patch:
            if op["op"] == "remove":
                claim["metadata"]["finalizers"].pop(int(op["path"].rsplit("/", 1)[-1]))
        if claim["metadata"].get("deletionTimestamp") and not claim["metadata"]["finalizers"]:
            del self.nodeclaims[name]  # the last finalizer gone: the API server removes it
        return claim

    def record_event(self, obj: dict[str, Any], reason: str, message: str, event_type: str = "") -> None:
        self.events.append((obj["metadata"]["name"], reason, message))

    def list_nodes(self) -> list[dict[str, Any]]:
        return list(self.nodes.values())

    def get_node(self, name: str) -> dict[str, Any] | None:
        return self.nodes.get(name)

    def list_pods_on_node(self, name: str) -> list[dict[str, Any]]:
        return [p for p in self.pods.values() if p["spec"].get("nodeName") == name]

    def list_pdbs(self) -> list[dict[str, Any]]:
        return []

    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        node = self.nodes[name]
        node["metadata"].setdefault("labels", {}).update(patch.get("metadata", {}).get("labels", {}))
        node.setdefault("spec", {}).update(patch.get("spec", {}))
        return node

    def delete_node(self, name: str) -> None:
        self.nodes[name]["metadata"]["deletionTimestamp"] = to_rfc3339(NOW)

    def remove_node_finalizer(self, node: dict[str, Any], finalizer: str) -> None:
        self.nodes.pop(node["metadata"]["name"], None)

    def evict(self, p: dict[str, Any]) -> str:
        name = p["metadata"]["name"]
        self.eviction_attempts.append(name)
        if name in self.failing:
            raise KubernetesError("503 Service Unavailable: b'etcdserver: request timed out'", 503)
        if name in self.refuse:
            return EvictionResult.BLOCKED
        self.pods[name]["metadata"]["deletionTimestamp"] = to_rfc3339(NOW)
        return EvictionResult.EVICTED

    def delete_pod(self, p: dict[str, Any], grace_period_seconds: int | None = None) -> None:
        self.deletions.append((p["metadata"]["name"], grace_period_seconds))
        self.pods[p["metadata"]["name"]]["metadata"]["deletionTimestamp"] = to_rfc3339(NOW)

    def kubelet_finishes(self) -> None:
        """Pods being deleted go away, as the kubelet would finish them."""
        self.pods = {k: p for k, p in self.pods.items() if not p["metadata"].get("deletionTimestamp")}


class Store:
    def __init__(self, *records: NodeClaimRecord) -> None:
        self.records = {r.name: r for r in records}

    def find_by_node_name(self, name: str) -> NodeClaimRecord | None:
        return next((r for r in self.records.values() if r.node_name == name), None)

    def find_by_instance_id(self, instance_id: str) -> NodeClaimRecord | None:
        return next((r for r in self.records.values() if r.instance_id == instance_id), None)

    def get(self, name: str) -> NodeClaimRecord | None:
        return self.records.get(name)

    def list(self) -> list[NodeClaimRecord]:
        return list(self.records.values())

    def save(self, record: NodeClaimRecord) -> NodeClaimRecord:
        saved = record.model_copy(update={"version": record.version + 1})
        self.records[record.name] = saved
        return saved


@dataclass
class Launcher:
    instances: dict[str, FakeInstance] = field(default_factory=dict)

    def describe(self, instance_id: str) -> FakeInstance | None:
        return self.instances.get(instance_id)

    def terminate(self, ids: list[str]) -> None:
        for i in ids:
            self.instances[i] = FakeInstance("terminated")


@dataclass
class World:
    plane: ControlPlane
    clock: ManualClock
    cluster: Cluster
    store: Store
    launcher: Launcher
    woken: list[dict[str, object]] = field(default_factory=list)

    def terminator(self) -> Terminator:
        return Terminator(self.plane, self.woken.append)

    def record(self) -> NodeClaimRecord:
        record = self.store.get("victim")
        assert record is not None
        return record


def world(*pods: dict[str, Any], **record_fields: Any) -> World:
    clock = ManualClock(NOW)
    record = NodeClaimRecord(
        name="victim",
        nodepool="default",
        nodeclass="default",
        state=NodeClaimState.DISRUPTING,
        disruption_reason="SpotInterrupted",
        deletion_requested_at=NOW,
        instance_id="i-victim",
        node_name=NODE,
        created_at=NOW - timedelta(hours=1),
        **record_fields,
    )
    node = {
        "metadata": {
            "name": NODE,
            "finalizers": [wk.TERMINATION_FINALIZER],
            "deletionTimestamp": to_rfc3339(NOW),
            "labels": {},
        },
        "spec": {"providerID": "aws:///us-east-1a/i-victim", "taints": []},
    }
    cluster = Cluster(nodes={NODE: node}, pods={p["metadata"]["name"]: p for p in pods})
    store = Store(record)
    launcher = Launcher({"i-victim": FakeInstance("running")})
    plane = ControlPlane(
        settings=Settings(cluster_name="test"),
        clock=clock,
        kube=cast(Any, cluster),
        store=cast(Any, store),
        launcher=cast(Any, launcher),
        resolver=cast(Any, None),
        instance_types=cast(Any, None),
    )
    return World(plane, clock, cluster, store, launcher)


def test_first_pass_taints_labels_and_hands_the_pods_to_provisioning_before_evicting() -> None:
    w = world(pod("app"), pod("ds", daemonset=True))
    [progress] = w.terminator().reconcile()
    node = w.cluster.nodes[NODE]
    assert {"key": wk.DISRUPTED_TAINT_KEY, "effect": "NoSchedule"} in node["spec"]["taints"]
    assert node["metadata"]["labels"][wk.EXCLUDE_FROM_LB] == "karpenter"
    assert w.woken == [{"reason": "draining-node", "node": NODE, "pods": 1}]  # not the DaemonSet pod
    assert progress.handed_off == ["default/app"]
    assert w.record().state == NodeClaimState.DRAINING
    w.clock.advance(5)
    w.terminator().reconcile()
    assert len(w.woken) == 1  # handed off once, when the drain starts


def test_evictions_go_by_priority_group() -> None:
    w = world(
        pod("crit-ds", daemonset=True, critical=True),
        pod("crit", critical=True),
        pod("ds", daemonset=True),
        pod("app"),
    )
    assert [priority_group(p) for p in w.cluster.pods.values()] == [3, 2, 1, 0]
    order = []
    for _ in range(4):
        [progress] = w.terminator().reconcile()
        order.append(progress.evicted)
        w.cluster.kubelet_finishes()
        w.clock.advance(5)
    assert order == [["default/app"], ["default/ds"], ["default/crit"], ["default/crit-ds"]]
    # Each eviction is told to the pod, as Karpenter's Evicted event, with the node's disruption reason.
    assert [(name, message) for name, reason, message in w.cluster.events if reason == "Evicted"] == [
        ("app", "Evicted pod: SpotInterrupted"),
        ("ds", "Evicted pod: SpotInterrupted"),
        ("crit", "Evicted pod: SpotInterrupted"),
        ("crit-ds", "Evicted pod: SpotInterrupted"),
    ]


def test_pods_tolerating_the_disrupted_taint_and_mirror_pods_are_left_alone() -> None:
    toleration = {"key": wk.DISRUPTED_TAINT_KEY, "operator": "Exists"}
    mirror = pod("static", annotations={"kubernetes.io/config.mirror": "x"})
    w = world(pod("tolerant", tolerations=[toleration]), mirror)
    [progress] = w.terminator().reconcile()
    assert w.cluster.eviction_attempts == [] and not progress.evicted
    assert progress.terminated_instance  # nothing to drain: straight to terminating


def test_a_pdb_refusal_is_retried_with_back_off() -> None:
    w = world(pod("app"))
    w.cluster.refuse.add("app")
    attempts_at = []
    for second in range(60):
        before = len(w.cluster.eviction_attempts)
        w.terminator().reconcile()
        if len(w.cluster.eviction_attempts) > before:
            attempts_at.append(second)
        w.clock.advance(1)
    assert attempts_at == [0, 5, 15, 35]  # 5 s, then 10, then 20 (capped at 30 after that)
    backoff = json.loads(w.record().annotations[EVICTION_BACKOFF])
    assert backoff["default/app"]["attempts"] == 4
    w.cluster.refuse.clear()
    w.clock.advance(30)
    [progress] = w.terminator().reconcile()
    assert progress.evicted == ["default/app"]
    assert EVICTION_BACKOFF not in w.record().annotations


def test_do_not_disrupt_waits_until_deadline_minus_its_grace_period() -> None:
    # A spot warning: the deadline is the instance's termination time, two minutes after the warning.
    w = world(
        pod("precious", grace=30, annotations={wk.DO_NOT_DISRUPT: "true"}),
        drain_deadline=NOW + timedelta(minutes=2),
    )
    [progress] = w.terminator().reconcile()
    assert progress.waiting == ["default/precious"] and w.cluster.eviction_attempts == []
    w.clock.advance(89)
    w.terminator().reconcile()
    assert w.cluster.deletions == []
    w.clock.advance(1)  # deadline - 30 s
    [progress] = w.terminator().reconcile()
    assert w.cluster.deletions == [("precious", 30)] and progress.force_deleted == ["default/precious"]
    assert w.cluster.eviction_attempts == []


def test_termination_grace_period_is_a_hard_deadline_even_against_a_pdb() -> None:
    w = world(pod("app", grace=10), termination_grace_period_seconds=60)
    w.cluster.refuse.add("app")
    w.terminator().reconcile()
    assert w.record().drain_deadline == NOW + timedelta(seconds=60)
    w.clock.advance(55)  # past deadline - grace: deleted with what is left of the deadline
    w.terminator().reconcile()
    assert w.cluster.deletions == [("app", 5)]


def test_drained_node_is_terminated_then_released_and_closed() -> None:
    w = world(pod("app"))
    w.cluster.nodeclaims["victim"] = {
        "metadata": {"name": "victim", "finalizers": ["karpenter.sh/termination"]}
    }
    w.terminator().reconcile()
    w.cluster.kubelet_finishes()
    w.clock.advance(5)
    [progress] = w.terminator().reconcile()
    assert progress.terminated_instance and w.launcher.instances["i-victim"].state == "terminated"
    assert w.record().state == NodeClaimState.TERMINATING
    assert NODE in w.cluster.nodes  # the finalizer holds until EC2 reports the instance going away
    assert "victim" in w.cluster.nodeclaims  # and so does the NodeClaim object's
    w.clock.advance(5)
    [progress] = w.terminator().reconcile()
    assert progress.finished and NODE not in w.cluster.nodes
    assert "victim" not in w.cluster.nodeclaims  # the object went with the instance
    record = w.record()
    assert record.state == NodeClaimState.TERMINATED and record.terminated_at == NOW + timedelta(seconds=10)


def test_an_instance_gone_mid_drain_releases_the_node_at_once() -> None:
    w = world(pod("app"))
    w.cluster.refuse.add("app")
    w.terminator().reconcile()
    w.launcher.instances["i-victim"] = FakeInstance("shutting-down")
    w.clock.advance(5)
    [progress] = w.terminator().reconcile()
    assert progress.finished and NODE not in w.cluster.nodes
    assert w.record().state == NodeClaimState.TERMINATED


def set_ready(w: World, status: str) -> None:
    w.cluster.nodes[NODE]["status"] = {"conditions": [{"type": "Ready", "status": status}]}


@pytest.mark.parametrize("state", ["stopping", "stopped"])
@pytest.mark.parametrize("ready", ["Unknown", "False"])
def test_a_stopped_instance_under_a_not_ready_node_is_terminated_without_a_drain(
    state: str, ready: str
) -> None:
    # The pods' PDB refuses, and would go on refusing: they are not Ready, counted short.
    w = world(pod("app"), pod("db", annotations={wk.DO_NOT_DISRUPT: "true"}))
    w.cluster.refuse.update({"app", "db"})
    w.launcher.instances["i-victim"] = FakeInstance(state)
    set_ready(w, ready)
    [progress] = w.terminator().reconcile()
    assert w.cluster.eviction_attempts == [] and w.cluster.deletions == []  # nothing to drain gracefully
    assert progress.terminated_instance and w.launcher.instances["i-victim"].state == "terminated"
    assert w.record().state == NodeClaimState.TERMINATING
    assert NODE in w.cluster.nodes  # released once EC2 reports the instance going, as any other
    w.clock.advance(5)
    [progress] = w.terminator().reconcile()
    assert progress.finished and NODE not in w.cluster.nodes
    assert w.record().state == NodeClaimState.TERMINATED


def test_a_stopped_instance_whose_node_still_reads_ready_is_drained_as_any_other() -> None:
    # Kubernetes has not noticed the silence yet: the pods count in their budget, so they are evicted.
    w = world(pod("app"))
    w.launcher.instances["i-victim"] = FakeInstance("stopped")
    set_ready(w, "True")
    [progress] = w.terminator().reconcile()
    assert progress.evicted == ["default/app"] and not progress.terminated_instance
    assert w.launcher.instances["i-victim"].state == "stopped"


def test_a_running_instance_under_a_not_ready_node_is_drained_as_any_other() -> None:
    # A network partition, say: the kubelet may be alive; nothing says the pods are gone.
    w = world(pod("app"))
    set_ready(w, "Unknown")
    [progress] = w.terminator().reconcile()
    assert progress.evicted == ["default/app"] and not progress.terminated_instance


def replacement(state: NodeClaimState, pods: list[str]) -> NodeClaimRecord:
    return NodeClaimRecord(
        name="replacement", nodepool="default", nodeclass="default", state=state, pods=pods, created_at=NOW
    )


def test_replace_first_holds_evictions_until_the_replacement_is_initialized() -> None:
    until = to_rfc3339(NOW + timedelta(minutes=10))
    w = world(pod("app"), annotations={REPLACE_FIRST_UNTIL: until})
    [progress] = w.terminator().reconcile()
    assert progress.awaiting_replacement and w.cluster.eviction_attempts == []
    w.store.records["replacement"] = replacement(NodeClaimState.LAUNCHED, ["default/app"])
    w.clock.advance(60)  # past the settle time, but a replacement is on its way: keep waiting
    [progress] = w.terminator().reconcile()
    assert progress.awaiting_replacement and w.cluster.eviction_attempts == []
    w.store.records["replacement"] = replacement(NodeClaimState.INITIALIZED, ["default/app"])
    [progress] = w.terminator().reconcile()
    assert not progress.awaiting_replacement and progress.evicted == ["default/app"]


def test_replace_first_goes_ahead_when_nothing_needed_launching_or_the_deadline_passes() -> None:
    until = to_rfc3339(NOW + timedelta(minutes=10))
    w = world(pod("app"), annotations={REPLACE_FIRST_UNTIL: until})
    w.terminator().reconcile()
    w.clock.advance(30)  # no claim for the pods by now: they fit capacity that exists
    [progress] = w.terminator().reconcile()
    assert progress.evicted == ["default/app"]

    w = world(pod("app"), annotations={REPLACE_FIRST_UNTIL: until})
    w.store.records["replacement"] = replacement(NodeClaimState.LAUNCHED, ["default/app"])
    w.terminator().reconcile()
    w.clock.advance(600)
    [progress] = w.terminator().reconcile()
    assert progress.evicted == ["default/app"]


def test_pods_on_deleting_nodes_are_what_provisioning_sees_as_pending() -> None:
    w = world(
        pod("app"),
        pod("ds", daemonset=True),
        pod("tolerant", tolerations=[{"key": wk.DISRUPTED_TAINT_KEY, "operator": "Exists"}]),
        pod("elsewhere", node="healthy"),
    )
    w.cluster.pods["evicted"] = {
        **pod("evicted"),
        "metadata": {**pod("evicted")["metadata"], "deletionTimestamp": "x"},
    }
    w.cluster.nodes["healthy"] = {"metadata": {"name": "healthy"}, "spec": {}}
    # As Karpenter's IsReschedulable: a pod that tolerates the disrupted taint is not drained, but it
    # dies with the node, so it needs room elsewhere too; a deleted pod's replacement is already pending.
    assert sorted(p["metadata"]["name"] for p in pods_on_deleting_nodes(w.cluster, NOW)) == [
        "app",
        "tolerant",
    ]
    # A node tainted for disruption (not yet deleted) counts too.
    w.cluster.nodes["healthy"]["spec"]["taints"] = [{"key": wk.DISRUPTED_TAINT_KEY, "effect": "NoSchedule"}]
    assert sorted(p["metadata"]["name"] for p in pods_on_deleting_nodes(w.cluster, NOW)) == [
        "app",
        "elsewhere",
        "tolerant",
    ]


def test_unfinished_drains_requeue_a_delayed_message(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="termination-work")["QueueUrl"]
    w = world(pod("app"))
    w.cluster.refuse.add("app")
    w.plane.settings = Settings(cluster_name="test", termination_queue_url=url, termination_requeue_seconds=7)
    run = run_termination(w.plane)
    assert run.unfinished == [NODE] and run.requeued
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesDelayed"])
    assert attributes["Attributes"]["ApproximateNumberOfMessagesDelayed"] == "1"
    # Nothing left to drain: no message.
    w.cluster.refuse.clear()
    w.launcher.instances["i-victim"] = FakeInstance("terminated")
    run = run_termination(w.plane, requeue=True)
    assert run.unfinished == [] and not run.requeued
    assert not queue_termination_pass(
        ControlPlane(**{**w.plane.__dict__, "settings": Settings(cluster_name="test")}), 0, "x"
    )


def failed_draining(w: World) -> list[str]:
    return [message for name, reason, message in w.cluster.events if reason == "FailedDraining"]


def test_an_eviction_the_api_server_fails_is_failed_draining_and_the_other_pods_go_on() -> None:
    w = world(pod("bad"), pod("good"))
    w.cluster.failing.add("bad")
    [progress] = w.terminator().reconcile()
    assert progress.evicted == ["default/good"] and not progress.finished
    assert failed_draining(w) == ["Failed to drain node, evicting pod returned 503 (Pod=default/bad)"]
    assert [name for name, reason, _ in w.cluster.events if reason == "FailedDraining"] == [NODE]
    # Next pass the API server answers: the pod is evicted, and nothing failed.
    w.cluster.failing.clear()
    w.clock.advance(5)
    [progress] = w.terminator().reconcile()
    assert progress.evicted == ["default/bad"]
    # Nothing failed; the pod is still there, shutting down: Karpenter's drain error says so.
    assert failed_draining(w)[1:] == ["Failed to drain node, 1 pod is waiting to be evicted"]


def test_a_pdb_refusal_is_failed_draining_and_then_the_pods_are_waiting() -> None:
    w = world(pod("guarded"), pod("precious", annotations={wk.DO_NOT_DISRUPT: "true"}))
    w.cluster.refuse.add("guarded")
    [progress] = w.terminator().reconcile()
    assert progress.blocked == ["default/guarded"] and progress.waiting == ["default/precious"]
    assert failed_draining(w) == ["Failed to drain node, evicting pod violates a PDB (Pod=default/guarded)"]
    w.clock.advance(1)  # in back-off: no eviction asked, so nothing failed, but both pods are still there
    w.terminator().reconcile()
    assert failed_draining(w)[1:] == ["Failed to drain node, 2 pods are waiting to be evicted"]


def test_a_termination_grace_period_is_announced_once_and_its_deletions_told_to_the_pods() -> None:
    w = world(pod("app", grace=10), termination_grace_period_seconds=60)
    w.cluster.refuse.add("app")
    w.terminator().reconcile()
    w.clock.advance(5)
    w.terminator().reconcile()
    expiring = [(n, m) for n, r, m in w.cluster.events if r == "TerminationGracePeriodExpiring"]
    assert expiring == [(NODE, "All pods will be deleted by 2026-01-01T00:01:00Z")]
    w.clock.advance(50)
    w.terminator().reconcile()
    assert w.cluster.deletions == [("app", 5)]
    [(name, message)] = [(n, m) for n, r, m in w.cluster.events if r == "Disrupted"]
    assert name == "app" and message.startswith(
        "Deleting the pod to accommodate the terminationTime 2026-01-01T00:01:00Z of the node. "
        "The pod was granted 5 seconds of grace-period of its 10 terminationGracePeriodSeconds."
    )


def test_no_termination_grace_period_no_expiring_event() -> None:
    w = world(pod("app"), drain_deadline=NOW + timedelta(minutes=2))  # a spot warning's deadline
    w.terminator().reconcile()
    assert not [r for _, r, _ in w.cluster.events if r == "TerminationGracePeriodExpiring"]
