"""Blobs that warm invocations share with cold ones, kept in the state table's ``CATALOG`` partition.

A cold Lambda would otherwise page through DescribeInstanceTypes, GetProducts and
DescribeSpotPriceHistory before it could place one pod. What the last invocation fetched is stored here
as one item per key, so a cold start reads it with one GetItem. Reads and writes are best effort: a
failure is logged and the caller fetches from AWS as if nothing had been stored.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from serverless_karpenter import state_schema as schema
from serverless_karpenter.observability import logger

if TYPE_CHECKING:  # the stubs are a development dependency only
    from mypy_boto3_dynamodb import DynamoDBClient

BLOB_ATTRIBUTE = "facts"


class PersistedBlobs:
    def __init__(self, dynamodb: DynamoDBClient, table_name: str) -> None:
        self._ddb = dynamodb
        self._table = table_name

    def _key(self, sort_key: str) -> dict[str, Any]:
        return {
            schema.PARTITION_KEY: {"S": schema.CATALOG_PARTITION},
            schema.SORT_KEY: {"S": sort_key},
        }

    def read(self, sort_key: str) -> bytes | None:
        try:
            item = self._ddb.get_item(TableName=self._table, Key=self._key(sort_key)).get("Item")
            return bytes(item[BLOB_ATTRIBUTE]["B"]) if item else None
        except (ClientError, BotoCoreError, KeyError) as error:
            logger.warning("cannot read a persisted cache item", extra={"key": sort_key, "error": str(error)})
            return None

    def write(self, sort_key: str, data: bytes, *, expires_at: datetime) -> None:
        try:
            self._ddb.put_item(
                TableName=self._table,
                Item={
                    **self._key(sort_key),
                    BLOB_ATTRIBUTE: {"B": data},
                    schema.TTL_ATTRIBUTE: {"N": str(int(expires_at.timestamp()))},
                },
            )
        except (ClientError, BotoCoreError) as error:
            logger.warning("cannot persist a cache item", extra={"key": sort_key, "error": str(error)})
