"""Issue 18: one honest view of capacity for disruption, budgets over initialized nodes, the drift
exception for a terminationGracePeriod, strictly cheaper replacements, and spot-to-spot behind its gate.

Each test here failed on the code before issue 18 (the simulation counted in-flight capacity and empty
registered nodes at full allocatable and ignored pending pods and leaving nodes' pods; budgets counted
registered nodes; drift ignored the grace period; spot-to-spot was single-node only).
"""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.disruption import methods as m
from serverless_karpenter.disruption.candidates import (
    REPLACEMENT_FOR_ANNOTATION,
    Options,
    Snapshot,
    candidates,
)
from serverless_karpenter.disruption.command import COMMAND_ANNOTATION
from serverless_karpenter.lifecycle.model import InstanceTypeOption, NodeClaimRecord, NodeClaimState

from tests import builders
from tests.unit.test_disruption_core import (
    EXTRA,
    NOW,
    OPTIONS,
    TYPES,
    FakeType,
    pod,
    pool_manifest,
    record,
    snapshot,
)


def in_flight(name: str, it: FakeType) -> NodeClaimRecord:
    """A NodeClaim launched for somebody's pods, its node not registered yet."""
    return NodeClaimRecord(
        name=name,
        nodepool="default",
        nodeclass="default",
        state=NodeClaimState.LAUNCHED,
        instance_type=it.name,
        instance_id=f"i-{name}",
        zone="zone-a",
        capacity_type="on-demand",
        price_per_hour=it.price,
        created_at=NOW - timedelta(seconds=20),
        instance_type_options=[
            InstanceTypeOption(
                name=it.name,
                offerings=[("zone-a", "on-demand", it.price)],
                allocatable=it.allocatable,
                capacity=it.capacity,
            )
        ],
        labels={wk.NODEPOOL: "default", wk.INSTANCE_TYPE: it.name, wk.CAPACITY_TYPE: "on-demand"},
    )


def unregistered(snap: Snapshot) -> Snapshot:
    """``snap`` without the Nodes of claims that have none yet (the helper makes one per record)."""
    return dataclasses.replace(snap, nodes=[n for n in snap.nodes if n["metadata"]["name"]])


def commanded(rec: NodeClaimRecord, command_id: str = "c1", stage: str = "replacing") -> NodeClaimRecord:
    marker = {
        "id": command_id,
        "method": m.DRIFT,
        "action": "replace",
        "stage": stage,
        "candidates": [rec.name],
    }
    return rec.model_copy(update={"annotations": {**rec.annotations, COMMAND_ANNOTATION: json.dumps(marker)}})


def single(snap: Any, options: Options = OPTIONS) -> m.Evaluation:
    return m.evaluate(snap, candidates(snap)[0], options, methods=(m.SINGLE,))


# --- one honest view of capacity ------------------------------------------------------------------------


def test_a_candidates_pods_may_not_count_on_capacity_still_in_flight() -> None:
    """The old simulation placed the pod on the in-flight claim and deleted the node at once."""
    a = record("a", TYPES[1])
    snap = unregistered(snapshot([a, in_flight("new", TYPES[1])], [pod("p", a, cpu="1")]))
    evaluation = single(snap)
    assert evaluation.command is None or evaluation.command.action == "replace"
    assert "would schedule against uninitialized nodeclaim/new" in evaluation.blockers["a"].message


def test_a_registered_node_not_yet_initialized_is_no_place_for_a_candidates_pods() -> None:
    a = record("a", TYPES[1])
    fresh = record("fresh", TYPES[1]).model_copy(
        update={"state": NodeClaimState.REGISTERED, "initialized_at": None}
    )
    evaluation = single(snapshot([a, fresh], [pod("p", a, cpu="1")]))
    assert evaluation.command is None or evaluation.command.action == "replace"
    assert "would schedule against uninitialized node/node-fresh" in evaluation.blockers["a"].message


def test_pending_pods_are_placed_too_and_their_new_nodes_are_the_provisioners() -> None:
    """The pending pod is placed with the candidate's: whatever new node it needs, the provisioner
    launches; the command launches only what the candidate's pods need (here nothing)."""
    a, b = record("a", TYPES[1]), record("b", TYPES[0])
    waiting = builders.pod("waiting", "1500m", "256Mi", owner="ReplicaSet", labels={"app": "web"})
    snap = snapshot([a, b], [pod("p", a, cpu="1500m"), pod("q", b, cpu="100m")])
    snap.pending = [waiting]
    pool = candidates(snap)[0]
    rescheduling = m.simulate(snap, [c for c in pool if c.name == "a"])
    placed = {k for claim in rescheduling.result.new_nodeclaims for k in claim.pods}
    placed |= {k for keys in rescheduling.result.existing.values() for k in keys}
    assert {"default/waiting", "default/p"} <= placed
    assert rescheduling.ok and rescheduling.new_nodeclaims == []
    command = single(snap).command
    assert command is not None and command.action == "delete" and not command.replacements


def test_the_pods_of_nodes_already_leaving_need_a_place_too() -> None:
    """c is in a drift command: its pod is on its way to b's free room, which a cannot also have."""
    a, b, c = record("a", TYPES[1]), record("b", TYPES[0]), commanded(record("c", TYPES[0]))
    pods = [pod("p", a, cpu="1500m"), pod("q", b, cpu="100m"), pod("r", c, cpu="1500m")]
    snap = snapshot([a, b, c], pods)
    command = single(snap).command
    assert command is None or command.names() != ["a"] or command.action == "replace"
    snap = snapshot([a, b, c.model_copy(update={"annotations": {}})], pods[:2])
    command = single(snap).command
    assert command is not None and command.action == "delete" and command.names() == ["a"]


# --- budgets over initialized nodes ---------------------------------------------------------------------


def test_budget_total_is_the_initialized_nodes() -> None:
    manifest = pool_manifest(budgets=[{"nodes": "25%"}])
    ready = [record(f"r{i}", TYPES[0]) for i in range(8)]
    registered = [
        record(f"n{i}", TYPES[0]).model_copy(
            update={"state": NodeClaimState.REGISTERED, "initialized_at": None}
        )
        for i in range(2)
    ]
    verdict = m.budget_for(snapshot(ready + registered, [], manifest=manifest), "default", "Drifted")
    assert verdict.limit == 2  # 25% of 8, not of 10 (which rounds up to 3)


def test_replacements_of_a_command_under_way_do_not_raise_the_total() -> None:
    manifest = pool_manifest(budgets=[{"nodes": "20%"}])
    nodes = [record(f"r{i}", TYPES[0]) for i in range(8)]
    leaving = [commanded(record("x", TYPES[0]), "c1"), commanded(record("y", TYPES[0]), "c2")]
    replacements = [
        record(f"{n}2", TYPES[0], annotations={REPLACEMENT_FOR_ANNOTATION: cid})
        for n, cid in (("x", "c1"), ("y", "c2"))
    ]
    verdict = m.budget_for(
        snapshot(nodes + leaving + replacements, [], manifest=manifest), "default", "Drifted"
    )
    # 20% of 10, with two disrupting: none left (counting the replacements, 20% of 12 would allow one).
    assert (verdict.limit, verdict.disrupting, verdict.allowed) == (2, 2, 0)


def test_a_node_not_ready_counts_against_the_budget() -> None:
    manifest = pool_manifest(budgets=[{"nodes": "1"}])
    a, b = record("a", TYPES[0]), record("b", TYPES[0])
    snap = snapshot([a, b], [], manifest=manifest)
    snap.nodes[1]["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    assert m.budget_for(snap, "default", "Empty").allowed == 0


# --- drift and terminationGracePeriod -------------------------------------------------------------------


def test_drift_goes_past_do_not_disrupt_and_pdbs_when_the_grace_period_bounds_the_drain() -> None:
    manifest = pool_manifest()
    manifest["spec"]["template"]["spec"]["expireAfter"] = "24h"  # the template changed: drift
    stale = {wk.NODEPOOL_HASH: "stale"}
    guarded = [pod("p", None, annotations={wk.DO_NOT_DISRUPT: "true"})]
    pdb = {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 0},
    }
    for grace, pdbs, expected in ((None, [], False), (180.0, [], True), (180.0, [pdb], True)):
        a = record("a", TYPES[0], annotations=stale, termination_grace_period_seconds=grace)
        pods = [{**guarded[0], "spec": {**guarded[0]["spec"], "nodeName": a.node_name}}]
        snap = snapshot([a], pods, manifest=manifest, pdbs=pdbs)
        command = m.evaluate(snap, candidates(snap)[0], OPTIONS, methods=(m.DRIFT,)).command
        assert (command is not None) is expected, (grace, pdbs)
    # The node's own do-not-disrupt still blocks.
    a = record("a", TYPES[0], annotations=stale, termination_grace_period_seconds=180.0)
    snap = snapshot([a], [], manifest=manifest, node_annotations={"a": {wk.DO_NOT_DISRUPT: "true"}})
    assert m.evaluate(snap, candidates(snap)[0], OPTIONS, methods=(m.DRIFT,)).command is None


# --- what a replacement may be --------------------------------------------------------------------------


def test_an_on_demand_node_replaced_by_spot_is_held_to_spot() -> None:
    """Priced as spot, launched as spot: a launch that fell back to on-demand would cost more."""
    cheap = FakeType("c.xlarge", 4, 0.17, spot_price=0.05)
    EXTRA.append(cheap)
    try:
        a = record("a", TYPES[1])
        snap = snapshot([a], [pod("p", a, cpu="3")], types=[TYPES[1], cheap])
        command = single(snap).command
        assert command is not None and command.action == "replace"
        capacity_type = command.replacements[0].requirements.get(wk.CAPACITY_TYPE)
        assert capacity_type.has("spot") and not capacity_type.has("on-demand")
    finally:
        EXTRA.clear()


def test_multi_node_spot_to_spot_behind_the_gate() -> None:
    """Karpenter allows multi-node spot-to-spot when the gate is on, without the 15-type rule."""
    types = [FakeType("s.large", 2, 0.1, spot_price=0.03), FakeType("s.xlarge", 4, 0.2, spot_price=0.05)]
    EXTRA.extend(types)
    try:
        a, b = record("a", types[0], capacity_type="spot"), record("b", types[0], capacity_type="spot")
        pods = [pod("p1", a, cpu="1200m"), pod("p2", b, cpu="1200m")]
        snap = snapshot([a, b], pods, types=types, manifest=pool_manifest(budgets=[{"nodes": "100%"}]))
        pool = candidates(snap)[0]
        assert m.evaluate(snap, pool, OPTIONS, methods=(m.MULTI,)).command is None
        command = m.evaluate(snap, pool, Options(spot_to_spot=True), methods=(m.MULTI,)).command
        assert command is not None and command.names() == ["a", "b"]
        assert [it.name for it in command.replacements[0].instance_types] == ["s.xlarge"]
    finally:
        EXTRA.clear()


def test_multi_node_takes_the_largest_prefix_up_to_a_hundred() -> None:
    records = [record(f"n{i:03d}", TYPES[1]) for i in range(120)]
    pods = [pod(f"p{i:03d}", r, cpu="200m") for i, r in enumerate(records)]
    snap = snapshot(records, pods, manifest=pool_manifest(budgets=[{"nodes": "100%"}]))
    command = m.evaluate(snap, candidates(snap)[0], OPTIONS, methods=(m.MULTI,)).command
    assert command is not None and command.action == "delete"
    assert len(command.candidates) == m.MULTI_NODE_MAX


def test_equal_price_is_no_saving() -> None:
    twin = FakeType("t.xlarge", 4, 0.192)
    EXTRA.append(twin)
    try:
        a = record("a", TYPES[1])
        evaluation = single(snapshot([a], [pod("p", a, cpu="3")], types=[TYPES[1], twin]))
        assert evaluation.command is None
        assert evaluation.unconsolidatable["a"] == m.CANT_REPLACE_CHEAPER
    finally:
        EXTRA.clear()
