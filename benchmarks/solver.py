"""The solver benchmark: first-fit (our Karpenter-faithful Scheduler) versus Scheduler + cost solver.

Both run in this process on the same pods and instance types. ``seconds`` is the whole pipeline the
provisioner runs (first-fit, then the solver's improvement), so ``pods_per_sec`` is end to end.

Linearity (issue 22) is a ratio within one run: with ``--compare-to N`` (5,000 by default) the same
mix at N pods runs too, the two sizes interleaved ``--rounds`` times, each size's fastest round kept
(a shared host's other work only ever slows a round down). ``compare`` holds the N-pod figures and
``pods_per_sec_ratio`` this size's pods/s over N's; ``cpu_pods_per_sec_ratio`` is the same from the
process's CPU time, which other work on the host moves far less.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from serverless_karpenter import solver
from serverless_karpenter.scheduling.scheduler import Scheduler

from benchmarks import inputs


def run(pods: int, instance_types: int, mix: str, seed: int, time_budget_s: float | None) -> dict[str, Any]:
    budget = solver.default_budget(pods) if time_budget_s is None else time_budget_s
    types = inputs.instance_types(instance_types)
    pending = inputs.pods_for(mix, pods, seed)

    started = time.perf_counter()
    ffd = Scheduler(inputs.templates(types)).solve(pending)
    ffd_seconds = time.perf_counter() - started
    ffd_cost = sum(solver.claim_cost(c) for c in ffd.new_nodeclaims)

    started = time.perf_counter()
    cpu_started = time.process_time()
    templates = inputs.templates(types)
    first_fit = Scheduler(templates).solve(pending)
    improved, report = solver.improve(first_fit, templates, budget, pending)
    seconds = time.perf_counter() - started
    # The process's own CPU time: on a shared host it moves far less than the wall clock.
    cpu_seconds = time.process_time() - cpu_started

    return {
        "pods": pods,
        "instance_types": len(types),
        "mix": mix,
        "seconds": round(seconds, 3),
        "pods_per_sec": round(pods / seconds, 1),
        "cpu_seconds": round(cpu_seconds, 3),
        "nodes": len(improved.new_nodeclaims),
        "cost_per_hour": round(report.cost, 4),
        "lower_bound_per_hour": round(report.lower_bound, 4),
        "gap": round(report.gap, 4),
        "unschedulable": len(improved.unschedulable),
        "ffd_seconds": round(ffd_seconds, 3),
        "ffd_pods_per_sec": round(pods / ffd_seconds, 1),
        "ffd_nodes": len(ffd.new_nodeclaims),
        "ffd_cost_per_hour": round(ffd_cost, 4),
        "solver_seconds": round(report.seconds, 3),
        "solver_budget_seconds": budget,
    }


def compared(
    pods: int,
    compare_to: int,
    rounds: int,
    instance_types: int,
    mix: str,
    seed: int,
    time_budget_s: float | None,
) -> dict[str, Any]:
    """``run`` at ``pods``, with the figures at ``compare_to`` pods and the ratios (see the module)."""
    sizes = [compare_to, pods] if compare_to and compare_to != pods else [pods]
    best: dict[int, dict[str, Any]] = {}
    for _ in range(max(1, rounds)):
        for size in sizes:
            figures = run(size, instance_types, mix, seed, time_budget_s)
            if size not in best or figures["seconds"] < best[size]["seconds"]:
                best[size] = figures
    out = dict(best[pods])
    out["cpu_pods_per_sec"] = round(pods / out["cpu_seconds"], 1) if out["cpu_seconds"] else None
    out["rounds"] = max(1, rounds)
    if len(sizes) > 1:
        base = dict(best[compare_to])
        base["cpu_pods_per_sec"] = round(compare_to / base["cpu_seconds"], 1) if base["cpu_seconds"] else None
        out["compare"] = base
        out["pods_per_sec_ratio"] = round(out["pods_per_sec"] / base["pods_per_sec"], 3)
        if out["cpu_pods_per_sec"] and base["cpu_pods_per_sec"]:
            out["cpu_pods_per_sec_ratio"] = round(out["cpu_pods_per_sec"] / base["cpu_pods_per_sec"], 3)
    return out


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("solver", help="first-fit versus the cost solver on one input")
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--instance-types", type=int, default=400)
    parser.add_argument("--mix", choices=inputs.MIXES, default="karpenter")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--time-budget", type=float, default=None, help="solver seconds (default: by size)")
    parser.add_argument(
        "--compare-to",
        type=int,
        default=5000,
        help="also run this many pods in the same run and print the pods/s ratio (0: do not)",
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="rounds of both sizes, interleaved; fastest kept"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(run=main)


def main(args: argparse.Namespace) -> int:
    figures = compared(
        args.pods, args.compare_to, args.rounds, args.instance_types, args.mix, args.seed, args.time_budget
    )
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:>22}: {value}")
    return 0
