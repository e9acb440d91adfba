"""Karpenter's topology suite (pkg/controllers/provisioning/scheduling/topology_test.go), second part: the
Topology > Pod Affinity/Anti-Affinity Its, then the Taints and Topology with Volume Requirements Describes.
Each test names the Describe > Context > It it ports; the harness is karpenter_suite_helpers_topology."""

from __future__ import annotations

from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.scheduling.volumes import VolumeIndex

from tests.unit.karpenter_suite_helpers_topology import (
    LABELS,
    ZONE_1,
    ZONE_2,
    ZONE_3,
    FakeCluster,
    affinity_term,
    nodepool,
    pending,
    requirement,
    tsc,
    values,
    weighted,
)

S2 = {"security": "s2"}


def node_name(pod: dict[str, Any]) -> str:
    name = pod["spec"].get("nodeName")
    assert name, f"{pod['metadata']['name']} is not scheduled"
    return str(name)


# -- Topology > Pod Affinity/Anti-Affinity ----------------------------------------------------------


def test_empty_pod_affinity_and_anti_affinity_schedule() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should schedule a pod with empty pod affinity and
    anti-affinity"""
    cluster = FakeCluster()
    pod = pending(
        affinity={
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []},
        }
    )
    cluster.provision([nodepool()], pod)
    assert cluster.scheduled(pod[0])


def test_hostname_pod_affinity_joins_the_target_among_spread_pods() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should respect pod affinity (hostname)"""
    cluster = FakeCluster()
    target = pending(labels=S2)
    follower = pending(pod_affinity=[affinity_term(wk.HOSTNAME, S2)])
    cluster.provision([nodepool()], pending(10, labels=LABELS, spread=[tsc(wk.HOSTNAME)]) + target + follower)
    assert node_name(target[0]) == node_name(follower[0])


def test_arch_pod_affinity_shares_the_arch_but_not_the_node() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should respect pod affinity (arch)"""
    cluster = FakeCluster()
    by_host = [tsc(wk.HOSTNAME, selector=S2)]
    first = pending(labels=S2, spread=by_host, cpu="2", node_selector={wk.ARCH: "arm64"})
    second = pending(labels=S2, spread=by_host, cpu="1", pod_affinity=[affinity_term(wk.ARCH, S2)])
    cluster.provision([nodepool()], first + second)
    assert cluster.labels_of(first[0])[wk.ARCH] == cluster.labels_of(second[0])[wk.ARCH]
    assert node_name(first[0]) != node_name(second[0])


def test_hostname_self_affinity_keeps_pods_on_one_node() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should respect self pod affinity (hostname)"""
    cluster = FakeCluster()
    pods = pending(3, labels=S2, pod_affinity=[affinity_term(wk.HOSTNAME, S2)])
    cluster.provision([nodepool()], pods)
    assert len({node_name(p) for p in pods}) == 1


def test_hostname_self_affinity_takes_only_the_first_empty_domain() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should respect self pod affinity for first empty topology
    domain only (hostname)"""
    cluster = FakeCluster()
    pods = pending(10, labels=S2, pod_affinity=[affinity_term(wk.HOSTNAME, S2)])
    cluster.provision([nodepool()], pods)
    placed = [p for p in pods if cluster.scheduled(p)]
    # A node holds 5 pods: one node with 5, and 5 left over.
    assert len(placed) == 5 and len({node_name(p) for p in placed}) == 1
    again = pending(10, labels=S2, pod_affinity=[affinity_term(wk.HOSTNAME, S2)])
    cluster.provision([nodepool()], again)
    assert not any(cluster.scheduled(p) for p in again)


def test_hostname_self_affinity_does_not_open_a_second_domain_in_other_zones() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should respect self pod affinity for first empty topology
    domain only (hostname/constrained zones)"""
    cluster = FakeCluster()
    self_affinity = [affinity_term(wk.HOSTNAME, S2)]
    first = pending(labels=S2, node_selector={wk.ZONE: ZONE_1}, pod_affinity=self_affinity)
    cluster.provision([nodepool()], first)
    pods = pending(
        10,
        labels=S2,
        node_requirements=[requirement(wk.ZONE, "In", ZONE_2, ZONE_3)],
        pod_affinity=self_affinity,
    )
    cluster.provision([nodepool()], pods)
    assert not any(cluster.scheduled(p) for p in pods)


def test_zonal_self_affinity_keeps_pods_together() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should respect self pod affinity (zone)"""
    cluster = FakeCluster()
    pods = pending(3, labels=S2, pod_affinity=[affinity_term(wk.ZONE, S2)])
    cluster.provision([nodepool()], pods)
    assert len({node_name(p) for p in pods}) == 1


def test_zonal_self_affinity_within_a_required_zone() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should respect self pod affinity (zone w/ constraint)"""
    cluster = FakeCluster()
    pods = pending(
        3,
        labels=S2,
        pod_affinity=[affinity_term(wk.ZONE, S2)],
        node_requirements=[requirement(wk.ZONE, "In", ZONE_3)],
    )
    cluster.provision([nodepool()], pods)
    assert len({node_name(p) for p in pods}) == 1
    assert all(cluster.labels_of(p)[wk.ZONE] == ZONE_3 for p in pods)


def test_self_affine_pods_with_disjoint_zones_open_a_node_each() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should allow two nodes to be created when two pods with
    matching affinities have incompatible selectors"""
    cluster = FakeCluster()
    s1 = {"security": "s1"}
    first = pending(
        labels=s1,
        pod_affinity=[affinity_term(wk.ZONE, s1)],
        node_requirements=[requirement(wk.ZONE, "In", ZONE_2)],
    )
    second = pending(
        labels=s1,
        pod_affinity=[affinity_term(wk.ZONE, s1)],
        node_requirements=[requirement(wk.ZONE, "In", ZONE_3)],
    )
    cluster.provision([nodepool()], first + second)
    assert cluster.scheduled(first[0]) and cluster.scheduled(second[0])
    assert cluster.labels_of(first[0])[wk.ZONE] == ZONE_2
    assert cluster.labels_of(second[0])[wk.ZONE] == ZONE_3
    assert node_name(first[0]) != node_name(second[0])


def test_preferred_pod_affinity_to_no_pod_is_dropped() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should allow violation of preferred pod affinity"""
    cluster = FakeCluster()
    hopeful = pending(preferred_pod_affinity=[weighted(affinity_term(wk.HOSTNAME, S2))])
    cluster.provision([nodepool()], pending(10, labels=LABELS, spread=[tsc(wk.HOSTNAME)]) + hopeful)
    assert cluster.scheduled(hopeful[0])


def test_preferred_pod_anti_affinity_that_cannot_hold_is_dropped() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should allow violation of preferred pod anti-affinity"""
    cluster = FakeCluster()
    avoiding = pending(10, preferred_pod_anti_affinity=[weighted(affinity_term(wk.ZONE, LABELS))])
    cluster.provision([nodepool()], pending(3, labels=LABELS, spread=[tsc()]) + avoiding)
    assert all(cluster.scheduled(p) for p in avoiding)


def test_hostname_anti_affinity_separates_nodes_whatever_the_order() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should separate nodes using simple pod anti-affinity on
    hostname"""
    cluster = FakeCluster()
    for _ in range(10):
        target = pending(labels=S2)
        avoider = pending(pod_anti_affinity=[affinity_term(wk.HOSTNAME, S2)])
        cluster.provision([nodepool()], avoider + target)
        assert node_name(target[0]) != node_name(avoider[0])


def _zone_pods(term_kind: str, labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One 2-cpu pod pinned to each zone, with the given kind of zonal anti-affinity to S2 pods."""
    term = affinity_term(wk.ZONE, S2)
    kwargs: dict[str, Any] = {
        "pod_anti_affinity": [term] if term_kind == "required" else [],
        "preferred_pod_anti_affinity": [weighted(term, 10)] if term_kind == "preferred" else [],
    }
    return [
        p
        for zone in (ZONE_1, ZONE_2, ZONE_3)
        for p in pending(labels=labels, cpu="2", node_selector={wk.ZONE: zone}, **kwargs)
    ]


def test_zonal_anti_affinity_with_a_target_in_every_zone_is_unschedulable() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should not violate pod anti-affinity on zone"""
    cluster = FakeCluster()
    targets = _zone_pods("none", S2)
    avoider = pending(pod_anti_affinity=[affinity_term(wk.ZONE, S2)])
    cluster.provision([nodepool()], targets + avoider)
    assert all(cluster.scheduled(p) for p in targets)
    assert not cluster.scheduled(avoider[0])


def test_zonal_anti_affinity_to_a_target_whose_zone_is_undecided_waits() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should not violate pod anti-affinity on zone (other schedules
    first)"""
    cluster = FakeCluster()
    target = pending(labels=S2, cpu="2")
    avoider = pending(pod_anti_affinity=[affinity_term(wk.ZONE, S2)])
    cluster.provision([nodepool()], target + avoider)
    assert cluster.scheduled(target[0])
    assert not cluster.scheduled(avoider[0])


def test_arch_anti_affinity_picks_the_other_arch() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should not violate pod anti-affinity (arch)"""
    cluster = FakeCluster()
    by_host = [tsc(wk.HOSTNAME, selector=S2)]
    first = pending(labels=S2, spread=by_host, cpu="2", node_selector={wk.ARCH: "arm64"})
    second = pending(labels=S2, spread=by_host, cpu="1", pod_anti_affinity=[affinity_term(wk.ARCH, S2)])
    cluster.provision([nodepool()], first + second)
    assert cluster.labels_of(first[0])[wk.ARCH] != cluster.labels_of(second[0])[wk.ARCH]


def test_preferred_zonal_anti_affinity_of_others_does_not_block_a_pod() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should violate preferred pod anti-affinity on zone (inverse)"""
    cluster = FakeCluster()
    guards = _zone_pods("preferred")
    target = pending(labels=S2)
    cluster.provision([nodepool()], guards + target)
    assert all(cluster.scheduled(p) for p in guards)
    assert cluster.scheduled(target[0])


def test_required_zonal_anti_affinity_of_others_blocks_a_pod_in_every_zone() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should not violate pod anti-affinity on zone (inverse)"""
    cluster = FakeCluster()
    guards = _zone_pods("required")
    target = pending(labels=S2)
    cluster.provision([nodepool()], guards + target)
    assert all(cluster.scheduled(p) for p in guards)
    assert not cluster.scheduled(target[0])


def test_zonal_anti_affinity_of_an_undecided_pod_never_shares_its_zone() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should not violate pod anti-affinity on zone (Schrödinger)

    Beyond Karpenter (docs/karpenter-compatibility.md): Karpenter keeps the target for the next batch,
    since the first pod's zone is undecided; our claim commits to a zone, so both place in one batch,
    in different zones."""
    cluster = FakeCluster()
    anywhere = pending(cpu="2", pod_anti_affinity=[affinity_term(wk.ZONE, S2)])
    target = pending(labels=S2)
    cluster.provision([nodepool()], anywhere + target)
    assert cluster.scheduled(anywhere[0]) and cluster.scheduled(target[0])
    assert cluster.labels_of(anywhere[0])[wk.ZONE] != cluster.labels_of(target[0])[wk.ZONE]


def test_required_zonal_anti_affinity_of_running_pods_blocks_a_pod() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should not violate pod anti-affinity on zone (inverse
    w/existing nodes)"""
    cluster = FakeCluster()
    guards = _zone_pods("required")
    cluster.provision([nodepool()], guards)
    assert all(cluster.scheduled(p) for p in guards)
    target = pending(labels=S2)
    cluster.provision([nodepool()], target)
    assert not cluster.scheduled(target[0])


def test_preferred_zonal_anti_affinity_of_running_pods_does_not_block_a_pod() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should violate preferred pod anti-affinity on zone (inverse
    w/existing nodes)"""
    cluster = FakeCluster()
    guards = _zone_pods("preferred")
    cluster.provision([nodepool()], guards)
    assert all(cluster.scheduled(p) for p in guards)
    target = pending(labels=S2)
    cluster.provision([nodepool()], target)
    assert cluster.scheduled(target[0])


def test_a_pod_affinity_preference_gives_way_to_a_required_spread() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should allow violation of a pod affinity preference with a
    conflicting required constraint"""
    cluster = FakeCluster()
    target = pending(labels=S2)
    pods = pending(
        3,
        labels=LABELS,
        spread=[tsc(wk.HOSTNAME)],
        preferred_pod_affinity=[weighted(affinity_term(wk.HOSTNAME, S2))],
    )
    cluster.provision([nodepool()], pods + target)
    assert all(cluster.scheduled(p) for p in [*pods, *target])
    assert values(cluster.skew(wk.HOSTNAME, namespace=None)) == [1, 1, 1]


def test_zonal_self_anti_affinity_takes_every_zone_in_one_batch() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should support pod anti-affinity with a zone topology

    Beyond Karpenter (docs/karpenter-compatibility.md): Karpenter takes one zone per batch ([1], [1, 1],
    [1, 1, 1]); our claims commit to a zone, so the first batch fills all three and no later one adds."""
    cluster = FakeCluster()
    for _ in range(2):
        pods = pending(3, labels=S2, pod_anti_affinity=[affinity_term(wk.ZONE, S2)])
        cluster.provision([nodepool()], pods)
        assert values(cluster.skew(wk.ZONE, None)) == [1, 1, 1]


def test_pod_affinity_to_no_pod_is_unschedulable() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should not schedule pods with affinity to a non-existent pod"""
    cluster = FakeCluster()
    pods = pending(10, pod_affinity=[affinity_term(wk.ZONE, S2)])
    cluster.provision([nodepool()], pods)
    assert not any(cluster.scheduled(p) for p in pods)


def test_zonal_pod_affinity_waits_for_an_unconstrained_target_to_land() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should support pod affinity with zone topology (unconstrained
    target)"""
    cluster = FakeCluster()
    target = pending(labels=S2)
    followers = pending(10, pod_affinity=[affinity_term(wk.ZONE, S2)])
    cluster.provision([nodepool()], followers + target)
    assert not any(cluster.scheduled(p) for p in followers)
    assert values(cluster.skew(wk.ZONE, None)) == [1]
    cluster.provision([nodepool()], followers)
    assert all(cluster.scheduled(p) for p in followers)
    assert values(cluster.skew(wk.ZONE, None)) == [11]


def test_zonal_pod_affinity_follows_a_constrained_target_in_the_same_batch() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should support pod affinity with zone topology (constrained
    target)"""
    cluster = FakeCluster()
    target = pending(labels=S2, node_requirements=[requirement(wk.ZONE, "In", ZONE_1)])
    followers = pending(10, pod_affinity=[affinity_term(wk.ZONE, S2)])
    cluster.provision([nodepool()], followers + target)
    assert values(cluster.skew(wk.ZONE, None)) == [11]


def test_a_chain_of_hostname_affinities_schedules() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should handle multiple dependent affinities"""
    db, web, cache, ui = ({"type": kind, "spread": "spread"} for kind in ("db", "web", "cache", "ui"))
    for _ in range(50):
        cluster = FakeCluster()
        pods = (
            pending(labels=db)
            + pending(labels=web, pod_affinity=[affinity_term(wk.HOSTNAME, db)])
            + pending(labels=cache, pod_affinity=[affinity_term(wk.HOSTNAME, web)])
            + pending(labels=ui, pod_affinity=[affinity_term(wk.HOSTNAME, cache)])
        )
        cluster.provision([nodepool()], pods)
        assert all(cluster.scheduled(p) for p in pods)


def test_an_unsatisfiable_affinity_ends_unscheduled() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should fail to schedule pods with unsatisfiable dependencies"""
    cluster = FakeCluster()
    pod = pending(
        labels={"type": "db", "spread": "spread"}, pod_affinity=[affinity_term(wk.HOSTNAME, {"type": "web"})]
    )
    cluster.provision([nodepool()], pod)
    assert not cluster.scheduled(pod[0])


def _namespace_case(
    term: dict[str, Any], namespace: str, ns_labels: dict[str, str] | None = None
) -> tuple[Any, ...]:
    cluster = FakeCluster(namespaces={namespace: ns_labels or {}, "default": {}})
    target = pending(labels=S2, namespace=namespace)
    follower = pending(pod_affinity=[term])
    cluster.provision([nodepool()], pending(10, labels=LABELS, spread=[tsc(wk.HOSTNAME)]) + target + follower)
    return cluster, target[0], follower[0]


def test_pod_affinity_does_not_see_pods_in_other_namespaces() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should filter pod affinity topologies by namespace, no matching
    pods"""
    cluster, target, follower = _namespace_case(affinity_term(wk.HOSTNAME, S2), "other-ns-no-match")
    assert cluster.scheduled(target)
    assert not cluster.scheduled(follower)


def test_pod_affinity_sees_pods_in_listed_namespaces() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should filter pod affinity topologies by namespace, matching
    pods namespace list"""
    term = affinity_term(wk.HOSTNAME, S2, namespaces=["other-ns-list"])
    _, target, follower = _namespace_case(term, "other-ns-list")
    assert node_name(target) == node_name(follower)


def test_pod_affinity_with_an_empty_namespace_selector_sees_every_namespace() -> None:
    """Topology > Pod Affinity/Anti-Affinity > should filter pod affinity topologies by namespace, empty
    namespace selector"""
    term = affinity_term(wk.HOSTNAME, S2, namespaceSelector={"matchLabels": {}})
    _, target, follower = _namespace_case(term, "empty-ns-selector", {"foo": "bar"})
    assert node_name(target) == node_name(follower)


# -- Taints -----------------------------------------------------------------------------------------


def test_launched_nodes_carry_the_nodepool_taints() -> None:
    """Taints > should taint nodes with NodePool taints"""
    cluster = FakeCluster()
    taint = {"key": "test", "value": "bar", "effect": "NoSchedule"}
    pod = pending(tolerations=[{"effect": "NoSchedule", "operator": "Exists"}])
    cluster.provision([nodepool(taints=[taint])], pod)
    node = cluster.node_of(pod[0])
    assert node is not None and taint in node["spec"]["taints"]


def test_only_pods_tolerating_the_nodepool_taint_schedule() -> None:
    """Taints > should schedule pods that tolerate NodePool constraints"""
    cluster = FakeCluster()
    np = nodepool(taints=[{"key": "test-key", "value": "test-value", "effect": "NoSchedule"}])
    tolerant = pending(
        tolerations=[{"key": "test-key", "operator": "Exists", "effect": "NoSchedule"}]
    ) + pending(
        tolerations=[{"key": "test-key", "value": "test-value", "operator": "Equal", "effect": "NoSchedule"}]
    )
    cluster.provision([np], tolerant)
    assert all(cluster.scheduled(p) for p in tolerant)
    intolerant = (
        pending()
        + pending(tolerations=[{"key": "invalid", "operator": "Exists"}])
        + pending(tolerations=[{"key": "test-key", "operator": "Equal", "effect": "NoSchedule"}])
    )
    cluster.provision([np], intolerant)
    assert not any(cluster.scheduled(p) for p in intolerant)


def test_startup_taints_need_no_toleration() -> None:
    """Taints > should provision nodes with taints and schedule pods if the taint is only a startup taint"""
    cluster = FakeCluster()
    np = nodepool(
        startup_taints=[{"key": "ignore-me", "value": "nothing-to-see-here", "effect": "NoSchedule"}]
    )
    pod = pending()
    cluster.provision([np], pod)
    assert cluster.scheduled(pod[0])


def test_an_exists_toleration_generates_no_taint() -> None:
    """Taints > should not generate taints for OpExists"""
    cluster = FakeCluster()
    pod = pending(tolerations=[{"key": "test-key", "operator": "Exists", "effect": "NoExecute"}])
    cluster.provision([nodepool()], pod)
    node = cluster.node_of(pod[0])
    # Karpenter's one taint is its unregistered taint, which its node starts with; we add none at all.
    assert node is not None and node["spec"]["taints"] == []


# -- Topology with Volume Requirements --------------------------------------------------------------


def test_a_volume_zone_does_not_narrow_the_spread_domains_min_domains_counts() -> None:
    """Topology with Volume Requirements > should schedule pod with PVC and TSC minDomains=3 when pods are
    spread across 3 zones"""
    term = {"matchExpressions": [{"key": wk.ZONE, "operator": "In", "values": [ZONE_1]}]}
    pv = {
        "metadata": {"name": "test-pv"},
        "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [term]}}},
    }
    pvc = {
        "metadata": {
            "name": "test-pvc",
            "namespace": "default",
            "annotations": {"pv.kubernetes.io/bind-completed": "yes"},
        },
        "spec": {"volumeName": "test-pv"},
    }
    cluster = FakeCluster(volumes=VolumeIndex.build([pvc], [pv], []))
    app = {"app": "test"}
    constraint = tsc(selector=app, minDomains=3)
    np = nodepool(requirements=[requirement(wk.CAPACITY_TYPE, "In", "on-demand")])
    first = pending(3, labels=app, spread=[constraint])
    cluster.provision([np], first)
    assert all(cluster.scheduled(p) for p in first)
    assert values(cluster.skew(wk.ZONE, app)) == [1, 1, 1]
    claimant = pending(
        labels=app,
        spread=[constraint],
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "test-pvc"}}],
    )
    cluster.provision([np], claimant)
    assert cluster.labels_of(claimant[0])[wk.ZONE] == ZONE_1
    assert values(cluster.skew(wk.ZONE, app)) == [1, 1, 2]


# -- Topology > DefaultConstraints (newer than v1.14) -----------------------------------------------


def test_without_default_constraints_unconstrained_owned_pods_share_a_node() -> None:
    """Topology > DefaultConstraints > should be a no-op when no default constraints are configured (newer
    than v1.14: we have no defaultConstraints setting, so this is the only one of its Its that holds)"""
    cluster = FakeCluster()
    pods = pending(3, labels=LABELS, owner="ReplicaSet")
    cluster.provision([nodepool()], pods)
    assert len({node_name(p) for p in pods}) == 1
