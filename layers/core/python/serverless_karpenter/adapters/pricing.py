"""Prices from AWS: on-demand from the Pricing API, spot from DescribeSpotPriceHistory.

On-demand prices come from ``GetProducts`` with Karpenter's filters (Linux, shared tenancy, no
pre-installed software, capacity status Used, market option OnDemand, the region's code). The Pricing
API answers only in a few regions, so the client is made for the endpoint region that serves the
cluster's region. Any failure falls back to the bundled snapshot; prices are refreshed every 12 hours.
Spot prices are the latest Linux/UNIX price per (type, zone); on failure there are none and the catalog
uses its spot model.

From a VPC without NAT the Pricing API cannot be reached at all: it has no VPC endpoint in most regions
(see infra/README.md). Its client is bounded (``aws.FALLBACK_CONFIG``), a failure falls back to the last
prices fetched by any invocation (persisted in the state table, whatever their age), else to the bundled
snapshot, and an unreachable endpoint is tried again only hourly, so the provisioner is never held up.

Paging through GetProducts and the spot history takes seconds, too long for a cold provisioner that
has pods waiting, so fetched prices are stored in the state table (``PersistedBlobs``) and a cold
start uses them while they are younger than the refresh interval, as a warm invocation would.
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError, ConnectTimeoutError, EndpointConnectionError

from serverless_karpenter.adapters.persisted import PersistedBlobs
from serverless_karpenter.cache import PRICES_RETRY, PRICES_TTL, PRICES_UNREACHABLE_RETRY
from serverless_karpenter.catalog.prices import bundled_on_demand_prices, latest_spot_prices
from serverless_karpenter.clock import Clock, parse_rfc3339, to_rfc3339
from serverless_karpenter.observability import logger

if TYPE_CHECKING:  # the stubs are a development dependency only
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_pricing import PricingClient
    from mypy_boto3_pricing.type_defs import FilterTypeDef

# The intervals are the cache module's (why each is what it is is said there).
REFRESH_INTERVAL = PRICES_TTL
RETRY_INTERVAL = PRICES_RETRY
UNREACHABLE_RETRY_INTERVAL = PRICES_UNREACHABLE_RETRY
SPOT_PRODUCTS = ("Linux/UNIX", "Linux/UNIX (Amazon VPC)")


def on_demand_sort_key(region: str) -> str:
    return f"on-demand-prices#{region}"


def spot_sort_key(region: str) -> str:
    return f"spot-prices#{region}"


def _encode(fetched_at: datetime, prices: Any) -> bytes:
    doc = {"fetched_at": to_rfc3339(fetched_at), "prices": prices}
    return gzip.compress(json.dumps(doc, separators=(",", ":"), sort_keys=True).encode(), mtime=0)


def _decode(data: bytes) -> tuple[datetime, Any]:
    doc = json.loads(gzip.decompress(data))
    return parse_rfc3339(doc["fetched_at"]), doc["prices"]


def pricing_endpoint_region(region: str) -> str:
    """The Pricing API region that serves ``region`` (as Karpenter picks it)."""
    if region.startswith("cn-"):
        return "cn-northwest-1"
    if region.startswith("ap-"):
        return "ap-south-1"
    if region.startswith("eu-") or region.startswith("me-") or region.startswith("af-"):
        return "eu-central-1"
    return "us-east-1"


def on_demand_filters(region: str) -> list[FilterTypeDef]:
    """GetProducts filters for Linux on-demand prices of shared-tenancy instances in ``region``."""
    terms = {
        "regionCode": region,
        "serviceCode": "AmazonEC2",
        "preInstalledSw": "NA",
        "operatingSystem": "Linux",
        "capacitystatus": "Used",
        "marketoption": "OnDemand",
        "tenancy": "Shared",
    }
    return [{"Type": "TERM_MATCH", "Field": field, "Value": value} for field, value in terms.items()]


def parse_price_list(price_list: Iterable[str | Mapping[str, Any]]) -> dict[str, float]:
    """Hourly USD price per instance type from GetProducts' PriceList entries (JSON documents).

    A type with several products keeps its lowest non-zero price; zero prices (placeholders) are skipped.
    """
    prices: dict[str, float] = {}
    for entry in price_list:
        doc = json.loads(entry) if isinstance(entry, str) else entry
        name = ((doc.get("product") or {}).get("attributes") or {}).get("instanceType")
        if not name:
            continue
        for term in ((doc.get("terms") or {}).get("OnDemand") or {}).values():
            for dimension in (term.get("priceDimensions") or {}).values():
                usd = (dimension.get("pricePerUnit") or {}).get("USD")
                try:
                    price = float(str(usd))
                except (TypeError, ValueError):
                    continue
                if price > 0 and (name not in prices or price < prices[name]):
                    prices[name] = price
    return prices


class PriceSource:
    """On-demand and spot prices for one region, cached in process and refreshed every 12 hours."""

    def __init__(
        self,
        region: str,
        clock: Clock,
        *,
        pricing_client: Callable[[str], PricingClient] | PricingClient | None,
        ec2: EC2Client | None,
        use_spot_history: bool = True,
        persisted: PersistedBlobs | None = None,
    ) -> None:
        self.region = region
        self._persisted = persisted
        self._clock = clock
        self._pricing_factory = pricing_client
        self._ec2 = ec2
        self._use_spot_history = use_spot_history
        self._lock = threading.Lock()
        self._on_demand: Mapping[str, float] | None = None
        self._on_demand_due: datetime | None = None
        self._spot: dict[tuple[str, str], float] = {}
        self._spot_due: datetime | None = None
        self.on_demand_source = "bundled"

    def _pricing(self) -> PricingClient:
        factory = self._pricing_factory
        assert factory is not None  # callers check: without a client there is nothing to ask
        return factory(pricing_endpoint_region(self.region)) if callable(factory) else factory

    def on_demand_prices(self) -> Mapping[str, float]:
        now = self._clock.now()
        with self._lock:
            if self._on_demand is not None and self._on_demand_due is not None and now < self._on_demand_due:
                return self._on_demand
            if self._on_demand is None and self._pricing_factory is not None:
                stored = self._read_stored(on_demand_sort_key(self.region), now)
                if stored is not None:
                    fetched_at, doc = stored
                    self._on_demand = {str(name): float(price) for name, price in doc.items()}
                    self._on_demand_due = fetched_at + REFRESH_INTERVAL
                    self.on_demand_source = "dynamodb"
                    return self._on_demand
        prices, retry_after = self._fetch_on_demand()
        if prices and self._persisted is not None:
            self._persisted.write(
                on_demand_sort_key(self.region), _encode(now, prices), expires_at=now + 2 * REFRESH_INTERVAL
            )
        fallback: Mapping[str, float] | None = None
        if not prices and self._pricing_factory is not None:
            # Older than the refresh interval, but fetched for this region: closer than the snapshot.
            stored = self._read_stored(on_demand_sort_key(self.region), now, any_age=True)
            if stored is not None:
                fallback = {str(name): float(price) for name, price in stored[1].items()}
        with self._lock:
            if prices:
                self._on_demand, self._on_demand_due = prices, now + REFRESH_INTERVAL
                self.on_demand_source = "pricing-api"
            elif fallback:
                self._on_demand, self._on_demand_due = fallback, now + retry_after
                self.on_demand_source = "dynamodb"
            else:
                self._on_demand, self._on_demand_due = (
                    bundled_on_demand_prices(self.region),
                    now + retry_after,
                )
                self.on_demand_source = "bundled"
            return self._on_demand

    def _fetch_on_demand(self) -> tuple[dict[str, float], timedelta]:
        """The prices, or {} and when to try again."""
        if self._pricing_factory is None:
            return {}, RETRY_INTERVAL
        try:
            client = self._pricing()
            prices: dict[str, float] = {}
            pages = client.get_paginator("get_products").paginate(
                ServiceCode="AmazonEC2", Filters=on_demand_filters(self.region), FormatVersion="aws_v1"
            )
            for page in pages:
                for name, price in parse_price_list(page.get("PriceList") or ()).items():
                    if name not in prices or price < prices[name]:
                        prices[name] = price
            return prices, REFRESH_INTERVAL
        except (ConnectTimeoutError, EndpointConnectionError) as error:
            logger.warning(
                "the Pricing API cannot be reached from this network (from a VPC without NAT it has no "
                "endpoint in most regions); using the persisted, else the bundled on-demand prices",
                extra={"error": str(error), "retry_in_s": UNREACHABLE_RETRY_INTERVAL.total_seconds()},
            )
            return {}, UNREACHABLE_RETRY_INTERVAL
        except (ClientError, BotoCoreError) as error:
            logger.warning(
                "on-demand prices unavailable; using the persisted, else the bundled prices",
                extra={"error": str(error)},
            )
            return {}, RETRY_INTERVAL

    def spot_prices(self) -> dict[tuple[str, str], float]:
        """The latest spot price per (type, zone), or {} when the history cannot be read."""
        if not self._use_spot_history or self._ec2 is None:
            return self._spot  # the same (empty) object each time, so callers can cache on it
        now = self._clock.now()
        with self._lock:
            if self._spot_due is not None and now < self._spot_due:
                return self._spot
            if self._spot_due is None:
                stored = self._read_stored(spot_sort_key(self.region), now)
                if stored is not None:
                    fetched_at, rows = stored
                    self._spot = {(str(name), str(zone)): float(price) for name, zone, price in rows}
                    self._spot_due = fetched_at + REFRESH_INTERVAL
                    return self._spot
        try:
            history: list[Mapping[str, Any]] = []
            paginator = self._ec2.get_paginator("describe_spot_price_history")
            for page in paginator.paginate(ProductDescriptions=list(SPOT_PRODUCTS), StartTime=now):
                history.extend(page.get("SpotPriceHistory") or ())
            spot = {k: v for k, v in latest_spot_prices(history).items() if v > 0}
            due = now + REFRESH_INTERVAL
            if spot and self._persisted is not None:
                rows = sorted([name, zone, price] for (name, zone), price in spot.items())
                self._persisted.write(
                    spot_sort_key(self.region), _encode(now, rows), expires_at=now + 2 * REFRESH_INTERVAL
                )
        except (ClientError, BotoCoreError) as error:
            logger.warning(
                "spot price history unavailable; using the spot model", extra={"error": str(error)}
            )
            spot, due = {}, now + RETRY_INTERVAL
        with self._lock:
            self._spot, self._spot_due = spot, due
            return spot

    def _read_stored(
        self, sort_key: str, now: datetime, any_age: bool = False
    ) -> tuple[datetime, Any] | None:
        """What another invocation fetched, while it is younger than the refresh interval (``any_age``:
        while the table keeps it)."""
        data = self._persisted.read(sort_key) if self._persisted is not None else None
        if data is None:
            return None
        try:
            fetched_at, prices = _decode(data)
        except (KeyError, ValueError, OSError) as error:  # OSError: a corrupt gzip stream
            logger.warning("cannot read persisted prices", extra={"key": sort_key, "error": str(error)})
            return None
        return (fetched_at, prices) if any_age or now - fetched_at < REFRESH_INTERVAL else None
