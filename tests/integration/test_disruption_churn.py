"""Churn: what users complain about most. A steady, well-packed workload is left alone for a day, and a
CronJob-like workload that comes and goes never causes a same-type replacement."""

from __future__ import annotations

from typing import Any

import pytest
from serverless_karpenter.disruption.command import COMMAND_ANNOTATION
from serverless_karpenter_sim.scenario import Scenario

from tests.builders import deployment
from tests.integration.disruption_helpers import active, explain, running, running_pods, scenario

pytestmark = pytest.mark.integration


def _steady(loaded: Scenario) -> None:
    # Three pods of 1.2 CPU fill a 4-vCPU node (3.92 allocatable) to 92%.
    loaded.manifests = [m for m in loaded.manifests if m["kind"] != "Deployment"]
    loaded.manifests.append(deployment("steady", 9, cpu="1200m", memory="2Gi"))
    loaded.steps = []


def test_steady_workload_at_90_percent_causes_no_replacement_in_24_hours(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with running(scenario("drift-ami", _steady), tick_seconds=15) as (sim, watch):
        sim.run_for(8 * 60)
        original = {r.name for r in active(sim)}
        assert original and running_pods(sim) == 9
        # Once settled, a 30-minute tick keeps a virtual day short: 48 passes of every function.
        sim.schedule.tick_seconds = 1800
        sim.run_for(24 * 3600)
        assert {r.name for r in active(sim)} == original
        assert set(watch.records) == original, "no NodeClaim was created or replaced"
        assert not watch.disrupting_at
        assert not any(COMMAND_ANNOTATION in r.annotations for r in watch.records.values())
        name = next(iter(active(sim))).node_name
        assert name is not None
        out = explain(name, capsys)
        assert "no method would act" in out or "blocked" in out, out
        assert sim.kube_server.audit.pdb_violations == 0


def _cron(loaded: Scenario) -> None:
    loaded.manifests = [m for m in loaded.manifests if m["kind"] != "Deployment"]
    loaded.manifests.append(deployment("base", 2, cpu="1", memory="1Gi"))
    loaded.manifests.append(deployment("batch", 0, cpu="1", memory="1Gi"))
    steps: list[dict[str, Any]] = [{"wait": "3m"}]
    for _ in range(2):
        steps += [
            {"scale": {"deployment": "default/batch", "replicas": 7}},
            {"wait": "10m"},
            {"scale": {"deployment": "default/batch", "replicas": 0}},
            {"wait": "15m"},
        ]
    loaded.steps = Scenario.model_validate({"name": "x", "steps": steps}).steps


def test_repeated_scale_up_and_down_causes_no_same_type_replacement() -> None:
    with running(scenario("drift-ami", _cron), tick_seconds=20) as (sim, watch):
        for step in sim.scenario.steps:
            sim.run_step(step)
        assert len(watch.records) > 2, "the batch came and went on nodes of its own"
        assert watch.disrupting_at, "empty nodes were removed after each run"
        for replacement in watch.replacements():
            command_id = replacement.annotations["serverless-karpenter.io/replacement-for"]
            replaced = [
                r for r in watch.records.values() if command_id in r.annotations.get(COMMAND_ANNOTATION, "")
            ]
            for old in replaced:
                assert (old.instance_type, old.capacity_type) != (
                    replacement.instance_type,
                    replacement.capacity_type,
                )
        assert running_pods(sim) == 2
        assert sim.kube_server.audit.pdb_violations == 0
