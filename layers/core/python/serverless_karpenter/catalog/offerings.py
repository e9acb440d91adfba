"""Offerings: where (zone) and how (capacity type) an instance type can be bought, and at what price.

As in Karpenter, each offering is one zone x one capacity type, so every offering label has exactly one
value. An on-demand offering needs an on-demand price and a spot offering a spot price; a type with no
price for a capacity type in a zone has no offering there.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from serverless_karpenter.api import labels as wk


@dataclass(frozen=True, slots=True)
class Offering:
    zone: str
    capacity_type: str
    price: float
    available: bool
    zone_id: str | None = None
    reservation_id: str | None = None
    # A reserved offering's room: how many more instances its reservation takes (DescribeCapacityReservations
    # AvailableInstanceCount), which scheduling counts down per NodeClaim (Karpenter's ReservationCapacity).
    reservation_capacity: int = 0

    def labels(self) -> dict[str, str]:
        """The node labels this offering pins: zone, capacity type, and zone-id/reservation when known."""
        out = {wk.ZONE: self.zone, wk.CAPACITY_TYPE: self.capacity_type}
        if self.zone_id:
            out[wk.ZONE_ID] = self.zone_id
        if self.reservation_id:
            out[wk.CAPACITY_RESERVATION_ID] = self.reservation_id
        return out


def offered_zones_from_items(items: Iterable[Mapping[str, str]]) -> dict[str, list[str]]:
    """Zones per instance type from ``DescribeInstanceTypeOfferings`` items.

    Only ``LocationType: availability-zone`` items count (an item without a LocationType is taken as one,
    which is how the bundled snapshot stores them).
    """
    zones: dict[str, list[str]] = {}
    for item in items:
        if item.get("LocationType", "availability-zone") != "availability-zone":
            continue
        zones.setdefault(item["InstanceType"], []).append(item["Location"])
    return {name: sorted(set(z)) for name, z in zones.items()}


def build_offerings(
    instance_type: str,
    capacity_types: Iterable[str],
    offered_zones: Iterable[str],
    *,
    zones: Collection[str] | None = None,
    zone_ids: Mapping[str, str] | None = None,
    on_demand_price: float | None = None,
    spot_prices: Mapping[tuple[str, str], float] | None = None,
) -> list[Offering]:
    """The offerings of one type: each offered zone (within ``zones``, if given) x capacity type."""
    spot_prices = spot_prices or {}
    zone_ids = zone_ids or {}
    wanted = set(capacity_types)
    out: list[Offering] = []
    for zone in sorted(offered_zones):
        if zones is not None and zone not in zones:
            continue
        zone_id = zone_ids.get(zone)
        if wk.CAPACITY_TYPE_ON_DEMAND in wanted and on_demand_price is not None:
            out.append(Offering(zone, wk.CAPACITY_TYPE_ON_DEMAND, on_demand_price, True, zone_id))
        if wk.CAPACITY_TYPE_SPOT in wanted:
            spot = spot_prices.get((instance_type, zone))
            if spot is not None:
                out.append(Offering(zone, wk.CAPACITY_TYPE_SPOT, spot, True, zone_id))
    return out
