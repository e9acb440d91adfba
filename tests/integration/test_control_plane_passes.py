"""Each control-plane pass reads what it needs once (issue 22): at 50 nodes and 500 pods, counted through
the same hooks as ``python -m benchmarks passes`` (botocore ``before-call`` events on the pass's clients,
and the Kubernetes client's requests), a lifecycle, a disruption and a provisioner pass each issue no
DynamoDB Scan, read the NodeClaim records once, and LIST each Kubernetes resource at most once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter.provisioning.context import ControlPlane
from serverless_karpenter_sim.simulation import Simulation

from benchmarks.pass_cluster import seed, simulation
from benchmarks.pass_counts import CallCounter
from benchmarks.passes import PASSES, hooked_plane, measure

pytestmark = pytest.mark.integration

NODES = 50
PODS_PER_NODE = 10
PENDING = 40


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Simulation, ControlPlane, CallCounter, dict[str, dict[str, Any]]]]:
    sim = simulation()
    try:
        sim.start()
        seed(sim, NODES, PODS_PER_NODE, PENDING)
        plane, counter = hooked_plane(sim.clock, sim.settings)
        figures = {name: measure(plane, counter, name, trace=False) for name in PASSES}
        yield sim, plane, counter, figures
    finally:
        sim.stop()


Cluster = tuple[Simulation, ControlPlane, CallCounter, dict[str, dict[str, Any]]]


def lists(figures: dict[str, Any]) -> dict[str, int]:
    """LIST requests by resource and selector (a list's further pages are not new LISTs)."""
    return {k.removeprefix("list "): v for k, v in figures["kubernetes"].items() if k.startswith("list ")}


@pytest.mark.parametrize("name", PASSES)
def test_no_scan_and_the_nodeclaims_read_once(cluster: Cluster, name: str) -> None:
    figures = cluster[3][name]
    assert figures["dynamodb_scans"] == 0, figures["dynamodb"]
    assert "Scan" not in figures["dynamodb"]
    assert figures["nodeclaim_list_reads"] == 1, figures["dynamodb"]


@pytest.mark.parametrize("name", PASSES)
def test_each_resource_listed_at_most_once(cluster: Cluster, name: str) -> None:
    listed = lists(cluster[3][name])
    assert listed, "a pass reads the cluster"
    assert all(count == 1 for count in listed.values()), listed
    resources = [key.split("?")[0] for key in listed]
    repeated = {r for r in resources if resources.count(r) > 1}
    # The provisioner lists the pending pods first (all an idle pass reads), then, with pods to place,
    # the bound ones: two LISTs of disjoint halves of the pods, never the same pod twice.
    assert repeated <= {"pods"}, listed
    if repeated:
        assert name == "provisioner"
        assert sorted(k for k in listed if k.startswith("pods")) == [
            "pods?spec.nodeName!=",
            "pods?spec.nodeName=,status.phase=Pending",
        ]


def test_the_passes_did_their_work(cluster: Cluster) -> None:
    sim, plane, _, figures = cluster
    assert figures["lifecycle"]["outcome"]["deleted"] == 0
    provisioner = figures["provisioner"]["outcome"]
    assert provisioner["leader"] and provisioner["pending"] == PENDING
    assert provisioner["launched"] >= 1 and provisioner["unschedulable"] == 0
    records = plane.store.list_live()
    assert sum(r.state == NodeClaimState.INITIALIZED for r in records) == NODES
    assert sum(r.state == NodeClaimState.LAUNCHED for r in records) == provisioner["launched"]
    assert figures["provisioner"]["ec2"]["CreateFleet"] == provisioner["launched"]
    assert sim.kube_server.audit.pdb_violations == 0
