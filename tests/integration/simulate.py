"""Helpers to run scenarios through the real simulator in tests."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from serverless_karpenter_sim.scenario import load_scenario
from serverless_karpenter_sim.simulation import Simulation


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
