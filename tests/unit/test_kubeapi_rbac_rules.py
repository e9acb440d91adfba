"""The RBAC authorizer's matching, against policy stored in the simulated API server's store."""

from __future__ import annotations

from typing import Any

import pytest
from serverless_karpenter.clock import ManualClock
from serverless_karpenter_sim.kubeapi import KubeApiServer
from serverless_karpenter_sim.kubeapi.errors import ApiError
from serverless_karpenter_sim.kubeapi.kinds import kind_of
from serverless_karpenter_sim.kubeapi.rbac import Attributes, UserInfo, rule_allows

RBAC = "rbac.authorization.k8s.io"
ALICE = UserInfo("alice", ("team-a", "system:authenticated"))


def request(verb: str, resource: str, *, group: str = "", namespace: str = "", name: str = "") -> Attributes:
    plural, _, sub = resource.partition("/")
    return Attributes(ALICE, verb, True, group, plural, sub, namespace, name)


@pytest.mark.parametrize(
    ("rule", "attributes", "allowed"),
    [
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}, request("list", "pods"), True),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}, request("watch", "pods"), False),
        ({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, request("delete", "nodes"), True),
        # A subresource is a resource of its own: the parent's rule grants nothing on it.
        (
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]},
            request("create", "pods/eviction"),
            False,
        ),
        (
            {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
            request("create", "pods"),
            False,
        ),
        (
            {"apiGroups": ["karpenter.k8s.aws"], "resources": ["*/status"], "verbs": ["patch"]},
            request("patch", "ec2nodeclasses/status", group="karpenter.k8s.aws", name="default"),
            True,
        ),
        (
            {"apiGroups": ["karpenter.sh"], "resources": ["ec2nodeclasses/status"], "verbs": ["patch"]},
            request("patch", "ec2nodeclasses/status", group="karpenter.k8s.aws", name="default"),
            False,
        ),
        # resourceNames: only the named objects, so never a request without a name.
        (
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"], "resourceNames": ["n1"]},
            request("get", "nodes", name="n1"),
            True,
        ),
        (
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"], "resourceNames": ["n1"]},
            request("get", "nodes", name="n2"),
            False,
        ),
        (
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"], "resourceNames": ["n1"]},
            request("list", "nodes"),
            False,
        ),
        (
            {"nonResourceURLs": ["/apis/*"], "verbs": ["get"]},
            Attributes(ALICE, "get", False, path="/apis/x"),
            True,
        ),
        (
            {"nonResourceURLs": ["/apis"], "verbs": ["get"]},
            Attributes(ALICE, "get", False, path="/apis/x"),
            False,
        ),
        ({"nonResourceURLs": ["/apis/*"], "verbs": ["get"]}, request("get", "pods"), False),
    ],
)
def test_rule_matching(rule: dict[str, Any], attributes: Attributes, allowed: bool) -> None:
    assert rule_allows(rule, attributes) is allowed


def put(server: KubeApiServer, plural: str, obj: dict[str, Any], namespace: str | None = None) -> None:
    kind = kind_of(RBAC, "v1", plural)
    server.store.create(kind, namespace, {"apiVersion": f"{RBAC}/v1", "kind": kind.kind, **obj})


def binding(name: str, role_kind: str, role: str, subject: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": RBAC, "kind": role_kind, "name": role},
        "subjects": [subject],
    }


def allowed(server: KubeApiServer, attributes: Attributes) -> bool:
    try:
        server.access.authorize(attributes)
    except ApiError as err:
        assert err.code == 403
        return False
    return True


READ_PODS = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]


def test_bindings_grant_by_user_group_and_scope() -> None:
    server = KubeApiServer(ManualClock())
    assert not allowed(server, request("list", "pods", namespace="default"))
    put(server, "clusterroles", {"metadata": {"name": "pod-reader"}, "rules": READ_PODS})
    # A RoleBinding to a ClusterRole grants it in its own namespace only.
    put(
        server,
        "rolebindings",
        binding("a", "ClusterRole", "pod-reader", {"kind": "Group", "name": "team-a"}),
        "default",
    )
    assert allowed(server, request("list", "pods", namespace="default"))
    assert not allowed(server, request("list", "pods", namespace="kube-public"))
    assert not allowed(server, request("list", "pods"))
    # A Role in a namespace, bound to the user by name.
    put(server, "roles", {"metadata": {"name": "r"}, "rules": READ_PODS}, "kube-public")
    put(server, "rolebindings", binding("b", "Role", "r", {"kind": "User", "name": "alice"}), "kube-public")
    assert allowed(server, request("get", "pods", namespace="kube-public", name="p"))
    # A binding to a role that does not exist grants nothing.
    put(
        server,
        "clusterrolebindings",
        binding("c", "ClusterRole", "missing", {"kind": "User", "name": "alice"}),
    )
    assert not allowed(server, request("list", "pods"))
    put(
        server,
        "clusterrolebindings",
        binding("d", "ClusterRole", "pod-reader", {"kind": "User", "name": "alice"}),
    )
    assert allowed(server, request("list", "pods"))
    # Another user gets nothing from alice's bindings; system:masters needs none.
    bob = Attributes(UserInfo("bob", ("system:authenticated",)), "list", True, "", "pods")
    assert not allowed(server, bob)
    assert allowed(server, Attributes(UserInfo("root", ("system:masters",)), "delete", True, "", "nodes"))


def test_service_account_subjects() -> None:
    server = KubeApiServer(ManualClock())
    put(server, "clusterroles", {"metadata": {"name": "pod-reader"}, "rules": READ_PODS})
    subject = {"kind": "ServiceAccount", "name": "karpenter", "namespace": "kube-system"}
    put(server, "clusterrolebindings", binding("sa", "ClusterRole", "pod-reader", subject))
    account = UserInfo("system:serviceaccount:kube-system:karpenter", ("system:serviceaccounts",))
    assert allowed(server, Attributes(account, "list", True, "", "pods"))
    other = UserInfo("system:serviceaccount:default:karpenter", ("system:serviceaccounts",))
    assert not allowed(server, Attributes(other, "list", True, "", "pods"))


def test_discovery_is_open_to_every_authenticated_user() -> None:
    server = KubeApiServer(ManualClock())
    for path in ("/api", "/apis", "/apis/karpenter.sh/v1", "/version", "/openapi/v3"):
        assert allowed(server, Attributes(ALICE, "get", False, path=path))
    assert not allowed(server, Attributes(ALICE, "get", False, path="/metrics"))
    assert not allowed(server, Attributes(UserInfo("anonymous", ()), "get", False, path="/apis"))


def test_forbidden_status_is_worded_as_kube_apiserver_words_it() -> None:
    server = KubeApiServer(ManualClock())
    user = UserInfo("arn:aws:sts::123456789012:assumed-role/r/s", ("serverless-karpenter",))
    with pytest.raises(ApiError) as err:
        server.access.authorize(Attributes(user, "create", True, "", "pods", "eviction", "default", "web-1"))
    assert err.value.status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "web-1" is forbidden: User "arn:aws:sts::123456789012:assumed-role/r/s" cannot '
        'create resource "pods/eviction" in API group "" in the namespace "default"',
        "reason": "Forbidden",
        "details": {"name": "web-1", "kind": "pods"},
        "code": 403,
    }
    with pytest.raises(ApiError) as err:
        server.access.authorize(Attributes(user, "list", True, "karpenter.k8s.aws", "ec2nodeclasses"))
    assert err.value.message == (
        'ec2nodeclasses.karpenter.k8s.aws is forbidden: User "arn:aws:sts::123456789012:assumed-role/r/s" '
        'cannot list resource "ec2nodeclasses" in API group "karpenter.k8s.aws" at the cluster scope'
    )
    assert err.value.details == {"kind": "ec2nodeclasses", "group": "karpenter.k8s.aws"}
    with pytest.raises(ApiError) as err:
        server.access.authorize(Attributes(user, "get", False, path="/metrics"))
    assert (
        err.value.message
        == 'forbidden: User "arn:aws:sts::123456789012:assumed-role/r/s" cannot get path "/metrics"'
    )
