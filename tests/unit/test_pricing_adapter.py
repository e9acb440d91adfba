"""On-demand prices from the Pricing API, spot prices from the history, the fallbacks, the refresh."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.exceptions import ClientError, ConnectTimeoutError
from botocore.paginate import Paginator
from botocore.stub import Stubber
from moto import mock_aws
from serverless_karpenter import runtime
from serverless_karpenter import state_schema as schema
from serverless_karpenter.adapters import aws
from serverless_karpenter.adapters.persisted import PersistedBlobs
from serverless_karpenter.adapters.pricing import (
    RETRY_INTERVAL,
    UNREACHABLE_RETRY_INTERVAL,
    PriceSource,
    on_demand_filters,
    parse_price_list,
    pricing_endpoint_region,
)
from serverless_karpenter.catalog.prices import bundled_on_demand_prices
from serverless_karpenter.clock import ManualClock

START = datetime(2026, 1, 1, tzinfo=UTC)


def product(instance_type: str, usd: str) -> str:
    return json.dumps(
        {
            "product": {"attributes": {"instanceType": instance_type, "operatingSystem": "Linux"}},
            "terms": {
                "OnDemand": {"T1": {"priceDimensions": {"D1": {"unit": "Hrs", "pricePerUnit": {"USD": usd}}}}}
            },
        }
    )


class FakePricing:
    """GetProducts in pages; records the calls; can be told to fail."""

    def __init__(self, pages: list[list[str]], fail: bool = False) -> None:
        self.pages = pages
        self.fail = fail
        self.calls: list[dict[str, Any]] = []

    def get_products(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        if self.fail:
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "GetProducts")
        index = int(kwargs.get("NextToken") or 0)
        page: dict[str, Any] = {"PriceList": self.pages[index]}
        if index + 1 < len(self.pages):
            page["NextToken"] = str(index + 1)
        return page

    def get_paginator(self, operation: str) -> Paginator:
        """botocore's own paginator for the operation, over this fake's pages."""
        assert operation == "get_products"
        session = botocore.session.get_session()
        config = session.get_paginator_model("pricing").get_paginator("GetProducts")
        model = session.get_service_model("pricing").operation_model("GetProducts")
        return Paginator(self.get_products, config, model)


@pytest.mark.parametrize(
    ("region", "endpoint"),
    [
        ("us-east-1", "us-east-1"),
        ("us-west-2", "us-east-1"),
        ("ca-central-1", "us-east-1"),
        ("eu-west-1", "eu-central-1"),
        ("ap-northeast-1", "ap-south-1"),
        ("cn-north-1", "cn-northwest-1"),
    ],
)
def test_the_pricing_endpoint_serves_the_region(region: str, endpoint: str) -> None:
    assert pricing_endpoint_region(region) == endpoint


def test_filters_are_karpenters() -> None:
    fields = {f["Field"]: f["Value"] for f in on_demand_filters("eu-west-1")}
    assert fields == {
        "regionCode": "eu-west-1",
        "serviceCode": "AmazonEC2",
        "preInstalledSw": "NA",
        "operatingSystem": "Linux",
        "capacitystatus": "Used",
        "marketoption": "OnDemand",
        "tenancy": "Shared",
    }
    assert all(f["Type"] == "TERM_MATCH" for f in on_demand_filters("eu-west-1"))


def test_price_list_parsing_keeps_the_lowest_non_zero_price() -> None:
    prices = parse_price_list(
        [
            product("m5.large", "0.0960000000"),
            product("m5.large", "0.0000000000"),
            product("c6i.large", "0.085"),
        ]
    )
    assert prices == {"m5.large": 0.096, "c6i.large": 0.085}


def test_prices_come_from_the_right_endpoint_and_refresh_every_12_hours() -> None:
    clock = ManualClock(START)
    fake = FakePricing([[product("m5.large", "0.2")], [product("c6i.large", "0.3")]])
    endpoints: list[str] = []

    def factory(endpoint: str) -> FakePricing:
        endpoints.append(endpoint)
        return fake

    source = PriceSource("eu-west-1", clock, pricing_client=factory, ec2=None)
    assert source.on_demand_prices() == {"m5.large": 0.2, "c6i.large": 0.3}
    assert source.on_demand_source == "pricing-api"
    assert endpoints == ["eu-central-1"]
    assert len(fake.calls) == 2  # two pages
    clock.advance(timedelta(hours=11, minutes=59).total_seconds())
    source.on_demand_prices()
    assert len(fake.calls) == 2
    fake.pages = [[product("m5.large", "0.25")]]
    clock.advance(120)
    assert source.on_demand_prices() == {"m5.large": 0.25}


def test_a_failing_pricing_api_falls_back_to_the_bundled_snapshot_and_retries_sooner() -> None:
    clock = ManualClock(START)
    fake = FakePricing([[product("m5.large", "0.2")]], fail=True)
    source = PriceSource("us-east-1", clock, pricing_client=fake, ec2=None)
    prices = source.on_demand_prices()
    assert prices == bundled_on_demand_prices("us-east-1")
    assert source.on_demand_source == "bundled"
    fake.fail = False
    clock.advance(301)
    assert source.on_demand_prices() == {"m5.large": 0.2}


def test_spot_prices_are_the_latest_linux_price_per_type_and_zone() -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    clock = ManualClock(START)
    with Stubber(ec2) as stub:
        stub.add_response(
            "describe_spot_price_history",
            {
                "SpotPriceHistory": [
                    {
                        "InstanceType": "m5.large",
                        "AvailabilityZone": "us-east-1a",
                        "ProductDescription": "Linux/UNIX",
                        "SpotPrice": "0.040",
                        "Timestamp": START - timedelta(hours=2),
                    },
                    {
                        "InstanceType": "m5.large",
                        "AvailabilityZone": "us-east-1a",
                        "ProductDescription": "Linux/UNIX",
                        "SpotPrice": "0.035",
                        "Timestamp": START - timedelta(minutes=5),
                    },
                    {
                        "InstanceType": "m5.large",
                        "AvailabilityZone": "us-east-1b",
                        "ProductDescription": "Linux/UNIX (Amazon VPC)",
                        "SpotPrice": "0.038",
                        "Timestamp": START - timedelta(minutes=1),
                    },
                ]
            },
            {"ProductDescriptions": ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"], "StartTime": START},
        )
        source = PriceSource("us-east-1", clock, pricing_client=None, ec2=ec2)
        assert source.spot_prices() == {("m5.large", "us-east-1a"): 0.035, ("m5.large", "us-east-1b"): 0.038}
        assert source.spot_prices() is source.spot_prices()  # cached: no second call (the stub has none)


def test_spot_history_errors_leave_no_spot_prices() -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(ec2) as stub:
        stub.add_client_error("describe_spot_price_history", "UnauthorizedOperation")
        source = PriceSource("us-east-1", ManualClock(START), pricing_client=None, ec2=ec2)
        assert source.spot_prices() == {}


@pytest.fixture
def persisted() -> Iterator[PersistedBlobs]:
    with pytest.MonkeyPatch.context() as patch, mock_aws():
        patch.delenv("AWS_ENDPOINT_URL", raising=False)
        dynamodb: Any = boto3.client("dynamodb", region_name="us-east-1")
        dynamodb.create_table(**schema.table_definition("state"))
        yield PersistedBlobs(dynamodb, "state")


def test_a_cold_start_uses_the_on_demand_prices_another_invocation_fetched(persisted: PersistedBlobs) -> None:
    clock = ManualClock(START)
    warm = PriceSource(
        "us-east-1",
        clock,
        pricing_client=FakePricing([[product("m5.large", "0.2")]]),
        ec2=None,
        persisted=persisted,
    )
    assert warm.on_demand_prices() == {"m5.large": 0.2}

    # Six hours on, a cold invocation reads the stored prices instead of paging through GetProducts.
    clock.advance(timedelta(hours=6).total_seconds())
    unreachable = FakePricing([[product("m5.large", "9")]], fail=True)
    cold = PriceSource("us-east-1", clock, pricing_client=unreachable, ec2=None, persisted=persisted)
    assert cold.on_demand_prices() == {"m5.large": 0.2}
    assert cold.on_demand_source == "dynamodb"
    assert unreachable.calls == []

    # They are due for a refresh 12 hours after they were fetched, not after the cold start read them.
    clock.advance(timedelta(hours=6, seconds=1).total_seconds())
    unreachable.fail = False
    assert cold.on_demand_prices() == {"m5.large": 9.0}
    assert cold.on_demand_source == "pricing-api"


def test_stored_prices_older_than_the_refresh_interval_are_fetched_again(persisted: PersistedBlobs) -> None:
    clock = ManualClock(START)
    PriceSource(
        "us-east-1",
        clock,
        pricing_client=FakePricing([[product("m5.large", "0.2")]]),
        ec2=None,
        persisted=persisted,
    ).on_demand_prices()
    clock.advance(timedelta(hours=12, seconds=1).total_seconds())
    fresh = FakePricing([[product("m5.large", "0.3")]])
    cold = PriceSource("us-east-1", clock, pricing_client=fresh, ec2=None, persisted=persisted)
    assert cold.on_demand_prices() == {"m5.large": 0.3}
    assert len(fresh.calls) == 1


def test_a_cold_start_uses_the_spot_prices_another_invocation_fetched(persisted: PersistedBlobs) -> None:
    clock = ManualClock(START)
    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    history = {
        "SpotPriceHistory": [
            {
                "InstanceType": "m5.large",
                "AvailabilityZone": "us-east-1a",
                "ProductDescription": "Linux/UNIX",
                "SpotPrice": "0.035",
                "Timestamp": START - timedelta(minutes=5),
            }
        ]
    }
    with Stubber(ec2) as stub:
        stub.add_response("describe_spot_price_history", history)
        warm = PriceSource("us-east-1", clock, pricing_client=None, ec2=ec2, persisted=persisted)
        assert warm.spot_prices() == {("m5.large", "us-east-1a"): 0.035}
        # The stub has no second answer: a describe here would fail the test.
        cold = PriceSource("us-east-1", clock, pricing_client=None, ec2=ec2, persisted=persisted)
        assert cold.spot_prices() == {("m5.large", "us-east-1a"): 0.035}
        stub.assert_no_pending_responses()


# -- from a VPC without NAT (private-endpoint clusters): the Pricing API cannot be reached --------------


class UnreachablePricing(FakePricing):
    """GetProducts from a VPC without NAT: the Pricing API has no endpoint there, so no connection."""

    def get_products(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        if self.fail:
            raise ConnectTimeoutError(endpoint_url="https://api.pricing.us-east-1.amazonaws.com/")
        return super().get_products(**kwargs)


def test_an_unreachable_pricing_api_falls_back_and_is_retried_hourly_not_on_every_pass() -> None:
    clock = ManualClock(START)
    unreachable = UnreachablePricing([[product("m5.large", "0.2")]], fail=True)
    source = PriceSource("us-east-1", clock, pricing_client=unreachable, ec2=None)
    assert source.on_demand_prices() == bundled_on_demand_prices("us-east-1")
    assert source.on_demand_source == "bundled"
    assert len(unreachable.calls) == 1
    # Not again within the hour: each try would cost the provisioner its connect timeouts.
    clock.advance(UNREACHABLE_RETRY_INTERVAL.total_seconds() - 1)
    source.on_demand_prices()
    assert len(unreachable.calls) == 1
    unreachable.fail = False  # e.g. a NAT gateway was added
    clock.advance(2)
    assert source.on_demand_prices() == {"m5.large": 0.2}
    assert source.on_demand_source == "pricing-api"


def test_a_failing_pricing_api_falls_back_to_persisted_prices_of_any_age(persisted: PersistedBlobs) -> None:
    clock = ManualClock(START)
    PriceSource(
        "us-east-1",
        clock,
        pricing_client=FakePricing([[product("m5.large", "0.2")]]),
        ec2=None,
        persisted=persisted,
    ).on_demand_prices()
    # A day on (past the refresh interval), the network lost its way to the Pricing API: the prices the
    # last reachable invocation stored are closer to today's than the bundled snapshot.
    clock.advance(timedelta(days=1).total_seconds())
    unreachable = UnreachablePricing([], fail=True)
    cold = PriceSource("us-east-1", clock, pricing_client=unreachable, ec2=None, persisted=persisted)
    assert cold.on_demand_prices() == {"m5.large": 0.2}
    assert cold.on_demand_source == "dynamodb"
    assert len(unreachable.calls) == 1


@pytest.fixture
def pricing_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, list[int]]]:
    """A local 'Pricing API' that accepts each connection and closes it unanswered, counting them."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    connections: list[int] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            connections.append(1)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL_PRICING", url)
    aws.reset_sessions()
    yield url, connections
    listener.close()
    aws.reset_sessions()


def test_the_production_pricing_client_fails_fast_and_the_provisioner_falls_back(
    pricing_endpoint: tuple[str, list[int]],
) -> None:
    """The client the Lambdas build (runtime.pricing_client) against an endpoint that never answers: two
    attempts, short timeouts, then the bundled prices; not the nine attempts of the default policy."""
    _, connections = pricing_endpoint
    client = runtime.pricing_client("us-east-1")
    config = client.meta.config
    assert config.connect_timeout <= 2 and config.read_timeout <= 10
    assert config.retries["total_max_attempts"] == 2
    source = PriceSource("us-east-1", ManualClock(START), pricing_client=runtime.pricing_client, ec2=None)
    assert source.on_demand_prices() == bundled_on_demand_prices("us-east-1")
    assert source.on_demand_source == "bundled"
    assert len(connections) == 2


def test_a_refused_pricing_endpoint_counts_as_unreachable(pricing_endpoint: tuple[str, list[int]]) -> None:
    spare = socket.socket()
    spare.bind(("127.0.0.1", 0))
    port = spare.getsockname()[1]
    spare.close()  # nothing listens there: every connection is refused
    os.environ["AWS_ENDPOINT_URL_PRICING"] = f"http://127.0.0.1:{port}"
    aws.reset_sessions()
    clock = ManualClock(START)
    source = PriceSource("us-east-1", clock, pricing_client=runtime.pricing_client, ec2=None)
    assert source.on_demand_prices() == bundled_on_demand_prices("us-east-1")
    clock.advance(RETRY_INTERVAL.total_seconds() + 1)
    # Still within the unreachable interval: no new attempt, the same (cached) prices object.
    assert source.on_demand_prices() is source.on_demand_prices()
