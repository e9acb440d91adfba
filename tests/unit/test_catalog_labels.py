"""Well-known labels of instance types, against Karpenter's instance types reference (karpenter.sh)."""

from __future__ import annotations

import functools
from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.catalog import InstanceType, build_instance_type
from serverless_karpenter.catalog._data import read_package_json


@functools.cache
def _items() -> dict[str, dict[str, Any]]:
    raw = read_package_json("instance-types-us-east-1.json")
    return {item["InstanceType"]: item for item in raw["instance_types"]}


def build(name: str, **kwargs: Any) -> InstanceType:
    return build_instance_type(_items()[name], **kwargs)


def test_m5_large_labels_match_karpenter_docs() -> None:
    labels = build("m5.large").labels
    published = {
        "karpenter.k8s.aws/instance-category": "m",
        "karpenter.k8s.aws/instance-cpu": "2",
        "karpenter.k8s.aws/instance-cpu-manufacturer": "intel",
        "karpenter.k8s.aws/instance-ebs-bandwidth": "4750",
        "karpenter.k8s.aws/instance-encryption-in-transit-supported": "false",
        "karpenter.k8s.aws/instance-family": "m5",
        "karpenter.k8s.aws/instance-generation": "5",
        "karpenter.k8s.aws/instance-hypervisor": "nitro",
        "karpenter.k8s.aws/instance-memory": "8192",
        "karpenter.k8s.aws/instance-network-bandwidth": "750",
        "karpenter.k8s.aws/instance-size": "large",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "m5.large",
    }
    assert {k: labels.get(k) for k in published} == published
    # Labels added to Karpenter after that page was generated.
    assert labels[wk.INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ] == "3100"
    assert labels[wk.INSTANCE_CAPABILITY_FLEX] == "false"
    for absent in (wk.INSTANCE_GPU_NAME, wk.INSTANCE_ACCELERATOR_NAME, wk.INSTANCE_LOCAL_NVME):
        assert absent not in labels


def test_m7g_large_is_arm64_by_aws() -> None:
    it = build("m7g.large")
    published = {
        "karpenter.k8s.aws/instance-category": "m",
        "karpenter.k8s.aws/instance-cpu": "2",
        "karpenter.k8s.aws/instance-cpu-manufacturer": "aws",
        "karpenter.k8s.aws/instance-ebs-bandwidth": "10000",
        "karpenter.k8s.aws/instance-encryption-in-transit-supported": "true",
        "karpenter.k8s.aws/instance-family": "m7g",
        "karpenter.k8s.aws/instance-generation": "7",
        "karpenter.k8s.aws/instance-memory": "8192",
        "karpenter.k8s.aws/instance-network-bandwidth": "937",
        "karpenter.k8s.aws/instance-size": "large",
        "kubernetes.io/arch": "arm64",
        "kubernetes.io/os": "linux",
    }
    assert {k: it.labels.get(k) for k in published} == published
    assert it.arch == "arm64"
    assert (it.family, it.size, it.vcpus, it.memory_mib) == ("m7g", "large", 2, 8192)


def test_gpu_labels_come_from_the_single_gpu_entry() -> None:
    labels = build("g5.xlarge").labels
    assert labels[wk.INSTANCE_GPU_NAME] == "a10g"
    assert labels[wk.INSTANCE_GPU_MANUFACTURER] == "nvidia"
    assert labels[wk.INSTANCE_GPU_COUNT] == "1"
    # Per-GPU memory as DescribeInstanceTypes reports it (EC2 now says 22888 MiB for the A10G).
    assert labels[wk.INSTANCE_GPU_MEMORY] == "22888"
    assert labels[wk.INSTANCE_LOCAL_NVME] == "250"
    assert labels[wk.INSTANCE_CPU_MANUFACTURER] == "amd"


def test_neuron_devices_give_accelerator_labels() -> None:
    labels = build("inf2.xlarge").labels
    assert labels[wk.INSTANCE_ACCELERATOR_NAME] == "inferentia2"
    assert labels[wk.INSTANCE_ACCELERATOR_MANUFACTURER] == "aws"
    assert labels[wk.INSTANCE_ACCELERATOR_COUNT] == "1"
    assert build("trn1.32xlarge").labels[wk.INSTANCE_ACCELERATOR_COUNT] == "16"


def test_bare_metal_has_an_empty_hypervisor_label() -> None:
    it = build("m5.metal")
    assert it.bare_metal
    assert it.labels[wk.INSTANCE_HYPERVISOR] == ""
    assert it.labels[wk.INSTANCE_SIZE] == "metal"


def test_flex_family_and_high_memory_naming() -> None:
    flex = build("m7i-flex.large").labels
    assert flex[wk.INSTANCE_CAPABILITY_FLEX] == "true"
    assert (flex[wk.INSTANCE_CATEGORY], flex[wk.INSTANCE_GENERATION]) == ("m", "7")
    assert flex[wk.INSTANCE_FAMILY] == "m7i-flex"
    high_memory = build("u-6tb1.112xlarge").labels
    assert (high_memory[wk.INSTANCE_CATEGORY], high_memory[wk.INSTANCE_GENERATION]) == ("u", "1")


def test_region_label_only_when_given_and_no_offering_labels() -> None:
    assert build("m5.large", region="us-east-1").labels[wk.REGION] == "us-east-1"
    labels = build("m5.large").labels
    for per_offering in (wk.REGION, wk.ZONE, wk.ZONE_ID, wk.CAPACITY_TYPE):
        assert per_offering not in labels


def test_windows_family_sets_the_os_label() -> None:
    assert build("m5.large", ami_family_name="Windows2022").labels[wk.OS] == "windows"


def test_every_label_is_well_known() -> None:
    labels = build("p4d.24xlarge", region="us-east-1").labels
    assert set(labels) <= wk.WELL_KNOWN_LABELS
    assert all(wk.is_restricted_label(key) is None for key in labels)


def test_capacity_types_keep_only_spot_and_on_demand() -> None:
    assert build("p4d.24xlarge").capacity_types == ("on-demand", "spot")
