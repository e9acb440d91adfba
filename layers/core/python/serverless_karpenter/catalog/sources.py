"""Where the live instance-type provider (``runtime.CatalogInstanceTypes``) reads its facts and prices.

One path builds instance types: the provider asks a :class:`SnapshotSource` for what EC2 describes and a
:class:`PriceTable` for prices, then builds, filters by availability and applies NodeOverlays the same
way whoever asks. The Lambdas read EC2 (``adapters.catalog_source``, ``adapters.pricing``); ``plan`` with
``--catalog`` reads a file shaped like the EC2 APIs (:class:`DescribedCatalog`); with neither, the
provider reads the bundled snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from serverless_karpenter.catalog.offerings import offered_zones_from_items
from serverless_karpenter.catalog.prices import latest_spot_prices
from serverless_karpenter.catalog.snapshot import CatalogSnapshot
from serverless_karpenter.catalog.type_info import parse_instance_type_info


class SnapshotSource(Protocol):
    """What EC2 describes of a region: instance types, where each is offered, zone ids."""

    def snapshot(self) -> CatalogSnapshot: ...


class PriceTable(Protocol):
    """On-demand prices per type, and spot prices per (type, zone). No spot prices at all means none
    are known, and the provider models them; a type missing among known ones has no spot offering."""

    def on_demand_prices(self) -> Mapping[str, float]: ...

    def spot_prices(self) -> Mapping[tuple[str, str], float]: ...


@dataclass(frozen=True, slots=True)
class DescribedCatalog:
    """A region as a ``--catalog`` file describes it: ``InstanceTypes`` (DescribeInstanceTypes items),
    ``InstanceTypeOfferings``, ``SpotPriceHistory`` and ``OnDemandPrices`` (type to USD per hour). A
    type with no offering in a zone is not offered there; with a spot history, a type with no spot price
    in a zone has no spot offering there. Both a :class:`SnapshotSource` and a :class:`PriceTable`."""

    facts: CatalogSnapshot
    on_demand: Mapping[str, float]
    spot: Mapping[tuple[str, str], float]

    @classmethod
    def from_document(cls, data: Mapping[str, Any], region: str) -> DescribedCatalog:
        offered = offered_zones_from_items(data.get("InstanceTypeOfferings") or [])
        facts = CatalogSnapshot(
            region=region,
            zone_ids={},
            instance_types=tuple(parse_instance_type_info(item) for item in data.get("InstanceTypes") or []),
            offered_zones={name: tuple(zones) for name, zones in offered.items()},
        )
        on_demand = {str(k): float(v) for k, v in (data.get("OnDemandPrices") or {}).items()}
        return cls(facts, on_demand, latest_spot_prices(data.get("SpotPriceHistory") or []))

    def zones(self) -> list[str]:
        """Every zone some type is offered in."""
        return sorted({z for zones in self.facts.offered_zones.values() for z in zones})

    def snapshot(self) -> CatalogSnapshot:
        return self.facts

    def on_demand_prices(self) -> Mapping[str, float]:
        return self.on_demand

    def spot_prices(self) -> Mapping[tuple[str, str], float]:
        return self.spot
