"""Lambda faults: a crash at any step (right after any AWS call of the provisioner, the termination work
and the disruption pass, and at the named crash points), and a timeout mid-drain. Every armed fault
fires, and the invariants hold after every step and at the end."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serverless_karpenter import crashpoints
from serverless_karpenter.disruption.candidates import pending_command
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter_sim.scenario import Scenario, load_scenario
from serverless_karpenter_sim.simulation import Schedule, Simulation

from tests.builders import deployment, nodeclass, nodepool
from tests.integration.simulate import run_checked, write_scenario

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _short_gc_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GARBAGE_COLLECTION_GRACE_SECONDS", "120")


def pdb(app: str, max_unavailable: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": app, "namespace": "default"},
        "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": {"app": app}}},
    }


def crash_after(call: str, function: str, skip: int = 0) -> dict[str, Any]:
    return {"fault": {"lambda": "crash", "after": call, "function": function, "skip": skip}}


def test_lambda_crashes_at_every_step_and_a_timeout_mid_drain(tmp_path: Path) -> None:
    scenario = {
        "name": "faults-lambda",
        "manifests": [nodepool(), nodeclass(), deployment("web", 6), pdb("web", 1)],
        "steps": [
            # The provisioner dies right after taking the lease, after writing the claim, after
            # CreateFleet (both the named crash point and the AWS call), and after recording the launch.
            crash_after("dynamodb.UpdateItem", "provisioner"),
            {"fault": {"crash": crashpoints.AFTER_NODECLAIM_WRITE}},
            crash_after("ec2.CreateFleet", "provisioner"),
            {"fault": {"crash": crashpoints.AFTER_CREATE_FLEET}},
            crash_after("dynamodb.PutItem", "provisioner", skip=1),
            {"wait": "330s"},
            # Termination work dies after two evictions (a timeout), mid-drain at the named point, and
            # right after TerminateInstances.
            {"fault": {"lambda": "timeout", "function": "termination", "after_evictions": 2}},
            {"fault": {"crash": crashpoints.MID_DRAIN}},
            crash_after("ec2.TerminateInstances", "termination"),
            {"delete": {"kind": "Node", "name": "${node:0}"}},
            {"wait": "200s"},
        ],
    }
    sim = Simulation(
        load_scenario(str(write_scenario(tmp_path, scenario))),
        schedule=Schedule(tick_seconds=2.0, watcher_every=2.0),
    )
    report = run_checked(sim)
    assert not sim.faults.unfired(), sim.faults.armed_faults()
    crashes = [e["what"] for e in report["timeline"] if "crashed" in e["what"]]
    assert len(crashes) >= 7, crashes
    assert sim.faults.injected["lambda/timeout"] == 1
    assert sim.faults.injected["lambda/crash"] == 4
    assert report["pods"] == {"total": 6, "running": 6, "pending": 0}
    assert report["pdb_violations"] == 0
    assert "Terminated" in [c["state"] for c in report["nodeclaims"]]


# -- the disruption pass dies mid-action -------------------------------------------------------------------

SCALE_DOWN_AT = 240.0  # virtual seconds: both nodes Initialized and past the minimum node age


def consolidation() -> Scenario:
    """Ten one-CPU pods on two 8-vCPU nodes; scaled to three, the pods fit on one node and the other goes."""
    loaded = load_scenario("consolidation-scale-down")
    for manifest in loaded.manifests:
        if manifest["kind"] == "Deployment":
            manifest["spec"]["replicas"] = 10
    loaded.steps = []
    return loaded


def tick_until(sim: Simulation, done: Any, seconds: float) -> None:
    """Tick until ``done(sim)`` or ``seconds`` of virtual time pass; the invariants hold every minute."""
    end = sim.elapsed + seconds
    while not done(sim) and sim.elapsed < end:
        sim.tick()
        if int(sim.elapsed) % 60 == 0:
            report = sim.check_invariants()
            assert report.ok, report.violations()


def deciding(sim: Simulation) -> list[NodeClaimRecord]:
    return [r for r in sim.plane.store.list() if pending_command(r) is not None and not r.is_deleting]


def crashed(sim: Simulation) -> bool:
    return sim.faults.injected["lambda/crash"] > 0


def carry_through(sim: Simulation, victim: str) -> None:
    """Run until the victim's claim is closed and the cluster settled; then judge the end state."""

    def closed(sim: Simulation) -> bool:
        record = sim.plane.store.get(victim)
        return record is not None and record.state == NodeClaimState.TERMINATED and sim.settled()

    tick_until(sim, closed, 8 * 60)
    record = sim.plane.store.get(victim)
    assert record is not None and record.state == NodeClaimState.TERMINATED, record
    assert record.node_name and sim.kube.get_node(record.node_name) is None
    final = sim.check_invariants(final=True)
    assert final.ok, final.violations()
    assert final.pdb_violations == 0
    report = sim.report()
    assert report.pods == {"total": 3, "running": 3, "pending": 0}
    assert not sim.faults.unfired(), sim.faults.armed_faults()


@pytest.fixture
def scaled_down(monkeypatch: pytest.MonkeyPatch) -> Iterator[Simulation]:
    """Two nodes, then a scale-down that leaves one of them for consolidation to remove."""
    sim = Simulation(
        consolidation(), schedule=Schedule(tick_seconds=5.0, watcher_every=5.0), log=io.StringIO()
    )
    try:
        sim.start()
        tick_until(sim, lambda _: False, SCALE_DOWN_AT)
        assert {r.state for r in sim.plane.store.list()} == {NodeClaimState.INITIALIZED}
        sim.scale({"deployment": "default/web", "replicas": 3})
        yield sim
    finally:
        sim.stop()


def test_a_disruption_pass_that_dies_after_writing_its_decision_is_carried_through(
    scaled_down: Simulation,
) -> None:
    sim = scaled_down
    # The pass that sees the pods leave stamps the claims; from the next one on, the first write of a
    # disruption pass is its decision (consolidateAfter is 1m): it dies right after it.
    tick_until(sim, lambda _: False, 30)
    sim.fault({"lambda": "crash", "after": "dynamodb.PutItem", "function": "disruption"})
    tick_until(sim, crashed, 3 * 60)
    assert crashed(sim)
    decided = deciding(sim)
    assert len(decided) == 1, "the decision was written, and nothing was deleted yet"
    assert not any(r.is_deleting for r in sim.plane.store.list())
    # A later pass validates the decision and removes the node.
    carry_through(sim, decided[0].name)


def test_a_disruption_pass_that_dies_after_marking_a_claim_for_deletion_is_carried_through(
    scaled_down: Simulation,
) -> None:
    sim = scaled_down
    tick_until(sim, lambda s: bool(deciding(s)), 3 * 60)
    (victim,) = deciding(sim)
    # The next write of the disruption pass is begin_deletion's: the claim marked Disrupting, then the
    # Lambda dies before it taints and deletes the Node.
    sim.fault({"lambda": "crash", "after": "dynamodb.PutItem", "function": "disruption"})
    tick_until(sim, crashed, 2 * 60)
    record = sim.plane.store.get(victim.name)
    assert record is not None and record.state == NodeClaimState.DISRUPTING
    node = sim.kube.get_node(record.node_name or "")
    assert node is not None and not node["metadata"].get("deletionTimestamp")
    carry_through(sim, victim.name)
