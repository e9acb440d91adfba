"""The bundled offline catalog (package data made by benchmarks/make_catalog_snapshot.py)."""

from __future__ import annotations

from importlib import resources

import pytest
from serverless_karpenter.api import labels as wk
from serverless_karpenter.catalog import (
    InMemoryUnavailableOfferings,
    KubeletConfig,
    bundled_on_demand_prices,
    bundled_snapshot,
    bundled_vpc_limits,
    load_bundled_catalog,
)
from serverless_karpenter.clock import ManualClock

MIB = 1 << 20
DATA = resources.files("serverless_karpenter").joinpath("data")


def test_bundled_catalog_loads_hundreds_of_types() -> None:
    catalog = load_bundled_catalog()
    assert len(catalog) >= 400
    assert catalog.region == "us-east-1"
    it = catalog["c6a.2xlarge"]
    assert (it.allocatable["cpu"], it.allocatable["memory"], it.allocatable["pods"]) == (
        7910,
        14162 * MIB,
        58,
    )
    assert it.allocatable["vpc.amazonaws.com/pod-eni"] == 38


def test_every_type_is_priced_linux_and_offered() -> None:
    catalog = load_bundled_catalog()
    prices = bundled_on_demand_prices("us-east-1")
    for it in catalog:
        assert it.name in prices
        assert it.labels[wk.OS] == "linux"
        assert it.arch in ("amd64", "arm64")
        assert catalog.offerings(it), it.name
        assert not it.name.startswith("mac")
    # Xen-era families are not current; Nitro ones moto flags as previous generation are kept.
    assert "m4.large" not in catalog
    assert "c4.large" not in catalog
    assert "m5.large" in catalog
    assert "c5.large" in catalog


def test_on_demand_offerings_carry_the_bundled_price_and_zone_ids() -> None:
    catalog = load_bundled_catalog()
    od = [o for o in catalog.offerings("m5.large") if o.capacity_type == "on-demand"]
    assert od
    assert {o.price for o in od} == {bundled_on_demand_prices()["m5.large"]}
    zone_ids = bundled_snapshot().zone_ids
    assert all(o.zone_id == zone_ids[o.zone] for o in od)


def test_spot_offerings_follow_the_discount_model() -> None:
    catalog = load_bundled_catalog()
    od_price = bundled_on_demand_prices()["m5.large"]
    spot = [o for o in catalog.offerings("m5.large") if o.capacity_type == "spot"]
    assert len(spot) == len({o.zone for o in catalog.offerings("m5.large")})
    for offering in spot:
        assert od_price * 0.30 * 0.95 <= offering.price <= od_price * 0.40 * 1.05
    # Deterministic: a second build gives the same prices.
    again = load_bundled_catalog(kubelet=KubeletConfig())
    assert [o.price for o in again.offerings("m5.large")] == [o.price for o in catalog.offerings("m5.large")]


def test_zone_filter() -> None:
    catalog = load_bundled_catalog(zones=["us-east-1a", "us-east-1b"])
    assert catalog.zones() == ["us-east-1a", "us-east-1b"]
    assert all(o.zone in ("us-east-1a", "us-east-1b") for it in catalog for o in catalog.offerings(it))
    assert len(catalog) < len(load_bundled_catalog())


def test_kubelet_settings_reach_every_type() -> None:
    catalog = load_bundled_catalog(kubelet=KubeletConfig(max_pods=110))
    assert {it.allocatable["pods"] for it in catalog} == {110}


def test_catalog_is_cached_and_unavailable_view_is_per_call() -> None:
    assert load_bundled_catalog() is load_bundled_catalog()
    unavailable = InMemoryUnavailableOfferings(ManualClock())
    unavailable.mark_capacity_type_unavailable("spot")
    viewed = load_bundled_catalog(unavailable=unavailable)
    assert viewed["m5.large"] is load_bundled_catalog()["m5.large"]
    assert {o.capacity_type for o in viewed.available_offerings("m5.large")} == {"on-demand"}
    assert "spot" in {o.capacity_type for o in load_bundled_catalog().available_offerings("m5.large")}


def test_unknown_region_is_refused() -> None:
    with pytest.raises(ValueError, match="no bundled instance type snapshot"):
        load_bundled_catalog("eu-west-9")


def test_package_data_stays_small() -> None:
    for name in ("instance-types-us-east-1.json", "aws-vpc-limits.json", "aws-ondemand-prices.json"):
        assert len(DATA.joinpath(name).read_bytes()) <= 1_500_000, name


def test_vpc_limits_are_bundled() -> None:
    limits = bundled_vpc_limits()
    assert len(limits) > 1000
    c6a = limits["c6a.2xlarge"]
    assert (c6a.interfaces, c6a.ipv4_per_interface, c6a.pod_eni) == (4, 15, 38)
    assert limits["t3.medium"].pod_eni == 0
