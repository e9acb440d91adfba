"""``moto_speed``: moto's models are no longer kept for ever in their class's ``instances_tracked`` (each
Query's deep copies of its items were), except S3's, which moto reads."""

from __future__ import annotations

from typing import Any

import boto3
from serverless_karpenter import state_schema
from serverless_karpenter_sim import moto_speed  # noqa: F401  (installs the patches)

PK, SK = state_schema.PARTITION_KEY, state_schema.SORT_KEY


def tracked(model: type) -> int:
    """How many objects of ``model`` moto keeps (its metaclass gives each model class its own list)."""
    return len(vars(model)["instances_tracked"])


def test_queries_leave_nothing_behind(mocked_aws: None) -> None:
    from moto.dynamodb.models.dynamo_type import Item

    ddb: Any = boto3.client("dynamodb", region_name="us-east-1")
    ddb.create_table(**state_schema.table_definition("t"))
    for i in range(20):
        ddb.put_item(TableName="t", Item={PK: {"S": "NODECLAIM"}, SK: {"S": f"c-{i}"}})
    items = tracked(Item)

    for _ in range(10):
        query = ddb.query(
            TableName="t",
            KeyConditionExpression="#pk = :pk",
            ExpressionAttributeNames={"#pk": PK},
            ExpressionAttributeValues={":pk": {"S": "NODECLAIM"}},
        )
        assert len(query["Items"]) == 20

    assert tracked(Item) == items  # moto alone: 200 more, one per item returned


def test_s3_objects_are_still_tracked_for_moto_s_own_reset(mocked_aws: None) -> None:
    from moto.s3.models import FakeKey

    s3: Any = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="tracked-bucket")
    before = tracked(FakeKey)
    s3.put_object(Bucket="tracked-bucket", Key="k", Body=b"v")
    assert tracked(FakeKey) > before
