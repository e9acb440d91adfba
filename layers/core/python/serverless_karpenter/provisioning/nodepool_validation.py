"""NodePools the provisioner cannot use, handled as Karpenter's ``nodepool.validation`` controller does.

The API server refuses a NodePool its CRD rules reject, but one may still be stored: created before the
rules were installed, or with a problem only Karpenter's runtime validation sees (a requirement value that
is no label value). Karpenter skips such a NodePool alone and says why on it: ``ValidationSucceeded=False``
(reason ``NodePoolValidationFailed``, the error as message) and ``Ready=False`` (``UnhealthyDependents``,
``ValidationSucceeded=False``); we also record a Warning Event. Every other NodePool keeps provisioning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from serverless_karpenter.api.errors import ManifestError
from serverless_karpenter.api.nodepool import NodePool
from serverless_karpenter.clock import to_rfc3339

VALIDATION_SUCCEEDED = "ValidationSucceeded"
READY = "Ready"
VALIDATION_FAILED = "NodePoolValidationFailed"
UNHEALTHY_DEPENDENTS = "UnhealthyDependents"
MAX_CONDITION_MESSAGE = 32768  # the CRD's maxLength for a condition's message


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


def _condition(
    current: Mapping[str, Any] | None,
    type_: str,
    status: str,
    reason: str,
    message: str,
    now: datetime,
    generation: int,
) -> dict[str, Any]:
    unchanged = current is not None and current.get("status") == status
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": current["lastTransitionTime"]
        if unchanged and current is not None and current.get("lastTransitionTime")
        else to_rfc3339(now),
        "observedGeneration": generation,
    }


def conditions_after_validation(
    manifest: Mapping[str, Any], problem: str | None, now: datetime
) -> list[dict[str, Any]] | None:
    """The NodePool's status conditions once validation has run, or None when they would not change.

    A NodePool that became valid again gets ``ValidationSucceeded=True``, and its ``Ready`` is no longer
    held False by validation (``NodeClassReady`` is not ours to judge, so a valid NodePool whose conditions
    never said anything about validation is left as it is)."""
    status = manifest.get("status") or {}
    conditions: list[dict[str, Any]] = [
        dict(c) for c in status.get("conditions") or [] if isinstance(c, Mapping)
    ]
    by_type = {c.get("type"): c for c in conditions}
    generation = int((manifest.get("metadata") or {}).get("generation") or 0)
    if problem is not None:
        problem = problem[:MAX_CONDITION_MESSAGE]
    validation = by_type.get(VALIDATION_SUCCEEDED)
    if problem is None:
        if validation is None or validation.get("status") == "True":
            return None
        wanted = [
            _condition(validation, VALIDATION_SUCCEEDED, "True", VALIDATION_SUCCEEDED, "", now, generation),
            _condition(by_type.get(READY), READY, "True", READY, "", now, generation),
        ]
    else:
        wanted = [
            _condition(
                validation, VALIDATION_SUCCEEDED, "False", VALIDATION_FAILED, problem, now, generation
            ),
            _condition(
                by_type.get(READY),
                READY,
                "False",
                UNHEALTHY_DEPENDENTS,
                f"{VALIDATION_SUCCEEDED}=False",
                now,
                generation,
            ),
        ]
    if all(
        by_type.get(w["type"]) is not None
        and all(
            by_type[w["type"]].get(k) == w[k] for k in ("status", "reason", "message", "observedGeneration")
        )
        for w in wanted
    ):
        return None
    replaced = {w["type"] for w in wanted}
    return [c for c in conditions if c.get("type") not in replaced] + wanted
