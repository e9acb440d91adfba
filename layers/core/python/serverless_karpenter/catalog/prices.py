"""Prices: the bundled on-demand table, spot prices from EC2's history, and an offline spot model.

Prices are USD per instance-hour.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from serverless_karpenter.catalog._data import read_package_json
from serverless_karpenter.clock import parse_rfc3339

ON_DEMAND_PRICES_FILE = "aws-ondemand-prices.json"


@functools.cache
def _bundled_price_tables() -> Mapping[str, Mapping[str, float]]:
    raw = read_package_json(ON_DEMAND_PRICES_FILE)
    return {
        region: {name: float(price) for name, price in table.items()}
        for region, table in raw["prices"].items()
    }


def bundled_price_regions() -> tuple[str, ...]:
    return tuple(sorted(_bundled_price_tables()))


def bundled_on_demand_prices(region: str = "us-east-1") -> Mapping[str, float]:
    """Linux on-demand prices by instance type from the bundled snapshot (empty for an unknown region)."""
    return _bundled_price_tables().get(region, {})


def _timestamp(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value
    return parse_rfc3339(str(value))


def latest_spot_prices(history: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], float]:
    """The latest price per (instance type, zone) from ``DescribeSpotPriceHistory`` items.

    Only Linux/UNIX products count, since that is what we launch.
    """
    latest: dict[tuple[str, str], tuple[datetime, float]] = {}
    for item in history:
        product = item.get("ProductDescription")
        if product is not None and not str(product).startswith("Linux/UNIX"):
            continue
        key = (str(item["InstanceType"]), str(item["AvailabilityZone"]))
        when = _timestamp(item["Timestamp"])
        seen = latest.get(key)
        if seen is None or when > seen[0]:
            latest[key] = (when, float(item["SpotPrice"]))
    return {key: price for key, (_, price) in latest.items()}


def _unit_hash(text: str) -> float:
    """A stable number in [0, 1) for ``text``; stable across processes, unlike ``hash``."""
    return zlib.crc32(text.encode()) / 2**32


@dataclass(frozen=True, slots=True)
class SpotDiscountModel:
    """Offline spot prices, for when there is no spot price history (the simulator, ``plan``, tests).

    Each instance family gets a fixed discount between ``min_discount`` and ``max_discount`` off its
    on-demand price, derived from a CRC of the family name. So sizes of one family keep their
    on-demand ratios, as real spot prices mostly do. Each (family, zone) then moves by up to
    ±``zone_spread`` of that price, so zones are not all alike. Same inputs, same price, in every
    process.
    """

    min_discount: float = 0.60
    max_discount: float = 0.70
    zone_spread: float = 0.05

    def discount(self, instance_type: str) -> float:
        family = instance_type.split(".", 1)[0]
        return self.min_discount + (self.max_discount - self.min_discount) * _unit_hash(family)

    def price(self, instance_type: str, zone: str, on_demand_price: float) -> float:
        family = instance_type.split(".", 1)[0]
        zone_factor = 1.0 + self.zone_spread * (2.0 * _unit_hash(f"{family}/{zone}") - 1.0)
        return round(on_demand_price * (1.0 - self.discount(instance_type)) * zone_factor, 6)

    def spot_prices(
        self, on_demand_prices: Mapping[str, float], offered_zones: Mapping[str, Iterable[str]]
    ) -> dict[tuple[str, str], float]:
        """Modelled spot prices for every (type, zone) that has an on-demand price."""
        out: dict[tuple[str, str], float] = {}
        for name, zones in offered_zones.items():
            od = on_demand_prices.get(name)
            if od is None:
                continue
            for zone in zones:
                out[(name, zone)] = self.price(name, zone, od)
        return out


DEFAULT_SPOT_MODEL = SpotDiscountModel()
