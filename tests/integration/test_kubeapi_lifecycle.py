"""Finalizers, graceful pod deletion, pods/binding and pods/eviction with PodDisruptionBudgets."""

# The client declares every model field Optional and custom objects as `object`; a None or a non-dict
# there fails the test anyway, so these checks would only add noise.
# mypy: disable-error-code="union-attr,index"

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from serverless_karpenter.clock import ManualClock
from serverless_karpenter_sim.kubeapi import KubeApiServer

pytestmark = pytest.mark.integration


def status_of(err: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(err.body or "{}")
    return body


NODECLAIMS = ("karpenter.sh", "v1", "nodeclaims")
REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."


@dataclass
class Kube:
    server: KubeApiServer
    clock: ManualClock
    core: client.CoreV1Api
    policy: client.PolicyV1Api
    custom: client.CustomObjectsApi


@pytest.fixture
def kube() -> Iterator[Kube]:
    clock = ManualClock()
    server = KubeApiServer(clock)
    server.start()
    api = client.ApiClient(server.client_configuration())
    try:
        yield Kube(
            server, clock, client.CoreV1Api(api), client.PolicyV1Api(api), client.CustomObjectsApi(api)
        )
    finally:
        api.close()
        server.stop()


def add_pod(
    kube: Kube,
    name: str,
    *,
    node: str | None = "n1",
    phase: str = "Running",
    ready: bool = True,
    labels: dict[str, str] | None = None,
    grace: int | None = None,
) -> client.V1Pod:
    conditions = [client.V1PodCondition(type="Ready", status="True" if ready else "False")]
    return kube.core.create_namespaced_pod(
        "default",
        client.V1Pod(
            metadata=client.V1ObjectMeta(name=name, labels=labels if labels is not None else {"app": "web"}),
            spec=client.V1PodSpec(
                node_name=node,
                termination_grace_period_seconds=grace,
                containers=[client.V1Container(name="c", image="i")],
            ),
            status=client.V1PodStatus(phase=phase, conditions=conditions),
        ),
    )


def add_pdb(
    kube: Kube,
    name: str = "web",
    *,
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
    selector: dict[str, str] | None = None,
) -> None:
    kube.policy.create_namespaced_pod_disruption_budget(
        "default",
        client.V1PodDisruptionBudget(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1PodDisruptionBudgetSpec(
                min_available=min_available,
                max_unavailable=max_unavailable,
                selector=client.V1LabelSelector(match_labels=selector or {"app": "web"}),
            ),
        ),
    )


def evict(kube: Kube, name: str, grace: int | None = None) -> None:
    options = client.V1DeleteOptions(grace_period_seconds=grace) if grace is not None else None
    kube.core.create_namespaced_pod_eviction(
        name,
        "default",
        client.V1Eviction(
            metadata=client.V1ObjectMeta(name=name, namespace="default"), delete_options=options
        ),
    )


def gone(kube: Kube, name: str) -> bool:
    try:
        kube.core.read_namespaced_pod(name, "default")
    except ApiException as err:
        assert err.status == 404
        return True
    return False


# --- finalizers -------------------------------------------------------------------------------------------


def test_finalizers_hold_a_deleted_object_until_emptied(kube: Kube) -> None:
    kube.clock.advance(10)
    kube.core.create_namespaced_config_map(
        "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c", finalizers=["example.com/hold"]))
    )
    kube.core.delete_namespaced_config_map("c", "default")
    held = kube.core.read_namespaced_config_map("c", "default")
    assert held.metadata.deletion_timestamp == kube.clock.now()
    assert held.metadata.deletion_grace_period_seconds == 0
    assert held.metadata.generation == 2

    kube.clock.advance(5)
    kube.core.delete_namespaced_config_map("c", "default")  # deleting again changes nothing
    assert (
        kube.core.read_namespaced_config_map("c", "default").metadata.deletion_timestamp
        == held.metadata.deletion_timestamp
    )

    with pytest.raises(ApiException) as err:
        kube.core.patch_namespaced_config_map(
            "c", "default", {"metadata": {"finalizers": ["example.com/more"]}}
        )
    assert err.value.status == 422
    assert "no new finalizers can be added if the object is being deleted" in status_of(err.value)["message"]

    kube.core.patch_namespaced_config_map("c", "default", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as err:
        kube.core.read_namespaced_config_map("c", "default")
    assert err.value.status == 404


def test_nodeclaim_termination_finalizer(kube: Kube) -> None:
    kube.custom.create_cluster_custom_object(
        *NODECLAIMS,
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": "default-x1", "finalizers": ["karpenter.sh/termination"]},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
            },
        },
    )
    kube.custom.delete_cluster_custom_object(*NODECLAIMS, "default-x1")
    claim = kube.custom.get_cluster_custom_object(*NODECLAIMS, "default-x1")
    assert claim["metadata"]["deletionTimestamp"] == "2026-01-01T00:00:00Z"
    # the lambda takes the finalizer off with an optimistic merge patch
    kube.custom.patch_cluster_custom_object(
        *NODECLAIMS,
        "default-x1",
        {"metadata": {"finalizers": None, "resourceVersion": claim["metadata"]["resourceVersion"]}},
    )
    with pytest.raises(ApiException) as err:
        kube.custom.get_cluster_custom_object(*NODECLAIMS, "default-x1")
    assert err.value.status == 404


def test_node_deletion_with_finalizer_and_update(kube: Kube) -> None:
    kube.core.create_node(
        client.V1Node(metadata=client.V1ObjectMeta(name="n1", finalizers=["karpenter.sh/termination"]))
    )
    kube.core.delete_node("n1")
    node = kube.core.read_node("n1")
    assert node.metadata.deletion_timestamp is not None
    node.metadata.finalizers = []
    kube.core.replace_node("n1", node)
    assert kube.core.list_node().items == []


# --- graceful pod deletion ----------------------------------------------------------------------------------


def test_bound_pod_deletes_gracefully_and_the_kubelet_finishes(kube: Kube) -> None:
    add_pod(kube, "p")
    start = kube.clock.now()
    deleting = kube.core.delete_namespaced_pod("p", "default")
    assert deleting.metadata.deletion_timestamp == start + timedelta(seconds=30)
    assert deleting.metadata.deletion_grace_period_seconds == 30

    kube.clock.advance(3)
    kube.core.delete_namespaced_pod("p", "default", grace_period_seconds=60)  # may not lengthen
    assert kube.core.read_namespaced_pod("p", "default").metadata.deletion_grace_period_seconds == 30
    kube.core.delete_namespaced_pod("p", "default", body=client.V1DeleteOptions(grace_period_seconds=10))
    shortened = kube.core.read_namespaced_pod("p", "default")
    assert shortened.metadata.deletion_grace_period_seconds == 10
    assert shortened.metadata.deletion_timestamp == start + timedelta(seconds=10)

    kube.core.delete_namespaced_pod("p", "default", grace_period_seconds=0)  # the kubelet's final delete
    assert gone(kube, "p")


def test_pod_grace_comes_from_the_spec_and_the_request(kube: Kube) -> None:
    add_pod(kube, "short", grace=5)
    assert kube.core.delete_namespaced_pod("short", "default").metadata.deletion_grace_period_seconds == 5
    add_pod(kube, "asked")
    deleting = kube.core.delete_namespaced_pod(
        "asked", "default", body=client.V1DeleteOptions(grace_period_seconds=7)
    )
    assert deleting.metadata.deletion_grace_period_seconds == 7


def test_unbound_terminal_or_zero_grace_pods_go_at_once(kube: Kube) -> None:
    add_pod(kube, "pending", node=None, phase="Pending", ready=False)
    kube.core.delete_namespaced_pod("pending", "default")
    assert gone(kube, "pending")
    add_pod(kube, "done", phase="Succeeded", ready=False)
    kube.core.delete_namespaced_pod("done", "default")
    assert gone(kube, "done")
    add_pod(kube, "now")
    kube.core.delete_namespaced_pod("now", "default", grace_period_seconds=0)
    assert gone(kube, "now")


def test_pod_finalizer_keeps_a_force_deleted_pod(kube: Kube) -> None:
    kube.core.create_namespaced_pod(
        "default",
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="p", finalizers=["example.com/wait"]),
            spec=client.V1PodSpec(node_name="n1", containers=[client.V1Container(name="c", image="i")]),
        ),
    )
    kube.core.delete_namespaced_pod("p", "default")  # graceful: 30 s
    kube.core.patch_namespaced_pod(
        "p", "default", {"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/wait"]}}
    )
    assert not gone(kube, "p")  # still within its grace period
    kube.core.delete_namespaced_pod("p", "default", grace_period_seconds=0)
    assert gone(kube, "p")


def test_delete_preconditions(kube: Kube) -> None:
    created = add_pod(kube, "p", node=None, phase="Pending")
    with pytest.raises(ApiException) as err:
        kube.core.delete_namespaced_pod(
            "p",
            "default",
            body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="someone-else")),
        )
    assert err.value.status == 409
    kube.core.delete_namespaced_pod(
        "p",
        "default",
        body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=created.metadata.uid)),
    )
    assert gone(kube, "p")


# --- pods/binding -------------------------------------------------------------------------------------------


def test_binding_assigns_a_node_once(kube: Kube) -> None:
    add_pod(kube, "p", node=None, phase="Pending", ready=False)
    binding = client.V1Binding(
        metadata=client.V1ObjectMeta(name="p"), target=client.V1ObjectReference(kind="Node", name="n1")
    )
    answer = kube.core.create_namespaced_pod_binding("p", "default", binding)
    assert answer.target.name == "n1"
    bound = kube.core.read_namespaced_pod("p", "default")
    assert bound.spec.node_name == "n1"
    assert {c.type: c.status for c in bound.status.conditions}["PodScheduled"] == "True"

    with pytest.raises(ApiException) as err:
        kube.core.create_namespaced_pod_binding("p", "default", binding)
    assert err.value.status == 409
    assert "already assigned to node" in status_of(err.value)["message"]


def test_bindings_collection_and_missing_pod(kube: Kube) -> None:
    add_pod(kube, "p", node=None, phase="Pending", ready=False)
    kube.core.create_namespaced_binding(
        "default",
        client.V1Binding(
            metadata=client.V1ObjectMeta(name="p"), target=client.V1ObjectReference(kind="Node", name="n2")
        ),
    )
    assert kube.core.read_namespaced_pod("p", "default").spec.node_name == "n2"
    with pytest.raises(ApiException) as err:
        kube.core.create_namespaced_binding(
            "default",
            client.V1Binding(
                metadata=client.V1ObjectMeta(name="ghost"),
                target=client.V1ObjectReference(kind="Node", name="n2"),
            ),
        )
    assert err.value.status == 404


# --- pods/eviction and PodDisruptionBudgets -----------------------------------------------------------------


def test_eviction_without_a_budget_deletes_gracefully(kube: Kube) -> None:
    add_pod(kube, "p")
    evict(kube, "p")
    evicted = kube.core.read_namespaced_pod("p", "default")
    assert evicted.metadata.deletion_timestamp == kube.clock.now() + timedelta(seconds=30)
    assert {c.type: c.reason for c in evicted.status.conditions}[
        "DisruptionTarget"
    ] == "EvictionByEvictionAPI"
    assert kube.server.audit.evictions_allowed == 1 and kube.server.audit.evictions_refused == 0

    add_pod(kube, "q")
    evict(kube, "q", grace=0)
    assert gone(kube, "q")

    with pytest.raises(ApiException) as err:
        evict(kube, "ghost")
    assert err.value.status == 404


def test_min_available_budget(kube: Kube) -> None:
    for i in range(3):
        add_pod(kube, f"web-{i}")
    add_pdb(kube, min_available=2)
    status = kube.policy.read_namespaced_pod_disruption_budget("web", "default").status
    assert (
        status.current_healthy,
        status.desired_healthy,
        status.disruptions_allowed,
        status.expected_pods,
    ) == (3, 2, 1, 3)

    evict(kube, "web-0")
    with pytest.raises(ApiException) as err:
        evict(kube, "web-1")
    assert err.value.status == 429
    body = status_of(err.value)
    assert body["reason"] == "TooManyRequests" and body["message"] == REFUSED
    assert (
        body["details"]["causes"][0]["message"] == "The disruption budget web needs 2 healthy pods and has 2 "
        "currently"
    )
    assert not gone(kube, "web-1")

    status = kube.policy.read_namespaced_pod_disruption_budget("web", "default").status
    assert (status.current_healthy, status.desired_healthy, status.disruptions_allowed) == (2, 2, 0)
    assert kube.server.audit.evictions_allowed == 1 and kube.server.audit.evictions_refused == 1
    assert kube.server.audit.pdb_violations == 0

    # once the evicted pod is replaced by a healthy one the budget has room again
    kube.core.delete_namespaced_pod("web-0", "default", grace_period_seconds=0)
    add_pod(kube, "web-3")
    evict(kube, "web-1")


def test_max_unavailable_percent_rounds_up(kube: Kube) -> None:
    for i in range(3):
        add_pod(kube, f"web-{i}")
    add_pdb(kube, max_unavailable="34%")  # ceil(3 * 0.34) = 2 may be unavailable, so 1 must stay healthy
    status = kube.policy.list_namespaced_pod_disruption_budget("default").items[0].status
    assert (status.desired_healthy, status.disruptions_allowed) == (1, 2)
    evict(kube, "web-0")
    evict(kube, "web-1")
    with pytest.raises(ApiException) as err:
        evict(kube, "web-2")
    assert err.value.status == 429


def test_max_unavailable_zero_blocks_every_healthy_pod(kube: Kube) -> None:
    add_pod(kube, "web-0")
    add_pdb(kube, max_unavailable=0)
    with pytest.raises(ApiException) as err:
        evict(kube, "web-0")
    assert err.value.status == 429


def test_min_available_percent(kube: Kube) -> None:
    for i in range(4):
        add_pod(kube, f"web-{i}")
    add_pdb(kube, min_available="50%")
    evict(kube, "web-0")
    evict(kube, "web-1")
    with pytest.raises(ApiException):
        evict(kube, "web-2")


def test_unhealthy_pods_evict_only_while_the_budget_holds(kube: Kube) -> None:
    add_pod(kube, "web-0")
    add_pod(kube, "web-1")
    add_pod(kube, "sick", ready=False)
    add_pdb(kube, min_available=2)
    evict(kube, "sick")  # the budget is met (2 healthy >= 2) so an unready pod may go
    add_pod(kube, "sick-2", ready=False)
    kube.core.delete_namespaced_pod("web-1", "default", grace_period_seconds=0)
    with pytest.raises(ApiException) as err:
        evict(kube, "sick-2")  # 1 healthy < 2 desired: refused like a healthy pod would be
    assert err.value.status == 429


def test_always_allow_policy_lets_unhealthy_pods_go(kube: Kube) -> None:
    add_pod(kube, "sick", ready=False)
    kube.policy.create_namespaced_pod_disruption_budget(
        "default",
        client.V1PodDisruptionBudget(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1PodDisruptionBudgetSpec(
                min_available=5,
                unhealthy_pod_eviction_policy="AlwaysAllow",
                selector=client.V1LabelSelector(match_labels={"app": "web"}),
            ),
        ),
    )
    evict(kube, "sick")
    # Evicted, though 0 of 5 pods are healthy: the unready pod is deleted gracefully, with no breach.
    evicted = kube.core.read_namespaced_pod("sick", "default")
    assert evicted.metadata.deletion_timestamp == kube.clock.now() + timedelta(seconds=30)
    assert kube.server.audit.pdb_violations == 0


def test_if_healthy_budget_policy_keeps_unhealthy_pods_while_the_budget_is_short(kube: Kube) -> None:
    # The default policy (IfHealthyBudget) the test above overrides: the same eviction is refused.
    add_pod(kube, "sick", ready=False)
    add_pdb(kube, min_available=5)
    with pytest.raises(ApiException) as err:
        evict(kube, "sick")
    assert err.value.status == 429
    assert kube.core.read_namespaced_pod("sick", "default").metadata.deletion_timestamp is None


def test_pending_pods_bypass_budgets(kube: Kube) -> None:
    add_pod(kube, "waiting", node=None, phase="Pending", ready=False)
    add_pdb(kube, min_available=10)
    evict(kube, "waiting")
    assert gone(kube, "waiting")


def test_a_pod_under_two_budgets_cannot_be_evicted(kube: Kube) -> None:
    add_pod(kube, "web-0", labels={"app": "web", "team": "a"})
    add_pdb(kube, "by-app", max_unavailable=1, selector={"app": "web"})
    add_pdb(kube, "by-team", max_unavailable=1, selector={"team": "a"})
    with pytest.raises(ApiException) as err:
        evict(kube, "web-0")
    # upstream answers 500 here, not 429: the eviction subresource does not support overlapping budgets
    assert err.value.status == 500
    assert "more than one PodDisruptionBudget" in status_of(err.value)["message"]
    assert kube.server.audit.evictions_refused == 1


def test_budgets_only_cover_matching_pods(kube: Kube) -> None:
    add_pod(kube, "other", labels={"app": "other"})
    add_pod(kube, "web-0")
    add_pdb(kube, min_available=1)
    evict(kube, "other")  # no budget selects it: evicted although the budget has no room
    assert kube.core.read_namespaced_pod("other", "default").metadata.deletion_timestamp is not None
    with pytest.raises(ApiException) as err:
        evict(kube, "web-0")  # the budget's own pod: 1 healthy of 1 required
    assert err.value.status == 429


def test_direct_deletes_that_break_a_budget_are_audited(kube: Kube) -> None:
    add_pod(kube, "web-0")
    add_pod(kube, "web-1")
    add_pdb(kube, min_available=1)
    kube.core.delete_namespaced_pod("web-0", "default")  # 2 -> 1 healthy: still fine
    assert kube.server.audit.pdb_violations == 0
    kube.core.delete_namespaced_pod("web-1", "default")  # 1 -> 0 healthy with 1 desired
    audit = kube.server.audit
    assert audit.pdb_violations == 1
    violation = audit.violations[0]
    assert (violation.budget, violation.pod, violation.via) == ("web", "web-1", "delete")
    assert (violation.healthy_before, violation.healthy_after, violation.desired_healthy) == (1, 0, 1)
    kube.core.delete_namespaced_pod("web-1", "default", grace_period_seconds=0)  # already counted
    assert audit.pdb_violations == 1


def test_deleting_unready_pods_is_not_a_violation(kube: Kube) -> None:
    add_pod(kube, "sick", ready=False)
    add_pdb(kube, min_available=1)
    kube.core.delete_namespaced_pod("sick", "default")
    assert kube.server.audit.pdb_violations == 0
