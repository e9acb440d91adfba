"""Karpenter's AWS provider ``pkg/providers/instancetype/suite_test.go`` from Context("Insufficient
Capacity Error Cache") on, in our words: the unavailable-offerings cache, capacity types, the launch
template's block devices and metadata options, offerings, the provider's cache, tenancy, capacity
blocks, AMI and network-interface compatibility, NodeOverlay pricing, and the newer kubelet checks.
Rows: docs/compat/aws-instancetype.md."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from serverless_karpenter.adapters.providers.launchtemplate import _block_device
from serverless_karpenter.adapters.providers.model import Image, ResolvedNodeClass, SecurityGroup, Subnet
from serverless_karpenter.adapters.providers.nodeclass import NodeClassResolver
from serverless_karpenter.api import labels as wk
from serverless_karpenter.api.errors import ManifestError
from serverless_karpenter.api.manifests import parse_manifest
from serverless_karpenter.catalog import (
    InMemoryUnavailableOfferings,
    InstanceTypeInfo,
    bundled_snapshot,
)
from serverless_karpenter.catalog.allocatable import BlockDeviceMapping
from serverless_karpenter.catalog.snapshot import CatalogSnapshot
from serverless_karpenter.catalog.type_info import parse_instance_type_info
from serverless_karpenter.clock import ManualClock, SystemClock
from serverless_karpenter.runtime import CatalogInstanceTypes
from serverless_karpenter.scheduling import resources
from serverless_karpenter_cli.plan import offline_nodeclass

from tests.unit.karpenter_suite_helpers_selection_aws import (
    OD,
    REGION,
    SPOT,
    TENANCY,
    ZONES3,
    Obj,
    all_infos,
    file_catalog,
    k8s_pod,
    nodeclass_manifest,
    nodepool_manifest,
    plan,
    q,
    raw_info,
    req,
    resolve,
    scheduled_on,
    unschedulable,
)

# -- Insufficient Capacity Error Cache ------------------------------------------------------------------
# Karpenter's first attempt launches, hits the ICE and marks the offering; the fallback is what the next
# provisioning pass plans. The launcher marking offerings is covered by tests/integration/
# test_launch_templates.py::test_fleet_errors_mark_offerings_unavailable_and_the_launch_retries_the_rest;
# here the mark is made as the launcher makes it and plan shows the fallback.


def _provider(clock: ManualClock | None = None) -> CatalogInstanceTypes:
    clock = clock or ManualClock()
    return CatalogInstanceTypes(REGION, clock, unavailable=InMemoryUnavailableOfferings(clock))


def _preferring_zone(zone: str) -> Obj:
    term = {"matchExpressions": [{"key": wk.ZONE, "operator": "In", "values": [zone]}]}
    return {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": term}]
        }
    }


def test_ice_falls_back_to_another_type() -> None:
    """InstanceTypeProvider > Insufficient Capacity Error Cache > should launch instances of different type
    on second reconciliation attempt with Insufficient Capacity Error Cache fallback"""
    provider = _provider()
    provider.mark_unavailable(OD, "inf2.24xlarge", "us-east-1a", "InsufficientInstanceCapacity")
    pods = [
        k8s_pod(n, node_selector={wk.ZONE: "us-east-1a"}, extended={resources.AWS_NEURON: "1"})
        for n in ("a", "b")
    ]
    out = plan(pods, provider=provider)
    assert len(out["nodeclaims"]) == 2, out["nodeclaims"]
    for name in ("a", "b"):
        labels = scheduled_on(out, name)
        # Karpenter's fake has only inferentia2 types; the real catalog's cheapest one-device type is inf1.
        assert labels[wk.INSTANCE_ACCELERATOR_NAME].startswith("inferentia")
        assert labels[wk.INSTANCE_TYPE] != "inf2.24xlarge"


@pytest.mark.parametrize("instance_type", ["g5.12xlarge", "p5.48xlarge"])
def test_ice_falls_back_to_another_zone(instance_type: str) -> None:
    """InstanceTypeProvider > Insufficient Capacity Error Cache > should launch instances in a different
    zone on second reconciliation attempt with Insufficient Capacity Error Cache fallback (Karpenter has
    this It twice: g5.12xlarge, and p5.48xlarge)"""
    provider = _provider()
    provider.mark_unavailable(OD, instance_type, "us-east-1a", "InsufficientInstanceCapacity")
    p = k8s_pod(
        node_selector={wk.INSTANCE_TYPE: instance_type},
        extended={resources.NVIDIA_GPU: "1"},
        affinity=_preferring_zone("us-east-1a"),
    )
    labels = scheduled_on(plan([p], provider=provider), "p")
    assert labels[wk.INSTANCE_TYPE] == instance_type and labels[wk.ZONE] == "us-east-1b"


def test_ice_on_the_larger_type_falls_back_to_smaller_ones() -> None:
    """InstanceTypeProvider > Insufficient Capacity Error Cache > should launch smaller instances than
    optimal if larger instance launch results in Insufficient Capacity Error"""
    provider = _provider()
    provider.mark_unavailable(OD, "m5.xlarge", "us-east-1a", "InsufficientInstanceCapacity")
    nodepool = nodepool_manifest(
        [
            req(wk.CAPACITY_TYPE, "In", OD),
            req("beta.kubernetes.io/instance-type", "In", "m5.large", "m5.xlarge"),
        ]
    )
    pods = [k8s_pod(n, cpu="1", node_selector={wk.ZONE: "us-east-1a"}) for n in ("a", "b")]
    out = plan(pods, nodepool=nodepool, provider=provider)
    assert [scheduled_on(out, n)[wk.INSTANCE_TYPE] for n in ("a", "b")] == ["m5.large", "m5.large"]


def test_ice_mark_expires() -> None:
    """InstanceTypeProvider > Insufficient Capacity Error Cache > should launch instances on later
    reconciliation attempt with Insufficient Capacity Error Cache expiry"""
    clock = ManualClock()
    provider = _provider(clock)
    provider.mark_unavailable(OD, "inf2.24xlarge", "us-east-1a", "InsufficientInstanceCapacity")
    p = k8s_pod(node_selector={wk.INSTANCE_TYPE: "inf2.24xlarge"}, extended={resources.AWS_NEURON: "2"})
    assert unschedulable(plan([p], provider=provider, zones=["us-east-1a"])) == {"default/p"}
    clock.advance(3 * 60 + 1)  # the cache's TTL
    out = plan([p], provider=provider, zones=["us-east-1a"])
    assert scheduled_on(out, "p")[wk.INSTANCE_TYPE] == "inf2.24xlarge"


def test_ice_on_spot_falls_back_to_on_demand() -> None:
    """InstanceTypeProvider > Insufficient Capacity Error Cache > should launch on-demand capacity if
    flexible to both spot and on-demand, but spot is unavailable"""
    provider = _provider()
    for i in all_infos():
        provider.mark_unavailable(SPOT, i.name, "us-east-1a", "InsufficientInstanceCapacity")
    nodepool = nodepool_manifest([req(wk.CAPACITY_TYPE, "In", SPOT, OD), req(wk.ZONE, "In", "us-east-1a")])
    labels = scheduled_on(plan([k8s_pod()], nodepool=nodepool, provider=provider), "p")
    assert labels[wk.CAPACITY_TYPE] == OD


def _catalog(provider: CatalogInstanceTypes) -> Any:
    return provider.catalog(ZONES3, None, "AL2023").with_unavailable(provider.unavailable)


def test_types_stay_listed_when_ice_leaves_no_offering() -> None:
    """InstanceTypeProvider > Insufficient Capacity Error Cache > should return all instance types, even
    though with no offerings due to Insufficient Capacity Error"""
    provider = _provider()
    for ct in (OD, SPOT):
        for zone in ZONES3:
            provider.mark_unavailable(ct, "m5.xlarge", zone, "InsufficientInstanceCapacity")
    catalog = _catalog(provider)
    assert "m5.xlarge" in catalog
    assert catalog.offerings("m5.xlarge") and catalog.available_offerings("m5.xlarge") == []


def _available(provider: CatalogInstanceTypes, name: str) -> set[tuple[str, str]]:
    return {(o.zone, o.capacity_type) for o in _catalog(provider).available_offerings(name)}


def test_ice_marks_remove_one_offering() -> None:
    """InstanceTypeProvider > Insufficient Capacity Error Cache > should not return an offering when
    marking an offering as unavailable in the Insufficient Capacity Error Cache"""
    provider = _provider()
    assert len(_available(provider, "m5.large")) == 6
    provider.mark_unavailable(SPOT, "m5.xlarge", "us-east-1a", "test")
    provider.mark_unavailable(SPOT, "m5.xlarge", "us-east-1b", "test")
    assert len(_available(provider, "m5.large")) == 6
    provider.mark_unavailable(SPOT, "m5.large", "us-east-1a", "test")
    assert len(_available(provider, "m5.large")) == 5
    assert ("us-east-1a", SPOT) not in _available(provider, "m5.large")
    provider.mark_unavailable(OD, "m5.large", "us-east-1b", "test")
    provider.mark_unavailable(OD, "m5.large", "us-east-1c", "test")
    left = _available(provider, "m5.large")
    assert len(left) == 3 and not left & {("us-east-1a", SPOT), ("us-east-1b", OD), ("us-east-1c", OD)}


def test_ice_marks_remove_a_capacity_type() -> None:
    """InstanceTypeProvider > Insufficient Capacity Error Cache > should not return a capacity type when
    marking a capacity type as unavailable in the Insufficient Capacity Error Cache"""
    provider = _provider()

    def capacity_types() -> set[str]:
        return {
            o.capacity_type for it in _catalog(provider) for o in _catalog(provider).available_offerings(it)
        }

    assert capacity_types() == {OD, SPOT}
    provider.mark_capacity_type_unavailable(SPOT, "test")
    assert capacity_types() == {OD}


def test_ice_marks_remove_a_zone() -> None:
    """InstanceTypeProvider > Insufficient Capacity Error Cache > should not return a zone when marking a
    zone as unavailable in the Insufficient Capacity Error Cache (its subnets, so every capacity type)"""
    provider = _provider()

    def zones() -> set[str]:
        catalog = _catalog(provider)
        return {o.zone for it in catalog for o in catalog.available_offerings(it)}

    assert zones() == set(ZONES3)
    for ct in (OD, SPOT):
        provider.unavailable.mark_zone_unavailable(ct, "us-east-1a", "test")
    assert zones() == {"us-east-1b", "us-east-1c"}


# -- CapacityType ---------------------------------------------------------------------------------------


def test_capacity_type_defaults_to_on_demand() -> None:
    """InstanceTypeProvider > CapacityType > should default to on-demand"""
    assert scheduled_on(plan([k8s_pod()]), "p")[wk.CAPACITY_TYPE] == OD


def test_spot_when_flexible() -> None:
    """InstanceTypeProvider > CapacityType > should launch spot capacity if flexible to both spot and on
    demand"""
    nodepool = nodepool_manifest([req(wk.CAPACITY_TYPE, "In", SPOT, OD)])
    assert scheduled_on(plan([k8s_pod()], nodepool=nodepool), "p")[wk.CAPACITY_TYPE] == SPOT


def _m5_large_spot_only_in_1a() -> CatalogInstanceTypes:
    history = [
        {
            "AvailabilityZone": "us-east-1a",
            "InstanceType": "m5.large",
            "SpotPrice": "0.004",
            "Timestamp": "2026-01-01T00:00:00Z",
            "ProductDescription": "Linux/UNIX",
        }
    ]
    return file_catalog([raw_info("m5.large")], {"m5.large": ZONES3}, SpotPriceHistory=history)


def test_no_spot_where_the_zone_has_no_spot_price() -> None:
    """InstanceTypeProvider > CapacityType > should fail to launch capacity when there is no zonal
    availability for spot"""
    nodepool = nodepool_manifest(
        [
            req(wk.CAPACITY_TYPE, "In", SPOT),
            req(wk.INSTANCE_TYPE, "In", "m5.large"),
            req(wk.ZONE, "In", "us-east-1b"),
        ]
    )
    out = plan([k8s_pod()], nodepool=nodepool, provider=_m5_large_spot_only_in_1a())
    assert unschedulable(out) == {"default/p"}


def test_spot_where_a_zone_has_a_spot_price() -> None:
    """InstanceTypeProvider > CapacityType > should succeed to launch spot instance when zonal availability
    exists"""
    nodepool = nodepool_manifest([req(wk.CAPACITY_TYPE, "In", SPOT), req(wk.INSTANCE_TYPE, "In", "m5.large")])
    labels = scheduled_on(plan([k8s_pod()], nodepool=nodepool, provider=_m5_large_spot_only_in_1a()), "p")
    assert (
        labels[wk.NODEPOOL] == "default"
        and labels[wk.ZONE] == "us-east-1a"
        and labels[wk.CAPACITY_TYPE] == SPOT
    )


# -- Ephemeral Storage and Metadata Options (the launch template) ---------------------------------------
# The launch template is what NodeClassResolver makes of the EC2NodeClass (then FleetLauncher writes it).
# The resolver's EC2 look-ups are answered in place (one subnet, group and AMI), so the rest of its work
# runs as it does live.


@pytest.fixture
def resolver() -> Any:
    plane = NodeClassResolver(None, None, None, "test", "1.31")
    plane.subnets = lambda terms: [Subnet("subnet-1", "us-east-1a", "use1-az6", 100)]
    plane.security_group_details = lambda terms: [SecurityGroup("sg-1", "nodes")]
    plane.images = lambda terms, family: (family or "AL2023", [Image("ami-1", "node", "amd64")])

    def resolve_spec(**spec: Any) -> ResolvedNodeClass:
        manifest = nodeclass_manifest(
            amiFamily="AL2023", amiSelectorTerms=[{"id": "ami-1"}], instanceProfile="nodes"
        )
        manifest["spec"].update(spec)
        return plane.resolve(manifest)

    return resolve_spec


SNAPSHOT_MAPPING = {
    "deviceName": "/dev/xvda",
    "ebs": {"snapshotID": "snap-xxxxxxxx", "volumeInitializationRate": 100},
}
BDM_CASES = [
    pytest.param("capacity", id="capacity"),
    pytest.param(
        "launch-template",
        id="launch-template",
        marks=pytest.mark.xfail(
            strict=True, reason="deviation: volumeInitializationRate is dropped from the template"
        ),
    ),
]


def _ephemeral_default(resolver: Any, part: str, family: str, device: str) -> None:
    """A mapping with a snapshot and no volumeSize: 20Gi of ephemeral storage, and the template carries
    the mapping as given."""
    mapping = {**SNAPSHOT_MAPPING, "deviceName": device}
    if part == "capacity":
        bdm = [BlockDeviceMapping(device_name=device, volume_size=None)]
        assert resolve("m5.large", family=family, block_device_mappings=bdm).capacity[
            resources.EPHEMERAL_STORAGE
        ] == q("ephemeral-storage", "20Gi")
        return
    resolved = resolver(amiFamily=family, blockDeviceMappings=[mapping])
    assert [_block_device(b) for b in resolved.block_device_mappings] == [
        {"DeviceName": device, "Ebs": {"SnapshotId": "snap-xxxxxxxx", "VolumeInitializationRate": 100}}
    ]


@pytest.mark.parametrize("part", BDM_CASES)
def test_ephemeral_storage_default_for_custom_amis(resolver: Any, part: str) -> None:
    """InstanceTypeProvider > Ephemeral Storage > should default to EBS defaults when volumeSize is not
    defined in blockDeviceMappings for custom AMIs"""
    _ephemeral_default(resolver, part, "Custom", "/dev/xvda")


@pytest.mark.parametrize("part", BDM_CASES)
def test_ephemeral_storage_default_for_al2_root_volume(resolver: Any, part: str) -> None:
    """InstanceTypeProvider > Ephemeral Storage > should default to EBS defaults when volumeSize is not
    defined in blockDeviceMappings for AL2 Root volume"""
    _ephemeral_default(resolver, part, "AL2", "/dev/xvda")


@pytest.mark.parametrize("part", BDM_CASES)
def test_ephemeral_storage_default_for_al2023_root_volume(resolver: Any, part: str) -> None:
    """InstanceTypeProvider > Ephemeral Storage > should default to EBS defaults when volumeSize is not
    defined in blockDeviceMappings for AL2023 Root volume"""
    _ephemeral_default(resolver, part, "AL2023", "/dev/xvda")


@pytest.mark.parametrize("part", BDM_CASES)
def test_ephemeral_storage_default_for_bottlerocket_root_volume(resolver: Any, part: str) -> None:
    """InstanceTypeProvider > Ephemeral Storage > should default to EBS defaults when volumeSize is not
    defined in blockDeviceMappings for Bottlerocket Root volume"""
    _ephemeral_default(resolver, part, "Bottlerocket", "/dev/xvdb")


def test_metadata_options_default(resolver: Any) -> None:
    """InstanceTypeProvider > Metadata Options > should default metadata options on generated launch
    template"""
    assert resolver().metadata_options == {
        "HttpEndpoint": "enabled",
        "HttpProtocolIpv6": "disabled",
        "HttpPutResponseHopLimit": 1,
        "HttpTokens": "required",
    }


def test_metadata_options_from_the_nodeclass(resolver: Any) -> None:
    """InstanceTypeProvider > Metadata Options > should set metadata options on generated launch template
    from nodePool configuration"""
    options = {"httpEndpoint": "disabled", "httpProtocolIPv6": "enabled", "httpPutResponseHopLimit": 1}
    resolved = resolver(metadataOptions={**options, "httpTokens": "optional"})
    assert resolved.metadata_options == {
        "HttpEndpoint": "disabled",
        "HttpProtocolIpv6": "enabled",
        "HttpPutResponseHopLimit": 1,
        "HttpTokens": "optional",
    }


# -- Offerings and the provider's cache -------------------------------------------------------------------


def _list(provider: Any, nodeclass: Obj | None = None, zones: Sequence[str] = ZONES3) -> list[Any]:
    """``InstanceTypesProvider.List`` for an EC2NodeClass: what the scheduler gets."""
    nc = nodeclass or nodeclass_manifest()
    return list(provider.instance_types(offline_nodeclass(nc, zones), nc))


def _signature(types: Sequence[Any]) -> list[tuple[Any, ...]]:
    """What a list of instance types says: names, capacity, allocatable and offerings."""
    return [
        (
            it.name,
            sorted(it.capacity.items()),
            sorted(it.allocatable.items()),
            sorted(map(repr, it.offerings)),
        )
        for it in sorted(types, key=lambda t: t.name)
    ]


def _all_different(lists: Sequence[Sequence[Any]]) -> None:
    signatures = [_signature(types) for types in lists]
    for i, a in enumerate(signatures):
        for j in range(i + 1, len(signatures)):
            assert a != signatures[j], f"lists {i} and {j} are the same"


def test_one_offering_per_instance_pool() -> None:
    """InstanceTypeProvider > Offerings > should create a single offering per instance pool (on a miss and
    on a hit of the cache)"""
    provider = CatalogInstanceTypes(REGION, SystemClock())
    for _ in range(2):
        pools = [(it.name, o.zone, o.capacity_type) for it in _list(provider) for o in it.offerings]
        assert len(pools) == len(set(pools))


def test_cache_returns_the_same_types() -> None:
    """InstanceTypeProvider > Provider Cache > should return the same set of instance types from the cache
    when no changes are made"""
    provider = CatalogInstanceTypes(REGION, SystemClock())
    assert _signature(_list(provider)) == _signature(_list(provider))


def test_kubelet_changes_give_different_types() -> None:
    """InstanceTypeProvider > Provider Cache > changes to kubelet configuration fields should result in a
    different set of instances types"""
    base: dict[str, Any] = {
        "kubeReserved": {"cpu": "1"},
        "systemReserved": {"cpu": "1"},
        "evictionHard": {"memory.available": "5%"},
        "evictionSoft": {"nodefs.available": "10%"},
        "evictionSoftGracePeriod": {"nodefs.available": "1m"},
        "maxPods": 10,
    }
    changes: list[dict[str, Any]] = [
        {"kubeReserved": {"cpu": "20"}},
        {"systemReserved": {"memory": "10Gi"}},
        {"evictionHard": {"memory.available": "52%"}},
        {"maxPods": 20},
    ]
    provider = CatalogInstanceTypes(REGION, SystemClock())
    lists = [_list(provider, nodeclass_manifest(kubelet=base))]
    for change in changes:
        _list(provider, nodeclass_manifest(kubelet={**base, **change}))  # fills the cache
        lists.append(_list(provider, nodeclass_manifest(kubelet={**base, **change})))
    _all_different(lists)


@pytest.mark.xfail(
    strict=True, reason="deviation: instanceStorePolicy and blockDeviceMappings do not reach the catalog"
)
def test_nodeclass_changes_give_different_types() -> None:
    """InstanceTypeProvider > Provider Cache > changes to nodeclass fields should result in a different set
    of instances types (instanceStorePolicy, the alias, and the root volume's flag, size and device)"""
    xvda_20 = {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20G"}, "rootVolume": False}
    changes: list[Obj] = [
        {"instanceStorePolicy": "RAID0"},
        {"amiSelectorTerms": [{"alias": "bottlerocket@latest"}]},
        {
            "blockDeviceMappings": [
                xvda_20,
                {"deviceName": "/dev/sda1", "ebs": {"volumeSize": "10G"}, "rootVolume": True},
            ]
        },
        {
            "blockDeviceMappings": [
                {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "15G"}, "rootVolume": False}
            ]
        },
        {
            "blockDeviceMappings": [
                {"deviceName": "/dev/yvda", "ebs": {"volumeSize": "25G"}, "rootVolume": True}
            ]
        },
    ]
    provider = CatalogInstanceTypes(REGION, SystemClock())
    lists = [_list(provider, nodeclass_manifest(blockDeviceMappings=[xvda_20]))]
    for change in changes:
        nc = nodeclass_manifest(blockDeviceMappings=[xvda_20])
        nc["spec"].update(change)
        _list(provider, nc)
        lists.append(_list(provider, nc))
    _all_different(lists)


class _Source:
    """A live catalog source whose DescribeInstanceTypes / DescribeInstanceTypeOfferings answers a test
    changes; each refresh makes a new snapshot object, as the live source does."""

    def __init__(self) -> None:
        bundled = bundled_snapshot(REGION)
        self.current = CatalogSnapshot(
            REGION, bundled.zone_ids, bundled.instance_types, dict(bundled.offered_zones)
        )

    def snapshot(self) -> CatalogSnapshot:
        return self.current

    def refresh(
        self, types: Sequence[InstanceTypeInfo] | None = None, offered: Mapping[str, Any] | None = None
    ) -> None:
        old = self.current
        self.current = CatalogSnapshot(
            REGION,
            old.zone_ids,
            tuple(types if types is not None else old.instance_types),
            dict(offered if offered is not None else old.offered_zones),
        )


def _live_provider(source: _Source) -> CatalogInstanceTypes:
    return CatalogInstanceTypes(REGION, SystemClock(), catalog_source=source)


def test_instance_type_info_updates_give_different_types() -> None:
    """InstanceTypeProvider > Provider Cache > updates to the instanceTypeInfo should result in a different
    set of instance types"""
    source = _Source()
    provider = _live_provider(source)
    first = _list(provider)
    source.refresh()  # the same answer again: the same types
    second = _list(provider)
    assert _signature(first) == _signature(second)
    listed = second[0].name
    # One listed type fewer.
    source.refresh(types=[info for info in source.current.instance_types if info.name != listed])
    _all_different([second, _list(provider)])


def test_offering_updates_give_different_types() -> None:
    """InstanceTypeProvider > Provider Cache > updates to the instanceTypeOfferingInfo should result in a
    different set of instance types"""
    source = _Source()
    provider = _live_provider(source)
    first = _list(provider)
    source.refresh()
    second = _list(provider)
    assert _signature(first) == _signature(second)
    offered = dict(source.current.offered_zones)
    missing = next(name for name, zones in offered.items() if "us-east-1c" not in zones)
    offered[missing] = (*offered[missing], "us-east-1c")  # a new offering
    source.refresh(offered=offered)
    _all_different([second, _list(provider)])


def test_ice_changes_only_that_type() -> None:
    """InstanceTypeProvider > Provider Cache > returning an ICE error only results in a cache miss for that
    instance type"""
    provider = _provider()
    before = {it.name: it for it in _list(provider)}
    provider.mark_unavailable(SPOT, "m5.xlarge", "us-east-1a", "test")
    after = {it.name: it for it in _list(provider)}
    assert after.keys() == before.keys()
    for name, it in after.items():
        if name == "m5.xlarge":
            assert it.offerings != before[name].offerings
        else:
            assert _signature([it]) == _signature([before[name]]), name


def test_ice_on_a_capacity_type_or_zone_changes_every_type() -> None:
    """InstanceTypeProvider > Provider Cache > returning an ICE error for capacity type results in a cache
    miss for every instance type (and then a zone's)"""
    provider = _provider()
    first = _list(provider)
    provider.mark_capacity_type_unavailable(SPOT, "test")
    second = _list(provider)
    assert {it.name for it in second} == {it.name for it in first}
    assert not any(o.capacity_type == SPOT for it in second for o in it.offerings)
    for ct in (OD, SPOT):
        provider.unavailable.mark_zone_unavailable(ct, "us-east-1a", "test")
    third = _list(provider)
    assert not any(o.zone == "us-east-1a" for it in third for o in it.offerings)


# -- Tenancy ----------------------------------------------------------------------------------------------

NO_TENANCY = pytest.mark.xfail(strict=True, reason="deviation: no karpenter.k8s.aws/instance-tenancy label")


@NO_TENANCY
def test_default_tenancy_without_a_requirement() -> None:
    """InstanceTypeProvider > Tenancy > Should use default tenancy when no requirement is given for tenancy"""
    assert scheduled_on(plan([k8s_pod()]), "p").get(TENANCY) == "default"


@NO_TENANCY
def test_default_tenancy_when_both_are_allowed() -> None:
    """InstanceTypeProvider > Tenancy > Should use default tenancy if tenancy requirement specifies both
    default and dedicated tenancies"""
    nodepool = nodepool_manifest([req(TENANCY, "In", "default", "dedicated")])
    assert scheduled_on(plan([k8s_pod()], nodepool=nodepool), "p").get(TENANCY) == "default"


@NO_TENANCY
def test_default_tenancy_when_required() -> None:
    """InstanceTypeProvider > Tenancy > Should launch with default tenancy when required"""
    out = plan([k8s_pod(node_selector={TENANCY: "default"})])
    assert scheduled_on(out, "p").get(TENANCY) == "default"


@NO_TENANCY
def test_dedicated_tenancy_when_required() -> None:
    """InstanceTypeProvider > Tenancy > Should launch with dedicated tenancy when required"""
    out = plan([k8s_pod(node_selector={TENANCY: "dedicated"})])
    assert scheduled_on(out, "p").get(TENANCY) == "dedicated"


@pytest.mark.parametrize(
    ("nodepool_tenancy", "pod_tenancy"),
    [("dedicated", "default"), ("default", "dedicated")],
    ids=["dedicated np", "default np"],
)
def test_no_tenancy_violations(nodepool_tenancy: str, pod_tenancy: str) -> None:
    """InstanceTypeProvider > Tenancy > does not allow tenancy violations"""
    nodepool = nodepool_manifest([req(TENANCY, "In", nodepool_tenancy)])
    out = plan([k8s_pod(node_selector={TENANCY: pod_tenancy})], nodepool=nodepool)
    assert unschedulable(out) == {"default/p"}


# -- Capacity Blocks, AMI and network interface compatibility --------------------------------------------


@pytest.mark.xfail(
    strict=True, reason="deviation: no reserved offerings from the EC2NodeClass's capacity reservations"
)
@pytest.mark.parametrize(
    "state",
    ["active", "expiring"],
    ids=["when the capacity block is active", "when the capacity block is expiring"],
)
def test_capacity_block_offering(state: str) -> None:
    """InstanceTypeProvider > Capacity Blocks > should create an offering for a capacity block: one
    reserved offering in the block's zone with its id and type, available unless expiring."""
    nc = nodeclass_manifest()
    nc["status"] = {
        "capacityReservations": [
            {
                "availabilityZone": "us-east-1a",
                "id": "cr-123",
                "instanceType": "c6g.large",
                "reservationType": "capacity-block",
                "state": state,
            }
        ]
    }
    [c6g] = [it for it in _list(CatalogInstanceTypes(REGION, SystemClock()), nc) if it.name == "c6g.large"]
    reserved = [o for o in c6g.offerings if o.capacity_type == wk.CAPACITY_TYPE_RESERVED]
    assert len(reserved) == 1
    assert reserved[0].zone == "us-east-1a" and reserved[0].reservation_id == "cr-123"
    assert reserved[0].available == (state != "expiring")


@pytest.mark.parametrize(
    ("alias", "available"),
    [
        pytest.param("al2023@latest", False, id="when AMI is AL2023"),
        pytest.param("bottlerocket@latest", True, id="when AMI is BottleRocket"),
    ],
)
def test_a1_availability_follows_the_ami(alias: str, available: bool) -> None:
    """InstanceTypeProvider > Instance Type and NodeClass Compatibility > AMI Compatibility > should mark
    availability of a1 instance type offerings based on AMI"""
    nc = nodeclass_manifest(amiSelectorTerms=[{"alias": alias}])
    a1 = [it for it in _list(CatalogInstanceTypes(REGION, SystemClock()), nc) if it.name == "a1.medium"]
    assert bool(a1 and any(o.available for o in a1[0].offerings)) == available


EFA_ON_CARD_0 = [
    {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
    {"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "efa-only"},
]


def test_network_interfaces_a_type_supports_keep_its_offerings() -> None:
    """InstanceTypeProvider > Instance Type and NodeClass Compatibility > Network Interfaces > should mark
    instance type offering as available when it supports network interface configuration (passes
    trivially here: spec.networkInterfaces is not read)"""
    provider = CatalogInstanceTypes(REGION, SystemClock())

    def p5_available(nc: Obj) -> int:
        return sum(
            o.available for it in _list(provider, nc) if it.name == "p5.48xlarge" for o in it.offerings
        )

    assert p5_available(nodeclass_manifest()) == p5_available(
        nodeclass_manifest(networkInterfaces=EFA_ON_CARD_0)
    )


@pytest.mark.xfail(strict=True, reason="deviation: spec.networkInterfaces is not read")
def test_network_interfaces_a_type_cannot_hold_make_it_unavailable() -> None:
    """InstanceTypeProvider > Instance Type and NodeClass Compatibility > Network Interfaces > should mark
    instance type offering as unavailable when it does not support network interface configuration"""
    interfaces = EFA_ON_CARD_0 + [
        {"networkCardIndex": card, "deviceIndex": 0, "interfaceType": "efa-only"} for card in range(1, 5)
    ]
    nc = nodeclass_manifest(networkInterfaces=interfaces)
    m6idn = [
        it for it in _list(CatalogInstanceTypes(REGION, SystemClock()), nc) if it.name == "m6idn.32xlarge"
    ]
    assert not m6idn or not any(o.available for o in m6idn[0].offerings)


def _m6idn_pods(interfaces: list[Obj]) -> int:
    nc = nodeclass_manifest(networkInterfaces=interfaces)
    [m6idn] = [
        it for it in _list(CatalogInstanceTypes(REGION, SystemClock()), nc) if it.name == "m6idn.32xlarge"
    ]
    return int(m6idn.capacity[resources.PODS])


def test_max_pods_without_efa_only_interfaces_on_card_0() -> None:
    """InstanceTypeProvider > Network Interfaces > should calculate max pods according when no EFA-only
    interfaces used on NC 0: 8 ENIs x 49 + 2 = 394 (passes trivially here: spec.networkInterfaces is not
    read)"""
    interfaces = [
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
        {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"},
    ]
    assert _m6idn_pods(interfaces) == 394


@pytest.mark.xfail(strict=True, reason="deviation: spec.networkInterfaces is not read")
def test_max_pods_with_an_efa_only_interface_on_card_0() -> None:
    """InstanceTypeProvider > Network Interfaces > should calculate max pods according to EFA-only
    interfaces used: (8 - 1) x 49 + 2 = 345"""
    assert _m6idn_pods(EFA_ON_CARD_0) == 345


# -- NodeOverlay preview pricing ----------------------------------------------------------------------


class _NoPrices:
    """A price source that knows no price (a preview type)."""

    def on_demand_prices(self) -> Mapping[str, float]:
        return {}

    def spot_prices(self) -> dict[tuple[str, str], float]:
        return {}


def _preview_types(overlays: list[Obj]) -> list[Any]:
    """The types of a catalog holding only an unpriced preview type (p5e.48xlarge as Karpenter's test
    describes it), with these NodeOverlays."""
    preview = parse_instance_type_info(
        {
            "InstanceType": "p5e.48xlarge",
            "SupportedUsageClasses": ["on-demand", "spot"],
            "BareMetal": False,
            "Hypervisor": "nitro",
            "ProcessorInfo": {"Manufacturer": "Intel", "SupportedArchitectures": ["x86_64"]},
            "VCpuInfo": {"DefaultCores": 192, "DefaultVCpus": 192},
            "MemoryInfo": {"SizeInMiB": 2048000},
            "NetworkInfo": {
                "MaximumNetworkInterfaces": 15,
                "Ipv4AddressesPerInterface": 50,
                "DefaultNetworkCardIndex": 0,
                "NetworkCards": [{"NetworkCardIndex": 0, "MaximumNetworkInterfaces": 15}],
            },
        }
    )
    source = _Source()
    source.refresh(types=[preview], offered={"p5e.48xlarge": ("us-east-1a", "us-east-1b")})
    provider = CatalogInstanceTypes(
        REGION,
        SystemClock(),
        catalog_source=source,
        prices=_NoPrices(),
        overlays=lambda: overlays,
    )
    return [it for it in _list(provider) if it.name == "p5e.48xlarge"]


@pytest.mark.xfail(
    strict=True, reason="deviation: an overlay price cannot make an unpriced type's offerings available"
)
def test_overlay_price_makes_an_unpriced_type_available() -> None:
    """InstanceTypeProvider > NodeOverlay Preview Instance Pricing > should mark offerings as available when
    a NodeOverlay defines a price for an unpriced instance type"""
    overlay = {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": "preview-price"},
        "spec": {"price": "98.32", "requirements": [req(wk.INSTANCE_TYPE, "In", "p5e.48xlarge")]},
    }
    preview = _preview_types([overlay])
    assert preview and any(o.available for o in preview[0].offerings)


def test_unpriced_type_without_an_overlay_is_unavailable() -> None:
    """InstanceTypeProvider > NodeOverlay Preview Instance Pricing > should not mark offerings as available
    for unpriced instance types without a NodeOverlay (we leave the type out of the list altogether)"""
    assert not any(o.available for it in _preview_types([]) for o in it.offerings)


# -- Newer than v1.14: an EC2NodeClass whose kubelet block cannot be read is refused ---------------------


def test_undecodable_kubelet_is_refused() -> None:
    """InstanceTypeProvider > Undecodable Kubelet Configuration > should fail List rather than resolve
    instance types from defaults (newer than v1.14): we refuse the EC2NodeClass at validation, so no
    instance type is resolved from defaults."""
    with pytest.raises(ManifestError, match=r"spec\.kubelet\.clusterDNS"):
        parse_manifest(nodeclass_manifest(kubelet={"clusterDNS": "10.0.0.10"}))


def test_corrected_kubelet_resolves() -> None:
    """InstanceTypeProvider > Undecodable Kubelet Configuration > should resolve normally once the
    configuration is corrected (newer than v1.14)"""
    nc = nodeclass_manifest(kubelet={"clusterDNS": ["10.0.0.10"]})
    parse_manifest(nc)
    assert _list(CatalogInstanceTypes(REGION, SystemClock()), nc)


@pytest.mark.parametrize(
    "expression",
    ["0 - 1", f"{2**31 - 1} + 1", "1 / (vcpus - vcpus)"],
    ids=["a negative result", "a result above math.MaxInt32", "a runtime evaluation error"],
)
def test_unresolvable_max_pods_expression_is_refused(expression: str) -> None:
    """InstanceTypeProvider > Resolution Failures > should fail resolution when the maxPods expression
    can't be resolved (newer than v1.14): we take no expressions, so every one is refused."""
    with pytest.raises(ManifestError, match=r"spec\.kubelet\.maxPods"):
        parse_manifest(nodeclass_manifest(kubelet={"maxPods": expression}))
