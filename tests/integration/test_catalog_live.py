"""The live catalog: DescribeInstanceTypes/Offerings (moto), the 5-minute cache, persistence in DynamoDB
for cold starts, the bundled fallback, and Karpenter's allocatable on what EC2 describes."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from serverless_karpenter import state_schema as schema
from serverless_karpenter.adapters.catalog_source import LiveCatalogSource, catalog_sort_key
from serverless_karpenter.adapters.persisted import PersistedBlobs
from serverless_karpenter.adapters.pricing import PriceSource
from serverless_karpenter.adapters.providers.model import ResolvedNodeClass, Subnet
from serverless_karpenter.api import labels as wk
from serverless_karpenter.catalog.live import CatalogFacts
from serverless_karpenter.clock import ManualClock
from serverless_karpenter.runtime import CatalogInstanceTypes

REGION = "us-east-1"
TABLE = "state"
START = datetime(2026, 1, 1, tzinfo=UTC)
MI = 1024 * 1024


def nodeclass(*zones: str) -> ResolvedNodeClass:
    return ResolvedNodeClass(
        name="default",
        subnets=[Subnet(f"subnet-{z[-1]}", z, None, 100) for z in zones],
        security_group_ids=["sg-1"],
        amis={"amd64": "ami-1", "arm64": "ami-2"},
        ami_family="AL2023",
        instance_profile="profile",
    )


@pytest.fixture(scope="module")
def aws() -> Iterator[tuple[Any, Any]]:
    # A simulation earlier in this process may have left its (stopped) endpoint in the environment.
    with pytest.MonkeyPatch.context() as patch, mock_aws():
        patch.delenv("AWS_ENDPOINT_URL", raising=False)
        dynamodb: Any = boto3.client("dynamodb", region_name=REGION)
        dynamodb.create_table(**schema.table_definition(TABLE))
        yield boto3.client("ec2", region_name=REGION), dynamodb


@pytest.fixture(scope="module")
def described(aws: tuple[Any, Any]) -> tuple[LiveCatalogSource, ManualClock]:
    """One describe for the module (moto's answer is large); the tests then read the cache and table."""
    ec2, dynamodb = aws
    clock = ManualClock(START)
    source = LiveCatalogSource(ec2, REGION, clock, persisted=PersistedBlobs(dynamodb, TABLE))
    source.snapshot()
    return source, clock


class CountingEC2:
    """A tiny EC2 that counts describes: m5.large offered in one zone."""

    def __init__(self) -> None:
        self.describes = 0

    def get_paginator(self, name: str) -> Any:
        answers = {
            "describe_instance_types": {"InstanceTypes": [self.m5_large()]},
            "describe_instance_type_offerings": {
                "InstanceTypeOfferings": [
                    {
                        "InstanceType": "m5.large",
                        "LocationType": "availability-zone",
                        "Location": "us-east-1a",
                    }
                ]
            },
        }
        if name == "describe_instance_types":
            self.describes += 1

        class Pages:
            def paginate(self, **kwargs: Any) -> list[dict[str, Any]]:
                return [answers[name]]

        return Pages()

    def describe_availability_zones(self) -> dict[str, Any]:
        return {"AvailabilityZones": [{"ZoneName": "us-east-1a", "ZoneId": "use1-az1"}]}

    @staticmethod
    def m5_large() -> dict[str, Any]:
        return {
            "InstanceType": "m5.large",
            "CurrentGeneration": True,
            "BareMetal": False,
            "Hypervisor": "nitro",
            "SupportedUsageClasses": ["on-demand", "spot"],
            "SupportedVirtualizationTypes": ["hvm"],
            "VCpuInfo": {"DefaultVCpus": 2},
            "MemoryInfo": {"SizeInMiB": 8192},
            "ProcessorInfo": {"SupportedArchitectures": ["x86_64"], "Manufacturer": "Intel"},
            "NetworkInfo": {"MaximumNetworkInterfaces": 3, "Ipv4AddressesPerInterface": 10},
        }


class BrokenEC2:
    def get_paginator(self, name: str) -> Any:
        raise ClientError({"Error": {"Code": "UnauthorizedOperation", "Message": "no"}}, name)


def test_the_live_catalog_has_karpenters_allocatable_for_c6a_2xlarge(
    described: tuple[LiveCatalogSource, ManualClock],
) -> None:
    source, clock = described
    provider = CatalogInstanceTypes(REGION, clock, catalog_source=source)
    types = {it.name: it for it in provider.instance_types(nodeclass("us-east-1a", "us-east-1b"), {})}
    c6a = types["c6a.2xlarge"]
    assert c6a.allocatable["cpu"] == 7910
    assert c6a.allocatable["memory"] == 14162 * MI
    assert c6a.allocatable["pods"] == 58
    assert c6a.allocatable["vpc.amazonaws.com/pod-eni"] == 38
    assert {o.zone for o in c6a.offerings} == {"us-east-1a", "us-east-1b"}  # the node class's zones only
    assert c6a.labels[wk.INSTANCE_FAMILY] == "c6a"
    m5 = types["m5.large"]
    assert (m5.allocatable["cpu"], m5.allocatable["pods"]) == (1930, 29)
    assert types["m6g.large"].labels[wk.ARCH] == "arm64"
    assert source.source == "ec2"


def test_the_catalog_is_cached_for_five_minutes_then_described_again() -> None:
    ec2 = CountingEC2()
    clock = ManualClock(START)
    source = LiveCatalogSource(ec2, REGION, clock)
    first = source.snapshot()
    assert [info.name for info in first.instance_types] == ["m5.large"]
    assert first.zone_ids == {"us-east-1a": "use1-az1"}
    clock.advance(299)
    assert source.snapshot() is first
    assert ec2.describes == 1
    clock.advance(2)
    source.snapshot()
    assert ec2.describes == 2


def test_a_cold_start_reads_the_persisted_catalog_instead_of_describing(
    aws: tuple[Any, Any], described: tuple[LiveCatalogSource, ManualClock]
) -> None:
    _, dynamodb = aws
    _, clock = described
    item = dynamodb.get_item(
        TableName=TABLE,
        Key={"pk": {"S": schema.CATALOG_PARTITION}, "sk": {"S": catalog_sort_key(REGION)}},
    )["Item"]
    assert len(item["facts"]["B"]) < 400_000  # DynamoDB's item limit
    facts = CatalogFacts.from_bytes(item["facts"]["B"])
    assert "c6a.2xlarge" in facts.offered_zones

    cold = LiveCatalogSource(
        BrokenEC2(), REGION, ManualClock(clock.now()), persisted=PersistedBlobs(dynamodb, TABLE)
    )
    snapshot = cold.snapshot()
    assert cold.source == "dynamodb"
    assert cold.describe_calls == 0
    assert any(info.name == "c6a.2xlarge" for info in snapshot.instance_types)


def test_with_no_ec2_and_nothing_persisted_the_bundled_snapshot_is_used() -> None:
    source = LiveCatalogSource(BrokenEC2(), REGION, ManualClock(START))
    provider = CatalogInstanceTypes(
        REGION,
        ManualClock(START),
        catalog_source=source,
        prices=PriceSource(REGION, ManualClock(START), pricing_client=None, ec2=None),
    )
    types = {it.name for it in provider.instance_types(nodeclass("us-east-1a"), {})}
    assert source.source == "bundled"
    assert "c6a.2xlarge" in types
