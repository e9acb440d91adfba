"""Parsing the interruption queue's EventBridge envelopes, on AWS's own sample payloads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serverless_karpenter.interruption.messages import MalformedMessage, parse_message
from serverless_karpenter.interruption.rules import RULE_PATTERNS, MessageKind

SAMPLES = Path(__file__).parent.parent / "data" / "events"


@pytest.mark.parametrize(
    ("sample", "kind", "instances"),
    [
        ("spot-interruption-warning.json", MessageKind.SPOT_INTERRUPTION, ["i-0123456789"]),
        ("rebalance-recommendation.json", MessageKind.REBALANCE_RECOMMENDATION, ["i-0b662ef9931388ba0"]),
        ("instance-state-change-pending.json", MessageKind.STATE_CHANGE, ["i-abcd1111"]),
        ("instance-state-change-terminated.json", MessageKind.STATE_CHANGE, ["i-0123456789abcdef0"]),
        ("aws-health-scheduled-change.json", MessageKind.SCHEDULED_CHANGE, ["i-12345678"]),
        (
            "capacity-reservation-interruption-warning.json",
            MessageKind.CAPACITY_RESERVATION_INTERRUPTION,
            ["i-0123456789abcdef0"],
        ),
    ],
)
def test_every_sample_parses_to_its_kind_and_instances(
    sample: str, kind: MessageKind, instances: list[str]
) -> None:
    message = parse_message((SAMPLES / sample).read_text())
    assert message.kind == kind
    assert message.instance_ids() == instances


def test_every_kind_has_a_rule_matching_its_detail_type() -> None:
    covered = {pattern["detail-type"][0] for pattern in RULE_PATTERNS.values()}
    assert covered == {k.value for k in MessageKind}
    assert RULE_PATTERNS["ScheduledChange"]["detail"] == {
        "service": ["EC2"],
        "eventTypeCategory": ["scheduledChange"],
    }


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "not an EventBridge envelope"),
        (
            json.dumps(
                {"version": "0", "id": "x", "source": "aws.ec2", "time": "2024-01-01T00:00:00Z", "detail": {}}
            ),
            "detail-type",
        ),
        (
            json.dumps(
                {
                    "version": "0",
                    "id": "x",
                    "detail-type": "EC2 Spot Instance Interruption Warning",
                    "source": "aws.ec2",
                    "time": "2024-01-01T00:00:00Z",
                    "detail": {},
                }
            ),
            "instance-id",
        ),
    ],
)
def test_malformed_bodies_say_what_is_wrong(body: str, reason: str) -> None:
    with pytest.raises(MalformedMessage, match=reason):
        parse_message(body)


def test_an_unknown_kind_parses_and_has_no_kind() -> None:
    body = json.dumps(
        {
            "version": "0",
            "id": "x",
            "detail-type": "Something Else",
            "source": "aws.s3",
            "time": "2024-01-01T00:00:00Z",
            "detail": {},
        }
    )
    assert parse_message(body).kind is None


def health_event(**detail: object) -> str:
    body = json.loads((SAMPLES / "aws-health-scheduled-change.json").read_text())
    body["detail"].update(detail)
    body["detail"] = {k: v for k, v in body["detail"].items() if v is not None}
    return json.dumps(body)


@pytest.mark.parametrize(
    ("detail", "reason"),
    [
        # Another service's scheduled change: an RDS maintenance names no instance of ours to drain.
        ({"service": "RDS"}, "detail.service is 'RDS', not 'EC2'"),
        ({"service": None}, "detail.service is missing, not 'EC2'"),
        # EC2, but not a scheduled change: an issue or an account notification drains nothing.
        ({"eventTypeCategory": "issue"}, "detail.eventTypeCategory is 'issue', not 'scheduledChange'"),
        (
            {"eventTypeCategory": "accountNotification"},
            "detail.eventTypeCategory is 'accountNotification', not 'scheduledChange'",
        ),
        ({"eventTypeCategory": None}, "detail.eventTypeCategory is missing, not 'scheduledChange'"),
    ],
    ids=["rds", "no-service", "issue", "account-notification", "no-category"],
)
def test_health_events_other_than_ec2_scheduled_changes_are_refused_naming_field_and_rule(
    detail: dict[str, object], reason: str
) -> None:
    """As the ScheduledChange rule's pattern and Karpenter's scheduledchange parser: whatever reaches the
    queue by another way is refused, with a reason for the DLQ, not acted on."""
    with pytest.raises(MalformedMessage) as refused:
        parse_message(health_event(**detail))
    assert reason in str(refused.value)
    assert "ScheduledChange rule" in str(refused.value)


def test_an_ec2_scheduled_change_is_accepted() -> None:
    message = parse_message(health_event(service="EC2", eventTypeCategory="scheduledChange"))
    assert message.kind == MessageKind.SCHEDULED_CHANGE and message.instance_ids() == ["i-12345678"]
