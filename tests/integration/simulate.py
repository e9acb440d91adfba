"""Helpers to run scenarios through the real simulator in tests."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from serverless_karpenter.api import labels as wk
from serverless_karpenter_sim.scenario import load_scenario
from serverless_karpenter_sim.simulation import Simulation


def write_scenario(tmp_path: Path, scenario: dict[str, Any]) -> Path:
    path = tmp_path / f"{scenario['name']}.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    return path


def run_claimed_instance(sim: Simulation, nodeclaim: str, nodepool: str = "default") -> dict[str, Any]:
    """An m5.large tagged as a launch for ``nodeclaim`` leaves it (the cluster's ``owned`` tag, the NodePool,
    the NodeClaim), with no record of ours: a leaked launch, or Karpenter's. The instance as RunInstances
    returned it."""
    resources = sim.resources
    assert resources is not None, "the simulation is not started"
    tags = {
        f"kubernetes.io/cluster/{sim.cluster_name}": "owned",
        wk.NODECLAIM: nodeclaim,
        wk.NODEPOOL: nodepool,
    }
    instance: dict[str, Any] = sim.ec2.run_instances(
        ImageId=resources.amis["amd64"],
        InstanceType="m5.large",
        MinCount=1,
        MaxCount=1,
        SubnetId=resources.subnet_ids[0],
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ],
    )["Instances"][0]
    return instance


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
