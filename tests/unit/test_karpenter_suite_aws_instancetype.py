"""Karpenter's AWS provider ``pkg/providers/instancetype/suite_test.go`` (aws/karpenter-provider-aws), It
block by It block, in our words: what resolves an instance type (allocatable, max pods, ENI limits,
kubelet reserved, eviction thresholds, ephemeral storage, VM memory overhead), its offerings and prices,
and what ``plan`` then launches.

Karpenter's suite runs against its fake EC2 data; we run against the bundled us-east-1 catalog (the
same instance type facts for the types the assertions name), the ``--catalog`` file path where a test
needs instance types or prices of its own, and ``build_plan`` for what a pod gets. Zones ``test-zone-1a``
.. ``1c`` are ``us-east-1a`` .. ``1c``. The row per It block is in docs/compat/aws-instancetype.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from serverless_karpenter.api import labels as wk
from serverless_karpenter.catalog import (
    bundled_snapshot,
    load_bundled_catalog,
)
from serverless_karpenter.catalog.prices import bundled_on_demand_prices
from serverless_karpenter.clock import SystemClock
from serverless_karpenter.runtime import CatalogInstanceTypes
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.inputs import classify
from serverless_karpenter_cli.plan import build_plan, offline_nodeclass

from tests.unit.karpenter_suite_helpers_selection_aws import (
    OD,
    REGION,
    SPOT,
    TENANCY,
    ZONES3,
    Obj,
    all_infos,
    claim_for,
    file_catalog,
    info,
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

# -- InstanceTypeProvider: labels -----------------------------------------------------------------------

WINDOWS_2022_BUILD = "10.0.20348"
# g4dn.8xlarge's well-known labels, with Karpenter's values (the bundled facts agree with its fake EC2
# data). Karpenter's fake also gives g4dn.8xlarge Inferentia accelerator labels (a TODO in its test);
# the real type has none, so they are left out here.
G4DN_LABELS: dict[str, str] = {
    wk.NODEPOOL: "default",
    wk.REGION: REGION,
    wk.ZONE: "us-east-1a",
    wk.INSTANCE_TYPE: "g4dn.8xlarge",
    wk.OS: "linux",
    wk.ARCH: "amd64",
    wk.CAPACITY_TYPE: OD,
    wk.INSTANCE_HYPERVISOR: "nitro",
    wk.INSTANCE_ENCRYPTION_IN_TRANSIT: "true",
    wk.INSTANCE_CATEGORY: "g",
    wk.INSTANCE_CAPABILITY_FLEX: "false",
    wk.INSTANCE_GENERATION: "4",
    wk.INSTANCE_FAMILY: "g4dn",
    wk.INSTANCE_SIZE: "8xlarge",
    wk.INSTANCE_CPU: "32",
    wk.INSTANCE_CPU_MANUFACTURER: "intel",
    wk.INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ: "2500",
    wk.INSTANCE_MEMORY: "131072",
    wk.INSTANCE_EBS_BANDWIDTH: "9500",
    wk.INSTANCE_NETWORK_BANDWIDTH: "50000",
    wk.INSTANCE_GPU_NAME: "t4",
    wk.INSTANCE_GPU_MANUFACTURER: "nvidia",
    wk.INSTANCE_GPU_COUNT: "1",
    wk.INSTANCE_GPU_MEMORY: "16384",
    wk.INSTANCE_LOCAL_NVME: "900",
    # Deprecated labels, normalized to their well-known keys.
    "failure-domain.beta.kubernetes.io/region": REGION,
    "failure-domain.beta.kubernetes.io/zone": "us-east-1a",
    "beta.kubernetes.io/arch": "amd64",
    "beta.kubernetes.io/os": "linux",
    "beta.kubernetes.io/instance-type": "g4dn.8xlarge",
}
# Labels Karpenter also schedules on: tenancy (we have no instance-tenancy label), the zone id, the EBS
# CSI driver's zone key (we do not normalize it), and the Windows build (not a label of our Windows
# types).
UNSUPPORTED_LABELS: dict[str, str] = {TENANCY: "default"}
EBS_CSI_ZONE = "topology.ebs.csi.aws.com/zone"
# Labels Karpenter schedules on that are not instance type labels: a zone id, and the EBS CSI driver's
# zone key (normalized to the zone).
OFFERING_LABELS: dict[str, str] = {wk.ZONE_ID: "use1-az6", EBS_CSI_ZONE: "us-east-1a"}
INF2_LABELS: dict[str, str] = {
    **{k: v for k, v in G4DN_LABELS.items() if "gpu" not in k and "local-nvme" not in k},
    wk.INSTANCE_TYPE: "inf2.xlarge",
    "beta.kubernetes.io/instance-type": "inf2.xlarge",
    wk.INSTANCE_CATEGORY: "inf",
    wk.INSTANCE_GENERATION: "2",
    wk.INSTANCE_FAMILY: "inf2",
    wk.INSTANCE_SIZE: "xlarge",
    wk.INSTANCE_CPU: "4",
    wk.INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ: "3600",
    wk.INSTANCE_CPU_MANUFACTURER: "amd",
    wk.INSTANCE_MEMORY: "16384",
    wk.INSTANCE_EBS_BANDWIDTH: "10000",
    wk.INSTANCE_NETWORK_BANDWIDTH: "2083",
    wk.INSTANCE_ACCELERATOR_NAME: "inferentia2",
    wk.INSTANCE_ACCELERATOR_MANUFACTURER: "aws",
    wk.INSTANCE_ACCELERATOR_COUNT: "1",
}


def _windows_objects() -> list[Obj]:
    """The suite's second NodePool and EC2NodeClass, on Windows Server 2022."""
    np = nodepool_manifest(name="windows")
    np["spec"]["template"]["spec"]["nodeClassRef"]["name"] = "windows"
    nc = nodeclass_manifest(amiSelectorTerms=[{"alias": "windows2022@latest"}])
    nc["metadata"]["name"] = "windows"
    return [np, nc]


def _plan_objects(objects: Sequence[Obj], zones: Sequence[str] = ZONES3) -> Obj:
    return build_plan(classify(objects), CatalogInstanceTypes(REGION, SystemClock()), list(zones))


def _label_cases() -> list[Any]:
    cases = [pytest.param(k, v, id=k) for k, v in G4DN_LABELS.items()]
    # A zone id other than the first zone's, so that a scheduler ignoring it would be caught.
    cases.append(pytest.param(wk.ZONE_ID, "use1-az1", id=wk.ZONE_ID))
    cases += [
        pytest.param(
            k, v, id=k, marks=pytest.mark.xfail(strict=True, reason=f"deviation: no scheduling on {k}")
        )
        for k, v in {**UNSUPPORTED_LABELS, wk.WINDOWS_BUILD: WINDOWS_2022_BUILD}.items()
    ]
    cases.append(pytest.param(EBS_CSI_ZONE, "us-east-1a", id=EBS_CSI_ZONE))
    return cases


@pytest.mark.parametrize(("key", "value"), _label_cases())
def test_individual_instance_type_labels(key: str, value: str) -> None:
    """InstanceTypeProvider > should support individual instance type labels: a pod selecting any one
    well-known label (with the Linux and the Windows NodePool both present) is scheduled."""
    objects = [nodepool_manifest(), nodeclass_manifest(), *_windows_objects()]
    out = _plan_objects([*objects, k8s_pod(node_selector={key: value})])
    labels = scheduled_on(out, "p")
    # The node carries the label (deprecated keys under their well-known name; a zone id, the zone).
    label_key, label_value = _NODE_LABEL.get(key, (key, value))
    assert labels.get(label_key) == label_value, (key, labels)


_NODE_LABEL: dict[str, tuple[str, str]] = {
    "failure-domain.beta.kubernetes.io/region": (wk.REGION, REGION),
    "failure-domain.beta.kubernetes.io/zone": (wk.ZONE, "us-east-1a"),
    "beta.kubernetes.io/arch": (wk.ARCH, "amd64"),
    "beta.kubernetes.io/os": (wk.OS, "linux"),
    "beta.kubernetes.io/instance-type": (wk.INSTANCE_TYPE, "g4dn.8xlarge"),
    "topology.ebs.csi.aws.com/zone": (wk.ZONE, "us-east-1a"),
    wk.ZONE_ID: (wk.ZONE, "us-east-1b"),
}


@pytest.mark.parametrize(
    "selector",
    [
        pytest.param(G4DN_LABELS, id="supported"),
        pytest.param(
            {**G4DN_LABELS, **UNSUPPORTED_LABELS, **OFFERING_LABELS},
            id="karpenter",
            marks=pytest.mark.xfail(
                strict=True, reason="deviation: no karpenter.k8s.aws/instance-tenancy label"
            ),
        ),
    ],
)
def test_combined_instance_type_labels(selector: Mapping[str, str]) -> None:
    """InstanceTypeProvider > should support combined instance type labels: one pod selecting them all
    lands on g4dn.8xlarge in that zone."""
    out = plan([k8s_pod(node_selector=selector)])
    labels = scheduled_on(out, "p")
    assert labels[wk.INSTANCE_TYPE] == "g4dn.8xlarge" and labels[wk.ZONE] == "us-east-1a"


@pytest.mark.parametrize(
    "selector",
    [
        pytest.param(INF2_LABELS, id="supported"),
        pytest.param(
            {**INF2_LABELS, **UNSUPPORTED_LABELS, **OFFERING_LABELS},
            id="karpenter",
            marks=pytest.mark.xfail(
                strict=True, reason="deviation: no karpenter.k8s.aws/instance-tenancy label"
            ),
        ),
    ],
)
def test_instance_type_labels_with_accelerator(selector: Mapping[str, str]) -> None:
    """InstanceTypeProvider > should support instance type labels with accelerator"""
    out = plan([k8s_pod(node_selector=selector)])
    assert scheduled_on(out, "p")[wk.INSTANCE_TYPE] == "inf2.xlarge"


# -- InstanceTypeProvider: what gets launched ---------------------------------------------------------


def _on_demand_price(name: str) -> float:
    return bundled_on_demand_prices(REGION)[name]


def test_no_pod_eni_on_a_t3() -> None:
    """InstanceTypeProvider > should not launch AWS Pod ENI on a t3"""
    p = k8s_pod(node_selector={wk.INSTANCE_TYPE: "t3.large"}, extended={resources.POD_ENI: "1"})
    assert unschedulable(plan([p])) == {"default/p"}


def test_launch_options_are_the_cheapest_types() -> None:
    """InstanceTypeProvider > should order the instance types by price and only consider the cheapest
    ones: CreateFleet gets 60 types, all among the 100 cheapest the NodePool allows."""
    out = plan([k8s_pod(cpu="1")])
    options = claim_for(out, "p")["instance_type_options"]
    assert len(options) == 60
    types = CatalogInstanceTypes(REGION, SystemClock()).instance_types(
        offline_nodeclass(nodeclass_manifest(), ZONES3), nodeclass_manifest()
    )
    # Among the types that can hold the pod: the real catalog has many more one-vCPU types than Karpenter's
    # fake, which would otherwise crowd the 100 cheapest.
    prices = sorted(
        (min(o.price for o in it.offerings if o.capacity_type == OD), it.name)
        for it in types
        if any(o.capacity_type == OD for o in it.offerings) and it.allocatable[resources.CPU] >= 1000
    )
    cheapest = {name for _, name in prices[:100]}
    assert set(options) <= cheapest, sorted(set(options) - cheapest)


@pytest.mark.xfail(
    strict=True, reason="deviation: spot options dearer than the cheapest on-demand option are kept"
)
def test_spot_options_are_cheaper_than_the_cheapest_on_demand_option() -> None:
    """InstanceTypeProvider > should order the instance types by price and only consider the spot types
    that are cheaper than the cheapest on-demand"""
    provider = CatalogInstanceTypes(REGION, SystemClock())
    out = plan(
        [k8s_pod(cpu="1")],
        nodepool=nodepool_manifest([req(wk.CAPACITY_TYPE, "In", SPOT, OD)]),
        provider=provider,
    )
    claim = claim_for(out, "p")
    types = {
        it.name: it
        for it in provider.instance_types(
            offline_nodeclass(nodeclass_manifest(), ZONES3), nodeclass_manifest()
        )
    }
    options = [types[name] for name in claim["instance_type_options"]]
    cheapest_on_demand = min(o.price for it in options for o in it.offerings if o.capacity_type == OD)
    for it in options:
        for o in it.offerings:
            if o.capacity_type == SPOT:
                assert o.price < cheapest_on_demand, (it.name, o.zone, o.price, cheapest_on_demand)


# Karpenter's fake catalog is small enough that every type, metal included, fits in CreateFleet's 60;
# one family (m5, with m5.metal) gives the same situation on the real catalog.
M5_ONLY = req(wk.INSTANCE_FAMILY, "In", "m5")


@pytest.mark.xfail(
    strict=True,
    reason="deviation: minValues on an offering key (capacity-type) counts no values, the pod fails",
)
def test_metal_kept_when_a_requirement_has_min_values() -> None:
    """InstanceTypeProvider > should not remove expensive metal instanceTypeOptions if any of the
    requirement with minValues is provided"""
    nodepool = nodepool_manifest([req(wk.CAPACITY_TYPE, "In", SPOT, min_values=1), M5_ONLY])
    options = claim_for(plan([k8s_pod(cpu="1")], nodepool=nodepool), "p")["instance_type_options"]
    assert any("metal" in name for name in options), options


def test_metal_is_deprioritized() -> None:
    """InstanceTypeProvider > should de-prioritize metal"""
    nodepool = nodepool_manifest([req(wk.CAPACITY_TYPE, "In", OD), M5_ONLY])
    options = claim_for(plan([k8s_pod(cpu="1")], nodepool=nodepool), "p")["instance_type_options"]
    assert options and not any("metal" in name for name in options), options


def test_gpu_types_are_deprioritized() -> None:
    """InstanceTypeProvider > should de-prioritize gpu types (on a NodePool allowing m5 and g4dn, where
    price alone would keep g4dn among the options)"""
    nodepool = nodepool_manifest(
        [req(wk.CAPACITY_TYPE, "In", OD), req(wk.INSTANCE_FAMILY, "In", "m5", "g4dn")]
    )
    options = claim_for(plan([k8s_pod(cpu="1")], nodepool=nodepool), "p")["instance_type_options"]
    assert options and not any(name.startswith("g") for name in options), options


def test_launches_on_metal_when_asked() -> None:
    """InstanceTypeProvider > should launch on metal"""
    nodepool = nodepool_manifest([req(wk.CAPACITY_TYPE, "In", OD), req(wk.INSTANCE_TYPE, "Exists")])
    out = plan([k8s_pod(cpu="1", node_selector={wk.INSTANCE_SIZE: "metal"})], nodepool=nodepool)
    assert scheduled_on(out, "p")[wk.INSTANCE_SIZE] == "metal"


def test_pod_eni_on_a_trunking_compatible_type() -> None:
    """InstanceTypeProvider > should launch vpc.amazonaws.com/pod-eni on a compatible instance type"""
    out = plan([k8s_pod(extended={resources.POD_ENI: "1"})])
    name = scheduled_on(out, "p")[wk.INSTANCE_TYPE]
    assert load_bundled_catalog(REGION)[name].capacity.get(resources.POD_ENI, 0) >= 1


def test_flex_instance_type_when_asked() -> None:
    """InstanceTypeProvider > should launch pod in flex instance type"""
    labels = scheduled_on(plan([k8s_pod(node_selector={wk.INSTANCE_CAPABILITY_FLEX: "true"})]), "p")
    assert labels[wk.INSTANCE_CAPABILITY_FLEX] == "true" and "flex" in labels[wk.INSTANCE_TYPE]


def test_no_flex_when_the_nodepool_disallows_it() -> None:
    """InstanceTypeProvider > should not launch pod when flex instances are disallowed"""
    nodepool = nodepool_manifest(
        [req(wk.CAPACITY_TYPE, "In", OD), req(wk.INSTANCE_CAPABILITY_FLEX, "NotIn", "true")]
    )
    out = plan([k8s_pod(node_selector={wk.INSTANCE_CAPABILITY_FLEX: "true"})], nodepool=nodepool)
    assert unschedulable(out) == {"default/p"}


def test_non_flex_instance_type_when_asked() -> None:
    """InstanceTypeProvider > should launch pod in non-flex instances"""
    labels = scheduled_on(plan([k8s_pod(node_selector={wk.INSTANCE_CAPABILITY_FLEX: "false"})]), "p")
    assert labels[wk.INSTANCE_CAPABILITY_FLEX] == "false" and "flex" not in labels[wk.INSTANCE_TYPE]


PRIVATE_IPV4 = "vpc.amazonaws.com/PrivateIPv4Address"
WINDOWS_2022 = [{"alias": "windows2022@latest"}]


def test_private_ipv4_address_on_a_windows_type() -> None:
    """InstanceTypeProvider > should launch vpc.amazonaws.com/PrivateIPv4Address on a compatible instance
    type"""
    out = plan(
        [k8s_pod(extended={PRIVATE_IPV4: "1"})], nodeclass=nodeclass_manifest(amiSelectorTerms=WINDOWS_2022)
    )
    name = scheduled_on(out, "p")[wk.INSTANCE_TYPE]
    assert info(name).ipv4_per_interface > 0


def test_no_private_ipv4_address_where_the_vpc_limits_do_not_advertise_it() -> None:
    """InstanceTypeProvider > should not launch instance type for vpc.amazonaws.com/PrivateIPv4Address if
    VPC resource controller doesn't advertise it: a type missing from the VPC limits table has none."""
    test_type = {
        "InstanceType": "test",
        "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
        "VCpuInfo": {"DefaultCores": 1, "DefaultVCpus": 2},
        "MemoryInfo": {"SizeInMiB": 8192},
        "NetworkInfo": {
            "Ipv4AddressesPerInterface": 10,
            "DefaultNetworkCardIndex": 0,
            "NetworkCards": [{"NetworkCardIndex": 0, "MaximumNetworkInterfaces": 3}],
        },
        "SupportedUsageClasses": ["on-demand", "spot"],
    }
    provider = file_catalog([test_type], {"test": ["us-east-1a"]})
    nodepool = nodepool_manifest([req(wk.CAPACITY_TYPE, "In", OD), req(wk.INSTANCE_TYPE, "In", "test")])
    nodeclass = nodeclass_manifest(amiSelectorTerms=WINDOWS_2022)
    without = plan(
        [k8s_pod()], nodepool=nodepool, nodeclass=nodeclass, provider=provider, zones=["us-east-1a"]
    )
    assert scheduled_on(without, "p")[wk.INSTANCE_TYPE] == "test"  # the type itself is usable
    out = plan(
        [k8s_pod(extended={PRIVATE_IPV4: "1"})],
        nodepool=nodepool,
        nodeclass=nodeclass,
        provider=provider,
        zones=["us-east-1a"],
    )
    assert unschedulable(out) == {"default/p"}


def _nodes_for(out: Obj, names: Sequence[str]) -> dict[str, str]:
    """Pod name -> the planned node (its index) that holds it."""
    index = {key: i for i, claim in enumerate(out["nodeclaims"]) for key in claim["pods"]}
    return {name: str(index[f"default/{name}"]) for name in names}


def _packs(out: Obj, resource: str, requests: Mapping[str, int]) -> None:
    """Every pod placed, on a type with room for what its node's pods ask of ``resource``."""
    catalog = load_bundled_catalog(REGION)
    for claim in out["nodeclaims"]:
        wanted = sum(requests[key.split("/")[1]] for key in claim["pods"])
        assert catalog[claim["instance_type"]].allocatable.get(resource, 0) >= wanted, claim
    assert not out["unschedulable"], out["unschedulable"]


def test_nvidia_gpu_requests() -> None:
    """InstanceTypeProvider > should launch instances for nvidia.com/gpu resource requests: 5 and 2 GPUs
    share one node, another 5 get a second (Karpenter's fake has one such type, p5.48xlarge; the real
    catalog has several 8-GPU types, so the test checks the packing and the GPUs)."""
    gpus = {"a": 5, "b": 2, "c": 5}
    out = plan([k8s_pod(n, extended={resources.NVIDIA_GPU: str(c)}) for n, c in gpus.items()])
    _packs(out, resources.NVIDIA_GPU, gpus)
    assert len(set(_nodes_for(out, list(gpus)).values())) == 2


def test_neuron_requests() -> None:
    """InstanceTypeProvider > should launch instances for aws.amazon.com/neuron resource requests: 2, 2
    and 4 devices take two inferentia2 nodes."""
    neurons = {"a": 2, "b": 2, "c": 4}
    out = plan([k8s_pod(n, extended={resources.AWS_NEURON: str(c)}) for n, c in neurons.items()])
    _packs(out, resources.AWS_NEURON, neurons)
    assert len(out["nodeclaims"]) == 2


def test_neuron_request_on_trn1() -> None:
    """InstanceTypeProvider > should launch trn1 instances for aws.amazon.com/neuron resource requests"""
    nodepool = nodepool_manifest([req(wk.INSTANCE_TYPE, "In", "trn1.2xlarge")])
    out = plan(
        [k8s_pod(extended={resources.AWS_NEURON: "1"})],
        nodepool=nodepool,
        zones=sorted(bundled_snapshot().zone_ids),
    )
    assert scheduled_on(out, "p")[wk.INSTANCE_TYPE] == "trn1.2xlarge" and len(out["nodeclaims"]) == 1


def test_neuroncore_request_on_inf2() -> None:
    """InstanceTypeProvider > should launch inf2 instances for aws.amazon.com/neuroncore resource requests"""
    nodepool = nodepool_manifest([req(wk.INSTANCE_TYPE, "In", "inf2.xlarge")])
    out = plan([k8s_pod(extended={resources.AWS_NEURON_CORE: "2"})], nodepool=nodepool)
    assert scheduled_on(out, "p")[wk.INSTANCE_TYPE] == "inf2.xlarge" and len(out["nodeclaims"]) == 1


def test_efa_requests() -> None:
    """InstanceTypeProvider > should launch instances for vpc.amazonaws.com/efa resource requests"""
    nodepool = nodepool_manifest([req(wk.INSTANCE_TYPE, "In", "p5.48xlarge")])
    out = plan(
        [k8s_pod("a", extended={resources.EFA: "1"}), k8s_pod("b", extended={resources.EFA: "2"})],
        nodepool=nodepool,
    )
    [claim] = out["nodeclaims"]
    assert claim["instance_type"] == "p5.48xlarge" and sorted(claim["pods"]) == ["default/a", "default/b"]


def _g4ad_16xlarge() -> Obj:
    """g4ad.16xlarge (4 AMD Radeon Pro V520), which the bundled snapshot lacks."""
    item = raw_info("g4dn.16xlarge")
    return {
        **item,
        "InstanceType": "g4ad.16xlarge",
        "VCpuInfo": {"DefaultVCpus": 64},
        "MemoryInfo": {"SizeInMiB": 262144},
        "ProcessorInfo": {"Manufacturer": "AMD", "SupportedArchitectures": ["x86_64"]},
        "GpuInfo": {
            "Gpus": [
                {
                    "Name": "Radeon Pro V520",
                    "Manufacturer": "AMD",
                    "Count": 4,
                    "MemoryInfo": {"SizeInMiB": 8192},
                }
            ]
        },
    }


def test_amd_gpu_requests() -> None:
    """InstanceTypeProvider > should launch instances for amd.com/gpu resource requests: 1 and 2 GPUs share
    one g4ad.16xlarge, 4 get another."""
    provider = file_catalog(
        [_g4ad_16xlarge(), raw_info("m5.large")], {"g4ad.16xlarge": ZONES3, "m5.large": ZONES3}
    )
    gpus = {"a": 1, "b": 2, "c": 4}
    out = plan([k8s_pod(n, extended={resources.AMD_GPU: str(c)}) for n, c in gpus.items()], provider=provider)
    assert not out["unschedulable"], out["unschedulable"]
    assert {c["instance_type"] for c in out["nodeclaims"]} == {"g4ad.16xlarge"}
    assert len(set(_nodes_for(out, list(gpus)).values())) == 2


def test_ephemeral_storage_beyond_the_root_volume_is_not_scheduled() -> None:
    """InstanceTypeProvider > should not launch instances w/ instance storage for ephemeral storage
    resource requests when exceeding blockDeviceMapping"""
    p = k8s_pod(ephemeral := "p")
    p["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = "5000Gi"
    assert unschedulable(plan([p])) == {f"default/{ephemeral}"}


@pytest.mark.xfail(strict=True, reason="deviation: plan ignores the EC2NodeClass's instanceStorePolicy")
def test_raid0_instance_store_takes_ephemeral_storage_requests() -> None:
    """InstanceTypeProvider > should launch instances w/ instance storage for ephemeral storage resource
    requests when disks are mounted for ephemeral-storage (instanceStorePolicy RAID0)"""
    p = k8s_pod()
    p["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = "5000Gi"
    out = plan([p], nodeclass=nodeclass_manifest(instanceStorePolicy="RAID0"))
    name = scheduled_on(out, "p")[wk.INSTANCE_TYPE]
    assert (info(name).instance_storage_gb or 0) * 1000**3 >= q("ephemeral-storage", "5000Gi")


def test_eni_pod_density_is_not_110() -> None:
    """InstanceTypeProvider > should not set pods to 110 if using ENI-based pod density"""
    at_110 = [i.name for i in all_infos() if resolve(i.name).capacity[resources.PODS] == 110]
    # Where the ENI formula itself gives 110 (interfaces x (ips - 1) + 2), 110 is the ENI answer.
    assert all(
        i.default_card_interfaces * (i.ipv4_per_interface - 1) + 2 == 110 for i in map(info, at_110)
    ), at_110


def test_windows_has_110_pods() -> None:
    """InstanceTypeProvider > should set pods to 110 if AMI Family doesn't support (ENI-based density)"""
    assert {resolve(i.name, family="Windows2022").capacity[resources.PODS] for i in all_infos()} == {110}


def test_launches_in_a_local_zone() -> None:
    """InstanceTypeProvider > should launch instances in local zones: a NodeClass whose only subnet is in
    a local zone launches there for a pod that requires it."""
    local = "us-east-1-bos-1a"
    provider = file_catalog([raw_info("m5.large")], {"m5.large": ["us-east-1a", local]})
    p = k8s_pod(affinity=_required((wk.ZONE, "In", [local])))
    out = plan([p], provider=provider, zones=[local])
    assert scheduled_on(out, "p")[wk.ZONE] == local


def _required(*expressions: tuple[str, str, Sequence[str]]) -> Obj:
    term = {"matchExpressions": [{"key": k, "operator": op, "values": list(v)} for k, op, v in expressions]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
