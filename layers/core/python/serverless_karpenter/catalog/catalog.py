"""The instance type catalog: types with their offerings, and availability read at query time."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from serverless_karpenter.catalog.allocatable import (
    DEFAULT_OPTIONS,
    AmiFamily,
    BlockDeviceMapping,
    KubeletConfig,
    ProviderOptions,
    ami_family,
)
from serverless_karpenter.catalog.instance_types import InstanceType, build_instance_type, is_supported_by
from serverless_karpenter.catalog.offerings import Offering, build_offerings
from serverless_karpenter.catalog.prices import bundled_on_demand_prices
from serverless_karpenter.catalog.type_info import InstanceTypeInfo, parse_instance_type_info
from serverless_karpenter.catalog.unavailable import NoUnavailableOfferings, UnavailableOfferings


class InstanceTypeCatalog:
    """Instance types and their offerings.

    Offerings are stored as built (``available`` means "offered and priced"); the answers from
    :meth:`offerings` and friends also honour the ``UnavailableOfferings`` view at the moment they are
    asked, so one catalog can be cached across invocations while capacity errors come and go.
    """

    def __init__(
        self,
        entries: Iterable[tuple[InstanceType, Sequence[Offering]]],
        *,
        unavailable: UnavailableOfferings | None = None,
        region: str | None = None,
    ) -> None:
        self._types: dict[str, InstanceType] = {}
        self._offerings: dict[str, tuple[Offering, ...]] = {}
        for instance_type, offerings in entries:
            self._types[instance_type.name] = instance_type
            self._offerings[instance_type.name] = tuple(offerings)
        self._unavailable: UnavailableOfferings = (
            unavailable if unavailable is not None else NoUnavailableOfferings()
        )
        self.region = region

    @property
    def unavailable(self) -> UnavailableOfferings:
        return self._unavailable

    def with_unavailable(self, unavailable: UnavailableOfferings) -> InstanceTypeCatalog:
        """The same types and offerings, read through another unavailable-offerings view."""
        clone = InstanceTypeCatalog((), unavailable=unavailable, region=self.region)
        clone._types = self._types
        clone._offerings = self._offerings
        return clone

    def get(self, name: str) -> InstanceType | None:
        return self._types.get(name)

    def __getitem__(self, name: str) -> InstanceType:
        return self._types[name]

    def __contains__(self, name: object) -> bool:
        return name in self._types

    def __len__(self) -> int:
        return len(self._types)

    def __iter__(self) -> Iterator[InstanceType]:
        return iter(self._types.values())

    def all(self) -> list[InstanceType]:
        return list(self._types.values())

    def names(self) -> list[str]:
        return list(self._types)

    def zones(self) -> list[str]:
        return sorted({o.zone for offerings in self._offerings.values() for o in offerings})

    def is_available(self, instance_type: str | InstanceType, offering: Offering) -> bool:
        name = instance_type if isinstance(instance_type, str) else instance_type.name
        return offering.available and not self._unavailable.is_unavailable(
            offering.capacity_type, name, offering.zone
        )

    def offerings(self, instance_type: str | InstanceType, *, available_only: bool = False) -> list[Offering]:
        """The type's offerings, with ``available`` as of now (an unknown type has none)."""
        name = instance_type if isinstance(instance_type, str) else instance_type.name
        out: list[Offering] = []
        for offering in self._offerings.get(name, ()):
            available = offering.available and not self._unavailable.is_unavailable(
                offering.capacity_type, name, offering.zone
            )
            if available:
                out.append(offering)
            elif not available_only:
                out.append(offering if not offering.available else replace(offering, available=False))
        return out

    def available_offerings(self, instance_type: str | InstanceType) -> list[Offering]:
        return self.offerings(instance_type, available_only=True)

    def cheapest_offering(
        self,
        instance_type: str | InstanceType,
        *,
        zones: Collection[str] | None = None,
        capacity_types: Collection[str] | None = None,
    ) -> Offering | None:
        """The cheapest available offering of the type, within the zones and capacity types if given.

        Ties go to the first in (zone, capacity type) order, so the answer is stable.
        """
        best: Offering | None = None
        for offering in self.offerings(instance_type, available_only=True):
            if zones is not None and offering.zone not in zones:
                continue
            if capacity_types is not None and offering.capacity_type not in capacity_types:
                continue
            if best is None or offering.price < best.price:
                best = offering
        return best

    def cheapest(
        self,
        instance_types: Iterable[str | InstanceType] | None = None,
        *,
        zones: Collection[str] | None = None,
        capacity_types: Collection[str] | None = None,
    ) -> tuple[InstanceType, Offering] | None:
        """The cheapest (type, offering) among ``instance_types`` (default: all)."""
        best: tuple[InstanceType, Offering] | None = None
        for candidate in self._types.values() if instance_types is None else instance_types:
            it = self._types.get(candidate) if isinstance(candidate, str) else candidate
            if it is None:
                continue
            offering = self.cheapest_offering(it, zones=zones, capacity_types=capacity_types)
            if offering is not None and (best is None or offering.price < best[1].price):
                best = (it, offering)
        return best


def build_catalog(
    instance_type_infos: Iterable[Mapping[str, Any] | InstanceTypeInfo],
    offered_zones: Mapping[str, Iterable[str]],
    *,
    region: str,
    zones: Collection[str] | None = None,
    zone_ids: Mapping[str, str] | None = None,
    on_demand_prices: Mapping[str, float] | None = None,
    spot_prices: Mapping[tuple[str, str], float] | None = None,
    kubelet: KubeletConfig | None = None,
    ami_family_name: str | AmiFamily = "AL2023",
    block_device_mappings: Sequence[BlockDeviceMapping] | None = None,
    instance_store_policy: str | None = None,
    options: ProviderOptions = DEFAULT_OPTIONS,
    unavailable: UnavailableOfferings | None = None,
    keep_types_without_offerings: bool = False,
) -> InstanceTypeCatalog:
    """A catalog from ``DescribeInstanceTypes`` items and the zones each type is offered in.

    ``offered_zones`` is what :func:`~serverless_karpenter.catalog.offerings.offered_zones_from_items`
    makes of ``DescribeInstanceTypeOfferings``; ``zones`` narrows it (the EC2NodeClass's subnet zones).
    On-demand prices default to the bundled table for ``region``; spot prices come from
    :func:`~serverless_karpenter.catalog.prices.latest_spot_prices` or a spot model. Types the AMI family
    cannot run, and (unless asked) types left with no offering, are dropped.
    """
    family = ami_family(ami_family_name)
    od_prices = bundled_on_demand_prices(region) if on_demand_prices is None else on_demand_prices
    zone_set = None if zones is None else frozenset(zones)
    entries: list[tuple[InstanceType, Sequence[Offering]]] = []
    for item in instance_type_infos:
        info = item if isinstance(item, InstanceTypeInfo) else parse_instance_type_info(item)
        if not is_supported_by(info, family):
            continue
        offerings = build_offerings(
            info.name,
            info.usage_classes,
            offered_zones.get(info.name, ()),
            zones=zone_set,
            zone_ids=zone_ids,
            on_demand_price=od_prices.get(info.name),
            spot_prices=spot_prices,
        )
        if not offerings and not keep_types_without_offerings:
            continue
        instance_type = build_instance_type(
            info,
            kubelet=kubelet,
            ami_family_name=family,
            region=region,
            block_device_mappings=block_device_mappings,
            instance_store_policy=instance_store_policy,
            options=options,
        )
        entries.append((instance_type, offerings))
    entries.sort(key=lambda entry: entry[0].name)
    return InstanceTypeCatalog(entries, unavailable=unavailable, region=region)
