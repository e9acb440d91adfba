"""End to end: the real Lambda handlers against moto server and the simulated Kubernetes API over HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest
from serverless_karpenter import crashpoints
from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter_cli.main import main
from serverless_karpenter_sim.simulation import Simulation

from tests.builders import deployment, nodeclass, nodepool
from tests.integration.simulate import simulation, write_scenario

pytestmark = pytest.mark.integration


def _run(sim: Simulation) -> dict:
    try:
        sim.start()
        return sim.run().to_json()
    finally:
        sim.stop()


def test_default_scenario_runs_every_pod(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    import json

    report = json.loads(out[-1])
    assert report["pods"] == {"total": 20, "running": 20, "pending": 0}
    initialized = [c for c in report["nodeclaims"] if c["state"] == "Initialized"]
    assert initialized
    assert report["instances"]["running"] == len(report["nodeclaims"])
    # Every pod requests 1 cpu and 1.5Gi: the launched capacity must hold them all.
    assert all(
        c["instance_type"] and c["zone"] and c["capacity_type"] == "on-demand" for c in report["nodeclaims"]
    )
    assert report["cost_per_hour"] > 0
    assert any("Initialized" in e["what"] for e in report["timeline"])


@pytest.mark.parametrize(
    ("change", "field", "rule"),
    [
        ({"operator": "Equals"}, "spec.template.spec.requirements[0].operator", "In, NotIn"),
        (None, "spec.weight", "between 1 and 100"),
    ],
)
def test_invalid_nodepool_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change, field, rule
) -> None:
    pool = nodepool("broken")
    pool["spec"] = {**pool["spec"]}
    if change is None:
        pool["spec"]["weight"] = 0
    else:
        template = pool["spec"]["template"]
        requirement = {**template["spec"]["requirements"][0], **change}
        pool["spec"]["template"] = {**template, "spec": {**template["spec"], "requirements": [requirement]}}
    path = write_scenario(tmp_path, {"name": "invalid", "manifests": [pool, nodeclass()], "steps": []})
    assert main(["simulate", "--scenario", str(path)]) == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, captured.err
    assert 'NodePool "broken"' in lines[0] and field in lines[0] and rule in lines[0]
    assert "Traceback" not in captured.err + captured.out


def test_crash_between_record_and_fleet_launches_exactly_one_instance(tmp_path: Path) -> None:
    sim = simulation(
        tmp_path,
        {
            "name": "crash",
            "manifests": [nodepool(), nodeclass(), deployment("web", 3)],
            "steps": [{"fault": {"crash": crashpoints.AFTER_NODECLAIM_WRITE}}, {"wait": "120s"}],
        },
    )
    try:
        sim.start()
        report = sim.run().to_json()
        assert crashpoints.hits[crashpoints.AFTER_NODECLAIM_WRITE] >= 1
        assert any("crashed" in e["what"] for e in report["timeline"])
        claims = report["nodeclaims"]
        assert claims and report["pods"]["running"] == 3
        instances = sim.plane.launcher.instances()
        per_claim: dict[str, int] = {}
        for instance in instances:
            per_claim[instance.tags[wk.NODECLAIM]] = per_claim.get(instance.tags[wk.NODECLAIM], 0) + 1
        # The crashed claim was launched by the next pass, once: no leak, no duplicate.
        assert per_claim == {c["name"]: 1 for c in claims}
        assert all(c["state"] == NodeClaimState.INITIALIZED for c in claims)
    finally:
        sim.stop()


def test_deleted_node_is_drained_terminated_and_replaced(tmp_path: Path) -> None:
    report = _run(
        simulation(
            tmp_path,
            {
                "name": "delete-node",
                "manifests": [nodepool(), nodeclass(), deployment("web", 4)],
                "steps": [
                    {"wait": "90s"},
                    {"delete": {"kind": "Node", "name": "${node:0}"}},
                    {"wait": "120s"},
                ],
            },
        )
    )
    states = [c["state"] for c in report["nodeclaims"]]
    assert "Terminated" in states and "Initialized" in states
    assert report["instances"]["terminated"] == 1
    assert report["pods"] == {"total": 4, "running": 4, "pending": 0}
    assert report["pdb_violations"] == 0


def test_spot_interruption_and_a_malformed_message(tmp_path: Path) -> None:
    spot_pool = nodepool()
    template = spot_pool["spec"]["template"]
    requirements = [
        r if r["key"] != wk.CAPACITY_TYPE else {**r, "values": ["spot"]}
        for r in template["spec"]["requirements"]
    ]
    spot_pool["spec"]["template"] = {**template, "spec": {**template["spec"], "requirements": requirements}}
    sim = simulation(
        tmp_path,
        {
            "name": "spot",
            "manifests": [spot_pool, nodeclass(), deployment("web", 4)],
            "steps": [
                {"wait": "90s"},
                {
                    "event": {
                        "version": "0",
                        "source": "aws.ec2",
                        "detail-type": "EC2 Spot Instance Interruption Warning",
                        "detail": {"instance-id": "${instance:0}", "instance-action": "terminate"},
                    }
                },
                {"sqs": "not json"},
                {"wait": "150s"},
            ],
        },
    )
    try:
        sim.start()
        report = sim.run().to_json()
        events = sim.kube.core.list_event_for_all_namespaces().items
    finally:
        sim.stop()
    reasons = {(e.involved_object.kind, e.reason) for e in events}
    # Karpenter's events: pods nominated for new claims, the node interrupted, its pods evicted.
    assert {
        ("Pod", "Nominated"),
        ("Node", "SpotInterrupted"),
        ("Node", "TerminatingOnInterruption"),
        ("Pod", "Evicted"),
    } <= reasons
    assert report["events_handled"] == 2
    assert report["dlq_messages"] == 1
    first = report["nodeclaims"][0]
    assert first["capacity_type"] == "spot" and first["state"] == "Terminated"
    assert report["pods"] == {"total": 4, "running": 4, "pending": 0}
    assert report["instances"]["running"] == sum(
        1 for c in report["nodeclaims"] if c["state"] != "Terminated"
    )
