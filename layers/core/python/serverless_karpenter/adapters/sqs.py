"""SQS calls a handler makes on the queue that triggers it."""

from __future__ import annotations

from collections.abc import Mapping

from serverless_karpenter.adapters import aws

# ChangeMessageVisibilityBatch takes at most ten entries (an SQS event source's default batch size).
MAX_BATCH_ENTRIES = 10


def change_visibility(region: str, queue_url: str, seconds_by_receipt: Mapping[str, int]) -> list[str]:
    """Hide each received message (by receipt handle) for its number of seconds from now.

    Returns the receipt handles SQS refused (an expired receipt handle, say); a failed call raises.
    """
    client = aws.client("sqs", region)
    receipts = list(seconds_by_receipt)
    refused: list[str] = []
    for start in range(0, len(receipts), MAX_BATCH_ENTRIES):
        chunk = receipts[start : start + MAX_BATCH_ENTRIES]
        response = client.change_message_visibility_batch(
            QueueUrl=queue_url,
            Entries=[
                {"Id": str(index), "ReceiptHandle": receipt, "VisibilityTimeout": seconds_by_receipt[receipt]}
                for index, receipt in enumerate(chunk)
            ],
        )
        refused.extend(chunk[int(failure["Id"])] for failure in response.get("Failed") or [])
    return refused
