"""Instance types with Karpenter's allocatable, their offerings and prices, and the offline snapshot."""

from serverless_karpenter.catalog.allocatable import (
    AL2,
    AL2023,
    AMI_FAMILIES,
    BOTTLEROCKET,
    CUSTOM,
    DEFAULT_OPTIONS,
    WINDOWS_2019,
    WINDOWS_2022,
    WINDOWS_2025,
    Allocation,
    AmiFamily,
    BlockDeviceMapping,
    KubeletConfig,
    Overhead,
    ProviderOptions,
    ami_family,
    compute_allocatable,
    eni_limited_pods,
)
from serverless_karpenter.catalog.catalog import InstanceTypeCatalog, build_catalog
from serverless_karpenter.catalog.instance_types import (
    InstanceType,
    build_instance_type,
    compute_labels,
    is_supported_by,
)
from serverless_karpenter.catalog.offerings import Offering, build_offerings, offered_zones_from_items
from serverless_karpenter.catalog.prices import (
    DEFAULT_SPOT_MODEL,
    SpotDiscountModel,
    bundled_on_demand_prices,
    latest_spot_prices,
)
from serverless_karpenter.catalog.snapshot import CatalogSnapshot, bundled_snapshot, load_bundled_catalog
from serverless_karpenter.catalog.type_info import InstanceTypeInfo, parse_instance_type_info
from serverless_karpenter.catalog.unavailable import (
    DEFAULT_UNAVAILABLE_TTL_SECONDS,
    InMemoryUnavailableOfferings,
    NoUnavailableOfferings,
    UnavailableOfferings,
)
from serverless_karpenter.catalog.vpc_limits import VpcLimits, bundled_vpc_limits, vpc_limits_for

__all__ = [
    "AL2",
    "AL2023",
    "AMI_FAMILIES",
    "BOTTLEROCKET",
    "CUSTOM",
    "DEFAULT_OPTIONS",
    "DEFAULT_SPOT_MODEL",
    "DEFAULT_UNAVAILABLE_TTL_SECONDS",
    "WINDOWS_2019",
    "WINDOWS_2022",
    "WINDOWS_2025",
    "Allocation",
    "AmiFamily",
    "BlockDeviceMapping",
    "CatalogSnapshot",
    "InMemoryUnavailableOfferings",
    "InstanceType",
    "InstanceTypeCatalog",
    "InstanceTypeInfo",
    "KubeletConfig",
    "NoUnavailableOfferings",
    "Offering",
    "Overhead",
    "ProviderOptions",
    "SpotDiscountModel",
    "UnavailableOfferings",
    "VpcLimits",
    "ami_family",
    "build_catalog",
    "build_instance_type",
    "build_offerings",
    "bundled_on_demand_prices",
    "bundled_snapshot",
    "bundled_vpc_limits",
    "compute_allocatable",
    "compute_labels",
    "eni_limited_pods",
    "is_supported_by",
    "latest_spot_prices",
    "load_bundled_catalog",
    "offered_zones_from_items",
    "parse_instance_type_info",
    "vpc_limits_for",
]
