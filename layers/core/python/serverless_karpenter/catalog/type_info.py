"""The facts we use from one EC2 ``DescribeInstanceTypes`` item, read once into plain fields.

The input is the EC2 API's response shape (``{"InstanceType": ..., "VCpuInfo": {...}, ...}``); the bundled
snapshot stores items in that same shape, trimmed to the keys read here, so real and offline data take
one path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

AWS_TO_KUBE_ARCH = {"x86_64": "amd64", "arm64": "arm64"}


@dataclass(frozen=True, slots=True)
class Gpu:
    name: str
    manufacturer: str
    count: int
    memory_mib: int


@dataclass(frozen=True, slots=True)
class Accelerator:
    name: str
    manufacturer: str
    count: int


@dataclass(frozen=True, slots=True)
class NeuronDevice:
    name: str
    count: int
    cores_per_device: int


@dataclass(frozen=True, slots=True)
class NetworkCard:
    index: int
    max_interfaces: int
    baseline_bandwidth_gbps: float | None


@dataclass(frozen=True, slots=True)
class InstanceTypeInfo:
    name: str
    vcpus: int
    memory_mib: int
    architectures: tuple[str, ...]
    cpu_manufacturer: str | None
    sustained_clock_speed_ghz: float | None
    hypervisor: str
    bare_metal: bool
    usage_classes: tuple[str, ...]
    gpus: tuple[Gpu, ...]
    inference_accelerators: tuple[Accelerator, ...]
    neuron_devices: tuple[NeuronDevice, ...] | None
    max_network_interfaces: int
    ipv4_per_interface: int
    default_network_card_index: int
    network_cards: tuple[NetworkCard, ...]
    efa_max_interfaces: int
    encryption_in_transit: bool
    ebs_optimized_support: str | None
    ebs_max_bandwidth_mbps: int | None
    instance_storage_gb: int | None
    instance_storage_nvme: str | None

    @property
    def arch(self) -> str:
        """The Kubernetes architecture: the first supported one Kubernetes knows."""
        for aws_arch in self.architectures:
            kube_arch = AWS_TO_KUBE_ARCH.get(aws_arch)
            if kube_arch:
                return kube_arch
        return ",".join(self.architectures)

    @property
    def default_card_interfaces(self) -> int:
        """Interfaces on the default network card; the VPC CNI uses no other card."""
        for card in self.network_cards:
            if card.index == self.default_network_card_index:
                return card.max_interfaces
        return self.max_network_interfaces

    @property
    def network_bandwidth_mbps(self) -> int | None:
        """Baseline network bandwidth over all cards, in Mbps (None when EC2 does not say)."""
        speeds = [c.baseline_bandwidth_gbps for c in self.network_cards if c.baseline_bandwidth_gbps]
        if not speeds:
            return None
        return round(sum(speeds) * 1000)


def _int(value: Any, default: int = 0) -> int:
    return default if value is None else int(value)


def parse_instance_type_info(item: Mapping[str, Any]) -> InstanceTypeInfo:
    """Read one ``DescribeInstanceTypes`` item (the EC2 API's shape)."""
    processor = item.get("ProcessorInfo") or {}
    network = item.get("NetworkInfo") or {}
    ebs = item.get("EbsInfo") or {}
    storage = item.get("InstanceStorageInfo")
    gpu_info = item.get("GpuInfo") or {}
    accel_info = item.get("InferenceAcceleratorInfo") or {}
    neuron_info = item.get("NeuronInfo")
    clock = processor.get("SustainedClockSpeedInGhz")
    neuron_devices = None
    if neuron_info is not None:
        neuron_devices = tuple(
            NeuronDevice(
                name=str(d.get("Name", "")),
                count=_int(d.get("Count")),
                cores_per_device=_int((d.get("CoreInfo") or {}).get("Count")),
            )
            for d in neuron_info.get("NeuronDevices") or ()
        )
    return InstanceTypeInfo(
        name=str(item["InstanceType"]),
        vcpus=_int((item.get("VCpuInfo") or {}).get("DefaultVCpus")),
        memory_mib=_int((item.get("MemoryInfo") or {}).get("SizeInMiB")),
        architectures=tuple(processor.get("SupportedArchitectures") or ()),
        cpu_manufacturer=processor.get("Manufacturer"),
        sustained_clock_speed_ghz=None if clock is None else float(clock),
        hypervisor=str(item.get("Hypervisor") or ""),
        bare_metal=bool(item.get("BareMetal", False)),
        usage_classes=tuple(dict.fromkeys(item.get("SupportedUsageClasses") or ())),
        gpus=tuple(
            Gpu(
                name=str(g.get("Name", "")),
                manufacturer=str(g.get("Manufacturer", "")),
                count=_int(g.get("Count")),
                memory_mib=_int((g.get("MemoryInfo") or {}).get("SizeInMiB")),
            )
            for g in gpu_info.get("Gpus") or ()
        ),
        inference_accelerators=tuple(
            Accelerator(
                name=str(a.get("Name", "")),
                manufacturer=str(a.get("Manufacturer", "")),
                count=_int(a.get("Count")),
            )
            for a in accel_info.get("Accelerators") or ()
        ),
        neuron_devices=neuron_devices,
        max_network_interfaces=_int(network.get("MaximumNetworkInterfaces")),
        ipv4_per_interface=_int(network.get("Ipv4AddressesPerInterface")),
        default_network_card_index=_int(network.get("DefaultNetworkCardIndex")),
        network_cards=tuple(
            NetworkCard(
                index=_int(c.get("NetworkCardIndex"), position),
                max_interfaces=_int(c.get("MaximumNetworkInterfaces")),
                baseline_bandwidth_gbps=(
                    None if c.get("BaselineBandwidthInGbps") is None else float(c["BaselineBandwidthInGbps"])
                ),
            )
            for position, c in enumerate(network.get("NetworkCards") or ())
        ),
        efa_max_interfaces=_int((network.get("EfaInfo") or {}).get("MaximumEfaInterfaces")),
        encryption_in_transit=bool(network.get("EncryptionInTransitSupported", False)),
        ebs_optimized_support=ebs.get("EbsOptimizedSupport"),
        ebs_max_bandwidth_mbps=(
            None
            if not ebs.get("EbsOptimizedInfo")
            else _int(ebs["EbsOptimizedInfo"].get("MaximumBandwidthInMbps"))
        ),
        instance_storage_gb=(
            None if not storage or storage.get("TotalSizeInGB") is None else int(storage["TotalSizeInGB"])
        ),
        instance_storage_nvme=None if not storage else storage.get("NvmeSupport"),
    )
