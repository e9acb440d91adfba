"""Dynamic Resource Allocation: pods that claim devices through ResourceClaims.

Karpenter does not yet simulate DRA by default (its ``IgnoreDRARequests`` option, true unless set): a
pending pod with resource claims gets no NodeClaim and a DRA error rather than a node sized as if the
claims were not there, and a DaemonSet pod with resource claims is left out of every node's overhead
(``pkg/utils/pod.HasDRARequirements`` and the scheduler's ``add`` and ``shouldSkipDaemonPod``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DRA_ERROR = "pod has Dynamic Resource Allocation requirements that are not yet supported by Karpenter"


def has_dra_requirements(pod: Mapping[str, Any]) -> bool:
    """Whether the pod references a ResourceClaim, at the pod level or from any (init) container."""
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):
        return True
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    return any((c.get("resources") or {}).get("claims") for c in containers)
