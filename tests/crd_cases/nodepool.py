"""The invalid NodePool cases: one per rule of its CRD."""

from __future__ import annotations

from tests.crd_cases import Case, labels, requirement, template

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
        "NodePool", labels({"karpenter.sh/team": "a"}), _LABELS, 'label domain "karpenter.sh" is restricted'
    ),
    Case(
        "NodePool",
        labels({"karpenter.sh/nodepool": "a"}),
        _LABELS,
        'label "karpenter.sh/nodepool" is restricted',
    ),
    Case(
        "NodePool",
        labels({"kubernetes.io/hostname": "a"}),
        _LABELS,
        'label "kubernetes.io/hostname" is restricted',
    ),
    Case(
        "NodePool",
        template(nodeClassRef={"group": "", "kind": "EC2NodeClass", "name": "default"}),
        "spec.template.spec.nodeClassRef.group",
        "group may not be empty",
    ),
    Case(
        "NodePool",
        template(nodeClassRef={"group": "karpenter.k8s.aws", "kind": "", "name": "default"}),
        "spec.template.spec.nodeClassRef.kind",
        "kind may not be empty",
    ),
    Case(
        "NodePool",
        template(nodeClassRef={"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": ""}),
        "spec.template.spec.nodeClassRef.name",
        "name may not be empty",
    ),
    Case(
        "NodePool",
        template(requirements=[requirement("karpenter.sh/team")]),
        _KEY,
        'label domain "karpenter.sh" is restricted',
    ),
    Case(
        "NodePool",
        template(requirements=[requirement("karpenter.sh/nodepool", "In", ["a"])]),
        _KEY,
        'label "karpenter.sh/nodepool" is restricted',
    ),
    Case(
        "NodePool",
        template(requirements=[requirement("kubernetes.io/hostname")]),
        _KEY,
        'label "kubernetes.io/hostname" is restricted',
    ),
    Case(
        "NodePool",
        template(requirements=[requirement("kubernetes.io/arch", "In", [])]),
        _REQS,
        "requirements with operator 'In' must have a value defined",
    ),
    Case(
        "NodePool",
        template(requirements=[requirement("karpenter.k8s.aws/instance-cpu", "Gt", ["4", "8"])]),
        _REQS,
        "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
    ),
    Case(
        "NodePool",
        template(requirements=[requirement("karpenter.k8s.aws/instance-cpu", "Lt", ["-1"])]),
        _REQS,
        "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
    ),
    Case(
        "NodePool",
        template(requirements=[requirement("karpenter.k8s.aws/instance-cpu", "Gt", ["abc"])]),
        _REQS,
        "evaluating rule",
    ),
    Case(
        "NodePool",
        template(requirements=[requirement("kubernetes.io/arch", "In", ["amd64"], minValues=2)]),
        _REQS,
        "requirements with 'minValues' must have at least that many values specified",
    ),
]

# The found defect: each of these used to be stored.
NODEPOOL_SCHEMA = [
    Case(
        "NodePool",
        template(requirements=[requirement("kubernetes.io/arch", "Foo", ["amd64"])]),
        f"{_REQS}[0].operator",
        'Unsupported value: "Foo"',
    ),
    Case("NodePool", {"spec": {"weight": 500}}, "spec.weight", "should be less than or equal to 100"),
    Case("NodePool", {"spec": {"weight": 0}}, "spec.weight", "should be greater than or equal to 1"),
    Case("NodePool", {"spec": {"weight": 2**63}}, "spec.weight", "must be of type integer"),
    Case("NodePool", template(expireAfter="720h\n"), "spec.template.spec.expireAfter", "should match"),
    Case("NodePool", template(expireAfter="1d"), "spec.template.spec.expireAfter", "should match"),
    Case(
        "NodePool",
        template(terminationGracePeriod="Never"),
        "spec.template.spec.terminationGracePeriod",
        "should match",
    ),
    Case(
        "NodePool",
        {"spec": {"disruption": {"consolidateAfter": "30s\n"}}},
        "spec.disruption.consolidateAfter",
        "should match",
    ),
    Case("NodePool", labels({"arch": "amd64\n"}), f"{_LABELS}[arch]", "should match"),
    Case("NodePool", labels({"arch": "x" * 64}), f"{_LABELS}[arch]", "Too long"),
    Case("NodePool", template(requirements=[requirement("Kubernetes.io/arch!")]), f"{_KEY}", "should match"),
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
        template(taints=[{"key": "example.com/gpu", "effect": "Sometimes"}]),
        "spec.template.spec.taints[0].effect",
        "Unsupported value",
    ),
    Case(
        "NodePool",
        template(requirements=[requirement("kubernetes.io/arch", "In", ["amd64"], minValues=51)]),
        f"{_REQS}[0].minValues",
        "should be less than or equal to 50",
    ),
]
