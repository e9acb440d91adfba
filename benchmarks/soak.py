"""The soak: hours of virtual time under workload churn, spot interruptions and random faults.

``python -m benchmarks soak --hours 2 --json`` runs the real handlers against moto and the simulated
cluster. Every ``--churn-minutes`` the Deployments are scaled to random sizes (0 to 300 pods in all);
every ``--interruption-minutes`` a running spot instance gets a rebalance recommendation and an
interruption warning (one batch of two messages, so that out-of-order delivery has something to
reorder); faults of every category are injected at ``--faults-per-hour`` (seeded RNG, so a run is
reproducible), dealt from a shuffled deck of the catalogue so that every kind comes up once before any
comes up twice. The invariants (``serverless_karpenter_sim.invariants``) are checked every virtual minute
and at the end; the longest pending time is sampled every tick.

To fit hours in minutes of wall time the loop ticks every ``--tick`` virtual seconds (the watcher takes a turn
at the same pace); the kubelet delays stay as in the default schedule. The control plane's Kubernetes
client times out after 2 s (unless ``KUBERNETES_*_TIMEOUT_SECONDS`` say otherwise), so that a request
the API server holds (a ``timeout`` fault) costs 2 s of wall time, not 30.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from serverless_karpenter import crashpoints
from serverless_karpenter.adapters.kubernetes import CONNECT_TIMEOUT_ENV, READ_TIMEOUT_ENV
from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter_sim.scenario import Scenario, load_scenario
from serverless_karpenter_sim.simulation import Schedule, Simulation

DEPLOYMENTS = {"web": ("1", "1Gi"), "api": ("500m", "512Mi"), "batch": ("2", "2Gi")}
MAX_PODS = 300
CLIENT_TIMEOUT_SECONDS = "2"
# Named crash points are Lambda crashes; every other fault kind is counted under its own category.
CATEGORY_OF = {"crash": "lambda"}


def fault_catalog() -> list[dict[str, Any]]:
    """One entry per kind of fault, with the options the soak draws for it."""
    return [
        {"ec2": "insufficient-capacity", "capacity_type": "spot", "zones": ["us-east-1a"], "for": "30m"},
        {"ec2": "request-limit", "times": 3},
        {"ec2": "partial-fleet"},
        {"ec2": "lost-response"},
        {"ec2": "dies-pending"},
        {"kube": {"verb": "list", "resource": "pods", "status": 500}, "times": 2},
        {"kube": {"verb": "patch", "resource": "nodes", "status": 409}, "times": 1},
        {"kube": {"verb": "list", "resource": "nodes", "status": "drop"}, "times": 1},
        {"kube": {"verb": "create", "resource": "pods/eviction", "status": 503}, "times": 2},
        # Held past the control plane's client read timeout: the client gives up, as on a stuck server.
        {"kube": {"verb": "list", "resource": "pods", "status": "timeout"}, "times": 1},
        {"dynamodb": "throttle", "times": 2},
        {"dynamodb": "conditional-check-failed", "times": 1},
        {"lambda": "crash", "after": "dynamodb.PutItem", "function": "provisioner"},
        {"lambda": "crash", "after": "ec2.CreateFleet", "function": "provisioner"},
        {"lambda": "crash", "after": "ec2.TerminateInstances", "function": "termination"},
        # The interruption handler's first PutItem is Powertools' INPROGRESS record: the message comes back
        # after the visibility timeout, and must then be acted on, not refused as still in progress.
        {"lambda": "crash", "after": "dynamodb.PutItem", "function": "interruption"},
        {"lambda": "timeout", "function": "termination", "after_evictions": 1},
        {"crash": crashpoints.AFTER_NODECLAIM_WRITE},
        {"sqs": "duplicate", "times": 2},
        # Fires on the next batch of several messages: the next interruption's pair at the latest.
        {"sqs": "reorder", "times": 1},
    ]


def soak_scenario() -> Scenario:
    default = load_scenario("default")
    pool = json.loads(json.dumps(default.manifests[0]))
    for requirement in pool["spec"]["template"]["spec"]["requirements"]:
        if requirement["key"] == wk.CAPACITY_TYPE:
            requirement["values"] = ["spot", "on-demand"]
    manifests: list[dict[str, Any]] = [pool, default.manifests[1]]
    for name, (cpu, memory) in DEPLOYMENTS.items():
        manifests.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "replicas": 0,
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
                        },
                    },
                },
            }
        )
        manifests.append(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"maxUnavailable": "20%", "selector": {"matchLabels": {"app": name}}},
            }
        )
    # The default manifests name the default cluster (its discovery tags and node role).
    return Scenario(
        name="soak", cluster_name=default.cluster_name, manifests=manifests, steps=[], settle_seconds=1800.0
    )


def churn(rng: random.Random) -> dict[str, int]:
    """Random sizes for the Deployments, 0 to MAX_PODS pods in all; now and then all at 0 or the peak."""
    roll = rng.random()
    if roll < 0.1:
        return dict.fromkeys(DEPLOYMENTS, 0)
    if roll < 0.2:
        share = MAX_PODS // len(DEPLOYMENTS)
        return dict.fromkeys(DEPLOYMENTS, share)
    cuts = sorted(rng.randint(0, MAX_PODS) for _ in range(len(DEPLOYMENTS) - 1))
    total = rng.randint(0, MAX_PODS)
    bounds = [0, *(c * total // MAX_PODS for c in cuts), total]
    return {name: bounds[i + 1] - bounds[i] for i, name in enumerate(DEPLOYMENTS)}


def interrupt_a_spot_instance(sim: Simulation, rng: random.Random) -> bool:
    candidates = [
        r
        for r in sim.plane.store.list()
        if r.capacity_type == wk.CAPACITY_TYPE_SPOT
        and r.state == NodeClaimState.INITIALIZED
        and r.instance_id
    ]
    if not candidates:
        return False
    record = rng.choice(sorted(candidates, key=lambda r: r.name))
    # EC2 sends a rebalance recommendation ahead of, or with, the warning; both reach the queue before the
    # next delivery, so they come as one batch, which out-of-order delivery can reorder.
    sim.put_event(
        {
            "version": "0",
            "source": "aws.ec2",
            "detail-type": "EC2 Instance Rebalance Recommendation",
            "detail": {"instance-id": record.instance_id},
        }
    )
    sim.put_event(
        {
            "version": "0",
            "source": "aws.ec2",
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "detail": {"instance-id": record.instance_id, "instance-action": "terminate"},
        }
    )
    return True


class FaultDeck:
    """Deals the catalogue's faults in a seeded random order, each once before any comes again, so that a
    run with at least as many faults as the catalogue has kinds arms every kind."""

    def __init__(self, catalog: list[dict[str, Any]], rng: random.Random) -> None:
        self._catalog = catalog
        self._rng = rng
        self._deck: list[dict[str, Any]] = []

    def draw(self) -> dict[str, Any]:
        if not self._deck:
            self._deck = list(self._catalog)
            self._rng.shuffle(self._deck)
        fault: dict[str, Any] = json.loads(json.dumps(self._deck.pop()))  # a copy the run may change
        return fault


def by_category(by_kind: Counter[str]) -> dict[str, int]:
    """Faults per category (EC2, Kubernetes, DynamoDB, Lambda, SQS): they add up to the total."""
    out: Counter[str] = Counter()
    for kind, count in by_kind.items():
        category = kind.split("/", 1)[0]
        out[CATEGORY_OF.get(category, category)] += count
    return dict(sorted(out.items()))


@contextmanager
def short_client_timeouts() -> Iterator[None]:
    """The soak's client timeouts, unless the environment sets its own; restored afterwards."""
    saved = {name: os.environ.get(name) for name in (CONNECT_TIMEOUT_ENV, READ_TIMEOUT_ENV)}
    for name, value in saved.items():
        if value is None:
            os.environ[name] = CLIENT_TIMEOUT_SECONDS
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)


@short_client_timeouts()
def run_soak(
    hours: float = 2.0,
    *,
    seed: int = 7,
    tick: float = 5.0,
    faults_per_hour: float = 12.0,
    churn_minutes: float = 10.0,
    interruption_minutes: float = 10.0,
    progress: bool = False,
) -> dict[str, Any]:
    rng = random.Random(seed)
    crashpoints.disarm_all()
    schedule = Schedule(tick_seconds=tick, watcher_every=tick, termination_every=max(5.0, tick))
    sim = Simulation(soak_scenario(), schedule=schedule, log=io.StringIO())
    sim.faults.rng = random.Random(seed + 1)
    deck = FaultDeck(fault_catalog(), rng)
    interruptions = 0
    violations: list[str] = []
    leaked: set[str] = set()
    lost: set[str] = set()
    started = time.monotonic()
    ticks_before = 0
    try:
        sim.start()
        total_minutes = int(hours * 60)
        fault_probability = faults_per_hour / 60.0
        for minute in range(total_minutes):
            if minute % int(churn_minutes) == 0:
                for name, replicas in churn(rng).items():
                    sim.scale({"deployment": f"default/{name}", "replicas": replicas})
            if minute and minute % int(interruption_minutes) == 0 and interrupt_a_spot_instance(sim, rng):
                interruptions += 1
            if rng.random() < fault_probability:
                sim.fault(deck.draw())
            sim.run_for(60.0)
            ticks_before += int(60.0 / tick)
            report = sim.check_invariants()
            violations.extend(f"t={report.at}: {v}" for v in report.violations())
            leaked.update(report.leaked_instances)
            lost.update(report.lost_messages)
            if progress and minute % 10 == 9:
                print(
                    f"{(minute + 1) / 60:.2f}h virtual, {time.monotonic() - started:.0f}s wall, "
                    f"{report.pending_pods} pending, {sim.faults.total_injected} faults",
                    file=sys.stderr,
                )
        soak_wall = time.monotonic() - started
        # Stop injecting, then let the control plane converge and judge the end state.
        sim.faults.clear()
        deadline = sim.elapsed + sim.scenario.settle_seconds
        while sim.elapsed < deadline and not sim.settled():
            sim.run_for(60.0)
        # Past the GC grace, so that an instance leaked late in the run is judged too.
        sim.run_for(sim.invariants.gc_deadline)
        final = sim.check_invariants(final=True)
        violations.extend(f"final: {v}" for v in final.violations())
        leaked.update(final.leaked_instances)
        lost.update(final.lost_messages)
        by_kind = sim.faults.by_kind()
        armed = sim.faults.armed_faults()
        result = {
            "virtual_hours": round(total_minutes / 60, 2),
            "faults_injected": sum(by_kind.values()),
            "faults_by_category": by_category(by_kind),
            "faults_by_kind": dict(sorted(by_kind.items())),
            # Armed but never taking effect: lapsed before a matching call, or nothing to act on.
            "faults_armed": len(armed),
            "faults_unfired": [fault.description for fault in armed if fault.injected == 0],
            "interruptions": interruptions,
            "launches": len(sim.launch_order),
            "leaked_instances": len(leaked),
            "lost_messages": len(lost),
            "pdb_violations": final.pdb_violations,
            "pods_pending_at_end": len(final.pods_not_running),
            "max_pending_seconds": final.max_pending_seconds,
            "invariant_violations": violations,
            "messages_received": final.messages_received,
            "lambda_failures": len(sim.lambdas.failures),
            "seed": seed,
            "tick_seconds": tick,
            "wall_seconds": round(time.monotonic() - started, 1),
            "soak_wall_seconds": round(soak_wall, 1),
            "wall_ms_per_tick": round(1000 * soak_wall / max(1, ticks_before), 1),
        }
    finally:
        sim.stop()
        crashpoints.disarm_all()
    return result


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("soak", help="hours of virtual time under churn, interruptions and faults")
    parser.add_argument("--hours", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--tick", type=float, default=5.0, help="virtual seconds per simulator tick")
    parser.add_argument("--faults-per-hour", type=float, default=12.0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    result = run_soak(
        args.hours, seed=args.seed, tick=args.tick, faults_per_hour=args.faults_per_hour, progress=True
    )
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    clean = (
        result["leaked_instances"] == 0
        and result["lost_messages"] == 0
        and result["pdb_violations"] == 0
        and result["pods_pending_at_end"] == 0
        and not result["invariant_violations"]
    )
    return 0 if clean else 1
