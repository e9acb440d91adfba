"""The instance type model: one EC2 type with its capacity, overhead, allocatable and labels.

Labels are the well-known labels Karpenter derives from ``DescribeInstanceTypes`` (``computeRequirements``
in Karpenter's AWS provider). Zone, zone-id and capacity type vary per offering, so they live on
:class:`~serverless_karpenter.catalog.offerings.Offering`, not here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.catalog.allocatable import (
    AL2023,
    DEFAULT_OPTIONS,
    AmiFamily,
    BlockDeviceMapping,
    KubeletConfig,
    Overhead,
    ProviderOptions,
    ami_family,
    compute_allocatable,
)
from serverless_karpenter.catalog.type_info import InstanceTypeInfo, parse_instance_type_info
from serverless_karpenter.catalog.vpc_limits import VpcLimits, vpc_limits_for
from serverless_karpenter.scheduling.resources import ResourceList

# category, an optional "-<n>tb" (u-12tb1), then the generation digits: "m5d.large" -> m, 5.
_INSTANCE_TYPE_SCHEME = re.compile(r"(^[a-z]+)(-[0-9]+tb)?([0-9]+).*\.")
_USAGE_CLASSES = ("on-demand", "spot")


@dataclass(frozen=True, slots=True, eq=False)
class InstanceType:
    """An instance type as the scheduler sees it. Treat the dicts as read-only.

    Equality and hashing are by identity: two catalogs built with different kubelet settings hold
    different objects for the same name.
    """

    name: str
    arch: str
    os: str
    vcpus: int
    memory_mib: int
    bare_metal: bool
    capacity_types: tuple[str, ...]
    capacity: ResourceList
    overhead: Overhead
    allocatable: ResourceList
    labels: dict[str, str]
    info: InstanceTypeInfo

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def size(self) -> str:
        return self.name.split(".", 1)[1] if "." in self.name else ""

    def __repr__(self) -> str:
        return f"InstanceType({self.name})"


def _kebab(value: str) -> str:
    return value.replace(" ", "-").lower()


def compute_labels(info: InstanceTypeInfo, family: AmiFamily, region: str | None = None) -> dict[str, str]:
    """The well-known labels of a node of this type (all but the per-offering ones)."""
    name = info.name
    labels: dict[str, str] = {
        wk.INSTANCE_TYPE: name,
        wk.ARCH: info.arch,
        wk.OS: family.os,
        wk.INSTANCE_CPU: str(info.vcpus),
        wk.INSTANCE_MEMORY: str(info.memory_mib),
        wk.INSTANCE_HYPERVISOR: info.hypervisor,
        wk.INSTANCE_ENCRYPTION_IN_TRANSIT: "true" if info.encryption_in_transit else "false",
    }
    if region:
        labels[wk.REGION] = region
    scheme = _INSTANCE_TYPE_SCHEME.match(name)
    if scheme:
        labels[wk.INSTANCE_CATEGORY] = scheme.group(1)
        labels[wk.INSTANCE_GENERATION] = scheme.group(3)
    parts = name.split(".")
    if len(parts) == 2:
        labels[wk.INSTANCE_FAMILY] = parts[0]
        labels[wk.INSTANCE_SIZE] = parts[1]
    labels[wk.INSTANCE_CAPABILITY_FLEX] = "true" if "-flex" in parts[0] else "false"
    if info.instance_storage_gb is not None and info.instance_storage_nvme != "unsupported":
        labels[wk.INSTANCE_LOCAL_NVME] = str(info.instance_storage_gb)
    bandwidth = info.network_bandwidth_mbps
    if bandwidth is not None:
        labels[wk.INSTANCE_NETWORK_BANDWIDTH] = str(bandwidth)
    if len(info.gpus) == 1:
        gpu = info.gpus[0]
        labels[wk.INSTANCE_GPU_NAME] = _kebab(gpu.name)
        labels[wk.INSTANCE_GPU_MANUFACTURER] = _kebab(gpu.manufacturer)
        labels[wk.INSTANCE_GPU_COUNT] = str(gpu.count)
        labels[wk.INSTANCE_GPU_MEMORY] = str(gpu.memory_mib)
    if len(info.inference_accelerators) == 1 and info.neuron_devices is None:
        accelerator = info.inference_accelerators[0]
        labels[wk.INSTANCE_ACCELERATOR_NAME] = _kebab(accelerator.name)
        labels[wk.INSTANCE_ACCELERATOR_MANUFACTURER] = _kebab(accelerator.manufacturer)
        labels[wk.INSTANCE_ACCELERATOR_COUNT] = str(accelerator.count)
    if info.neuron_devices is not None and len(info.neuron_devices) == 1:
        device = info.neuron_devices[0]
        labels[wk.INSTANCE_ACCELERATOR_NAME] = _kebab(device.name)
        labels[wk.INSTANCE_ACCELERATOR_MANUFACTURER] = "aws"
        labels[wk.INSTANCE_ACCELERATOR_COUNT] = str(device.count)
    if info.cpu_manufacturer is not None:
        labels[wk.INSTANCE_CPU_MANUFACTURER] = _kebab(info.cpu_manufacturer)
    if info.sustained_clock_speed_ghz is not None:
        labels[wk.INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ] = str(round(info.sustained_clock_speed_ghz * 1000))
    if info.ebs_optimized_support == "default" and info.ebs_max_bandwidth_mbps is not None:
        labels[wk.INSTANCE_EBS_BANDWIDTH] = str(info.ebs_max_bandwidth_mbps)
    return labels


def is_supported_by(info: InstanceTypeInfo, family: AmiFamily) -> bool:
    """Whether nodes of this AMI family can run on the type: Windows AMIs exist for amd64 only, and
    AL2023 does not run on a1 (Graviton 1; karpenter-provider-aws's AMI compatibility check)."""
    if info.arch not in ("amd64", "arm64"):
        return False
    if family.name == AL2023.name and info.name.startswith("a1."):
        return False
    return not (family.os == "windows" and info.arch != "amd64")


def build_instance_type(
    instance_type_info: Mapping[str, Any] | InstanceTypeInfo,
    *,
    kubelet: KubeletConfig | None = None,
    ami_family_name: str | AmiFamily = "AL2023",
    region: str | None = None,
    block_device_mappings: Sequence[BlockDeviceMapping] | None = None,
    instance_store_policy: str | None = None,
    options: ProviderOptions = DEFAULT_OPTIONS,
    vpc_limits: VpcLimits | None = None,
) -> InstanceType:
    """An :class:`InstanceType` from one ``DescribeInstanceTypes`` item."""
    info = (
        instance_type_info
        if isinstance(instance_type_info, InstanceTypeInfo)
        else parse_instance_type_info(instance_type_info)
    )
    family = ami_family(ami_family_name)
    allocation = compute_allocatable(
        info,
        kubelet,
        family,
        block_device_mappings=block_device_mappings,
        instance_store_policy=instance_store_policy,
        options=options,
        vpc_limits=vpc_limits if vpc_limits is not None else vpc_limits_for(info.name),
    )
    return InstanceType(
        name=info.name,
        arch=info.arch,
        os=family.os,
        vcpus=info.vcpus,
        memory_mib=info.memory_mib,
        bare_metal=info.bare_metal,
        capacity_types=tuple(c for c in info.usage_classes if c in _USAGE_CLASSES),
        capacity=allocation.capacity,
        overhead=allocation.overhead,
        allocatable=allocation.allocatable,
        labels=compute_labels(info, family, region),
        info=info,
    )
