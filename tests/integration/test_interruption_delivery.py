"""Acceptance 3 of issue 6, through the simulator: at-most-once effect for duplicates, malformed messages
to the DLQ beside valid ones, transient failures reported as batch item failures and retried within
seconds (or, should that fail, after the queue's visibility timeout)."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from serverless_karpenter import crashpoints
from serverless_karpenter.api import labels as wk
from serverless_karpenter.clock import to_rfc3339
from serverless_karpenter.interruption.usecases import RETRY_FIRST_DELAY_SECONDS
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.observability import Msg
from serverless_karpenter_sim.scenario import load_scenario
from serverless_karpenter_sim.simulation import Schedule, Simulation

pytestmark = pytest.mark.integration
FAST = Schedule(provisioner_every=15.0, boot_delay=10.0, ready_delay=5.0)


@pytest.fixture
def sim() -> Iterator[Simulation]:
    crashpoints.disarm_all()
    scenario = load_scenario("spot-interruption").model_copy(update={"steps": []})
    # Quicker machines and provisioner passes than the defaults: these tests are about order, not speed.
    simulation = Simulation(scenario, schedule=FAST, log=io.StringIO())
    simulation.start()
    try:
        simulation.run_for(45)
        assert sum(r.state == NodeClaimState.INITIALIZED for r in simulation.plane.store.list()) == 3
        yield simulation
    finally:
        simulation.stop()


def envelope(sim: Simulation, detail_type: str, instance_id: str, event_id: str | None = None) -> str:
    return json.dumps(
        {
            "version": "0",
            "id": event_id or str(uuid.uuid4()),
            "detail-type": detail_type,
            "source": "aws.ec2",
            "account": "123456789012",
            "time": to_rfc3339(sim.clock.now()),
            "region": "us-east-1",
            "resources": [f"arn:aws:ec2:us-east-1:123456789012:instance/{instance_id}"],
            "detail": {"instance-id": instance_id, "instance-action": "terminate"},
        }
    )


def log_records(sim: Simulation) -> list[dict[str, Any]]:
    out = []
    for line in sim.lambdas.log.getvalue().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def claims(sim: Simulation) -> list[NodeClaimRecord]:
    by_name = {r.name: r for r in sim.plane.store.list()}
    return [by_name[n] for n in sim.launch_order[:3]]


def test_duplicates_malformed_and_transient_failures(sim: Simulation) -> None:
    first, second, third = claims(sim)
    assert first.instance_id and second.instance_id and third.instance_id
    assert first.node_name and second.node_name and third.node_name
    queue = sim.resources.queue_url if sim.resources else ""

    # A transient Kubernetes API failure (503 on the Node delete) fails that message only; the handler
    # shortens its visibility, so SQS delivers it again within seconds, well inside the spot warning's two
    # minutes, and the retry finishes the job.
    fault = sim.kube_server.faults.add(verb="delete", resource="nodes", name=first.node_name, status=503)
    sim.send_raw(envelope(sim, "EC2 Spot Instance Interruption Warning", first.instance_id))
    sim.tick()
    assert fault.injected == 1
    assert sim.events_handled == 0  # reported as a batch item failure, left on the queue
    assert sim.interruption_messages_queued() == 1
    sim.run_for(RETRY_FIRST_DELAY_SECONDS + sim.schedule.tick_seconds)
    assert sim.events_handled == 1
    node = sim.kube.get_node(first.node_name)
    assert node is None or node["metadata"].get("deletionTimestamp")
    assert sim.lambdas.errors.get("interruption", 0) == 0

    # The same event delivered twice: one action, one drain.
    duplicate = envelope(sim, "EC2 Spot Instance Interruption Warning", second.instance_id, "dup-event-1")
    sim.send_raw(duplicate)
    sim.tick()
    assert sim.events_handled == 2
    sim.send_raw(duplicate)
    sim.tick()
    assert sim.events_handled == 3
    records = log_records(sim)
    initiated = [
        r
        for r in records
        if r.get("message") == Msg.INITIATING_DELETE_FROM_INTERRUPTION
        and r.get("instance") == second.instance_id
    ]
    assert len(initiated) == 1

    # A malformed message and a valid one in the same batch.
    sim.send_raw("{not json")
    sim.send_raw(envelope(sim, "EC2 Instance Rebalance Recommendation", third.instance_id))
    sim.tick()
    assert sim.events_handled == 5
    dlq = sim.sqs.receive_message(
        QueueUrl=sim.resources.dlq_url if sim.resources else "",
        MessageAttributeNames=["All"],
        MaxNumberOfMessages=10,
    )["Messages"]
    assert [m["Body"] for m in dlq] == ["{not json"]
    assert "not JSON" in dlq[0]["MessageAttributes"]["reason"]["StringValue"]
    events = k8s.CoreV1Api(sim.api_client).list_event_for_all_namespaces().items
    assert any(
        e.reason == "SpotRebalanceRecommendation" and e.involved_object.name == third.node_name
        for e in events
    )
    assert (
        sim.sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["ApproximateNumberOfMessages"])[
            "Attributes"
        ]["ApproximateNumberOfMessages"]
        == "0"
    )

    # A transient DynamoDB failure (throttled past botocore's retries) is retried the same way.
    sim.faults.arm({"dynamodb": "throttle", "operation": "Query", "function": "interruption"})
    sim.send_raw(envelope(sim, "EC2 Instance Rebalance Recommendation", third.instance_id))
    sim.tick()
    assert sim.faults.injected["dynamodb/throttle"] == 1
    assert sim.events_handled == 5
    sim.run_for(RETRY_FIRST_DELAY_SECONDS + sim.schedule.tick_seconds)
    assert sim.events_handled == 6

    # If shortening the visibility fails too, the message is not lost: it waits out the queue's
    # visibility timeout, as after a crash, and is acted on then.
    sim.faults.arm({"dynamodb": "throttle", "operation": "Query", "function": "interruption"})
    sim.faults.arm(
        {
            "aws": {"service": "sqs", "operation": "ChangeMessageVisibilityBatch", "error": "InternalError"},
            "function": "interruption",
        }
    )
    sim.send_raw(envelope(sim, "EC2 Instance Rebalance Recommendation", third.instance_id))
    sim.tick()
    failed_at = sim.elapsed - sim.schedule.tick_seconds  # the tick's work happened before its advance
    assert sim.faults.injected["dynamodb/throttle"] == 2
    assert sim.faults.injected["aws/InternalError"] == 1
    assert sim.events_handled == 6
    sim.run_for(failed_at + sim.interruption_visibility_timeout - sim.elapsed)
    assert sim.events_handled == 6  # hidden until the queue's visibility timeout is over
    sim.run_for(2 * sim.schedule.tick_seconds)
    assert sim.events_handled == 7
    assert sim.lambdas.errors.get("interruption", 0) == 0
    events = k8s.CoreV1Api(sim.api_client).list_event_for_all_namespaces().items
    rebalance_events = [e for e in events if e.reason == "SpotRebalanceRecommendation"]
    assert sum(e.count or 1 for e in rebalance_events) == 3

    # Two nodes drained at once against minAvailable 2: the PDB refuses one eviction (429), which is
    # retried with back-off until the first replacement runs.
    for _ in range(300):
        sim.tick()
        if sim.settled():
            break
    assert sim.settled()
    drains = [r for r in log_records(sim) if r.get("message") == "draining node"]
    assert sorted(r["node"] for r in drains) == sorted([first.node_name, second.node_name])
    assert sim.kube_server.audit.pdb_violations == 0
    assert sim.kube_server.audit.evictions_refused >= 1
    for record in (first, second):
        closed = sim.plane.store.get(record.name)
        assert closed is not None and closed.state == NodeClaimState.TERMINATED
    kept = sim.plane.store.get(third.name)
    assert kept is not None and kept.state == NodeClaimState.INITIALIZED  # a rebalance event only
    running = [p for p in sim.kube.list_pods() if (p.get("status") or {}).get("phase") == "Running"]
    assert len(running) == 3
    assert not [
        n
        for n in sim.kube.list_nodes()
        if wk.TERMINATION_FINALIZER in (n["metadata"].get("finalizers") or [])
        and n["metadata"].get("deletionTimestamp")
    ]


def health_event(sim: Simulation, instance_id: str, service: str, category: str) -> str:
    return json.dumps(
        {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "AWS Health Event",
            "source": "aws.health",
            "account": "123456789012",
            "time": to_rfc3339(sim.clock.now()),
            "region": "us-east-1",
            "resources": [instance_id],
            "detail": {
                "eventArn": "arn:aws:health:us-east-1::event/EC2/x",
                "service": service,
                "eventTypeCode": "AWS_EC2_OPERATIONAL_ISSUE",
                "eventTypeCategory": category,
                "startTime": "Sat, 05 Jun 2016 15:10:09 GMT",
                "affectedEntities": [{"entityValue": instance_id}],
            },
        }
    )


def test_health_events_the_rule_would_not_route_are_parked_not_acted_on(sim: Simulation) -> None:
    """An AWS Health event that is not an EC2 scheduled change, sent to the queue past the rule (by hand,
    or replayed), names one of our instances: it goes to the DLQ with its reason, and the node stays."""
    first, second, _ = claims(sim)
    assert first.instance_id and first.node_name and second.instance_id and second.node_name
    sim.send_raw(health_event(sim, first.instance_id, "EC2", "issue"))
    sim.send_raw(health_event(sim, second.instance_id, "RDS", "scheduledChange"))
    sim.run_for(10)

    # Read before the DLQ is received from below, which hides its messages from the invariants.
    report = sim.check_invariants()
    assert report.ok, report.violations()
    assert report.messages_received == report.messages_parked == 2 and report.lost_messages == []
    assert sim.lambdas.errors.get("interruption", 0) == 0
    dlq = sim.sqs.receive_message(
        QueueUrl=sim.resources.dlq_url if sim.resources else "",
        MessageAttributeNames=["All"],
        MaxNumberOfMessages=10,
    )["Messages"]
    reasons = sorted(m["MessageAttributes"]["reason"]["StringValue"] for m in dlq)
    assert len(reasons) == 2
    assert reasons[0].startswith(
        "AWS Health Event: detail.eventTypeCategory is 'issue', not 'scheduledChange'"
    )
    assert reasons[1].startswith("AWS Health Event: detail.service is 'RDS', not 'EC2'")
    assert all("ScheduledChange rule" in r for r in reasons)
    for claim in (first, second):
        record = sim.plane.store.get(claim.name)
        assert record is not None and record.state == NodeClaimState.INITIALIZED
        node = sim.kube.get_node(claim.node_name or "")
        assert node is not None and not node["metadata"].get("deletionTimestamp")
        assert not any(t.get("key") == wk.DISRUPTED_TAINT_KEY for t in node["spec"].get("taints") or [])
