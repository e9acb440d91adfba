"""NodeClaim objects with no record, in the simulator: adoption is crash-safe and idempotent, a user's
claim is launched through our launch path, and a leftover is finalized as Karpenter's garbage collection
would (issue 21)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from serverless_karpenter.adapters.state_store import ConflictError
from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.adoption import GARBAGE_COLLECTED_EVENT, Adoption
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter_sim.scenario import load_scenario
from serverless_karpenter_sim.simulation import Schedule, Simulation

from tests.builders import nodeclass, nodepool
from tests.integration.disruption_helpers import running, scenario
from tests.integration.simulate import run_claimed_instance, write_scenario
from tests.integration.test_adoption import LAUNCH_OR_TERMINATE, _count_ec2_calls

pytestmark = pytest.mark.integration


def test_adoption_resumes_after_a_crash_between_tagging_and_the_record_and_never_adopts_twice() -> None:
    with running(scenario("adoption"), tick_seconds=10) as (sim, _):
        calls = _count_ec2_calls(sim)
        seed, wait = sim.scenario.steps
        sim.run_step(seed)
        # The provisioner dies right after tagging the untagged instance, before any record is written.
        sim.fault({"lambda": "crash", "after": "ec2.CreateTags", "function": "provisioner"})
        sim.run_step(wait)
        assert sim.faults.injected["lambda/crash"] == 1
        records = sim.plane.store.list_live()
        assert len(records) == 3
        assert all(r.state == NodeClaimState.INITIALIZED for r in records)
        assert all(calls[op] == 0 for op in LAUNCH_OR_TERMINATE), calls

        # A second adopter that missed the records (it listed before they were written) loses the
        # conditional write and changes nothing.
        nodes = {n["spec"]["providerID"]: n for n in sim.kube.list_nodes()}
        original_get = sim.plane.store.get
        sim.plane.store.get = lambda name: None  # type: ignore[method-assign]
        try:
            again = Adoption(sim.plane).reconcile([], nodes, {})
        finally:
            sim.plane.store.get = original_get  # type: ignore[method-assign]
        assert again.adopted == []
        assert {(r.name, r.version) for r in sim.plane.store.list_live()} == {
            (r.name, r.version) for r in records
        }


def _claim(name: str, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "labels": {wk.NODEPOOL: "default"},
            "finalizers": [wk.TERMINATION_FINALIZER],
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["m5.large"]},
                {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            ],
            "resources": {"requests": {"cpu": "1"}},
        },
        **({"status": status} if status else {}),
    }


def test_a_users_nodeclaim_is_launched_and_a_leftover_is_garbage_collected(tmp_path: Path) -> None:
    loaded = load_scenario(
        str(write_scenario(tmp_path, {"name": "unrecorded", "manifests": [nodepool(), nodeclass()]}))
    )
    sim = Simulation(loaded, schedule=Schedule(tick_seconds=10.0), log=io.StringIO())
    try:
        sim.start()
        resources = sim.resources
        assert resources is not None
        # An instance Karpenter launched and something terminated since: its claim is a leftover.
        gone = run_claimed_instance(sim, "default-gone1")
        sim.ec2.terminate_instances(InstanceIds=[gone["InstanceId"]])
        custom = sim.kube.custom
        for manifest in (_claim("default-gone1"), _claim("default-users")):
            custom.create_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", manifest)
        zone = gone["Placement"]["AvailabilityZone"]
        custom.patch_cluster_custom_object_status(
            "karpenter.sh",
            "v1",
            "nodeclaims",
            "default-gone1",
            {"status": {"providerID": f"aws:///{zone}/{gone['InstanceId']}"}},
        )

        sim.run_for(180)
        names = {c["metadata"]["name"] for c in sim.kube.list_nodeclaims()}
        assert "default-gone1" not in names, "the leftover is finalized and deleted"
        assert sim.plane.store.get("default-gone1") is None
        events = sim.kube.core.list_namespaced_event("default").items
        assert any(
            e.reason == GARBAGE_COLLECTED_EVENT
            and e.involved_object.kind == "NodeClaim"
            and e.involved_object.name == "default-gone1"
            for e in events
        )
        # The user's claim is launched as Karpenter would: our record, an m5.large tagged with it, a Node.
        users = sim.plane.store.get("default-users")
        assert users is not None and users.state == NodeClaimState.INITIALIZED
        assert users.instance_type == "m5.large" and users.capacity_type == "on-demand"
        assert sim.plane.launcher.find_by_nodeclaim("default-users") is not None
        assert sim.kube.get_node(users.node_name or "") is not None
        report = sim.check_invariants()
        assert report.ok, report.violations()
    finally:
        sim.stop()


def test_a_karpenter_nodeclaim_deleted_while_karpenter_was_away_is_drained_and_terminated() -> None:
    with running(scenario("adoption"), tick_seconds=10) as (sim, watch):
        seed, _ = sim.scenario.steps
        sim.run_step(seed)
        victim = sorted(c["metadata"]["name"] for c in sim.kube.list_nodeclaims())[0]
        # `kubectl delete nodeclaim` after Karpenter was scaled to zero: its finalizer holds the object.
        sim.kube.delete_nodeclaim(victim)
        [held] = [c for c in sim.kube.list_nodeclaims() if c["metadata"]["name"] == victim]
        assert held["metadata"].get("deletionTimestamp")
        instance_id = held["status"]["providerID"].rsplit("/", 1)[-1]
        for _ in range(15):
            sim.run_for(60)
            if victim not in {c["metadata"]["name"] for c in sim.kube.list_nodeclaims()}:
                break
        record = sim.plane.store.get(victim)
        assert record is not None and record.state == NodeClaimState.TERMINATED
        assert record.disruption_reason == "NodeClaimDeleted"
        assert victim in watch.disrupting_at
        raw = sim.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
        assert raw["State"]["Name"] in ("shutting-down", "terminated")
        assert victim not in {c["metadata"]["name"] for c in sim.kube.list_nodeclaims()}
        # Its pods moved to new capacity, under the PDB; the other two adopted claims were left alone.
        assert sum(1 for p in sim.kube.list_pods() if (p.get("status") or {}).get("phase") == "Running") == 9
        assert sim.kube_server.audit.pdb_violations == 0
        assert len([r for r in sim.plane.store.list_live() if r.name.startswith("default-kp")]) == 2


def test_garbage_collection_spares_the_instances_of_nodeclaims_not_yet_adopted() -> None:
    with running(scenario("adoption"), tick_seconds=10) as (sim, _):
        calls = _count_ec2_calls(sim)
        seed, _ = sim.scenario.steps
        sim.run_step(seed)
        seeded = {c["status"]["providerID"].rsplit("/", 1)[-1] for c in sim.kube.list_nodeclaims()}
        # Every adoption loses its conditional write (as to a writer that keeps getting there first) for
        # longer than the garbage-collection grace: the tagged instances have no record all that time.
        create = sim.plane.store.create

        def lose(record: Any) -> Any:
            raise ConflictError(f"nodeclaim {record.name} exists")

        sim.plane.store.create = lose  # type: ignore[method-assign]
        try:
            sim.run_for(sim.settings.garbage_collection_grace_seconds + 120)
        finally:
            sim.plane.store.create = create  # type: ignore[method-assign]
        assert sim.plane.store.list() == []
        assert calls["TerminateInstances"] == 0, "an instance some NodeClaim names is nobody's orphan"
        states = {
            raw["InstanceId"]: raw["State"]["Name"]
            for reservation in sim.ec2.describe_instances(InstanceIds=sorted(seeded))["Reservations"]
            for raw in reservation["Instances"]
        }
        assert set(states.values()) == {"running"}
        sim.run_for(120)
        assert len(sim.plane.store.list_live()) == 3
        assert all(calls[op] == 0 for op in LAUNCH_OR_TERMINATE), calls
