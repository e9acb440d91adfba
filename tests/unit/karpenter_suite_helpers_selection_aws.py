"""Helpers for the ported AWS instancetype suite (``test_karpenter_suite_aws_instancetype*.py``): the
suite's NodePool and EC2NodeClass as manifests, ``plan`` on them, and instance types resolved from the
bundled catalog as Karpenter's ``NewInstanceType`` resolves them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.catalog import (
    DEFAULT_OPTIONS,
    InstanceType,
    InstanceTypeInfo,
    KubeletConfig,
    ProviderOptions,
    build_instance_type,
    bundled_snapshot,
)
from serverless_karpenter.catalog._data import read_package_json
from serverless_karpenter.catalog.allocatable import BlockDeviceMapping
from serverless_karpenter.clock import SystemClock
from serverless_karpenter.runtime import CatalogInstanceTypes
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.inputs import classify
from serverless_karpenter_cli.plan import build_plan
from serverless_karpenter_cli.plan import file_catalog as plan_file_catalog

from tests.builders import pod

REGION = "us-east-1"
# Karpenter's suite EC2NodeClass has subnets in three zones.
ZONES3 = ("us-east-1a", "us-east-1b", "us-east-1c")
OD, SPOT = wk.CAPACITY_TYPE_ON_DEMAND, wk.CAPACITY_TYPE_SPOT
Obj = dict[str, Any]


TENANCY = "karpenter.k8s.aws/instance-tenancy"


# -- manifests and plan ---------------------------------------------------------------------------------


def k8s_pod(
    name: str = "p",
    cpu: str | None = None,
    memory: str | None = None,
    *,
    node_selector: Mapping[str, str] | None = None,
    extended: Mapping[str, str] | None = None,
    **spec: Any,
) -> Obj:
    """``coretest.UnschedulablePod``: no requests unless asked, as a manifest ``plan`` reads."""
    out = pod(name, cpu=cpu, memory=memory, extended=extended, **spec)
    if node_selector:
        out["spec"]["nodeSelector"] = dict(node_selector)
    return {"apiVersion": "v1", "kind": "Pod", **out}


def nodepool_manifest(requirements: Sequence[Mapping[str, Any]] | None = None, name: str = "default") -> Obj:
    """The suite's NodePool: on-demand only unless ``requirements`` replaces its requirements."""
    reqs = (
        list(requirements)
        if requirements is not None
        else [{"key": wk.CAPACITY_TYPE, "operator": "In", "values": [OD]}]
    )
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "requirements": reqs,
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                }
            }
        },
    }


def nodeclass_manifest(**spec: Any) -> Obj:
    """The suite's EC2NodeClass (AL2023 unless ``amiSelectorTerms`` says otherwise), ``spec`` merged in."""
    base: Obj = {
        "role": "KarpenterNodeRole",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
    }
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {**base, **spec},
    }


def req(key: str, operator: str, *values: str, min_values: int | None = None) -> Obj:
    out: Obj = {"key": key, "operator": operator, "values": list(values)}
    if min_values is not None:
        out["minValues"] = min_values
    return out


def plan(
    pods: Sequence[Obj],
    *,
    nodepool: Obj | None = None,
    nodeclass: Obj | None = None,
    provider: Any = None,
    zones: Sequence[str] = ZONES3,
) -> Obj:
    """``serverless-karpenter plan`` on these manifests, with the bundled catalog unless ``provider``."""
    provider = provider if provider is not None else CatalogInstanceTypes(REGION, SystemClock())
    objects = [nodepool or nodepool_manifest(), nodeclass or nodeclass_manifest(), *pods]
    return build_plan(classify(objects), provider, list(zones))


def claim_for(out: Obj, pod_name: str) -> Obj:
    """The planned NodeClaim that holds the pod (it fails the test when the pod was not placed)."""
    key = f"default/{pod_name}"
    found = [c for c in out["nodeclaims"] if key in c["pods"]]
    assert found, f"{key} not scheduled: {out['unschedulable']}"
    return found[0]


def unschedulable(out: Obj) -> set[str]:
    return {u["pod"] for u in out["unschedulable"]}


def scheduled_on(out: Obj, pod_name: str) -> Obj:
    """The labels of the node the pod gets."""
    return dict(claim_for(out, pod_name)["labels"])


_INFO: dict[str, InstanceTypeInfo] = {}


def info(name: str) -> InstanceTypeInfo:
    """One type's DescribeInstanceTypes facts from the bundled snapshot."""
    if not _INFO:
        _INFO.update((i.name, i) for i in bundled_snapshot(REGION).instance_types)
    return _INFO[name]


def raw_info(name: str) -> Obj:
    """The DescribeInstanceTypes item (boto3 shape) of a bundled type, for ``--catalog`` files."""
    items = read_package_json(f"instance-types-{REGION}.json")["instance_types"]
    return dict(next(item for item in items if item["InstanceType"] == name))


def resolve(
    name: str,
    kubelet: Mapping[str, Any] | None = None,
    family: str = "AL2023",
    *,
    options: ProviderOptions = DEFAULT_OPTIONS,
    block_device_mappings: Sequence[BlockDeviceMapping] | None = None,
) -> InstanceType:
    """``instancetype.NewInstanceType`` for one type: capacity, overhead, allocatable."""
    return build_instance_type(
        info(name),
        kubelet=KubeletConfig.from_spec(kubelet),
        ami_family_name=family,
        region=REGION,
        options=options,
        block_device_mappings=block_device_mappings,
    )


def all_infos() -> Iterable[InstanceTypeInfo]:
    return bundled_snapshot(REGION).instance_types


def q(name: str, quantity: str) -> int:
    return resources.parse(name, quantity)


def file_catalog(
    items: Sequence[Obj], offerings: Mapping[str, Sequence[str]], **extra: Any
) -> CatalogInstanceTypes:
    """A ``--catalog`` file's provider: DescribeInstanceTypes items, their zones, on-demand prices (1.0
    unless given) and spot history."""
    data: Obj = {
        "InstanceTypes": list(items),
        "InstanceTypeOfferings": [
            {"InstanceType": name, "Location": zone, "LocationType": "availability-zone"}
            for name, zones in offerings.items()
            for zone in zones
        ],
        "OnDemandPrices": extra.pop("OnDemandPrices", {name: 1.0 for name in offerings}),
        **extra,
    }
    return plan_file_catalog(data, REGION)[0]
