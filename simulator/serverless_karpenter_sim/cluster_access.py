"""Who each actor in the simulation is to the cluster, as on a deployed EKS cluster.

- Each Lambda function signs its EKS token with its own role's credentials (from STS, as Lambda gets
  them); the role has the access entry the stack gives it (``infra/access.py``): type ``STANDARD``,
  Kubernetes group ``serverless-karpenter-<function>``, which ``deploy/rbac.yaml`` binds to that
  function's own ClusterRole.
- The scenario driver is the cluster's admin (``system:masters``), as the user who ran ``kubectl apply``.
- The simulated kube-scheduler is ``system:kube-scheduler`` with its upstream roles.
- The simulated kubelets and workload controllers (which also play the node lifecycle controller and
  pod GC) act as ``system:masters`` users under their own names: upstream gives them the node authorizer
  and per-controller service accounts, which are not modelled.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from kubernetes import client as k8s
from kubernetes import utils as k8s_utils
from serverless_karpenter import naming

from serverless_karpenter_sim.kubeapi import KubeApiServer
from serverless_karpenter_sim.kubeapi.bootstrap_policy import SCHEDULER_USER
from serverless_karpenter_sim.kubeapi.rbac import SUPERUSER_GROUP

if TYPE_CHECKING:
    from serverless_karpenter_sim.cloud import SimulatedCloud

RBAC_MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
KUBELETS_USER = "system:node:simulated-kubelets"
LAMBDA_TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
    ],
}


def function_role_name(cluster_name: str, function: str) -> str:
    return f"{cluster_name}-{function}-role"[:64]


def function_role(cloud: SimulatedCloud, function: str) -> str:
    """The ARN of the function's execution role, created the first time it is asked for."""
    iam = cloud.client("iam")
    name = function_role_name(cloud.cluster_name, function)
    try:
        return str(iam.get_role(RoleName=name)["Role"]["Arn"])
    except iam.exceptions.NoSuchEntityException:
        return str(
            iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(LAMBDA_TRUST))["Role"]["Arn"]
        )


def grant_function_access(cloud: SimulatedCloud, function: str) -> dict[str, str]:
    """The access entry the stack gives the function's role, and the credentials Lambda would hand the
    function (as ``AWS_*`` environment variables)."""
    role = function_role(cloud, function)
    grant_cluster_access(cloud, function, role)
    session = f"{cloud.cluster_name}-{function}"[:64]
    credentials = cloud.client("sts").assume_role(RoleArn=role, RoleSessionName=session)["Credentials"]
    return {
        "AWS_ACCESS_KEY_ID": credentials["AccessKeyId"],
        "AWS_SECRET_ACCESS_KEY": credentials["SecretAccessKey"],
        "AWS_SESSION_TOKEN": credentials["SessionToken"],
    }


def grant_cluster_access(cloud: SimulatedCloud, function: str, role: str) -> None:
    """The access entry the stack gives a function's role (``infra/access.py``): type ``STANDARD``, in
    the function's own Kubernetes group, which ``deploy/rbac.yaml`` binds to its ClusterRole."""
    eks = cloud.client("eks")
    listed = eks.list_access_entries(clusterName=cloud.cluster_name)["accessEntries"]
    if role not in listed:
        eks.create_access_entry(
            clusterName=cloud.cluster_name,
            principalArn=role,
            type="STANDARD",
            kubernetesGroups=[naming.kubernetes_group(function)],
        )


def rbac_documents(path: Path = RBAC_MANIFEST) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def apply_rbac(api_client: k8s.ApiClient, documents: list[dict[str, Any]] | None = None) -> None:
    """``kubectl apply -f deploy/rbac.yaml``, as the cluster's admin does before the functions run."""
    for document in documents if documents is not None else rbac_documents():
        k8s_utils.create_from_dict(api_client, document)


def component_clients(server: KubeApiServer) -> dict[str, k8s.ApiClient]:
    """API clients of the simulated cluster's own components, each with its identity."""
    return {
        "driver": k8s.ApiClient(server.client_configuration()),
        "scheduler": k8s.ApiClient(server.client_configuration(SCHEDULER_USER, ())),
        "controllers": k8s.ApiClient(
            server.client_configuration(CONTROLLER_MANAGER_USER, (SUPERUSER_GROUP,))
        ),
        "kubelets": k8s.ApiClient(
            server.client_configuration(KUBELETS_USER, ("system:nodes", SUPERUSER_GROUP))
        ),
    }
