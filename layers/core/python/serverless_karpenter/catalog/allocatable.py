"""Capacity, overhead and allocatable of an instance type, as Karpenter's AWS provider computes them.

The numbers must match what the kubelet will report, or the solver plans pods onto nodes that cannot
hold them. The rules (Karpenter's ``pkg/providers/instancetype/types.go``):

- cpu capacity is the default vCPU count;
- memory capacity is ``SizeInMiB`` (less 64 MiB of CMA on Graviton) minus the VM overhead,
  ``ceil(bytes x vmMemoryOverheadPercent)`` rounded up to whole MiB;
- pods is kubelet ``maxPods`` if set, else the ENI limit
  ``interfaces_on_default_card x (ipv4_per_interface - 1) + 2`` (110 where the AMI family does not
  size by ENIs), capped at ``podsPerCore x vCPUs``;
- kube-reserved cpu is 6% of the first core, 1% of the second, 0.5% of the next two and 0.25% of the
  rest; memory is ``11 MiB x pods + 255 MiB`` (ENI-limited pods for families that say so) and
  ephemeral-storage 1Gi; ``kubeReserved`` entries replace those;
- the eviction threshold is memory 100Mi and 10% of ephemeral-storage, replaced by ``evictionHard``
  ``memory.available`` / ``nodefs.available`` (a percentage is of capacity; 100% means 0). Karpenter no
  longer lets ``evictionSoft`` reduce allocatable, and neither do we.
- ephemeral-storage is the root volume from the block device mappings, else the AMI family's default
  (20Gi on AL2023), or the instance store's total when ``instanceStorePolicy`` is RAID0.

Resources with a zero count (no GPUs, no pod ENIs, ...) are left out: an absent resource means zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from serverless_karpenter.catalog.type_info import InstanceTypeInfo, parse_instance_type_info
from serverless_karpenter.catalog.vpc_limits import VpcLimits, vpc_limits_for
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.resources import ResourceList

MIB = 1 << 20
GIB = 1 << 30

MEMORY_AVAILABLE = "memory.available"
NODEFS_AVAILABLE = "nodefs.available"

PRIVATE_IPV4_ADDRESS = "vpc.amazonaws.com/PrivateIPv4Address"

DEFAULT_VM_MEMORY_OVERHEAD_PERCENT = 0.075
DEFAULT_VOLUME_SIZE = 20 * GIB
DEFAULT_MAX_PODS = 110
INSTANCE_STORE_POLICY_RAID0 = "RAID0"

_GRAVITON_CMA_MIB = 64
_KUBE_RESERVED_EPHEMERAL_STORAGE = GIB
_EVICTION_MEMORY = 100 * MIB
# (start, end, fraction) of millicores, from Karpenter (itself from Bottlerocket's kube-reserved).
_CPU_RESERVATION_TIERS = ((0, 1000, 0.06), (1000, 2000, 0.01), (2000, 4000, 0.005), (4000, 1 << 31, 0.0025))


@dataclass(frozen=True, slots=True)
class AmiFamily:
    """What an AMI family changes about allocatable (Karpenter's per-family feature flags)."""

    name: str
    os: str
    ephemeral_block_device: str | None
    default_ephemeral_volume_bytes: int
    uses_eni_limited_memory_overhead: bool
    pods_per_core_enabled: bool
    supports_eni_limited_pod_density: bool
    custom: bool = False


AL2023 = AmiFamily("AL2023", "linux", "/dev/xvda", DEFAULT_VOLUME_SIZE, True, True, True)
AL2 = AmiFamily("AL2", "linux", "/dev/xvda", DEFAULT_VOLUME_SIZE, True, True, True)
BOTTLEROCKET = AmiFamily("Bottlerocket", "linux", "/dev/xvdb", DEFAULT_VOLUME_SIZE, False, False, True)
WINDOWS_2019 = AmiFamily("Windows2019", "windows", "/dev/sda1", 50 * GIB, False, True, False)
WINDOWS_2022 = AmiFamily("Windows2022", "windows", "/dev/sda1", 50 * GIB, False, True, False)
WINDOWS_2025 = AmiFamily("Windows2025", "windows", "/dev/sda1", 50 * GIB, False, True, False)
CUSTOM = AmiFamily("Custom", "linux", None, DEFAULT_VOLUME_SIZE, True, True, True, custom=True)

AMI_FAMILIES: Mapping[str, AmiFamily] = {
    f.name.lower(): f for f in (AL2023, AL2, BOTTLEROCKET, WINDOWS_2019, WINDOWS_2022, WINDOWS_2025, CUSTOM)
}


def ami_family(name: str | AmiFamily) -> AmiFamily:
    """The family for ``AL2023``, ``Bottlerocket``, ... or an alias such as ``al2023@latest``."""
    if isinstance(name, AmiFamily):
        return name
    key = name.split("@", 1)[0].strip().lower()
    try:
        return AMI_FAMILIES[key]
    except KeyError:
        raise ValueError(f"unknown AMI family {name!r}; expected one of {sorted(AMI_FAMILIES)}") from None


def _freeze(m: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((m or {}).items()))


@dataclass(frozen=True, slots=True)
class KubeletConfig:
    """The allocatable-relevant part of an EC2NodeClass ``spec.kubelet`` block.

    Defined here, not in ``api/``, so the catalog stands alone; :meth:`from_spec` reads the camelCase
    block as it appears in the manifest.
    """

    max_pods: int | None = None
    pods_per_core: int | None = None
    kube_reserved: Mapping[str, str] = field(default_factory=dict)
    system_reserved: Mapping[str, str] = field(default_factory=dict)
    eviction_hard: Mapping[str, str] = field(default_factory=dict)
    eviction_soft: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> KubeletConfig:
        spec = spec or {}
        return cls(
            max_pods=spec.get("maxPods"),
            pods_per_core=spec.get("podsPerCore"),
            kube_reserved=dict(spec.get("kubeReserved") or {}),
            system_reserved=dict(spec.get("systemReserved") or {}),
            eviction_hard=dict(spec.get("evictionHard") or {}),
            eviction_soft=dict(spec.get("evictionSoft") or {}),
        )

    def _key(self) -> tuple[object, ...]:
        return (
            self.max_pods,
            self.pods_per_core,
            _freeze(self.kube_reserved),
            _freeze(self.system_reserved),
            _freeze(self.eviction_hard),
            _freeze(self.eviction_soft),
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KubeletConfig) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True, slots=True)
class BlockDeviceMapping:
    """One EC2NodeClass ``blockDeviceMappings`` entry, reduced to what sizes ephemeral storage."""

    device_name: str | None = None
    volume_size: str | int | None = None
    root_volume: bool = False


@dataclass(frozen=True, slots=True)
class ProviderOptions:
    """Karpenter controller settings that change allocatable."""

    vm_memory_overhead_percent: float = DEFAULT_VM_MEMORY_OVERHEAD_PERCENT
    reserved_enis: int = 0


DEFAULT_OPTIONS = ProviderOptions()


@dataclass(frozen=True, slots=True)
class Overhead:
    kube_reserved: ResourceList
    system_reserved: ResourceList
    eviction_threshold: ResourceList
    total: ResourceList


@dataclass(frozen=True, slots=True)
class Allocation:
    capacity: ResourceList
    overhead: Overhead
    allocatable: ResourceList


def eni_limited_pods(info: InstanceTypeInfo, reserved_enis: int = 0) -> int:
    """``interfaces x (ipv4_per_interface - 1) + 2``, on the default network card only."""
    usable = max(info.default_card_interfaces - reserved_enis, 0)
    if usable == 0:
        return 0
    return usable * (info.ipv4_per_interface - 1) + 2


def max_pods(
    info: InstanceTypeInfo,
    family: AmiFamily,
    kubelet: KubeletConfig | None = None,
    options: ProviderOptions = DEFAULT_OPTIONS,
) -> int:
    kubelet = kubelet or KubeletConfig()
    if kubelet.max_pods is not None:
        count = int(kubelet.max_pods)
    elif family.supports_eni_limited_pod_density:
        count = eni_limited_pods(info, options.reserved_enis)
    else:
        count = DEFAULT_MAX_PODS
    if kubelet.pods_per_core and kubelet.pods_per_core > 0 and family.pods_per_core_enabled:
        count = min(int(kubelet.pods_per_core) * info.vcpus, count)
    return count


def memory_capacity(info: InstanceTypeInfo, options: ProviderOptions = DEFAULT_OPTIONS) -> int:
    """Bytes of memory the kubelet will see: the EC2 size less Graviton CMA and the VM overhead."""
    size_mib = info.memory_mib
    if info.architectures and info.architectures[0] == "arm64":
        size_mib -= _GRAVITON_CMA_MIB
    # Same float expression as Karpenter so the rounding lands on the same MiB.
    overhead_mib = math.ceil(float(size_mib * MIB) * options.vm_memory_overhead_percent / 1024 / 1024)
    return (size_mib - overhead_mib) * MIB


def ephemeral_storage_capacity(
    info: InstanceTypeInfo,
    family: AmiFamily,
    block_device_mappings: Sequence[BlockDeviceMapping] | None = None,
    instance_store_policy: str | None = None,
) -> int:
    if instance_store_policy == INSTANCE_STORE_POLICY_RAID0 and info.instance_storage_gb is not None:
        return info.instance_storage_gb * 1000**3
    if block_device_mappings:
        for bdm in block_device_mappings:
            if bdm.root_volume and bdm.volume_size is not None:
                return resources.parse(resources.EPHEMERAL_STORAGE, bdm.volume_size)
        if family.custom:
            # A custom AMI's layout is unknown, so Karpenter trusts the last mapping.
            last = block_device_mappings[-1].volume_size
            return DEFAULT_VOLUME_SIZE if last is None else resources.parse(resources.EPHEMERAL_STORAGE, last)
        for bdm in block_device_mappings:
            if bdm.device_name == family.ephemeral_block_device and bdm.volume_size is not None:
                return resources.parse(resources.EPHEMERAL_STORAGE, bdm.volume_size)
    return family.default_ephemeral_volume_bytes


def _kube_reserved_cpu(vcpus: int) -> int:
    millicores = vcpus * 1000
    reserved = 0
    for start, end, fraction in _CPU_RESERVATION_TIERS:
        if millicores >= start:
            span = min(millicores, end) - start
            # Karpenter truncates each tier to whole millicores before adding it.
            reserved += int(float(span) * fraction)
    return reserved


def _eviction_signal(capacity: int, value: str, resource_name: str) -> int:
    if value.endswith("%"):
        percent = float(value.rstrip("%"))
        if percent == 100:  # the kubelet reads 100% as "threshold disabled"
            percent = 0
        return math.ceil(float(capacity) / 100 * percent)
    return resources.parse(resource_name, value)


def compute_overhead(
    info: InstanceTypeInfo,
    family: AmiFamily,
    *,
    memory: int,
    ephemeral_storage: int,
    pods: int,
    kubelet: KubeletConfig | None = None,
) -> Overhead:
    kubelet = kubelet or KubeletConfig()
    reserved_pods = eni_limited_pods(info, 0) if family.uses_eni_limited_memory_overhead else pods
    kube_reserved: ResourceList = {
        resources.CPU: _kube_reserved_cpu(info.vcpus),
        resources.MEMORY: (11 * reserved_pods + 255) * MIB,
        resources.EPHEMERAL_STORAGE: _KUBE_RESERVED_EPHEMERAL_STORAGE,
    }
    kube_reserved.update(resources.parse_list(kubelet.kube_reserved))
    system_reserved = resources.parse_list(kubelet.system_reserved)
    eviction: ResourceList = {
        resources.MEMORY: _EVICTION_MEMORY,
        resources.EPHEMERAL_STORAGE: math.ceil(float(ephemeral_storage) / 100 * 10),
    }
    hard = kubelet.eviction_hard
    if MEMORY_AVAILABLE in hard:
        eviction[resources.MEMORY] = _eviction_signal(memory, hard[MEMORY_AVAILABLE], resources.MEMORY)
    if NODEFS_AVAILABLE in hard:
        eviction[resources.EPHEMERAL_STORAGE] = _eviction_signal(
            ephemeral_storage, hard[NODEFS_AVAILABLE], resources.EPHEMERAL_STORAGE
        )
    return Overhead(
        kube_reserved=kube_reserved,
        system_reserved=system_reserved,
        eviction_threshold=eviction,
        total=resources.merge(kube_reserved, system_reserved, eviction),
    )


def compute_capacity(
    info: InstanceTypeInfo,
    family: AmiFamily,
    *,
    kubelet: KubeletConfig | None = None,
    block_device_mappings: Sequence[BlockDeviceMapping] | None = None,
    instance_store_policy: str | None = None,
    options: ProviderOptions = DEFAULT_OPTIONS,
    vpc_limits: VpcLimits | None = None,
) -> ResourceList:
    capacity: ResourceList = {
        resources.CPU: info.vcpus * 1000,
        resources.MEMORY: memory_capacity(info, options),
        resources.EPHEMERAL_STORAGE: ephemeral_storage_capacity(
            info, family, block_device_mappings, instance_store_policy
        ),
        resources.PODS: max_pods(info, family, kubelet, options),
    }
    extended = {
        resources.POD_ENI: vpc_limits.pod_eni if vpc_limits else 0,
        resources.NVIDIA_GPU: sum(g.count for g in info.gpus if g.manufacturer == "NVIDIA"),
        resources.AMD_GPU: sum(g.count for g in info.gpus if g.manufacturer == "AMD"),
        resources.HABANA_GAUDI: sum(g.count for g in info.gpus if g.manufacturer == "Habana"),
        resources.AWS_NEURON: sum(d.count for d in info.neuron_devices or ()),
        resources.AWS_NEURON_CORE: (
            info.neuron_devices[0].count * info.neuron_devices[0].cores_per_device
            if info.neuron_devices
            else 0
        ),
        resources.EFA: info.efa_max_interfaces,
    }
    if family.os == "windows":
        extended[PRIVATE_IPV4_ADDRESS] = vpc_limits.private_ipv4_addresses if vpc_limits else 0
    capacity.update((name, count) for name, count in extended.items() if count)
    return capacity


def compute_allocatable(
    instance_type_info: Mapping[str, Any] | InstanceTypeInfo,
    kubelet: KubeletConfig | None = None,
    ami_family_name: str | AmiFamily = "AL2023",
    *,
    block_device_mappings: Sequence[BlockDeviceMapping] | None = None,
    instance_store_policy: str | None = None,
    options: ProviderOptions = DEFAULT_OPTIONS,
    vpc_limits: VpcLimits | None = None,
) -> Allocation:
    """Capacity, overhead and allocatable for one ``DescribeInstanceTypes`` item.

    ``vpc_limits`` defaults to the bundled ENI table's entry for the type.
    """
    info = (
        instance_type_info
        if isinstance(instance_type_info, InstanceTypeInfo)
        else parse_instance_type_info(instance_type_info)
    )
    family = ami_family(ami_family_name)
    limits = vpc_limits if vpc_limits is not None else vpc_limits_for(info.name)
    capacity = compute_capacity(
        info,
        family,
        kubelet=kubelet,
        block_device_mappings=block_device_mappings,
        instance_store_policy=instance_store_policy,
        options=options,
        vpc_limits=limits,
    )
    overhead = compute_overhead(
        info,
        family,
        memory=capacity[resources.MEMORY],
        ephemeral_storage=capacity[resources.EPHEMERAL_STORAGE],
        pods=capacity[resources.PODS],
        kubelet=kubelet,
    )
    total = overhead.total
    allocatable = {name: max(value - total.get(name, 0), 0) for name, value in capacity.items()}
    return Allocation(capacity=capacity, overhead=overhead, allocatable=allocatable)
