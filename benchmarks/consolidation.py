"""The consolidation curve: how fast the cost of the nodes falls after a large scale-down.

``python -m benchmarks consolidation --json`` runs the ``consolidation-large-scale-down`` scenario (1,000
half-CPU pods on types of at most 8 vCPU, scaled to 50) on the simulator with the real handlers, and
samples the $/h of the cluster's nodes (every NodeClaim with an instance still paid for: active, or
deleting and not yet terminated) every virtual ``--sample`` seconds from the scale-down on. The target
is what ``plan`` says the 50 pods need on an empty cluster, from the same manifests. It prints the curve
and the ratios to the target at ``consolidateAfter`` + 1..10 minutes, and the host's time for
``sum(i*i for i in range(10**7))`` as the baseline of the wall-clock figures (hosts differ about 2x).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter_cli.main import main as cli_main
from serverless_karpenter_sim.scenario import Scenario, load_scenario, parse_duration
from serverless_karpenter_sim.simulation import Schedule, Simulation

from benchmarks.host import host_loop_seconds

SCENARIO = "consolidation-large-scale-down"
PAID_STATES = frozenset(
    {
        NodeClaimState.LAUNCHED,
        NodeClaimState.REGISTERED,
        NodeClaimState.INITIALIZED,
        NodeClaimState.DISRUPTING,
        NodeClaimState.DRAINING,
    }
)


def cost_per_hour(sim: Simulation) -> float:
    return round(
        sum(r.price_per_hour or 0.0 for r in sim.plane.store.list_live() if r.state in PAID_STATES), 4
    )


def _scale_step(loaded: Scenario) -> tuple[int, str, int]:
    for index, step in enumerate(loaded.steps):
        if step.kind == "scale" and step.scale is not None:
            return index, str(step.scale["deployment"]), int(step.scale["replicas"])
    raise ValueError(f"scenario {loaded.name} has no scale step")


def plan_cost(loaded: Scenario, deployment: str, replicas: int) -> float:
    """What ``plan`` says the Deployment at ``replicas`` needs, from the scenario's own manifests."""
    namespace, name = deployment.split("/")
    manifests = copy.deepcopy(loaded.manifests)
    for manifest in manifests:
        meta = manifest.get("metadata") or {}
        if manifest.get("kind") == "Deployment" and meta.get("name") == name:
            manifest["spec"]["replicas"] = replicas
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "manifests.yaml"
        path.write_text(yaml.safe_dump_all(manifests))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = cli_main(["plan", "-f", str(path), "-o", "json"])
        if status != 0:
            raise RuntimeError(f"plan failed ({status}) for {namespace}/{name} at {replicas} replicas")
        return float(json.loads(out.getvalue())["cost_per_hour"])


def consolidate_after_seconds(loaded: Scenario) -> float:
    pool = next(m for m in loaded.manifests if m.get("kind") == "NodePool")
    return parse_duration(str(pool["spec"]["disruption"]["consolidateAfter"]))


def run_curve(
    tick_seconds: float = 5.0,
    sample_seconds: float = 30.0,
    minutes_after: float = 10.0,
    budget: str | None = None,
) -> dict[str, Any]:
    """The curve; ``budget`` replaces the NodePool's disruption budgets (the scenario has Karpenter's
    default, 10%) with one of ``nodes: budget``."""
    loaded = load_scenario(SCENARIO)
    if budget is not None:
        pool = next(m for m in loaded.manifests if m.get("kind") == "NodePool")
        pool["spec"]["disruption"]["budgets"] = [{"nodes": budget}]
    index, deployment, replicas = _scale_step(loaded)
    target = plan_cost(loaded, deployment, replicas)
    after = consolidate_after_seconds(loaded)
    sim = Simulation(loaded, schedule=Schedule(tick_seconds=tick_seconds), log=io.StringIO())
    wall = time.perf_counter()
    curve: list[dict[str, float]] = []
    sim.start()
    try:
        for step in loaded.steps[:index]:
            sim.run_step(step)
        before = cost_per_hour(sim)
        nodes_before = sum(1 for r in sim.plane.store.list_live() if r.is_active)
        sim.run_step(loaded.steps[index])
        scaled_at = sim.elapsed
        end = scaled_at + after + minutes_after * 60
        while sim.elapsed < end:
            curve.append({"t": round(sim.elapsed - scaled_at, 1), "cost_per_hour": cost_per_hour(sim)})
            sim.run_for(sample_seconds)
        curve.append({"t": round(sim.elapsed - scaled_at, 1), "cost_per_hour": cost_per_hour(sim)})
        report = sim.check_invariants(final=False)
        nodes_after = sum(1 for r in sim.plane.store.list_live() if r.is_active)
    finally:
        sim.stop()

    def at(seconds: float) -> float:
        return next((c["cost_per_hour"] for c in curve if c["t"] >= seconds), curve[-1]["cost_per_hour"])

    within = next((c["t"] for c in curve if c["cost_per_hour"] <= target * 1.10), None)
    return {
        "scenario": SCENARIO,
        "tick_seconds": tick_seconds,
        "budget": budget or "10% (default)",
        "consolidate_after_seconds": after,
        "cost_before_per_hour": before,
        "nodes_before": nodes_before,
        "nodes_after": nodes_after,
        "plan_cost_per_hour": target,
        "ratio_to_plan": {
            f"+{m}m": round(at(after + m * 60) / target, 3) for m in range(1, int(minutes_after) + 1)
        },
        "seconds_to_within_10_percent": within,
        "invariants_ok": report.ok,
        "violations": report.violations(),
        "wall_seconds": round(time.perf_counter() - wall, 1),
        "host_loop_seconds": round(host_loop_seconds(), 3),
        "curve": curve,
    }


def register(commands: Any) -> None:
    parser = commands.add_parser("consolidation", help="cost over time after a 1,000 -> 50 scale-down")
    parser.add_argument("--tick", type=float, default=5.0, help="virtual seconds per simulator tick")
    parser.add_argument("--sample", type=float, default=30.0, help="virtual seconds between samples")
    parser.add_argument(
        "--minutes", type=float, default=10.0, help="minutes to follow after consolidateAfter"
    )
    parser.add_argument("--budget", help="the NodePool's budget, e.g. \"50%%\" (default: Karpenter's 10%%)")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    result = run_curve(args.tick, args.sample, args.minutes, args.budget)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0
    summary = {k: v for k, v in result.items() if k != "curve"}
    print(json.dumps(summary, indent=2))
    for point in result["curve"]:
        print(f"t=+{point['t']:>6.0f}s  ${point['cost_per_hour']:.4f}/h")
    return 0
