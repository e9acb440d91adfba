"""Karpenter's scheduling semantics, constraint by constraint, against the bundled multi-zone catalog.

The scenarios follow kubernetes-sigs/karpenter ``pkg/controllers/provisioning/scheduling`` suites, in our
own words. Helpers here are shared by the other ``test_scheduling_*`` files.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import pytest
from serverless_karpenter.api import labels as wk
from serverless_karpenter.api.errors import ManifestError
from serverless_karpenter.api.manifests import parse_manifest
from serverless_karpenter.catalog import load_bundled_catalog
from serverless_karpenter.provisioning.provisioner import explain
from serverless_karpenter.runtime import SchedulableInstanceType
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.inputs import apply_runtime_class
from serverless_karpenter.scheduling.scheduler import (
    MAX_INSTANCE_TYPES,
    ExistingCapacity,
    NodePoolTemplate,
    Scheduler,
    SchedulingResult,
    choose_offering,
    nodepool_requirements,
    truncate_instance_types,
)
from serverless_karpenter.scheduling.volumes import VolumeIndex

from tests.builders import pod

ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
GI = 1 << 30


@functools.cache
def catalog_types(zones: tuple[str, ...] = ZONES) -> list[SchedulableInstanceType]:
    catalog = load_bundled_catalog("us-east-1", zones)
    out = []
    for it in catalog:
        offerings = catalog.available_offerings(it)
        if offerings:
            out.append(SchedulableInstanceType(it.name, it.allocatable, it.capacity, it.labels, offerings))
    return out


def pool(
    name: str = "default",
    requirements: Sequence[dict[str, Any]] = (),
    *,
    weight: int = 0,
    taints: Sequence[dict[str, str]] = (),
    startup_taints: Sequence[dict[str, str]] = (),
    labels: dict[str, str] | None = None,
    remaining: dict[str, int] | None = None,
    overhead: dict[str, int] | None = None,
    types: Sequence[Any] | None = None,
) -> NodePoolTemplate:
    manifest = {
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": labels or {}},
                "spec": {
                    "requirements": list(requirements)
                    or [{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}],
                    "taints": list(taints),
                    "startupTaints": list(startup_taints),
                    "nodeClassRef": {"name": "default"},
                },
            }
        },
    }
    reqs, pool_labels, pool_taints = nodepool_requirements(manifest)
    return NodePoolTemplate(
        name,
        "default",
        weight,
        reqs,
        pool_labels,
        pool_taints,
        list(types) if types is not None else catalog_types(),
        overhead or {},
        remaining,
    )


def node(
    name: str,
    zone: str,
    *,
    cpu: int = 4000,
    memory: int = 16 * GI,
    pods: Sequence[dict[str, Any]] = (),
    labels: dict[str, str] | None = None,
    taints: Sequence[Any] = (),
    capacity_type: str = "on-demand",
) -> ExistingCapacity:
    bound = [{**p, "spec": {**p["spec"], "nodeName": name}} for p in pods]
    used = resources.merge(*(resources.merge(_requests(p)) for p in bound)) if bound else {}
    return ExistingCapacity(
        name=name,
        labels={
            wk.HOSTNAME: name,
            wk.ZONE: zone,
            wk.CAPACITY_TYPE: capacity_type,
            wk.ARCH: "amd64",
            wk.OS: "linux",
            **(labels or {}),
        },
        taints=tuple(taints),
        available=resources.subtract({"cpu": cpu, "memory": memory, "pods": 110}, used),
        bound_pods=bound,
    )


def _requests(p: dict[str, Any]) -> dict[str, int]:
    from serverless_karpenter.scheduling import pods as podlib

    return podlib.requests(p)


def solve(
    pods: Sequence[dict[str, Any]],
    pools: Sequence[NodePoolTemplate] | None = None,
    existing: Sequence[ExistingCapacity] = (),
    **kwargs: Any,
) -> SchedulingResult:
    return Scheduler(list(pools) if pools is not None else [pool()], existing, **kwargs).solve(pods)


def zone_of(claim: Any) -> str:
    zones = claim.requirements.get(wk.ZONE)
    assert not zones.complement and len(zones.values()) == 1, f"claim not pinned to a zone: {zones}"
    return next(iter(zones.values()))


def claim_of(result: SchedulingResult, pod_key: str) -> Any:
    return next(c for c in result.new_nodeclaims if pod_key in c.pods)


def term(*expressions: tuple[str, str, list[str]]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": k, "operator": op, "values": v} for k, op, v in expressions]}


# -- requests ---------------------------------------------------------------------------------------


def test_a_gpu_request_picks_a_gpu_type_and_the_cheapest_offering() -> None:
    result = solve([pod("trainer", extended={resources.NVIDIA_GPU: "1"})])
    claim = result.new_nodeclaims[0]
    assert claim.instance_types
    assert all(it.allocatable.get(resources.NVIDIA_GPU, 0) >= 1 for it in claim.instance_types)
    chosen = choose_offering(claim)
    assert chosen is not None and chosen.instance_type == claim.instance_types[0].name


def test_pod_eni_outside_the_allowed_types_explains_with_the_numbers() -> None:
    np = pool("x", [{"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["t3.micro", "t3.small"]}])
    result = solve([pod("web", cpu="100m", memory="64Mi", extended={resources.POD_ENI: "1"})], [np])
    assert not result.new_nodeclaims
    reason = result.unschedulable["default/web"]["x"]
    assert reason.startswith("requests cpu=100m memory=64Mi vpc.amazonaws.com/pod-eni=1; ")
    assert 'no instance type in nodepool "x" allowed by' in reason
    assert "node.kubernetes.io/instance-type In [t3.micro t3.small]" in reason
    assert reason.endswith("offers vpc.amazonaws.com/pod-eni")


def test_a_pod_no_type_fits_creates_no_nodeclaim() -> None:
    result = solve([pod("huge", cpu="2000", memory="1Gi")])
    assert result.new_nodeclaims == []
    reason = result.unschedulable["default/huge"]["default"]
    assert "requests cpu=2k" in reason or "requests cpu=2000" in reason
    assert "has enough cpu (largest allocatable" in reason


def test_init_containers_and_sidecars_size_the_node() -> None:
    p = pod("init", cpu="500m")
    p["spec"]["initContainers"] = [
        {"name": "warm", "resources": {"requests": {"cpu": "7", "memory": "1Gi"}}},
        {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
    ]
    claim = solve([p]).new_nodeclaims[0]
    assert claim.pod_requests["cpu"] == 7000
    assert all(it.allocatable["cpu"] >= 7000 for it in claim.instance_types)


def test_runtime_class_overhead_and_scheduling_are_applied() -> None:
    runtime = {
        "metadata": {"name": "kata"},
        "overhead": {"podFixed": {"cpu": "250m", "memory": "160Mi"}},
        "scheduling": {"nodeSelector": {wk.ARCH: "arm64"}},
    }
    p = pod("sandboxed", cpu="1", runtimeClassName="kata")
    assert apply_runtime_class(p, {"kata": runtime}) is None
    claim = solve([p]).new_nodeclaims[0]
    assert claim.pod_requests["cpu"] == 1250 and claim.pod_requests["memory"] == GI + 160 * (1 << 20)
    assert all(it.labels[wk.ARCH] == "arm64" for it in claim.instance_types)
    assert apply_runtime_class(pod("x", runtimeClassName="gone"), {}) == 'runtimeclass "gone" not found'


def test_max_pods_bounds_pods_per_node() -> None:
    np = pool("tiny", [{"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["t3.micro"]}])
    # t3.micro allocates 4 pods (ENI limited); each pod asks for almost nothing.
    result = solve([pod(f"p{i}", cpu="10m", memory="8Mi") for i in range(9)], [np])
    assert all(len(c.pods) <= 4 for c in result.new_nodeclaims)
    assert sum(len(c.pods) for c in result.new_nodeclaims) == 9
    assert len(result.new_nodeclaims) == 3


# -- node selection ---------------------------------------------------------------------------------


def test_node_selector_pins_zone_and_arch() -> None:
    claim = solve([pod("p", nodeSelector={wk.ZONE: "us-east-1b", wk.ARCH: "arm64"})]).new_nodeclaims[0]
    assert zone_of(claim) == "us-east-1b"
    assert {it.labels[wk.ARCH] for it in claim.instance_types} == {"arm64"}


def test_node_selector_on_an_unknown_label_names_it() -> None:
    result = solve([pod("p", nodeSelector={"team": "a"})])
    reason = result.unschedulable["default/p"]["default"]
    assert 'label "team" does not have known values' in reason and 'nodepool "default"' in reason


def test_required_node_affinity_terms_are_ored_in_order() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    term((wk.ZONE, "In", ["us-west-2a"])),  # not offered here
                    term((wk.ZONE, "In", ["us-east-1c"])),
                ]
            }
        }
    }
    result = solve([pod("p", affinity=affinity)])
    assert zone_of(result.new_nodeclaims[0]) == "us-east-1c"


def test_preferred_node_affinity_is_honoured_then_relaxed() -> None:
    def preferring(name: str, zone: str) -> dict[str, Any]:
        pref = [{"weight": 10, "preference": term((wk.ZONE, "In", [zone]))}]
        return pod(name, affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": pref}})

    result = solve([preferring("a", "us-east-1b"), preferring("b", "eu-west-1a")])
    assert zone_of(claim_of(result, "default/a")) == "us-east-1b"
    # b's preference cannot hold; relaxed, it joins a's node.
    assert not result.unschedulable
    assert "default/b" in claim_of(result, "default/a").pods


def test_nodepool_requirements_bound_what_pods_may_ask() -> None:
    np = pool("amd", [{"key": wk.ARCH, "operator": "In", "values": ["amd64"]}])
    result = solve([pod("p", nodeSelector={wk.ARCH: "arm64"})], [np])
    reason = result.unschedulable["default/p"]["amd"]
    assert 'nodepool "amd"' in reason and "kubernetes.io/arch" in reason and "arm64" in reason


def test_heavier_nodepool_wins_and_reasons_come_per_nodepool() -> None:
    light = pool("light", weight=1)
    heavy = pool("heavy", [{"key": wk.INSTANCE_CATEGORY, "operator": "In", "values": ["r"]}], weight=50)
    claim = solve([pod("p")], [light, heavy]).new_nodeclaims[0]
    assert claim.nodepool == "heavy"
    assert {it.labels[wk.INSTANCE_CATEGORY] for it in claim.instance_types} == {"r"}


# -- taints -----------------------------------------------------------------------------------------


def test_taints_must_be_tolerated_and_startup_taints_are_ignored() -> None:
    gpu = pool("gpu", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    starting = pool("starting", startup_taints=[{"key": "cni", "value": "wait", "effect": "NoSchedule"}])
    result = solve([pod("p")], [gpu])
    assert result.unschedulable["default/p"] == {"gpu": "did not tolerate taint dedicated=gpu:NoSchedule"}
    assert explain(result.unschedulable["default/p"]) == (
        'nodepool "gpu": did not tolerate taint dedicated=gpu:NoSchedule'
    )
    toleration = {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
    assert solve([pod("q", tolerations=[toleration])], [gpu]).new_nodeclaims[0].nodepool == "gpu"
    assert solve([pod("r")], [starting]).new_nodeclaims[0].nodepool == "starting"


def test_prefer_no_schedule_taints_are_avoided_then_tolerated() -> None:
    soft = pool("soft", taints=[{"key": "spare", "value": "yes", "effect": "PreferNoSchedule"}], weight=10)
    plain = pool("plain", weight=1)
    assert solve([pod("p")], [soft, plain]).new_nodeclaims[0].nodepool == "plain"
    # Only the soft pool: the last relaxation tolerates PreferNoSchedule.
    assert solve([pod("p")], [soft]).new_nodeclaims[0].nodepool == "soft"


def test_existing_node_taints_keep_intolerant_pods_off() -> None:
    from serverless_karpenter.scheduling.taints import Taint

    tainted = node("n1", "us-east-1a", taints=[Taint("dedicated", "db", "NoSchedule")])
    result = solve([pod("p")], existing=[tainted])
    assert "n1" not in result.existing and len(result.new_nodeclaims) == 1


# -- host ports -------------------------------------------------------------------------------------


def test_host_ports_never_share_a_node() -> None:
    result = solve(
        [pod(f"p{i}", cpu="100m", host_ports=[8080]) for i in range(3)] + [pod("other", host_ports=[9090])]
    )
    assert len(result.new_nodeclaims) == 3
    for claim in result.new_nodeclaims:
        assert sum(1 for k in claim.pods if k.startswith("default/p")) == 1
    busy = node("n1", "us-east-1a", pods=[pod("bound", cpu="100m", host_ports=[8080])])
    placed = solve([pod("again", cpu="100m", host_ports=[8080]), pod("free", cpu="100m")], existing=[busy])
    assert placed.existing["n1"] == ["default/free"]


# -- limits, minValues, restricted labels -----------------------------------------------------------


def test_limits_hold_across_nodeclaims() -> None:
    np = pool(
        "capped",
        [{"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["m5.xlarge"]}],
        remaining={"cpu": 8000},
    )
    result = solve([pod(f"p{i}", cpu="3") for i in range(3)], [np])
    assert len(result.new_nodeclaims) == 2
    reason = result.unschedulable["default/p2"]["capped"]
    assert (
        reason.startswith('nodepool "capped" limits: remaining cpu=0; ') and "(m5.xlarge) has cpu=4" in reason
    )


def test_min_values_keep_enough_flexibility() -> None:
    flexible = pool(
        "flexible",
        [
            {"key": wk.INSTANCE_FAMILY, "operator": "In", "values": ["m5", "m6i", "c5"], "minValues": 3},
        ],
    )
    claim = solve([pod("p", cpu="3")], [flexible]).new_nodeclaims[0]
    assert len({it.labels[wk.INSTANCE_FAMILY] for it in claim.instance_types}) == 3
    strict = pool(
        "strict",
        [{"key": wk.INSTANCE_FAMILY, "operator": "In", "values": ["m5", "m6i"], "minValues": 3}],
    )
    reason = solve([pod("p", cpu="3")], [strict]).unschedulable["default/p"]["strict"]
    assert "minValues" in reason and "instance-family" in reason and 'nodepool "strict"' in reason


def test_min_values_beyond_what_create_fleet_takes_fail_the_pods_at_plan_time() -> None:
    """Karpenter's TruncateInstanceTypes: a claim is cut to the 60 cheapest types CreateFleet takes; when
    those no longer meet minValues, its pods fail to schedule with the reason (they would otherwise be
    planned and refused at launch, batch after batch)."""
    wide = pool("wide", [{"key": wk.INSTANCE_TYPE, "operator": "Exists", "minValues": 70}])
    planned = solve([pod("p", cpu="1")], [wide])
    assert len(planned.new_nodeclaims[0].instance_types) >= 70  # the scheduler keeps what minValues needs
    result = truncate_instance_types(planned)
    assert result.new_nodeclaims == []
    reason = result.unschedulable["default/p"]["wide"]
    assert "couldn't meet minValues" in reason and f'"{wk.INSTANCE_TYPE}" (60 of 70)' in reason, reason

    enough = pool("enough", [{"key": wk.INSTANCE_TYPE, "operator": "Exists", "minValues": 50}])
    result = truncate_instance_types(solve([pod("p", cpu="1")], [enough]))
    [claim] = result.new_nodeclaims
    assert 50 <= len({it.name for it in claim.instance_types}) <= MAX_INSTANCE_TYPES
    assert "default/p" not in result.unschedulable


def test_restricted_labels_are_rejected() -> None:
    result = solve([pod("p", nodeSelector={wk.HOSTNAME: "node-1"})])
    reason = result.unschedulable["default/p"]["default"]
    assert 'requires label "kubernetes.io/hostname"' in reason and 'nodepool "default"' in reason
    # ... yet an existing node with that hostname takes it.
    assert solve(
        [pod("p", nodeSelector={wk.HOSTNAME: "node-1"})], existing=[node("node-1", "us-east-1a")]
    ).existing
    bad = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "bad"},
        "spec": {
            "template": {
                "metadata": {"labels": {"kubernetes.io/custom": "x"}},
                "spec": {
                    "requirements": [],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"},
                },
            }
        },
    }
    with pytest.raises(ManifestError, match="restricted"):
        parse_manifest(bad)


# -- existing capacity ------------------------------------------------------------------------------


def test_existing_nodes_come_first_then_new_capacity() -> None:
    n1 = node("n1", "us-east-1a", cpu=2500)
    result = solve([pod(f"p{i}") for i in range(4)], existing=[n1])
    assert len(result.existing["n1"]) == 2
    assert sum(len(c.pods) for c in result.new_nodeclaims) == 2


def test_unsupported_volume_states_name_the_volume_per_nodepool() -> None:
    p = pod("db", volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "missing"}}])
    result = solve([p], [pool("a"), pool("b")], volumes=VolumeIndex())
    reasons = result.unschedulable["default/db"]
    assert reasons == {
        "a": 'volume "data": persistentvolumeclaim "default/missing" not found',
        "b": 'volume "data": persistentvolumeclaim "default/missing" not found',
    }


# -- explanations -----------------------------------------------------------------------------------


def test_every_reason_names_the_failing_constraint_and_the_nodepool() -> None:
    from serverless_karpenter.scheduling.volumes import VolumeIndex as Volumes

    tainted = pool("tainted", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    arm = pool("arm", [{"key": wk.ARCH, "operator": "In", "values": ["arm64"]}])
    capped = pool("capped", remaining={"cpu": 0})
    cases = {
        "taint": pod("taint", nodeSelector={wk.ARCH: "amd64"}),
        "huge": pod("huge", cpu="5000"),
        "arch": pod("arch", nodeSelector={wk.ARCH: "amd64"}),
        "label": pod("label", nodeSelector={"team": "a"}),
        "zone": pod("zone", nodeSelector={wk.ZONE: "eu-west-1a"}),
        "volume": pod("volume", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "x"}}]),
        "hostname": pod("hostname", nodeSelector={wk.HOSTNAME: "n1"}),
    }
    result = solve(list(cases.values()), [tainted, arm, capped], volumes=Volumes())
    expected_words = {
        "taint": "did not tolerate taint dedicated=gpu:NoSchedule",
        "huge": "has enough cpu",
        "arch": "kubernetes.io/arch",
        "label": 'label "team" does not have known values',
        "zone": "topology.kubernetes.io/zone",
        "volume": 'persistentvolumeclaim "default/x" not found',
        "hostname": 'requires label "kubernetes.io/hostname"',
    }
    for name, words in expected_words.items():
        reasons = result.unschedulable[f"default/{name}"]
        assert set(reasons) == {"tainted", "arm", "capped"}, name
        line = explain(reasons)
        assert words in line, (name, line)
        for pool_name, reason in reasons.items():
            assert f'nodepool "{pool_name}"' in explain({pool_name: reason})
            assert reason not in ("incompatible", "incompatible requirements", "requirements", "resources")
    capped_reason = result.unschedulable["default/arch"]["capped"]
    assert capped_reason.startswith('nodepool "capped" limits: remaining cpu=0; ')
