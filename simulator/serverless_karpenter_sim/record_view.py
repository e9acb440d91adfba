"""The simulator's own reading of the NodeClaim records: once per tick, and only what changed parsed.

The loop's observers (the timeline, node budgets, availability) each read the live records every tick.
Read in full, each read carried every record's body through moto and botocore and parsed it with pydantic:
about 2 ms a record, so three readers at 1,000 nodes spent seconds a tick on records that had not changed.
Here one look a tick at moto's table, in this process, reads only the name, state and version of the live
records; the bodies of those whose version moved are fetched with BatchGetItem and parsed once. Every
write bumps ``version`` (each transition is a conditional update on it), so an unchanged version is an
unchanged record.

This is the simulator looking on from outside, signed as the account's operator; the control plane's own
reads are untouched, and faults armed for a Lambda never fire on it (they only hook invocations).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from serverless_karpenter import state_schema as schema
from serverless_karpenter.adapters.state_store import NodeClaimStore
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState

from serverless_karpenter_sim.cloud import ACCOUNT

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
        self.queries = 0  # DynamoDB requests this view made: BatchGetItem calls
        self.scans = 0  # looks at the versions in moto's model
        self.parsed = 0  # record bodies parsed

    def list_live(self) -> list[NodeClaimRecord]:
        """The records not Terminated, as the control plane's ``list_live`` returns them (a fresh list)."""
        generation = self._generation()
        if self._live is None or generation != self._read_at:
            self._live = self._read()
            self._read_at = generation
        return list(self._live)

    def _versions(self) -> dict[str, int]:
        """name -> version of the live records, in the partition's (sort key) order, read from moto's
        DynamoDB model in this process: the simulator's own look, as the kubelets read moto's EC2 model
        (``cloud_instances.py``). A projected Query through the API cost a request, moto's generic
        serializer and botocore's parser on every record, every tick: O(nodes) a tick for nothing."""
        from moto.dynamodb.models import dynamodb_backends
        from moto.dynamodb.models.dynamo_type import DynamoType

        table = dynamodb_backends[ACCOUNT][self._ddb.meta.region_name].get_table(self._table)
        # The main thread is moto's only client while the loop's observers run; list() guards a resize.
        partition = table.items.get(DynamoType({"S": schema.NODECLAIM_PARTITION})) or {}
        versions: dict[str, int] = {}
        for item in sorted(list(partition.values()), key=lambda i: str(i.attrs[schema.SORT_KEY].value)):
            state = item.attrs.get("state")
            if state is not None and state.value == NodeClaimState.TERMINATED.value:
                continue
            versions[str(item.attrs[schema.SORT_KEY].value)] = int(item.attrs["version"].value)
        self.scans += 1
        return versions

    def _read(self) -> list[NodeClaimRecord]:
        versions = self._versions()
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
