"""Offerings, prices, the unavailable-offerings cache and the catalog built from EC2-shaped inputs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from serverless_karpenter.api import labels as wk
from serverless_karpenter.catalog import (
    InMemoryUnavailableOfferings,
    InstanceTypeCatalog,
    Offering,
    SpotDiscountModel,
    build_catalog,
    build_offerings,
    latest_spot_prices,
    offered_zones_from_items,
)
from serverless_karpenter.clock import ManualClock


def ec2_item(
    name: str, vcpus: int = 2, memory_mib: int = 8192, usage: tuple[str, ...] = ("on-demand", "spot")
) -> dict[str, Any]:
    return {
        "InstanceType": name,
        "VCpuInfo": {"DefaultVCpus": vcpus},
        "MemoryInfo": {"SizeInMiB": memory_mib},
        "ProcessorInfo": {"SupportedArchitectures": ["x86_64"], "Manufacturer": "Intel"},
        "SupportedUsageClasses": list(usage),
        "Hypervisor": "nitro",
        "NetworkInfo": {
            "MaximumNetworkInterfaces": 3,
            "Ipv4AddressesPerInterface": 10,
            "DefaultNetworkCardIndex": 0,
            "NetworkCards": [{"NetworkCardIndex": 0, "MaximumNetworkInterfaces": 3}],
        },
    }


TYPE_OFFERINGS = [
    {"InstanceType": "m5.large", "LocationType": "availability-zone", "Location": "us-east-1a"},
    {"InstanceType": "m5.large", "LocationType": "availability-zone", "Location": "us-east-1b"},
    {"InstanceType": "m5.large", "LocationType": "availability-zone", "Location": "us-east-1c"},
    {"InstanceType": "m5.xlarge", "LocationType": "availability-zone", "Location": "us-east-1a"},
    {"InstanceType": "c5.large", "LocationType": "availability-zone", "Location": "us-east-1c"},
    {"InstanceType": "c5.large", "LocationType": "region", "Location": "us-east-1"},
]
ZONE_IDS = {"us-east-1a": "use1-az6", "us-east-1b": "use1-az1", "us-east-1c": "use1-az2"}
ON_DEMAND = {"m5.large": 0.096, "m5.xlarge": 0.192, "c5.large": 0.085}
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def spot_history() -> list[dict[str, Any]]:
    def entry(name: str, zone: str, price: str, minute: int, product: str = "Linux/UNIX") -> dict[str, Any]:
        return {
            "AvailabilityZone": zone,
            "InstanceType": name,
            "ProductDescription": product,
            "SpotPrice": price,
            "Timestamp": T0.replace(minute=minute),
        }

    return [
        entry("m5.large", "us-east-1a", "0.050", 0),
        entry("m5.large", "us-east-1a", "0.040", 30),  # newer: wins
        entry("m5.large", "us-east-1a", "0.030", 10),
        entry("m5.large", "us-east-1b", "0.035", 5),
        entry("m5.large", "us-east-1b", "0.001", 50, product="Windows"),
        entry("m5.xlarge", "us-east-1a", "0.070", 0),
    ]


def catalog(**kwargs: Any) -> InstanceTypeCatalog:
    defaults: dict[str, Any] = {
        "region": "us-east-1",
        "zone_ids": ZONE_IDS,
        "on_demand_prices": ON_DEMAND,
        "spot_prices": latest_spot_prices(spot_history()),
    }
    defaults.update(kwargs)
    infos = [ec2_item("m5.large"), ec2_item("m5.xlarge", 4, 16384), ec2_item("c5.large", 2, 4096)]
    return build_catalog(infos, offered_zones_from_items(TYPE_OFFERINGS), **defaults)


def test_offered_zones_ignore_non_zone_locations() -> None:
    zones = offered_zones_from_items(TYPE_OFFERINGS)
    assert zones == {
        "m5.large": ["us-east-1a", "us-east-1b", "us-east-1c"],
        "m5.xlarge": ["us-east-1a"],
        "c5.large": ["us-east-1c"],
    }


def test_latest_spot_price_per_type_and_zone_linux_only() -> None:
    prices = latest_spot_prices(spot_history())
    assert prices == {
        ("m5.large", "us-east-1a"): 0.040,
        ("m5.large", "us-east-1b"): 0.035,
        ("m5.xlarge", "us-east-1a"): 0.070,
    }


def test_latest_spot_price_accepts_rfc3339_strings() -> None:
    history = [
        {
            "AvailabilityZone": "z",
            "InstanceType": "t",
            "SpotPrice": "1.0",
            "Timestamp": "2026-01-01T00:00:00Z",
        },
        {
            "AvailabilityZone": "z",
            "InstanceType": "t",
            "SpotPrice": "2.0",
            "Timestamp": "2026-01-01T00:05:00Z",
        },
    ]
    assert latest_spot_prices(history) == {("t", "z"): 2.0}


def test_offerings_are_zone_times_capacity_type_with_zone_ids() -> None:
    offerings = catalog().offerings("m5.large")
    assert [(o.zone, o.capacity_type, o.price, o.zone_id) for o in offerings] == [
        ("us-east-1a", "on-demand", 0.096, "use1-az6"),
        ("us-east-1a", "spot", 0.040, "use1-az6"),
        ("us-east-1b", "on-demand", 0.096, "use1-az1"),
        ("us-east-1b", "spot", 0.035, "use1-az1"),
        # No spot price in us-east-1c (the Windows price does not count): no spot offering there.
        ("us-east-1c", "on-demand", 0.096, "use1-az2"),
    ]
    assert all(o.available for o in offerings)


def test_offerings_filtered_by_zone() -> None:
    cat = catalog(zones=["us-east-1b", "us-east-1c"])
    assert {o.zone for o in cat.offerings("m5.large")} == {"us-east-1b", "us-east-1c"}
    # m5.xlarge is only offered in us-east-1a, so it has nothing left and is dropped.
    assert cat.get("m5.xlarge") is None
    assert "m5.xlarge" in catalog(zones=["us-east-1b"], keep_types_without_offerings=True)


def test_no_spot_price_means_no_spot_offering() -> None:
    offerings = catalog().offerings("c5.large")
    assert [(o.zone, o.capacity_type) for o in offerings] == [("us-east-1c", "on-demand")]


def test_no_on_demand_price_means_no_on_demand_offering() -> None:
    offerings = catalog(on_demand_prices={"m5.xlarge": 0.192}).offerings("m5.large")
    assert {o.capacity_type for o in offerings} == {"spot"}


def test_spot_needs_the_spot_usage_class() -> None:
    offerings = build_offerings(
        "m5.large",
        ["on-demand"],
        ["us-east-1a"],
        on_demand_price=0.096,
        spot_prices={("m5.large", "us-east-1a"): 0.04},
    )
    assert [o.capacity_type for o in offerings] == ["on-demand"]


def test_offering_labels() -> None:
    offering = Offering("us-east-1a", "spot", 0.04, True, zone_id="use1-az6")
    assert offering.labels() == {wk.ZONE: "us-east-1a", wk.CAPACITY_TYPE: "spot", wk.ZONE_ID: "use1-az6"}
    reserved = Offering("us-east-1a", "reserved", 0.0, True, reservation_id="cr-123")
    assert reserved.labels()[wk.CAPACITY_RESERVATION_ID] == "cr-123"


def test_catalog_lookup() -> None:
    cat = catalog()
    assert cat.names() == ["c5.large", "m5.large", "m5.xlarge"]
    assert [it.name for it in cat.all()] == cat.names()
    assert len(cat) == 3
    assert cat["m5.large"].allocatable["pods"] == 29
    assert cat.get("nope") is None
    assert cat.offerings("nope") == []
    assert cat.zones() == ["us-east-1a", "us-east-1b", "us-east-1c"]
    assert cat["m5.large"].labels[wk.REGION] == "us-east-1"


def test_cheapest_offering_honours_filters() -> None:
    cat = catalog()
    best = cat.cheapest_offering("m5.large")
    assert best is not None
    assert (best.zone, best.capacity_type, best.price) == ("us-east-1b", "spot", 0.035)
    on_demand = cat.cheapest_offering("m5.large", capacity_types={"on-demand"}, zones={"us-east-1c"})
    assert on_demand is not None
    assert (on_demand.zone, on_demand.price) == ("us-east-1c", 0.096)
    assert cat.cheapest_offering("c5.large", capacity_types={"spot"}) is None


def test_cheapest_across_types() -> None:
    cat = catalog()
    found = cat.cheapest()
    assert found is not None
    assert (found[0].name, found[1].price) == ("m5.large", 0.035)
    found = cat.cheapest(["m5.xlarge", "c5.large"], capacity_types={"on-demand"})
    assert found is not None
    assert (found[0].name, found[1].price) == ("c5.large", 0.085)


def test_unavailable_offerings_expire_after_the_ttl() -> None:
    clock = ManualClock(T0)
    unavailable = InMemoryUnavailableOfferings(clock)
    cat = catalog(unavailable=unavailable)
    unavailable.mark_unavailable("spot", "m5.large", "us-east-1b")

    marked = [o for o in cat.offerings("m5.large") if not o.available]
    assert [(o.zone, o.capacity_type) for o in marked] == [("us-east-1b", "spot")]
    assert all(
        o.zone != "us-east-1b" or o.capacity_type != "spot" for o in cat.available_offerings("m5.large")
    )
    best = cat.cheapest_offering("m5.large")
    assert best is not None
    assert (best.zone, best.price) == ("us-east-1a", 0.040)

    clock.advance(179)
    assert unavailable.is_unavailable("spot", "m5.large", "us-east-1b")
    clock.advance(2)
    assert not unavailable.is_unavailable("spot", "m5.large", "us-east-1b")
    assert all(o.available for o in cat.offerings("m5.large"))
    assert len(unavailable) == 0


def test_unavailable_capacity_type_and_zone_marks() -> None:
    clock = ManualClock(T0)
    unavailable = InMemoryUnavailableOfferings(clock, ttl_seconds=60)
    unavailable.mark_capacity_type_unavailable("spot")
    assert unavailable.is_unavailable("spot", "anything.large", "us-east-1c")
    assert not unavailable.is_unavailable("on-demand", "anything.large", "us-east-1c")
    unavailable.mark_zone_unavailable("on-demand", "us-east-1a", ttl_seconds=600)
    assert unavailable.is_unavailable("on-demand", "m5.large", "us-east-1a")
    assert not unavailable.is_unavailable("on-demand", "m5.large", "us-east-1b")
    seq = unavailable.seq_num
    clock.advance(61)
    assert not unavailable.is_unavailable("spot", "anything.large", "us-east-1c")
    assert unavailable.is_unavailable("on-demand", "m5.large", "us-east-1a")
    unavailable.clear()
    assert unavailable.seq_num > seq
    assert not unavailable.is_unavailable("on-demand", "m5.large", "us-east-1a")


def test_with_unavailable_shares_types_but_not_the_view() -> None:
    cat = catalog()
    unavailable = InMemoryUnavailableOfferings(ManualClock(T0))
    unavailable.mark_unavailable("on-demand", "c5.large", "us-east-1c")
    other = cat.with_unavailable(unavailable)
    assert other["c5.large"] is cat["c5.large"]
    assert other.available_offerings("c5.large") == []
    assert len(cat.available_offerings("c5.large")) == 1


def test_windows_catalog_drops_arm64_types() -> None:
    arm = ec2_item("m7g.large")
    arm["ProcessorInfo"] = {"SupportedArchitectures": ["arm64"], "Manufacturer": "AWS"}
    zones = {"m7g.large": ["us-east-1a"], "m5.large": ["us-east-1a"]}
    prices = {"m7g.large": 0.08, "m5.large": 0.096}
    linux = build_catalog([arm, ec2_item("m5.large")], zones, region="us-east-1", on_demand_prices=prices)
    windows = build_catalog(
        [arm, ec2_item("m5.large")],
        zones,
        region="us-east-1",
        on_demand_prices=prices,
        ami_family_name="Windows2022",
    )
    assert linux.names() == ["m5.large", "m7g.large"]
    assert windows.names() == ["m5.large"]


def test_spot_discount_model_is_deterministic_and_in_range() -> None:
    model = SpotDiscountModel()
    price = model.price("m5.large", "us-east-1a", 0.096)
    assert price == SpotDiscountModel().price("m5.large", "us-east-1a", 0.096)
    assert 0.60 <= model.discount("m5.large") <= 0.70
    assert model.discount("m5.large") == model.discount("m5.24xlarge")
    assert 0.096 * 0.30 * 0.95 <= price <= 0.096 * 0.40 * 1.05
    flat = SpotDiscountModel(min_discount=0.5, max_discount=0.5, zone_spread=0.0)
    assert flat.price("m5.large", "us-east-1a", 0.1) == pytest.approx(0.05)
