"""The simulated kube-scheduler's filter and score (pure), user-data parsing and naming helpers."""

from __future__ import annotations

import random
from typing import Any

import pytest
from serverless_karpenter_sim.cluster.controllers import _deletion_order, _index_ranges
from serverless_karpenter_sim.cluster.kubelet import parse_user_data, region_of
from serverless_karpenter_sim.cluster.objects import (
    generated_name,
    label_selector_matches,
    pod_requests,
    template_hash,
    toleration_tolerates,
)
from serverless_karpenter_sim.cluster.scheduler import ClusterSnapshot, fit_error_message

from tests import builders
from tests.builders import node

Obj = dict[str, Any]
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"


_counter = iter(range(1_000_000))


def pod(name: str, **fields: Any) -> Obj:
    """A pod with a uid and a creation time, which the scheduler orders its queue by."""
    created = f"2026-01-01T00:00:{next(_counter) % 60:02d}Z"
    return builders.pod(name, uid=f"uid-{name}", created=created, **fields)


def schedule(
    nodes: list[Obj], existing: list[Obj], incoming: Obj, **kw: Any
) -> tuple[str | None, str | None]:
    snapshot = ClusterSnapshot(nodes, existing, rng=random.Random(1), **kw)
    result = snapshot.schedule(snapshot.pod_info(incoming))
    return result.node_name, result.message


def place_all(nodes: list[Obj], existing: list[Obj], incoming: list[Obj], **kw: Any) -> dict[str, str | None]:
    snapshot = ClusterSnapshot(nodes, existing, rng=random.Random(1), **kw)
    out: dict[str, str | None] = {}
    for p in incoming:
        info = snapshot.pod_info(p)
        result = snapshot.schedule(info)
        out[p["metadata"]["name"]] = result.node_name
        if result.node_name:
            snapshot.assume(info, result.node_name)
    return out


# --- messages and resources ---


def test_fit_error_message_is_kube_scheduler_shaped() -> None:
    message = fit_error_message(3, {"node(s) had untolerated taint {k: v}": 2, "Insufficient cpu": 1})
    assert message == "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint {k: v}."


def test_insufficient_resources_are_counted_per_resource() -> None:
    nodes = [node("a", cpu="1", memory="1Gi"), node("b", cpu="8", memory="1Gi"), node("c", cpu="1")]
    name, message = schedule(nodes, [], pod("p", cpu="2", memory="2Gi"))
    assert name is None
    assert message == "0/3 nodes are available: 2 Insufficient cpu, 2 Insufficient memory."


def test_pods_already_on_a_node_use_its_room_and_pod_count() -> None:
    nodes = [node("a", cpu="2"), node("b", pods="1")]
    existing = [pod("x", cpu="1500m", node="a"), pod("y", cpu="100m", node="b")]
    name, message = schedule(nodes, existing, pod("p", cpu="1"))
    assert name is None
    assert message == "0/2 nodes are available: 1 Insufficient cpu, 1 Too many pods."


def test_finished_pods_free_their_room() -> None:
    done = pod("x", cpu="2", node="a")
    done["status"]["phase"] = "Succeeded"
    assert schedule([node("a", cpu="2")], [done], pod("p", cpu="2"))[0] == "a"


def test_requests_include_init_max_sidecars_and_overhead() -> None:
    spec = {
        "initContainers": [
            {"name": "init", "resources": {"requests": {"cpu": "3"}}},
            {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
        ],
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "1"}}},
            {"name": "b", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
        ],
        "overhead": {"cpu": "250m"},
    }
    requests = pod_requests(spec)
    # max(3 (init), 1 + 1 + 0.5 sidecar) + 0.25 overhead; b's missing request defaults to its limit.
    assert requests["cpu"] == 3250
    assert requests["memory"] == 1 << 30
    assert requests["pods"] == 1


def test_no_nodes_at_all() -> None:
    assert schedule([], [], pod("p")) == (None, "no nodes available to schedule pods")


def test_nodes_being_deleted_are_neither_candidates_nor_counted() -> None:
    gone = node("a")
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    name, message = schedule([gone, node("b", cpu="500m")], [], pod("p"))
    assert name is None
    assert message == "0/1 nodes are available: 1 Insufficient cpu."


# --- taints, unschedulable, readiness ---


def test_taints_and_tolerations() -> None:
    taint = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    nodes = [node("a", taints=[taint])]
    name, message = schedule(nodes, [], pod("p"))
    assert name is None
    assert message == "0/1 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}."
    tolerating = pod("q", tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu"}])
    assert schedule(nodes, [], tolerating)[0] == "a"
    soft = [node("b", taints=[{"key": "k", "effect": "PreferNoSchedule"}])]
    assert schedule(soft, [], pod("r"))[0] == "b"


def test_prefer_no_schedule_taint_steers_the_choice() -> None:
    nodes = [node("a", taints=[{"key": "k", "effect": "PreferNoSchedule"}]), node("b")]
    assert schedule(nodes, [], pod("p"))[0] == "b"


def test_not_ready_nodes_carry_the_lifecycle_taints() -> None:
    nodes = [node("a", ready="False"), node("b", ready="Unknown"), node("c", unschedulable=True)]
    name, message = schedule(nodes, [], pod("p"))
    assert name is None
    assert message == (
        "0/3 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, "
        "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, 1 node(s) were unschedulable."
    )


def test_unregistered_taint_blocks_until_removed() -> None:
    unregistered = node("a", taints=[{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}])
    name, message = schedule([unregistered], [], pod("p"))
    assert name is None
    assert "{karpenter.sh/unregistered: }" in (message or "")


def test_toleration_semantics() -> None:
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    assert toleration_tolerates({"operator": "Exists"}, taint)
    assert toleration_tolerates({"key": "k", "operator": "Exists", "effect": "NoSchedule"}, taint)
    assert not toleration_tolerates({"key": "k", "operator": "Exists", "effect": "NoExecute"}, taint)
    assert not toleration_tolerates({"key": "k", "value": "w"}, taint)


# --- node selection ---


def test_node_selector_and_required_node_affinity() -> None:
    nodes = [
        node("a", labels={"disk": "ssd", "gen": "5"}),
        node("b", labels={"disk": "hdd", "gen": "7"}),
        node("c", labels={"gen": "9"}),
    ]
    assert schedule(nodes, [], pod("p", nodeSelector={"disk": "ssd"}))[0] == "a"
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["nvme"]}]},
                    {
                        "matchExpressions": [
                            {"key": "gen", "operator": "Gt", "values": ["6"]},
                            {"key": "disk", "operator": "DoesNotExist"},
                        ]
                    },
                ]
            }
        }
    }
    assert schedule(nodes, [], pod("q", affinity=affinity))[0] == "c"
    name, message = schedule(nodes, [], pod("r", nodeSelector={"disk": "nvme"}))
    assert name is None
    assert message == "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."


def test_match_fields_on_node_name() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}
                ]
            }
        }
    }
    assert schedule([node("a"), node("b")], [], pod("p", affinity=affinity))[0] == "b"


def test_preferred_node_affinity_wins_over_spreading() -> None:
    affinity = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "preference": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["x"]}]},
                }
            ]
        }
    }
    nodes = [node("a"), node("b", labels={"tier": "x"}), node("c")]
    assert schedule(nodes, [pod("busy", cpu="2", node="b")], pod("p", affinity=affinity))[0] == "b"


def test_least_and_most_allocated_scoring() -> None:
    nodes = [node("a"), node("b")]
    existing = [pod("busy", cpu="2", memory="8Gi", node="a")]
    assert schedule(nodes, existing, pod("p"))[0] == "b"
    assert schedule(nodes, existing, pod("p"), scoring="MostAllocated")[0] == "a"


def test_host_ports_conflict() -> None:
    ports = [{"containerPort": 80, "hostPort": 8080}]
    taken = pod("x", node="a")
    taken["spec"]["containers"][0]["ports"] = ports
    incoming = pod("p")
    incoming["spec"]["containers"][0]["ports"] = ports
    name, message = schedule([node("a")], [taken], incoming)
    assert name is None
    assert message == "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."
    incoming["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080, "protocol": "UDP"}]
    assert schedule([node("a")], [taken], incoming)[0] == "a"


# --- inter-pod affinity ---


def _anti(app: str, key: str = HOSTNAME) -> Obj:
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
            ]
        }
    }


def test_required_anti_affinity_on_hostname_one_per_node() -> None:
    nodes = [node("a"), node("b"), node("c")]
    incoming = [pod(f"w{i}", labels={"app": "web"}, affinity=_anti("web")) for i in range(4)]
    placed = place_all(nodes, [], incoming)
    assert sorted(n for n in placed.values() if n) == ["a", "b", "c"]
    assert placed["w3"] is None


def test_anti_affinity_message_and_symmetry() -> None:
    nodes = [node("a")]
    existing = [pod("x", labels={"app": "web"}, node="a", affinity=_anti("web"))]
    name, message = schedule(nodes, existing, pod("p", labels={"app": "web"}, affinity=_anti("web")))
    assert message == "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules."
    # The incoming pod has no rule of its own, but the existing pod's rule keeps it away.
    name, message = schedule(nodes, existing, pod("q", labels={"app": "web"}))
    assert name is None
    assert message == "0/1 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity rules."
    # Anti-affinity is namespaced: the same labels elsewhere do not conflict.
    assert schedule(nodes, existing, pod("r", labels={"app": "web"}, namespace="other"))[0] == "a"


def test_required_affinity_follows_matching_pods_and_lets_the_first_one_in() -> None:
    nodes = [node("a", zone="us-west-2a"), node("b", zone="us-west-2b")]
    affinity = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": ZONE}
            ]
        }
    }
    existing = [pod("cache", labels={"app": "cache"}, node="b")]
    assert schedule(nodes, existing, pod("p", affinity=affinity))[0] == "b"
    _, message = schedule(nodes, [], pod("q", affinity=affinity))
    assert message == "0/2 nodes are available: 2 node(s) didn't match pod affinity rules."
    # A pod that matches its own term may start the group.
    assert schedule(nodes, [], pod("r", labels={"app": "cache"}, affinity=affinity))[0] in ("a", "b")


def test_namespace_selector_widens_a_term() -> None:
    nodes = [node("a"), node("b")]
    existing = [pod("x", labels={"app": "db"}, node="a", namespace="team-a")]
    affinity = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": "db"}},
                    "namespaceSelector": {"matchLabels": {"team": "a"}},
                    "topologyKey": HOSTNAME,
                }
            ]
        }
    }
    namespaces = [
        {"metadata": {"name": "team-a", "labels": {"team": "a"}}},
        {"metadata": {"name": "default"}},
    ]
    assert schedule(nodes, existing, pod("p", affinity=affinity), namespaces=namespaces)[0] == "a"


# --- topology spread ---


def _spread(max_skew: int = 1, key: str = ZONE, when: str = "DoNotSchedule", **extra: Any) -> list[Obj]:
    return [
        {
            "maxSkew": max_skew,
            "topologyKey": key,
            "whenUnsatisfiable": when,
            "labelSelector": {"matchLabels": {"app": "web"}},
            **extra,
        }
    ]


def test_zonal_spread_with_max_skew_one() -> None:
    nodes = [node("a", zone="z1"), node("b", zone="z2"), node("c", zone="z3")]
    incoming = [
        pod(f"w{i}", cpu="100m", labels={"app": "web"}, topologySpreadConstraints=_spread()) for i in range(7)
    ]
    placed = place_all(nodes, [], incoming)
    per_zone = {z: 0 for z in ("a", "b", "c")}
    for n in placed.values():
        assert n is not None
        per_zone[n] += 1
    assert max(per_zone.values()) - min(per_zone.values()) <= 1


def test_spread_blocks_when_the_only_room_would_skew() -> None:
    nodes = [node("a", zone="z1"), node("b", zone="z2", cpu="1")]
    existing = [pod("x", cpu="1", labels={"app": "web"}, node="b")]
    existing += [pod("y", cpu="100m", labels={"app": "web"}, node="a")]
    incoming = pod("p", labels={"app": "web"}, topologySpreadConstraints=_spread())
    # z1 has 1, z2 has 1 but is full; placing in z1 makes 2 vs 1 = skew 1: allowed.
    assert schedule(nodes, existing, incoming)[0] == "a"
    existing.append(pod("z", cpu="100m", labels={"app": "web"}, node="a"))
    name, message = schedule(nodes, existing, incoming)
    assert name is None
    assert message == (
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match pod topology spread constraints."
    )


def test_spread_min_domains_and_missing_label() -> None:
    nodes = [node("a", zone="z1"), {**node("b"), "metadata": {"name": "b", "labels": {HOSTNAME: "b"}}}]
    existing = [pod("x", cpu="100m", labels={"app": "web"}, node="a")]
    incoming = pod("p", labels={"app": "web"}, topologySpreadConstraints=_spread(minDomains=3))
    name, message = schedule(nodes, existing, incoming)
    # With fewer domains than minDomains the global minimum is 0: 1 + 1 - 0 > 1.
    assert name is None
    assert message == (
        "0/2 nodes are available: 1 node(s) didn't match pod topology spread constraints, "
        "1 node(s) didn't match pod topology spread constraints (missing required label)."
    )


def test_spread_node_affinity_policy_honor_ignores_ineligible_domains() -> None:
    nodes = [node("a", zone="z1", labels={"pool": "x"}), node("b", zone="z2")]
    existing = [pod("x", cpu="100m", labels={"app": "web"}, node="a")]
    incoming = pod(
        "p", labels={"app": "web"}, nodeSelector={"pool": "x"}, topologySpreadConstraints=_spread()
    )
    # z2 does not match the pod's nodeSelector, so it is not a domain: z1 alone is never skewed.
    assert schedule(nodes, existing, incoming)[0] == "a"
    ignoring = pod(
        "q",
        labels={"app": "web"},
        nodeSelector={"pool": "x"},
        topologySpreadConstraints=_spread(nodeAffinityPolicy="Ignore"),
    )
    assert schedule(nodes, existing, ignoring)[0] is None


def test_spread_match_label_keys_count_only_the_same_revision() -> None:
    nodes = [node("a", zone="z1"), node("b", zone="z2")]
    existing = [
        pod(f"old{i}", cpu="100m", labels={"app": "web", "pod-template-hash": "old"}, node="a")
        for i in range(3)
    ]
    incoming = pod(
        "p",
        labels={"app": "web", "pod-template-hash": "new"},
        nodeSelector={HOSTNAME: "a"},
        topologySpreadConstraints=_spread(matchLabelKeys=["pod-template-hash"]),
    )
    assert schedule(nodes, existing, incoming)[0] == "a"


def test_schedule_anyway_spread_prefers_the_emptier_zone() -> None:
    nodes = [node("a", zone="z1"), node("b", zone="z2")]
    existing = [pod(f"x{i}", cpu="10m", memory="1Mi", labels={"app": "web"}, node="a") for i in range(3)]
    incoming = pod(
        "p",
        cpu="10m",
        memory="1Mi",
        labels={"app": "web"},
        topologySpreadConstraints=_spread(when="ScheduleAnyway"),
    )
    assert schedule(nodes, existing, incoming, scoring="MostAllocated")[0] == "b"


def test_terminating_pods_do_not_count_toward_spread() -> None:
    nodes = [node("a", zone="z1"), node("b", zone="z2", cpu="100m")]
    leaving = pod("x", cpu="100m", labels={"app": "web"}, node="a")
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    incoming = pod("p", labels={"app": "web"}, topologySpreadConstraints=_spread())
    assert schedule(nodes, [leaving], incoming)[0] == "a"


# --- volumes ---


def test_bound_volume_pins_the_zone_and_missing_claim_is_reported() -> None:
    nodes = [node("a", zone="us-west-2a"), node("b", zone="us-west-2b")]
    claims = [{"metadata": {"name": "data", "namespace": "default"}, "spec": {"volumeName": "pv-1"}}]
    volumes = [
        {
            "metadata": {"name": "pv-1"},
            "spec": {
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["us-west-2b"]}]}
                        ]
                    }
                }
            },
        }
    ]
    mounting = pod("p", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}])
    assert schedule(nodes, [], mounting, claims=claims, volumes=volumes)[0] == "b"
    _, message = schedule(nodes[:1], [], mounting, claims=claims, volumes=volumes)
    assert message == "0/1 nodes are available: 1 node(s) had volume node affinity conflict."
    missing = pod("q", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "nope"}}])
    assert (
        schedule(nodes, [], missing)[1] == '0/2 nodes are available: persistentvolumeclaim "nope" not found.'
    )


def test_legacy_zone_label_on_volume() -> None:
    nodes = [node("a", zone="us-west-2a"), node("b", zone="us-west-2b")]
    claims = [{"metadata": {"name": "data", "namespace": "default"}, "spec": {"volumeName": "pv-1"}}]
    volumes = [{"metadata": {"name": "pv-1", "labels": {ZONE: "us-west-2a__us-west-2c"}}, "spec": {}}]
    mounting = pod("p", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}])
    assert schedule(nodes, [], mounting, claims=claims, volumes=volumes)[0] == "a"
    _, message = schedule(nodes[1:], [], mounting, claims=claims, volumes=volumes)
    assert message == "0/1 nodes are available: 1 node(s) had no available volume zone."


# --- assume within a pass ---


def test_assumed_pods_use_up_room_within_one_pass() -> None:
    placed = place_all([node("a", cpu="3")], [], [pod(f"p{i}") for i in range(5)])
    assert sum(1 for n in placed.values() if n) == 3


# --- helpers ---


def test_label_selector_semantics() -> None:
    assert not label_selector_matches(None, {"a": "b"})
    assert label_selector_matches({}, {"a": "b"})
    selector = {
        "matchLabels": {"a": "b"},
        "matchExpressions": [{"key": "c", "operator": "NotIn", "values": ["x"]}],
    }
    assert label_selector_matches(selector, {"a": "b"})
    assert not label_selector_matches(selector, {"a": "b", "c": "x"})


def test_names_are_kubernetes_shaped_and_reproducible() -> None:
    first = generated_name("web-7d9f8b6c5-", random.Random(3))
    assert first == generated_name("web-7d9f8b6c5-", random.Random(3))
    assert len(first) == len("web-7d9f8b6c5-") + 5
    assert set(first[-5:]) <= set("bcdfghjklmnpqrstvwxz2456789")
    assert len(generated_name("x" * 80, random.Random(0))) == 63
    template = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}]}}
    assert template_hash(template) == template_hash(
        {"spec": template["spec"], "metadata": template["metadata"]}
    )
    assert template_hash(template) != template_hash(template, collision_count=1)


def test_scale_down_removes_pending_then_not_ready_then_newest() -> None:
    running_old = pod("old", node="a")
    running_old["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    ]
    running_new = pod("new", node="b")
    running_new["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:05:00Z"}
    ]
    not_ready = pod("starting", node="c")
    pending = pod("pending")
    order = [p["metadata"]["name"] for p in _deletion_order([running_old, running_new, not_ready, pending])]
    assert order == ["pending", "starting", "new", "old"]


def test_index_ranges() -> None:
    assert _index_ranges([0, 1, 2, 4, 6, 7]) == "0-2,4,6-7"
    assert _index_ranges([]) == ""


# --- user data ---

NODEADM = """MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="//"

--//
Content-Type: application/node.eks.aws

apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  cluster:
    name: demo
  kubelet:
    config:
      maxPods: 110
      registerWithTaints:
        - key: karpenter.sh/unregistered
          effect: NoExecute
    flags:
      - --node-labels="karpenter.sh/capacity-type=spot,karpenter.sh/nodepool=default"

--//
Content-Type: text/x-shellscript; charset="us-ascii"

#!/bin/bash
echo hello
--//--
"""


def test_nodeadm_multipart_user_data() -> None:
    flags = parse_user_data(NODEADM)
    assert flags.labels == {"karpenter.sh/capacity-type": "spot", "karpenter.sh/nodepool": "default"}
    assert flags.taints == [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]


def test_nodeadm_flags_with_register_with_taints() -> None:
    text = NODEADM.replace(
        '      - --node-labels="karpenter.sh/capacity-type=spot,karpenter.sh/nodepool=default"',
        "      - --node-labels=a=b\n      - --register-with-taints=dedicated=gpu:NoSchedule,other:NoExecute",
    ).replace(
        "      registerWithTaints:\n        - key: karpenter.sh/unregistered\n          effect: NoExecute\n",
        "",
    )
    flags = parse_user_data(text)
    assert flags.labels == {"a": "b"}
    assert flags.taints == [
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
        {"key": "other", "effect": "NoExecute"},
    ]


def test_bootstrap_sh_user_data() -> None:
    script = (
        "#!/bin/bash\n/etc/eks/bootstrap.sh demo --kubelet-extra-args "
        "'--node-labels=team=a,karpenter.sh/nodepool=default "
        "--register-with-taints=karpenter.sh/unregistered:NoExecute'"
    )
    flags = parse_user_data(script)
    assert flags.labels == {"team": "a", "karpenter.sh/nodepool": "default"}
    assert flags.taints == [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]


def test_bottlerocket_user_data() -> None:
    toml = """
[settings.kubernetes]
cluster-name = "demo"
[settings.kubernetes.node-labels]
"karpenter.sh/nodepool" = "default"
[settings.kubernetes.node-taints]
"karpenter.sh/unregistered" = [":NoExecute"]
"legacy" = ["NoSchedule"]
"dedicated" = ["gpu:NoSchedule"]
"""
    flags = parse_user_data(toml)
    assert flags.bottlerocket
    assert flags.labels == {"karpenter.sh/nodepool": "default"}
    assert {"key": "karpenter.sh/unregistered", "effect": "NoExecute"} in flags.taints
    assert {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"} in flags.taints
    assert {"key": "legacy", "effect": "NoSchedule"} in flags.taints


@pytest.mark.parametrize("text", [None, "", "#!/bin/bash\necho nothing"])
def test_user_data_without_flags(text: str | None) -> None:
    flags = parse_user_data(text)
    assert flags.labels == {}
    assert flags.taints == []


def test_region_of_zone() -> None:
    assert region_of("us-west-2a") == "us-west-2"
    assert region_of("us-west-2-lax-1a") == "us-west-2"
    assert region_of("us-gov-west-1b") == "us-gov-west-1"
