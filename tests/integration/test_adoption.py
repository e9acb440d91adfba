"""Issue 21, acceptance 3: zero-churn migration from an in-cluster Karpenter (scenario ``adoption``).

Karpenter left 3 NodeClaims, their instances (one not yet tagged with its claim) and Nodes running 9
pods; our records are empty. Our first passes adopt all 3, launch and terminate nothing, and a later
NodePool template change drifts them and drift replaces them as it replaces our own."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from serverless_karpenter.api import labels as wk
from serverless_karpenter.api.nodepool import NODEPOOL_HASH_VERSION, NodePool
from serverless_karpenter.clock import parse_rfc3339
from serverless_karpenter.lifecycle.adoption_records import instance_id_of
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter_sim.simulation import Simulation

from tests.integration.disruption_helpers import active, running, running_pods, scenario

pytestmark = pytest.mark.integration

LAUNCH_OR_TERMINATE = ("RunInstances", "CreateFleet", "TerminateInstances")


def _count_ec2_calls(sim: Simulation) -> Counter[str]:
    calls: Counter[str] = Counter()

    def count(model: Any, **_: Any) -> None:
        calls[model.name] += 1

    sim.plane.launcher.ec2.meta.events.register("before-call.ec2.*", count)
    return calls


def _instances(sim: Simulation) -> dict[str, dict[str, Any]]:
    out = {}
    for reservation in sim.ec2.describe_instances()["Reservations"]:
        for raw in reservation["Instances"]:
            out[raw["InstanceId"]] = raw
    return out


def test_karpenter_nodeclaims_are_adopted_without_churn_and_drift_replaces_them() -> None:
    with running(scenario("adoption"), tick_seconds=10) as (sim, watch):
        calls = _count_ec2_calls(sim)
        seed, wait = sim.scenario.steps
        sim.run_step(seed)
        claims = {c["metadata"]["name"]: c for c in sim.kube.list_nodeclaims()}
        assert len(claims) == 3
        assert sim.plane.store.list() == []
        seeded = {name: instance_id_of(c["status"]["providerID"]) for name, c in claims.items()}
        untagged = [
            i for i, raw in _instances(sim).items() if wk.NODECLAIM not in {t["Key"] for t in raw["Tags"]}
        ]
        assert len(untagged) == 1
        assert running_pods(sim) == 9

        sim.run_step(wait)
        records = {r.name: r for r in sim.plane.store.list_live()}
        assert set(records) == set(claims), "every claim adopted, nothing else created"
        pool = NodePool.from_manifest(next(p for p in sim.kube.list_nodepools()))
        for name, record in records.items():
            claim = claims[name]
            assert record.state == NodeClaimState.INITIALIZED
            assert record.instance_id == seeded[name]
            assert record.provider_id == claim["status"]["providerID"]
            assert record.node_name == claim["status"]["nodeName"]
            assert (record.instance_type, record.capacity_type) == ("c5.xlarge", "on-demand")
            assert record.zone == claim["metadata"]["labels"][wk.ZONE]
            assert (record.nodepool, record.nodeclass) == ("default", "default")
            assert record.requirements == claim["spec"]["requirements"]
            assert record.expire_after_seconds == 720 * 3600
            assert record.created_at == parse_rfc3339(claim["metadata"]["creationTimestamp"])
            assert record.price_per_hour is not None and record.price_per_hour > 0
            # Not drifted for being adopted: Karpenter's hashes agreed, so ours are recorded, on the Node too.
            assert record.annotations[wk.NODEPOOL_HASH] == pool.template_hash()
            node = sim.kube.get_node(record.node_name or "")
            assert node is not None
            assert node["metadata"]["annotations"][wk.NODEPOOL_HASH] == pool.template_hash()
            assert node["metadata"]["annotations"][wk.NODEPOOL_HASH_VERSION] == NODEPOOL_HASH_VERSION
        # Nothing launched, nothing terminated: the same 3 instances run, and the untagged one now carries
        # its claim (as Karpenter's tagging controller would have tagged it).
        assert all(calls[op] == 0 for op in LAUNCH_OR_TERMINATE), calls
        instances = _instances(sim)
        assert set(instances) == set(seeded.values())
        assert all(raw["State"]["Name"] == "running" for raw in instances.values())
        tags = {t["Key"]: t["Value"] for t in instances[untagged[0]]["Tags"]}
        assert tags[wk.NODECLAIM] == next(n for n, i in seeded.items() if i == untagged[0])
        assert running_pods(sim) == 9
        assert not watch.disrupting_at, "consolidation and drift saw nothing to do"

        # A later change to the NodePool template drifts the adopted claims; drift replaces them.
        sim.kube.custom.patch_cluster_custom_object(
            "karpenter.sh",
            "v1",
            "nodepools",
            "default",
            {"spec": {"template": {"metadata": {"labels": {"team": "web"}}}}},
        )
        changed_at = sim.elapsed
        for _ in range(40):
            sim.run_for(60)
            if not set(claims) & {r.name for r in active(sim)} and running_pods(sim) == 9:
                break
        now_active = active(sim)
        assert not set(claims) & {r.name for r in now_active}, "every adopted claim was replaced"
        assert all(watch.disrupting_at[name] > changed_at for name in claims)
        assert all(r.labels.get("team") == "web" for r in now_active)
        assert calls["CreateFleet"] >= 1 and calls["TerminateInstances"] >= 1
        gone = _instances(sim)
        assert all(gone[i]["State"]["Name"] in ("shutting-down", "terminated") for i in seeded.values())
        assert running_pods(sim) == 9
        assert sim.kube_server.audit.pdb_violations == 0
        # The adopted claims' objects go with their records, once their drains end.
        for _ in range(10):
            if not set(claims) & {c["metadata"]["name"] for c in sim.kube.list_nodeclaims()}:
                break
            sim.run_for(60)
        assert not set(claims) & {c["metadata"]["name"] for c in sim.kube.list_nodeclaims()}
        assert all(sim.plane.store.get(name).state == NodeClaimState.TERMINATED for name in claims)  # type: ignore[union-attr]
