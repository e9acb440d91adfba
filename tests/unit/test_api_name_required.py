"""metadata.name is required on the kinds users write by name, through the one rule on ResourceModel;
a NodeClaim may carry only generateName until the API server names it."""

from __future__ import annotations

from typing import Any

import pytest
from serverless_karpenter.api import EC2NodeClass, NodeClaim, NodeOverlay, NodePool
from serverless_karpenter.api.common import ResourceModel
from serverless_karpenter.api.errors import ManifestError

REQUIREMENT = {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}
NODE_CLASS_REF = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}

UNNAMED: list[tuple[type[ResourceModel], dict[str, Any]]] = [
    (NodePool, {"template": {"spec": {"nodeClassRef": NODE_CLASS_REF, "requirements": [REQUIREMENT]}}}),
    (
        EC2NodeClass,
        {
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "role": "KarpenterNodeRole",
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        },
    ),
    (NodeOverlay, {"requirements": [REQUIREMENT], "priceAdjustment": "-10%"}),
]


def manifest(model: type[ResourceModel], spec: dict[str, Any], metadata: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": model.API_VERSION, "kind": model.KIND, "metadata": metadata, "spec": spec}


@pytest.mark.parametrize(("model", "spec"), UNNAMED, ids=lambda v: getattr(v, "KIND", ""))
def test_a_kind_written_by_name_refuses_a_manifest_without_one(
    model: type[ResourceModel], spec: dict[str, Any]
) -> None:
    assert model.from_manifest(manifest(model, spec, {"name": "default"})).name == "default"

    with pytest.raises(ManifestError) as info:
        model.from_manifest(manifest(model, spec, {"generateName": "default-"}))

    assert [(e.field, e.rule) for e in info.value.errors] == [("metadata.name", "is required")]


def test_a_nodeclaim_may_wait_for_the_api_server_to_name_it() -> None:
    spec = {"nodeClassRef": NODE_CLASS_REF, "requirements": [REQUIREMENT]}

    claim = NodeClaim.from_manifest(manifest(NodeClaim, spec, {"generateName": "default-"}))

    assert claim.name == "" and claim.metadata.generate_name == "default-"
