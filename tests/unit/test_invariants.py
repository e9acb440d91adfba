"""The invariant checkers report each kind of violation they exist for.

A hand-built world stands in for a simulation: EC2 and SQS are moto in-process, NodeClaim records, Nodes
and Pods are plain values, and PodDisruptionBudget violations come from the API server's own store and
audit (in-process, not served). Each test builds the broken state a bug would leave, and a healthy
neighbour that must not be reported.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import boto3
import pytest
from moto import mock_aws
from serverless_karpenter.api import labels as wk
from serverless_karpenter.clock import ManualClock, to_rfc3339
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter_sim.faults import FaultInjector
from serverless_karpenter_sim.invariants import Invariants
from serverless_karpenter_sim.kubeapi import KubeApiServer
from serverless_karpenter_sim.kubeapi.kinds import kind_of
from serverless_karpenter_sim.lambda_failures import LambdaFailure
from serverless_karpenter_sim.scenario import InvariantBounds
from serverless_karpenter_sim.simulation import Schedule

if TYPE_CHECKING:
    from serverless_karpenter_sim.simulation import Simulation

CLUSTER = "invariants"
REGION = "us-east-1"
ZONE = "us-east-1a"
VISIBILITY = 120


@dataclass
class Records:
    """The NodeClaim store, as the checker reads it."""

    records: list[NodeClaimRecord] = field(default_factory=list)

    def list(self) -> list[NodeClaimRecord]:
        return list(self.records)

    def list_live(self) -> list[NodeClaimRecord]:
        return [r for r in self.records if r.state != NodeClaimState.TERMINATED]


@dataclass
class Kube:
    """The Kubernetes gateway, as the checker reads it: lists of objects."""

    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    pdbs: list[dict[str, Any]] = field(default_factory=list)
    nodepools: list[dict[str, Any]] = field(default_factory=list)

    def list_pdbs(self) -> list[dict[str, Any]]:
        return list(self.pdbs)

    def list_nodes(self) -> list[dict[str, Any]]:
        return list(self.nodes)

    def list_nodepools(self) -> list[dict[str, Any]]:
        return list(self.nodepools)

    def list_pods(self, field_selector: str | None = None) -> list[dict[str, Any]]:
        if field_selector == "status.phase=Pending":
            return [p for p in self.pods if (p.get("status") or {}).get("phase") == "Pending"]
        assert field_selector is None, field_selector
        return list(self.pods)


class World:
    """What :class:`Invariants` reads of a :class:`Simulation`, built by hand."""

    def __init__(self) -> None:
        self.start_time = datetime(2025, 1, 1, tzinfo=UTC)
        self.clock = ManualClock(self.start_time)
        self.cluster_name = CLUSTER
        self.settings = SimpleNamespace(garbage_collection_grace_seconds=300)
        self.schedule = Schedule()
        self.scenario = SimpleNamespace(invariants=InvariantBounds())
        self.lambdas = SimpleNamespace(failures=list[LambdaFailure]())
        self.store = Records()
        self.plane = SimpleNamespace(store=self.store)
        self.records = self.store  # the loop's observers read the records through the simulation's view
        self.kube = Kube()
        self.kube_server = KubeApiServer(self.clock)  # never started: its store and audit, in-process
        self.ec2: Any = boto3.client("ec2", region_name=REGION)
        self.sqs: Any = boto3.client("sqs", region_name=REGION)
        dlq_url = self.sqs.create_queue(QueueName="interruption-dlq")["QueueUrl"]
        dlq_arn = self.sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        redrive = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "1"}
        queue_url = self.sqs.create_queue(
            QueueName="interruption",
            Attributes={"VisibilityTimeout": str(VISIBILITY), "RedrivePolicy": json.dumps(redrive)},
        )["QueueUrl"]
        self.resources = SimpleNamespace(
            queue_url=queue_url, dlq_url=dlq_url, queue_visibility_timeout=VISIBILITY
        )
        self.faults = FaultInjector(self.simulation)
        self.faults.hook_ledger()
        self.invariants = Invariants(self.simulation)

    @property
    def simulation(self) -> Simulation:
        return cast("Simulation", self)

    @property
    def elapsed(self) -> float:
        return (self.clock.now() - self.start_time).total_seconds()

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    # -- EC2 -------------------------------------------------------------------------------------------

    def launch(self, claim: str | None) -> str:
        """A running instance tagged for the cluster (and for ``claim``, if given)."""
        tags = [{"Key": f"{wk.TAG_CLUSTER_PREFIX}{CLUSTER}", "Value": "owned"}]
        if claim:
            tags.append({"Key": wk.NODECLAIM, "Value": claim})
        reservation = self.ec2.run_instances(
            ImageId="ami-12c6146b",
            MinCount=1,
            MaxCount=1,
            InstanceType="m5.large",
            Placement={"AvailabilityZone": ZONE},
            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
        )
        return str(reservation["Instances"][0]["InstanceId"])

    def record(self, name: str, instance_id: str | None, state: NodeClaimState) -> NodeClaimRecord:
        record = NodeClaimRecord(
            name=name,
            nodepool="default",
            nodeclass="default",
            state=state,
            instance_id=instance_id,
            provider_id=f"aws:///{ZONE}/{instance_id}" if instance_id else None,
            node_name=f"node-{name}",
            created_at=self.clock.now(),
        )
        self.store.records.append(record)
        return record

    # -- Kubernetes ------------------------------------------------------------------------------------

    def node(self, name: str, instance_id: str, *, finalizer: bool = True, deleting: bool = False) -> None:
        meta: dict[str, Any] = {"name": name, "finalizers": [wk.TERMINATION_FINALIZER] if finalizer else []}
        if deleting:
            meta["deletionTimestamp"] = to_rfc3339(self.clock.now())
        self.kube.nodes.append({"metadata": meta, "spec": {"providerID": f"aws:///{ZONE}/{instance_id}"}})

    def pod(self, name: str, phase: str) -> None:
        self.kube.pods.append(
            {
                "metadata": {
                    "name": name,
                    "namespace": "default",
                    "creationTimestamp": to_rfc3339(self.clock.now()),
                },
                "spec": {},
                "status": {"phase": phase},
            }
        )

    # -- SQS -------------------------------------------------------------------------------------------

    def send(self, body: str = "{}") -> str:
        return str(self.sqs.send_message(QueueUrl=self.resources.queue_url, MessageBody=body)["MessageId"])

    def receive(self) -> list[dict[str, Any]]:
        """What the event source mapping does first: receive, which the ledger records."""
        messages: list[dict[str, Any]] = self.sqs.receive_message(
            QueueUrl=self.resources.queue_url, MaxNumberOfMessages=10, VisibilityTimeout=0
        ).get("Messages", [])
        return messages

    def acknowledge(self, message: dict[str, Any]) -> None:
        self.sqs.delete_message(QueueUrl=self.resources.queue_url, ReceiptHandle=message["ReceiptHandle"])

    def park(self, message: dict[str, Any], reason: str) -> None:
        """What the interruption handler does with a message it cannot act on: to the DLQ, with a reason."""
        self.sqs.send_message(
            QueueUrl=self.resources.dlq_url,
            MessageBody=message["Body"],
            MessageAttributes={
                "reason": {"DataType": "String", "StringValue": reason},
                "source-message-id": {"DataType": "String", "StringValue": message["MessageId"]},
            },
        )
        self.acknowledge(message)


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield World()


def test_a_healthy_world_has_no_violation(world: World) -> None:
    instance = world.launch("default-a")
    world.record("default-a", instance, NodeClaimState.INITIALIZED)
    world.node("node-default-a", instance)
    world.pod("web-1", "Running")
    world.pod("job-1", "Succeeded")
    sent = world.send()
    world.acknowledge(next(m for m in world.receive() if m["MessageId"] == sent))
    world.advance(3600)

    report = world.invariants.check(final=True)

    assert report.ok, report.violations()
    assert report.messages_received == report.messages_acted_on == 1


def test_a_tagged_instance_without_a_nodeclaim_is_a_leak_once_the_gc_grace_is_over(world: World) -> None:
    tracked = world.launch("default-a")
    world.record("default-a", tracked, NodeClaimState.INITIALIZED)
    world.node("node-default-a", tracked)
    orphan = world.launch("default-gone")  # its record was never written, or was deleted

    within = world.invariants.check()
    assert within.ok and within.orphans_within_grace == [orphan]

    world.advance(world.invariants.gc_deadline + 1)
    past = world.invariants.check()

    assert past.leaked_instances == [orphan]
    assert any(orphan in v and "GC grace" in v for v in past.violations())


def test_a_nodeclaim_with_two_instances_is_reported(world: World) -> None:
    first = world.launch("default-a")
    second = world.launch("default-a")  # a launch repeated without its ClientToken
    world.record("default-a", first, NodeClaimState.INITIALIZED)
    world.node("node-default-a", first)

    report = world.invariants.check()

    several = {claim: sorted(ids) for claim, ids in report.claims_with_several_instances.items()}
    assert several == {"default-a": sorted([first, second])}
    assert any("has 2 instances" in v for v in report.violations())


def test_a_received_message_neither_acknowledged_nor_parked_is_lost(world: World) -> None:
    acted = world.send('{"ok": true}')
    dropped = world.send('{"dropped": true}')
    for message in world.receive():
        if message["MessageId"] == acted:
            world.acknowledge(message)
    # ``dropped`` was received and then neither acknowledged nor parked: nobody acted on it.
    report = world.invariants.check(final=True)

    assert dropped in report.lost_messages and acted not in report.lost_messages
    assert report.messages_received == 2 and report.messages_acted_on == 1
    assert any("interruption messages lost" in v for v in report.violations())


def test_a_message_redriven_to_the_dlq_without_a_reason_is_lost(world: World) -> None:
    parked = world.send('{"malformed": true}')
    redriven = world.send('{"failing": true}')
    for message in world.receive():
        if message["MessageId"] == parked:
            world.park(message, "not an EventBridge event")
    # ``redriven`` failed once; with maxReceiveCount 1 the queue's redrive moves it to the DLQ on the
    # next receive, with no reason attached: somebody gave up on it silently.
    assert world.receive() == []
    dlq = world.sqs.get_queue_attributes(
        QueueUrl=world.resources.dlq_url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    assert dlq["ApproximateNumberOfMessages"] == "2"

    during = world.invariants.check()
    final = world.invariants.check(final=True)

    for report in (during, final):
        assert redriven in report.lost_messages and parked not in report.lost_messages
        assert report.messages_parked == 1
    assert final.lost_messages.count(redriven) == 1


def test_a_node_with_our_finalizer_and_no_instance_is_reported(world: World) -> None:
    live = world.launch("default-a")
    world.record("default-a", live, NodeClaimState.INITIALIZED)
    world.node("node-default-a", live)
    gone = world.launch("default-b")
    world.ec2.terminate_instances(InstanceIds=[gone])
    world.node("node-default-b", gone, deleting=True)  # TerminateInstances sent; the finalizer stayed

    within = world.invariants.check()
    assert within.ok, "a finalizer is removed a little after TerminateInstances"

    world.advance(world.invariants.finalizer_deadline + 1)
    past = world.invariants.check()
    at_the_end = Invariants(world.simulation).check(final=True)

    for report in (past, at_the_end):
        assert report.nodes_with_finalizer_and_no_instance == ["node-default-b"]
    assert any("our finalizer and no instance" in v for v in past.violations())


def test_a_non_terminal_pod_not_running_at_the_end_is_reported(world: World) -> None:
    world.pod("web-1", "Running")
    world.pod("web-2", "Pending")
    world.pod("job-1", "Succeeded")
    world.pod("job-2", "Failed")

    during = world.invariants.check()
    world.advance(90)
    final = world.invariants.check(final=True)

    assert during.ok and during.pending_pods == 1, "pending pods are normal while the cluster scales"
    assert final.pods_not_running == ["default/web-2"]
    assert final.max_pending_seconds == 90
    assert any("not Running at the end" in v for v in final.violations())


def test_the_longest_pending_time_is_sampled_between_checks(world: World) -> None:
    world.pod("web-1", "Pending")
    world.advance(40)
    world.invariants.observe_pending()
    world.kube.pods[0]["status"]["phase"] = "Running"  # ran before the next check came
    world.advance(60)

    report = world.invariants.check()

    assert report.pending_pods == 0
    assert report.max_pending_seconds == 40


def test_a_pdb_violation_recorded_by_the_api_servers_audit_is_reported(world: World) -> None:
    store = world.kube_server.store
    store.create(
        kind_of("policy", "v1", "poddisruptionbudgets"),
        "default",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    pods = kind_of("", "v1", "pods")
    store.create(
        pods,
        "default",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "pause"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        },
    )
    assert world.invariants.check().pdb_violations == 0

    # A plain delete, not an eviction: nothing checks the budget, and the audit records the breach.
    store.delete(pods, "default", "web-1", {"gracePeriodSeconds": 0})
    report = world.invariants.check()

    assert report.pdb_violations == 1
    assert any("PodDisruptionBudget violation" in v for v in report.violations())


def test_a_deletion_begun_but_never_carried_through_is_reported(world: World) -> None:
    stalled = world.launch("default-a")
    world.record("default-a", stalled, NodeClaimState.DISRUPTING)
    world.node("node-default-a", stalled)  # marked for deletion, but nobody deleted its Node
    draining = world.launch("default-b")
    world.record("default-b", draining, NodeClaimState.DRAINING)
    world.node("node-default-b", draining, deleting=True)

    within = world.invariants.check()
    assert within.ok, "an interruption that died part-way is retried after the visibility timeout"

    world.advance(world.invariants.deletion_deadline + 1)
    past = world.invariants.check()

    assert past.deletions_not_carried_through == ["default-a"]
    assert any("not being deleted" in v for v in past.violations())


def test_a_deleting_claim_with_neither_node_nor_instance_is_reported(world: World) -> None:
    gone = world.launch("default-a")
    world.ec2.terminate_instances(InstanceIds=[gone])
    world.record("default-a", gone, NodeClaimState.TERMINATING)  # never closed

    assert world.invariants.check().ok
    world.advance(world.invariants.finalizer_deadline + 1)
    report = world.invariants.check()

    assert report.claims_stuck_deleting == ["default-a"]
