"""Valid Karpenter objects, and one invalid variant per rule of our CRDs (deploy/crds): what the simulated
API server must refuse with 422, naming the field, and what the pydantic models must refuse too.

Each case is a JSON merge patch (RFC 7386; None deletes, a list replaces the whole list) on a valid base.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

NODEPOOL: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": "default"},
    "spec": {
        "weight": 10,
        "template": {
            "metadata": {"labels": {"team": "ml"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "c5"]},
                    {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["2"]},
                ],
                "taints": [{"key": "example.com/gpu", "effect": "NoSchedule"}],
                "expireAfter": "720h",
            },
        },
        "limits": {"cpu": "1000", "memory": "1000Gi"},
        "disruption": {
            "consolidationPolicy": "WhenEmpty",
            "consolidateAfter": "30s",
            "budgets": [{"nodes": "20%"}, {"nodes": "0", "schedule": "@daily", "duration": "10m"}],
        },
    },
}

EC2NODECLASS: dict[str, Any] = {
    "apiVersion": "karpenter.k8s.aws/v1",
    "kind": "EC2NodeClass",
    "metadata": {"name": "default"},
    "spec": {
        "role": "KarpenterNodeRole-demo",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        "tags": {"team": "ml"},
        "kubelet": {"maxPods": 110},
        "blockDeviceMappings": [
            {"deviceName": "/dev/xvda", "rootVolume": True, "ebs": {"volumeSize": "100Gi"}}
        ],
    },
}

NODEOVERLAY: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1alpha1",
    "kind": "NodeOverlay",
    "metadata": {"name": "discount"},
    "spec": {
        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
        "priceAdjustment": "-10%",
        "weight": 10,
    },
}

BASES = {"NodePool": NODEPOOL, "EC2NodeClass": EC2NODECLASS, "NodeOverlay": NODEOVERLAY}
RESOURCES = {
    "NodePool": ("karpenter.sh", "v1", "nodepools"),
    "EC2NodeClass": ("karpenter.k8s.aws", "v1", "ec2nodeclasses"),
    "NodeOverlay": ("karpenter.sh", "v1alpha1", "nodeoverlays"),
}


def merge(base: Any, patch: Any) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = merge(base.get(key), value)
        return merged
    return copy.deepcopy(patch)


@dataclass(frozen=True)
class Case:
    kind: str
    patch: dict[str, Any]
    field: str  # the cause's field path
    message: str  # in the cause's message

    @property
    def manifest(self) -> dict[str, Any]:
        return merge(BASES[self.kind], self.patch)

    @property
    def id(self) -> str:
        return f"{self.kind}:{self.field}:{self.message[:48]}"


def template(**spec: Any) -> dict[str, Any]:
    return {"spec": {"template": {"spec": spec}}}


def labels(labels: dict[str, str]) -> dict[str, Any]:
    return {"spec": {"template": {"metadata": {"labels": labels}}}}


def requirement(
    key: str, operator: str = "Exists", values: list[str] | None = None, **more: Any
) -> dict[str, Any]:
    requirement: dict[str, Any] = {"key": key, "operator": operator, **more}
    if values is not None:
        requirement["values"] = values
    return requirement


from tests.crd_cases.ec2nodeclass import EC2NODECLASS_CEL, EC2NODECLASS_SCHEMA  # noqa: E402
from tests.crd_cases.nodeoverlay import NODEOVERLAY_CEL, NODEOVERLAY_SCHEMA  # noqa: E402
from tests.crd_cases.nodepool import NODEPOOL_CEL, NODEPOOL_SCHEMA  # noqa: E402

CEL_CASES = NODEPOOL_CEL + EC2NODECLASS_CEL + NODEOVERLAY_CEL
SCHEMA_CASES = NODEPOOL_SCHEMA + EC2NODECLASS_SCHEMA + NODEOVERLAY_SCHEMA
