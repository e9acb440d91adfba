"""Allocatable against Karpenter's published figures (karpenter.sh "Instance Types" reference, AL2023).

Expected numbers are copied from that page, not derived from our formula. The inputs are the
``DescribeInstanceTypes`` items of the bundled snapshot (moto's EC2 data), plus one full item inline.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from serverless_karpenter.catalog import (
    BlockDeviceMapping,
    KubeletConfig,
    ProviderOptions,
    ami_family,
    compute_allocatable,
    eni_limited_pods,
    parse_instance_type_info,
    vpc_limits_for,
)
from serverless_karpenter.catalog._data import read_package_json
from serverless_karpenter.scheduling.resources import parse, parse_list

MIB = 1 << 20
GIB = 1 << 30

# A complete DescribeInstanceTypes item, as boto3 returns it.
C6A_2XLARGE: dict[str, Any] = {
    "InstanceType": "c6a.2xlarge",
    "CurrentGeneration": True,
    "FreeTierEligible": False,
    "SupportedUsageClasses": ["on-demand", "spot"],
    "SupportedRootDeviceTypes": ["ebs"],
    "SupportedVirtualizationTypes": ["hvm"],
    "BareMetal": False,
    "Hypervisor": "nitro",
    "ProcessorInfo": {
        "SupportedArchitectures": ["x86_64"],
        "SustainedClockSpeedInGhz": 3.6,
        "Manufacturer": "AMD",
        "SupportedFeatures": ["amd-sev-snp"],
    },
    "VCpuInfo": {
        "DefaultVCpus": 8,
        "DefaultCores": 4,
        "DefaultThreadsPerCore": 2,
        "ValidCores": [1, 2, 3, 4],
        "ValidThreadsPerCore": [1, 2],
    },
    "MemoryInfo": {"SizeInMiB": 16384},
    "InstanceStorageSupported": False,
    "EbsInfo": {
        "EbsOptimizedSupport": "default",
        "EncryptionSupport": "supported",
        "EbsOptimizedInfo": {
            "BaselineBandwidthInMbps": 2500,
            "BaselineThroughputInMBps": 312.5,
            "BaselineIops": 12000,
            "MaximumBandwidthInMbps": 10000,
            "MaximumThroughputInMBps": 1250.0,
            "MaximumIops": 40000,
        },
        "NvmeSupport": "required",
    },
    "NetworkInfo": {
        "NetworkPerformance": "Up to 12.5 Gigabit",
        "MaximumNetworkInterfaces": 4,
        "MaximumNetworkCards": 1,
        "DefaultNetworkCardIndex": 0,
        "NetworkCards": [
            {
                "NetworkCardIndex": 0,
                "NetworkPerformance": "Up to 12.5 Gigabit",
                "MaximumNetworkInterfaces": 4,
                "BaselineBandwidthInGbps": 3.125,
                "PeakBandwidthInGbps": 12.5,
            }
        ],
        "Ipv4AddressesPerInterface": 15,
        "Ipv6AddressesPerInterface": 15,
        "Ipv6Supported": True,
        "EnaSupport": "required",
        "EfaSupported": False,
        "EncryptionInTransitSupported": True,
        "EnaSrdSupported": False,
    },
    "PlacementGroupInfo": {"SupportedStrategies": ["cluster", "partition", "spread"]},
    "HibernationSupported": True,
    "BurstablePerformanceSupported": False,
    "DedicatedHostsSupported": True,
    "AutoRecoverySupported": True,
    "SupportedBootModes": ["legacy-bios", "uefi"],
    "NitroEnclavesSupport": "supported",
    "NitroTpmSupport": "supported",
    "NitroTpmInfo": {"SupportedVersions": ["2.0"]},
}


@functools.cache
def _snapshot_items() -> dict[str, dict[str, Any]]:
    raw = read_package_json("instance-types-us-east-1.json")
    return {item["InstanceType"]: item for item in raw["instance_types"]}


def item(name: str) -> dict[str, Any]:
    return _snapshot_items()[name]


def test_c6a_2xlarge_under_al2023_defaults_matches_karpenter() -> None:
    allocation = compute_allocatable(C6A_2XLARGE, None, "AL2023")
    assert allocation.allocatable["cpu"] == 7910
    assert allocation.allocatable["memory"] == 14162 * MIB
    assert allocation.allocatable["pods"] == 58
    assert allocation.allocatable["vpc.amazonaws.com/pod-eni"] == 38
    assert allocation.allocatable["ephemeral-storage"] == 17 * GIB


def test_c6a_2xlarge_capacity_and_overhead_parts() -> None:
    allocation = compute_allocatable(C6A_2XLARGE)
    # 16384Mi less ceil(7.5%) = 1229Mi of VM overhead.
    assert allocation.capacity["memory"] == 15155 * MIB
    assert allocation.capacity["cpu"] == 8000
    assert allocation.overhead.kube_reserved == {"cpu": 90, "memory": 893 * MIB, "ephemeral-storage": GIB}
    assert allocation.overhead.system_reserved == {}
    assert allocation.overhead.eviction_threshold == {"memory": 100 * MIB, "ephemeral-storage": 2 * GIB}


# Karpenter docs, "Resources" tables (zero-valued resources are not listed there, nor kept by us).
PUBLISHED = {
    "m5.large": {
        "cpu": "1930m",
        "ephemeral-storage": "17Gi",
        "memory": "6903Mi",
        "pods": "29",
        "vpc.amazonaws.com/pod-eni": "9",
    },
    "c5.xlarge": {
        "cpu": "3920m",
        "ephemeral-storage": "17Gi",
        "memory": "6584Mi",
        "pods": "58",
        "vpc.amazonaws.com/pod-eni": "18",
    },
    "t3.medium": {"cpu": "1930m", "ephemeral-storage": "17Gi", "memory": "3246Mi", "pods": "17"},
    "m7g.large": {
        "cpu": "1930m",
        "ephemeral-storage": "17Gi",
        "memory": "6844Mi",
        "pods": "29",
        "vpc.amazonaws.com/pod-eni": "9",
    },
    "g5.xlarge": {
        "cpu": "3920m",
        "ephemeral-storage": "17Gi",
        "memory": "14162Mi",
        "nvidia.com/gpu": "1",
        "pods": "58",
        "vpc.amazonaws.com/pod-eni": "4",
    },
    "c6a.2xlarge": {
        "cpu": "7910m",
        "ephemeral-storage": "17Gi",
        "memory": "14162Mi",
        "pods": "58",
        "vpc.amazonaws.com/pod-eni": "38",
    },
    "a1.medium": {
        "cpu": "940m",
        "ephemeral-storage": "17Gi",
        "memory": "1392Mi",
        "pods": "8",
        "vpc.amazonaws.com/pod-eni": "10",
    },
    "t4g.nano": {"cpu": "1930m", "ephemeral-storage": "17Gi", "memory": "15Mi", "pods": "4"},
    "inf2.xlarge": {
        "aws.amazon.com/neuron": "1",
        "cpu": "3920m",
        "ephemeral-storage": "17Gi",
        "memory": "14162Mi",
        "pods": "58",
        "vpc.amazonaws.com/pod-eni": "18",
    },
    "g5.48xlarge": {
        "cpu": "191450m",
        "ephemeral-storage": "17Gi",
        "memory": "723299Mi",
        "nvidia.com/gpu": "8",
        "pods": "345",
        "vpc.amazonaws.com/efa": "1",
        "vpc.amazonaws.com/pod-eni": "115",
    },
    # Only the default network card counts for pods: 15 interfaces of this type's 15, not all cards.
    "i4i.24xlarge": {
        "cpu": "95690m",
        "ephemeral-storage": "17Gi",
        "memory": "722287Mi",
        "pods": "437",
        "vpc.amazonaws.com/pod-eni": "105",
    },
    "trn1.32xlarge": {
        "aws.amazon.com/neuron": "16",
        "cpu": "127610m",
        "ephemeral-storage": "17Gi",
        "memory": "481894Mi",
        "pods": "247",
        "vpc.amazonaws.com/efa": "8",
        "vpc.amazonaws.com/pod-eni": "82",
    },
}

# Published tables predate the neuroncore resource; it is the only resource we add to theirs.
NEWER_RESOURCES = {"aws.amazon.com/neuroncore"}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_allocatable_matches_karpenter_docs(name: str) -> None:
    allocatable = compute_allocatable(item(name), None, "AL2023").allocatable
    expected = parse_list(PUBLISHED[name])
    assert {k: v for k, v in allocatable.items() if k not in NEWER_RESOURCES} == expected


def test_neuron_cores_are_devices_times_cores_per_device() -> None:
    assert compute_allocatable(item("trn1.32xlarge")).capacity["aws.amazon.com/neuroncore"] == 32


def test_max_pods_replaces_eni_limit_but_al2023_kube_reserved_memory_stays_eni_based() -> None:
    allocation = compute_allocatable(C6A_2XLARGE, KubeletConfig(max_pods=110), "AL2023")
    assert allocation.capacity["pods"] == 110
    assert allocation.overhead.kube_reserved["memory"] == (11 * 58 + 255) * MIB


def test_bottlerocket_reserves_memory_for_the_configured_max_pods() -> None:
    allocation = compute_allocatable(C6A_2XLARGE, KubeletConfig(max_pods=110), "Bottlerocket")
    assert allocation.overhead.kube_reserved["memory"] == (11 * 110 + 255) * MIB


def test_pods_per_core_caps_pods() -> None:
    assert compute_allocatable(C6A_2XLARGE, KubeletConfig(pods_per_core=4)).capacity["pods"] == 32
    assert compute_allocatable(C6A_2XLARGE, KubeletConfig(pods_per_core=10)).capacity["pods"] == 58
    both = KubeletConfig(max_pods=20, pods_per_core=4)
    assert compute_allocatable(C6A_2XLARGE, both).capacity["pods"] == 20


def test_bottlerocket_ignores_pods_per_core() -> None:
    allocation = compute_allocatable(C6A_2XLARGE, KubeletConfig(pods_per_core=4), "Bottlerocket")
    assert allocation.capacity["pods"] == 58


def test_kube_and_system_reserved_override_the_defaults() -> None:
    kubelet = KubeletConfig(kube_reserved={"cpu": "500m"}, system_reserved={"memory": "1Gi", "cpu": "100m"})
    allocation = compute_allocatable(C6A_2XLARGE, kubelet)
    assert allocation.overhead.kube_reserved["cpu"] == 500
    # The default kube-reserved memory stays; only the named resources are replaced.
    assert allocation.overhead.kube_reserved["memory"] == 893 * MIB
    assert allocation.allocatable["cpu"] == 8000 - 500 - 100
    assert allocation.allocatable["memory"] == (14162 - 1024) * MIB


def test_eviction_hard_percentages_are_of_capacity_and_100_percent_disables() -> None:
    kubelet = KubeletConfig(eviction_hard={"memory.available": "5%", "nodefs.available": "100%"})
    allocation = compute_allocatable(C6A_2XLARGE, kubelet)
    memory_capacity = 15155 * MIB
    assert allocation.overhead.eviction_threshold["memory"] == -(-memory_capacity * 5 // 100)
    assert allocation.overhead.eviction_threshold["ephemeral-storage"] == 0
    assert allocation.allocatable["ephemeral-storage"] == 19 * GIB


def test_eviction_hard_quantity_replaces_default_and_soft_does_not_count() -> None:
    kubelet = KubeletConfig(
        eviction_hard={"memory.available": "500Mi"}, eviction_soft={"memory.available": "2Gi"}
    )
    allocation = compute_allocatable(C6A_2XLARGE, kubelet)
    assert allocation.overhead.eviction_threshold["memory"] == 500 * MIB
    assert allocation.allocatable["memory"] == (14162 + 100 - 500) * MIB


def test_root_volume_mapping_sets_ephemeral_storage() -> None:
    mappings = [
        BlockDeviceMapping(device_name="/dev/xvdb", volume_size="50Gi"),
        BlockDeviceMapping(device_name="/dev/xvda", volume_size="100Gi", root_volume=True),
    ]
    allocation = compute_allocatable(C6A_2XLARGE, block_device_mappings=mappings)
    assert allocation.capacity["ephemeral-storage"] == 100 * GIB
    assert allocation.allocatable["ephemeral-storage"] == 100 * GIB - GIB - 10 * GIB


def test_mapping_of_the_family_ephemeral_device_counts_without_root_flag() -> None:
    mappings = [BlockDeviceMapping(device_name="/dev/xvda", volume_size="80Gi")]
    assert (
        compute_allocatable(C6A_2XLARGE, block_device_mappings=mappings).capacity["ephemeral-storage"]
        == 80 * GIB
    )
    # Bottlerocket keeps pods' data on /dev/xvdb, so /dev/xvda's size does not matter there.
    bottlerocket = compute_allocatable(C6A_2XLARGE, None, "Bottlerocket", block_device_mappings=mappings)
    assert bottlerocket.capacity["ephemeral-storage"] == 20 * GIB


def test_custom_ami_family_uses_the_last_mapping() -> None:
    mappings = [
        BlockDeviceMapping(device_name="/dev/xvda", volume_size="30Gi"),
        BlockDeviceMapping(device_name="/dev/xvdc", volume_size="60Gi"),
    ]
    allocation = compute_allocatable(C6A_2XLARGE, None, "Custom", block_device_mappings=mappings)
    assert allocation.capacity["ephemeral-storage"] == 60 * GIB


def test_raid0_instance_store_gives_the_local_disks_in_decimal_gigabytes() -> None:
    allocation = compute_allocatable(item("g5.xlarge"), instance_store_policy="RAID0")
    assert allocation.capacity["ephemeral-storage"] == 250 * 1000**3
    # Without local disks RAID0 changes nothing.
    assert (
        compute_allocatable(C6A_2XLARGE, instance_store_policy="RAID0").capacity["ephemeral-storage"]
        == 20 * GIB
    )


def test_provider_options_change_vm_overhead_and_reserved_enis() -> None:
    no_overhead = compute_allocatable(C6A_2XLARGE, options=ProviderOptions(vm_memory_overhead_percent=0))
    assert no_overhead.capacity["memory"] == 16384 * MIB
    reserved = compute_allocatable(C6A_2XLARGE, options=ProviderOptions(reserved_enis=1))
    assert reserved.capacity["pods"] == 3 * 14 + 2
    # Kube-reserved memory is sized on the unreserved ENI limit, as in Karpenter.
    assert reserved.overhead.kube_reserved["memory"] == (11 * 58 + 255) * MIB


def test_windows_has_110_pods_bigger_root_volume_and_private_ipv4_addresses() -> None:
    allocation = compute_allocatable(C6A_2XLARGE, None, "Windows2022")
    assert allocation.capacity["pods"] == 110
    assert allocation.capacity["ephemeral-storage"] == 50 * GIB
    assert allocation.capacity["vpc.amazonaws.com/PrivateIPv4Address"] == 14
    assert allocation.overhead.kube_reserved["memory"] == (11 * 110 + 255) * MIB


def test_types_that_cannot_trunk_have_no_pod_eni() -> None:
    limits = vpc_limits_for("t3.medium")
    assert limits is not None
    assert not limits.trunking_compatible
    assert "vpc.amazonaws.com/pod-eni" not in compute_allocatable(item("t3.medium")).capacity


def test_eni_limited_pods_uses_the_default_network_card() -> None:
    info = parse_instance_type_info(item("p4d.24xlarge"))
    assert info.max_network_interfaces > info.default_card_interfaces
    assert eni_limited_pods(info) == info.default_card_interfaces * (info.ipv4_per_interface - 1) + 2
    assert eni_limited_pods(info, reserved_enis=info.default_card_interfaces) == 0


def test_ami_family_accepts_aliases_and_rejects_unknown_names() -> None:
    assert ami_family("al2023@latest").name == "AL2023"
    assert ami_family("bottlerocket@v1.20.0").name == "Bottlerocket"
    with pytest.raises(ValueError, match="unknown AMI family"):
        ami_family("Ubuntu")


def test_kubelet_config_from_spec_and_hashing() -> None:
    spec = {
        "maxPods": 50,
        "podsPerCore": 2,
        "kubeReserved": {"cpu": "200m"},
        "evictionHard": {"memory.available": "1%"},
    }
    kubelet = KubeletConfig.from_spec(spec)
    assert kubelet == KubeletConfig(
        max_pods=50, pods_per_core=2, kube_reserved={"cpu": "200m"}, eviction_hard={"memory.available": "1%"}
    )
    assert hash(kubelet) == hash(KubeletConfig.from_spec(dict(spec)))
    assert kubelet != KubeletConfig(max_pods=50)
    assert parse("cpu", "200m") == compute_allocatable(C6A_2XLARGE, kubelet).overhead.kube_reserved["cpu"]
