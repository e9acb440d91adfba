"""NodePools the provisioner cannot use, handled as Karpenter's ``nodepool.validation`` controller does.

The API server refuses a NodePool its CRD rules reject, but one may still be stored: created before the
rules were installed, or with a problem only Karpenter's runtime validation sees (a requirement value that
is no label value). Karpenter skips such a NodePool alone and says why on it: ``ValidationSucceeded=False``
(reason ``NodePoolValidationFailed``, the error as message) and ``Ready=False`` (``UnhealthyDependents``,
``ValidationSucceeded=False``), written with the rest of the NodePool's status by
:mod:`serverless_karpenter.lifecycle.nodepool_status`; the provisioner also records a Warning Event. Every
other NodePool keeps provisioning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from serverless_karpenter.api.errors import ManifestError
from serverless_karpenter.api.nodepool import NodePool

VALIDATION_FAILED = "NodePoolValidationFailed"


@dataclass(frozen=True)
class InvalidNodePool:
    manifest: Mapping[str, Any]  # as listed, for the Event's reference and the status patch
    problem: str  # the validation error, one line naming the field

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])


def validation_problem(manifest: Mapping[str, Any]) -> str | None:
    """Why Karpenter's runtime validation rejects this NodePool, or None when it is usable."""
    try:
        NodePool.from_manifest(manifest)
    except (ManifestError, ValueError) as error:
        return str(error)
    return None


def split_usable(
    manifests: Sequence[Mapping[str, Any]],
) -> tuple[list[Mapping[str, Any]], list[InvalidNodePool]]:
    """The NodePools provisioning may use, and the others with their problem."""
    usable: list[Mapping[str, Any]] = []
    invalid: list[InvalidNodePool] = []
    for manifest in manifests:
        problem = validation_problem(manifest)
        if problem is None:
            usable.append(manifest)
        else:
            invalid.append(InvalidNodePool(manifest, problem))
    return usable, invalid
