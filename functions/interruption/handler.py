"""Interruption: EventBridge messages from the SQS queue, each acted on once (Idempotency by event id).

A malformed message, or one whose action raises an error retrying cannot mend, is parked in the DLQ
with its reason and acknowledged; a transient failure is
reported as a batch item failure so SQS delivers it again, within seconds rather than after the queue's
visibility timeout; the rest of the batch goes on.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.typing import LambdaContext
from serverless_karpenter import state_schema
from serverless_karpenter.config import load_settings
from serverless_karpenter.interruption.messages import EventEnvelope, MalformedMessage, parse_message
from serverless_karpenter.interruption.usecases import act_on, act_or_park, park_malformed, retry_failed_soon
from serverless_karpenter.observability import bind_cluster, logger, metrics, tracer
from serverless_karpenter.runtime import control_plane

# A batch whose every message failed is reported like any other partial failure (all items listed)
# rather than raised: SQS retries the same messages either way, and a transient blip is no Lambda error.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
# The decorator below wants its store at import: the table is the one every function is given.
persistence = DynamoDBPersistenceLayer(
    table_name=load_settings().state_table_name,
    key_attr=state_schema.PARTITION_KEY,
    sort_key_attr=state_schema.SORT_KEY,
    expiry_attr=state_schema.IDEMPOTENCY_EXPIRY_ATTRIBUTE,
)
idempotency = IdempotencyConfig(event_key_jmespath="id", expires_after_seconds=6 * 3600)


@idempotent_function(data_keyword_argument="message", config=idempotency, persistence_store=persistence)
def act_once(message: EventEnvelope) -> dict[str, Any]:
    return act_on(control_plane(), message)


def record_handler(record: SQSRecord) -> dict[str, Any] | None:
    try:
        message = parse_message(record.body)
    except MalformedMessage as error:
        park_malformed(control_plane(), record.message_id, record.body, str(error))
        return None
    return act_or_park(control_plane(), record.message_id, record.body, lambda: act_once(message=message))


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    bind_cluster(control_plane().settings.cluster_name)
    idempotency.register_lambda_context(context)
    response = process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
    retry_failed_soon(control_plane(), processor)
    return response
