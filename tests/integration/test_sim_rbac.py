"""The simulation with RBAC on: deploy/rbac.yaml applied as a user would, each function under its own role."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client as k8s
from serverless_karpenter import naming
from serverless_karpenter.adapters.eks_token import presigned_token
from serverless_karpenter.naming import FUNCTION_NAMES
from serverless_karpenter_sim.cloud import REGION

from tests.builders import deployment, nodeclass, nodepool
from tests.integration.simulate import simulation

pytestmark = pytest.mark.integration


def test_functions_run_with_their_own_identity_and_write_the_nodeclass_status(tmp_path: Path) -> None:
    scenario = {"name": "rbac", "manifests": [nodepool(), nodeclass(), deployment("web", 2)], "steps": []}
    sim = simulation(tmp_path, scenario)
    try:
        sim.start()
        sim.run_for(90)
        rbac = k8s.RbacAuthorizationV1Api(sim.api_client)
        for function in FUNCTION_NAMES:
            group = naming.kubernetes_group(function)
            assert rbac.read_cluster_role_binding(group).subjects[0].name == group
        name = nodeclass()["metadata"]["name"]
        status = k8s.CustomObjectsApi(sim.api_client).get_cluster_custom_object(
            "karpenter.k8s.aws", "v1", "ec2nodeclasses", name
        )["status"]
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"
        log = sim.lambdas.log.getvalue()
        assert "failed writing EC2NodeClass status" not in log
        # Each function's token is its own role's session, mapped by its access entry.
        users = {}
        for function in FUNCTION_NAMES:
            with sim.lambdas.credentials.acting_as(function):
                token = presigned_token(sim.cluster_name, REGION)
            users[function] = sim.kube_server.access.authenticate(f"Bearer {token}")
        for function, user in users.items():
            assert user is not None
            session = sim.stack.outputs[naming.function_output(function)]
            assert user.name.endswith(f":assumed-role/{sim.cluster_name}-{function}-role/{session}")
            # Its own group only: no function acts with another's verbs.
            assert set(user.groups) - {"system:authenticated"} == {naming.kubernetes_group(function)}
    finally:
        sim.stop()
