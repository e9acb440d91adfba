"""The scale benchmark (issue 22): ``python -m benchmarks scale --json``.

Runs the scenarios of :mod:`benchmarks.scale_scenarios` end to end (the real handlers against moto and the
simulated cluster) and records, per scenario, wall and virtual time, the simulator's peak and final
memory, and per control-plane function its passes' wall time, memory rise, DynamoDB reads and API server
requests (:mod:`benchmarks.scale_meter`). Each scenario runs in a process of its own, so that one's
memory is not charged to the next. Not part of ``make test``; the 50-node versions are
(``tests/integration/test_scale_*.py``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from serverless_karpenter.lifecycle.model import NodeClaimRecord
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter_sim.scenario import Scenario
from serverless_karpenter_sim.scenario_steps import patch_object
from serverless_karpenter_sim.simulation import Schedule, Simulation

from benchmarks import scale_scenarios as shapes
from benchmarks.host import host_loop_seconds
from benchmarks.scale_meter import Meter, dynamodb_counted

SCENARIOS = ("burst", "spread", "emptiness", "consolidation", "drift", "hold")
CHECK_EVERY = 30.0  # virtual seconds between two looks at the goal
DRIFT_LABEL = "scale.serverless-karpenter.io/generation"


def pod_counts(sim: Simulation) -> tuple[int, int]:
    """(pods not terminal, of which Running)."""
    pods = [p for p in sim.kube.list_pods() if not podlib.is_terminal(p)]
    return len(pods), sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")


def all_running(sim: Simulation, expected: int) -> bool:
    total, running = pod_counts(sim)
    return total == expected and running == expected


def advance_until(sim: Simulation, goal: Callable[[], bool], limit: float) -> float | None:
    """Run until ``goal`` holds (looked at every CHECK_EVERY virtual seconds): when it did, or None."""
    end = sim.elapsed + limit
    while sim.elapsed < end:
        sim.run_for(CHECK_EVERY)
        if goal():
            return round(sim.elapsed, 1)
    return None


def live(sim: Simulation) -> list[NodeClaimRecord]:
    # A simulator from before the records view (to measure a starting commit with this benchmark) reads
    # them through the control plane's store.
    view = getattr(sim, "records", None) or sim.plane.store
    return view.list_live()


def _provisioned(sim: Simulation, pods: int, limit: float, out: dict[str, Any], key: str) -> bool:
    reached = advance_until(sim, lambda: all_running(sim, pods), limit)
    out[f"{key}_at"] = reached
    out[f"{key}_nodeclaims"] = len(live(sim))
    return reached is not None


def run_scenario(
    name: str,
    nodes: int,
    pods: int,
    minutes: float,
    tick: float,
    *,
    progress: bool = False,
    drift_budget: str = "20%",
) -> dict[str, Any]:
    scenario: Scenario = {
        "burst": lambda: shapes.burst(nodes),
        "spread": lambda: shapes.spread(nodes),
        "emptiness": lambda: shapes.burst(nodes, policy="WhenEmpty", budget="100%"),
        "consolidation": lambda: shapes.consolidation(nodes),
        "drift": lambda: shapes.burst(nodes, budget=drift_budget),
        "hold": lambda: shapes.hold(nodes, pods),
    }[name]()
    schedule = Schedule(tick_seconds=tick, watcher_every=tick, termination_every=max(5.0, tick))
    # The Lambdas' logs (scanned for failures on the way) go nowhere: kept in memory, they would grow with
    # the run and be charged to the simulator.
    sink = open(os.devnull, "w")  # noqa: SIM115 (closed below, after the simulation stops)
    sim = Simulation(scenario, schedule=schedule, log=sink)
    out: dict[str, Any] = {"scenario": name, "nodes": nodes, "tick_seconds": tick}
    try:
        sim.start()
        meter = Meter(sim, progress=progress)
        with dynamodb_counted(meter):
            out.update(_drive(name, sim, nodes, pods, minutes))
            report = sim.check_invariants(final=True)
        out["invariant_violations"] = report.violations()
        out["lambda_failures"] = len(sim.lambdas.failures)
        out.update(meter.summary())
        out["kube_audit_requests"] = sum(sim.kube_server.audit.requests_by_user.values())
    finally:
        sim.stop()
        sink.close()
    return out


def _drive(name: str, sim: Simulation, nodes: int, pods: int, minutes: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    provision_limit = 20 * 60.0
    if name == "burst":
        out["pods"] = nodes
        out["ok"] = _provisioned(sim, nodes, provision_limit, out, "running")
    elif name == "spread":
        out["pods"] = 20 * nodes
        out["ok"] = _provisioned(sim, 20 * nodes, provision_limit, out, "running")
    elif name == "emptiness":
        out["pods"] = nodes
        if _provisioned(sim, nodes, provision_limit, out, "running"):
            sim.scale({"deployment": "default/burst", "replicas": 0})
            start = sim.elapsed
            gone = advance_until(sim, lambda: not live(sim), 20 * 60.0)
            out["empty_nodes_gone_after"] = None if gone is None else round(gone - start, 1)
        out["ok"] = out.get("empty_nodes_gone_after") is not None
    elif name == "consolidation":
        out["pods"] = 2 * nodes
        if _provisioned(sim, 2 * nodes, provision_limit, out, "running"):
            sim.scale({"deployment": "default/pairs", "replicas": nodes})
            start, target = sim.elapsed, math.ceil(nodes / 2 * 1.1)
            done = advance_until(sim, lambda: len(live(sim)) <= target and all_running(sim, nodes), 30 * 60.0)
            out["consolidated_after"] = None if done is None else round(done - start, 1)
            out["nodeclaims_after"] = len(live(sim))
        out["ok"] = out.get("consolidated_after") is not None
    elif name == "drift":
        out["pods"] = nodes
        if _provisioned(sim, nodes, provision_limit, out, "running"):
            before = {r.name for r in live(sim)}
            template = {"metadata": {"labels": {DRIFT_LABEL: "2"}}}
            patch_object(
                sim, {"kind": "NodePool", "name": "default", "patch": {"spec": {"template": template}}}
            )
            start = sim.elapsed

            def replaced() -> bool:
                now = {r.name for r in live(sim)}
                return not (now & before) and all_running(sim, nodes)

            done = advance_until(sim, replaced, 40 * 60.0)
            out["drifted_after"] = None if done is None else round(done - start, 1)
        out["ok"] = out.get("drifted_after") is not None
    elif name == "hold":
        out["pods"] = pods
        end = sim.elapsed + minutes * 60
        out["running_at"] = advance_until(sim, lambda: all_running(sim, pods), minutes * 60)
        out["running_nodeclaims"] = len(live(sim))
        violations: list[str] = []
        while sim.elapsed < end - 1e-9:
            sim.run_for(min(60.0, end - sim.elapsed))
            violations += [f"t={sim.elapsed:.0f}s: {v}" for v in sim.check_invariants().violations()]
        out["held_violations"] = violations
        out["ok"] = out["running_at"] is not None and not violations and all_running(sim, pods)
    return out


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("scale", help="Karpenter's scale suite against the simulator (issue 22)")
    parser.add_argument("--scenario", action="append", choices=SCENARIOS, help="repeatable; default all")
    parser.add_argument("--nodes", type=int, default=500, help="nodes of every scenario but hold")
    parser.add_argument("--hold-nodes", type=int, default=1000)
    parser.add_argument("--hold-pods", type=int, default=10_000)
    parser.add_argument("--hold-minutes", type=float, default=30.0)
    parser.add_argument("--tick", type=float, default=5.0, help="virtual seconds per simulator tick")
    parser.add_argument("--in-process", action="store_true", help="run in this process (one scenario)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(run=_run)


def _one(args: argparse.Namespace, name: str) -> dict[str, Any]:
    nodes = args.hold_nodes if name == "hold" else args.nodes
    if args.in_process:
        return run_scenario(name, nodes, args.hold_pods, args.hold_minutes, args.tick, progress=True)
    command = [sys.executable, "-m", "benchmarks", "scale", "--in-process", "--json", "--scenario", name]
    command += ["--nodes", str(args.nodes), "--hold-nodes", str(args.hold_nodes)]
    command += ["--hold-pods", str(args.hold_pods), "--hold-minutes", str(args.hold_minutes)]
    command += ["--tick", str(args.tick)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):
        return {"scenario": name, "ok": False, "error": done.stderr[-2000:]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])["scenarios"][0]
    return result


def _run(args: argparse.Namespace) -> int:
    names = args.scenario or list(SCENARIOS)
    if args.in_process and len(names) != 1:
        raise SystemExit("--in-process runs exactly one --scenario")
    before = host_loop_seconds()
    scenarios = [_one(args, n) for n in names]
    result = {
        "loop_seconds_before": before,
        "scenarios": scenarios,
        "loop_seconds_after": host_loop_seconds(),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for scenario in scenarios:
            print(json.dumps(scenario, indent=1))
    return 0 if all(s.get("ok") and not s.get("invariant_violations") for s in scenarios) else 1
