"""Shared by the disruption scenario tests: run built-in scenarios step by step and watch the records."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from serverless_karpenter.disruption.candidates import REPLACEMENT_FOR_ANNOTATION, pending_command
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter.termination.handoff import has_disrupted_taint
from serverless_karpenter_cli.main import main
from serverless_karpenter_sim.scenario import Scenario, load_scenario
from serverless_karpenter_sim.simulation import Schedule, Simulation


@dataclass
class Watch:
    """What happened to NodeClaims, sampled every tick."""

    first_seen: dict[str, float] = field(default_factory=dict)
    disrupting_at: dict[str, float] = field(default_factory=dict)
    initialized_at: dict[str, float] = field(default_factory=dict)
    max_deleting: int = 0
    records: dict[str, NodeClaimRecord] = field(default_factory=dict)
    # NodeClaims whose node carried karpenter.sh/disrupted while their command's replacements came up.
    tainted_while_replacing: set[str] = field(default_factory=set)

    def __call__(self, sim: Simulation) -> None:
        deleting = 0
        for record in sim.plane.store.list():
            self.records[record.name] = record
            self.first_seen.setdefault(record.name, sim.elapsed)
            command = pending_command(record) or {}
            if command.get("stage") == "replacing" and not record.is_deleting and record.node_name:
                node = sim.kube.get_node(record.node_name)
                if node is not None and has_disrupted_taint(node):
                    self.tainted_while_replacing.add(record.name)
            if record.is_deleting:
                deleting += 1
                self.disrupting_at.setdefault(record.name, sim.elapsed)
            if record.state == NodeClaimState.INITIALIZED:
                self.initialized_at.setdefault(record.name, sim.elapsed)
        self.max_deleting = max(self.max_deleting, deleting)

    def replacements(self) -> list[NodeClaimRecord]:
        return [r for r in self.records.values() if REPLACEMENT_FOR_ANNOTATION in r.annotations]


def scenario(name: str, edit: Callable[[Scenario], None] | None = None) -> Scenario:
    loaded = load_scenario(name)
    if edit is not None:
        edit(loaded)
    return loaded


@contextmanager
def running(
    loaded: Scenario, tick_seconds: float = 5.0, sampler: Callable[[Simulation], None] | None = None
) -> Iterator[tuple[Simulation, Watch]]:
    """The scenario's simulation, started, with a Watch (and ``sampler``, if given) called every tick."""
    watch = Watch()

    def on_tick(sim: Simulation) -> None:
        watch(sim)
        if sampler is not None:
            sampler(sim)

    sim = Simulation(loaded, schedule=Schedule(tick_seconds=tick_seconds), log=io.StringIO(), on_tick=on_tick)
    sim.start()
    try:
        yield sim, watch
        # Whatever the test looked at, the run kept the invariants (drains ended, no pod stranded by the
        # disruption, no budget below its floor, no Lambda failure).
        report = sim.check_invariants()
        assert report.ok, report.violations()
    finally:
        sim.stop()


def run_steps(sim: Simulation) -> None:
    for step in sim.scenario.steps:
        sim.run_step(step)


def active(sim: Simulation) -> list[NodeClaimRecord]:
    return [r for r in sim.plane.store.list() if r.is_active]


def pods_by_node(sim: Simulation) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {n["metadata"]["name"]: [] for n in sim.kube.list_nodes()}
    for pod in sim.kube.list_pods():
        node = podlib.node_name(pod)
        if node and not podlib.is_terminal(pod) and not podlib.is_daemonset_pod(pod):
            out.setdefault(node, []).append(podlib.key(pod))
    return out


def running_pods(sim: Simulation) -> int:
    return sum(1 for p in sim.kube.list_pods() if (p.get("status") or {}).get("phase") == "Running")


def explain(name: str, capsys: Any) -> str:
    capsys.readouterr()
    main(["explain", "node", name])
    return str(capsys.readouterr().out)


def pool_of(loaded: Scenario) -> dict[str, Any]:
    return next(m for m in loaded.manifests if m["kind"] == "NodePool")


def deployment_of(loaded: Scenario, name: str) -> dict[str, Any]:
    for manifest in loaded.manifests:
        if manifest["kind"] == "Deployment" and manifest["metadata"]["name"] == name:
            return manifest
    for step in loaded.steps:
        for manifest in step.apply or []:
            if manifest["kind"] == "Deployment" and manifest["metadata"]["name"] == name:
                return manifest
    raise KeyError(name)
