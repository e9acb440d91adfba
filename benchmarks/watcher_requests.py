"""``python -m benchmarks watcher-requests --json``: the API requests of an idle cluster, per minute.

Runs the ``default`` scenario's NodePool and EC2NodeClass (no workload) with the real handlers on the
simulator, and counts the requests the simulated API server receives from each function's identity, as
its audit log would record them, over ``--minutes`` of virtual time after a half-minute's start. The
watcher's figure is the one issue 20 is about: it listed the pending pods every second (60 a minute in the
simulator, 55-56 an invocation in AWS); it now lists them once an invocation and watches.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from collections import Counter
from typing import Any

from serverless_karpenter.naming import FUNCTION_NAMES
from serverless_karpenter_sim.scenario import load_scenario
from serverless_karpenter_sim.simulation import Simulation

SCENARIO = "default"
WARM_UP_SECONDS = 30.0


def idle_scenario() -> Any:
    scenario = load_scenario(SCENARIO)
    manifests = [m for m in scenario.manifests if m["kind"] in ("NodePool", "EC2NodeClass")]
    return scenario.model_copy(update={"name": "idle", "manifests": manifests, "steps": []})


def measure(minutes: float) -> dict[str, Any]:
    sim = Simulation(idle_scenario(), log=io.StringIO())
    sim.start()
    try:
        sim.run_for(WARM_UP_SECONDS)
        audit = sim.kube_server.audit
        before = {name: audit.requests_of(sim.function_user(name)) for name in FUNCTION_NAMES}
        started = time.perf_counter()
        sim.run_for(minutes * 60)
        wall = time.perf_counter() - started
        functions: dict[str, Any] = {}
        for name in FUNCTION_NAMES:
            requests: Counter[tuple[str, str]] = audit.requests_of(sim.function_user(name)) - before[name]
            functions[name] = {
                "per_minute": round(sum(requests.values()) / minutes, 2),
                "requests": {f"{verb} {resource}": n for (verb, resource), n in sorted(requests.items())},
            }
        return {
            "scenario": f"{SCENARIO} (NodePool and EC2NodeClass only)",
            "virtual_minutes": minutes,
            "wall_seconds": round(wall, 1),
            "watcher_requests_per_minute": functions["watcher"]["per_minute"],
            "functions": functions,
            "lambda_failures": len(sim.lambdas.failures),
        }
    finally:
        sim.stop()


def register(commands: Any) -> None:
    parser = commands.add_parser("watcher-requests", help="API requests per idle minute, per function")
    parser.add_argument("--minutes", type=float, default=10.0, help="virtual minutes to count")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    result = measure(args.minutes)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0
    print(f"{result['virtual_minutes']:.0f} idle virtual minutes in {result['wall_seconds']} s of wall time")
    for name, figures in result["functions"].items():
        print(f"{name:>12}: {figures['per_minute']:>6.2f} requests/min  {figures['requests']}")
    return 0
