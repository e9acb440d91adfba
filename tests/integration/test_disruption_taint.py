"""The karpenter.sh/disrupted taint a command puts on its candidates comes off when nothing holds it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serverless_karpenter.api import labels as wk
from serverless_karpenter.disruption.candidates import pending_command
from serverless_karpenter.disruption.command import COMMAND_ANNOTATION
from serverless_karpenter.disruption.usecases import run_disruption_pass
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.termination.handoff import has_disrupted_taint
from serverless_karpenter_sim.simulation import Simulation

from tests.builders import deployment, nodeclass, nodepool
from tests.integration.simulate import simulation

pytestmark = pytest.mark.integration

DISRUPTED = {"key": wk.DISRUPTED_TAINT_KEY, "effect": "NoSchedule"}
USER_TAINT = {"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"}


def _one_node(tmp_path: Path) -> tuple[Simulation, NodeClaimRecord, str]:
    manifests = [nodepool(), nodeclass(), deployment("web", 1)]
    sim = simulation(tmp_path, {"name": "disrupted-taint", "manifests": manifests, "steps": []})
    sim.start()
    sim.run_for(120)
    (record,) = [r for r in sim.plane.store.list() if r.state == NodeClaimState.INITIALIZED]
    assert record.node_name
    return sim, record, record.node_name


def _taint(sim: Simulation, node: str) -> None:
    sim.kube.patch_node(node, {"spec": {"taints": [USER_TAINT, DISRUPTED]}})


def _taints(sim: Simulation, node: str) -> list[dict[str, str]]:
    found = sim.kube.get_node(node)
    assert found is not None
    return list((found.get("spec") or {}).get("taints") or [])


def test_a_taint_no_command_or_deletion_holds_is_taken_off(tmp_path: Path) -> None:
    # A pass tainted a command's candidates and crashed before it recorded the command.
    sim, record, node = _one_node(tmp_path)
    try:
        _taint(sim, node)

        run = run_disruption_pass(sim.plane)

        assert run.untainted == [node]
        taints = _taints(sim, node)
        assert not has_disrupted_taint({"spec": {"taints": taints}})
        assert USER_TAINT in taints, "other taints are kept"
        current = sim.plane.store.get(record.name)
        assert current is not None and not current.is_deleting
        assert run_disruption_pass(sim.plane).untainted == [], "nothing to do the second time"
    finally:
        sim.stop()


def test_an_abandoned_replacement_untaints_its_candidates(tmp_path: Path) -> None:
    sim, record, node = _one_node(tmp_path)
    try:
        command = {
            "id": "c0ffee00",
            "method": "Underutilized",
            "action": "replace",
            "candidates": [record.name],
            "decided_at": sim.plane.clock.now().isoformat(),
            "stage": "replacing",
            "replacements": ["gone-replacement"],  # its replacement no longer exists
            "replacing_since": sim.plane.clock.now().isoformat(),
            "detail": "",
        }
        annotations = {**record.annotations, COMMAND_ANNOTATION: json.dumps(command)}
        sim.plane.store.save(record.model_copy(update={"annotations": annotations}))
        _taint(sim, node)

        run = run_disruption_pass(sim.plane)

        assert run.aborted == ["Underutilized: replacement failed"]
        assert run.untainted == [], "the command held the taint when the pass began"
        assert _taints(sim, node) == [USER_TAINT]
        current = sim.plane.store.get(record.name)
        assert current is not None and pending_command(current) is None and not current.is_deleting
    finally:
        sim.stop()


def test_a_node_being_deleted_keeps_its_taint(tmp_path: Path) -> None:
    sim, record, node = _one_node(tmp_path)
    try:
        deleting = record.model_copy(update={"state": NodeClaimState.DISRUPTING})
        sim.plane.store.save(deleting)
        _taint(sim, node)

        run = run_disruption_pass(sim.plane)

        assert run.untainted == []
        assert has_disrupted_taint({"spec": {"taints": _taints(sim, node)}})
    finally:
        sim.stop()
