"""The paging invariants of issue 17, each shown failing on the state a bug leaves, beside a healthy
neighbour that must not be reported: drains past their bound, pods stranded by a voluntary disruption,
PodDisruptionBudgets below their floor, and Lambda invocations that hit AccessDenied, 403 or a bug."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError
from kubernetes.client.exceptions import ApiException
from moto import mock_aws
from serverless_karpenter.clock import to_rfc3339
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter_sim.drains import DEFAULT_DRAIN_SECONDS, DRAIN_MARGIN_SECONDS
from serverless_karpenter_sim.kubeapi.audit import EvictionRecord
from serverless_karpenter_sim.lambda_failures import (
    ACCESS_DENIED,
    EXCEPTION,
    FORBIDDEN,
    LambdaFailure,
    ScanningLog,
    classify,
    classify_log_line,
)

from tests.unit.test_invariants import World

RS_UID = "rs-web"


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield World()


def _owned_pod(world: World, name: str, phase: str, node: str | None = None) -> dict[str, Any]:
    pod = {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "creationTimestamp": to_rfc3339(world.clock.now()),
            "ownerReferences": [{"kind": "ReplicaSet", "name": "web", "uid": RS_UID, "controller": True}],
        },
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase},
    }
    world.kube.pods.append(pod)
    return pod


def _evict(world: World, pod: dict[str, Any], node: str) -> None:
    """What the API server's audit records for an allowed eviction, and the pod going away."""
    world.kube_server.audit.record_eviction(
        EvictionRecord(
            namespace="default",
            pod=pod["metadata"]["name"],
            allowed=True,
            code=201,
            at=world.clock.now(),
            budget=None,
            node=node,
            owner=RS_UID,
        )
    )
    world.kube.pods.remove(pod)


def _draining(world: World, name: str, reason: str) -> str:
    instance = world.launch(name)
    record = world.record(name, instance, NodeClaimState.DRAINING)
    world.store.records[-1] = record.model_copy(
        update={"disruption_reason": reason, "deletion_requested_at": world.clock.now()}
    )
    world.node(f"node-{name}", instance, deleting=True)
    return f"node-{name}"


# -- drains ------------------------------------------------------------------------------------------------


def test_a_drain_past_its_grace_period_plus_the_margin_is_reported(world: World) -> None:
    stuck = _draining(world, "default-a", "Drifted")
    instance = world.launch("default-b")
    graced = world.record("default-b", instance, NodeClaimState.DRAINING)
    world.store.records[-1] = graced.model_copy(
        update={"deletion_requested_at": world.clock.now(), "termination_grace_period_seconds": 3600}
    )
    world.node("node-default-b", instance, deleting=True)

    world.advance(DEFAULT_DRAIN_SECONDS + DRAIN_MARGIN_SECONDS - 1)
    assert world.invariants.check().stuck_drains == []
    world.advance(2)
    report = world.invariants.check()

    # default-b's hour of grace is its bound; default-a had none, so 15 minutes.
    assert len(report.stuck_drains) == 1 and stuck in report.stuck_drains[0], report.stuck_drains
    assert any("drain past its bound" in v for v in report.violations())


def test_a_drain_that_was_stuck_and_then_ended_is_still_reported(world: World) -> None:
    _draining(world, "default-a", "Drifted")
    world.advance(31 * 60)  # the issue's run: Draining for 31 virtual minutes, then gone
    record = world.store.records[-1]
    world.store.records[-1] = record.model_copy(
        update={"state": NodeClaimState.TERMINATED, "terminated_at": world.clock.now()}
    )
    world.kube.nodes.clear()

    report = world.invariants.check()

    assert len(report.stuck_drains) == 1 and "took 1860s" in report.stuck_drains[0]


# -- availability under voluntary disruption ---------------------------------------------------------------


def test_a_pod_evicted_by_drift_without_a_running_replacement_in_time_is_stranded(world: World) -> None:
    node = _draining(world, "default-a", "Drifted")
    evicted = _owned_pod(world, "web-1", "Running", node)
    _evict(world, evicted, node)
    world.advance(1)
    _owned_pod(world, "web-2", "Pending")  # the ReplicaSet's replacement, with nowhere to run
    for _ in range(int(world.invariants.availability.bound_seconds) + 10):
        world.invariants.observe()
        world.advance(1)

    report = world.invariants.check()

    assert report.disruption_evictions == 1
    assert report.max_disruption_pending_seconds > report.disruption_pending_bound_seconds
    assert report.pods_stranded_by_disruption and "default/web-1" in report.pods_stranded_by_disruption[0]
    assert "Drifted" in report.pods_stranded_by_disruption[0]
    assert any("stranded by a voluntary disruption" in v for v in report.violations())


def test_a_replacement_running_within_the_bound_and_an_interruption_are_not_stranded(world: World) -> None:
    drifted = _draining(world, "default-a", "Drifted")
    interrupted = _draining(world, "default-b", "SpotInterrupted")
    first = _owned_pod(world, "web-1", "Running", drifted)
    second = _owned_pod(world, "web-2", "Running", interrupted)
    _evict(world, first, drifted)
    _evict(world, second, interrupted)  # not voluntary: not ours to bound here
    world.invariants.observe()
    world.advance(1)
    replacement = _owned_pod(world, "web-3", "Pending")
    for _ in range(30):
        world.invariants.observe()
        world.advance(1)
    replacement["status"]["phase"] = "Running"
    world.invariants.observe()
    world.advance(600)

    report = world.invariants.check()

    assert report.ok, report.violations()
    assert report.disruption_evictions == 1
    assert report.max_disruption_pending_seconds == 31
    assert report.disruption_pending_pod_seconds == 31


def test_a_pdb_that_falls_below_its_floor_during_a_voluntary_disruption_is_reported(world: World) -> None:
    node = _draining(world, "default-a", "Underutilized")
    budget: dict[str, Any] = {
        "metadata": {"name": "web", "namespace": "default"},
        "status": {"currentHealthy": 6, "desiredHealthy": 5},
    }
    world.kube.pdbs.append(budget)
    evicted = _owned_pod(world, "web-1", "Running", node)
    _evict(world, evicted, node)
    world.invariants.observe()  # 6 healthy of 5: met
    budget["status"] = {"currentHealthy": 4, "desiredHealthy": 5}  # two more went down at once
    world.advance(1)
    world.invariants.observe()

    report = world.invariants.check()

    assert report.pdb_floor_breaches and "default/web: 4 healthy, below its 5" in report.pdb_floor_breaches[0]
    assert not report.ok


# -- Lambda failures ---------------------------------------------------------------------------------------


def _client_error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "no"}}, "DescribeInstances")


def test_raised_errors_are_classified_through_their_causes() -> None:
    try:
        try:
            raise _client_error("UnauthorizedOperation")
        except ClientError as error:
            raise RuntimeError("launch failed") from error
    except RuntimeError as wrapped:
        assert classify(wrapped)[0] == ACCESS_DENIED
    assert classify(_client_error("AccessDeniedException"))[0] == ACCESS_DENIED
    assert classify(ApiException(status=403, reason="Forbidden"))[0] == FORBIDDEN
    assert classify(_client_error("ThrottlingException"))[0] == EXCEPTION
    assert classify(ApiException(status=500))[0] == EXCEPTION
    assert classify(KeyError("x")) == (EXCEPTION, "KeyError: 'x'")


def test_log_lines_at_warning_or_above_that_report_access_failures_are_found() -> None:
    def line(level: str, **fields: Any) -> str:
        return json.dumps({"level": level, "message": "listing nodes", **fields})

    denied = line("ERROR", error="An error occurred (AccessDenied) when calling the GetItem operation")
    assert classify_log_line(denied) == (
        ACCESS_DENIED,
        "listing nodes (error: An error occurred (AccessDenied) when calling the GetItem operation)",
    )
    assert classify_log_line(line("WARNING", error="(403)\nReason: Forbidden"))[0] == FORBIDDEN  # type: ignore[index]
    assert classify_log_line(line("WARNING", status=403))[0] == FORBIDDEN  # type: ignore[index]
    assert classify_log_line(line("INFO", error="AccessDenied")) is None  # not a warning
    assert classify_log_line(line("ERROR", error="ThrottlingException")) is None
    assert classify_log_line("not json") is None


def test_the_scanning_log_passes_everything_on_and_reports_whole_lines() -> None:
    sink = io.StringIO()
    found: list[tuple[str, str]] = []
    stream = ScanningLog(sink, lambda kind, detail: found.append((kind, detail)))
    record = json.dumps({"level": "ERROR", "message": "m", "error": "UnauthorizedOperation"})
    stream.write(record[:10])
    assert found == []  # half a line is not judged
    stream.write(record[10:] + "\n" + json.dumps({"level": "INFO", "message": "fine"}) + "\n")

    assert sink.getvalue().count("\n") == 2 and found == [(ACCESS_DENIED, "m (error: UnauthorizedOperation)")]


def test_lambda_failures_page_unless_an_injected_fault_caused_the_exception(world: World) -> None:
    failures = world.lambdas.failures
    failures.append(LambdaFailure("provisioner", "r1", 5.0, EXCEPTION, "ClientError: throttled", False, True))
    assert world.invariants.check().ok
    failures.append(LambdaFailure("watcher", "r2", 6.0, FORBIDDEN, "ApiException: (403)", True))
    failures.append(LambdaFailure("disruption", "r3", 7.0, EXCEPTION, "KeyError: 'x'", False))

    report = world.invariants.check()

    assert report.lambda_failures_caused_by_faults == 1
    assert report.lambda_failures == [
        "watcher at t=6s logged forbidden: ApiException: (403)",
        "disruption at t=7s raised exception: KeyError: 'x'",
    ]
    assert sum("Lambda invocation failed" in v for v in report.violations()) == 2


def test_bounds_come_from_the_scenario(world: World) -> None:
    world.scenario.invariants = world.scenario.invariants.model_copy(update={"drain_margin_seconds": 0.0})
    _draining(world, "default-a", "Expired")
    world.advance(DEFAULT_DRAIN_SECONDS + 1)

    assert world.invariants.check().stuck_drains


# -- NodePool disruption budgets -----------------------------------------------------------------------------


def _budgeted_pool(world: World, nodes: str) -> None:
    template = {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "x"},
        "requirements": [],
    }
    world.kube.nodepools.append(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {"template": {"spec": template}, "disruption": {"budgets": [{"nodes": nodes}]}},
        }
    )


def test_a_disruption_started_beyond_the_nodepool_budget_is_reported(world: World) -> None:
    _budgeted_pool(world, "2")
    for i in range(8):
        world.record(f"default-{i}", world.launch(f"default-{i}"), NodeClaimState.INITIALIZED)
        world.store.records[-1] = world.store.records[-1].model_copy(
            update={"initialized_at": world.clock.now()}
        )
    for name in ("default-x", "default-y"):
        _draining(world, name, "Drifted")
        world.store.records[-1] = world.store.records[-1].model_copy(
            update={"initialized_at": world.clock.now()}
        )
    world.invariants.observe()
    assert world.invariants.check().budget_breaches == []  # two, within the budget of 2
    _draining(world, "default-z", "Underutilized")
    world.store.records[-1] = world.store.records[-1].model_copy(update={"initialized_at": world.clock.now()})
    world.invariants.observe()
    report = world.invariants.check()
    assert len(report.budget_breaches) == 1 and "3 nodes disrupted" in report.budget_breaches[0]
    assert "beyond its budget of 2 for Underutilized of 11 initialized nodes" in report.budget_breaches[0]
    assert any("beyond its budget" in v for v in report.violations())
