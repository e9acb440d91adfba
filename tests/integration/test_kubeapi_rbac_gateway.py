"""The functions' Kubernetes gateway against the simulated API server with RBAC on: their EKS tokens map,
through the access entry the stack gives their role, to their own group, which deploy/rbac.yaml binds to
their own ClusterRole, and each call needs its own verb there."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from kubernetes import client as k8s
from serverless_karpenter.adapters.eks_token import TokenSource, presigned_token
from serverless_karpenter.adapters.kubernetes import KubernetesError, KubernetesGateway, configuration
from serverless_karpenter.adapters.nodeclass_status import write_status
from serverless_karpenter.clock import ManualClock
from serverless_karpenter.naming import kubernetes_group
from serverless_karpenter_sim.cloud import REGION, SimulatedCloud
from serverless_karpenter_sim.cluster_access import apply_rbac, grant_function_access, rbac_documents
from serverless_karpenter_sim.eks_authn import EksTokenAuthenticator, aws_auth_reader
from serverless_karpenter_sim.kubeapi import KubeApiServer
from serverless_karpenter_sim.kubeapi.server import client_configuration

from tests import builders

pytestmark = pytest.mark.integration

CLUSTER = "rbac-test"
ACCOUNT = "123456789012"
NODECLASS_ERROR = "spec.subnetSelectorTerms: no subnet matches"


@dataclass
class Cluster:
    cloud: SimulatedCloud
    server: KubeApiServer
    clock: ManualClock
    admin: k8s.ApiClient

    def session(self, credentials: dict[str, str]) -> boto3.session.Session:
        return boto3.session.Session(
            aws_access_key_id=credentials["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=credentials["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=credentials["AWS_SESSION_TOKEN"],
            region_name=REGION,
        )

    def gateway(self, function: str = "provisioner") -> KubernetesGateway:
        """The function's gateway, as build_control_plane makes it, signing with its role's credentials."""
        tokens = TokenSource(
            CLUSTER, REGION, self.clock.now, self.session(grant_function_access(self.cloud, function))
        )
        trusted = configuration(self.server.url, tokens.token, ca_file=self.server.authority.ca_file)
        return KubernetesGateway(k8s.ApiClient(trusted), self.clock)

    def status_of(self, token: str) -> int:
        api = k8s.CoreV1Api(k8s.ApiClient(client_configuration(self.server.url, token)))
        try:
            api.list_pod_for_all_namespaces(limit=1)  # what even the watcher may do
        except k8s.ApiException as err:
            return int(err.status)
        return 200


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    clock = ManualClock()
    cloud = SimulatedCloud(CLUSTER, clock)
    cloud.start()
    server = KubeApiServer(clock)
    server.start()
    eks = EksTokenAuthenticator(CLUSTER, REGION, aws_auth_reader(server.store))
    server.access.use_webhook(eks, eks.authorizes)
    admin = k8s.ApiClient(server.client_configuration())
    core = k8s.CoreV1Api(admin)
    core.create_node({"metadata": {"name": "n1"}})
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "web-1"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
        },
    )
    k8s.CustomObjectsApi(admin).create_cluster_custom_object(
        "karpenter.k8s.aws",
        "v1",
        "ec2nodeclasses",
        builders.nodeclass(),  # a valid one: the CRD's rules refuse an empty spec
    )
    try:
        yield Cluster(cloud, server, clock, admin)
    finally:
        server.stop()
        cloud.stop()


def without(
    documents: list[dict[str, Any]], function: str, group: str, resource: str, verb: str
) -> list[dict[str, Any]]:
    """deploy/rbac.yaml with one verb on one resource taken out of ``function``'s ClusterRole."""
    documents = copy.deepcopy(documents)
    role = next(
        d
        for d in documents
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == kubernetes_group(function)
    )
    rules: list[dict[str, Any]] = []
    found = False
    for rule in role["rules"]:
        if group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]:
            found = True
            others = [r for r in rule["resources"] if r != resource]
            if others:
                rules.append({**rule, "resources": others})
            rules.append({**rule, "resources": [resource], "verbs": [v for v in rule["verbs"] if v != verb]})
        else:
            rules.append(rule)
    assert found, f"deploy/rbac.yaml grants no {verb} on {group}/{resource}"
    role["rules"] = [r for r in rules if r["verbs"]]
    return documents


def pod() -> dict[str, Any]:
    return {"metadata": {"name": "web-1", "namespace": "default"}}


def nodeclass(cluster: Cluster) -> dict[str, Any]:
    obj: dict[str, Any] = k8s.CustomObjectsApi(cluster.admin).get_cluster_custom_object(
        "karpenter.k8s.aws", "v1", "ec2nodeclasses", "default"
    )
    return obj


def write_nodeclass_status(cluster: Cluster, kube: KubernetesGateway) -> None:
    if not write_status(kube, nodeclass(cluster), None, NODECLASS_ERROR, cluster.clock.now()):
        raise KubernetesError("the status write failed", 403)


# (function, apiGroup, resource, verb) of deploy/rbac.yaml -> the gateway call that needs it
CALLS: dict[tuple[str, str, str, str], Callable[[Cluster, KubernetesGateway], object]] = {
    ("watcher", "", "pods", "list"): lambda c, kube: kube.list_pending_pods(),
    ("termination", "", "pods/eviction", "create"): lambda c, kube: kube.evict(pod()),
    ("termination", "", "pods", "delete"): lambda c, kube: kube.delete_pod(pod()),
    ("termination", "", "nodes", "patch"): lambda c, kube: kube.patch_node(
        "n1", {"metadata": {"labels": {"a": "b"}}}
    ),
    ("provisioner", "", "nodes", "get"): lambda c, kube: kube.get_node("n1"),
    ("provisioner", "storage.k8s.io", "csinodes", "list"): lambda c, kube: kube.list_csi_nodes(),
    ("interruption", "", "nodes", "delete"): lambda c, kube: kube.delete_node("n1"),
    ("disruption", "karpenter.sh", "nodepools", "list"): lambda c, kube: kube.list_nodepools(),
    ("provisioner", "karpenter.k8s.aws", "ec2nodeclasses/status", "patch"): write_nodeclass_status,
}
# Whatever else the function may do, to show the rest of its role still holds.
STILL_ALLOWED: dict[str, Callable[[KubernetesGateway], object]] = {
    "watcher": lambda kube: kube.api_client,  # it holds nothing else but the pods' list and watch
    "provisioner": lambda kube: kube.list_nodes(),
    "interruption": lambda kube: kube.get_node("n1"),
    "disruption": lambda kube: kube.list_nodes(),
    "termination": lambda kube: kube.list_nodes(),
}


@pytest.mark.parametrize("permission", list(CALLS), ids=lambda p: f"{p[0]}-{p[3]}-{p[2]}")
def test_each_call_needs_its_verb_in_deploy_rbac_yaml(
    cluster: Cluster, permission: tuple[str, str, str, str]
) -> None:
    function = permission[0]
    apply_rbac(cluster.admin, without(rbac_documents(), *permission))
    kube = cluster.gateway(function)
    with pytest.raises(KubernetesError) as err:
        CALLS[permission](cluster, kube)
    assert err.value.status == 403
    STILL_ALLOWED[function](kube)


@pytest.mark.parametrize("permission", list(CALLS), ids=lambda p: f"{p[0]}-{p[3]}-{p[2]}")
def test_each_call_is_allowed_by_deploy_rbac_yaml(
    cluster: Cluster, permission: tuple[str, str, str, str]
) -> None:
    apply_rbac(cluster.admin)
    CALLS[permission](cluster, cluster.gateway(permission[0]))


WATCHER_REFUSED: dict[str, Callable[[KubernetesGateway], object]] = {
    "delete a node": lambda kube: kube.delete_node("n1"),
    "patch a node": lambda kube: kube.patch_node("n1", {"metadata": {"labels": {"a": "b"}}}),
    "evict a pod": lambda kube: kube.evict(pod()),
    "delete a pod": lambda kube: kube.delete_pod(pod()),
    "list nodes": lambda kube: kube.list_nodes(),
    "get a node": lambda kube: kube.get_node("n1"),
}


@pytest.mark.parametrize("call", list(WATCHER_REFUSED))
def test_the_watcher_may_list_and_watch_pods_and_nothing_else(cluster: Cluster, call: str) -> None:
    # With one group for all five functions, the watcher could delete nodes.
    apply_rbac(cluster.admin)
    kube = cluster.gateway("watcher")
    with pytest.raises(KubernetesError) as err:
        WATCHER_REFUSED[call](kube)
    assert err.value.status == 403
    kube.list_pending_pods()


def test_the_nodeclass_status_is_written_with_the_fixed_role_only(cluster: Cluster) -> None:
    # The ClusterRole before the fix granted only list on ec2nodeclasses: the status was never written.
    apply_rbac(
        cluster.admin,
        without(rbac_documents(), "provisioner", "karpenter.k8s.aws", "ec2nodeclasses/status", "patch"),
    )
    kube = cluster.gateway()
    assert not write_status(kube, nodeclass(cluster), None, NODECLASS_ERROR, cluster.clock.now())
    assert "status" not in nodeclass(cluster)
    k8s.RbacAuthorizationV1Api(cluster.admin).delete_cluster_role(kubernetes_group("provisioner"))
    apply_rbac(
        cluster.admin,
        [
            d
            for d in rbac_documents()
            if d["kind"] == "ClusterRole" and d["metadata"]["name"] == kubernetes_group("provisioner")
        ],
    )
    assert write_status(kube, nodeclass(cluster), None, NODECLASS_ERROR, cluster.clock.now())
    conditions = {c["type"]: c for c in nodeclass(cluster)["status"]["conditions"]}
    assert conditions["Ready"]["status"] == "False"
    assert conditions["SubnetsReady"]["message"] == NODECLASS_ERROR


def test_a_denied_call_gets_kube_apiservers_forbidden_status(cluster: Cluster) -> None:
    apply_rbac(cluster.admin, without(rbac_documents(), "termination", "", "pods/eviction", "create"))
    kube = cluster.gateway("termination")
    with pytest.raises(k8s.ApiException) as err:
        k8s.CoreV1Api(kube.api_client).create_namespaced_pod_eviction(
            "web-1", "default", {"metadata": {"name": "web-1", "namespace": "default"}}
        )
    user = f"arn:aws:sts::{ACCOUNT}:assumed-role/{CLUSTER}-termination-role/{CLUSTER}-termination"
    assert err.value.status == 403
    assert json.loads(err.value.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'pods "web-1" is forbidden: User "{user}" cannot create resource "pods/eviction" '
        'in API group "" in the namespace "default"',
        "reason": "Forbidden",
        "details": {"name": "web-1", "kind": "pods"},
        "code": 403,
    }


def test_functions_may_not_change_their_own_permissions(cluster: Cluster) -> None:
    apply_rbac(cluster.admin)
    rbac = k8s.RbacAuthorizationV1Api(cluster.gateway().api_client)
    with pytest.raises(k8s.ApiException) as err:
        rbac.patch_cluster_role(
            kubernetes_group("provisioner"),
            {"rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]},
        )
    assert err.value.status == 403


def test_tokens_the_cluster_cannot_trust_are_unauthorized(cluster: Cluster) -> None:
    apply_rbac(cluster.admin)
    credentials = grant_function_access(cluster.cloud, "watcher")
    good = presigned_token(CLUSTER, REGION, cluster.session(credentials))
    assert cluster.status_of(good) == 200
    assert cluster.status_of("k8s-aws-v1.bm90LWEtdXJs") == 401
    assert cluster.status_of("some-static-token-nobody-issued") == 401
    # Signed for another cluster: the x-k8s-aws-id header the signature covers does not match.
    assert cluster.status_of(presigned_token("another-cluster", REGION, cluster.session(credentials))) == 401
    # Presigned against another partition's STS (China's, under amazonaws.com.cn): not this cluster's.
    assert cluster.status_of(presigned_token(CLUSTER, "cn-north-1", cluster.session(credentials))) == 401
    # Signed with a secret that is not the key's.
    forged = {**credentials, "AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    assert cluster.status_of(presigned_token(CLUSTER, REGION, cluster.session(forged))) == 401
    # Credentials STS never issued.
    made_up = {**credentials, "AWS_ACCESS_KEY_ID": "ASIAMADEUPKEY0000000"}
    assert cluster.status_of(presigned_token(CLUSTER, REGION, cluster.session(made_up))) == 401
    # Fifteen minutes after signing, STS no longer accepts the URL.
    later = EksTokenAuthenticator(CLUSTER, REGION, lambda: None, wall_clock=lambda: time.time() + 15 * 60 + 5)
    assert later.authenticate(good) is None
    assert EksTokenAuthenticator(CLUSTER, REGION, lambda: None).authenticate(good) is not None


def test_a_role_without_an_access_entry_needs_an_aws_auth_mapping(cluster: Cluster) -> None:
    iam, sts = cluster.cloud.client("iam"), cluster.cloud.client("sts")
    role = iam.create_role(RoleName="ops", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    keys = sts.assume_role(RoleArn=role, RoleSessionName="alice")["Credentials"]
    session = boto3.session.Session(
        aws_access_key_id=keys["AccessKeyId"],
        aws_secret_access_key=keys["SecretAccessKey"],
        aws_session_token=keys["SessionToken"],
        region_name=REGION,
    )
    token = presigned_token(CLUSTER, REGION, session)
    assert cluster.status_of(token) == 401
    mapping = f"- rolearn: {role}\n  username: ops:{{{{SessionName}}}}\n  groups: [ops-team]\n"
    k8s.CoreV1Api(cluster.admin).create_namespaced_config_map(
        "kube-system", {"metadata": {"name": "aws-auth"}, "data": {"mapRoles": mapping}}
    )
    assert cluster.status_of(token) == 403  # known now, as ops:alice, but granted nothing
    authenticated = EksTokenAuthenticator(
        CLUSTER, REGION, aws_auth_reader(cluster.server.store)
    ).authenticate(token)
    assert authenticated is not None and authenticated.name == "ops:alice"
    assert authenticated.groups == ("ops-team",)


def test_the_cluster_creator_applies_deploy_rbac_yaml(cluster: Cluster) -> None:
    """kubectl apply -f deploy/rbac.yaml, run by the IAM user who created the cluster (its EKS admin)."""
    operator = presigned_token(CLUSTER, REGION, boto3.session.Session(region_name=REGION))
    api = k8s.ApiClient(client_configuration(cluster.server.url, operator))
    apply_rbac(api)
    role = k8s.RbacAuthorizationV1Api(api).read_cluster_role(kubernetes_group("provisioner"))
    assert {"ec2nodeclasses/status"} in [set(rule.resources) for rule in role.rules]
    cluster.gateway().list_pending_pods()  # the functions are granted what it holds
