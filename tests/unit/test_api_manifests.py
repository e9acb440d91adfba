"""parse_manifest dispatch, ManifestError's shape, and NodeOverlay."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from serverless_karpenter.api import (
    EC2NodeClass,
    FieldViolation,
    ManifestError,
    NodeClaim,
    NodeOverlay,
    NodePool,
    UnknownKind,
    is_karpenter_kind,
    parse_manifest,
)

MULTI_DOC = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      requirements:
        - key: kubernetes.io/arch
          operator: In
          values: ["amd64"]
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  role: KarpenterNodeRole-my-cluster
  amiSelectorTerms:
    - alias: bottlerocket@latest
  subnetSelectorTerms:
    - tags: {karpenter.sh/discovery: my-cluster}
  securityGroupSelectorTerms:
    - tags: {karpenter.sh/discovery: my-cluster}
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: default-x7k2p
spec:
  requirements:
    - key: karpenter.sh/nodepool
      operator: In
      values: [default]
  nodeClassRef:
    group: karpenter.k8s.aws
    kind: EC2NodeClass
    name: default
---
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata:
  name: savings-plan
spec:
  weight: 10
  requirements:
    - key: karpenter.k8s.aws/instance-family
      operator: In
      values: [m5, c5]
    - key: karpenter.sh/nodepool
      operator: In
      values: [default]
  priceAdjustment: "-20%"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: inflate
"""


def docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(MULTI_DOC) if d]


def overlay(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": "overlay"},
        "spec": {
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}
            ],
            **spec,
        },
    }


def overlay_error(doc: dict[str, Any]) -> ManifestError:
    with pytest.raises(ManifestError) as info:
        parse_manifest(doc)
    return info.value


# --- dispatch -------------------------------------------------------------------------------------------


def test_parse_manifest_dispatches_on_api_version_and_kind() -> None:
    *karpenter, deployment = docs()

    parsed = [parse_manifest(d) for d in karpenter]

    assert [type(p) for p in parsed] == [NodePool, EC2NodeClass, NodeClaim, NodeOverlay]
    assert parsed[3].to_manifest() == karpenter[3]
    # The API server would default a NodeClaim's expireAfter the same way.
    assert parsed[2].to_manifest() == {
        **karpenter[2],
        "spec": {**karpenter[2]["spec"], "expireAfter": "720h"},
    }
    assert all(is_karpenter_kind(d) for d in karpenter)
    assert not is_karpenter_kind(deployment)
    with pytest.raises(UnknownKind) as info:
        parse_manifest(deployment)
    assert isinstance(info.value, ValueError)
    assert "'apps/v1'" in str(info.value) and "'Deployment'" in str(info.value)


@pytest.mark.parametrize(
    "doc",
    [
        {"apiVersion": "karpenter.sh/v1", "kind": "Provisioner"},
        {"apiVersion": "example.com/v1", "kind": "NodePool"},
        {"kind": "NodePool"},
        {"apiVersion": 1, "kind": "NodePool"},
        {},
        ["not", "a", "mapping"],
    ],
)
def test_unknown_kinds(doc: Any) -> None:
    assert not is_karpenter_kind(doc)
    with pytest.raises(UnknownKind):
        parse_manifest(doc)


def test_old_version_of_a_karpenter_kind_is_a_manifest_error() -> None:
    doc = docs()[0]
    doc["apiVersion"] = "karpenter.sh/v1beta1"
    assert is_karpenter_kind(doc)

    with pytest.raises(ManifestError) as info:
        parse_manifest(doc)

    assert info.value.field == "apiVersion"
    assert str(info.value) == (
        "NodePool \"default\": apiVersion: only karpenter.sh/v1 is supported (got 'karpenter.sh/v1beta1'); "
        "convert the manifest to karpenter.sh/v1 first"
    )


def test_invalid_karpenter_kind_raises_manifest_error_naming_it() -> None:
    doc = docs()[1]
    doc["spec"]["amiSelectorTerms"] = [{"alias": "al2023@latest"}, {"tags": {"a": "b"}}]
    doc["spec"]["role"] = ""
    with pytest.raises(ManifestError) as info:
        parse_manifest(doc)
    err = info.value
    assert str(err).startswith('EC2NodeClass "default": spec.amiSelectorTerms[0].alias: ')
    assert str(err).endswith("(and 1 more error)")
    assert [e.field for e in err.errors] == ["spec.amiSelectorTerms[0].alias", "spec.role"]


def test_metadata_name_must_be_a_dns_subdomain() -> None:
    doc = docs()[0]
    doc["metadata"]["name"] = "Default_Pool"
    with pytest.raises(ManifestError) as info:
        parse_manifest(doc)
    assert info.value.field == "metadata.name"
    assert "DNS subdomain" in info.value.rule


def test_spec_that_is_not_a_mapping() -> None:
    doc = docs()[0]
    doc["spec"] = ["template"]
    with pytest.raises(ManifestError) as info:
        parse_manifest(doc)
    assert str(info.value) == 'NodePool "default": spec: must be a mapping (got a list)'


def test_unknown_top_level_field() -> None:
    doc = docs()[0]
    doc["sepc"] = doc.pop("spec")
    with pytest.raises(ManifestError) as info:
        parse_manifest(doc)
    assert {e.field: e.rule for e in info.value.errors} == {
        "spec": "is required",
        "sepc": "unknown field; did you mean 'spec'?",
    }


# --- ManifestError ----------------------------------------------------------------------------------------


def test_manifest_error_shape() -> None:
    err = ManifestError(
        "NodePool",
        "default",
        [
            FieldViolation("spec.weight", "must be between 1 and 100 (got 0)"),
            FieldViolation("spec.limits", "x"),
        ],
    )
    assert isinstance(err, ValueError)
    assert (err.kind, err.name, err.field, err.rule) == (
        "NodePool",
        "default",
        "spec.weight",
        "must be between 1 and 100 (got 0)",
    )
    assert str(err) == 'NodePool "default": spec.weight: must be between 1 and 100 (got 0) (and 1 more error)'
    assert err.details().splitlines() == [
        'NodePool "default": spec.weight: must be between 1 and 100 (got 0)',
        'NodePool "default": spec.limits: x',
    ]
    with pytest.raises(ValueError):
        ManifestError("NodePool", "default", [])


def test_multi_line_user_values_stay_on_one_line() -> None:
    doc = docs()[0]
    doc["spec"]["template"]["spec"]["requirements"][0]["operator"] = "In\nor not"
    with pytest.raises(ManifestError) as info:
        parse_manifest(doc)
    assert "\n" not in str(info.value)


# --- NodeOverlay --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "price", "expected"),
    [
        ({"priceAdjustment": "-20%"}, 1.0, 0.8),
        ({"priceAdjustment": "+10%"}, 0.5, 0.55),
        ({"priceAdjustment": "+0.01"}, 0.1, 0.11),
        ({"priceAdjustment": "-0.5"}, 0.2, 0.0),
        ({"priceAdjustment": "-100%"}, 3.0, 0.0),
        ({"price": "5.00"}, 1.0, 5.0),
        ({"price": 0.25}, 1.0, 0.25),
        ({"capacity": {"example.com/device": "2"}}, 1.5, 1.5),
    ],
)
def test_apply_price(spec: dict[str, Any], price: float, expected: float) -> None:
    parsed = parse_manifest(overlay(**spec))
    assert isinstance(parsed, NodeOverlay)
    assert parsed.apply_price(price) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("spec", "field", "rule_part"),
    [
        ({"price": "1", "priceAdjustment": "+1"}, "spec.priceAdjustment", "cannot set both"),
        ({"priceAdjustment": "20%"}, "spec.priceAdjustment", "signed amount"),
        ({"priceAdjustment": "-150%"}, "spec.priceAdjustment", "at most 100%"),
        ({"priceAdjustment": "0.5"}, "spec.priceAdjustment", "(got '0.5')"),
        ({"price": "-1"}, "spec.price", "non-negative"),
        ({"price": "$5"}, "spec.price", "decimal"),
        ({"capacity": {"cpu": "1"}}, "spec.capacity[cpu]", "only extended resources"),
        ({"capacity": {"example.com/device": "many"}}, "spec.capacity[example.com/device]", "quantity"),
        ({"weight": 0}, "spec.weight", "between 1 and 10000"),
        (
            {"requirements": [{"key": "example.com/a", "operator": "NotIn"}]},
            "spec.requirements[0].values",
            "NotIn needs at least one value",
        ),
        (
            {"requirements": [{"key": "kubernetes.io/hostname", "operator": "Exists"}]},
            "spec.requirements[0].key",
            "restricted",
        ),
        (
            {"requirements": [{"key": "example.com/a", "operator": "Exists", "minValues": 2}]},
            "spec.requirements[0].minValues",
            "unknown field",
        ),
    ],
)
def test_overlay_rules(spec: dict[str, Any], field: str, rule_part: str) -> None:
    err = overlay_error(overlay(**spec))
    assert err.field == field
    assert rule_part in err.rule


def test_overlay_requirements_are_required_and_weight_defaults_to_zero() -> None:
    doc = overlay(capacity={"example.com/device": 1})
    parsed = NodeOverlay.from_manifest(doc)
    assert parsed.weight_or_zero() == 0
    assert parsed.parsed_capacity() == {"example.com/device": 1}
    assert not parsed.adjusts_price()
    assert parsed.to_manifest() == doc

    del doc["spec"]["requirements"]
    err = overlay_error(doc)
    assert (err.field, err.rule) == ("spec.requirements", "is required")
