"""Control-plane passes at size (issue 22): ``python -m benchmarks passes --json``.

A simulator process holds the cluster (moto and the simulated Kubernetes API server, seeded by
:func:`benchmarks.pass_cluster.seed`: 1,000 nodes, 10,000 Running pods and a burst of 500 pending ones
by default). Each pass then runs in a fresh process of its own, as a cold Lambda invocation does: it
builds the control plane from the environment a deployed function would get and runs one pass, in this
order:

- ``lifecycle``: the NodeClaim lifecycle reconcile alone (``LifecycleReconciler.reconcile``);
- ``disruption``: one disruption pass (``run_disruption_pass``; waking the provisioner is left out);
- ``provisioner``: one provisioner invocation (``run_provisioner``: the lifecycle reconcile, then
  provisioning the pending burst, launching its NodeClaims).

For each it reports the wall time, the process's peak RSS (``ru_maxrss``, what Lambda reports as "Max
Memory Used") and its growth over the pass, the DynamoDB, EC2 and Kubernetes requests (see
:class:`benchmarks.pass_counts.CallCounter`), and the Lambda settings the pass must fit: the
provisioner within half its timeout, the disruption pass within its poll interval (a pass every 10 s),
both in their memory. tracemalloc slows allocation-heavy code 2-3x, so the Python heap's peak is
measured in a second, identical run (``--no-tracemalloc`` skips it); times and RSS come from the first.
The host's loop time (``sum(i*i for i in range(10**7))``) is printed alongside.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from multiprocessing.connection import Connection
from typing import Any

from serverless_karpenter import deployment
from serverless_karpenter.provisioning.context import ControlPlane

from benchmarks.host import host_loop_seconds
from benchmarks.pass_counts import CallCounter

PASSES = ("lifecycle", "disruption", "provisioner")
MB = 1024  # ru_maxrss is in KiB on Linux


def lambda_settings() -> dict[str, dict[str, float]]:
    """What each pass must fit: the stack's memory and timeout, and the pass's own bound."""
    from serverless_karpenter.config import Settings

    from infra.functions import SPECS_BY_NAME

    poll = Settings.model_fields["disruption_poll_interval_seconds"].default
    out: dict[str, dict[str, float]] = {}
    for name, function, bound in (
        ("lifecycle", "provisioner", deployment.FUNCTION_TIMEOUT_SECONDS["provisioner"] / 2),
        ("provisioner", "provisioner", deployment.FUNCTION_TIMEOUT_SECONDS["provisioner"] / 2),
        ("disruption", "disruption", poll),
    ):
        out[name] = {
            "memory_mb": SPECS_BY_NAME[function].memory_mb,
            "timeout_seconds": deployment.FUNCTION_TIMEOUT_SECONDS[function],
            "bound_seconds": bound,
        }
    return out


def run_pass(plane: ControlPlane, name: str) -> dict[str, Any]:
    """One pass of ``name``; what it did, in brief."""
    if name == "lifecycle":
        from serverless_karpenter.lifecycle.reconciler import LifecycleReconciler

        lifecycle = LifecycleReconciler(plane).reconcile()
        done = ("launched", "registered", "initialized", "deleted", "garbage_collected")
        return {k: len(getattr(lifecycle, k)) for k in done}
    if name == "disruption":
        from serverless_karpenter.disruption.usecases import run_disruption_pass

        run = run_disruption_pass(plane, wake=lambda _: None)
        return {k: v if isinstance(v, bool | float | int) else len(v) for k, v in run.to_json().items()}
    if name == "provisioner":
        from serverless_karpenter.provisioning.usecases import provisioner_lease, run_provisioner

        provisioner = run_provisioner(plane, provisioner_lease(plane, "benchmark"))
        return {
            "leader": provisioner.leader,
            "pending": provisioner.provisioning.pending,
            "launched": len(provisioner.provisioning.launched),
            "failed": len(provisioner.provisioning.failed),
            "unschedulable": len(provisioner.provisioning.unschedulable),
        }
    raise ValueError(f"no pass {name!r}")


def measure(plane: ControlPlane, counter: CallCounter, name: str, trace: bool) -> dict[str, Any]:
    """Run one pass of ``name`` and what it took."""
    counter.reset()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    rss_before, cpu_before = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
    if trace:
        tracemalloc.start()
    started = time.perf_counter()
    outcome = run_pass(plane, name)
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1] if trace else None
    if trace:
        tracemalloc.stop()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    rss_after = usage.ru_maxrss
    return {
        "pass": name,
        "seconds": round(seconds, 3),
        # The pass's own computing (this process's CPU), without the time it waits on moto and the API
        # server, which on a shared host answer much slower than AWS and EKS do.
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime - cpu_before, 3),
        "max_rss_mb": round(rss_after / MB, 1),
        "rss_growth_mb": round((rss_after - rss_before) / MB, 1),
        "tracemalloc_peak_mb": round(peak / 2**20, 1) if peak is not None else None,
        "outcome": outcome,
        **counter.figures(),
    }


def hooked_plane(clock: Any, settings: Any = None) -> tuple[ControlPlane, CallCounter]:
    """A control plane built as a Lambda's is, its AWS and Kubernetes clients counted."""
    from serverless_karpenter.adapters import aws
    from serverless_karpenter.config import Settings
    from serverless_karpenter.runtime import build_control_plane

    settings = settings or Settings()
    counter = CallCounter()
    aws.reset_sessions()  # every client from here on is made from the hooked session
    counter.hook_events(aws.shared_session(settings.aws_region).events)
    plane = build_control_plane(settings, clock)
    counter.hook_kube(plane.kube.api_client)
    return plane, counter


# --- processes ------------------------------------------------------------------------------------------


def _quiet() -> None:
    """A child's stdout (the functions' JSON logs) is not the report's."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def _serve(conn: Connection, nodes: int, pods_per_node: int, pending: int) -> None:
    """The simulator process: seed, hand over the environment, wait to be told to stop."""
    _quiet()
    from serverless_karpenter_sim.simulation import keep_environment

    from benchmarks.pass_cluster import seed, simulation

    sim = simulation()
    try:
        started = time.perf_counter()
        sim.start()
        seeded = seed(sim, nodes, pods_per_node, pending)
        env = keep_environment(sim)
        conn.send(
            {
                "env": env,
                "now": sim.clock.now().isoformat(),
                "seeded": asdict(seeded),
                "seed_seconds": round(time.perf_counter() - started, 1),
            }
        )
        conn.recv()
    finally:
        sim.stop()


def _invoke(conn: Connection, env: dict[str, str], now: str, name: str, trace: bool) -> None:
    """A cold Lambda invocation: a fresh process, the function's environment, one pass."""
    from serverless_karpenter.clock import ManualClock

    _quiet()
    os.environ.update(env)
    os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "benchmark")
    os.environ["POWERTOOLS_TRACE_DISABLED"] = "true"
    plane, counter = hooked_plane(ManualClock(datetime.fromisoformat(now)))
    conn.send(measure(plane, counter, name, trace))


def _child(target: Callable[..., None], *args: Any) -> tuple[Any, Connection]:
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=target, args=(child, *args), daemon=False)
    process.start()
    return process, parent


def run_all(nodes: int, pods_per_node: int, pending: int, trace: bool) -> dict[str, Any]:
    server, conn = _child(_serve, nodes, pods_per_node, pending)
    try:
        ready = conn.recv()
        results = []
        for name in PASSES:
            worker, answer = _child(_invoke, ready["env"], ready["now"], name, trace)
            results.append(answer.recv())
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)  # progress: a run takes minutes
            worker.join(timeout=60)
        return {"seeded": ready["seeded"], "seed_seconds": ready["seed_seconds"], "passes": results}
    finally:
        conn.send("stop")
        server.join(timeout=60)


def run(args: argparse.Namespace) -> int:
    loop_before = host_loop_seconds()
    plain = run_all(args.nodes, args.pods_per_node, args.pending, trace=False)
    traced = run_all(args.nodes, args.pods_per_node, args.pending, trace=True) if args.tracemalloc else None
    settings = lambda_settings()
    for index, figures in enumerate(plain["passes"]):
        figures["tracemalloc_peak_mb"] = traced["passes"][index]["tracemalloc_peak_mb"] if traced else None
        figures["lambda"] = settings[figures["pass"]]
        figures["fits"] = (
            figures["seconds"] <= figures["lambda"]["bound_seconds"]
            and figures["max_rss_mb"] <= figures["lambda"]["memory_mb"]
        )
    report = {
        **plain,
        "host_loop_seconds": [round(loop_before, 3), round(host_loop_seconds(), 3)],
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for figures in report["passes"]:
            print(
                f"{figures['pass']}: {figures['seconds']} s, max RSS {figures['max_rss_mb']} MB "
                f"(+{figures['rss_growth_mb']}), heap peak {figures['tracemalloc_peak_mb']} MB, "
                f"DynamoDB {figures['dynamodb']}, EC2 {figures['ec2']}, "
                f"Kubernetes {figures['kubernetes_requests']}; fits {figures['fits']}"
            )
        print(f"host loop: {report['host_loop_seconds']} s")
    return 0 if all(f["fits"] for f in report["passes"]) else 1


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("passes", help="control-plane passes at 1,000 nodes (issue 22)")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods-per-node", type=int, default=10)
    parser.add_argument("--pending", type=int, default=500)
    parser.add_argument("--no-tracemalloc", dest="tracemalloc", action="store_false")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(run=run)


if __name__ == "__main__":
    sys.exit(run(argparse.Namespace(nodes=50, pods_per_node=10, pending=50, tracemalloc=False, json=True)))
