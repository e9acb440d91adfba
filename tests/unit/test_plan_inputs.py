"""Manifests before scheduling: pod validation as the API server does it, the kinds plan reads, NodeClaim
manifests as capacity records, and documents that are not objects."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from serverless_karpenter.api import labels as wk
from serverless_karpenter.api.errors import ManifestError
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter.scheduling.inputs import NotAnObject, flatten, nodeclaim_records, without_nulls
from serverless_karpenter.scheduling.manifest_validation import read_kind, validate
from serverless_karpenter.scheduling.pod_validation import pod_violations, workload_violations

from tests.builders import deployment, pod


def _pod(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", **pod("p", **spec)}


def _fields(violations: list[Any]) -> list[tuple[str, str]]:
    return [(v.field, v.rule) for v in violations]


def test_a_valid_pod_and_deployment_have_no_violations() -> None:
    spread = {"maxSkew": 1, "topologyKey": wk.ZONE, "whenUnsatisfiable": "ScheduleAnyway"}
    assert (
        pod_violations(_pod(topologySpreadConstraints=[spread], tolerations=[{"operator": "Exists"}])) == []
    )
    assert workload_violations(deployment("web", 0)) == []


@pytest.mark.parametrize(
    ("spec", "field", "rule"),
    [
        (
            {"tolerations": [{"key": "a", "operator": "Exists", "value": "x"}]},
            "spec.tolerations[0].value",
            "empty",
        ),
        ({"tolerations": [{"value": "x"}]}, "spec.tolerations[0].operator", "must be Exists"),
        (
            {
                "tolerations": [
                    {"key": "a", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}
                ]
            },
            "spec.tolerations[0].effect",
            "NoExecute",
        ),
        ({"tolerations": ["a"]}, "spec.tolerations[0]", "must be a mapping"),
        (
            {
                "topologySpreadConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": wk.ZONE,
                        "whenUnsatisfiable": "ScheduleAnyway",
                        "minDomains": 2,
                    }
                ]
            },
            "spec.topologySpreadConstraints[0].minDomains",
            "DoNotSchedule",
        ),
        (
            {
                "topologySpreadConstraints": [
                    {"maxSkew": True, "topologyKey": wk.ZONE, "whenUnsatisfiable": "DoNotSchedule"}
                ]
            },
            "spec.topologySpreadConstraints[0].maxSkew",
            "integer",
        ),
        ({"nodeSelector": {"zone": 1}}, "spec.nodeSelector[zone]", "must be a string"),
        (
            {
                "affinity": {
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]
                    }
                }
            },
            "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
            "is required",
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 0, "preference": {}}]
                    }
                }
            },
            "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
            "greater than or equal to 1",
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}
                    }
                }
            },
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
            "at least one",
        ),
        ({"overhead": {"cpu": "-1"}}, "spec.overhead.cpu", "greater than or equal to 0"),
    ],
)
def test_pod_rules_name_the_field(spec: dict[str, Any], field: str, rule: str) -> None:
    found = _fields(pod_violations(_pod(**spec)))
    assert any(f == field and rule in r for f, r in found), found


def test_container_names_are_unique_across_init_and_app_containers() -> None:
    body = _pod()
    body["spec"]["initContainers"] = [{"name": "app"}]
    assert ("spec.containers[0].name", "duplicate container name 'app'") in _fields(pod_violations(body))


def test_a_pod_may_have_only_a_generate_name() -> None:
    body = _pod()
    body["metadata"] = {"generateName": "web-", "namespace": "default"}
    assert pod_violations(body) == []
    body["metadata"] = {"namespace": "default"}
    assert _fields(pod_violations(body)) == [("metadata.name", "is required")]


def test_job_counts_are_non_negative_integers() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}}
    job["spec"] = {"parallelism": -1, "completions": "2", "template": deployment("x", 1)["spec"]["template"]}
    assert _fields(workload_violations(job)) == [
        ("spec.parallelism", "must be greater than or equal to 0 (got -1)"),
        ("spec.completions", "must be an integer (got '2')"),
    ]


def test_only_the_kinds_and_versions_plan_reads() -> None:
    assert read_kind("karpenter.sh/v1", "NodePool") and read_kind("apps/v1", "Deployment")
    assert read_kind("karpenter.sh/v1beta1", "NodePool")  # ours, old: parse_manifest says to convert it
    assert not read_kind("example.com/v1", "NodePool") and not read_kind(None, "NodePool")
    assert not read_kind("apps/v1beta1", "Deployment") and not read_kind("v1", "ConfigMap")
    with pytest.raises(ManifestError, match=r'Pod "default/p": spec.containers\[0\].resources.requests.cpu'):
        validate(_pod(containers=[{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]))


def test_documents_that_are_not_objects() -> None:
    assert flatten([None, {"kind": "List", "items": [{"kind": "Pod"}, None]}]) == [{"kind": "Pod"}]
    with pytest.raises(NotAnObject, match="document 2: not a Kubernetes object"):
        flatten([{"kind": "Pod"}, "text"])
    with pytest.raises(NotAnObject, match="items: must be a list"):
        flatten([{"kind": "PodList", "items": "x"}])


def test_nulls_are_dropped_as_the_api_server_stores_objects() -> None:
    assert without_nulls({"a": None, "b": [{"c": None, "d": 1}]}) == {"b": [{"d": 1}]}


def _claim(name: str, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {wk.NODEPOOL: "default"}},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": wk.ZONE, "operator": "In", "values": ["us-east-1a"]},
                {"key": "example.com/team", "operator": "In", "values": ["db"]},
            ],
            "taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}],
        },
        "status": status,
    }


def test_nodeclaim_manifests_become_records() -> None:
    launched = _claim("a", providerID="aws:///us-east-1a/i-0abc", allocatable={"cpu": "2", "pods": "10"})
    pending = _claim("b")
    deleting = copy.deepcopy(launched)
    deleting["metadata"]["name"] = "c"
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    joined = _claim("d", providerID="aws:///us-east-1a/i-0def", nodeName="ip-1")
    node = {"metadata": {"name": "ip-1"}, "spec": {"providerID": "aws:///us-east-1a/i-0def"}}
    daemonset = {
        "spec": {
            "template": {"spec": {"containers": [{"name": "d", "resources": {"requests": {"cpu": "100m"}}}]}}
        }
    }
    records = {
        r.name: r for r in nodeclaim_records([launched, pending, deleting, joined], [node], [daemonset])
    }
    assert {name: r.state for name, r in records.items()} == {
        "a": NodeClaimState.LAUNCHED,
        "b": NodeClaimState.PENDING,
        "c": NodeClaimState.TERMINATING,
        "d": NodeClaimState.REGISTERED,
    }
    a = records["a"]
    assert (a.nodepool, a.nodeclass, a.provider_id) == ("default", "default", "aws:///us-east-1a/i-0abc")
    assert a.expected_allocatable() == {"cpu": 2000, "pods": 10} and records["b"].expected_allocatable() == {}
    # Single-valued requirements become labels, as Karpenter writes them (well-known ones come at launch).
    assert a.labels["example.com/team"] == "db"
    # The DaemonSet does not tolerate the claim's taint: nothing reserved for it.
    assert a.daemon_overhead == {}


@pytest.mark.parametrize(
    ("spec", "rule"),
    [
        ({"minAvailable": "half"}, "percentage up to 100%"),
        ({"maxUnavailable": "150%"}, "percentage up to 100%"),
        ({"maxUnavailable": -1}, "non-negative integer"),
        ({"minAvailable": 1, "maxUnavailable": 1}, "cannot be both set"),
    ],
)
def test_pdb_budgets_as_the_api_server_checks_them(spec: dict[str, Any], rule: str) -> None:
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "b"}, "spec": spec}
    with pytest.raises(ManifestError, match=rule):
        validate(pdb)
    validate({**pdb, "spec": {"maxUnavailable": "0%"}})
