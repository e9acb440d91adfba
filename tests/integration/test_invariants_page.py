"""The invariants page: each one fails a real run that breaks it, and `simulate` then exits 3 (issue 17).

Each run is small; the normal scenarios passing these same invariants are the rest of the suite (every
``run_checked`` test, and `simulate` of the default scenario exiting 0).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from serverless_karpenter.deployment import INTERRUPTION_MAX_RECEIVE_COUNT
from serverless_karpenter_cli.invariants_report import EXIT_INVARIANT_FAILED, exit_code
from serverless_karpenter_cli.main import main
from serverless_karpenter_sim.drains import DEFAULT_DRAIN_SECONDS, DRAIN_MARGIN_SECONDS
from serverless_karpenter_sim.invariants import InvariantReport
from serverless_karpenter_sim.scenario import load_scenario
from serverless_karpenter_sim.simulation import Schedule, Simulation

from tests.builders import deployment, nodeclass, nodepool
from tests.integration.simulate import simulation, write_scenario

pytestmark = pytest.mark.integration


def _run(sim: Simulation) -> tuple[InvariantReport, dict[str, Any]]:
    try:
        sim.start()
        report = sim.run()
    finally:
        sim.stop()
    assert report.invariants is not None
    return report.invariants, report.to_json()


def _simulate(
    tmp_path: Path, scenario: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    """`simulate --scenario FILE` end to end: its exit code and the table report it printed."""
    code = main(["simulate", "--scenario", str(write_scenario(tmp_path, scenario))])
    return code, capsys.readouterr().out


def _fault_run(name: str, fault: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "manifests": [nodepool(), nodeclass(), deployment("web", 2)],
        "steps": [{"fault": fault}, {"wait": "120s"}],
        "settleSeconds": "2m",
    }


def test_an_access_denied_fails_the_run_and_simulate_exits_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the Lambda log goes to .serverless-karpenter/ here
    monkeypatch.setenv("COLUMNS", "300")  # the table's cells unwrapped, to be read here
    fault = {
        "aws": {"service": "ec2", "operation": "CreateFleet", "error": "UnauthorizedOperation", "status": 403}
    }
    code, out = _simulate(tmp_path, _fault_run("access-denied", fault), capsys)

    assert code == EXIT_INVARIANT_FAILED
    assert "no Lambda AccessDenied, 403 or unhandled exception" in out
    assert "access-denied" in out and "UnauthorizedOperation" in out
    assert "invariant(s) failed: exit code 3" in out


def test_a_kubernetes_403_fails_the_run(tmp_path: Path) -> None:
    fault = {"kube": {"verb": "list", "resource": "pods", "status": 403}, "function": "watcher", "times": 1}
    invariants, _ = _run(simulation(tmp_path, _fault_run("forbidden", fault)))

    assert any("forbidden" in f and f.startswith("watcher") for f in invariants.lambda_failures), (
        invariants.lambda_failures
    )
    assert not invariants.ok


def test_an_unhandled_exception_fails_the_run_but_a_faults_own_consequence_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from serverless_karpenter.termination import usecases

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug in the termination pass")

    monkeypatch.setattr(usecases, "run_termination", broken)
    sim = simulation(
        tmp_path,
        {
            "name": "bug",
            "manifests": [nodepool(), nodeclass(), deployment("web", 1)],
            "steps": [{"wait": "20s"}],
        },
    )
    invariants, report = _run(sim)

    assert any("termination" in f and "RuntimeError: a bug" in f for f in invariants.lambda_failures)
    assert exit_code(report) == EXIT_INVARIANT_FAILED
    # The simulator went on, as the Lambda service does: the pods ran all the same.
    assert report["pods"]["running"] == 1


def test_a_throttled_invocation_is_the_faults_consequence_and_does_not_page(tmp_path: Path) -> None:
    fault = {"dynamodb": "throttle", "function": "provisioner", "times": 3}
    invariants, report = _run(simulation(tmp_path, _fault_run("throttle", fault)))

    assert invariants.lambda_failures_caused_by_faults >= 1
    assert invariants.ok, invariants.violations()
    assert exit_code(report) == 0


def test_a_lost_message_fails_the_run(tmp_path: Path) -> None:
    # Every delivery fails transiently (the idempotency table throttles) until the queue's redrive moves
    # the message to the DLQ with no reason: nobody acted on it, and nobody said why.
    fault = {"dynamodb": "throttle", "function": "interruption", "times": None}
    spot = {
        "version": "0",
        "source": "aws.ec2",
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "detail": {"instance-id": "i-0123456789abcdef0", "instance-action": "terminate"},
    }
    scenario = {
        "name": "lost",
        "manifests": [nodepool(), nodeclass()],
        "steps": [{"fault": fault}, {"event": spot}, {"wait": f"{INTERRUPTION_MAX_RECEIVE_COUNT * 130}s"}],
        "settleSeconds": "1m",
    }
    invariants, report = _run(simulation(tmp_path, scenario))

    assert invariants.lost_messages, invariants.to_json()
    assert exit_code(report) == EXIT_INVARIANT_FAILED


def test_messages_that_parse_and_then_raise_are_parked_with_their_reason(tmp_path: Path) -> None:
    scenario = {
        "name": "parse-then-raise",
        "manifests": [nodepool(), nodeclass(), deployment("web", 1)],
        "steps": [{"wait": "300s"}],
        "settleSeconds": "2m",
    }
    sim = simulation(tmp_path, scenario)
    try:
        sim.start()
        sim.run_for(90)
        instance_id = next(r.instance_id for r in sim.plane.store.list() if r.instance_id)
        naive_time = {
            "version": "0",
            "id": "naive-time",
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "source": "aws.ec2",
            "time": "2025-01-01T00:00:00",  # no timezone
            "detail": {"instance-id": instance_id, "instance-action": "terminate"},
        }
        entities_string = {
            "version": "0",
            "id": "entities-string",
            "detail-type": "AWS Health Event",
            "source": "aws.health",
            "time": "2025-01-01T00:00:00Z",
            "detail": {
                "service": "EC2",
                "eventTypeCategory": "scheduledChange",
                "affectedEntities": instance_id,
            },
        }
        sim.send_raw(json.dumps(naive_time))
        sim.send_raw(json.dumps(entities_string))
        report = sim.run()
        assert sim.resources is not None
        parked = sim.sqs.receive_message(
            QueueUrl=sim.resources.dlq_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
        ).get("Messages", [])
    finally:
        sim.stop()
    invariants = report.invariants
    assert invariants is not None
    assert invariants.lost_messages == [] and invariants.messages_parked == 2, invariants.to_json()
    reasons = sorted(m["MessageAttributes"]["reason"]["StringValue"] for m in parked)
    assert len(reasons) == 2
    assert "affectedEntities" in reasons[0] and "time" in reasons[1] and "timezone" in reasons[1]
    # Parked on their first delivery, not retried: one invocation for each at most.
    assert invariants.messages_received == 2 and sim.lambdas.invocations["interruption"] <= 2


def test_a_drain_blocked_past_its_bound_fails_the_run() -> None:
    # A PodDisruptionBudget that never allows an eviction, a Node deleted by hand, and no
    # terminationGracePeriod: the drain waits on the budget past the 15-minute bound.
    blocked = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
    }
    loaded = load_scenario("default")
    loaded.manifests = [*loaded.manifests[:2], deployment("web", 2), blocked]
    loaded.steps = []
    loaded.settle_seconds = 0
    sim = Simulation(loaded, schedule=Schedule(tick_seconds=5), log=io.StringIO())
    try:
        sim.start()
        sim.run_for(120)
        node = sim.kube.list_nodes()[0]["metadata"]["name"]
        sim.delete({"kind": "Node", "name": node})
        sim.run_for(DEFAULT_DRAIN_SECONDS + DRAIN_MARGIN_SECONDS + 30)
        invariants = sim.check_invariants()
    finally:
        sim.stop()

    assert len(invariants.stuck_drains) == 1 and node in invariants.stuck_drains[0], invariants.stuck_drains
    assert any("drain past its bound" in v for v in invariants.violations())


def test_a_pod_stranded_by_a_voluntary_disruption_fails_the_run(tmp_path: Path) -> None:
    # Expiration after two minutes moves the pod to a new node; its replacement waits for that node to
    # boot, far longer than this scenario's bound of ten seconds.
    pool = nodepool()
    pool["spec"]["template"]["spec"]["expireAfter"] = "2m"
    scenario = {
        "name": "stranded",
        "manifests": [pool, nodeclass(), deployment("web", 1)],
        "steps": [{"wait": "300s"}],
        "settleSeconds": "2m",
        "invariants": {"disruptionPendingSeconds": "10s"},
    }
    invariants, report = _run(simulation(tmp_path, scenario))

    assert invariants.disruption_evictions >= 1
    assert invariants.pods_stranded_by_disruption, invariants.to_json()
    assert "Expired" in invariants.pods_stranded_by_disruption[0]
    assert invariants.max_disruption_pending_seconds > 10
    assert exit_code(report) == EXIT_INVARIANT_FAILED
