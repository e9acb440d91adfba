"""End to end on the simulator: an instance stopped by a scenario step, whose kubelet dies with it, is
drained and terminated although its evicted pods never finish (Karpenter's stuck-terminating rule);
and the other new steps (patch, ami, sqs with references)."""

# mypy: disable-error-code="index"

from __future__ import annotations

import json

import pytest
from serverless_karpenter import amifamily
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter_sim.cloud import KUBERNETES_VERSION
from serverless_karpenter_sim.scenario import Scenario, Step
from serverless_karpenter_sim.simulation import Simulation

from tests.integration.disruption_helpers import active, running, scenario

pytestmark = pytest.mark.integration

UNREACHABLE = "node.kubernetes.io/unreachable"


def small(loaded: Scenario) -> None:
    web = next(m for m in loaded.manifests if m["kind"] == "Deployment")
    web["spec"]["replicas"] = 3
    # The default 30 s grace: a pod deleted with none is removed by the API server at once, kubelet or not.
    web["spec"]["template"]["spec"].pop("terminationGracePeriodSeconds", None)
    loaded.steps = []


def step(**spec: object) -> Step:
    return Step.model_validate(spec)


def settle(sim: Simulation, limit: float = 600) -> None:
    sim.run_for(10)  # the workload controllers create the pods first
    waited = 10.0
    while not sim.settled() and waited < limit:
        sim.run_for(10)
        waited += 10
    assert sim.settled()


def test_a_stopped_instance_is_drained_and_terminated_within_five_minutes() -> None:
    with running(scenario("default", small), tick_seconds=5) as (sim, _):
        settle(sim)
        [record] = active(sim)
        node_name = record.node_name
        assert node_name and record.instance_id
        pods_before = {
            p["metadata"]["uid"] for p in sim.kube.list_pods() if p["spec"].get("nodeName") == node_name
        }
        stopped_at = sim.elapsed
        sim.run_step(step(ec2={"instance": "${instance:0}", "action": "stop"}))
        state = sim.ec2.describe_instances(InstanceIds=[record.instance_id])["Reservations"][0]["Instances"][
            0
        ]
        assert state["State"]["Name"] in ("stopping", "stopped")

        saw_unknown = saw_stuck = False
        terminated_at = None
        while sim.elapsed - stopped_at < 300:
            sim.run_for(5)
            node = sim.kube.get_node(node_name)
            if node is not None:
                ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
                if ready["status"] == "Unknown":
                    saw_unknown = True
                    assert (UNREACHABLE, "NoExecute") in {
                        (t["key"], t["effect"]) for t in node["spec"]["taints"]
                    }
            here = [p for p in sim.kube.list_pods() if p["metadata"]["uid"] in pods_before]
            # Evicted pods are never confirmed by the dead kubelet: Terminating while the Node lives.
            if node is not None and any(p["metadata"].get("deletionTimestamp") for p in here):
                saw_stuck = True
            current = sim.plane.store.get(record.name)
            if current is not None and current.state in (
                NodeClaimState.TERMINATING,
                NodeClaimState.TERMINATED,
            ):
                terminated_at = terminated_at or sim.elapsed
            if current is not None and current.state == NodeClaimState.TERMINATED and node is None:
                break
        assert saw_unknown and saw_stuck
        assert terminated_at is not None and terminated_at - stopped_at <= 300
        described = sim.ec2.describe_instances(InstanceIds=[record.instance_id])["Reservations"][0][
            "Instances"
        ][0]
        assert described["State"]["Name"] in ("shutting-down", "terminated")
        assert sim.kube.get_node(node_name) is None
        # Pod GC removes the stuck pods once their Node is gone; the Deployment's pods run elsewhere.
        sim.run_for(5)
        assert not [p for p in sim.kube.list_pods() if p["metadata"]["uid"] in pods_before]
        settle(sim)
        assert sum(1 for p in sim.kube.list_pods() if p["status"].get("phase") == "Running") == 3


def test_patch_ami_and_sqs_steps() -> None:
    with running(scenario("default", small), tick_seconds=5) as (sim, _):
        settle(sim)
        [record] = active(sim)
        sim.run_step(
            step(
                patch={"kind": "Node", "name": "${node:0}", "patch": {"metadata": {"labels": {"team": "a"}}}}
            )
        )
        assert sim.kube.get_node(record.node_name or "")["metadata"]["labels"]["team"] == "a"
        sim.run_step(
            step(patch={"kind": "Deployment", "name": "inflate", "patch": {"spec": {"replicas": 2}}})
        )
        assert (
            sim.kube.list_pods()
            and len([p for p in sim.kube.list_pods() if not p["metadata"].get("deletionTimestamp")]) >= 2
        )

        parameter = amifamily.ssm_parameter_for_alias("al2023", "latest", KUBERNETES_VERSION, "amd64")
        ssm = sim.cloud.client("ssm")
        before = ssm.get_parameter(Name=parameter)["Parameter"]["Value"]
        sim.run_step(step(ami={"alias": "al2023@latest", "arch": "amd64"}))
        after = ssm.get_parameter(Name=parameter)["Parameter"]["Value"]
        assert after != before and after.startswith("ami-")

        # An sqs body names the instance by reference: the handler sees the real id and drains the node.
        body = {
            "version": "0",
            "id": "raw-1",
            "detail-type": "EC2 Instance State-change Notification",
            "source": "aws.ec2",
            "account": "123456789012",
            "time": "2026-01-01T00:00:00Z",
            "region": "us-west-2",
            "resources": [],
            "detail": {"instance-id": "${instance:0}", "state": "stopping"},
        }
        sim.run_step(step(sqs=json.dumps(body)))
        sim.run_for(10)
        assert sim.plane.store.get(record.name).is_deleting  # type: ignore[union-attr]


def test_step_errors_name_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="exactly one of"):
        step(ec2={"instance": "i-1", "action": "stop"}, wait=5)
