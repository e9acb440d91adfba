"""The watcher in the simulation: one LIST and one WATCH an invocation, not a LIST a second, and a pending pod
still reaches CreateFleet within Karpenter's 1-2 s.

The requests are counted by the simulated API server as its audit log would record them, per user (the
watcher's role), on virtual time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s
from serverless_karpenter_sim.simulation import Simulation

from tests.builders import nodeclass, nodepool, pod
from tests.integration.simulate import simulation

pytestmark = pytest.mark.integration

IDLE_MINUTES = 5
# One LIST and one WATCH each ~55 s invocation; a few more when a session turns over inside a minute.
MAX_REQUESTS_PER_IDLE_MINUTE = 3


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    sim = simulation(
        tmp_path_factory.mktemp("watch"), {"name": "watch", "manifests": [nodepool(), nodeclass()]}
    )
    sim.start()
    try:
        yield sim
    finally:
        sim.stop()


def watcher_requests(sim: Simulation) -> Counter[tuple[str, str]]:
    return sim.kube_server.audit.requests_of(sim.function_user("watcher"))


def test_an_idle_minute_costs_a_list_and_a_watch(sim: Simulation) -> None:
    sim.run_for(30)  # past the first invocation's start
    before = watcher_requests(sim)
    sim.run_for(IDLE_MINUTES * 60)
    requests = watcher_requests(sim) - before
    assert set(requests) <= {("list", "pods"), ("watch", "pods")}, requests
    per_minute = sum(requests.values()) / IDLE_MINUTES
    # Polling listed every second: 60 a minute. Each invocation lists once and watches until its end.
    assert 1 <= requests[("list", "pods")] <= IDLE_MINUTES + 1, requests
    assert per_minute <= MAX_REQUESTS_PER_IDLE_MINUTE, requests
    assert sim.lambdas.failures == []


# Each pod asks more CPU than the node launched for the one before allocates, so it needs a launch of its own.
@pytest.mark.parametrize(("offset", "cpu"), [(0, 7), (20, 15), (53, 31), (54, 47), (55, 63), (56, 95)])
def test_pending_pod_to_create_fleet_within_two_seconds(sim: Simulation, offset: int, cpu: int) -> None:
    """Wherever the pod arrives in the watch (just after the LIST, mid-watch, about the bookmark 2 s before
    the watch's end, as it ends and the next invocation lists), CreateFleet follows within 2 s."""
    # Line up on the start of a watcher invocation: its LIST is the one this turn makes.
    lists = watcher_requests(sim)[("list", "pods")]
    for _ in range(120):
        sim.tick()
        if watcher_requests(sim)[("list", "pods")] > lists:
            break
    sim.run_for(offset)
    launched_before = {r.name for r in sim.plane.store.list() if r.instance_id}
    created_at = sim.elapsed
    name = f"big-{offset}"
    k8s.CoreV1Api(sim.api_client).create_namespaced_pod("default", pod(name, cpu=str(cpu), memory="8Gi"))
    launched_at: float | None = None
    for _ in range(10):
        sim.tick()  # the tick's watcher turn invokes the provisioner in-process, at this virtual time
        if any(r.instance_id and r.name not in launched_before for r in sim.plane.store.list()):
            launched_at = sim.elapsed - sim.schedule.tick_seconds
            break
    assert launched_at is not None, sim.timeline[-10:]
    assert launched_at - created_at <= 2.0, (launched_at - created_at, sim.timeline[-10:])
    k8s.CoreV1Api(sim.api_client).delete_namespaced_pod(name, "default", grace_period_seconds=0)
