"""The pydantic models and the CRD rules in deploy/crds agree (issue 17): the same objects go to both.

Everything the CRDs refuse, the models refuse, so a manifest ``plan`` or ``validate`` accepts is one the API
server stores. The models refuse a little more: Karpenter's runtime validation (a requirement value that is
no label value, a requirement key a CEL rule does not cover), which the provisioner reports on the NodePool
as ``ValidationSucceeded=False`` instead. Those cases are listed here too, so the difference is deliberate.
"""

from __future__ import annotations

from typing import Any

import pytest
from serverless_karpenter.api.common import ResourceModel
from serverless_karpenter.api.ec2nodeclass import EC2NodeClass
from serverless_karpenter.api.errors import ManifestError
from serverless_karpenter.api.nodeoverlay import NodeOverlay
from serverless_karpenter.api.nodepool import NodePool
from serverless_karpenter_sim.kubeapi import crd_schema
from serverless_karpenter_sim.kubeapi.errors import ApiError
from serverless_karpenter_sim.kubeapi.kinds import kind_of

from tests.crd_cases import BASES, CEL_CASES, NODEPOOL, RESOURCES, SCHEMA_CASES, Case, merge

MODELS: dict[str, type[ResourceModel]] = {
    "NodePool": NodePool,
    "EC2NodeClass": EC2NodeClass,
    "NodeOverlay": NodeOverlay,
}


def crd_problems(kind: str, manifest: dict[str, Any]) -> list[str]:
    """The causes the API server's CRD validation gives (empty when it stores the object)."""
    try:
        crd_schema.admit(kind_of(*RESOURCES[kind]), manifest, None)
    except ApiError as error:
        assert error.code == 422
        return [f"{c['field']}: {c['message']}" for c in (error.details or {}).get("causes", [])]
    return []


def model_problem(kind: str, manifest: dict[str, Any]) -> str | None:
    try:
        MODELS[kind].from_manifest(manifest)
    except ManifestError as error:
        return str(error)
    return None


@pytest.mark.parametrize("kind", sorted(BASES))
def test_both_accept_the_valid_objects(kind: str) -> None:
    assert crd_problems(kind, BASES[kind]) == []
    assert model_problem(kind, BASES[kind]) is None


@pytest.mark.parametrize("case", CEL_CASES + SCHEMA_CASES, ids=lambda c: c.id)
def test_what_the_crd_refuses_the_model_refuses(case: Case) -> None:
    assert crd_problems(case.kind, case.manifest), "the CRD must refuse it"
    assert model_problem(case.kind, case.manifest) is not None, "the pydantic model must refuse it too"


def _requirement_values(values: list[str]) -> dict[str, Any]:
    requirement = {"key": "kubernetes.io/arch", "operator": "In", "values": values}
    return merge(NODEPOOL, {"spec": {"template": {"spec": {"requirements": [requirement]}}}})


# Karpenter's CRD leaves these to its runtime validation (the `values` pattern sits on the array, where
# kube-apiserver ignores it); the API server stores them, the provisioner skips the NodePool.
RUNTIME_ONLY = [
    pytest.param(_requirement_values(["amd64\n"]), "values", id="requirement value with a newline"),
    pytest.param(_requirement_values(["a" * 64]), "values", id="requirement value longer than 63"),
    pytest.param(
        merge(
            NODEPOOL, {"spec": {"template": {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}] * 2}}}}
        ),
        "duplicate taint",
        id="duplicate taint",
    ),
    # Karpenter's released CRDs stopped refusing the kubernetes.io and k8s.io label domains (v1.9); we
    # still refuse them at runtime, because our nodes' labels go through the kubelet's --node-labels, which
    # refuses those domains (docs/compat/core.md, Deviations).
    *(
        pytest.param(merge(NODEPOOL, patch), "is restricted", id=f"{where} in the {domain} domain")
        for domain in ("kubernetes.io", "k8s.io")
        for where, patch in (
            (
                "template label",
                {"spec": {"template": {"metadata": {"labels": {f"example.{domain}/team": "a"}}}}},
            ),
            (
                "requirement key",
                {
                    "spec": {
                        "template": {
                            "spec": {
                                "requirements": [{"key": f"example.{domain}/team", "operator": "Exists"}]
                            }
                        }
                    }
                },
            ),
        )
    ),
]


@pytest.mark.parametrize(("manifest", "named"), RUNTIME_ONLY)
def test_runtime_only_rules_are_the_models_alone(manifest: dict[str, Any], named: str) -> None:
    assert crd_problems("NodePool", manifest) == []
    problem = model_problem("NodePool", manifest)
    assert problem is not None and named in problem


@pytest.mark.parametrize(
    ("manifest", "field"),
    [
        (merge(NODEPOOL, {"spec": {"template": {"spec": {"expireAfter": "720h\n"}}}}), "expireAfter"),
        (merge(NODEPOOL, {"spec": {"template": {"metadata": {"labels": {"arch": "amd64\n"}}}}}), "labels"),
        (merge(NODEPOOL, {"spec": {"weight": 2**63}}), "weight"),
        (merge(BASES["EC2NodeClass"], {"spec": {"kubelet": {"maxPods": 2**63}}}), "maxPods"),
    ],
    ids=["duration with a newline", "label value with a newline", "weight past int64", "maxPods past int64"],
)
def test_go_semantics_whole_string_regexes_and_int64(manifest: dict[str, Any], field: str) -> None:
    kind = manifest["kind"]
    problems = crd_problems(kind, manifest)
    assert problems and any(field in p for p in problems)
    problem = model_problem(kind, manifest)
    assert problem is not None and field in problem
