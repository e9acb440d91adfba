"""Shared by the spot-interruption tests: the built-in ``spot-interruption`` scenario, whose warning hits
one of three spot nodes, followed tick by tick until that node is drained and its instance terminated."""

from __future__ import annotations

import copy
import io
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from serverless_karpenter import crashpoints
from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.model import NodeClaimRecord
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter_sim.scenario import Scenario, load_scenario
from serverless_karpenter_sim.simulation import Simulation

from tests.integration.disruption_helpers import running_pods


def packed_web_scenario(replicas: int, cpu: str) -> Scenario:
    """The ``spot-interruption`` scenario with no steps, its Deployment of ``replicas`` pods of ``cpu``
    each (several to a node when small) keeping the default 30 s grace period, under a PDB of
    ``maxUnavailable: 1``: a drain of a node holding several of them must go one pod at a time, each
    next eviction waiting for the last one's replacement to be Ready."""
    scenario = load_scenario("spot-interruption")
    manifests = copy.deepcopy(scenario.manifests)
    for manifest in manifests:
        if manifest["kind"] == "Deployment":
            manifest["spec"]["replicas"] = replicas
            pod_spec = manifest["spec"]["template"]["spec"]
            pod_spec.pop("terminationGracePeriodSeconds", None)
            pod_spec["containers"][0]["resources"]["requests"]["cpu"] = cpu
        if manifest["kind"] == "PodDisruptionBudget":
            manifest["spec"] = {"maxUnavailable": 1, "selector": manifest["spec"]["selector"]}
    return scenario.model_copy(update={"steps": [], "manifests": manifests})


@contextmanager
def spot_interruption_simulation(
    scenario: Scenario | None = None, warm_up_seconds: float = 0.0
) -> Iterator[Simulation]:
    """The ``spot-interruption`` scenario (or ``scenario``) started, and run ``warm_up_seconds``."""
    crashpoints.disarm_all()
    simulation = Simulation(scenario or load_scenario("spot-interruption"), log=io.StringIO())
    simulation.start()
    try:
        simulation.run_for(warm_up_seconds)
        yield simulation
    finally:
        simulation.stop()
        crashpoints.disarm_all()


@dataclass
class SpotInterruption:
    """The scenario's warning for its first spot node, and when (``sim.elapsed``) what followed happened."""

    sim: Simulation
    victim: NodeClaimRecord
    sent_at: float = 0.0
    acted_at: float | None = None  # the interruption handler first acknowledged a message
    drained_at: float | None = None  # after that, no pod left on the victim (DaemonSets aside)
    terminated_at: float | None = None  # the victim's instance shutting down or gone
    min_running: int = 0  # the fewest Running pods seen since the warning

    @classmethod
    def prepare(cls, sim: Simulation) -> SpotInterruption:
        """Run the scenario up to the warning; its victim is the first node launched, a spot one."""
        wait, _event, *_ = sim.scenario.steps
        sim.run_step(wait)
        victim = sim.plane.store.get(sim.launch_order[0])
        assert victim is not None and victim.node_name and victim.instance_id
        assert victim.capacity_type == wk.CAPACITY_TYPE_SPOT
        return cls(sim, victim)

    def send(self) -> None:
        _wait, event, *_ = self.sim.scenario.steps
        self.sim.run_step(event)
        self.sent_at = self.sim.elapsed
        self.min_running = running_pods(self.sim)

    def follow(self, horizon_seconds: float = 240) -> Iterator[tuple[float, bool]]:
        """Tick until the victim is terminated and the cluster settled, or for ``horizon_seconds`` after the
        warning. After each tick, yields the time it happened at and whether the interruption handler
        acknowledged a message in it; the timings are updated by then."""
        sim, victim = self.sim, self.victim
        assert victim.node_name and victim.instance_id
        tick = sim.schedule.tick_seconds
        while sim.elapsed - self.sent_at < horizon_seconds:
            handled = sim.events_handled
            sim.tick()
            now = sim.elapsed - tick  # what the tick just did happened at the time before its advance
            acted = sim.events_handled > handled
            if self.acted_at is None and acted:
                self.acted_at = now
            on_victim = [
                p
                for p in sim.kube.list_pods_on_node(victim.node_name)
                if not podlib.is_terminal(p) and not podlib.is_daemonset_pod(p)
            ]
            if self.drained_at is None and self.acted_at is not None and not on_victim:
                self.drained_at = now
            instance = sim.plane.launcher.describe(victim.instance_id)
            if self.terminated_at is None and (
                instance is None or instance.state in ("shutting-down", "terminated")
            ):
                self.terminated_at = now
            self.min_running = min(self.min_running, running_pods(sim))
            yield now, acted
            if self.terminated_at is not None and sim.settled():
                return
