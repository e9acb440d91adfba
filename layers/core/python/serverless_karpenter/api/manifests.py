"""Turn a Kubernetes manifest (a dict from YAML or the API server) into the right Karpenter model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from serverless_karpenter.api import labels
from serverless_karpenter.api.common import ResourceModel, manifest_name
from serverless_karpenter.api.ec2nodeclass import EC2NodeClass
from serverless_karpenter.api.errors import FieldViolation, ManifestError
from serverless_karpenter.api.nodeclaim import NodeClaim
from serverless_karpenter.api.nodeoverlay import NodeOverlay
from serverless_karpenter.api.nodepool import NodePool

KarpenterObject = NodePool | EC2NodeClass | NodeClaim | NodeOverlay

_KINDS: dict[str, type[ResourceModel]] = {
    model.KIND: model for model in (NodePool, EC2NodeClass, NodeClaim, NodeOverlay)
}
_GROUPS = frozenset({labels.GROUP, labels.AWS_GROUP})


class UnknownKind(ValueError):
    """Not a Karpenter kind we model (NodePool, EC2NodeClass, NodeClaim, NodeOverlay)."""

    def __init__(self, api_version: object, kind: object) -> None:
        super().__init__(
            f"not a Karpenter object we handle: apiVersion {api_version!r}, kind {kind!r} "
            f"(expected one of: {', '.join(f'{m.API_VERSION} {k}' for k, m in _KINDS.items())})"
        )
        self.api_version = api_version
        self.kind = kind


def _group_kind(doc: Mapping[str, Any]) -> tuple[str, str, str]:
    api_version = doc.get("apiVersion")
    kind = doc.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return "", "", ""
    group, _, version = api_version.rpartition("/")
    return group, version, kind


def is_karpenter_kind(doc: object) -> bool:
    """True for a Karpenter kind we model, whatever its version: ``parse_manifest`` takes it."""
    if not isinstance(doc, Mapping):
        return False
    group, _, kind = _group_kind(doc)
    model = _KINDS.get(kind)
    return model is not None and group == model.API_VERSION.rpartition("/")[0] and group in _GROUPS


def parse_manifest(doc: Mapping[str, Any]) -> KarpenterObject:
    """Validate ``doc`` as the Karpenter kind its apiVersion and kind name.

    Raises ManifestError (one line naming the object, field and rule) when a Karpenter kind is invalid,
    including an old version such as karpenter.sh/v1beta1, and UnknownKind for anything else.
    """
    if not is_karpenter_kind(doc):
        api_version = doc.get("apiVersion") if isinstance(doc, Mapping) else None
        kind = doc.get("kind") if isinstance(doc, Mapping) else None
        raise UnknownKind(api_version, kind)
    model = _KINDS[str(doc["kind"])]
    if doc["apiVersion"] != model.API_VERSION:
        raise ManifestError(
            model.KIND,
            manifest_name(doc),
            [
                FieldViolation(
                    "apiVersion",
                    f"only {model.API_VERSION} is supported (got {doc['apiVersion']!r}); "
                    f"convert the manifest to {model.API_VERSION} first",
                )
            ],
        )
    parsed = model.from_manifest(doc)
    assert isinstance(parsed, NodePool | EC2NodeClass | NodeClaim | NodeOverlay)
    return parsed
