"""Queues that do not drop spot warnings, proved on the synthesized template.

A message reaches a DLQ only by its queue's redrive: once it has been received ``maxReceiveCount`` times.
Three paths receive a message without it being acted on:

- **throttling**: an SQS event source that invokes a function beyond what the function may run gets a
  429, and the messages it had received return to the queue after the visibility timeout, one receive
  spent. Neither queue's function can be throttled: its event source is its only invoker (no invoke
  permission, schedule or IAM grant names it), the source's ``MaximumConcurrency`` is at most the
  function's reserved concurrency, and the reservation keeps the account's other functions off it.
- **a failed or crashed invocation**: each costs one receive and hides the message for at most the
  visibility timeout (the interruption handler shortens that for a message it reports failed). The
  interruption queue allows at least 5 receives, and keeps a message long enough for all of them.
- **an invocation still running**: the visibility timeout is at least six times the function's timeout,
  so a batch never reappears while its invocation runs, or while Lambda retries invoking it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from serverless_karpenter import deployment
from serverless_karpenter.interruption.usecases import (
    RETRY_IN_PROGRESS_DELAY_SECONDS,
    RETRY_MAX_DELAY_SECONDS,
    retry_delay_seconds,
)

from tests.infra.conftest import Synthesized
from tests.infra.helpers import (
    CLUSTERS,
    as_list,
    render,
    resources_of_type,
    statements,
)

pytestmark = pytest.mark.infra

# Written out here, not imported from infra: AWS's guidance for SQS event sources, and the floor of an
# event source's MaximumConcurrency.
MIN_RECEIVES = 5
MIN_EVENT_SOURCE_CONCURRENCY = 2
VISIBILITY_FACTOR = 6


def consumers(template: dict[str, Any]) -> dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """Each SQS event source by its queue's logical id: (mapping, queue, function) properties."""
    queues = resources_of_type(template, "AWS::SQS::Queue")
    functions = resources_of_type(template, "AWS::Lambda::Function")
    found = {}
    for mapping in resources_of_type(template, "AWS::Lambda::EventSourceMapping").values():
        props = mapping["Properties"]
        queue_id = props["EventSourceArn"]["Fn::GetAtt"][0]
        function_id = props["FunctionName"]["Ref"]
        found[queue_id] = (
            props,
            queues[queue_id]["Properties"],
            {"Id": function_id, **functions[function_id]},
        )
    assert {q.split("Queue")[0] for q in found} == {"Interruption", "TerminationWork"}, sorted(found)
    return found


def names_function(value: Any, function_id: str) -> bool:
    """Whether a CloudFormation value (a Ref, a GetAtt, a Join of them) refers to the function."""
    rendered = render(value)
    return f"<{function_id}>" in rendered or f"<{function_id}.Arn>" in rendered


def invokers(template: dict[str, Any], function_id: str) -> list[str]:
    """Everything in the template that could invoke the function, other than an event source mapping."""
    found = [
        f"permission {logical_id}"
        for logical_id, permission in resources_of_type(template, "AWS::Lambda::Permission").items()
        if names_function(permission["Properties"]["FunctionName"], function_id)
    ]
    found += [
        f"rule {logical_id}"
        for logical_id, rule in resources_of_type(template, "AWS::Events::Rule").items()
        for target in rule["Properties"].get("Targets", [])
        if names_function(target["Arn"], function_id)
    ]
    found += [
        f"statement in {logical_id}"
        for logical_id, statement in statements(template, "identity")
        if statement["Effect"] == "Allow"
        and any(a in ("lambda:InvokeFunction", "lambda:*", "*") for a in as_list(statement["Action"]))
        and any(names_function(r, function_id) or render(r) == "*" for r in as_list(statement["Resource"]))
    ]
    return found


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_no_event_source_can_be_throttled(synthesized: Synthesized, cluster: str) -> None:
    template = synthesized.templates[cluster]
    for queue_id, (mapping, _, function) in consumers(template).items():
        reserved = function["Properties"].get("ReservedConcurrentExecutions")
        maximum = (mapping.get("ScalingConfig") or {}).get("MaximumConcurrency")
        assert reserved is not None and maximum is not None, queue_id
        assert MIN_EVENT_SOURCE_CONCURRENCY <= maximum <= reserved, (queue_id, maximum, reserved)
        # The event source is the function's only invoker, so it may use all of the reservation.
        assert invokers(template, function["Id"]) == [], queue_id
        others = [
            m
            for m in resources_of_type(template, "AWS::Lambda::EventSourceMapping").values()
            if m["Properties"]["FunctionName"]["Ref"] == function["Id"]
        ]
        assert len(others) == 1, queue_id


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_a_batch_never_reappears_while_its_invocation_may_still_run(
    synthesized: Synthesized, cluster: str
) -> None:
    for queue_id, (_, queue, function) in consumers(synthesized.templates[cluster]).items():
        assert queue["VisibilityTimeout"] >= VISIBILITY_FACTOR * function["Properties"]["Timeout"], queue_id


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_a_live_interruption_message_is_received_five_times_before_the_dlq_and_before_it_expires(
    synthesized: Synthesized, cluster: str
) -> None:
    (queue_id,) = [q for q in consumers(synthesized.templates[cluster]) if q.startswith("InterruptionQueue")]
    _, queue, function = consumers(synthesized.templates[cluster])[queue_id]
    receives = queue["RedrivePolicy"]["maxReceiveCount"]
    visibility = queue["VisibilityTimeout"]
    assert receives >= MIN_RECEIVES
    # The slowest path to the DLQ: every invocation crashes, so the message stays hidden for the whole
    # visibility timeout at each receive; it is moved on the next receive after the last. It must get
    # there (and raise the DLQ alarm) before the queue's retention drops it.
    assert (receives + 1) * visibility <= queue["MessageRetentionPeriod"]
    # A message the handler reports failed is shown again sooner, never later (each delay is below the
    # visibility timeout), so the faster retries spend receives, never time beyond the retention.
    for receive in range(1, receives + 1):
        assert 0 < retry_delay_seconds(receive, RuntimeError()) <= RETRY_MAX_DELAY_SECONDS < visibility
    assert visibility > RETRY_IN_PROGRESS_DELAY_SECONDS
    # Failures are partial: one bad message does not spend the receives of the rest of its batch.
    mapping, _, _ = consumers(synthesized.templates[cluster])[queue_id]
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert function["Properties"]["Timeout"] == deployment.FUNCTION_TIMEOUT_SECONDS["interruption"]


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_the_termination_schedule_goes_through_its_queue(synthesized: Synthesized, cluster: str) -> None:
    """The scheduled pass no longer competes with the event source for the function's reservation: the
    schedule sends the queue a message, and the event source runs it like any other."""
    template = synthesized.templates[cluster]
    (queue_id,) = [q for q in consumers(template) if q.startswith("TerminationWorkQueue")]
    targets = [
        target
        for rule in resources_of_type(template, "AWS::Events::Rule").values()
        if rule["Properties"].get("ScheduleExpression") == "rate(1 minute)"
        for target in rule["Properties"]["Targets"]
        if target["Arn"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    ]
    assert len(targets) == 1
    assert json.loads(targets[0]["Input"]) == {"reason": deployment.TERMINATION_SCHEDULED_PASS}
    # EventBridge may send to the queue, from that rule only.
    policies = [
        p["Properties"]["PolicyDocument"]["Statement"]
        for p in resources_of_type(template, "AWS::SQS::QueuePolicy").values()
        if p["Properties"]["Queues"] == [{"Ref": queue_id}]
    ]
    assert len(policies) == 1
    (allow,) = [s for s in policies[0] if s["Effect"] == "Allow"]
    assert allow["Principal"] == {"Service": "events.amazonaws.com"}
    assert as_list(allow["Action"]) == ["sqs:SendMessage"]
    assert "aws:SourceArn" in allow["Condition"]["ArnEquals"]
