"""Use cases behind the interruption handler: act once per message, park malformed ones in the DLQ."""

from __future__ import annotations

import json
from typing import Any

from serverless_karpenter.adapters import aws
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


def summary(results: list[dict[str, Any]]) -> str:
    return json.dumps(results, default=str)
