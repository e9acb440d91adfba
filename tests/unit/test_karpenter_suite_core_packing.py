"""Ports of Karpenter's scheduling suite (``pkg/controllers/provisioning/scheduling/suite_test.go``):
``Preferential Fallback``, ``Instance Type Compatibility`` and ``Binpacking``, against Karpenter's fake
catalog (``karpenter_suite_helpers_core``)."""

from __future__ import annotations

from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.catalog import Offering
from serverless_karpenter.scheduling.inputs import apply_runtime_class

from tests.builders import container
from tests.unit.karpenter_suite_helpers_core import (
    ALL_CAPACITY_TYPES,
    DEFAULT_TYPES,
    EXOTIC,
    GI,
    FakeType,
    claim_for,
    fake_instance_types,
    node_affinity,
    node_labels,
    nodepool,
    not_scheduled,
    schedule,
    scheduled,
    type_names,
    upod,
)

ZONE = wk.ZONE


def terms(*zones: str) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [z]}]} for z in zones
                ]
            }
        }
    }


def preferences(*items: tuple[int, str, str, list[str]]) -> list[dict[str, Any]]:
    return [
        {"weight": w, "preference": {"matchExpressions": [{"key": k, "operator": op, "values": v}]}}
        for w, k, op, v in items
    ]


def arch_pool(*arches: str, types: Any = DEFAULT_TYPES) -> list:
    return [nodepool(requirements=[{"key": wk.ARCH, "operator": "In", "values": list(arches)}], types=types)]


# -- Preferential Fallback --------------------------------------------------------------------------


def test_the_last_required_term_is_never_relaxed() -> None:
    """Preferential Fallback > Required > should not relax the final term"""
    pools = [
        nodepool(
            requirements=[
                {"key": ZONE, "operator": "In", "values": ["test-zone-1"]},
                {"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["default-instance-type"]},
            ]
        )
    ]
    p = upod("p", affinity=terms("invalid"))
    assert not_scheduled(schedule([p], pools), p)


def test_required_terms_are_tried_in_order_until_one_fits() -> None:
    """Preferential Fallback > Required > should relax multiple terms"""
    p = upod("p", affinity=terms("invalid", "invalid", "test-zone-1", "test-zone-2"))
    assert node_labels(schedule([p]), p)[ZONE] == "test-zone-1"


def test_every_preferred_term_may_be_relaxed() -> None:
    """Preferential Fallback > Preferred > should relax all terms"""
    prefs = preferences((1, ZONE, "In", ["invalid"]), (1, wk.INSTANCE_TYPE, "In", ["invalid"]))
    p = upod("p", affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": prefs}})
    scheduled(schedule([p]), p)


def test_heavier_preferences_are_relaxed_first_to_lighter_ones() -> None:
    """Preferential Fallback > Preferred > should relax to use lighter weights"""
    pools = [
        nodepool(
            requirements=[
                ALL_CAPACITY_TYPES,
                {"key": ZONE, "operator": "In", "values": ["test-zone-1", "test-zone-2"]},
            ]
        )
    ]
    prefs = preferences(
        (100, wk.INSTANCE_TYPE, "In", ["test-zone-3"]),
        (50, ZONE, "In", ["test-zone-2"]),
        (1, ZONE, "In", ["test-zone-1"]),
    )
    p = upod("p", affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": prefs}})
    assert node_labels(schedule([p], pools), p)[ZONE] == "test-zone-2"


def test_a_preference_conflicting_with_the_requirement_is_dropped() -> None:
    """Preferential Fallback > Preferred > should schedule even if preference is conflicting with
    requirement"""
    affinity = terms("test-zone-3")
    affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = preferences(
        (1, ZONE, "NotIn", ["test-zone-3"])
    )
    p = upod("p", affinity=affinity)
    assert node_labels(schedule([p]), p)[ZONE] == "test-zone-3"


def test_self_conflicting_preferences_are_dropped() -> None:
    """Preferential Fallback > Preferred > should schedule even if preference requirements are
    conflicting"""
    p = upod("p", affinity=node_affinity(preferred=[(ZONE, "In", ["invalid"]), (ZONE, "NotIn", ["invalid"])]))
    scheduled(schedule([p]), p)


# -- Instance Type Compatibility --------------------------------------------------------------------


def test_more_cpu_than_any_type_has_is_not_scheduled() -> None:
    """Instance Type Compatibility > should not schedule if requesting more resources than any instance
    type has"""
    p = upod("p", cpu="512")
    assert not_scheduled(schedule([p]), p)


def test_pods_of_different_archs_get_different_nodes() -> None:
    """Instance Type Compatibility > should launch pods with different archs on different instances"""
    pods = [upod("amd", nodeSelector={wk.ARCH: "amd64"}), upod("arm", nodeSelector={wk.ARCH: "arm64"})]
    result = schedule(pods, arch_pool("arm64", "amd64"))
    assert len({scheduled(result, p) for p in pods}) == 2


def test_a_type_outside_the_nodepool_arch_is_excluded() -> None:
    """Instance Type Compatibility > should exclude instance types that are not supported by the pod
    constraints (node affinity/instance type)"""
    p = upod("p", affinity=node_affinity([(wk.INSTANCE_TYPE, "In", ["arm-instance-type"])]))
    assert not_scheduled(schedule([p], arch_pool("amd64")), p)


def test_an_os_only_an_excluded_arch_offers_is_not_scheduled() -> None:
    """Instance Type Compatibility > should exclude instance types that are not supported by the pod
    constraints (node affinity/operating system): only the arm type runs "ios"."""
    types = (
        *DEFAULT_TYPES,
        FakeType("arm-ios-instance-type", cpu=16, memory=128 * GI, arch="arm64", os="ios"),
    )
    p = upod("p", affinity=node_affinity([(wk.OS, "In", ["ios"])]))
    assert not_scheduled(schedule([p], arch_pool("amd64", types=types)), p)


def test_only_an_excluded_arch_has_the_cpu() -> None:
    """Instance Type Compatibility > should exclude instance types that are not supported by the provider
    constraints (arch): a 14-cpu limit (requests default to limits) fits only the arm type."""
    p = upod("p", containers=[{"name": "a", "resources": {"limits": {"cpu": "14"}}}])
    assert not_scheduled(schedule([p], arch_pool("amd64")), p)
    scheduled(schedule([p], arch_pool("amd64", "arm64")), p)


def test_pods_of_different_operating_systems_get_different_nodes() -> None:
    """Instance Type Compatibility > should launch pods with different operating systems on different
    instances (Karpenter's fake types run linux and windows alike; ours carry one OS each, so the catalog
    has a windows twin of the default type)"""
    types = (*DEFAULT_TYPES, FakeType("windows-instance-type", os="windows"))
    pods = [upod("linux", nodeSelector={wk.OS: "linux"}), upod("windows", nodeSelector={wk.OS: "windows"})]
    result = schedule(pods, arch_pool("arm64", "amd64", types=types))
    assert len({scheduled(result, p) for p in pods}) == 2


def test_pods_selecting_different_instance_types_get_different_nodes() -> None:
    """Instance Type Compatibility > should launch pods with different instance type node selectors on
    different instances (the first through the deprecated beta label)"""
    pods = [
        upod("small", nodeSelector={"beta.kubernetes.io/instance-type": "small-instance-type"}),
        upod("default", nodeSelector={wk.INSTANCE_TYPE: "default-instance-type"}),
    ]
    result = schedule(pods, arch_pool("arm64", "amd64"))
    assert len({scheduled(result, p) for p in pods}) == 2
    assert node_labels(result, pods[0])[wk.INSTANCE_TYPE] == "small-instance-type"


def test_pods_selecting_different_zones_get_different_nodes() -> None:
    """Instance Type Compatibility > should launch pods with different zone selectors on different
    instances"""
    pods = [upod("a", nodeSelector={ZONE: "test-zone-1"}), upod("b", nodeSelector={ZONE: "test-zone-2"})]
    result = schedule(pods, arch_pool("arm64", "amd64"))
    assert len({scheduled(result, p) for p in pods}) == 2


GPU1, GPU2 = "karpenter.sh/super-great-gpu", "karpenter.sh/even-better-gpu"


def two_gpu_catalog() -> list:
    types = list(fake_instance_types(5))
    types[0] = FakeType("fake-it-0", 1, 2 * GI, 10, extended={GPU1: 25})
    types[1] = FakeType("fake-it-1", 2, 4 * GI, 20, extended={GPU2: 25})
    return [nodepool(types=types)]


def test_resources_no_single_type_has_together_go_to_different_nodes() -> None:
    """Instance Type Compatibility > should launch pods with resources that aren't on any single instance
    type on different instances"""
    pods = [upod("g1", extended={GPU1: "1"}), upod("g2", extended={GPU2: "1"})]
    result = schedule(pods, two_gpu_catalog())
    assert len({scheduled(result, p) for p in pods}) == 2


def test_a_pod_needing_resources_of_two_types_is_not_scheduled() -> None:
    """Instance Type Compatibility > should fail to schedule a pod with resources requests that aren't on
    a single instance type"""
    p = upod("p", extended={GPU1: "1", GPU2: "1"})
    assert not_scheduled(schedule([p], two_gpu_catalog()), p)


def test_instance_size_labels_filter_types() -> None:
    """Instance Type Compatibility > Provider Specific Labels > should filter instance types that match
    labels (``instance-size`` stands for the fake ``size``)"""
    pods = [
        upod("large", nodeSelector={wk.INSTANCE_SIZE: "large"}),
        upod("small", nodeSelector={wk.INSTANCE_SIZE: "small"}),
    ]
    result = schedule(pods, [nodepool(types=fake_instance_types(5))])
    assert node_labels(result, pods[0])[wk.INSTANCE_TYPE] == "fake-it-4"
    assert node_labels(result, pods[1])[wk.INSTANCE_TYPE] == "fake-it-0"


def test_contradicting_provider_labels_are_not_scheduled() -> None:
    """Instance Type Compatibility > Provider Specific Labels > should not schedule with incompatible
    labels"""
    pods = [
        upod("a", nodeSelector={wk.INSTANCE_SIZE: "large", wk.INSTANCE_TYPE: "fake-it-0"}),
        upod("b", nodeSelector={wk.INSTANCE_SIZE: "small", wk.INSTANCE_TYPE: "fake-it-4"}),
    ]
    result = schedule(pods, [nodepool(types=fake_instance_types(5))])
    assert not_scheduled(result, pods[0]) and not_scheduled(result, pods[1])


def test_exists_on_a_label_only_some_types_have_picks_one_of_them() -> None:
    """Instance Type Compatibility > Provider Specific Labels > should schedule optional labels"""
    p = upod("p", affinity=node_affinity([(EXOTIC, "Exists", [])]))
    labels = node_labels(schedule([p], [nodepool(types=fake_instance_types(5))]), p)
    assert EXOTIC in labels and labels[wk.INSTANCE_TYPE] == "fake-it-4"


def test_does_not_exist_on_a_label_only_some_types_have_avoids_them() -> None:
    """Instance Type Compatibility > Provider Specific Labels > should schedule without optional labels if
    disallowed"""
    p = upod("p", affinity=node_affinity([(EXOTIC, "DoesNotExist", [])]))
    labels = node_labels(schedule([p], [nodepool(requirements=[], types=fake_instance_types(5))]), p)
    assert EXOTIC not in labels


# -- Binpacking -------------------------------------------------------------------------------------


def test_a_small_pod_gets_the_smallest_type() -> None:
    """Binpacking > should schedule a small pod on the smallest instance"""
    p = upod("p", memory="100M")
    assert node_labels(schedule([p]), p)[wk.INSTANCE_TYPE] == "small-instance-type"


def test_a_small_pod_gets_the_smallest_type_that_fits() -> None:
    """Binpacking > should schedule a small pod on the smallest possible instance type"""
    p = upod("p", memory="2000M")
    assert node_labels(schedule([p]), p)[wk.INSTANCE_TYPE] == "small-instance-type"


def test_runtime_class_overhead_sizes_the_node() -> None:
    """Binpacking > should take pod runtime class into consideration"""
    runtime = {
        "metadata": {"name": "my-runtime-class"},
        "handler": "default",
        "overhead": {"podFixed": {"cpu": "2"}},
    }
    p = upod("p", cpu="1", runtimeClassName="my-runtime-class")
    assert apply_runtime_class(p, {"my-runtime-class": runtime}) is None
    assert node_labels(schedule([p]), p)[wk.INSTANCE_TYPE] == "default-instance-type"


def test_several_small_pods_share_the_smallest_type() -> None:
    """Binpacking > should schedule multiple small pods on the smallest possible instance type"""
    pods = [upod(f"p{i}", memory="10M") for i in range(5)]
    result = schedule(pods)
    assert len({scheduled(result, p) for p in pods}) == 1
    assert all(node_labels(result, p)[wk.INSTANCE_TYPE] == "small-instance-type" for p in pods)


def test_full_nodes_lead_to_new_ones() -> None:
    """Binpacking > should create new nodes when a node is at capacity"""
    pods = [upod(f"p{i}", memory="1.8G", nodeSelector={wk.ARCH: "amd64"}) for i in range(40)]
    result = schedule(pods)
    assert len({scheduled(result, p) for p in pods}) == 20
    assert all(node_labels(result, p)[wk.INSTANCE_TYPE] == "default-instance-type" for p in pods)


def test_small_pods_fill_the_gaps_large_ones_leave() -> None:
    """Binpacking > should pack small and large pods together"""
    pods = [upod(f"l{i}", memory="1.8G", nodeSelector={wk.ARCH: "amd64"}) for i in range(40)]
    pods += [upod(f"s{i}", memory="400M", nodeSelector={wk.ARCH: "amd64"}) for i in range(20)]
    result = schedule(pods)
    assert len({scheduled(result, p) for p in pods}) == 20
    assert all(node_labels(result, p)[wk.INSTANCE_TYPE] == "default-instance-type" for p in pods)


def test_a_small_pod_does_not_wait_for_the_large_ones_node() -> None:
    """Binpacking > should pack nodes tightly"""
    pods = [upod("big", cpu="4.5"), upod("small", cpu="1")]
    result = schedule(pods, [nodepool(types=fake_instance_types(5))])
    assert scheduled(result, pods[0]) != scheduled(result, pods[1])
    assert node_labels(result, pods[0])[wk.INSTANCE_TYPE] != node_labels(result, pods[1])[wk.INSTANCE_TYPE]


def test_a_zero_request_of_an_unknown_resource_is_ignored() -> None:
    """Binpacking > should handle zero-quantity resource requests"""
    p = upod("p", extended={"foo.com/weird-resources": "0"})
    scheduled(schedule([p]), p)


def test_more_memory_than_any_type_is_not_scheduled() -> None:
    """Binpacking > should not schedule pods that exceed every instance type's capacity"""
    p = upod("p", memory="2Ti")
    assert not_scheduled(schedule([p]), p)


def test_the_pods_limit_per_node_opens_new_nodes() -> None:
    """Binpacking > should create new nodes when a node is at capacity due to pod limits per node"""
    pods = [upod(f"p{i}", cpu="1m", memory="1m", nodeSelector={wk.ARCH: "amd64"}) for i in range(25)]
    result = schedule(pods)
    assert len({scheduled(result, p) for p in pods}) == 5
    assert all(node_labels(result, p)[wk.INSTANCE_TYPE] == "small-instance-type" for p in pods)


def test_init_container_requests_size_the_node() -> None:
    """Binpacking > should take into account initContainer resource requests when binpacking"""
    p = upod("p", cpu="1", memory="1Gi", initContainers=[container("2", "1Gi", name="init")])
    assert node_labels(schedule([p]), p)[wk.INSTANCE_TYPE] == "default-instance-type"


def test_an_init_container_larger_than_any_type_is_not_scheduled() -> None:
    """Binpacking > should not schedule pods when initContainer resource requests are greater than
    available instance types"""
    p = upod("p", cpu="1", memory="1Gi", initContainers=[container("2", "1Ti", name="init")])
    assert not_scheduled(schedule([p]), p)


def test_every_fitting_type_is_kept_and_the_cheapest_launched() -> None:
    """Binpacking > should select for valid instance types, regardless of price"""

    def priced(name: str, cpu: int, price: float) -> FakeType:
        offering = (Offering("test-zone-1a", "on-demand", price, True),)
        return FakeType(name, cpu=cpu, memory=cpu * GI, offering_list=offering)

    types = [priced("medium", 2, 3.0), priced("small", 1, 2.0), priced("large", 4, 1.0)]
    p = upod("p", containers=[{"name": "a", "resources": {"limits": {"cpu": "1m", "memory": "1Mi"}}}])
    result = schedule([p], [nodepool(types=types)])
    assert node_labels(result, p)[wk.INSTANCE_TYPE] == "large"
    assert type_names(claim_for(result, p)) == {"small", "medium", "large"}
