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


def _template(**spec: Any) -> dict[str, Any]:
    return {"spec": {"template": {"spec": spec}}}


def _labels(labels: dict[str, str]) -> dict[str, Any]:
    return {"spec": {"template": {"metadata": {"labels": labels}}}}


def _requirement(
    key: str, operator: str = "Exists", values: list[str] | None = None, **more: Any
) -> dict[str, Any]:
    requirement: dict[str, Any] = {"key": key, "operator": operator, **more}
    if values is not None:
        requirement["values"] = values
    return requirement


_REQS = "spec.template.spec.requirements"
_KEY = f"{_REQS}[0].key"
_LABELS = "spec.template.metadata.labels"

NODEPOOL_CEL = [
    Case(
        "NodePool",
        {"spec": {"disruption": {"budgets": [{"nodes": "1", "schedule": "@daily"}]}}},
        "spec.disruption.budgets",
        "'schedule' must be set with 'duration'",
    ),
    Case(
        "NodePool",
        _labels({"kubernetes.io/team": "a"}),
        _LABELS,
        'label domain "kubernetes.io" is restricted',
    ),
    Case("NodePool", _labels({"example.k8s.io/team": "a"}), _LABELS, 'label domain "k8s.io" is restricted'),
    Case(
        "NodePool", _labels({"karpenter.sh/team": "a"}), _LABELS, 'label domain "karpenter.sh" is restricted'
    ),
    Case(
        "NodePool",
        _labels({"karpenter.sh/nodepool": "a"}),
        _LABELS,
        'label "karpenter.sh/nodepool" is restricted',
    ),
    Case(
        "NodePool",
        _labels({"kubernetes.io/hostname": "a"}),
        _LABELS,
        'label "kubernetes.io/hostname" is restricted',
    ),
    Case(
        "NodePool",
        _template(nodeClassRef={"group": "", "kind": "EC2NodeClass", "name": "default"}),
        "spec.template.spec.nodeClassRef.group",
        "group may not be empty",
    ),
    Case(
        "NodePool",
        _template(nodeClassRef={"group": "karpenter.k8s.aws", "kind": "", "name": "default"}),
        "spec.template.spec.nodeClassRef.kind",
        "kind may not be empty",
    ),
    Case(
        "NodePool",
        _template(nodeClassRef={"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": ""}),
        "spec.template.spec.nodeClassRef.name",
        "name may not be empty",
    ),
    Case(
        "NodePool",
        _template(requirements=[_requirement("kubernetes.io/team")]),
        _KEY,
        'label domain "kubernetes.io" is restricted',
    ),
    Case(
        "NodePool",
        _template(requirements=[_requirement("example.k8s.io/team")]),
        _KEY,
        'label domain "k8s.io" is restricted',
    ),
    Case(
        "NodePool",
        _template(requirements=[_requirement("karpenter.sh/team")]),
        _KEY,
        'label domain "karpenter.sh" is restricted',
    ),
    Case(
        "NodePool",
        _template(requirements=[_requirement("karpenter.sh/nodepool", "In", ["a"])]),
        _KEY,
        'label "karpenter.sh/nodepool" is restricted',
    ),
    Case(
        "NodePool",
        _template(requirements=[_requirement("kubernetes.io/hostname")]),
        _KEY,
        'label "kubernetes.io/hostname" is restricted',
    ),
    Case(
        "NodePool",
        _template(requirements=[_requirement("kubernetes.io/arch", "In", [])]),
        _REQS,
        "requirements with operator 'In' must have a value defined",
    ),
    Case(
        "NodePool",
        _template(requirements=[_requirement("karpenter.k8s.aws/instance-cpu", "Gt", ["4", "8"])]),
        _REQS,
        "requirements operator 'Gt' or 'Lt' must have a single positive integer value",
    ),
    Case(
        "NodePool",
        _template(requirements=[_requirement("karpenter.k8s.aws/instance-cpu", "Lt", ["-1"])]),
        _REQS,
        "requirements operator 'Gt' or 'Lt' must have a single positive integer value",
    ),
    Case(
        "NodePool",
        _template(requirements=[_requirement("karpenter.k8s.aws/instance-cpu", "Gt", ["abc"])]),
        _REQS,
        "evaluating rule",
    ),
    Case(
        "NodePool",
        _template(requirements=[_requirement("kubernetes.io/arch", "In", ["amd64"], minValues=2)]),
        _REQS,
        "requirements with 'minValues' must have at least that many values specified",
    ),
]

# The issue's found defect: each of these used to be stored.
NODEPOOL_SCHEMA = [
    Case(
        "NodePool",
        _template(requirements=[_requirement("kubernetes.io/arch", "Foo", ["amd64"])]),
        f"{_REQS}[0].operator",
        'Unsupported value: "Foo"',
    ),
    Case("NodePool", {"spec": {"weight": 500}}, "spec.weight", "should be less than or equal to 100"),
    Case("NodePool", {"spec": {"weight": 0}}, "spec.weight", "should be greater than or equal to 1"),
    Case("NodePool", {"spec": {"weight": 2**63}}, "spec.weight", "must be of type integer"),
    Case("NodePool", _template(expireAfter="720h\n"), "spec.template.spec.expireAfter", "should match"),
    Case("NodePool", _template(expireAfter="1d"), "spec.template.spec.expireAfter", "should match"),
    Case(
        "NodePool",
        _template(terminationGracePeriod="Never"),
        "spec.template.spec.terminationGracePeriod",
        "should match",
    ),
    Case(
        "NodePool",
        {"spec": {"disruption": {"consolidateAfter": "30s\n"}}},
        "spec.disruption.consolidateAfter",
        "should match",
    ),
    Case("NodePool", _labels({"arch": "amd64\n"}), f"{_LABELS}[arch]", "should match"),
    Case("NodePool", _labels({"arch": "x" * 64}), f"{_LABELS}[arch]", "Too long"),
    Case(
        "NodePool", _template(requirements=[_requirement("Kubernetes.io/arch!")]), f"{_KEY}", "should match"
    ),
    Case("NodePool", {"spec": {"template": {"spec": {"requirements": None}}}}, _REQS, "Required value"),
    Case(
        "NodePool",
        {"spec": {"template": {"spec": {"nodeClassRef": None}}}},
        "spec.template.spec.nodeClassRef",
        "Required value",
    ),
    Case(
        "NodePool",
        {"spec": {"disruption": {"consolidationPolicy": "WhenUnderutilized"}}},
        "spec.disruption.consolidationPolicy",
        "Unsupported value",
    ),
    Case(
        "NodePool",
        {"spec": {"disruption": {"budgets": [{"nodes": "101%"}]}}},
        "spec.disruption.budgets[0].nodes",
        "should match",
    ),
    Case(
        "NodePool",
        {"spec": {"disruption": {"budgets": [{"nodes": "1", "reasons": ["Expired"]}]}}},
        "spec.disruption.budgets[0].reasons[0]",
        "Unsupported value",
    ),
    Case("NodePool", {"spec": {"limits": {"cpu": "lots"}}}, "spec.limits[cpu]", "should match"),
    Case(
        "NodePool",
        _template(taints=[{"key": "example.com/gpu", "effect": "Sometimes"}]),
        "spec.template.spec.taints[0].effect",
        "Unsupported value",
    ),
    Case(
        "NodePool",
        _template(requirements=[_requirement("kubernetes.io/arch", "In", ["amd64"], minValues=51)]),
        f"{_REQS}[0].minValues",
        "should be less than or equal to 50",
    ),
]

_TERMS = "spec.amiSelectorTerms"
EC2NODECLASS_CEL = [
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"alias": "al2023"}]}},
        f"{_TERMS}[0].alias",
        "'alias' is improperly formatted, must match the format 'family@version'",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"alias": "ubuntu@latest"}], "amiFamily": "Custom"}},
        f"{_TERMS}[0].alias",
        "family is not supported",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"alias": "windows2022@v1"}]}},
        f"{_TERMS}[0].alias",
        "windows families may only specify version 'latest'",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"tags": {"team": ""}}], "amiFamily": "AL2023"}},
        f"{_TERMS}[0].tags",
        "empty tag keys or values aren't supported",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"owner": "self"}], "amiFamily": "AL2023"}},
        _TERMS,
        "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"id": "ami-123", "name": "x"}], "amiFamily": "AL2023"}},
        _TERMS,
        "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"alias": "al2023@latest", "owner": "self"}]}},
        _TERMS,
        "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}, {"id": "ami-123"}]}},
        _TERMS,
        "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"encrypted": True}}]}},
        "spec.blockDeviceMappings[0].ebs",
        "snapshotID or volumeSize must be defined",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"blockDeviceMappings": [{"ebs": {"volumeSize": "20Gi", "volumeInitializationRate": 200}}]}},
        "spec.blockDeviceMappings[0].ebs",
        "snapshotID must be set when volumeInitializationRate is set",
    ),
    Case(
        "EC2NodeClass",
        {
            "spec": {
                "blockDeviceMappings": [
                    {"rootVolume": True, "ebs": {"volumeSize": "20Gi"}},
                    {"rootVolume": True, "ebs": {"volumeSize": "20Gi"}},
                ]
            }
        },
        "spec.blockDeviceMappings",
        "must have only one blockDeviceMappings with rootVolume",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"capacityReservationSelectorTerms": [{"tags": {"": "x"}}]}},
        "spec.capacityReservationSelectorTerms[0].tags",
        "empty tag keys or values aren't supported",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"capacityReservationSelectorTerms": [{"ownerID": "123456789012"}]}},
        "spec.capacityReservationSelectorTerms",
        "expected at least one, got none, ['tags', 'id']",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"capacityReservationSelectorTerms": [{"id": "cr-123", "tags": {"a": "b"}}]}},
        "spec.capacityReservationSelectorTerms",
        "'id' is mutually exclusive, cannot be set along with tags",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"role": None, "instanceProfile": ""}},
        "spec.instanceProfile",
        "instanceProfile cannot be empty",
    ),
    Case("EC2NodeClass", {"spec": {"role": ""}}, "spec.role", "role cannot be empty"),
    Case(
        "EC2NodeClass",
        {"spec": {"kubelet": {"evictionHard": {"memory.free": "5%"}}}},
        "spec.kubelet.evictionHard",
        "valid keys for evictionHard are",
    ),
    Case(
        "EC2NodeClass",
        {
            "spec": {
                "kubelet": {
                    "evictionSoft": {"memory.free": "5%"},
                    "evictionSoftGracePeriod": {"memory.free": "1m"},
                }
            }
        },
        "spec.kubelet.evictionSoft",
        "valid keys for evictionSoft are",
    ),
    Case(
        "EC2NodeClass",
        {
            "spec": {
                "kubelet": {
                    "evictionSoft": {"memory.available": "5%"},
                    "evictionSoftGracePeriod": {"memory.free": "1m"},
                }
            }
        },
        "spec.kubelet.evictionSoftGracePeriod",
        "valid keys for evictionSoftGracePeriod are",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"kubelet": {"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60}}},
        "spec.kubelet",
        "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
    ),
    Case(
        "EC2NodeClass",
        {
            "spec": {
                "kubelet": {
                    "evictionSoft": {"memory.available": "5%"},
                    "evictionSoftGracePeriod": {"nodefs.available": "1m"},
                }
            }
        },
        "spec.kubelet",
        "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
    ),
    Case(
        "EC2NodeClass",
        {
            "spec": {
                "kubelet": {
                    "evictionSoft": {"nodefs.available": "5%", "memory.available": "5%"},
                    "evictionSoftGracePeriod": {"nodefs.available": "1m", "imagefs.available": "1m"},
                }
            }
        },
        "spec.kubelet",
        "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"kubelet": {"kubeReserved": {"gpu": "1"}}}},
        "spec.kubelet.kubeReserved",
        "valid keys for kubeReserved are",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"kubelet": {"kubeReserved": {"cpu": "-1"}}}},
        "spec.kubelet.kubeReserved",
        "kubeReserved value cannot be a negative resource quantity",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"kubelet": {"systemReserved": {"gpu": "1"}}}},
        "spec.kubelet.systemReserved",
        "valid keys for systemReserved are",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"kubelet": {"systemReserved": {"memory": "-1Gi"}}}},
        "spec.kubelet.systemReserved",
        "systemReserved value cannot be a negative resource quantity",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"securityGroupSelectorTerms": []}},
        "spec.securityGroupSelectorTerms",
        "securityGroupSelectorTerms cannot be empty",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"securityGroupSelectorTerms": [{}]}},
        "spec.securityGroupSelectorTerms",
        "expected at least one, got none, ['tags', 'id', 'name']",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"securityGroupSelectorTerms": [{"id": "sg-1", "tags": {"a": "b"}}]}},
        "spec.securityGroupSelectorTerms",
        "'id' is mutually exclusive",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"securityGroupSelectorTerms": [{"name": "web", "tags": {"a": "b"}}]}},
        "spec.securityGroupSelectorTerms",
        "'name' is mutually exclusive",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"securityGroupSelectorTerms": [{"tags": {"a": ""}}]}},
        "spec.securityGroupSelectorTerms[0].tags",
        "empty tag keys or values aren't supported",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"subnetSelectorTerms": []}},
        "spec.subnetSelectorTerms",
        "subnetSelectorTerms cannot be empty",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"subnetSelectorTerms": [{}]}},
        "spec.subnetSelectorTerms",
        "expected at least one, got none, ['tags', 'id']",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"subnetSelectorTerms": [{"id": "subnet-1", "tags": {"a": "b"}}]}},
        "spec.subnetSelectorTerms",
        "'id' is mutually exclusive",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"subnetSelectorTerms": [{"tags": {"": "b"}}]}},
        "spec.subnetSelectorTerms[0].tags",
        "empty tag keys or values aren't supported",
    ),
    Case("EC2NodeClass", {"spec": {"tags": {"": "x"}}}, "spec.tags", "empty tag keys aren't supported"),
    Case(
        "EC2NodeClass",
        {"spec": {"tags": {"eks:eks-cluster-name": "x"}}},
        "spec.tags",
        "tag contains a restricted tag matching eks:eks-cluster-name",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"tags": {"kubernetes.io/cluster/demo": "owned"}}},
        "spec.tags",
        "tag contains a restricted tag matching kubernetes.io/cluster/",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"tags": {"karpenter.sh/nodepool": "x"}}},
        "spec.tags",
        "tag contains a restricted tag matching karpenter.sh/nodepool",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"tags": {"karpenter.sh/nodeclaim": "x"}}},
        "spec.tags",
        "tag contains a restricted tag matching karpenter.sh/nodeclaim",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"tags": {"karpenter.k8s.aws/ec2nodeclass": "x"}}},
        "spec.tags",
        "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"instanceProfile": "KarpenterNodeInstanceProfile"}},
        "spec",
        "must specify exactly one of ['role', 'instanceProfile']",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"alias": "al2@latest"}], "amiFamily": "AL2023"}},
        "spec",
        "if set, amiFamily must be 'AL2' or 'Custom' when using an AL2 alias",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiFamily": "AL2"}},
        "spec",
        "if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"alias": "bottlerocket@latest"}], "amiFamily": "AL2"}},
        "spec",
        "if set, amiFamily must be 'Bottlerocket' or 'Custom' when using a Bottlerocket alias",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"alias": "windows2019@latest"}], "amiFamily": "AL2"}},
        "spec",
        "if set, amiFamily must be 'Windows2019' or 'Custom' when using a Windows2019 alias",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"alias": "windows2022@latest"}], "amiFamily": "AL2"}},
        "spec",
        "if set, amiFamily must be 'Windows2022' or 'Custom' when using a Windows2022 alias",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"id": "ami-123"}]}},
        "spec",
        "must specify amiFamily if amiSelectorTerms does not contain an alias",
    ),
]

EC2NODECLASS_SCHEMA = [
    Case("EC2NodeClass", {"spec": {"amiFamily": "Ubuntu"}}, "spec.amiFamily", "Unsupported value"),
    Case(
        "EC2NodeClass",
        {"spec": {"metadataOptions": {"httpPutResponseHopLimit": 65}}},
        "spec.metadataOptions.httpPutResponseHopLimit",
        "should be less than or equal to 64",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"blockDeviceMappings": [{"ebs": {"volumeSize": "100000Gi"}}]}},
        "spec.blockDeviceMappings[0].ebs.volumeSize",
        "should match",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"subnetSelectorTerms": [{"tags": {"a": "b"}}] * 31}},
        "spec.subnetSelectorTerms",
        "must have at most 30 items",
    ),
]

_OVERLAY_KEY = "spec.requirements[0].key"
NODEOVERLAY_CEL = [
    Case("NodeOverlay", {"spec": {"capacity": {"cpu": "1"}}}, "spec.capacity", "invalid resource restricted"),
    Case(
        "NodeOverlay",
        {"spec": {"requirements": [_requirement("kubernetes.io/team")]}},
        _OVERLAY_KEY,
        'label domain "kubernetes.io" is restricted',
    ),
    Case(
        "NodeOverlay",
        {"spec": {"requirements": [_requirement("example.k8s.io/team")]}},
        _OVERLAY_KEY,
        'label domain "k8s.io" is restricted',
    ),
    Case(
        "NodeOverlay",
        {"spec": {"requirements": [_requirement("karpenter.sh/team")]}},
        _OVERLAY_KEY,
        'label domain "karpenter.sh" is restricted',
    ),
    Case(
        "NodeOverlay",
        {"spec": {"requirements": [_requirement("kubernetes.io/hostname")]}},
        _OVERLAY_KEY,
        'label "kubernetes.io/hostname" is restricted',
    ),
    Case(
        "NodeOverlay",
        {"spec": {"requirements": [_requirement("kubernetes.io/arch", "NotIn", [])]}},
        "spec.requirements",
        "requirements with operator 'NotIn' must have a value defined",
    ),
    Case(
        "NodeOverlay",
        {"spec": {"requirements": [_requirement("kubernetes.io/arch", "In", [])]}},
        "spec.requirements",
        "requirements with operator 'In' must have a value defined",
    ),
    Case(
        "NodeOverlay",
        {"spec": {"requirements": [_requirement("karpenter.k8s.aws/instance-cpu", "Gt", [])]}},
        "spec.requirements",
        "requirements operator 'Gt' or 'Lt' must have a single positive integer value",
    ),
    Case("NodeOverlay", {"spec": {"price": "0.5"}}, "spec", "cannot set both 'price' and 'priceAdjustment'"),
]

NODEOVERLAY_SCHEMA = [
    Case("NodeOverlay", {"spec": {"priceAdjustment": "-101%"}}, "spec.priceAdjustment", "should match"),
    Case("NodeOverlay", {"spec": {"weight": 10001}}, "spec.weight", "should be less than or equal to 10000"),
    Case("NodeOverlay", {"spec": {"requirements": None}}, "spec.requirements", "Required value"),
]

CEL_CASES = NODEPOOL_CEL + EC2NODECLASS_CEL + NODEOVERLAY_CEL
SCHEMA_CASES = NODEPOOL_SCHEMA + EC2NODECLASS_SCHEMA + NODEOVERLAY_SCHEMA
