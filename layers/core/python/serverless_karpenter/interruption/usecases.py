"""Use cases behind the interruption handler: act once per message, park malformed ones in the DLQ, and
have the messages that failed delivered again within seconds."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyAlreadyInProgressError

from serverless_karpenter.adapters import aws, sqs
from serverless_karpenter.deployment import FUNCTION_TIMEOUT_SECONDS
from serverless_karpenter.interruption.actions import Outcome, handle
from serverless_karpenter.interruption.messages import EventEnvelope
from serverless_karpenter.observability import MetricName, MetricUnit, logger, metrics
from serverless_karpenter.provisioning.context import ControlPlane


def act_on(plane: ControlPlane, message: EventEnvelope) -> dict[str, Any]:
    outcome: Outcome = handle(plane, message)
    return {"id": message.id, "kind": message.detail_type, "actions": outcome.actions}


def park_malformed(plane: ControlPlane, message_id: str, body: str, reason: str) -> None:
    """Send a message we cannot parse to the DLQ with its reason; retrying it would never help."""
    metrics.add_metric(name=MetricName.INTERRUPTION_MALFORMED, unit=MetricUnit.Count, value=1)
    logger.error(
        "malformed interruption message sent to the DLQ", extra={"message-id": message_id, "reason": reason}
    )
    aws.client("sqs", plane.settings.aws_region).send_message(
        QueueUrl=plane.settings.interruption_dlq_url,
        MessageBody=body,
        MessageAttributes={
            "reason": {"DataType": "String", "StringValue": reason[:1024]},
            "source-message-id": {"DataType": "String", "StringValue": message_id},
        },
    )


# Errors that say the message itself cannot be acted on (a field of the wrong type or shape that parsing
# let through, a value out of range), however often it is delivered again. Retrying one would end in the
# queue's redrive moving it to the DLQ with no reason: it is parked with its reason at once instead.
# Anything else (a throttled call, a Kubernetes 5xx, a lost write race) is transient and retried.
UNACTIONABLE_ERRORS: tuple[type[Exception], ...] = (
    TypeError,
    ValueError,
    KeyError,
    AttributeError,
    IndexError,
)


def act_or_park(
    plane: ControlPlane, message_id: str, body: str, act: Callable[[], dict[str, Any]]
) -> dict[str, Any] | None:
    """Act on a parsed message; one that raises an unactionable error is parked in the DLQ with its reason
    (and acknowledged) rather than retried into a silent redrive."""
    try:
        return act()
    except UNACTIONABLE_ERRORS as error:
        park_malformed(plane, message_id, body, f"acting on it raised {type(error).__name__}: {error}")
        return None


# A message reported as a batch item failure (a throttled call, a Kubernetes 5xx, a lost write race) is
# otherwise hidden for the queue's whole visibility timeout, 6 x the function timeout (120 s): a spot
# warning gives two minutes, so its retry would come after the instance is gone. It is shown again after
# this many seconds instead, doubled at each receive and capped well inside those two minutes. (A crashed
# invocation reports nothing: its messages rightly wait out the visibility timeout, by which time its
# idempotency record is no longer in progress.)
RETRY_FIRST_DELAY_SECONDS = 2
RETRY_MAX_DELAY_SECONDS = 20
# Refused because another invocation holds the event's idempotency record: that one finishes, fails or is
# cut off within the function timeout (its record's in-progress window ends then too); retry just after.
RETRY_IN_PROGRESS_DELAY_SECONDS = FUNCTION_TIMEOUT_SECONDS["interruption"] + 1


def retry_delay_seconds(receive_count: int, error: BaseException | None) -> int:
    """How long a message that failed on its ``receive_count``-th receive stays hidden before the next."""
    if isinstance(error, IdempotencyAlreadyInProgressError):
        return RETRY_IN_PROGRESS_DELAY_SECONDS
    return min(RETRY_MAX_DELAY_SECONDS, RETRY_FIRST_DELAY_SECONDS * 2 ** max(0, receive_count - 1))


def retry_failed_soon(plane: ControlPlane, processor: BatchProcessor) -> None:
    """Shorten the visibility of the messages ``processor`` just reported as failed.

    Best effort: if the change fails the messages keep the queue's visibility timeout, so they are
    delivered later, never lost; nothing here raises.
    """
    failed = list(zip(processor.fail_messages, processor.exceptions, strict=True))
    if not failed:
        return
    delays: dict[str, int] = {}
    for record, (_, error, _) in failed:
        if not isinstance(record, SQSRecord):  # the processor is built for SQS: nothing else comes
            continue
        try:
            receive_count = int(record.attributes.get("ApproximateReceiveCount") or 1)
        except (TypeError, ValueError):
            receive_count = 1
        delays[record.receipt_handle] = retry_delay_seconds(receive_count, error)
    queue_url = plane.settings.interruption_queue_url
    if not queue_url:
        logger.warning("no interruption queue URL: failed messages wait out the visibility timeout")
        return
    try:
        refused = sqs.change_visibility(plane.settings.aws_region, queue_url, delays)
    except Exception as error:  # whatever went wrong, the batch response must still be returned
        logger.warning(
            "could not shorten the visibility of failed interruption messages; "
            "they are delivered again after the queue's visibility timeout",
            extra={"messages": len(delays), "error": f"{type(error).__name__}: {error}"},
        )
        return
    if refused:  # a receipt handle gone stale, say: those wait out the visibility timeout
        logger.warning(
            "SQS refused to shorten the visibility of failed interruption messages",
            extra={"messages": len(refused)},
        )
    logger.info(
        "failed interruption messages will be delivered again soon",
        extra={"delays": sorted(delays[r] for r in delays if r not in refused)},
    )


def summary(results: list[dict[str, Any]]) -> str:
    return json.dumps(results, default=str)
