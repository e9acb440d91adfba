"""The invalid NodeOverlay cases: one per rule of its CRD."""

from __future__ import annotations

from tests.crd_cases import Case, requirement

_OVERLAY_KEY = "spec.requirements[0].key"
NODEOVERLAY_CEL = [
    Case("NodeOverlay", {"spec": {"capacity": {"cpu": "1"}}}, "spec.capacity", "invalid resource restricted"),
    Case(
        "NodeOverlay",
        {"spec": {"requirements": [requirement("kubernetes.io/team")]}},
        _OVERLAY_KEY,
        'label domain "kubernetes.io" is restricted',
    ),
    Case(
        "NodeOverlay",
        {"spec": {"requirements": [requirement("example.k8s.io/team")]}},
        _OVERLAY_KEY,
        'label domain "k8s.io" is restricted',
    ),
    Case(
        "NodeOverlay",
        {"spec": {"requirements": [requirement("karpenter.sh/team")]}},
        _OVERLAY_KEY,
        'label domain "karpenter.sh" is restricted',
    ),
    Case(
        "NodeOverlay",
        {"spec": {"requirements": [requirement("kubernetes.io/hostname")]}},
        _OVERLAY_KEY,
        'label "kubernetes.io/hostname" is restricted',
    ),
    Case(
        "NodeOverlay",
        {"spec": {"requirements": [requirement("kubernetes.io/arch", "NotIn", [])]}},
        "spec.requirements",
        "requirements with operator 'NotIn' must have a value defined",
    ),
    Case(
        "NodeOverlay",
        {"spec": {"requirements": [requirement("kubernetes.io/arch", "In", [])]}},
        "spec.requirements",
        "requirements with operator 'In' must have a value defined",
    ),
    Case(
        "NodeOverlay",
        {"spec": {"requirements": [requirement("karpenter.k8s.aws/instance-cpu", "Gt", [])]}},
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
