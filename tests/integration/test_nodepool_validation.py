"""A NodePool the provisioner cannot use is skipped alone, as Karpenter's validation controller does it:
``ValidationSucceeded=False`` and ``Ready=False`` on it, a Warning Event, and every other NodePool keeps
provisioning (issue 17). Before this, one such NodePool raised ValueError and stopped every launch."""

# mypy: disable-error-code="union-attr,index"

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client import CoreV1Event
from serverless_karpenter_sim.kubeapi import crd_schema
from serverless_karpenter_sim.kubeapi.errors import ApiError
from serverless_karpenter_sim.kubeapi.kinds import kind_of
from serverless_karpenter_sim.simulation import Simulation

from tests.builders import deployment, nodeclass, nodepool
from tests.integration.simulate import simulation

pytestmark = pytest.mark.integration

NODEPOOLS = kind_of("karpenter.sh", "v1", "nodepools")


def _bad_nodepool() -> dict[str, Any]:
    """What the API server refuses today, as it would have stored it before our CRDs had their rules."""
    bad = copy.deepcopy(nodepool("bad", weight=100))
    bad["spec"]["template"]["spec"]["requirements"] = [
        {"key": "kubernetes.io/arch", "operator": "Foo", "values": ["amd64"]},
        {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["abc"]},
    ]
    return bad


def _nodepool(sim: Simulation, name: str) -> dict[str, Any]:
    return next(p for p in sim.kube.list_nodepools() if p["metadata"]["name"] == name)


def _conditions(sim: Simulation, name: str) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (_nodepool(sim, name).get("status") or {}).get("conditions") or []}


def _warnings(sim: Simulation) -> list[CoreV1Event]:
    return [
        e
        for e in sim.kube.core.list_event_for_all_namespaces().items
        if e.involved_object.kind == "NodePool"
        and e.involved_object.name == "bad"
        and e.reason == "NodePoolValidationFailed"
    ]


def test_an_invalid_stored_nodepool_is_skipped_alone_with_its_status_and_a_warning(tmp_path: Path) -> None:
    sim = simulation(
        tmp_path,
        {
            "name": "invalid-nodepool",
            "manifests": [nodepool("good"), nodeclass(), deployment("web", 2)],
            "steps": [],
        },
    )
    try:
        sim.start()
        with pytest.raises(ApiError) as refused:  # the API server refuses it on a create...
            sim.kube_server.store.create(NODEPOOLS, None, _bad_nodepool())
        assert refused.value.code == 422
        with crd_schema.stored_unvalidated():  # ...but one stored before the rules is still served
            sim.kube_server.store.create(NODEPOOLS, None, _bad_nodepool())
        sim.run_for(30)

        launched = sim.plane.store.list()
        assert launched, "the valid NodePool must keep provisioning"
        assert {record.nodepool for record in launched} == {"good"}
        conditions = _conditions(sim, "bad")
        validation, ready = conditions["ValidationSucceeded"], conditions["Ready"]
        assert (validation["status"], validation["reason"]) == ("False", "NodePoolValidationFailed")
        assert "Foo" in validation["message"] and "operator" in validation["message"]
        assert (ready["status"], ready["reason"], ready["message"]) == (
            "False",
            "UnhealthyDependents",
            "ValidationSucceeded=False",
        )
        assert _conditions(sim, "good")["ValidationSucceeded"]["status"] == "True"
        warnings = _warnings(sim)
        assert len(warnings) == 1 and warnings[0].type == "Warning"
        assert warnings[0].message == validation["message"]

        # More pending pods: another pass finds the status already saying so and rewrites nothing, and the
        # repeated Warning raises the one Event's count.
        bad_version = _nodepool(sim, "bad")["metadata"]["resourceVersion"]
        k8s.AppsV1Api(sim.api_client).patch_namespaced_deployment_scale(
            "web", "default", {"spec": {"replicas": 6}}
        )
        sim.run_for(30)
        assert len(sim.plane.store.list()) > len(launched)
        assert _nodepool(sim, "bad")["metadata"]["resourceVersion"] == bad_version
        assert (_warnings(sim)[0].count or 1) > 1
    finally:
        sim.stop()
