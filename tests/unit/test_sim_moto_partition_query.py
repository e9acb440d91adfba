"""``moto_speed``'s partition Query: a Query on a table's own key reads that partition alone, and answers
as moto answers (pages, order, filters, projections), while index Queries take moto's own path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from serverless_karpenter import state_schema
from serverless_karpenter_sim import moto_speed
from serverless_karpenter_sim.cloud import ACCOUNT

PK, SK = state_schema.PARTITION_KEY, state_schema.SORT_KEY


@pytest.fixture
def ddb(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("MOTO_ACCOUNT_ID", ACCOUNT)
    with mock_aws():
        client: Any = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(**state_schema.table_definition("t"))
        for partition, count in (("NODECLAIM", 40), ("OTHER", 25), ("NODECLAIMX", 5)):
            for i in range(count):
                item = {
                    PK: {"S": partition},
                    SK: {"S": f"{partition.lower()}-{i:03d}"},
                    "state": {"S": "Terminated" if i % 3 == 0 else "Launched"},
                    "pad": {"S": "x" * 40_000},  # ~1 MB a page: a Query of 40 takes pages
                    "instance_id": {"S": f"i-{partition.lower()}-{i}"},
                }
                client.put_item(TableName="t", Item=item)
        yield client


def query_all(ddb: Any, **kwargs: Any) -> tuple[list[str], int]:
    names, pages = [], 0
    for page in ddb.get_paginator("query").paginate(TableName="t", **kwargs):
        pages += 1
        names += [item[SK]["S"] for item in page["Items"]]
    return names, pages


def test_a_table_query_reads_its_partition_alone_and_answers_as_moto(ddb: Any, monkeypatch: Any) -> None:
    from moto.dynamodb.models.table import Table

    assert getattr(Table, "_serverless_karpenter_fast", False)
    walked: list[int] = []
    original = Table.__dict__["all_items"]

    def counting(self: Any) -> list[Any]:
        items: list[Any] = original(self)
        walked.append(len(items))
        return items

    monkeypatch.setattr(Table, "all_items", counting)
    names, pages = query_all(
        ddb,
        KeyConditionExpression="#pk = :pk",
        FilterExpression="#state <> :t",
        ExpressionAttributeNames={"#pk": PK, "#state": "state"},
        ExpressionAttributeValues={":pk": {"S": "NODECLAIM"}, ":t": {"S": "Terminated"}},
        ScanIndexForward=False,
    )
    assert names == [f"nodeclaim-{i:03d}" for i in reversed(range(40)) if i % 3]
    assert pages > 1
    assert walked and set(walked) == {40}  # the partition's 40 items, never the table's 70
    walked.clear()
    ranged, _ = query_all(
        ddb,
        KeyConditionExpression="#pk = :pk AND begins_with(#sk, :p)",
        ExpressionAttributeNames={"#pk": PK, "#sk": SK},
        ExpressionAttributeValues={":pk": {"S": "OTHER"}, ":p": {"S": "other-01"}},
        ProjectionExpression="#sk",
    )
    assert ranged == [f"other-{i:03d}" for i in range(10, 20)]


def test_an_index_query_takes_moto_s_own_path(ddb: Any) -> None:
    index = state_schema.table_definition("t")["GlobalSecondaryIndexes"][0]
    attribute = index["KeySchema"][0]["AttributeName"]
    ddb.update_item(
        TableName="t",
        Key={PK: {"S": "OTHER"}, SK: {"S": "other-003"}},
        UpdateExpression="SET #a = :v",
        ExpressionAttributeNames={"#a": attribute},
        ExpressionAttributeValues={":v": {"S": "wanted"}},
    )
    names, _ = query_all(
        ddb,
        IndexName=index["IndexName"],
        KeyConditionExpression="#a = :v",
        ExpressionAttributeNames={"#a": attribute},
        ExpressionAttributeValues={":v": {"S": "wanted"}},
    )
    assert names == ["other-003"]
    assert moto_speed._partition.key is None  # nothing left for a later walk
