"""Lambda faults: a crash at any step (right after any AWS call of the provisioner and the termination
work, and at the named crash points), and a timeout mid-drain. The invariants hold after every step and
at the end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serverless_karpenter import crashpoints
from serverless_karpenter_sim.scenario import load_scenario
from serverless_karpenter_sim.simulation import Schedule, Simulation

from tests.integration.simulate import deployment, nodeclass, nodepool, run_checked, write_scenario

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _no_armed_crashes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("GARBAGE_COLLECTION_GRACE_SECONDS", "120")
    crashpoints.disarm_all()
    yield
    crashpoints.disarm_all()


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
    crashes = [e["what"] for e in report["timeline"] if "crashed" in e["what"]]
    assert len(crashes) >= 7, crashes
    assert sim.faults.injected["lambda/timeout"] == 1
    assert sim.faults.injected["lambda/crash"] >= 4
    assert report["pods"] == {"total": 6, "running": 6, "pending": 0}
    assert report["pdb_violations"] == 0
    assert "Terminated" in [c["state"] for c in report["nodeclaims"]]
