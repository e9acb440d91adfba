"""Messages that parse and then cannot be acted on are parked in the DLQ with their reason at once, not
retried until the queue's redrive moves them there silently (issue 17)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from serverless_karpenter.adapters import aws
from serverless_karpenter.interruption.messages import MalformedMessage, parse_message
from serverless_karpenter.interruption.usecases import act_or_park
from serverless_karpenter.provisioning.context import ControlPlane

SAMPLES = Path(__file__).parent.parent / "data" / "events"
REGION = "us-east-1"


def _sample(name: str, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((SAMPLES / name).read_text())
    return {**body, **changes}


def test_a_time_without_a_timezone_is_malformed() -> None:
    body = _sample("spot-interruption-warning.json", time="2025-01-01T00:00:00")

    with pytest.raises(MalformedMessage, match=r"envelope field time: .*timezone"):
        parse_message(json.dumps(body))


@pytest.mark.parametrize("entities", ["i-12345678", ["i-12345678"], {"entityValue": "i-12345678"}])
def test_health_affected_entities_that_are_not_a_list_of_objects_are_malformed(entities: Any) -> None:
    sample = _sample("aws-health-scheduled-change.json")
    body = {**sample, "detail": {**sample["detail"], "affectedEntities": entities}}

    with pytest.raises(MalformedMessage, match="affectedEntities"):
        parse_message(json.dumps(body))


@pytest.fixture
def plane(monkeypatch: pytest.MonkeyPatch) -> Iterator[ControlPlane]:
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        aws.reset_sessions()
        dlq = boto3.client("sqs", region_name=REGION).create_queue(QueueName="dlq")["QueueUrl"]
        settings = SimpleNamespace(aws_region=REGION, interruption_dlq_url=dlq)
        yield cast("ControlPlane", SimpleNamespace(settings=settings))
    aws.reset_sessions()


def _parked(plane: ControlPlane) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = (
        boto3.client("sqs", region_name=REGION)
        .receive_message(
            QueueUrl=plane.settings.interruption_dlq_url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
        )
        .get("Messages", [])
    )
    return messages


def test_an_unactionable_error_while_acting_is_parked_with_its_reason(plane: ControlPlane) -> None:
    def act() -> dict[str, Any]:
        raise TypeError("can't subtract offset-naive and offset-aware datetimes")

    assert act_or_park(plane, "m-1", '{"id": "e-1"}', act) is None

    [parked] = _parked(plane)
    attributes = parked["MessageAttributes"]
    assert attributes["reason"]["StringValue"] == (
        "acting on it raised TypeError: can't subtract offset-naive and offset-aware datetimes"
    )
    assert attributes["source-message-id"]["StringValue"] == "m-1"
    assert parked["Body"] == '{"id": "e-1"}'


def test_a_transient_error_is_raised_for_a_retry_and_nothing_is_parked(plane: ControlPlane) -> None:
    def act() -> dict[str, Any]:
        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "GetItem")

    with pytest.raises(ClientError):
        act_or_park(plane, "m-1", "{}", act)
    assert _parked(plane) == []
    assert act_or_park(plane, "m-2", "{}", lambda: {"id": "e-2"}) == {"id": "e-2"}
