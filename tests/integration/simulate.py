"""Helpers to run scenarios through the real simulator in tests."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from serverless_karpenter_sim.scenario import load_scenario
from serverless_karpenter_sim.simulation import Simulation

DEFAULT = load_scenario("default")


def nodepool(name: str = "default", **spec: Any) -> dict[str, Any]:
    base = DEFAULT.manifests[0]
    manifest = {**base, "metadata": {"name": name}, "spec": {**base["spec"], **spec}}
    return manifest


def nodeclass() -> dict[str, Any]:
    return DEFAULT.manifests[1]


def deployment(
    name: str, replicas: int, cpu: str = "1", memory: str = "1Gi", **pod_spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "app",
                            "image": "pause",
                            "resources": {"requests": {"cpu": cpu, "memory": memory}},
                        }
                    ],
                    **pod_spec,
                },
            },
        },
    }


def write_scenario(tmp_path: Path, scenario: dict[str, Any]) -> Path:
    path = tmp_path / f"{scenario['name']}.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    return path


def simulation(tmp_path: Path, scenario: dict[str, Any]) -> Simulation:
    return Simulation(load_scenario(str(write_scenario(tmp_path, scenario))), log=io.StringIO())


def run_checked(sim: Simulation, inspect: Callable[[Simulation], None] | None = None) -> dict[str, Any]:
    """Run a scenario to the end and assert the fault-tolerance invariants after every step and at the end;
    ``inspect`` sees the simulation before it stops (moto and the API server still up)."""
    try:
        sim.start()
        report = sim.run().to_json()
        failures = [f"t={r.at}: {v}" for r in sim.invariants.reports for v in r.violations()]
        assert not failures, "\n".join(failures)
        final = sim.invariants.reports[-1]
        assert final.final and final.ok
        if inspect is not None:
            inspect(sim)
    finally:
        sim.stop()
    return report
