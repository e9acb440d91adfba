"""The bundled offline catalog: instance types, offerings and prices with no AWS account.

``data/instance-types-<region>.json`` is made by ``benchmarks/make_catalog_snapshot.py`` from moto's
bundled EC2 data. On-demand prices come from the bundled price table; there is no spot history
offline, so spot prices come from :class:`~serverless_karpenter.catalog.prices.SpotDiscountModel`.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from serverless_karpenter.catalog._data import read_package_json
from serverless_karpenter.catalog.allocatable import (
    DEFAULT_OPTIONS,
    AmiFamily,
    BlockDeviceMapping,
    KubeletConfig,
    ProviderOptions,
    ami_family,
)
from serverless_karpenter.catalog.catalog import InstanceTypeCatalog, build_catalog
from serverless_karpenter.catalog.prices import (
    DEFAULT_SPOT_MODEL,
    SpotDiscountModel,
    bundled_on_demand_prices,
)
from serverless_karpenter.catalog.type_info import InstanceTypeInfo, parse_instance_type_info
from serverless_karpenter.catalog.unavailable import UnavailableOfferings

BUNDLED_REGIONS = ("us-east-1",)


def snapshot_file(region: str) -> str:
    return f"instance-types-{region}.json"


@dataclass(frozen=True, slots=True)
class CatalogSnapshot:
    region: str
    zone_ids: Mapping[str, str]
    instance_types: tuple[InstanceTypeInfo, ...]
    offered_zones: Mapping[str, tuple[str, ...]]


@functools.cache
def bundled_snapshot(region: str = "us-east-1") -> CatalogSnapshot:
    """The parsed snapshot for ``region``, read once per process."""
    if region not in BUNDLED_REGIONS:
        raise ValueError(f"no bundled instance type snapshot for {region!r}; have {list(BUNDLED_REGIONS)}")
    raw = read_package_json(snapshot_file(region))
    return CatalogSnapshot(
        region=raw["region"],
        zone_ids=dict(raw["zones"]),
        instance_types=tuple(parse_instance_type_info(item) for item in raw["instance_types"]),
        offered_zones={name: tuple(zones) for name, zones in raw["offerings"].items()},
    )


@functools.lru_cache(maxsize=16)
def _cached_catalog(
    *,
    region: str,
    zones: frozenset[str] | None,
    kubelet: KubeletConfig | None,
    family: AmiFamily,
    block_device_mappings: tuple[BlockDeviceMapping, ...] | None,
    instance_store_policy: str | None,
    options: ProviderOptions,
    spot_model: SpotDiscountModel,
) -> InstanceTypeCatalog:
    snapshot = bundled_snapshot(region)
    on_demand = bundled_on_demand_prices(region)
    return build_catalog(
        snapshot.instance_types,
        snapshot.offered_zones,
        region=region,
        zones=zones,
        zone_ids=snapshot.zone_ids,
        on_demand_prices=on_demand,
        spot_prices=spot_model.spot_prices(on_demand, snapshot.offered_zones),
        kubelet=kubelet,
        ami_family_name=family,
        block_device_mappings=block_device_mappings,
        instance_store_policy=instance_store_policy,
        options=options,
    )


def load_bundled_catalog(
    region: str = "us-east-1",
    zones: Collection[str] | None = None,
    *,
    kubelet: KubeletConfig | None = None,
    ami_family_name: str | AmiFamily = "AL2023",
    block_device_mappings: Sequence[BlockDeviceMapping] | None = None,
    instance_store_policy: str | None = None,
    options: ProviderOptions = DEFAULT_OPTIONS,
    unavailable: UnavailableOfferings | None = None,
    spot_model: SpotDiscountModel = DEFAULT_SPOT_MODEL,
) -> InstanceTypeCatalog:
    """A catalog from the bundled snapshot, limited to ``zones`` if given.

    Built catalogs are cached per argument set (the unavailable view is attached per call), so calling
    this on every invocation is cheap after the first.
    """
    catalog = _cached_catalog(
        region=region,
        zones=None if zones is None else frozenset(zones),
        kubelet=kubelet,
        family=ami_family(ami_family_name),
        block_device_mappings=None if block_device_mappings is None else tuple(block_device_mappings),
        instance_store_policy=instance_store_policy,
        options=options,
        spot_model=spot_model,
    )
    return catalog if unavailable is None else catalog.with_unavailable(unavailable)
