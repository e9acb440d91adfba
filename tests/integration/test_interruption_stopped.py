"""An instance stopped from outside, its node running three pods of a Deployment whose PDB allows one
unavailable: the interruption handler deletes its NodeClaim on the state-change events, the drain ends,
the instance is terminated and the pods run elsewhere, all within five virtual minutes of the stop.

The hard part is Kubernetes' own: the stopped machine's kubelet is silent, so 50 s on the node goes
Unknown and the node lifecycle controller marks its pods not Ready. The PDB then counts them short, and
the eviction API refuses to evict them (unhealthyPodEvictionPolicy IfHealthyBudget) until the taint
manager deletes them five minutes later; pods already evicted stay Terminating, with no kubelet to
finish them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter_sim.scenario import Step
from serverless_karpenter_sim.simulation import Simulation

from tests.integration.interruption_helpers import packed_web_scenario, spot_interruption_simulation

pytestmark = pytest.mark.integration
BOUND_SECONDS = 300


@pytest.fixture
def sim() -> Iterator[Simulation]:
    # Six pods of half a CPU, the default 30 s grace period: three to each of two m5.large nodes.
    with spot_interruption_simulation(packed_web_scenario(replicas=6, cpu="500m"), 90) as simulation:
        yield simulation


def web_pods(sim: Simulation) -> list[dict[str, object]]:
    return [
        p
        for p in sim.kube.list_pods()
        if (p["metadata"].get("labels") or {}).get("app") == "web" and not podlib.is_terminal(p)
    ]


def test_a_stopped_instance_is_drained_terminated_and_its_pods_run_elsewhere_within_5_minutes(
    sim: Simulation,
) -> None:
    victim = sim.plane.store.get(sim.launch_order[0])
    assert victim is not None and victim.instance_id and victim.node_name
    on_victim = [p for p in web_pods(sim) if podlib.node_name(p) == victim.node_name]
    assert len(on_victim) == 3  # three of six under maxUnavailable 1

    sim.run_step(Step(ec2={"instance": victim.instance_id, "action": "stop"}))
    stopped_at = sim.elapsed
    tick = sim.schedule.tick_seconds
    released_at = terminated_at = closed_at = running_at = None
    while sim.elapsed - stopped_at < BOUND_SECONDS:
        sim.tick()
        now = sim.elapsed - tick - stopped_at  # what the tick did happened before its advance
        if released_at is None and sim.kube.get_node(victim.node_name) is None:
            released_at = now  # drained (or found undrainable) and its finalizer released
        instance = sim.plane.launcher.describe(victim.instance_id)
        if terminated_at is None and (instance is None or instance.state in ("shutting-down", "terminated")):
            terminated_at = now
        record = sim.plane.store.get(victim.name)
        if closed_at is None and record is not None and record.state == NodeClaimState.TERMINATED:
            closed_at = now
        pods = web_pods(sim)
        if (
            running_at is None
            and len(pods) == 6
            and all(
                (p.get("status") or {}).get("phase") == "Running"
                and not podlib.is_deleting(p)
                and podlib.node_name(p) != victim.node_name
                for p in pods
            )
        ):
            running_at = now
        if None not in (released_at, terminated_at, closed_at, running_at):
            break

    timings = f"released {released_at} terminated {terminated_at} closed {closed_at} running {running_at}"
    assert terminated_at is not None and terminated_at <= BOUND_SECONDS, timings
    assert released_at is not None and released_at <= BOUND_SECONDS, timings
    assert closed_at is not None and closed_at <= BOUND_SECONDS, timings
    assert running_at is not None and running_at <= BOUND_SECONDS, timings
    record = sim.plane.store.get(victim.name)
    assert record is not None and record.disruption_reason == "InstanceStateChange"
    assert sim.events_handled == 2  # stopping, then stopped
    # No invariant broken at any check, nor at the end: no PDB violation, no finalizer left, no leak.
    failures = [f"t={r.at}: {v}" for r in sim.invariants.reports for v in r.violations()]
    final = sim.check_invariants(final=True)
    assert not failures and final.ok, failures + final.violations()
    print(timings)
