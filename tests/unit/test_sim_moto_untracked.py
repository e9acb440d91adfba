"""``moto_speed``: moto's models are no longer kept for ever in their class's ``instances_tracked`` (each
Query's deep copies of its items were), except S3's, which moto reads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from serverless_karpenter import state_schema
from serverless_karpenter_sim import moto_speed  # noqa: F401  (installs the patches)

PK, SK = state_schema.PARTITION_KEY, state_schema.SORT_KEY


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield


def test_queries_leave_nothing_behind(aws_env: None) -> None:
    from moto.dynamodb.models.dynamo_type import Item

    ddb: Any = boto3.client("dynamodb", region_name="us-east-1")
    ddb.create_table(**state_schema.table_definition("t"))
    for i in range(20):
        ddb.put_item(TableName="t", Item={PK: {"S": "NODECLAIM"}, SK: {"S": f"c-{i}"}})
    items = len(Item.instances_tracked)

    for _ in range(10):
        query = ddb.query(
            TableName="t",
            KeyConditionExpression="#pk = :pk",
            ExpressionAttributeNames={"#pk": PK},
            ExpressionAttributeValues={":pk": {"S": "NODECLAIM"}},
        )
        assert len(query["Items"]) == 20

    assert len(Item.instances_tracked) == items  # moto alone: 200 more, one per item returned


def test_s3_objects_are_still_tracked_for_moto_s_own_reset(aws_env: None) -> None:
    from moto.s3.models import FakeKey

    s3: Any = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="tracked-bucket")
    before = len(FakeKey.instances_tracked)
    s3.put_object(Bucket="tracked-bucket", Key="k", Body=b"v")
    assert len(FakeKey.instances_tracked) > before
