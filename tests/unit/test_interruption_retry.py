"""Failed interruption messages are made visible again within seconds (issue 10), best effort."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import boto3
import pytest
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyAlreadyInProgressError
from moto import mock_aws
from serverless_karpenter.adapters import aws, sqs
from serverless_karpenter.config import Settings
from serverless_karpenter.deployment import (
    FUNCTION_TIMEOUT_SECONDS,
    INTERRUPTION_VISIBILITY_TIMEOUT_SECONDS,
)
from serverless_karpenter.interruption.actions import SPOT_WARNING
from serverless_karpenter.interruption.usecases import (
    RETRY_FIRST_DELAY_SECONDS,
    RETRY_MAX_DELAY_SECONDS,
    retry_delay_seconds,
    retry_failed_soon,
)
from serverless_karpenter.provisioning.context import ControlPlane

QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/interruption"


def plane(queue_url: str = QUEUE_URL) -> ControlPlane:
    settings = Settings(cluster_name="test", interruption_queue_url=queue_url)
    return cast(ControlPlane, SimpleNamespace(settings=settings))


def sqs_record(message_id: str, body: str, receive_count: int) -> dict[str, Any]:
    return {
        "messageId": message_id,
        "receiptHandle": f"receipt-{message_id}",
        "body": body,
        "attributes": {"ApproximateReceiveCount": str(receive_count)},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:interruption",
        "awsRegion": "us-east-1",
    }


def run_batch(records: list[dict[str, Any]]) -> tuple[BatchProcessor, list[str]]:
    """Process ``records``: a body names what its handler does ("ok", "fail" or "in-progress")."""

    def handler(record: SQSRecord) -> str:
        if record.body == "fail":
            raise RuntimeError("throttled")
        if record.body == "in-progress":
            raise IdempotencyAlreadyInProgressError("another invocation holds this event")
        return record.body

    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    response = process_partial_response(
        event={"Records": records}, record_handler=handler, processor=processor
    )
    return processor, [f["itemIdentifier"] for f in response["batchItemFailures"]]


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, dict[str, int]]]:
    seen: list[tuple[str, str, dict[str, int]]] = []

    def change_visibility(region: str, queue_url: str, seconds_by_receipt: dict[str, int]) -> list[str]:
        seen.append((region, queue_url, dict(seconds_by_receipt)))
        return []

    monkeypatch.setattr(sqs, "change_visibility", change_visibility)
    return seen


def test_the_delay_doubles_with_each_receive_and_stays_inside_the_spot_warning() -> None:
    delays = [retry_delay_seconds(count, RuntimeError()) for count in range(1, 8)]
    assert delays[0] == RETRY_FIRST_DELAY_SECONDS
    assert delays == sorted(delays) and delays[-1] == RETRY_MAX_DELAY_SECONDS
    assert all(b in (2 * a, RETRY_MAX_DELAY_SECONDS) for a, b in itertools.pairwise(delays))
    assert SPOT_WARNING.total_seconds() > 2 * RETRY_MAX_DELAY_SECONDS
    assert RETRY_MAX_DELAY_SECONDS < INTERRUPTION_VISIBILITY_TIMEOUT_SECONDS


def test_an_event_in_progress_elsewhere_is_retried_once_that_invocation_must_be_over() -> None:
    error = IdempotencyAlreadyInProgressError("in progress")
    assert retry_delay_seconds(1, error) > FUNCTION_TIMEOUT_SECONDS["interruption"]
    assert retry_delay_seconds(1, error) < INTERRUPTION_VISIBILITY_TIMEOUT_SECONDS


def test_only_the_failed_messages_are_shown_again_sooner(
    calls: list[tuple[str, str, dict[str, int]]],
) -> None:
    processor, failed = run_batch(
        [
            sqs_record("a", "ok", 1),
            sqs_record("b", "fail", 1),
            sqs_record("c", "fail", 2),
            sqs_record("d", "in-progress", 1),
        ]
    )
    assert failed == ["b", "c", "d"]
    retry_failed_soon(plane(), processor)
    assert calls == [
        (
            "us-east-1",
            QUEUE_URL,
            {
                "receipt-b": RETRY_FIRST_DELAY_SECONDS,
                "receipt-c": 2 * RETRY_FIRST_DELAY_SECONDS,
                "receipt-d": FUNCTION_TIMEOUT_SECONDS["interruption"] + 1,
            },
        )
    ]


def test_a_clean_batch_makes_no_call(calls: list[tuple[str, str, dict[str, int]]]) -> None:
    processor, failed = run_batch([sqs_record("a", "ok", 1)])
    assert failed == []
    retry_failed_soon(plane(), processor)
    assert calls == []


def test_a_failed_visibility_change_is_logged_and_never_raised(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def change_visibility(*_: Any) -> list[str]:
        raise RuntimeError("AccessDenied")

    monkeypatch.setattr(sqs, "change_visibility", change_visibility)
    processor, failed = run_batch([sqs_record("a", "fail", 1)])
    assert failed == ["a"]
    retry_failed_soon(plane(), processor)  # the batch response is still returned: SQS retries later
    assert any("could not shorten the visibility" in r.getMessage() for r in caplog.records)


def test_without_a_queue_url_nothing_is_called(calls: list[tuple[str, str, dict[str, int]]]) -> None:
    processor, _ = run_batch([sqs_record("a", "fail", 1)])
    retry_failed_soon(plane(queue_url=""), processor)
    assert calls == []


# -- the adapter, on moto -------------------------------------------------------------------------------


@pytest.fixture
def queue(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, str]]:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    aws.reset_sessions()
    with mock_aws():
        client = boto3.client("sqs", region_name="us-east-1")
        url = client.create_queue(QueueName="interruption", Attributes={"VisibilityTimeout": "120"})[
            "QueueUrl"
        ]
        yield client, url
    aws.reset_sessions()


def receive_all(client: Any, url: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    while batch := client.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
        messages.extend(batch)
    return messages


def test_change_visibility_covers_more_than_one_batch_of_ten(queue: tuple[Any, str]) -> None:
    client, url = queue
    for index in range(12):
        client.send_message(QueueUrl=url, MessageBody=str(index))
    received = receive_all(client, url)
    assert len(received) == 12
    assert receive_all(client, url) == []  # hidden for the queue's 120 s
    refused = sqs.change_visibility("us-east-1", url, {m["ReceiptHandle"]: 0 for m in received})
    assert refused == []
    assert sorted(m["Body"] for m in receive_all(client, url)) == sorted(str(i) for i in range(12))


def test_change_visibility_reports_the_receipts_sqs_refused(queue: tuple[Any, str]) -> None:
    client, url = queue
    client.send_message(QueueUrl=url, MessageBody="x")
    (message,) = receive_all(client, url)
    refused = sqs.change_visibility("us-east-1", url, {"not-a-receipt": 0, message["ReceiptHandle"]: 0})
    assert refused == ["not-a-receipt"]
    assert [m["Body"] for m in receive_all(client, url)] == ["x"]
