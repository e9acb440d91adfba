"""The catalog's inputs as EC2 describes them now, in a form that can be stored and read back.

:class:`CatalogFacts` is what ``DescribeInstanceTypes``, ``DescribeInstanceTypeOfferings`` and
``DescribeAvailabilityZones`` say about a region, with each instance type trimmed to the keys the
catalog reads. It serialises to compact gzipped JSON (well under DynamoDB's 400 KB item limit) so a
cold Lambda can load it from the table instead of paging through EC2. Pure: the calls live in adapters.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from serverless_karpenter.catalog.offerings import offered_zones_from_items
from serverless_karpenter.catalog.snapshot import CatalogSnapshot
from serverless_karpenter.catalog.type_info import parse_instance_type_info
from serverless_karpenter.clock import parse_rfc3339, to_rfc3339

# The subset of a DescribeInstanceTypes item that catalog.type_info reads.
DESCRIBE_KEYS: Mapping[str, Any] = {
    "InstanceType": True,
    "BareMetal": True,
    "Hypervisor": True,
    "SupportedUsageClasses": True,
    "SupportedVirtualizationTypes": True,
    "CurrentGeneration": True,
    "VCpuInfo": {"DefaultVCpus": True},
    "MemoryInfo": {"SizeInMiB": True},
    "ProcessorInfo": {"Manufacturer": True, "SupportedArchitectures": True, "SustainedClockSpeedInGhz": True},
    "GpuInfo": {
        "Gpus": {"Name": True, "Manufacturer": True, "Count": True, "MemoryInfo": {"SizeInMiB": True}}
    },
    "InferenceAcceleratorInfo": {"Accelerators": {"Name": True, "Manufacturer": True, "Count": True}},
    "NeuronInfo": {"NeuronDevices": {"Name": True, "Count": True, "CoreInfo": {"Count": True}}},
    "NetworkInfo": {
        "MaximumNetworkInterfaces": True,
        "Ipv4AddressesPerInterface": True,
        "DefaultNetworkCardIndex": True,
        "NetworkCards": {
            "NetworkCardIndex": True,
            "MaximumNetworkInterfaces": True,
            "BaselineBandwidthInGbps": True,
        },
        "EfaInfo": {"MaximumEfaInterfaces": True},
        "EncryptionInTransitSupported": True,
    },
    "EbsInfo": {"EbsOptimizedSupport": True, "EbsOptimizedInfo": {"MaximumBandwidthInMbps": True}},
    "InstanceStorageInfo": {"TotalSizeInGB": True, "NvmeSupport": True},
}


def trim(value: Any, keep: Any = DESCRIBE_KEYS) -> Any:
    if keep is True:
        return value
    if isinstance(value, list):
        return [trim(v, keep) for v in value]
    if not isinstance(value, Mapping):
        return value
    return {k: trim(v, keep[k]) for k, v in value.items() if k in keep}


def _is_launchable(item: Mapping[str, Any]) -> bool:
    """HVM types we can run nodes on: x86_64 or arm64, and not mac (macOS only)."""
    archs = set((item.get("ProcessorInfo") or {}).get("SupportedArchitectures") or ())
    virtualization = set(item.get("SupportedVirtualizationTypes") or ("hvm",))
    return (
        bool(archs & {"x86_64", "arm64"})
        and "hvm" in virtualization
        and not str(item.get("InstanceType", "")).startswith("mac")
    )


@dataclass(frozen=True, slots=True)
class CatalogFacts:
    region: str
    fetched_at: datetime
    zone_ids: Mapping[str, str]
    instance_types: tuple[Mapping[str, Any], ...]
    offered_zones: Mapping[str, tuple[str, ...]]

    @classmethod
    def from_describe(
        cls,
        region: str,
        fetched_at: datetime,
        instance_types: Iterable[Mapping[str, Any]],
        offerings: Iterable[Mapping[str, str]],
        zones: Iterable[Mapping[str, Any]],
    ) -> CatalogFacts:
        offered = offered_zones_from_items(offerings)
        kept = sorted(
            (
                trim(item)
                for item in instance_types
                if _is_launchable(item) and item["InstanceType"] in offered
            ),
            key=lambda item: item["InstanceType"],
        )
        zone_ids = {
            z["ZoneName"]: z["ZoneId"]
            for z in zones
            if z.get("ZoneType", "availability-zone") == "availability-zone" and z.get("ZoneId")
        }
        return cls(
            region=region,
            fetched_at=fetched_at,
            zone_ids=zone_ids,
            instance_types=tuple(kept),
            offered_zones={name: tuple(z) for name, z in offered.items()},
        )

    def to_bytes(self) -> bytes:
        doc = {
            "region": self.region,
            "fetched_at": to_rfc3339(self.fetched_at),
            "zones": dict(self.zone_ids),
            "instance_types": list(self.instance_types),
            "offerings": {name: list(z) for name, z in self.offered_zones.items()},
        }
        return gzip.compress(json.dumps(doc, separators=(",", ":"), sort_keys=True).encode(), mtime=0)

    @classmethod
    def from_bytes(cls, data: bytes) -> CatalogFacts:
        doc = json.loads(gzip.decompress(data))
        return cls(
            region=doc["region"],
            fetched_at=parse_rfc3339(doc["fetched_at"]),
            zone_ids=dict(doc["zones"]),
            instance_types=tuple(doc["instance_types"]),
            offered_zones={name: tuple(z) for name, z in doc["offerings"].items()},
        )

    def snapshot(self) -> CatalogSnapshot:
        return CatalogSnapshot(
            region=self.region,
            zone_ids=self.zone_ids,
            instance_types=tuple(parse_instance_type_info(item) for item in self.instance_types),
            offered_zones=self.offered_zones,
        )
