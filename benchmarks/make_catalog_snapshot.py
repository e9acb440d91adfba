"""Regenerate ``serverless_karpenter/data/instance-types-<region>.json`` from moto's bundled EC2 data.

The snapshot lets ``plan``, the simulator and the tests build a catalog with no AWS account. It holds
``DescribeInstanceTypes`` items trimmed to the keys the catalog reads, the zones each type is offered in
(from moto's ``DescribeInstanceTypeOfferings`` data), and moto's zone-name to zone-id map, so that the
snapshot agrees with what moto server answers in the simulator.

Kept: types offered in the region, with a bundled on-demand price, sold on demand, HVM, x86_64 or arm64,
not mac (macOS only), and current: ``CurrentGeneration`` or Nitro (moto's data flags some Nitro
families such as m5 and c5 as previous-generation; the Xen families c1, c3, c4, m1-m4, r3, r4, ... go).

    .venv/bin/python benchmarks/make_catalog_snapshot.py [--region us-east-1]
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import moto
from moto.ec2.models.availability_zones_and_regions import RegionsAndZonesBackend
from serverless_karpenter.catalog.live import DESCRIBE_KEYS

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = REPO / "layers/core/python/serverless_karpenter/data"
MOTO_RESOURCES = Path(moto.__file__).parent / "ec2/resources"

# The fields of a DescribeInstanceTypes item the catalog reads: one list, shared with the live catalog
# (whose two extra fields, generation and virtualization, only filter types).
_KEEP: Mapping[str, Any] = DESCRIBE_KEYS


def trim(value: Any, keep: Any) -> Any:
    if keep is True:
        return value
    if isinstance(value, list):
        return [trim(v, keep) for v in value]
    return {k: trim(v, keep[k]) for k, v in value.items() if k in keep}


def is_current_linux_type(item: Mapping[str, Any]) -> bool:
    name = item["InstanceType"]
    if name.startswith("mac"):
        return False
    if "hvm" not in item.get("SupportedVirtualizationTypes", []):
        return False
    if not {"x86_64", "arm64"} & set(item["ProcessorInfo"]["SupportedArchitectures"]):
        return False
    if "on-demand" not in item.get("SupportedUsageClasses", []):
        return False
    return (
        bool(item.get("CurrentGeneration"))
        or item.get("Hypervisor") == "nitro"
        or bool(item.get("BareMetal"))
    )


def build_snapshot(region: str) -> dict[str, Any]:
    types = json.loads(gzip.decompress((MOTO_RESOURCES / "instance_types.json.gz").read_bytes()))
    offerings_file = MOTO_RESOURCES / f"instance_type_offerings/availability-zone/{region}.json.gz"
    offerings = json.loads(gzip.decompress(offerings_file.read_bytes()))
    prices = json.loads((DATA_DIR / "aws-ondemand-prices.json").read_text())["prices"][region]
    zone_ids = {z.name: z.zone_id for z in RegionsAndZonesBackend.zones[region]}

    offered: dict[str, set[str]] = {}
    for item in offerings:
        if item["Location"] in zone_ids:
            offered.setdefault(item["InstanceType"], set()).add(item["Location"])

    kept = sorted(
        name
        for name, item in types.items()
        if name in offered and name in prices and is_current_linux_type(item)
    )
    return {
        "region": region,
        "source": (
            f"moto {moto.__version__} ec2/resources instance_types.json.gz and "
            f"instance_type_offerings/availability-zone/{region}.json.gz; "
            "current, Linux-usable, priced types only (benchmarks/make_catalog_snapshot.py)"
        ),
        "zones": zone_ids,
        "instance_types": [trim(types[name], _KEEP) for name in kept],
        "offerings": {name: sorted(offered[name]) for name in kept},
    }


def write_snapshot(snapshot: Mapping[str, Any], path: Path) -> None:
    """One instance type per line, so regenerations diff readably."""

    def dump(value: Any) -> str:
        return json.dumps(value, separators=(",", ":"), sort_keys=True)

    lines = ["{"]
    lines.append(f'"region":{dump(snapshot["region"])},')
    lines.append(f'"source":{dump(snapshot["source"])},')
    lines.append(f'"zones":{dump(snapshot["zones"])},')
    lines.append('"instance_types":[')
    lines.append(",\n".join(dump(item) for item in snapshot["instance_types"]))
    lines.append("],")
    lines.append('"offerings":{')
    lines.append(",\n".join(f"{dump(name)}:{dump(zones)}" for name, zones in snapshot["offerings"].items()))
    lines.append("}")
    lines.append("}")
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--region", default="us-east-1")
    args = parser.parse_args()
    snapshot = build_snapshot(args.region)
    path = DATA_DIR / f"instance-types-{args.region}.json"
    write_snapshot(snapshot, path)
    print(f"wrote {path} ({len(snapshot['instance_types'])} types, {path.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
