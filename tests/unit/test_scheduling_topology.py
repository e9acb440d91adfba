"""Topology spread, pod affinity and anti-affinity, and preference relaxation (Karpenter's topology suite
scenarios, in our own words), on the bundled three-zone catalog."""

from __future__ import annotations

from collections import Counter
from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.scheduling.taints import Taint

from tests.unit.test_scheduling_constraints import ZONES, claim_of, node, pod, pool, solve, term, zone_of

APP = {"app": "web"}


def spread(
    key: str = wk.ZONE, max_skew: int = 1, when: str = "DoNotSchedule", **extra: Any
) -> dict[str, Any]:
    return {
        "maxSkew": max_skew,
        "topologyKey": key,
        "whenUnsatisfiable": when,
        "labelSelector": {"matchLabels": APP},
        **extra,
    }


def spread_pods(
    count: int, *constraints: dict[str, Any], cpu: str = "1", node_selector: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    extra: dict[str, Any] = {"nodeSelector": node_selector} if node_selector else {}
    return [
        pod(f"web-{i}", cpu=cpu, labels=dict(APP), topologySpreadConstraints=list(constraints), **extra)
        for i in range(count)
    ]


def pods_per_zone(result: Any, prefix: str = "default/web") -> Counter[str]:
    counts: Counter[str] = Counter()
    for claim in result.new_nodeclaims:
        n = sum(1 for k in claim.pods if k.startswith(prefix))
        if n:
            counts[zone_of(claim)] += n
    return counts


def affinity(kind: str, key: str, selector: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {
        kind: {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": selector}, "topologyKey": key, **extra}
            ]
        }
    }


# -- topology spread --------------------------------------------------------------------------------


def test_four_pods_spread_over_three_zones_give_one_one_two() -> None:
    result = solve(spread_pods(4, spread()))
    assert sorted(pods_per_zone(result).values()) == [1, 1, 2]
    assert set(pods_per_zone(result)) == set(ZONES)


def test_spread_counts_pods_already_running() -> None:
    running = [pod(f"old-{i}", labels=dict(APP)) for i in range(2)]
    existing = [node("busy-a", "us-east-1a", cpu=2000, pods=running)]
    result = solve(spread_pods(4, spread()), existing=existing)
    # a already holds 2: the 4 new pods go b, c, b, c to reach {2, 2, 2}.
    assert pods_per_zone(result) == Counter({"us-east-1b": 2, "us-east-1c": 2})


def test_hostname_spread_puts_one_pod_per_node() -> None:
    result = solve(spread_pods(5, spread(wk.HOSTNAME), cpu="100m"))
    assert len(result.new_nodeclaims) == 5


def test_capacity_type_spread_uses_both_capacity_types() -> None:
    np = pool("both", [{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]}])
    result = solve(spread_pods(4, spread(wk.CAPACITY_TYPE)), [np])
    kinds: Counter[str] = Counter()
    for claim in result.new_nodeclaims:
        capacity = claim.requirements.get(wk.CAPACITY_TYPE)
        assert len(capacity.values()) == 1
        kinds[next(iter(capacity.values()))] += len(claim.pods)
    assert kinds == Counter({"spot": 2, "on-demand": 2})


def test_spread_on_a_custom_nodepool_label() -> None:
    np = pool(
        "racks",
        [
            {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": "example.com/rack", "operator": "In", "values": ["r1", "r2"]},
        ],
    )
    result = solve(spread_pods(4, spread("example.com/rack")), [np])
    racks: Counter[str] = Counter()
    for claim in result.new_nodeclaims:
        racks[next(iter(claim.requirements.get("example.com/rack").values()))] += len(claim.pods)
    assert racks == Counter({"r1": 2, "r2": 2})


def test_min_domains_above_the_zone_count_holds_one_pod_per_zone() -> None:
    # With fewer eligible domains than minDomains the global minimum is 0: no zone may exceed maxSkew.
    result = solve(spread_pods(5, spread(minDomains=5)))
    assert pods_per_zone(result) == Counter({z: 1 for z in ZONES})
    assert len(result.unschedulable) == 2
    reason = next(iter(result.unschedulable.values()))["default"]
    assert "topology spread on topology.kubernetes.io/zone (maxSkew 1 minDomains 5" in reason
    assert 'nodepool "default"' in reason


def test_match_label_keys_spread_each_revision_on_its_own() -> None:
    old = [
        pod(
            f"old-{i}", labels={**APP, "rev": "1"}, topologySpreadConstraints=[spread(matchLabelKeys=["rev"])]
        )
        for i in range(3)
    ]
    running = node("a-full", "us-east-1a", cpu=3500, pods=old)
    new = [
        pod(
            f"web-{i}", labels={**APP, "rev": "2"}, topologySpreadConstraints=[spread(matchLabelKeys=["rev"])]
        )
        for i in range(3)
    ]
    result = solve(new, existing=[running])
    # Revision 1's pods in zone a do not count for revision 2.
    assert pods_per_zone(result) == Counter({z: 1 for z in ZONES})


def test_node_affinity_policy_honor_counts_only_matching_nodes() -> None:
    exclusive = [pod(f"x-{i}", labels=dict(APP)) for i in range(3)]
    other = node("other-a", "us-east-1a", cpu=3500, pods=exclusive, labels={"tier": "batch"})
    only_web = {"tier": "web"}
    web_pool = pool("web", labels={"tier": "web"})
    result = solve(spread_pods(3, spread(), node_selector=only_web), [web_pool], existing=[other])
    # Honor (the default): other-a does not match the pods' selector, so its 3 pods do not count.
    assert pods_per_zone(result) == Counter({z: 1 for z in ZONES})
    ignore = solve(
        spread_pods(3, spread(nodeAffinityPolicy="Ignore"), node_selector=only_web),
        [web_pool],
        existing=[other],
    )
    assert pods_per_zone(ignore) == Counter({"us-east-1b": 2, "us-east-1c": 1}) or pods_per_zone(
        ignore
    ) == Counter({"us-east-1b": 1, "us-east-1c": 2})


def test_node_taints_policy_honor_skips_domains_only_tainted_pools_offer() -> None:
    only_a = pool(
        "only-a", [{"key": wk.ZONE, "operator": "In", "values": ["us-east-1a", "us-east-1b"]}], weight=10
    )
    tainted_c = pool(
        "tainted-c",
        [{"key": wk.ZONE, "operator": "In", "values": ["us-east-1c"]}],
        taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}],
    )
    ignore = solve(spread_pods(4, spread()), [only_a, tainted_c])
    # Ignore (default): zone c counts with 0 pods, so a and b take one each and the rest cannot go.
    assert sorted(pods_per_zone(ignore).values()) == [1, 1]
    assert len(ignore.unschedulable) == 2
    honor = solve(spread_pods(4, spread(nodeTaintsPolicy="Honor")), [only_a, tainted_c])
    assert pods_per_zone(honor) == Counter({"us-east-1a": 2, "us-east-1b": 2})


def test_schedule_anyway_spread_is_relaxed_when_it_cannot_hold() -> None:
    np = pool("a-only", [{"key": wk.ZONE, "operator": "In", "values": ["us-east-1a"]}])
    tainted = pool(
        "elsewhere",
        [{"key": wk.ZONE, "operator": "In", "values": ["us-east-1b", "us-east-1c"]}],
        taints=[{"key": "x", "value": "y", "effect": "NoSchedule"}],
    )
    strict = solve(spread_pods(3, spread()), [np, tainted])
    assert len(strict.unschedulable) == 2
    relaxed = solve(spread_pods(3, spread(when="ScheduleAnyway")), [np, tainted])
    assert not relaxed.unschedulable and pods_per_zone(relaxed) == Counter({"us-east-1a": 3})


def test_spread_over_existing_in_flight_and_new_capacity() -> None:
    in_flight = node("nodeclaim/pending", "us-east-1b", cpu=1500)
    in_flight.in_flight = True
    result = solve(spread_pods(3, spread()), existing=[node("n-a", "us-east-1a", cpu=1500), in_flight])
    assert result.existing == {"n-a": ["default/web-0"], "nodeclaim/pending": ["default/web-1"]}
    assert pods_per_zone(result) == Counter({"us-east-1c": 1})


# -- pod affinity -----------------------------------------------------------------------------------


def test_required_hostname_anti_affinity_gives_one_pod_per_node() -> None:
    anti = affinity("podAntiAffinity", wk.HOSTNAME, APP)
    result = solve([pod(f"web-{i}", cpu="100m", labels=dict(APP), affinity=anti) for i in range(4)])
    assert len(result.new_nodeclaims) == 4
    assert all(len(c.pods) == 1 for c in result.new_nodeclaims)


def test_anti_affinity_of_a_running_pod_keeps_matching_pods_out_of_its_zone() -> None:
    guard = pod("guard", labels={"role": "guard"}, affinity=affinity("podAntiAffinity", wk.ZONE, APP))
    existing = [node("n-a", "us-east-1a", cpu=8000, pods=[guard])]
    result = solve([pod("web-0", labels=dict(APP))], existing=existing)
    assert "n-a" not in result.existing
    zones = result.new_nodeclaims[0].requirements.get(wk.ZONE)
    assert not zones.has("us-east-1a") and zones.has("us-east-1b") and zones.has("us-east-1c")


def test_zonal_pod_affinity_follows_the_target() -> None:
    db = pod("db", labels={"app": "db"})
    existing = [node("n-b", "us-east-1b", cpu=1000, pods=[db])]
    follower = pod("cache", affinity=affinity("podAffinity", wk.ZONE, {"app": "db"}))
    result = solve([follower], existing=existing)
    assert zone_of(result.new_nodeclaims[0]) == "us-east-1b"


def test_hostname_affinity_to_a_pending_pod_shares_its_node() -> None:
    leader = pod("leader", cpu="2", labels={"app": "leader"})
    follower = pod("follower", cpu="1", affinity=affinity("podAffinity", wk.HOSTNAME, {"app": "leader"}))
    result = solve([follower, leader])
    assert len(result.new_nodeclaims) == 1 and sorted(result.new_nodeclaims[0].pods) == [
        "default/follower",
        "default/leader",
    ]


def test_self_affinity_bootstraps_one_zone() -> None:
    selfish = affinity("podAffinity", wk.ZONE, APP)
    result = solve([pod(f"web-{i}", cpu="3", labels=dict(APP), affinity=selfish) for i in range(5)])
    assert len(pods_per_zone(result)) == 1 and sum(pods_per_zone(result).values()) == 5


def test_affinity_without_a_target_is_explained() -> None:
    lonely = pod("lonely", affinity=affinity("podAffinity", wk.ZONE, {"app": "nothing"}))
    reason = solve([lonely]).unschedulable["default/lonely"]["default"]
    assert reason.startswith(
        'nodepool "default": pod affinity on topology.kubernetes.io/zone with pods app=nothing'
    )


def test_affinity_namespaces_and_namespace_selector() -> None:
    db = pod("db", labels={"app": "db"}, namespace="data")
    existing = [node("n-c", "us-east-1c", cpu=1000, pods=[db])]
    same_ns = pod("a", affinity=affinity("podAffinity", wk.ZONE, {"app": "db"}))
    assert "default/a" in solve([same_ns], existing=existing).unschedulable
    listed = pod("b", affinity=affinity("podAffinity", wk.ZONE, {"app": "db"}, namespaces=["data"]))
    assert zone_of(solve([listed], existing=existing).new_nodeclaims[0]) == "us-east-1c"
    selected = pod(
        "c",
        affinity=affinity(
            "podAffinity", wk.ZONE, {"app": "db"}, namespaceSelector={"matchLabels": {"team": "data"}}
        ),
    )
    namespaces = {"data": {"team": "data"}, "default": {}}
    result = solve([selected], existing=existing, namespaces=namespaces)
    assert zone_of(result.new_nodeclaims[0]) == "us-east-1c"
    everywhere = pod("d", affinity=affinity("podAffinity", wk.ZONE, {"app": "db"}, namespaceSelector={}))
    assert zone_of(solve([everywhere], existing=existing).new_nodeclaims[0]) == "us-east-1c"


# -- preferences and their relaxation ---------------------------------------------------------------


def test_preferred_anti_affinity_is_honoured_then_relaxed() -> None:
    prefer = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 50,
                    "podAffinityTerm": {"labelSelector": {"matchLabels": APP}, "topologyKey": wk.HOSTNAME},
                }
            ]
        }
    }
    # Limits allow two m5.large nodes: the first two pods get a node each, the others drop the preference.
    np = pool(
        "two", [{"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["m5.large"]}], remaining={"cpu": 4000}
    )
    result = solve([pod(f"web-{i}", cpu="100m", labels=dict(APP), affinity=prefer) for i in range(4)], [np])
    assert not result.unschedulable
    assert sorted(len(c.pods) for c in result.new_nodeclaims) == [2, 2]


def test_zonal_anti_affinity_respects_a_launched_sibling() -> None:
    # (Karpenter places one such pod per batch; ours commit to zones and place all in one, see
    # test_scheduling_domains.) A later batch sees the launched node in its zone and uses the other two.
    anti = affinity("podAntiAffinity", wk.ZONE, APP)
    running = node("n-a", "us-east-1a", cpu=500, pods=[pod("web-0", labels=dict(APP), affinity=anti)])
    again = solve([pod(f"web-{i}", labels=dict(APP), affinity=anti) for i in (1, 2)], existing=[running])
    assert len(again.new_nodeclaims) == 2
    assert sorted(zone_of(c) for c in again.new_nodeclaims) == ["us-east-1b", "us-east-1c"]
    third = solve([pod("web-3", labels=dict(APP), affinity=anti)], existing=[running])
    assert "us-east-1a" not in str(third.new_nodeclaims[0].requirements.get(wk.ZONE))
    refused = solve(
        [pod(f"web-{i}", labels=dict(APP), affinity=anti) for i in range(1, 5)], existing=[running]
    )
    reason = next(iter(refused.unschedulable.values()))["default"]
    assert "pod anti-affinity on topology.kubernetes.io/zone with pods app=web" in reason


def test_preferred_pod_affinity_goes_before_preferred_node_affinity() -> None:
    # The pod prefers zone c (node affinity) and prefers to be near db (in zone a). Both cannot hold;
    # Karpenter drops the pod affinity preference first, so the node affinity preference wins.
    db = pod("db", labels={"app": "db"})
    existing = [node("n-a", "us-east-1a", cpu=1000, pods=[db])]
    spec = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": term((wk.ZONE, "In", ["us-east-1c"]))}
            ]
        },
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": {"app": "db"}},
                        "topologyKey": wk.ZONE,
                    },
                }
            ]
        },
    }
    result = solve([pod("p", affinity=spec)], existing=existing)
    assert zone_of(claim_of(result, "default/p")) == "us-east-1c"


def test_tainted_existing_node_does_not_count_as_a_spread_domain_for_intolerant_pods_with_honor() -> None:
    tainted = node("t-a", "us-east-1a", taints=[Taint("k", "v", "NoSchedule")])
    result = solve(spread_pods(3, spread(nodeTaintsPolicy="Honor")), existing=[tainted])
    assert "t-a" not in result.existing
    assert pods_per_zone(result) == Counter({z: 1 for z in ZONES})
