"""A budget with maxUnavailable or a percentage expects its controllers' scale, as upstream's disruption
controller does: an evicted pod that is gone at once does not shrink what the budget protects (issue 17:
a drift pass evicted a whole node's worth of a ``maxUnavailable: 1`` workload, 9 Running fell to 6)."""

from __future__ import annotations

from typing import Any

import pytest
from serverless_karpenter.clock import ManualClock
from serverless_karpenter_sim.kubeapi import KubeApiServer
from serverless_karpenter_sim.kubeapi.errors import ApiError
from serverless_karpenter_sim.kubeapi.kinds import kind_of
from serverless_karpenter_sim.kubeapi.store import Result

PODS = kind_of("", "v1", "pods")
PDBS = kind_of("policy", "v1", "poddisruptionbudgets")
DEPLOYMENTS = kind_of("apps", "v1", "deployments")
REPLICASETS = kind_of("apps", "v1", "replicasets")


def _obj(result: Result) -> dict[str, Any]:
    return result if isinstance(result, dict) else result.obj


def _workload(store: Any, replicas: int, budget: dict[str, Any]) -> None:
    deployment = _obj(
        store.create(
            DEPLOYMENTS,
            "default",
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [{"name": "app", "image": "pause"}]},
                    },
                },
            },
        )
    )
    owner = {"kind": "Deployment", "name": "web", "uid": deployment["metadata"]["uid"], "controller": True}
    replicaset = _obj(
        store.create(
            REPLICASETS,
            "default",
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {"name": "web-1", "namespace": "default", "ownerReferences": [owner]},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [{"name": "app", "image": "pause"}]},
                    },
                },
            },
        )
    )
    rs_owner = {
        "kind": "ReplicaSet",
        "name": "web-1",
        "uid": replicaset["metadata"]["uid"],
        "controller": True,
    }
    for index in range(replicas):
        store.create(
            PODS,
            "default",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"web-{index}",
                    "namespace": "default",
                    "labels": {"app": "web"},
                    "ownerReferences": [rs_owner],
                },
                "spec": {
                    "nodeName": "n1",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "app", "image": "pause"}],
                },
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            },
        )
    store.create(
        PDBS,
        "default",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {**budget, "selector": {"matchLabels": {"app": "web"}}},
        },
    )


@pytest.mark.parametrize("budget", [{"maxUnavailable": 1}, {"minAvailable": "60%"}])
def test_a_pod_evicted_and_gone_at_once_does_not_let_the_next_eviction_through(
    budget: dict[str, Any],
) -> None:
    store = KubeApiServer(ManualClock()).store
    _workload(store, 3, budget)

    store.evict("default", "web-0", {"metadata": {"name": "web-0"}})  # gone at once: no grace
    with pytest.raises(ApiError) as refused:
        store.evict("default", "web-1", {"metadata": {"name": "web-1"}})

    assert refused.value.code == 429
    status = _obj(store.get(PDBS, "default", "web"))["status"]
    # The Deployment wants 3: one is missing, and the budget allows no more.
    assert (status["expectedPods"], status["currentHealthy"], status["desiredHealthy"]) == (3, 2, 2)
    assert store.audit.pdb_violations == 0


def test_an_integer_min_available_counts_pods() -> None:
    store = KubeApiServer(ManualClock()).store
    _workload(store, 3, {"minAvailable": 2})

    store.evict("default", "web-0", {"metadata": {"name": "web-0"}})
    status = _obj(store.get(PDBS, "default", "web"))["status"]

    assert (status["expectedPods"], status["desiredHealthy"]) == (2, 2)
