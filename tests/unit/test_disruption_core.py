"""The pure disruption core: budgets, blockers, drift, replacement pricing, methods and explanations."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from serverless_karpenter.api import labels as wk
from serverless_karpenter.api.ec2nodeclass import EC2NodeClass
from serverless_karpenter.api.nodepool import NODEPOOL_HASH_VERSION, Budget, NodePool
from serverless_karpenter.catalog import Offering
from serverless_karpenter.disruption import methods as m
from serverless_karpenter.disruption.budgets import allowed_disruptions, budget_active, budget_nodes
from serverless_karpenter.disruption.candidates import (
    POD_EVENT_ANNOTATION,
    POD_SET_ANNOTATION,
    Blocker,
    Candidate,
    Options,
    Snapshot,
    candidates,
    consolidation_blocker,
    expired,
    graceful_blocker,
    no_controller_blocker,
    observe_pod_events,
)
from serverless_karpenter.disruption.explain import explain_node
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.scheduling.requirements import Requirements
from serverless_karpenter.scheduling.scheduler import NewNodeClaim, NodePoolTemplate, nodepool_requirements

from tests import builders

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)  # a Monday
GI = 1 << 30


@dataclass(frozen=True)
class FakeType:
    name: str
    cpu: int
    price: float
    spot_price: float | None = None

    @property
    def capacity(self) -> dict[str, int]:
        return {"cpu": self.cpu * 1000, "memory": self.cpu * 4 * GI, "pods": 110}

    @property
    def allocatable(self) -> dict[str, int]:
        return {"cpu": self.cpu * 1000 - 100, "memory": self.cpu * 4 * GI - GI // 2, "pods": 110}

    @property
    def labels(self) -> dict[str, str]:
        return {wk.INSTANCE_TYPE: self.name, wk.ARCH: "amd64", wk.OS: "linux"}

    @property
    def offerings(self) -> list[Offering]:
        out = [Offering("zone-a", "on-demand", self.price, True)]
        if self.spot_price is not None:
            out.append(Offering("zone-a", "spot", self.spot_price, True))
        return out


TYPES = [FakeType("m.large", 2, 0.096), FakeType("m.xlarge", 4, 0.192), FakeType("c.large", 2, 0.085)]


def pool_manifest(name: str = "default", **disruption: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [
                        {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand", "spot"]}
                    ],
                }
            },
            "disruption": {"consolidateAfter": "1m", **disruption},
        },
    }


def template(
    manifest: dict[str, Any], types: list[FakeType], overhead: dict[str, int] | None = None
) -> NodePoolTemplate:
    reqs, labels, taints = nodepool_requirements(manifest)
    return NodePoolTemplate(
        name=manifest["metadata"]["name"],
        nodeclass="default",
        weight=0,
        requirements=reqs,
        labels=labels,
        taints=taints,
        instance_types=types,
        daemon_overhead=overhead or {},
    )


def record(
    name: str,
    it: FakeType,
    *,
    capacity_type: str = "on-demand",
    age: timedelta = timedelta(hours=1),
    **extra: Any,
) -> NodeClaimRecord:
    price = it.price if capacity_type == "on-demand" else (it.spot_price or it.price)
    return NodeClaimRecord(
        name=name,
        nodepool=extra.pop("nodepool", "default"),
        nodeclass="default",
        state=NodeClaimState.INITIALIZED,
        instance_type=it.name,
        capacity_type=capacity_type,
        price_per_hour=price,
        node_name=f"node-{name}",
        instance_id=f"i-{name}",
        zone="zone-a",
        image_id=extra.pop("image_id", "ami-1"),
        created_at=NOW - age,
        initialized_at=NOW - age,
        allocatable=dict(it.allocatable),
        capacity=dict(it.capacity),
        **extra,
    )


def node(rec: NodeClaimRecord, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """The Node of ``rec``, as its kubelet registered it and our registration labelled it."""
    it = next(t for t in TYPES + EXTRA if t.name == rec.instance_type)
    return builders.node(
        rec.node_name,
        f"{it.allocatable['cpu']}m",
        str(it.allocatable["memory"]),
        zone="zone-a",
        labels={
            wk.NODEPOOL: rec.nodepool,
            wk.INSTANCE_TYPE: it.name,
            wk.CAPACITY_TYPE: rec.capacity_type,
            wk.ARCH: "amd64",
            wk.OS: "linux",
        },
        annotations=annotations or {},
        provider_id=f"aws:///zone-a/{rec.instance_id}",
    )


EXTRA: list[FakeType] = []


def pod(
    name: str,
    on: NodeClaimRecord | None,
    cpu: str = "500m",
    *,
    owner: str | None = "ReplicaSet",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    started: datetime | None = None,
) -> dict[str, Any]:
    """A Running pod of a workload (``owner``), bound to ``on``'s node."""
    return builders.pod(
        name,
        cpu,
        "256Mi",
        node=on.node_name if on else None,
        phase="Running",
        owner=owner,
        labels=labels or {"app": "web"},
        annotations=annotations or {},
        started=started or NOW - timedelta(hours=1),
    )


def snapshot(
    records: list[NodeClaimRecord],
    pods: list[dict[str, Any]],
    *,
    manifest: dict[str, Any] | None = None,
    types: list[FakeType] | None = None,
    pdbs: list[dict[str, Any]] | None = None,
    node_annotations: dict[str, dict[str, str]] | None = None,
    overhead: dict[str, int] | None = None,
    resolved: dict[str, Any] | None = None,
) -> Snapshot:
    manifest = manifest or pool_manifest()
    return Snapshot(
        now=NOW,
        records=records,
        nodes=[node(r, (node_annotations or {}).get(r.name)) for r in records],
        pods=pods,
        nodepools={manifest["metadata"]["name"]: NodePool.model_validate(manifest)},
        nodepool_manifests={manifest["metadata"]["name"]: manifest},
        nodeclasses={},
        resolved=resolved or {},
        pdbs=pdbs or [],
        templates=[template(manifest, types or TYPES, overhead)],
    )


OPTIONS = Options()


def consolidatable_pair() -> tuple[Snapshot, list[Candidate]]:
    """Two nodes of one pod each, the dearer one's pod fitting on the cheaper, under a 100% budget:
    single-node consolidation deletes the dearer when it has the time."""
    big, small = record("big", TYPES[1]), record("small", TYPES[0])
    snap = snapshot(
        [big, small],
        [pod("p1", big, cpu="1"), pod("p2", small, cpu="500m")],
        manifest=pool_manifest(budgets=[{"nodes": "100%"}]),
    )
    return snap, candidates(snap)[0]


def kind(blocker: Blocker | None) -> str | None:
    return blocker.kind if blocker is not None else None


# --- budgets -------------------------------------------------------------------------------------------


def test_budget_nodes_count_or_percent_rounded_up() -> None:
    assert budget_nodes(Budget(nodes="10%"), 3) == 1
    assert budget_nodes(Budget(nodes="10%"), 0) == 0
    assert budget_nodes(Budget(nodes="25%"), 10) == 3
    assert budget_nodes(Budget(nodes="5"), 3) == 5


def test_scheduled_budget_is_active_for_its_duration_only() -> None:
    business_hours = Budget(nodes="0", schedule="0 9 * * mon-fri", duration="8h")
    assert budget_active(business_hours, NOW)  # Monday 12:00
    assert not budget_active(business_hours, NOW.replace(hour=18))
    assert not budget_active(business_hours, NOW + timedelta(days=5))  # Saturday
    assert budget_active(Budget(nodes="1"), NOW)


def test_most_restrictive_active_budget_wins_and_disrupting_nodes_count() -> None:
    budgets = [
        Budget(nodes="50%"),
        Budget(nodes="2", reasons=["Drifted"]),
        Budget(nodes="0", reasons=["Empty"], schedule="@daily", duration="1h"),
    ]
    assert allowed_disruptions(budgets, "Drifted", 10, 1, NOW).allowed == 1
    assert allowed_disruptions(budgets, "Underutilized", 10, 1, NOW).allowed == 4
    # The Empty window is at midnight; at noon it is not active.
    assert allowed_disruptions(budgets, "Empty", 10, 0, NOW).allowed == 5
    assert allowed_disruptions(budgets, "Empty", 10, 0, NOW.replace(hour=0, minute=30)).allowed == 0


def test_a_reason_no_budget_names_is_unbounded() -> None:
    verdict = allowed_disruptions([Budget(nodes="0", reasons=["Empty"])], "Drifted", 4, 0, NOW)
    assert verdict.allowed == 4 and verdict.budget is None


# --- candidates and blockers ------------------------------------------------------------------------------


def test_candidates_are_initialized_nodes_not_in_a_command() -> None:
    a = record("a", TYPES[0])
    b = record("b", TYPES[0]).model_copy(update={"state": NodeClaimState.REGISTERED})
    pool, skipped = candidates(snapshot([a, b], []))
    assert [c.name for c in pool] == ["a"]
    assert "Registered" in skipped["b"]


@pytest.mark.parametrize(
    ("annotations", "started", "blocked"),
    [
        ({wk.DO_NOT_DISRUPT: "true"}, None, True),
        ({wk.DO_NOT_DISRUPT: "30m"}, NOW - timedelta(minutes=10), True),
        ({wk.DO_NOT_DISRUPT: "30m"}, NOW - timedelta(minutes=40), False),
        ({}, None, False),
    ],
)
def test_do_not_disrupt_on_pods_true_or_duration(
    annotations: dict[str, str], started: datetime | None, blocked: bool
) -> None:
    a = record("a", TYPES[0])
    pool, _ = candidates(snapshot([a], [pod("p", a, annotations=annotations, started=started)]))
    blocker = graceful_blocker(pool[0], [], NOW)
    assert (blocker is not None and blocker.kind == "DoNotDisrupt") is blocked


def test_do_not_disrupt_on_the_node_and_pdbs_block() -> None:
    a = record("a", TYPES[0])
    snap = snapshot([a], [pod("p", a)], node_annotations={"a": {wk.DO_NOT_DISRUPT: "true"}})
    pool, _ = candidates(snap)
    assert kind(graceful_blocker(pool[0], [], NOW)) == "DoNotDisrupt"
    pdb = {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 0},
    }
    pool, _ = candidates(snapshot([a], [pod("p", a)]))
    blocker = graceful_blocker(pool[0], [pdb], NOW)
    assert blocker is not None and blocker.kind == "PDB" and "default/web" in blocker.message
    assert graceful_blocker(pool[0], [{**pdb, "status": {"disruptionsAllowed": 1}}], NOW) is None


def test_pods_without_controller_block_consolidation() -> None:
    a = record("a", TYPES[0])
    pool, _ = candidates(snapshot([a], [pod("p", a, owner=None)]))
    assert kind(no_controller_blocker(pool[0])) == "NoController"


def test_young_nodes_and_recent_pod_events_are_left_alone() -> None:
    young = record("young", TYPES[0], age=timedelta(minutes=5))
    busy = record("busy", TYPES[0])
    pods = [pod("p", busy, started=NOW - timedelta(seconds=20))]
    pool, _ = candidates(snapshot([young, busy], pods))
    by_name = {c.name: c for c in pool}
    # consolidateAfter (1m here) is the churn guard, as Karpenter's: no minimum node age by default.
    assert consolidation_blocker(by_name["young"], OPTIONS, NOW) is None
    aged = Options(min_node_age=timedelta(minutes=10))
    assert kind(consolidation_blocker(by_name["young"], aged, NOW)) == "NodeAge"
    assert kind(consolidation_blocker(by_name["busy"], OPTIONS, NOW)) == "ConsolidateAfter"


def test_pod_deletions_are_observed_by_fingerprint() -> None:
    a = record("a", TYPES[0])
    first = observe_pod_events(a, [pod("p", a), pod("q", a)], NOW - timedelta(minutes=5))
    assert first is not None
    seen = a.model_copy(update={"annotations": first})
    assert observe_pod_events(seen, [pod("q", a), pod("p", a)], NOW) is None
    changed = observe_pod_events(seen, [pod("q", a)], NOW)
    assert changed is not None and changed[POD_EVENT_ANNOTATION] == NOW.isoformat()
    assert changed[POD_SET_ANNOTATION] != first[POD_SET_ANNOTATION]


def test_expiration_from_nodepool_expire_after() -> None:
    manifest = pool_manifest()
    manifest["spec"]["template"]["spec"]["expireAfter"] = "1h"
    pool = NodePool.model_validate(manifest)
    assert expired(record("a", TYPES[0], age=timedelta(minutes=59)), pool, NOW) is None
    assert expired(record("a", TYPES[0], age=timedelta(minutes=61)), pool, NOW) == timedelta(minutes=1)


# --- methods -----------------------------------------------------------------------------------------------


def test_emptiness_deletes_empty_nodes_within_the_budget() -> None:
    records = [record(n, TYPES[0]) for n in "abcd"]
    snap = snapshot(records, [pod("p", records[0])])
    evaluation = m.evaluate(snap, candidates(snap)[0], OPTIONS)
    assert evaluation.command is not None and evaluation.command.method == m.EMPTINESS
    # 10% of 4 nodes, rounded up: one at a time.
    assert len(evaluation.command.candidates) == 1
    assert any(b.kind == "Budget" for b in evaluation.blockers.values())


def test_budget_zero_for_empty_blocks_emptiness_with_a_reason() -> None:
    manifest = pool_manifest(budgets=[{"nodes": "0", "reasons": ["Empty"]}], consolidationPolicy="WhenEmpty")
    a = record("a", TYPES[0])
    snap = snapshot([a], [], manifest=manifest)
    evaluation = m.evaluate(snap, candidates(snap)[0], OPTIONS)
    assert evaluation.command is None
    assert evaluation.blockers["a"].kind == "Budget"
    assert 'nodes: "0"' in evaluation.blockers["a"].message


def test_single_node_deletes_when_pods_fit_elsewhere() -> None:
    big, small = record("big", TYPES[1]), record("small", TYPES[0])
    pods = [pod("p1", big, cpu="1"), pod("p2", small, cpu="500m")]
    snap = snapshot([big, small], pods)
    command = m.evaluate(snap, candidates(snap)[0], OPTIONS, methods=(m.SINGLE,)).command
    # Both carry one pod; the dearer node goes first, its pod fitting on the cheaper one.
    assert command is not None and command.action == "delete" and command.names() == ["big"]


def test_single_node_replaces_with_a_cheaper_type() -> None:
    big = record("big", TYPES[1])
    snap = snapshot([big], [pod("p1", big, cpu="1")])
    command = m.evaluate(snap, candidates(snap)[0], OPTIONS, methods=(m.SINGLE,)).command
    assert command is not None and command.action == "replace"
    names = [it.name for it in command.replacements[0].instance_types]
    assert "m.xlarge" not in names and "c.large" in names


def test_no_same_type_replacement_and_minimum_saving() -> None:
    only_same = [FakeType("m.large", 2, 0.096), FakeType("n.large", 2, 0.090)]
    a = record("a", only_same[0])
    EXTRA.extend(only_same)
    try:
        snap = snapshot([a], [pod("p", a, cpu="1")], types=only_same)
        # Strictly cheaper is enough, as Karpenter: n.large (6% cheaper); m.large never (same type).
        command = m.evaluate(snap, candidates(snap)[0], OPTIONS, methods=(m.SINGLE,)).command
        assert command is not None and [it.name for it in command.replacements[0].instance_types] == [
            "n.large"
        ]
        # With the saving knob at 10%, nothing is worth it, and the reason says so.
        margin = Options(min_savings_percent=10)
        evaluation = m.evaluate(snap, candidates(snap)[0], margin, methods=(m.SINGLE,))
        assert evaluation.command is None
        why = evaluation.blockers["a"].message
        assert why.startswith("no cheaper replacement: current m.large on-demand $0.0960/h; best replacement")
        assert "at least 10% cheaper" in why
    finally:
        EXTRA.clear()


def test_spot_to_spot_needs_the_flag_and_fifteen_cheaper_types() -> None:
    many = [FakeType(f"s{i}.large", 2, 0.1, spot_price=0.02 + i * 0.001) for i in range(20)]
    current = FakeType("cur.xlarge", 4, 0.2, spot_price=0.08)
    EXTRA.extend([current, *many])
    try:
        a = record("a", current, capacity_type="spot")
        snap = snapshot([a], [pod("p", a, cpu="1")], types=[current, *many])
        pool = candidates(snap)[0]
        # Without the flag a spot node is never replaced by spot, and on-demand is no cheaper here.
        assert m.evaluate(snap, pool, OPTIONS, methods=(m.SINGLE,)).command is None
        command = m.evaluate(snap, pool, Options(spot_to_spot=True), methods=(m.SINGLE,)).command
        assert command is not None and len(command.replacements[0].instance_types) == 15
        few = [current, *many[:10]]
        snap = snapshot([a], [pod("p", a, cpu="1")], types=few)
        evaluation = m.evaluate(snap, candidates(snap)[0], Options(spot_to_spot=True), methods=(m.SINGLE,))
        assert "needs 15 cheaper instance types, found 10" in evaluation.blockers["a"].message
    finally:
        EXTRA.clear()


def test_multi_node_merges_two_underused_nodes_onto_one_cheaper_node() -> None:
    a, b = record("a", TYPES[1]), record("b", TYPES[1])
    snap = snapshot(
        [a, b],
        [pod("p1", a, cpu="600m"), pod("p2", b, cpu="600m")],
        manifest=pool_manifest(budgets=[{"nodes": "100%"}]),
    )
    command = m.evaluate(snap, candidates(snap)[0], OPTIONS).command
    assert command is not None and command.method == m.MULTI and command.action == "replace"
    assert command.names() == ["a", "b"]
    assert "m.xlarge" not in [it.name for it in command.replacements[0].instance_types]


def test_no_merge_at_equal_price_even_when_it_removes_daemonset_overhead() -> None:
    """Two x.large are not merged onto one x.xlarge of the same list price: Karpenter requires a strictly
    cheaper replacement (the old code merged them "saving $0.0000/h" when DaemonSets ran)."""
    two = [FakeType("x.large", 2, 0.1), FakeType("x.xlarge", 4, 0.2)]
    EXTRA.extend(two)
    try:
        a, b = record("a", two[0]), record("b", two[0])
        pods = [pod("p1", a, cpu="1"), pod("p2", b, cpu="1")]
        manifest = pool_manifest(budgets=[{"nodes": "100%"}])
        for overhead in (None, {"cpu": 200}):
            snap = snapshot([a, b], pods, types=two, manifest=manifest, overhead=overhead)
            evaluation = m.evaluate(snap, candidates(snap)[0], OPTIONS)
            assert evaluation.command is None, evaluation.command
    finally:
        EXTRA.clear()


@dataclass
class Resolved:
    amis: dict[str, str]
    security_group_ids: list[str]
    zones: list[str]
    subnets: list[Any]


def test_drift_by_ami_nodepool_hash_and_requirements() -> None:
    manifest = pool_manifest()
    pool = NodePool.model_validate(manifest)
    a = record("a", TYPES[0], annotations={wk.NODEPOOL_HASH: pool.template_hash()})
    resolved = {"default": Resolved({"amd64": "ami-2"}, [], ["zone-a"], [])}
    snap = snapshot([a], [], manifest=manifest, resolved=resolved)
    reason = m.drift_reason(snap, candidates(snap)[0][0])
    assert reason is not None and reason.startswith("AMIDrift")
    snap = snapshot([a], [], manifest=manifest)
    assert m.drift_reason(snap, candidates(snap)[0][0]) is None
    changed = pool_manifest()
    changed["spec"]["template"]["spec"]["expireAfter"] = "24h"
    snap = snapshot([a], [], manifest=changed)
    assert (m.drift_reason(snap, candidates(snap)[0][0]) or "").startswith("NodePoolDrifted")
    spot_only = pool_manifest()
    spot_only["spec"]["template"]["spec"]["requirements"] = [
        {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["spot"]}
    ]
    snap = snapshot([a.model_copy(update={"annotations": {}})], [], manifest=spot_only)
    assert (m.drift_reason(snap, candidates(snap)[0][0]) or "").startswith("RequirementsDrifted")


def test_nodeclass_hash_drift() -> None:
    spec: dict[str, Any] = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "r",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"a": "b"}}],
            "securityGroupSelectorTerms": [{"tags": {"a": "b"}}],
        },
    }
    before = EC2NodeClass.model_validate(spec)
    after = EC2NodeClass.model_validate({**spec, "spec": {**spec["spec"], "tags": {"team": "x"}}})
    a = record("a", TYPES[0], annotations={wk.EC2NODECLASS_HASH: before.static_hash()})
    snap = snapshot([a], [])
    snap.nodeclasses = {"default": after}
    assert (m.drift_reason(snap, candidates(snap)[0][0]) or "").startswith("NodeClassDrifted")


def test_a_hash_of_another_version_is_not_drift() -> None:
    """Karpenter's drift compares hashes of one version only (areStaticFieldsDrifted): a node Karpenter
    stamped (v3, v6) is not drifted by our hashes, which are computed differently; ours still drift."""
    changed = pool_manifest()
    changed["spec"]["template"]["spec"]["expireAfter"] = "24h"
    karpenters = record(
        "a",
        TYPES[0],
        annotations={
            wk.NODEPOOL_HASH: "11142864721958693070",
            wk.NODEPOOL_HASH_VERSION: "v3",
            wk.EC2NODECLASS_HASH: "1234",
            wk.EC2NODECLASS_HASH_VERSION: "v6",
        },
    )
    snap = snapshot([karpenters], [], manifest=changed)
    assert m.drift_reason(snap, candidates(snap)[0][0]) is None
    ours = karpenters.model_copy(
        update={
            "annotations": {
                wk.NODEPOOL_HASH: NodePool.model_validate(pool_manifest()).template_hash(),
                wk.NODEPOOL_HASH_VERSION: NODEPOOL_HASH_VERSION,
            }
        }
    )
    snap = snapshot([ours], [], manifest=changed)
    assert (m.drift_reason(snap, candidates(snap)[0][0]) or "").startswith("NodePoolDrifted")


# --- explain ---------------------------------------------------------------------------------------------


def test_explain_names_the_blocking_rule_or_the_acting_method() -> None:
    a, b = record("a", TYPES[0]), record("b", TYPES[1])
    pods = [pod("p", a, annotations={wk.DO_NOT_DISRUPT: "true"}), pod("q", b, cpu="3")]
    snap = snapshot([a, b], pods)
    out = explain_node(snap, "node-a", OPTIONS)
    assert out.nodeclaim == "a" and out.blocker is not None and out.blocker.kind == "DoNotDisrupt"
    assert "blocked" in out.render() and wk.DO_NOT_DISRUPT in out.render()
    out = explain_node(snap, "node-b", OPTIONS)
    assert (
        out.blocker is not None
        and "no cheaper replacement: current m.xlarge on-demand $0.1920/h" in out.render()
    )
    empty = record("c", TYPES[0])
    out = explain_node(snapshot([empty], []), "c", OPTIONS)
    assert out.acting is not None and out.acting.startswith("emptiness: delete")
    assert explain_node(snap, "nope", OPTIONS).nodeclaim is None


def test_requirements_helper_reads_label_selectors() -> None:
    reqs = Requirements.from_labels({"app": "web"})
    assert reqs.matches_labels({"app": "web"}) is None
    _ = NewNodeClaim  # the replacement type is the scheduler's own
