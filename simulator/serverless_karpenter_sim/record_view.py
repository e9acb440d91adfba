"""The simulator's own reading of the NodeClaim records: once per tick, and only what changed parsed.

The loop's observers (the timeline, node budgets, availability) each read the live records every tick.
Read in full, each read carried every record's body through moto and botocore and parsed it with pydantic:
about 2 ms a record, so three readers at 1,000 nodes spent seconds a tick on records that had not changed.
Here one Query a tick projects only the name, state and version of the live records; the bodies of those
whose version moved are fetched with BatchGetItem and parsed once. Every write bumps ``version`` (each
transition is a conditional update on it), so an unchanged version is an unchanged record.

This is the simulator looking on from outside, signed as the account's operator; the control plane's own
reads are untouched, and faults armed for a Lambda never fire on it (they only hook invocations).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from serverless_karpenter import state_schema as schema
from serverless_karpenter.adapters.state_store import NodeClaimStore
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState

_BATCH_GET_LIMIT = 100  # DynamoDB's BatchGetItem takes at most 100 keys


class RecordView:
    """The live NodeClaim records as of the current tick (``generation`` says when that changes)."""

    def __init__(self, dynamodb: Any, table_name: str, generation: Callable[[], object]) -> None:
        self._ddb = dynamodb
        self._table = table_name
        self._generation = generation
        self._parsed: dict[str, NodeClaimRecord] = {}  # name -> the newest body read, live ones only
        self._live: list[NodeClaimRecord] | None = None
        self._read_at: object = None
        self.queries = 0  # DynamoDB requests this view made: Query pages and BatchGetItem calls
        self.parsed = 0  # record bodies parsed

    def list_live(self) -> list[NodeClaimRecord]:
        """The records not Terminated, as the control plane's ``list_live`` returns them (a fresh list)."""
        generation = self._generation()
        if self._live is None or generation != self._read_at:
            self._live = self._read()
            self._read_at = generation
        return list(self._live)

    def _read(self) -> list[NodeClaimRecord]:
        versions: dict[str, int] = {}
        paginator = self._ddb.get_paginator("query")
        for page in paginator.paginate(
            TableName=self._table,
            KeyConditionExpression="#pk = :pk",
            FilterExpression="#state <> :terminated",
            ProjectionExpression="#sk, #version",
            ExpressionAttributeNames={
                "#pk": schema.PARTITION_KEY,
                "#sk": schema.SORT_KEY,
                "#state": "state",
                "#version": "version",
            },
            ExpressionAttributeValues={
                ":pk": {"S": schema.NODECLAIM_PARTITION},
                ":terminated": {"S": NodeClaimState.TERMINATED.value},
            },
            ConsistentRead=True,
        ):
            self.queries += 1
            for item in page.get("Items", []):
                versions[item[schema.SORT_KEY]["S"]] = int(item["version"]["N"])
        stale = [n for n, v in versions.items() if n not in self._parsed or self._parsed[n].version != v]
        fresh = self._fetch(stale)
        kept = {n: r for n, r in self._parsed.items() if n in versions}
        self._parsed = {**kept, **fresh}
        # A record that went Terminated between the Query and the BatchGetItem is not live any more.
        return [r for n in versions if (r := self._parsed.get(n)) and r.state != NodeClaimState.TERMINATED]

    def _fetch(self, names: list[str]) -> dict[str, NodeClaimRecord]:
        out: dict[str, NodeClaimRecord] = {}
        for start in range(0, len(names), _BATCH_GET_LIMIT):
            keys: list[dict[str, Any]] = [
                {
                    schema.PARTITION_KEY: {"S": schema.NODECLAIM_PARTITION},
                    schema.SORT_KEY: {"S": name},
                }
                for name in names[start : start + _BATCH_GET_LIMIT]
            ]
            while keys:
                self.queries += 1
                response = self._ddb.batch_get_item(
                    RequestItems={self._table: {"Keys": keys, "ConsistentRead": True}}
                )
                for item in response.get("Responses", {}).get(self._table, []):
                    record = NodeClaimStore._from_item(item)
                    out[record.name] = record
                    self.parsed += 1
                keys = response.get("UnprocessedKeys", {}).get(self._table, {}).get("Keys") or []
        return out
