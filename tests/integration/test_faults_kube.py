"""Kubernetes API faults: 5xx, timeouts, 409 conflicts and lists cut mid-way, against the control
plane's requests only, while it provisions, registers and drains. Every armed fault fires, and the
invariants hold after every step and at the end.

The watcher lists the pending pods once an invocation and then watches them: its watch request failing
(500) or its stream cut (drop) is retried from the last resourceVersion within the invocation; lists cut
mid-way hit the other functions' lists too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from serverless_karpenter.adapters.kubernetes import CONNECT_TIMEOUT_ENV, READ_TIMEOUT_ENV
from serverless_karpenter_sim.scenario import load_scenario
from serverless_karpenter_sim.simulation import Schedule, Simulation

from tests.builders import deployment, nodeclass, nodepool
from tests.integration.simulate import run_checked, write_scenario

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _short_kubernetes_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    # A short client timeout, so that a request held past it costs a second, not the default 30.
    monkeypatch.setenv(CONNECT_TIMEOUT_ENV, "1")
    monkeypatch.setenv(READ_TIMEOUT_ENV, "1")


def pdb(app: str, max_unavailable: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": app, "namespace": "default"},
        "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": {"app": app}}},
    }


def test_kubernetes_api_faults_converge_without_violations(tmp_path: Path) -> None:
    scenario = {
        "name": "faults-kube",
        "manifests": [nodepool(), nodeclass(), deployment("web", 8), pdb("web", 1)],
        "steps": [
            {"fault": {"kube": {"verb": "list", "resource": "pods", "status": 500}, "times": 3}},
            {"fault": {"kube": {"verb": "list", "resource": "pods", "status": "drop"}, "times": 2}},
            {"fault": {"kube": {"verb": "patch", "resource": "nodes", "status": 409}, "times": 2}},
            {"fault": {"kube": {"verb": "list", "resource": "nodes", "status": 503}, "times": 2}},
            {"fault": {"kube": {"verb": "watch", "resource": "pods", "status": 500}, "times": 1}},
            {"fault": {"kube": {"verb": "watch", "resource": "pods", "status": "drop"}, "times": 1}},
            {"wait": "240s"},
            {"fault": {"kube": {"verb": "create", "resource": "pods/eviction", "status": 500}, "times": 2}},
            # Held past the control plane's read timeout: its client gives up, as on a stuck API server.
            {
                "fault": {
                    "kube": {"verb": "list", "resource": "pods", "status": "timeout"},
                    "times": 2,
                    "function": "termination",
                }
            },
            {"fault": {"kube": {"verb": "patch", "resource": "nodes", "status": 409}, "times": 2}},
            {"delete": {"kind": "Node", "name": "${node:0}"}},
            {"wait": "150s"},
        ],
    }
    sim = Simulation(
        load_scenario(str(write_scenario(tmp_path, scenario))),
        schedule=Schedule(tick_seconds=2.0, watcher_every=2.0),
    )
    report = run_checked(sim)
    assert not sim.faults.unfired(), sim.faults.armed_faults()
    statuses = {key.split("/", 1)[1] for key in sim.faults.injected}
    assert {"500", "drop", "409", "503", "timeout"} <= statuses
    # Each held request ended with the client hanging up: the real client's read timeout fired.
    held = [r for r in sim.kube_server.faults.rules if r.status == "timeout" and r.injected]
    assert held and all(r.client_timeouts == r.injected for r in held), held
    # The simulator's own controllers never saw a fault: every injected one hit the control plane.
    assert sim.faults.total_injected == sim.kube_server.faults.injected
    assert report["pods"] == {"total": 8, "running": 8, "pending": 0}
    assert report["pdb_violations"] == 0
    assert "Terminated" in [c["state"] for c in report["nodeclaims"]]
