"""Kubernetes Events on NodePools, Nodes and Pods (issue 9), on the simulator's API server.

Each test runs one provisioning or disruption pass itself, between ticks, so that what one pass records
can be counted exactly."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import CoreV1Event
from serverless_karpenter.api import labels as wk
from serverless_karpenter.disruption.usecases import run_disruption_pass
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter.provisioning.provisioner import Provisioner
from serverless_karpenter_sim.simulation import Simulation

from tests.builders import deployment, nodeclass, nodepool
from tests.integration.interruption_helpers import SpotInterruption, spot_interruption_simulation
from tests.integration.simulate import simulation

pytestmark = pytest.mark.integration


def _events(sim: Simulation, kind: str, name: str, reason: str) -> list[CoreV1Event]:
    return [
        e
        for e in sim.kube.core.list_event_for_all_namespaces().items
        if e.involved_object.kind == kind and e.involved_object.name == name and e.reason == reason
    ]


def _recorded(events: list[CoreV1Event]) -> int:
    """How many times these were recorded: a repeat of the same Event raises its count."""
    return sum(e.count or 1 for e in events)


def _pointing_at(pool: dict[str, Any], nodeclass_name: str) -> dict[str, Any]:
    pool = copy.deepcopy(pool)
    pool["spec"]["template"]["spec"]["nodeClassRef"]["name"] = nodeclass_name
    return pool


def _nodepool(sim: Simulation, name: str) -> dict[str, Any]:
    return next(p for p in sim.kube.list_nodepools() if p["metadata"]["name"] == name)


def test_nodepools_without_a_ready_ec2nodeclass_get_a_warning_per_pass(tmp_path: Path) -> None:
    unready = copy.deepcopy(nodeclass())
    unready["metadata"] = {"name": "unready"}
    unready["spec"]["subnetSelectorTerms"] = [{"tags": {"karpenter.sh/discovery": "no-such-cluster"}}]
    sim = simulation(
        tmp_path,
        {
            "name": "nodeclass-events",
            "manifests": [
                _pointing_at(nodepool("missing"), "absent"),
                _pointing_at(nodepool("unready"), "unready"),
                unready,
                deployment("web", 2),
            ],
            "steps": [],
        },
    )
    try:
        sim.start()
        sim.run_for(5)  # the pods exist and the scheduler has marked them unschedulable
        before = {
            name: _recorded(_events(sim, "NodePool", name, reason))
            for name, reason in (("missing", "NodeClassNotFound"), ("unready", "NodeClassNotReady"))
        }
        outcome = Provisioner(sim.plane).provision()
        assert len(outcome.unschedulable) == 2 and not outcome.launched

        missing = _events(sim, "NodePool", "missing", "NodeClassNotFound")
        unready_events = _events(sim, "NodePool", "unready", "NodeClassNotReady")
        assert _recorded(missing) == before["missing"] + 1
        assert _recorded(unready_events) == before["unready"] + 1
        event = missing[-1]
        assert event.type == "Warning"
        assert event.message == 'EC2NodeClass "absent" not found on cluster'
        # NodePools are cluster-scoped: the event lives in "default", the reference has no namespace.
        assert event.metadata.namespace == "default"
        listed = _nodepool(sim, "missing")
        assert event.involved_object.api_version == "karpenter.sh/v1"
        assert event.involved_object.uid == listed["metadata"]["uid"]
        assert not event.involved_object.namespace
        assert unready_events[-1].type == "Warning"
        unready_message = unready_events[-1].message or ""
        assert (
            unready_message
            == 'EC2NodeClass "unready" is not ready: spec.subnetSelectorTerms: no subnet matches'
        )
        # The pods still say why, NodePool by NodePool, under Karpenter's reason.
        failed = sim.kube.core.list_event_for_all_namespaces(field_selector="reason=FailedScheduling").items
        assert failed and all(e.involved_object.kind == "Pod" and e.type == "Warning" for e in failed)
        assert all((e.message or "").startswith("Failed to schedule pod, ") for e in failed)
        assert 'nodepool "missing": ' in (failed[0].message or "")
    finally:
        sim.stop()


def test_a_nodepool_no_instance_type_satisfies_gets_no_compatible_instance_types(tmp_path: Path) -> None:
    impossible = copy.deepcopy(nodepool("impossible"))  # the helper shares the default scenario's spec
    impossible["spec"]["template"]["spec"]["requirements"] = [
        {"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["no-such.metal"]}
    ]
    sim = simulation(
        tmp_path,
        {"name": "no-types", "manifests": [impossible, nodeclass(), deployment("web", 1)], "steps": []},
    )
    try:
        sim.start()
        sim.run_for(5)
        before = _recorded(_events(sim, "NodePool", "impossible", "NoCompatibleInstanceTypes"))
        outcome = Provisioner(sim.plane).provision()
        assert len(outcome.unschedulable) == 1 and not outcome.launched
        events = _events(sim, "NodePool", "impossible", "NoCompatibleInstanceTypes")
        assert _recorded(events) == before + 1
        assert events[-1].type == "Warning"
        assert (
            events[-1].message == "NodePool requirements filtered out all compatible available instance types"
        )
    finally:
        sim.stop()


def test_exhausted_limits_give_one_nodepool_warning_per_pass(tmp_path: Path) -> None:
    sim = simulation(
        tmp_path,
        {
            "name": "limits-events",
            "manifests": [nodepool("capped", limits={"cpu": "4"}), nodeclass(), deployment("web", 8)],
            "steps": [],
        },
    )
    try:
        sim.start()
        sim.run_for(20)  # the first passes launch what the limits allow
        launched = [r for r in sim.plane.store.list() if r.nodepool == "capped"]
        assert launched
        before = _recorded(_events(sim, "NodePool", "capped", "LimitsExceeded"))
        outcome = Provisioner(sim.plane).provision()

        assert not outcome.launched
        assert len(outcome.unschedulable) >= 2
        assert all("limits" in reasons["capped"] for reasons in outcome.unschedulable.values())
        events = _events(sim, "NodePool", "capped", "LimitsExceeded")
        assert _recorded(events) == before + 1, "one event for the pass, not one per pod"
        event = events[-1]
        assert event.type == "Warning"
        message = event.message or ""
        assert message.startswith("all available instance types exceed limits for nodepool: ")
        assert f"{len(outcome.unschedulable)} pod(s) not placed" in message
        assert event.involved_object.uid == _nodepool(sim, "capped")["metadata"]["uid"]
        assert event.metadata.namespace == "default"
    finally:
        sim.stop()


def test_an_empty_node_with_do_not_disrupt_gets_disruption_blocked(tmp_path: Path) -> None:
    sim = simulation(
        tmp_path,
        {
            "name": "blocked-events",
            "manifests": [nodepool(), nodeclass(), deployment("web", 1)],
            "steps": [],
        },
    )
    try:
        sim.start()
        sim.run_for(120)
        (record,) = [r for r in sim.plane.store.list() if r.state == NodeClaimState.INITIALIZED]
        assert record.node_name
        node = record.node_name
        sim.kube.patch_node(node, {"metadata": {"annotations": {wk.DO_NOT_DISRUPT: "true"}}})
        sim.scale({"deployment": "default/web", "replicas": 0})
        sim.run_for(10)

        run = run_disruption_pass(sim.plane)
        again = run_disruption_pass(sim.plane)

        assert not run.decided and not run.expired and not again.decided
        events = _events(sim, "Node", node, "DisruptionBlocked")
        # One Event, whether the scheduled pass or this one published it: within Karpenter's dedupe
        # window (2 minutes) further passes publish nothing more.
        assert _recorded(events) == 1, "one event for the node, not one a pass"
        event = events[-1]
        assert event.type == "Normal"
        assert event.message == f'Cannot disrupt Node: node {node} has annotation {wk.DO_NOT_DISRUPT}="true"'
        assert event.involved_object.api_version == "v1"
        assert event.metadata.namespace == "default" and not event.involved_object.namespace
        current = sim.plane.store.get(record.name)
        assert current is not None and not current.is_deleting
    finally:
        sim.stop()


def test_the_same_event_again_raises_the_count_of_one_event(tmp_path: Path) -> None:
    sim = simulation(tmp_path, {"name": "event-count", "manifests": [nodepool(), nodeclass()], "steps": []})
    try:
        sim.start()
        pool = _nodepool(sim, "default")
        for _ in range(3):
            sim.kube.record_event(
                pool, "LimitsExceeded", "all available instance types exceed limits", "Warning"
            )
        sim.kube.record_event(pool, "LimitsExceeded", "another message", "Warning")
        events = _events(sim, "NodePool", "default", "LimitsExceeded")
        assert sorted((e.message, e.count) for e in events) == [
            ("all available instance types exceed limits", 3),
            ("another message", 1),
        ]
    finally:
        sim.stop()


def test_a_spot_interruption_leaves_karpenters_interruption_events_on_the_node() -> None:
    with spot_interruption_simulation() as sim:
        run = SpotInterruption.prepare(sim)
        node = run.victim.node_name
        assert node
        run.send()
        for _, acted in run.follow(horizon_seconds=30):
            if acted:
                break
        assert run.acted_at is not None
        warned = _events(sim, "Node", node, "SpotInterrupted")
        terminating = _events(sim, "Node", node, "TerminatingOnInterruption")
        assert [(e.type, e.message) for e in warned] == [
            ("Warning", "Spot interruption warning was triggered")
        ]
        assert [(e.type, e.message) for e in terminating] == [
            ("Warning", "Interruption triggered termination for the Node")
        ]
        # Karpenter's interruption controller deletes the NodeClaim itself: no disruption controller Event.
        assert _events(sim, "Node", node, "DisruptionTerminating") == []


def test_a_dedupe_window_publishes_a_reason_once_per_object_as_karpenters_recorder(tmp_path: Path) -> None:
    # Karpenter's recorder drops the same reason on the same object within the event's dedupe timeout,
    # whatever the message; another object, or the window's end, publishes again.
    sim = simulation(tmp_path, {"name": "event-dedupe", "manifests": [nodepool(), nodeclass()], "steps": []})
    try:
        sim.start()
        pool = _nodepool(sim, "default")
        for message in ("blocked: budget", "blocked: budget", "blocked: another budget"):
            sim.kube.record_event(pool, "DisruptionBlocked", message, dedupe_seconds=60)
        assert _recorded(_events(sim, "NodePool", "default", "DisruptionBlocked")) == 1
        sim.run_for(61)
        sim.kube.record_event(pool, "DisruptionBlocked", "blocked: budget", dedupe_seconds=60)
        events = _events(sim, "NodePool", "default", "DisruptionBlocked")
        assert sorted((e.message, e.count) for e in events) == [("blocked: budget", 2)]
    finally:
        sim.stop()
