"""The unavailable-offerings cache in DynamoDB (moto), through the launch path, on a virtual clock.

After CreateFleet fails with InsufficientInstanceCapacity for (spot, m5.large, us-east-1a), the next
launch, made by another invocation that shares only the table, avoids that offering for 3 minutes and
offers it again after.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import boto3
import pytest
from moto import mock_aws
from serverless_karpenter import state_schema as schema
from serverless_karpenter.adapters.ec2 import (
    FleetError,
    LaunchError,
    LaunchRequest,
    ResolvedNodeClass,
    Subnet,
)
from serverless_karpenter.adapters.state_store import NodeClaimStore
from serverless_karpenter.adapters.unavailable_offerings import DynamoDBUnavailableOfferings
from serverless_karpenter.api import labels as wk
from serverless_karpenter.clock import ManualClock
from serverless_karpenter.config import Settings
from serverless_karpenter.lifecycle.launch import launch_record, launch_request
from serverless_karpenter.lifecycle.model import InstanceTypeOption, NodeClaimRecord
from serverless_karpenter.provisioning.context import ControlPlane
from serverless_karpenter.runtime import CatalogInstanceTypes

TABLE = "state"
REGION = "us-east-1"
START = datetime(2026, 1, 1, tzinfo=UTC)
ZONES = ("us-east-1a", "us-east-1b")
NODECLASS = ResolvedNodeClass(
    name="default",
    subnets=[Subnet(f"subnet-{z[-1]}", z, None, 100) for z in ZONES],
    security_group_ids=["sg-1"],
    amis={"amd64": "ami-1"},
    ami_family="AL2023",
    instance_profile="profile",
)


class IceOnceLauncher:
    """CreateFleet that answers InsufficientInstanceCapacity for spot m5.large in zone a, once."""

    def __init__(self) -> None:
        self.requests: list[LaunchRequest] = []

    def find_by_nodeclaim(self, name: str) -> None:
        return None

    def launch(self, request: LaunchRequest, nodeclass: ResolvedNodeClass) -> Any:
        self.requests.append(request)
        error = FleetError(
            "InsufficientInstanceCapacity", "no capacity", "m5.large", "us-east-1a", wk.CAPACITY_TYPE_SPOT
        )
        raise LaunchError("CreateFleet failed", [error])


@pytest.fixture
def dynamodb(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    # A simulation earlier in this process may have left its (stopped) endpoint in the environment.
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        client: Any = boto3.client("dynamodb", region_name=REGION)
        client.create_table(**schema.table_definition(TABLE))
        yield client


def invocation(dynamodb: Any, clock: ManualClock, launcher: Any = None) -> ControlPlane:
    """A fresh control plane, as a new Lambda invocation has: it shares only the table."""
    return ControlPlane(
        settings=Settings(cluster_name="test", state_table_name=TABLE),
        clock=clock,
        kube=cast(Any, None),
        store=NodeClaimStore(dynamodb, TABLE),
        launcher=cast(Any, launcher),
        resolver=cast(Any, None),
        instance_types=CatalogInstanceTypes(
            REGION, clock, unavailable=DynamoDBUnavailableOfferings(dynamodb, TABLE, clock)
        ),
    )


def m5_claim(plane: ControlPlane, name: str) -> NodeClaimRecord:
    """A spot-or-on-demand claim for m5.large with the offerings the catalog has now."""
    types = plane.instance_types.instance_types(NODECLASS, {})
    m5 = next(it for it in types if it.name == "m5.large")
    record = NodeClaimRecord(
        name=name,
        nodepool="default",
        nodeclass="default",
        requirements=[{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]}],
        instance_type_options=[
            InstanceTypeOption(
                name="m5.large",
                offerings=[(o.zone, o.capacity_type, o.price) for o in m5.offerings],
            )
        ],
        created_at=plane.clock.now(),
    )
    return plane.store.create(record)


def spot_offerings(plane: ControlPlane) -> set[str]:
    types = plane.instance_types.instance_types(NODECLASS, {})
    m5 = next(it for it in types if it.name == "m5.large")
    return {o.zone for o in m5.offerings if o.capacity_type == wk.CAPACITY_TYPE_SPOT}


def test_ice_makes_the_next_launch_avoid_the_offering_for_three_minutes(dynamodb: Any) -> None:
    clock = ManualClock(START)
    launcher = IceOnceLauncher()
    first = invocation(dynamodb, clock, launcher)
    record = m5_claim(first, "default-first")
    assert spot_offerings(first) == set(ZONES)

    failed = launch_record(first, record, NODECLASS)
    assert failed.last_error is not None
    assert launcher.requests[0].capacity_type == wk.CAPACITY_TYPE_SPOT
    assert ("m5.large", "us-east-1a", "amd64") in launcher.requests[0].overrides

    # The mark is in the table, for every invocation.
    items = dynamodb.query(
        TableName=TABLE,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": schema.UNAVAILABLE_OFFERING_PARTITION}},
    )["Items"]
    assert [i["sk"]["S"] for i in items] == ["spot#m5.large#us-east-1a"]
    assert items[0]["reason"]["S"] == "InsufficientInstanceCapacity"

    for elapsed in (1, 90, 179):
        clock.set(START + timedelta(seconds=elapsed))
        later = invocation(dynamodb, clock)
        assert spot_offerings(later) == {"us-east-1b"}
        retry = m5_claim(later, f"default-retry-{elapsed}")
        request = launch_request(later, retry, wk.CAPACITY_TYPE_SPOT)
        assert request.overrides == [("m5.large", "us-east-1b", "amd64")]

    clock.set(START + timedelta(seconds=181))
    after = invocation(dynamodb, clock)
    assert spot_offerings(after) == set(ZONES)
    retry = m5_claim(after, "default-after")
    request = launch_request(after, retry, wk.CAPACITY_TYPE_SPOT)
    assert ("m5.large", "us-east-1a", "amd64") in request.overrides


def test_one_query_per_refresh_and_marks_are_seen_at_once(dynamodb: Any) -> None:
    clock = ManualClock(START)
    cache = DynamoDBUnavailableOfferings(dynamodb, TABLE, clock, refresh_seconds=10)
    for _ in range(50):
        assert not cache.is_unavailable("spot", "c6i.large", "us-east-1a")
    assert cache.queries == 1
    cache.mark_unavailable("spot", "c6i.large", "us-east-1a", "InsufficientInstanceCapacity")
    assert cache.is_unavailable("spot", "c6i.large", "us-east-1a")
    assert cache.queries == 1

    other = DynamoDBUnavailableOfferings(dynamodb, TABLE, clock)
    other.mark_capacity_type_unavailable("spot", "SpotServiceLinkedRole")
    assert not cache.is_unavailable("spot", "m5.large", "us-east-1b")  # the view is fresh enough
    clock.advance(10)
    assert cache.is_unavailable("spot", "m5.large", "us-east-1b")  # reloaded: one more Query
    assert cache.queries == 2
    assert not cache.is_unavailable("on-demand", "m5.large", "us-east-1b")


def test_expired_items_the_ttl_has_not_deleted_yet_do_not_count(dynamodb: Any) -> None:
    clock = ManualClock(START)
    writer = DynamoDBUnavailableOfferings(dynamodb, TABLE, clock)
    writer.mark_zone_unavailable("on-demand", "us-east-1a", "InsufficientFreeAddressesInSubnet")
    clock.advance(180.5)
    reader = DynamoDBUnavailableOfferings(dynamodb, TABLE, clock)
    assert not reader.is_unavailable("on-demand", "m5.large", "us-east-1a")
    assert (
        dynamodb.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": schema.UNAVAILABLE_OFFERING_PARTITION}},
        )["Count"]
        == 1
    )
