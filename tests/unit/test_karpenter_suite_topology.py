"""Karpenter's topology suite (pkg/controllers/provisioning/scheduling/topology_test.go), It by It, in our own
words: topology spread by zone, hostname, capacity type and custom labels, and their node inclusion policies.
Pod affinity, the default constraints, taints and volumes are in test_karpenter_suite_topology_affinity.py.

Each test names the Describe > Context > It it ports. The harness (karpenter_suite_helpers_topology) is a
small analogue of the suite's: the fake provider's instance types in test-zone-1..3 (spot in zones 1 and 2
only), and a cluster that keeps what each provisioning launches.
"""

from __future__ import annotations

import pytest
from serverless_karpenter.api import labels as wk

from tests.unit.karpenter_suite_helpers_topology import (
    CAPACITY_TYPE_EXISTS,
    LABELS,
    ON_DEMAND,
    SPOT,
    ZONE_1,
    ZONE_2,
    ZONE_3,
    FakeCluster,
    assorted_types,
    max_skew,
    nodepool,
    pending,
    requirement,
    tsc,
    values,
)


def zones(*names: str) -> list[dict[str, object]]:
    return [requirement(wk.ZONE, "In", *names)]


def capacity_types(*names: str) -> list[dict[str, object]]:
    return [requirement(wk.CAPACITY_TYPE, "In", *names)]


# -- Topology ---------------------------------------------------------------------------------------


def test_unknown_topology_key_leaves_the_pod_unschedulable() -> None:
    """Topology > should ignore unknown topology keys"""
    cluster = FakeCluster()
    spread, plain = pending(labels=LABELS, spread=[tsc("unknown")]), pending()
    cluster.provision([nodepool()], spread + plain)
    assert not cluster.scheduled(spread[0])
    assert cluster.scheduled(plain[0])


def test_a_selector_no_pod_can_match_does_not_spread() -> None:
    """Topology > should not spread an invalid label selector"""
    cluster = FakeCluster()
    constraint = tsc(selector={"app.kubernetes.io/name": "{{ zqfmgb }}"})
    cluster.provision([nodepool()], pending(2, labels=LABELS, spread=[constraint]))
    assert values(cluster.skew(wk.ZONE, None)) == [2]


def test_a_spread_without_a_label_selector_does_not_spread() -> None:
    """Topology > should not spread when a nil label selector is defined"""
    cluster = FakeCluster()
    cluster.provision([nodepool()], pending(2, labels=LABELS, spread=[tsc(selector=None)]))
    assert values(cluster.skew(wk.ZONE, None)) == [2]


# -- Topology > Zonal -------------------------------------------------------------------------------


def test_zonal_spread_balances_with_match_labels() -> None:
    """Topology > Zonal > should balance pods across zones (match labels)"""
    cluster = FakeCluster()
    cluster.provision([nodepool()], pending(4, labels=LABELS, spread=[tsc()]))
    assert values(cluster.skew(wk.ZONE)) == [1, 1, 2]


def test_zonal_spread_balances_with_match_expressions() -> None:
    """Topology > Zonal > should balance pods across zones (match expressions)"""
    constraint = tsc(selector=None)
    constraint["labelSelector"] = {
        "matchExpressions": [{"key": "test", "operator": "In", "values": ["test"]}]
    }
    cluster = FakeCluster()
    cluster.provision([nodepool()], pending(4, labels=LABELS, spread=[constraint]))
    assert values(cluster.skew(wk.ZONE)) == [1, 1, 2]


def test_zonal_spread_within_the_nodepool_zones() -> None:
    """Topology > Zonal > should respect NodePool zonal constraints"""
    cluster = FakeCluster()
    cluster.provision(
        [nodepool(requirements=zones(ZONE_1, ZONE_2, ZONE_3))], pending(4, labels=LABELS, spread=[tsc()])
    )
    assert values(cluster.skew(wk.ZONE)) == [1, 1, 2]


def test_zonal_spread_over_a_subset_of_zones_by_requirements() -> None:
    """Topology > Zonal > should respect NodePool zonal constraints (subset) with requirements"""
    cluster = FakeCluster()
    cluster.provision(
        [nodepool(requirements=zones(ZONE_1, ZONE_2))], pending(4, labels=LABELS, spread=[tsc()])
    )
    assert cluster.skew(wk.ZONE) == {ZONE_1: 2, ZONE_2: 2}


def test_zonal_spread_over_a_zone_the_nodepool_labels() -> None:
    """Topology > Zonal > should respect NodePool zonal constraints (subset) with labels"""
    cluster = FakeCluster()
    np = nodepool(labels={wk.ZONE: ZONE_1})
    cluster.provision([np], pending(4, labels=LABELS, spread=[tsc()]))
    assert cluster.skew(wk.ZONE) == {ZONE_1: 4}


def test_zonal_spread_over_nodepool_requirements_and_labels() -> None:
    """Topology > Zonal > should respect NodePool zonal constraints (subset) with requirements and labels"""
    cluster = FakeCluster()
    np = nodepool(requirements=zones(ZONE_1, ZONE_2), labels={wk.ZONE: ZONE_1})
    cluster.provision([np], pending(4, labels=LABELS, spread=[tsc()]))
    assert cluster.skew(wk.ZONE) == {ZONE_1: 4}


def test_zonal_spread_over_zones_labelled_by_two_nodepools() -> None:
    """Topology > Zonal > should respect NodePool zonal constraints (subset) with labels across NodePools"""
    cluster = FakeCluster()
    first = nodepool("a", zones(ZONE_1, ZONE_2), labels={wk.ZONE: ZONE_1})
    second = nodepool("b", labels={wk.ZONE: ZONE_2})
    cluster.provision([first, second], pending(4, labels=LABELS, spread=[tsc()]))
    assert cluster.skew(wk.ZONE) == {ZONE_1: 2, ZONE_2: 2}


def test_zonal_spread_counts_a_pod_in_a_zone_the_nodepool_no_longer_offers() -> None:
    """Topology > Zonal > should respect NodePool zonal constraints (existing pod)"""
    cluster = FakeCluster()
    first = pending(labels=LABELS, cpu="1.1", node_selector={wk.ZONE: ZONE_3})
    cluster.provision([nodepool()], first)
    assert cluster.scheduled(first[0])
    cluster.provision(
        [nodepool(requirements=zones(ZONE_1, ZONE_2))], pending(6, labels=LABELS, cpu="1.1", spread=[tsc()])
    )
    # zone 3 holds one matching pod: zones 1 and 2 may take two each before maxSkew 1 is exceeded.
    assert cluster.skew(wk.ZONE) == {ZONE_1: 2, ZONE_2: 2, ZONE_3: 1}


def test_zonal_spread_uses_a_non_minimum_domain_when_it_is_all_there_is() -> None:
    """Topology > Zonal > should schedule to the non-minimum domain if its all that's available"""
    cluster = FakeCluster()
    constraint = tsc(max_skew=5)
    for zone in (ZONE_1, ZONE_2):
        cluster.provision(
            [nodepool(requirements=zones(zone))], pending(labels=LABELS, cpu="1.1", spread=[constraint])
        )
    assert values(cluster.skew(wk.ZONE)) == [1, 1]
    cluster.provision(
        [nodepool(requirements=zones(ZONE_3))], pending(10, labels=LABELS, cpu="1.1", spread=[constraint])
    )
    assert cluster.skew(wk.ZONE) == {ZONE_1: 1, ZONE_2: 1, ZONE_3: 6}


def test_zonal_spread_fills_only_minimum_domains_while_skew_is_violated() -> None:
    """Topology > Zonal > should only schedule to minimum domains if already violating max skew"""
    cluster = FakeCluster()
    pods = pending(9, labels=LABELS, cpu="1.1", spread=[tsc()])
    cluster.provision([nodepool()], pods)
    assert values(cluster.skew(wk.ZONE)) == [3, 3, 3]
    for p in pods:
        if cluster.labels_of(p)[wk.ZONE] != ZONE_1:
            cluster.delete(p)
    assert cluster.skew(wk.ZONE) == {ZONE_1: 3}
    cluster.provision([nodepool()], pending(3, labels=LABELS, cpu="1.1", spread=[tsc()]))
    assert values(cluster.skew(wk.ZONE)) == [1, 2, 3]


def test_zonal_spread_does_not_exceed_max_skew_with_do_not_schedule() -> None:
    """Topology > Zonal > should not violate max-skew when unsat = do not schedule"""
    cluster = FakeCluster()
    cluster.provision(
        [nodepool(requirements=zones(ZONE_1))], pending(labels=LABELS, cpu="1.1", spread=[tsc()])
    )
    assert values(cluster.skew(wk.ZONE)) == [1]
    cluster.provision(
        [nodepool(requirements=zones(ZONE_2, ZONE_3))], pending(10, labels=LABELS, cpu="1.1", spread=[tsc()])
    )
    assert cluster.skew(wk.ZONE) == {ZONE_1: 1, ZONE_2: 2, ZONE_3: 2}


def test_zonal_spread_discovers_a_domain_from_an_existing_node() -> None:
    """Topology > Zonal > should not violate max-skew when unsat = do not schedule (discover domains)"""
    cluster = FakeCluster()
    cluster.provision([nodepool(requirements=zones(ZONE_1))], pending(labels=LABELS, cpu="1.1"))
    cluster.provision(
        [nodepool(requirements=zones(ZONE_2, ZONE_3))], pending(10, labels=LABELS, cpu="1.1", spread=[tsc()])
    )
    assert cluster.skew(wk.ZONE) == {ZONE_1: 1, ZONE_2: 2, ZONE_3: 2}


def _count_only_running_matching_pods(
    key: str, first: str, second: str
) -> tuple[FakeCluster, list[dict[str, object]]]:
    """The fixture both "should only count running/scheduled pods ..." Its share: two nodes with a domain,
    one without, and pods that must not count (no labels, pending, no domain, other namespace, terminating,
    Failed, Succeeded) beside three that must."""
    from tests import builders

    cluster = FakeCluster()
    cluster.add_node("first", {key: first})
    cluster.add_node("second", {key: second})
    cluster.add_node("third")
    bound = [
        builders.pod("unlabelled", cpu=None, memory=None, node="first"),
        builders.pod("no-domain", cpu=None, memory=None, labels=LABELS, node="third"),
        builders.pod("elsewhere", cpu=None, memory=None, labels=LABELS, namespace="other", node="first"),
        builders.pod("failed", cpu=None, memory=None, labels=LABELS, node="first", phase="Failed"),
        builders.pod("succeeded", cpu=None, memory=None, labels=LABELS, node="first", phase="Succeeded"),
        builders.pod("counted-1", cpu=None, memory=None, labels=LABELS, node="first"),
        builders.pod("counted-2", cpu=None, memory=None, labels=LABELS, node="first"),
        builders.pod("counted-3", cpu=None, memory=None, labels=LABELS, node="second"),
    ]
    cluster.pods.extend(bound)
    terminating = pending(labels=LABELS)[0]
    terminating["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    cluster.pods.append(terminating)
    return cluster, pending(2, labels=LABELS, spread=[tsc(key)])


def test_zonal_spread_counts_only_running_matching_pods_on_nodes_with_a_zone() -> None:
    """Topology > Zonal > should only count running/scheduled pods with matching labels scheduled to nodes
    with a corresponding domain"""
    cluster, spread = _count_only_running_matching_pods(wk.ZONE, ZONE_1, ZONE_2)
    # A pending matching pod, not yet placed, counts for nothing either; it is left out of the skew after.
    extra = pending(labels=LABELS, node_selector={wk.ZONE: ZONE_1})
    cluster.provision([nodepool()], spread + extra)
    cluster.delete(extra[0])
    assert values(cluster.skew(wk.ZONE)) == [1, 2, 2]


def test_zonal_skew_counts_every_pod_without_a_label_selector() -> None:
    """Topology > Zonal > should match all pods when labelSelector is not specified"""
    cluster = FakeCluster()
    cluster.provision([nodepool()], pending())
    assert values(cluster.skew(wk.ZONE, None)) == [1]


def test_a_spread_selecting_none_of_its_own_pods_packs_them() -> None:
    """Topology > Zonal > should handle interdependent selectors"""
    cluster = FakeCluster()
    pods = pending(5, spread=[tsc(wk.HOSTNAME)])
    cluster.provision([nodepool()], pods)
    assert len({p["spec"]["nodeName"] for p in pods}) == 1


def test_min_domains_above_the_zones_offered_caps_each_zone_at_max_skew() -> None:
    """Topology > Zonal > should respect minDomains constraints"""
    cluster = FakeCluster()
    cluster.provision(
        [nodepool(requirements=zones(ZONE_1, ZONE_2))], pending(3, labels=LABELS, spread=[tsc(minDomains=3)])
    )
    assert values(cluster.skew(wk.ZONE)) == [1, 1]


@pytest.mark.parametrize(
    "min_domains",
    [
        pytest.param(3, id="equal"),
        pytest.param(
            2,
            id="greater-than-minimum",
        ),
    ],
)
def test_satisfied_min_domains_spread_as_usual(min_domains: int) -> None:
    """Topology > Zonal > satisfied minDomains constraints (equal) should allow expected pod scheduling;
    Topology > Zonal > satisfied minDomains constraints (greater than minimum) should allow expected pod
    scheduling"""
    cluster = FakeCluster()
    cluster.provision(
        [nodepool(requirements=zones(ZONE_1, ZONE_2, ZONE_3))],
        pending(11, labels=LABELS, spread=[tsc(minDomains=min_domains)]),
    )
    assert values(cluster.skew(wk.ZONE)) == [3, 4, 4]


# -- Topology > Hostname ----------------------------------------------------------------------------


def test_hostname_spread_balances_across_nodes() -> None:
    """Topology > Hostname > should balance pods across nodes"""
    cluster = FakeCluster()
    cluster.provision([nodepool()], pending(4, labels=LABELS, spread=[tsc(wk.HOSTNAME)]))
    assert values(cluster.skew(wk.HOSTNAME)) == [1, 1, 1, 1]


def test_hostname_spread_shares_a_node_up_to_max_skew() -> None:
    """Topology > Hostname > should balance pods on the same hostname up to maxskew"""
    cluster = FakeCluster()
    cluster.provision([nodepool()], pending(4, labels=LABELS, spread=[tsc(wk.HOSTNAME, max_skew=4)]))
    assert values(cluster.skew(wk.HOSTNAME)) == [4]


def _app_spread(app: str, **kwargs: object) -> list[dict[str, object]]:
    return pending(2, labels={"app": app}, spread=[tsc(wk.HOSTNAME, selector={"app": app})], **kwargs)  # type: ignore[arg-type]


def test_two_deployments_spread_by_hostname_share_two_nodes() -> None:
    """Topology > Hostname > balance multiple deployments with hostname topology spread"""
    cluster = FakeCluster()
    pods = _app_spread("app1") + _app_spread("app2")
    cluster.provision([nodepool()], pods)
    assert all(cluster.scheduled(p) for p in pods)
    assert len(cluster.nodes) == 2


def test_two_deployments_spread_by_hostname_on_different_arches_need_four_nodes() -> None:
    """Topology > Hostname > balance multiple deployments with hostname topology spread & varying arch"""
    cluster = FakeCluster()
    pods = _app_spread("app1", node_requirements=[requirement(wk.ARCH, "In", "amd64")]) + _app_spread(
        "app2", node_requirements=[requirement(wk.ARCH, "In", "arm64")]
    )
    cluster.provision([nodepool()], pods)
    assert all(cluster.scheduled(p) for p in pods)
    assert len(cluster.nodes) == 4


# -- Topology > CapacityType ------------------------------------------------------------------------


def test_capacity_type_spread_balances() -> None:
    """Topology > CapacityType > should balance pods across capacity types"""
    cluster = FakeCluster()
    cluster.provision([nodepool()], pending(4, labels=LABELS, spread=[tsc(wk.CAPACITY_TYPE)]))
    assert cluster.skew(wk.CAPACITY_TYPE) == {SPOT: 2, ON_DEMAND: 2}


def test_capacity_type_spread_within_the_nodepool_capacity_types() -> None:
    """Topology > CapacityType > should respect NodePool capacity type constraints"""
    cluster = FakeCluster()
    np = nodepool(requirements=capacity_types(SPOT, ON_DEMAND))
    cluster.provision([np], pending(4, labels=LABELS, spread=[tsc(wk.CAPACITY_TYPE)]))
    assert cluster.skew(wk.CAPACITY_TYPE) == {SPOT: 2, ON_DEMAND: 2}


def test_capacity_type_spread_does_not_exceed_max_skew_with_do_not_schedule() -> None:
    """Topology > CapacityType > should not violate max-skew when unsat = do not schedule (capacity type)"""
    cluster = FakeCluster()
    constraint = tsc(wk.CAPACITY_TYPE)
    cluster.provision(
        [nodepool(requirements=capacity_types(SPOT))], pending(labels=LABELS, cpu="1.1", spread=[constraint])
    )
    assert cluster.skew(wk.CAPACITY_TYPE) == {SPOT: 1}
    cluster.provision(
        [nodepool(requirements=capacity_types(ON_DEMAND))],
        pending(5, labels=LABELS, cpu="1.1", spread=[constraint]),
    )
    assert cluster.skew(wk.CAPACITY_TYPE) == {SPOT: 1, ON_DEMAND: 2}


def test_capacity_type_spread_exceeds_max_skew_with_schedule_anyway() -> None:
    """Topology > CapacityType > should violate max-skew when unsat = schedule anyway (capacity type)"""
    cluster = FakeCluster()
    constraint = tsc(wk.CAPACITY_TYPE, when="ScheduleAnyway")
    cluster.provision(
        [nodepool(requirements=capacity_types(SPOT))], pending(labels=LABELS, cpu="1.1", spread=[constraint])
    )
    cluster.provision(
        [nodepool(requirements=capacity_types(ON_DEMAND))],
        pending(5, labels=LABELS, cpu="1.1", spread=[constraint]),
    )
    assert cluster.skew(wk.CAPACITY_TYPE) == {SPOT: 1, ON_DEMAND: 5}


def test_capacity_type_spread_counts_only_running_matching_pods_on_nodes_with_a_capacity_type() -> None:
    """Topology > CapacityType > should only count running/scheduled pods with matching labels scheduled to
    nodes with a corresponding domain"""
    cluster, spread = _count_only_running_matching_pods(wk.CAPACITY_TYPE, SPOT, ON_DEMAND)
    cluster.provision([nodepool()], spread)
    assert cluster.skew(wk.CAPACITY_TYPE) == {SPOT: 2, ON_DEMAND: 3}


def test_capacity_type_skew_counts_every_pod_without_a_label_selector() -> None:
    """Topology > CapacityType > should match all pods when labelSelector is not specified"""
    cluster = FakeCluster()
    cluster.provision([nodepool()], pending())
    assert values(cluster.skew(wk.CAPACITY_TYPE, None)) == [1]


def test_a_hostname_spread_selecting_none_of_its_own_pods_packs_them() -> None:
    """Topology > CapacityType > should handle interdependent selectors"""
    cluster = FakeCluster()
    pods = pending(5, spread=[tsc(wk.HOSTNAME)])
    cluster.provision([nodepool()], pods)
    assert len({p["spec"]["nodeName"] for p in pods}) == 1


def test_capacity_type_spread_counts_only_nodes_the_pods_required_affinity_allows() -> None:
    """Topology > CapacityType > should balance pods across capacity-types (node required affinity
    constrained)"""
    cluster = FakeCluster()
    first = pending(
        labels=LABELS,
        node_requirements=[
            requirement(wk.ZONE, "In", ZONE_1),
            requirement(wk.CAPACITY_TYPE, "In", ON_DEMAND),
        ],
    )
    cluster.provision([nodepool()], first)
    assert cluster.scheduled(first[0])
    cluster.provision(
        [nodepool()],
        pending(
            5,
            labels=LABELS,
            spread=[tsc(wk.CAPACITY_TYPE)],
            node_requirements=[requirement(wk.ZONE, "In", ZONE_2), requirement(wk.CAPACITY_TYPE, "In", SPOT)],
        ),
    )
    assert cluster.skew(wk.CAPACITY_TYPE) == {ON_DEMAND: 1, SPOT: 5}


def test_capacity_type_spread_counts_a_capacity_type_the_nodepool_no_longer_offers() -> None:
    """Topology > CapacityType > should balance pods across capacity-types (no constraints)"""
    cluster = FakeCluster()
    first = pending(
        labels=LABELS,
        node_selector={wk.INSTANCE_TYPE: "single-pod-instance-type"},
        node_requirements=[requirement(wk.CAPACITY_TYPE, "In", ON_DEMAND)],
    )
    cluster.provision([nodepool()], first)
    assert cluster.scheduled(first[0])
    cluster.provision(
        [nodepool(requirements=capacity_types(SPOT))],
        pending(5, labels=LABELS, cpu="2", spread=[tsc(wk.CAPACITY_TYPE)]),
    )
    assert cluster.skew(wk.CAPACITY_TYPE) == {ON_DEMAND: 1, SPOT: 2}


def test_arch_spread_counts_an_arch_the_nodepool_no_longer_offers() -> None:
    """Topology > CapacityType > should balance pods across arch (no constraints)"""
    cluster = FakeCluster()
    first = pending(
        labels=LABELS,
        node_selector={wk.INSTANCE_TYPE: "single-pod-instance-type"},
        node_requirements=[requirement(wk.ARCH, "In", "amd64")],
    )
    cluster.provision([nodepool()], first)
    assert cluster.scheduled(first[0])
    cluster.provision(
        [nodepool(requirements=[requirement(wk.ARCH, "In", "arm64")])],
        pending(5, labels=LABELS, cpu="2", spread=[tsc(wk.ARCH)]),
    )
    assert cluster.skew(wk.ARCH) == {"amd64": 1, "arm64": 2}


# -- Topology > Combined Hostname and Zonal Topology ------------------------------------------------


def test_zonal_and_hostname_spreads_hold_together_batch_after_batch() -> None:
    """Topology > Combined Hostname and Zonal Topology > should spread pods while respecting both constraints
    (hostname and zonal)"""
    cluster = FakeCluster()
    both = [tsc(), tsc(wk.HOSTNAME, max_skew=3)]
    for count, expected in ((2, [1, 1]), (3, [1, 2, 2]), (5, [3, 3, 4]), (11, [7, 7, 7])):
        cluster.provision([nodepool()], pending(count, labels=LABELS, spread=both))
        assert values(cluster.skew(wk.ZONE)) == expected
        assert max(cluster.skew(wk.HOSTNAME).values()) <= 3


def test_spread_over_a_label_two_nodepools_share_gives_their_ratio() -> None:
    """Topology > Combined Hostname and Zonal Topology > should balance pods across NodePool requirements"""
    cluster = FakeCluster()
    key = "capacity.spread.4-1"
    spot = nodepool(
        "spot", [requirement(wk.CAPACITY_TYPE, "In", SPOT), requirement(key, "In", "2", "3", "4", "5")]
    )
    on_demand = nodepool(
        "on-demand", [requirement(wk.CAPACITY_TYPE, "In", ON_DEMAND), requirement(key, "In", "1")]
    )
    pods = pending(20, labels=LABELS, spread=[tsc(key)])
    cluster.provision([spot, on_demand], pods)
    assert all(cluster.scheduled(p) for p in pods)
    assert values(cluster.skew(key)) == [4, 4, 4, 4, 4]
    assert cluster.skew(wk.CAPACITY_TYPE) == {SPOT: 16, ON_DEMAND: 4}


def test_zonal_spread_counts_the_zone_of_a_nodepool_with_no_room() -> None:
    """Topology > Combined Hostname and Zonal Topology > should spread pods while respecting both constraints
    (first of two Its with this name: zonal DoNotSchedule and hostname ScheduleAnyway)"""
    cluster = FakeCluster()
    constraints = [tsc(), tsc(wk.HOSTNAME, when="ScheduleAnyway")]
    open_pool = nodepool("a", zones(ZONE_1, ZONE_2))
    no_room = nodepool("b", zones(ZONE_3), remaining={"cpu": 0})
    cluster.provision([open_pool, no_room], pending(10, labels=LABELS, spread=constraints))
    # zone 3 counts (with 0 pods) though nothing can launch there: one pod per zone, one per node.
    assert cluster.skew(wk.ZONE) == {ZONE_1: 1, ZONE_2: 1}
    assert values(cluster.skew(wk.HOSTNAME)) == [1, 1]


def test_capacity_type_and_hostname_spreads_hold_together_batch_after_batch() -> None:
    """Topology > Combined Hostname and Zonal Topology > should spread pods while respecting both constraints
    (second of two Its with this name: capacity type and hostname)"""
    cluster = FakeCluster()
    both = [tsc(wk.CAPACITY_TYPE), tsc(wk.HOSTNAME, max_skew=3)]
    for count, expected in ((2, [1, 1]), (3, [2, 3]), (5, [5, 5]), (11, [10, 11])):
        cluster.provision([nodepool()], pending(count, labels=LABELS, spread=both))
        assert values(cluster.skew(wk.CAPACITY_TYPE)) == expected
        assert max(cluster.skew(wk.HOSTNAME).values()) <= 3


# -- Topology > MatchLabelKeys ----------------------------------------------------------------------


def test_match_label_keys_spread_each_value_on_its_own() -> None:
    """Topology > MatchLabelKeys > should support matchLabelKeys"""
    cluster = FakeCluster()
    constraint = tsc(wk.HOSTNAME, matchLabelKeys=["test-label"])
    pods = pending(2, labels={**LABELS, "test-label": "value-a"}, spread=[constraint]) + pending(
        2, labels={**LABELS, "test-label": "value-b"}, spread=[constraint]
    )
    cluster.provision([nodepool()], pods)
    assert values(cluster.skew(wk.HOSTNAME)) == [2, 2]


def test_match_label_keys_the_pod_lacks_are_ignored() -> None:
    """Topology > MatchLabelKeys > should ignore unknown labels specified in matchLabelKeys"""
    cluster = FakeCluster()
    cluster.provision(
        [nodepool()], pending(4, labels=LABELS, spread=[tsc(wk.HOSTNAME, matchLabelKeys=["test-label"])])
    )
    assert values(cluster.skew(wk.HOSTNAME)) == [1, 1, 1, 1]


# -- Topology > NodeTaintsPolicy --------------------------------------------------------------------

SPREAD_LABEL = "fake-label"
TAINT = {"key": "taintname", "value": "taintvalue", "effect": "NoSchedule"}


def _tainted_label_domains() -> FakeCluster:
    cluster = FakeCluster()
    cluster.add_node("foo", {SPREAD_LABEL: "foo"}, taints=[TAINT], cpu="100m")
    cluster.add_node("bar", {SPREAD_LABEL: "bar"}, taints=[TAINT], cpu="100m")
    return cluster


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        pytest.param("Ignore", [1], id="ignore"),
        pytest.param("Honor", [5], id="honor"),
    ],
)
def test_node_taints_policy_on_tainted_existing_nodes(policy: str, expected: list[int]) -> None:
    """Topology > NodeTaintsPolicy > should balance pods across a label (NodeTaintsPolicy=ignore);
    Topology > NodeTaintsPolicy > should balance pods across a label (NodeTaintsPolicy=honor)"""
    cluster = _tainted_label_domains()
    np = nodepool(labels={SPREAD_LABEL: "baz"})
    constraint = tsc(SPREAD_LABEL, nodeTaintsPolicy=policy)
    cluster.provision([np], pending(5, labels=LABELS, cpu="1", spread=[constraint]))
    # Ignore: foo and bar count with 0 pods, so baz takes one; Honor: the tainted nodes are no domains.
    assert values(cluster.skew(SPREAD_LABEL)) == expected


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        pytest.param("Ignore", [1], id="ignore"),
        pytest.param("Honor", [2], id="honor"),
    ],
)
def test_node_taints_policy_on_domains_a_tainted_nodepool_offers(policy: str, expected: list[int]) -> None:
    """Topology > NodeTaintsPolicy > should balance pods across a label when discovered from the nodepool
    (NodeTaintsPolicy=ignore); ... (NodeTaintsPolicy=honor)"""
    cluster = FakeCluster()
    plain = nodepool("plain", [CAPACITY_TYPE_EXISTS, requirement(SPREAD_LABEL, "In", "foo")])
    tainted = nodepool(
        "tainted",
        [CAPACITY_TYPE_EXISTS, requirement(SPREAD_LABEL, "In", "bar")],
        taints=[{"key": "taint-key", "value": "taint-value", "effect": "NoSchedule"}],
    )
    cluster.provision(
        [plain, tainted], pending(2, labels=LABELS, spread=[tsc(SPREAD_LABEL, nodeTaintsPolicy=policy)])
    )
    assert values(cluster.skew(SPREAD_LABEL)) == expected


def test_node_taints_policy_honor_with_tainted_nodepools_sharing_a_domain() -> None:
    """Topology > NodeTaintsPolicy > should balance pods across a label when mutually exclusive NodePools (by
    taints) share domains (NodeTaintsPolicy=honor)"""
    cluster = FakeCluster()
    pools = [
        nodepool(
            f"np-{i}",
            [CAPACITY_TYPE_EXISTS, requirement(SPREAD_LABEL, "In", *domains)],
            taints=[{"key": "taint-key", "value": f"nodepool-{i}", "effect": "NoSchedule"}],
        )
        for i, domains in enumerate((("foo", "bar"), ("foo", "baz")))
    ]
    constraint = tsc(SPREAD_LABEL, nodeTaintsPolicy="Honor")
    pods = [
        p
        for i in range(2)
        for p in pending(
            (i + 1) * 2,
            labels=LABELS,
            spread=[constraint],
            tolerations=[{"key": "taint-key", "effect": "NoSchedule", "value": f"nodepool-{i}"}],
        )
    ]
    cluster.provision(pools, pods)
    assert values(cluster.skew(SPREAD_LABEL)) == [1, 2, 3]


# -- Topology > NodeAffinityPolicy ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        pytest.param("Ignore", [1], id="ignore"),
        pytest.param("Honor", [5], id="honor"),
    ],
)
def test_node_affinity_policy_on_existing_nodes_the_selector_excludes(
    policy: str, expected: list[int]
) -> None:
    """Topology > NodeAffinityPolicy > should balance pods across a label (NodeAffinityPolicy=ignore);
    Topology > NodeAffinityPolicy > should balance pods across a label (NodeAffinityPolicy=honor)"""
    cluster = FakeCluster()
    cluster.add_node("foo", {SPREAD_LABEL: "foo", "selector": "mismatch"}, cpu="100m")
    cluster.add_node("bar", {SPREAD_LABEL: "bar", "selector": "mismatch"}, cpu="100m")
    np = nodepool(labels={SPREAD_LABEL: "baz", "selector": "value"})
    constraint = tsc(SPREAD_LABEL, nodeAffinityPolicy=policy)
    cluster.provision(
        [np], pending(5, labels=LABELS, cpu="1", node_selector={"selector": "value"}, spread=[constraint])
    )
    assert values(cluster.skew(SPREAD_LABEL)) == expected


# -- Topology > Combined Zonal and Capacity Type Topology -------------------------------------------


def test_zonal_and_capacity_type_spreads_hold_together_batch_after_batch() -> None:
    """Topology > Combined Zonal and Capacity Type Topology > should spread pods while respecting both
    constraints"""
    cluster = FakeCluster()
    both = [tsc(wk.CAPACITY_TYPE), tsc()]
    for count, most_per_type, most_per_zone in ((2, 1, 1), (3, 3, 2), (3, 5, 4), (11, 11, 7)):
        cluster.provision([nodepool()], pending(count, labels=LABELS, spread=both))
        assert max(cluster.skew(wk.CAPACITY_TYPE).values()) <= most_per_type
        assert max(cluster.skew(wk.ZONE).values()) <= most_per_zone


# -- Topology > Combined Hostname, Zonal, and Capacity Type Topology --------------------------------


def test_hostname_zonal_and_capacity_type_spreads_hold_together() -> None:
    """Topology > Combined Hostname, Zonal, and Capacity Type Topology > should spread pods while respecting
    all constraints"""
    cluster = FakeCluster()
    np = nodepool(types=assorted_types())
    three = [tsc(wk.CAPACITY_TYPE), tsc(max_skew=2), tsc(wk.HOSTNAME, max_skew=3)]
    for count in range(1, 15):
        pods = pending(count, labels=LABELS, spread=three)
        cluster.provision([np], pods)
        assert max_skew(cluster.skew(wk.CAPACITY_TYPE)) <= 1
        assert max_skew(cluster.skew(wk.ZONE)) <= 2
        assert max_skew(cluster.skew(wk.HOSTNAME)) <= 3
        assert all(cluster.scheduled(p) for p in pods), count


# -- Topology > Combined Zonal Topology and Node Affinity -------------------------------------------


def test_node_selectors_limit_zonal_spread_domains() -> None:
    """Topology > Combined Zonal Topology and Node Affinity > should limit spread options by nodeSelector"""
    cluster = FakeCluster()
    pods = pending(5, labels=LABELS, spread=[tsc()], node_selector={wk.ZONE: ZONE_1}) + pending(
        10, labels=LABELS, spread=[tsc()], node_selector={wk.ZONE: ZONE_2}
    )
    cluster.provision([nodepool()], pods)
    assert cluster.skew(wk.ZONE) == {ZONE_1: 5, ZONE_2: 10}


def test_node_requirements_limit_zonal_spread_domains() -> None:
    """Topology > Combined Zonal Topology and Node Affinity > should limit spread options by node
    requirements"""
    cluster = FakeCluster()
    cluster.provision(
        [nodepool()],
        pending(
            10, labels=LABELS, spread=[tsc()], node_requirements=[requirement(wk.ZONE, "In", ZONE_1, ZONE_2)]
        ),
    )
    assert cluster.skew(wk.ZONE) == {ZONE_1: 5, ZONE_2: 5}


def test_required_node_affinity_limits_zonal_spread_domains_across_batches() -> None:
    """Topology > Combined Zonal Topology and Node Affinity > should limit spread options by required node
    affinity"""
    cluster = FakeCluster()
    cluster.provision(
        [nodepool()],
        pending(
            6, labels=LABELS, spread=[tsc()], node_requirements=[requirement(wk.ZONE, "In", ZONE_1, ZONE_2)]
        ),
    )
    assert cluster.skew(wk.ZONE) == {ZONE_1: 3, ZONE_2: 3}
    all_zones = nodepool(requirements=zones(ZONE_1, ZONE_2, ZONE_3))
    cluster.provision(
        [all_zones],
        pending(
            labels=LABELS, spread=[tsc()], node_requirements=[requirement(wk.ZONE, "In", ZONE_2, ZONE_3)]
        ),
    )
    # zone 3 is empty: the pod goes there though the skew is still above 1, as that improves it.
    assert cluster.skew(wk.ZONE) == {ZONE_1: 3, ZONE_2: 3, ZONE_3: 1}
    cluster.provision([all_zones], pending(5, labels=LABELS, spread=[tsc()]))
    assert values(cluster.skew(wk.ZONE)) == [4, 4, 4]


def test_preferred_node_affinity_does_not_limit_zonal_spread_domains() -> None:
    """Topology > Combined Zonal Topology and Node Affinity > should not limit spread options by preferred
    node affinity"""
    cluster = FakeCluster()
    cluster.provision(
        [nodepool()],
        pending(
            6, labels=LABELS, spread=[tsc()], node_preferences=[requirement(wk.ZONE, "In", ZONE_1, ZONE_2)]
        ),
    )
    assert values(cluster.skew(wk.ZONE)) == [2, 2, 2]


# -- Topology > Combined Capacity Type Topology and Node Affinity -----------------------------------


def test_node_selectors_limit_capacity_type_spread_domains() -> None:
    """Topology > Combined Capacity Type Topology and Node Affinity > should limit spread options by
    nodeSelector"""
    cluster = FakeCluster()
    anyway = tsc(wk.CAPACITY_TYPE, when="ScheduleAnyway")
    pods = pending(5, labels=LABELS, spread=[anyway], node_selector={wk.CAPACITY_TYPE: SPOT}) + pending(
        5, labels=LABELS, spread=[anyway], node_selector={wk.CAPACITY_TYPE: ON_DEMAND}
    )
    cluster.provision([nodepool()], pods)
    assert cluster.skew(wk.CAPACITY_TYPE) == {SPOT: 5, ON_DEMAND: 5}


def test_node_affinity_limits_capacity_type_spread_domains_across_batches() -> None:
    """Topology > Combined Capacity Type Topology and Node Affinity > should limit spread options by node
    affinity (capacity type)"""
    cluster = FakeCluster()
    constraint = tsc(wk.CAPACITY_TYPE)
    cluster.provision(
        [nodepool()],
        pending(
            3,
            labels=LABELS,
            spread=[constraint],
            node_requirements=[requirement(wk.CAPACITY_TYPE, "In", SPOT)],
        ),
    )
    assert cluster.skew(wk.CAPACITY_TYPE) == {SPOT: 3}
    both = [requirement(wk.CAPACITY_TYPE, "In", ON_DEMAND, SPOT)]
    cluster.provision([nodepool()], pending(labels=LABELS, spread=[constraint], node_requirements=both))
    assert cluster.skew(wk.CAPACITY_TYPE) == {SPOT: 3, ON_DEMAND: 1}
    cluster.provision([nodepool()], pending(5, labels=LABELS, spread=[constraint]))
    assert cluster.skew(wk.CAPACITY_TYPE) == {SPOT: 5, ON_DEMAND: 4}
