"""NodeClaim objects (karpenter.sh/v1) in the simulated cluster, mirrored from the records, read and deleted
with the real kubectl (issue 21, acceptance 1, 2 and 5).

kubectl is on the PATH here and in CI; these tests fail, not skip, without it."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter_sim.kubeapi.kubeconfig import write_kubeconfig
from serverless_karpenter_sim.scenario import load_scenario
from serverless_karpenter_sim.simulation import Simulation

from tests.integration.simulate import write_scenario
from tests.integration.test_kubectl import header, kubectl, rows

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
NODECLAIM_COLUMNS = ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"]


def failures(sim: Simulation) -> list[str]:
    return [f"t={r.at}: {v}" for r in sim.invariants.reports for v in r.violations()]


def claims(sim: Simulation) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in sim.kube.list_nodeclaims()}


def run_until(sim: Simulation, done: Any, limit: float) -> None:
    end = sim.elapsed + limit
    while not done() and sim.elapsed < end:
        sim.tick()
    assert done(), f"not done after {limit:.0f}s of virtual time"


def test_kubectl_get_nodeclaims_after_the_demo_lists_each_claim_with_karpenters_columns(
    tmp_path: Path,
) -> None:
    """`make demo` runs the default scenario; `kubectl get nodeclaims` then lists its claim as Karpenter's
    CRD prints it, and a pass over an unchanged cluster writes nothing."""
    sim = Simulation(load_scenario("default"), log=io.StringIO())
    try:
        sim.start()
        sim.run_for(240)
        assert sim.settled()
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", sim.kube_server, sim.cluster_name)
        records = {r.name: r for r in sim.plane.store.list_live()}
        assert records and all(r.state == NodeClaimState.INITIALIZED for r in records.values())

        listed = kubectl(kubeconfig, "get", "nodeclaims").stdout
        assert header(listed) == NODECLAIM_COLUMNS
        assert set(rows(listed)) == set(records)
        for name, row in rows(listed).items():
            record = records[name]
            assert row[1:6] == [
                record.instance_type,
                record.capacity_type,
                record.zone,
                record.node_name,
                "True",
            ]
        wide = kubectl(kubeconfig, "get", "nodeclaims", "-o", "wide").stdout
        assert header(wide) == [*NODECLAIM_COLUMNS, "IMAGEID", "ID", "NODEPOOL", "NODECLASS", "DRIFTED"]
        for name, row in rows(wide).items():
            assert row[7:11] == [records[name].image_id, records[name].provider_id, "default", "default"]

        objects = claims(sim)
        nodepool = sim.kube.list_nodepools()[0]
        for name, obj in objects.items():
            record = records[name]
            meta, spec, status = obj["metadata"], obj["spec"], obj["status"]
            assert meta["finalizers"] == [wk.TERMINATION_FINALIZER]
            assert meta["ownerReferences"] == [
                {
                    "apiVersion": "karpenter.sh/v1",
                    "kind": "NodePool",
                    "name": "default",
                    "uid": nodepool["metadata"]["uid"],
                    "blockOwnerDeletion": True,
                }
            ]
            assert meta["labels"][wk.NODEPOOL] == "default"
            assert meta["labels"][wk.ARCH] == "amd64" and meta["labels"][wk.OS] == "linux"
            assert meta["labels"][wk.INSTANCE_FAMILY] == str(record.instance_type).split(".")[0]
            assert spec["nodeClassRef"] == {
                "group": "karpenter.k8s.aws",
                "kind": "EC2NodeClass",
                "name": "default",
            }
            assert spec["expireAfter"] == "720h0m0s"
            assert {"key": wk.NODEPOOL, "operator": "In", "values": ["default"]} in spec["requirements"]
            # Launched, the record keeps the launched type's offerings alone and the rest by name; the
            # claim still lists every type it could have launched as.
            assert [o.name for o in record.instance_type_options] == [record.instance_type]
            assert record.instance_type in record.instance_type_names and len(record.instance_type_names) > 1
            types = next(r for r in spec["requirements"] if r["key"] == wk.INSTANCE_TYPE)
            assert types["values"] == sorted(record.instance_type_names)
            assert spec["resources"]["requests"]["cpu"]
            assert (status["providerID"], status["nodeName"], status["imageID"]) == (
                record.provider_id,
                record.node_name,
                record.image_id,
            )
            assert status["capacity"]["cpu"] and status["allocatable"]["memory"]
            conditions = {c["type"]: c for c in status["conditions"]}
            for kind in ("Launched", "Registered", "Initialized", "Ready"):
                assert conditions[kind]["status"] == "True" and conditions[kind]["reason"] == kind
            assert "Drifted" not in conditions

        # Converged: another pass of every function changes no object (compare, don't write).
        versions = {n: o["metadata"]["resourceVersion"] for n, o in objects.items()}
        sim.run_for(130)
        assert {n: o["metadata"]["resourceVersion"] for n, o in claims(sim).items()} == versions

        # A Lambda that died between the record's write and the object's: the next pass writes it again.
        name = next(iter(objects))
        sim.kube.patch_nodeclaim(name, {"metadata": {"finalizers": None}})
        sim.kube.delete_nodeclaim(name)
        assert name not in claims(sim)
        sim.run_for(61)
        assert claims(sim)[name]["status"]["nodeName"] == records[name].node_name
        assert sim.plane.store.get(name).state == NodeClaimState.INITIALIZED  # type: ignore[union-attr]
        assert not failures(sim)
    finally:
        sim.stop()


PDB_MIN_AVAILABLE = 8


def pdb_scenario() -> Obj:
    manifests = load_scenario("default").manifests[:2]
    return {
        "name": "nodeclaim-delete",
        "manifests": [
            *manifests,
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {
                    "replicas": 10,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}},
                        "spec": {
                            "terminationGracePeriodSeconds": 0,
                            "containers": [
                                {
                                    "name": "web",
                                    "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                                }
                            ],
                        },
                    },
                },
            },
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"minAvailable": PDB_MIN_AVAILABLE, "selector": {"matchLabels": {"app": "web"}}},
            },
        ],
    }


def available_web_pods(sim: Simulation) -> int:
    """Pods of the Deployment that count toward its budget: running, Ready, not being deleted."""
    return sum(
        1
        for p in sim.kube.list_pods(label_selector="app=web")
        if p["status"].get("phase") == "Running"
        and not podlib.is_deleting(p)
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
    )


def test_kubectl_delete_nodeclaim_drains_terminates_and_removes_it_keeping_the_pdb(tmp_path: Path) -> None:
    sim = Simulation(load_scenario(str(write_scenario(tmp_path, pdb_scenario()))), log=io.StringIO())
    lowest: list[int] = []
    try:
        sim.start()
        run_until(sim, lambda: available_web_pods(sim) == 10 and len(claims(sim)) == 1, 300)
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", sim.kube_server, sim.cluster_name)
        [name] = claims(sim)
        record = sim.plane.store.get(name)
        assert record is not None and record.instance_id and record.node_name
        instance_id, node = record.instance_id, record.node_name

        deleted = kubectl(kubeconfig, "delete", "nodeclaim", name, "--wait=false")
        assert f'nodeclaim.karpenter.sh "{name}" deleted' in deleted.stdout
        # The finalizer holds it: deletionTimestamp set, nothing else done yet.
        assert claims(sim)[name]["metadata"]["deletionTimestamp"]
        assert "Terminating" not in kubectl(kubeconfig, "get", "nodeclaims").stderr

        def gone() -> bool:
            lowest.append(available_web_pods(sim))
            return name not in claims(sim)

        run_until(sim, gone, 900)
        # Pods covered by the PDB kept its minimum at every tick of the drain.
        assert min(lowest) >= PDB_MIN_AVAILABLE, lowest
        assert sim.kube_server.audit.pdb_violations == 0
        # The budget was in play: the drain went down to it, and the API server refused what went further.
        assert min(lowest) == PDB_MIN_AVAILABLE and sim.kube_server.audit.evictions_refused > 0
        closed = sim.plane.store.get(name)
        assert closed is not None and closed.state == NodeClaimState.TERMINATED
        assert closed.disruption_reason == "NodeClaimDeleted"
        state = sim.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0][
            "State"
        ]
        assert state["Name"] in ("shutting-down", "terminated")
        assert sim.kube.get_node(node) is None
        evicted = {r.pod for r in sim.kube_server.audit.evictions}
        assert evicted, "the node was drained through the Eviction API"
        listed = kubectl(kubeconfig, "get", "nodeclaim", name, check=False)
        assert listed.returncode != 0 and "NotFound" in listed.stderr
        # Its pods run again elsewhere, on the replacement the provisioner launched.
        run_until(sim, lambda: available_web_pods(sim) == 10, 300)
        assert [n for n in claims(sim) if n != name]
        assert not failures(sim)
    finally:
        sim.stop()


def _without_verb(sim: Simulation, role: str, resource: str, verb: str) -> k8s.V1ClusterRole:
    """Take ``verb`` on ``resource`` (karpenter.sh) out of a function's ClusterRole, as an operator who
    applied an older deploy/rbac.yaml would have it; the role as it was, to put back."""
    rbac = k8s.RbacAuthorizationV1Api(sim.api_client)
    original = rbac.read_cluster_role(role)
    changed = rbac.read_cluster_role(role)
    for rule in changed.rules:
        if "karpenter.sh" in (rule.api_groups or []) and resource in (rule.resources or []):
            rule.verbs = [v for v in rule.verbs if v != verb]
    changed.rules = [rule for rule in changed.rules if rule.verbs]
    rbac.replace_cluster_role(role, changed)
    return original


def test_a_cluster_role_without_the_verb_makes_the_write_fail_with_403_and_the_pass_goes_on(
    tmp_path: Path,
) -> None:
    log = io.StringIO()
    sim = Simulation(load_scenario("default"), log=log)
    try:
        sim.start()
        role = "serverless-karpenter-provisioner"
        original = _without_verb(sim, role, "nodeclaims", "create")
        sim.run_for(150)
        # The launch stands (DynamoDB is the truth): the claim is launched, registered and initialized.
        records = sim.plane.store.list_live()
        assert records and all(r.state == NodeClaimState.INITIALIZED for r in records)
        assert sim.settled()
        # The API server refused the object (403) and nothing wrote it around the refusal.
        assert claims(sim) == {}
        refused = [f for f in sim.lambdas.failures if f.function == "provisioner"]
        assert refused and all(f.kind == "forbidden" and f.logged for f in refused), refused
        assert all("nodeclaim" in f.detail for f in refused)
        assert "could not create nodeclaim" in log.getvalue()
        # The invariants page on it: a permission we lack is a deployment bug.
        assert any("forbidden" in v for v in failures(sim) + sim.invariants.check().violations())
        # With the verb back, the next pass creates it.
        original.metadata.resource_version = None
        k8s.RbacAuthorizationV1Api(sim.api_client).replace_cluster_role(role, original)
        sim.run_for(61)
        assert set(claims(sim)) == {r.name for r in records}
    finally:
        sim.stop()


def test_a_drifted_claim_shows_drifted_then_its_disruption_reason(tmp_path: Path) -> None:
    sim = Simulation(load_scenario("default"), log=io.StringIO())
    try:
        sim.start()
        sim.run_for(180)
        assert sim.settled()
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", sim.kube_server, sim.cluster_name)
        [name] = claims(sim)
        assert "Drifted" not in {c["type"] for c in claims(sim)[name]["status"]["conditions"]}
        # A NodePool template change: the claim's nodepool-hash no longer matches it.
        sim.kube.custom.patch_cluster_custom_object(
            "karpenter.sh",
            "v1",
            "nodepools",
            "default",
            {"spec": {"template": {"metadata": {"labels": {"team": "a"}}}}},
        )

        def drifted() -> bool:
            obj = claims(sim).get(name)
            return obj is not None and any(c["type"] == "Drifted" for c in obj["status"]["conditions"])

        run_until(sim, drifted, 120)
        condition = {c["type"]: c for c in claims(sim)[name]["status"]["conditions"]}["Drifted"]
        assert (condition["status"], condition["reason"]) == ("True", "NodePoolDrifted")
        wide = rows(kubectl(kubeconfig, "get", "nodeclaims", "-o", "wide").stdout)
        assert wide[name][-1] == "True"  # the DRIFTED column

        def disrupting() -> bool:
            obj = claims(sim).get(name)
            return obj is None or any(c["type"] == "DisruptionReason" for c in obj["status"]["conditions"])

        run_until(sim, disrupting, 300)
        obj = claims(sim).get(name)
        if obj is not None:  # still draining: Terminating, with Karpenter's reason
            assert obj["metadata"]["deletionTimestamp"]
            reason = {c["type"]: c for c in obj["status"]["conditions"]}["DisruptionReason"]["reason"]
            assert reason == sim.plane.store.get(name).disruption_reason  # type: ignore[union-attr]
        assert not failures(sim)
    finally:
        sim.stop()
