"""NodeClaim records and the single-writer lease in DynamoDB.

Every transition is a conditional write on ``version``: a writer that lost a race gets
:class:`ConflictError` and re-reads, so no transition is applied twice or over a newer one.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from serverless_karpenter import state_schema as schema
from serverless_karpenter.adapters.providers.errors import translated
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState


class ConflictError(Exception):
    """A conditional write lost against another writer."""


def _is_conditional_failure(error: ClientError) -> bool:
    return error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


class NodeClaimStore:
    def __init__(self, dynamodb: Any, table_name: str) -> None:
        # Refusals and failures leave as CloudError (what the lifecycle catches), never botocore's own.
        self._ddb = translated(dynamodb, unanswered=False)
        self._table = table_name

    def create(self, record: NodeClaimRecord) -> NodeClaimRecord:
        """Write a new record; fails with ConflictError if the name exists."""
        item = self._to_item(record)
        try:
            self._ddb.put_item(
                TableName=self._table,
                Item=item,
                ConditionExpression="attribute_not_exists(#pk)",
                ExpressionAttributeNames={"#pk": schema.PARTITION_KEY},
            )
        except ClientError as error:
            if _is_conditional_failure(error):
                raise ConflictError(f"nodeclaim {record.name} exists") from error
            raise
        return record

    def save(self, record: NodeClaimRecord) -> NodeClaimRecord:
        """Write ``record`` over the stored one if nobody changed it since it was read.

        Returns the record with its version bumped.
        """
        updated = record.model_copy(update={"version": record.version + 1})
        try:
            self._ddb.put_item(
                TableName=self._table,
                Item=self._to_item(updated),
                ConditionExpression="#v = :v",
                ExpressionAttributeNames={"#v": "version"},
                ExpressionAttributeValues={":v": {"N": str(record.version)}},
            )
        except ClientError as error:
            if _is_conditional_failure(error):
                raise ConflictError(
                    f"nodeclaim {record.name} changed since version {record.version}"
                ) from error
            raise
        return updated

    def delete(self, record: NodeClaimRecord) -> None:
        try:
            self._ddb.delete_item(
                TableName=self._table,
                Key=self._key(record.name),
                ConditionExpression="#v = :v",
                ExpressionAttributeNames={"#v": "version"},
                ExpressionAttributeValues={":v": {"N": str(record.version)}},
            )
        except ClientError as error:
            if _is_conditional_failure(error):
                raise ConflictError(
                    f"nodeclaim {record.name} changed since version {record.version}"
                ) from error
            raise

    def get(self, name: str) -> NodeClaimRecord | None:
        response = self._ddb.get_item(TableName=self._table, Key=self._key(name), ConsistentRead=True)
        item = response.get("Item")
        return self._from_item(item) if item else None

    def list(self) -> list[NodeClaimRecord]:
        return list(
            self._query(
                KeyConditionExpression="#pk = :pk",
                ExpressionAttributeNames={"#pk": schema.PARTITION_KEY},
                ExpressionAttributeValues={":pk": {"S": schema.NODECLAIM_PARTITION}},
                ConsistentRead=True,
            )
        )

    def list_live(self) -> builtins.list[NodeClaimRecord]:  # `list` here is the method above
        """The NodeClaims not Terminated: what every decision reads. Terminated ones are kept a day for
        audit, and a churning cluster has many; filtered out in DynamoDB, they are neither sent nor
        parsed on each pass."""
        return list(
            self._query(
                KeyConditionExpression="#pk = :pk",
                FilterExpression="#state <> :terminated",
                ExpressionAttributeNames={"#pk": schema.PARTITION_KEY, "#state": "state"},
                ExpressionAttributeValues={
                    ":pk": {"S": schema.NODECLAIM_PARTITION},
                    ":terminated": {"S": NodeClaimState.TERMINATED.value},
                },
                ConsistentRead=True,
            )
        )

    def find_by_instance_id(self, instance_id: str) -> NodeClaimRecord | None:
        return self._find_by_index(schema.INSTANCE_ID_INDEX, schema.INSTANCE_ID_ATTRIBUTE, instance_id)

    def find_by_node_name(self, node_name: str) -> NodeClaimRecord | None:
        return self._find_by_index(schema.NODE_NAME_INDEX, schema.NODE_NAME_ATTRIBUTE, node_name)

    def _find_by_index(self, index: str, attribute: str, value: str) -> NodeClaimRecord | None:
        for record in self._query(
            IndexName=index,
            KeyConditionExpression="#a = :v",
            ExpressionAttributeNames={"#a": attribute},
            ExpressionAttributeValues={":v": {"S": value}},
        ):
            return record
        return None

    def _query(self, **kwargs: Any) -> Iterator[NodeClaimRecord]:
        paginator = self._ddb.get_paginator("query")
        for page in paginator.paginate(TableName=self._table, **kwargs):
            for item in page.get("Items", []):
                yield self._from_item(item)

    @staticmethod
    def _key(name: str) -> dict[str, Any]:
        return {
            schema.PARTITION_KEY: {"S": schema.NODECLAIM_PARTITION},
            schema.SORT_KEY: {"S": name},
        }

    def _to_item(self, record: NodeClaimRecord) -> dict[str, Any]:
        item: dict[str, Any] = {
            **self._key(record.name),
            "version": {"N": str(record.version)},
            "state": {"S": record.state.value},
            "body": {"S": record.model_dump_json(exclude_none=True)},
        }
        if record.instance_id:
            item[schema.INSTANCE_ID_ATTRIBUTE] = {"S": record.instance_id}
        if record.node_name:
            item[schema.NODE_NAME_ATTRIBUTE] = {"S": record.node_name}
        if record.expires_at is not None:
            item[schema.TTL_ATTRIBUTE] = {"N": str(int(record.expires_at.timestamp()))}
        return item

    @staticmethod
    def _from_item(item: dict[str, Any]) -> NodeClaimRecord:
        record = NodeClaimRecord.model_validate_json(item["body"]["S"])
        return record.model_copy(update={"version": int(item["version"]["N"])})


class Lease:
    """A named lease with expiry and a fencing token (docs/architecture.md §1: one writer per cluster
    decides capacity).

    ``acquire`` succeeds when the lease is free, expired, or already ours; each successful acquisition of
    a free or expired lease increments the fencing token, so a writer that lost its lease can tell.
    """

    def __init__(self, dynamodb: Any, table_name: str, name: str, holder: str) -> None:
        self._ddb = translated(dynamodb, unanswered=False)
        self._table = table_name
        self._name = name
        self.holder = holder
        self.token = 0

    def acquire(self, now: datetime, ttl_seconds: float) -> bool:
        now_s = now.timestamp()
        try:
            response = self._ddb.update_item(
                TableName=self._table,
                Key={
                    schema.PARTITION_KEY: {"S": schema.LEASE_PARTITION},
                    schema.SORT_KEY: {"S": self._name},
                },
                UpdateExpression="SET #h = :h, #until = :until, #ttl = :ttl ADD #token :one",
                ConditionExpression="attribute_not_exists(#h) OR #h = :h OR #until < :now",
                ExpressionAttributeNames={
                    "#h": "holder",
                    "#until": "held_until",
                    "#ttl": schema.TTL_ATTRIBUTE,
                    "#token": "fencing_token",
                },
                ExpressionAttributeValues={
                    ":h": {"S": self.holder},
                    ":until": {"N": repr(now_s + ttl_seconds)},
                    ":ttl": {"N": str(int(now_s + ttl_seconds + 3600))},
                    ":now": {"N": repr(now_s)},
                    ":one": {"N": "1"},
                },
                ReturnValues="ALL_NEW",
            )
        except ClientError as error:
            if _is_conditional_failure(error):
                return False
            raise
        self.token = int(response["Attributes"]["fencing_token"]["N"])
        return True

    def release(self) -> None:
        try:
            self._ddb.delete_item(
                TableName=self._table,
                Key={
                    schema.PARTITION_KEY: {"S": schema.LEASE_PARTITION},
                    schema.SORT_KEY: {"S": self._name},
                },
                ConditionExpression="#h = :h",
                ExpressionAttributeNames={"#h": "holder"},
                ExpressionAttributeValues={":h": {"S": self.holder}},
            )
        except ClientError as error:
            if not _is_conditional_failure(error):
                raise
