"""``plan --catalog``: the file is a snapshot source and a price table for the live provider, so its types
are built, filtered and overlaid as the Lambdas' are; only where the facts come from differs."""

from __future__ import annotations

from typing import Any

from serverless_karpenter.catalog.sources import DescribedCatalog
from serverless_karpenter.clock import SystemClock
from serverless_karpenter.runtime import CatalogInstanceTypes
from serverless_karpenter_cli.plan import file_catalog, offline_nodeclass

from tests.unit.karpenter_suite_helpers_selection_aws import REGION, nodeclass_manifest, raw_info

ZONES = ["us-east-1a", "us-east-1b"]


def document(**extra: Any) -> dict[str, Any]:
    return {
        "InstanceTypes": [raw_info("m5.large"), raw_info("c5.large")],
        "InstanceTypeOfferings": [
            {"InstanceType": name, "Location": zone, "LocationType": "availability-zone"}
            for name in ("m5.large", "c5.large")
            for zone in ZONES
        ],
        "OnDemandPrices": {"m5.large": 0.096, "c5.large": 0.085},
        **extra,
    }


def offerings(provider: CatalogInstanceTypes) -> dict[str, set[tuple[str, str, float]]]:
    nodeclass = offline_nodeclass(nodeclass_manifest(), ZONES)
    return {
        it.name: {(o.capacity_type, o.zone, round(o.price, 6)) for o in it.offerings}
        for it in provider.instance_types(nodeclass, {"spec": {}})
    }


def test_the_file_provider_is_the_live_provider_over_the_file() -> None:
    provider, zones = file_catalog(document(), REGION)

    assert isinstance(provider, CatalogInstanceTypes)
    assert zones == ZONES
    # The same facts through the Lambdas' constructor give the same types.
    described = DescribedCatalog.from_document(document(), REGION)
    live = CatalogInstanceTypes(
        REGION, SystemClock(), catalog_source=described, prices=described, model_missing_spot=False
    )
    assert offerings(provider) == offerings(live)


def test_a_file_without_spot_prices_offers_on_demand_only() -> None:
    provider, _ = file_catalog(document(), REGION)

    assert offerings(provider) == {
        "c5.large": {("on-demand", zone, 0.085) for zone in ZONES},
        "m5.large": {("on-demand", zone, 0.096) for zone in ZONES},
    }


def test_spot_where_the_file_has_a_price_and_overlays_apply() -> None:
    history = [
        {
            "AvailabilityZone": "us-east-1b",
            "InstanceType": "m5.large",
            "SpotPrice": "0.04",
            "Timestamp": "2026-01-01T00:00:00Z",
            "ProductDescription": "Linux/UNIX",
        }
    ]
    m5_large = {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}
    spec = {"requirements": [m5_large], "priceAdjustment": "-50%"}
    overlay = {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": "h"},
        "spec": spec,
    }
    provider, _ = file_catalog(document(SpotPriceHistory=history), REGION, lambda: [overlay])

    got = offerings(provider)

    assert got["m5.large"] == {("on-demand", z, 0.048) for z in ZONES} | {("spot", "us-east-1b", 0.02)}
    assert got["c5.large"] == {("on-demand", z, 0.085) for z in ZONES}
