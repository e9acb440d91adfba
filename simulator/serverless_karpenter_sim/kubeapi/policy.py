"""PodDisruptionBudget arithmetic and the eviction decision, after upstream's disruption controller and
``pkg/registry/core/pod/storage/eviction.go``.

As upstream, a budget with ``maxUnavailable`` or a percentage ``minAvailable`` expects the scale of the
pods' controllers (a Deployment's replicas for its ReplicaSets' pods, a ReplicaSet's or StatefulSet's
own), not the number of pods: an evicted pod that is gone at once, and its replacement not yet Ready, do
not shrink what the budget protects. Counting pods instead let a drain evict a whole node's worth of a
``maxUnavailable: 1`` workload in one pass. Simplification: a pod without a controller the store knows
makes the budget count pods (upstream leaves such a budget unable to compute, refusing evictions).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from . import selectors
from .errors import ApiError

Obj = dict[str, Any]
# A pod's controller (its uid) and that controller's desired scale; None when it has none the store knows.
ScaleOf = Callable[[Mapping[str, Any]], tuple[str, int] | None]

EVICTION_REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."
MULTIPLE_BUDGETS = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
)


def _phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return _phase(pod) in ("Succeeded", "Failed")


def is_deleting(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def is_ready(pod: Mapping[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def is_healthy(pod: Mapping[str, Any]) -> bool:
    """Counted in a budget's currentHealthy: running, ready and not on its way out."""
    return _phase(pod) == "Running" and is_ready(pod) and not is_deleting(pod)


def scaled_value(value: int | str, total: int, round_up: bool) -> int:
    """``intstr.GetScaledValueFromIntOrPercent``: an int as is, ``"N%"`` of ``total`` rounded as asked."""
    if isinstance(value, bool):
        raise ValueError(f"invalid value for IntOrString: {value!r}")
    if isinstance(value, int):
        return value
    text = str(value)
    if not text.endswith("%"):
        # upstream accepts a string holding an integer only in some paths; a budget rejects it
        raise ValueError(f"invalid value for IntOrString: invalid type: string is not a percentage: {text!r}")
    percent = int(text[:-1])
    exact = percent * total / 100
    return math.ceil(exact) if round_up else math.floor(exact)


@dataclass(frozen=True)
class BudgetStatus:
    expected_pods: int
    current_healthy: int
    desired_healthy: int

    @property
    def disruptions_allowed(self) -> int:
        return max(0, self.current_healthy - self.desired_healthy)


def selects(pdb: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    selector = selectors.from_label_selector_object((pdb.get("spec") or {}).get("selector"))
    if selector is None:
        return False
    return selectors.matches(selector, (pod.get("metadata") or {}).get("labels"))


def expected_scale(pods: Iterable[Mapping[str, Any]], scale_of: ScaleOf) -> int | None:
    """The summed scale of the pods' controllers, each counted once; None if a pod's is unknown."""
    scales: dict[str, int] = {}
    for pod in pods:
        found = scale_of(pod)
        if found is None:
            return None
        scales[found[0]] = found[1]
    return sum(scales.values())


def budget_status(
    pdb: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], scale_of: ScaleOf | None = None
) -> BudgetStatus:
    spec = pdb.get("spec") or {}
    matching = [p for p in pods if selects(pdb, p)]
    expected = sum(1 for p in matching if not is_terminal(p))
    healthy = sum(1 for p in matching if is_healthy(p))
    minimum = spec.get("minAvailable")
    by_scale = spec.get("maxUnavailable") is not None or (isinstance(minimum, str) and minimum.endswith("%"))
    if by_scale and scale_of is not None:
        scale = expected_scale(matching, scale_of)
        expected = expected if scale is None else scale
    try:
        if spec.get("maxUnavailable") is not None:
            max_unavailable = scaled_value(spec["maxUnavailable"], expected, round_up=True)
            desired = max(0, expected - max_unavailable)
        elif spec.get("minAvailable") is not None:
            desired = scaled_value(spec["minAvailable"], expected, round_up=True)
        else:
            desired = 0
    except ValueError:
        # upstream's controller cannot compute a budget it cannot parse and leaves it blocking
        desired = healthy + 1
    return BudgetStatus(expected, healthy, desired)


def status_object(pdb: Mapping[str, Any], status: BudgetStatus) -> Obj:
    meta = pdb.get("metadata") or {}
    allowed = status.disruptions_allowed > 0
    return {
        "observedGeneration": meta.get("generation", 1),
        "currentHealthy": status.current_healthy,
        "desiredHealthy": status.desired_healthy,
        "disruptionsAllowed": status.disruptions_allowed,
        "expectedPods": status.expected_pods,
        "conditions": [
            {
                "type": "DisruptionAllowed",
                "status": "True" if allowed else "False",
                "reason": "SufficientPods" if allowed else "InsufficientPods",
                "message": "",
                "observedGeneration": meta.get("generation", 1),
                "lastTransitionTime": meta.get("creationTimestamp"),
            }
        ],
    }


def can_ignore_budgets(pod: Mapping[str, Any]) -> bool:
    """Pods already disrupted (terminal, pending, being deleted) are deleted without consulting budgets."""
    return _phase(pod) in ("Succeeded", "Failed", "Pending") or is_deleting(pod)


@dataclass(frozen=True)
class EvictionVerdict:
    error: ApiError | None
    budget: str | None = None

    @property
    def allowed(self) -> bool:
        return self.error is None


def decide_eviction(
    pod: Mapping[str, Any],
    budgets: Iterable[Mapping[str, Any]],
    namespace_pods: Iterable[Mapping[str, Any]],
    scale_of: ScaleOf | None = None,
) -> EvictionVerdict:
    if can_ignore_budgets(pod):
        return EvictionVerdict(None)
    matching = [pdb for pdb in budgets if selects(pdb, pod)]
    if len(matching) > 1:
        return EvictionVerdict(ApiError(500, MULTIPLE_BUDGETS))
    if not matching:
        return EvictionVerdict(None)
    pdb = matching[0]
    name = str((pdb.get("metadata") or {}).get("name"))
    status = budget_status(pdb, namespace_pods, scale_of)
    if not is_ready(pod):
        policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") or "IfHealthyBudget"
        if policy == "AlwaysAllow":
            return EvictionVerdict(None, name)
        if status.current_healthy >= status.desired_healthy and status.desired_healthy > 0:
            return EvictionVerdict(None, name)
    if status.disruptions_allowed == 0:
        cause = (
            f"The disruption budget {name} needs {status.desired_healthy} healthy pods and has "
            f"{status.current_healthy} currently"
        )
        return EvictionVerdict(
            ApiError(
                429, EVICTION_REFUSED, details={"causes": [{"reason": "DisruptionBudget", "message": cause}]}
            ),
            name,
        )
    return EvictionVerdict(None, name)
