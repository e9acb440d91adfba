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
