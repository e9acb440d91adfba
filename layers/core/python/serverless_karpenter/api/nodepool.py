"""NodePool (karpenter.sh/v1, cluster-scoped): what nodes may be launched, and when they may be disrupted."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import AfterValidator, Field, field_validator, model_validator

from serverless_karpenter.api import labels
from serverless_karpenter.api.common import (
    BudgetDuration,
    Condition,
    Duration,
    Int,
    LenientModel,
    NillableDuration,
    NodeClassReference,
    NodeSelectorRequirementWithMinValues,
    ObjectMeta,
    Quantity,
    ResourceModel,
    SpecModel,
    Taint,
    between,
    check_requirement_count,
    duplicate_taint_problems,
    find_condition,
    format_duration,
    label_value_problem,
    omitempty,
    parse_duration,
    parse_quantities,
    qualified_name_problem,
    quantity_map_problems,
    requirement_key_problems,
    stable_hash,
)
from serverless_karpenter.api.errors import Loc, RuleError, raise_problems, show

# Bump when the fields that feed template_hash() change, so that existing NodeClaims are re-stamped
# instead of being reported as drifted. Distinct from Karpenter's own versions ("v3"), because our hash
# is computed differently: a NodeClaim stamped by Karpenter is re-stamped, never taken as drifted.
NODEPOOL_HASH_VERSION = "sk-v1"

DEFAULT_EXPIRE_AFTER = "720h"
DEFAULT_CONSOLIDATE_AFTER = "0s"
DEFAULT_BUDGET_NODES = "10%"
MAX_TEMPLATE_LABELS = 100
MAX_BUDGETS = 50

ConsolidationPolicy = Literal["WhenEmptyOrUnderutilized", "WhenEmpty"]
DisruptionReason = Literal["Underutilized", "Empty", "Drifted"]

# Deprecated aliases the CRD still accepts; Karpenter maps them onto the stable labels.
_LEGACY_WELL_KNOWN_LABELS = frozenset(
    {
        "beta.kubernetes.io/instance-type",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
    }
)


def nodepool_label_restriction(key: str) -> str | None:
    """Why a NodePool may not use ``key`` in its template labels or requirements, or None.

    ``karpenter.sh/nodepool`` is well known, but Karpenter sets it itself from the NodePool's name.
    """
    if key == labels.NODEPOOL:
        return f"label {key!r} is restricted; Karpenter sets it to the NodePool's name"
    if key in _LEGACY_WELL_KNOWN_LABELS:
        return None
    return labels.is_restricted_label(key)


# --- template -----------------------------------------------------------------------------------------


class NodeClaimTemplateMetadata(SpecModel):
    """Labels and annotations given to every node launched from the NodePool."""

    labels: dict[str, str] = omitempty(dict)
    annotations: dict[str, str] = omitempty(dict)

    @field_validator("labels")
    @classmethod
    def _labels_valid(cls, template_labels: dict[str, str]) -> dict[str, str]:
        if len(template_labels) > MAX_TEMPLATE_LABELS:
            raise RuleError(f"must have at most {MAX_TEMPLATE_LABELS} labels (got {len(template_labels)})")
        problems: list[tuple[Loc, str]] = []
        for key, value in template_labels.items():
            problem = qualified_name_problem(key) or nodepool_label_restriction(key)
            if problem:
                problems.append(((key,), problem))
            value_problem = label_value_problem(value)
            if value_problem:
                problems.append(((key,), value_problem))
        raise_problems(problems)
        return template_labels


class NodeClaimTemplateSpec(SpecModel):
    """The NodeClaim every launch starts from; requests are left out, they come from the pods."""

    taints: list[Taint] = omitempty(list)
    startup_taints: list[Taint] = omitempty(list)
    requirements: Annotated[
        list[NodeSelectorRequirementWithMinValues], AfterValidator(check_requirement_count)
    ]
    node_class_ref: NodeClassReference
    expire_after: NillableDuration = DEFAULT_EXPIRE_AFTER
    termination_grace_period: Duration | None = None

    @field_validator("requirements")
    @classmethod
    def _requirement_keys_allowed(
        cls, requirements: list[NodeSelectorRequirementWithMinValues]
    ) -> list[NodeSelectorRequirementWithMinValues]:
        raise_problems(requirement_key_problems(requirements, nodepool_label_restriction))
        return requirements

    @model_validator(mode="after")
    def _taints_unique(self) -> Self:
        raise_problems(
            duplicate_taint_problems([("taints", self.taints), ("startupTaints", self.startup_taints)])
        )
        return self


class NodeClaimTemplate(SpecModel):
    metadata: NodeClaimTemplateMetadata = omitempty(NodeClaimTemplateMetadata)
    spec: NodeClaimTemplateSpec


# --- disruption ---------------------------------------------------------------------------------------

_BUDGET_NODES = re.compile(r"^((100|[0-9]{1,2})%|[0-9]+)$")
_CRON_MACROS = frozenset({"@annually", "@yearly", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"})


def _check_budget_nodes(nodes: str) -> str:
    if not _BUDGET_NODES.fullmatch(nodes):
        raise RuleError(f"must be a count such as 5 or a percentage such as 10% (got {show(nodes)})")
    return nodes


def _check_schedule(schedule: str) -> str:
    stripped = schedule.strip()
    if stripped.upper().startswith(("TZ=", "CRON_TZ=")):
        raise RuleError(f"time zones are not supported; schedules are in UTC (got {show(schedule)})")
    if stripped.startswith("@"):
        if stripped not in _CRON_MACROS:
            raise RuleError(
                f"must be a cron expression or one of {', '.join(sorted(_CRON_MACROS))} "
                f"(got {show(schedule)})"
            )
        return schedule
    if len(stripped.split()) != 5:
        raise RuleError(
            f"must be a cron expression with 5 fields: minute hour day-of-month month day-of-week "
            f"(got {show(schedule)})"
        )
    # croniter is only needed for NodePools with scheduled budgets; keep it off the import path.
    from croniter import croniter

    if not croniter.is_valid(stripped):
        raise RuleError(f"is not a valid cron expression (got {show(schedule)})")
    return schedule


class Budget(SpecModel):
    """How many of the NodePool's nodes may be disrupted at once, optionally only in a cron window."""

    nodes: Annotated[str, AfterValidator(_check_budget_nodes)] = DEFAULT_BUDGET_NODES
    schedule: Annotated[str, AfterValidator(_check_schedule)] | None = None
    duration: BudgetDuration | None = None
    reasons: Annotated[list[DisruptionReason], Field(max_length=MAX_BUDGETS)] | None = None

    @model_validator(mode="after")
    def _schedule_with_duration(self) -> Self:
        if (self.schedule is None) != (self.duration is None):
            missing = "duration" if self.duration is None else "schedule"
            raise RuleError("'schedule' and 'duration' must be set together", at=(missing,))
        return self

    def duration_timedelta(self) -> timedelta | None:
        return parse_duration(self.duration) if self.duration is not None else None

    def applies_to(self, reason: str) -> bool:
        """A budget without reasons applies to every disruption reason."""
        return self.reasons is None or reason in self.reasons


def _default_budgets() -> list[Budget]:
    return [Budget(nodes=DEFAULT_BUDGET_NODES)]


class Disruption(SpecModel):
    consolidate_after: NillableDuration = DEFAULT_CONSOLIDATE_AFTER
    consolidation_policy: ConsolidationPolicy = "WhenEmptyOrUnderutilized"
    budgets: Annotated[list[Budget], Field(max_length=MAX_BUDGETS)] = Field(default_factory=_default_budgets)


# --- NodePool -----------------------------------------------------------------------------------------


class NodePoolSpec(SpecModel):
    template: NodeClaimTemplate
    disruption: Disruption = Field(default_factory=Disruption)
    limits: dict[str, Quantity] = omitempty(dict)
    weight: Annotated[Int, between(1, 100)] | None = None

    @field_validator("limits")
    @classmethod
    def _limits_valid(cls, limits: dict[str, Any]) -> dict[str, Any]:
        raise_problems(quantity_map_problems(limits))
        return limits


class NodePoolStatus(LenientModel):
    resources: dict[str, Quantity] = omitempty(dict)
    nodes: int | None = None
    node_class_observed_generation: int | None = None
    conditions: list[Condition] = omitempty(list)


class NodePool(ResourceModel):
    """A Karpenter v1 NodePool. ``NodePool.from_manifest(doc)`` raises a one-line ManifestError."""

    API_VERSION: ClassVar[str] = "karpenter.sh/v1"
    KIND: ClassVar[str] = "NodePool"

    api_version: Literal["karpenter.sh/v1"] = "karpenter.sh/v1"
    kind: Literal["NodePool"] = "NodePool"
    metadata: ObjectMeta
    spec: NodePoolSpec
    status: NodePoolStatus = omitempty(NodePoolStatus)

    # --- accessors ---

    @property
    def template_spec(self) -> NodeClaimTemplateSpec:
        return self.spec.template.spec

    def expire_after_timedelta(self) -> timedelta | None:
        """How long a node lives before it expires; None means Never."""
        return parse_duration(self.spec.template.spec.expire_after)

    def consolidate_after_timedelta(self) -> timedelta | None:
        """How long a node must be consolidatable before Karpenter acts; None means Never."""
        return parse_duration(self.spec.disruption.consolidate_after)

    def termination_grace_period_timedelta(self) -> timedelta | None:
        """How long draining may take before pods are deleted regardless; None means no limit."""
        tgp = self.spec.template.spec.termination_grace_period
        return parse_duration(tgp) if tgp is not None else None

    def weight_or_zero(self) -> int:
        """Karpenter orders NodePools by weight, an unset weight counting as 0."""
        return self.spec.weight or 0

    def parsed_limits(self) -> dict[str, int]:
        """``spec.limits`` in canonical integers (cpu millicores, bytes, counts)."""
        return parse_quantities(self.spec.limits)

    def condition(self, condition_type: str) -> Condition | None:
        return find_condition(self.status.conditions, condition_type)

    def template_hash(self) -> str:
        """A stable hash of the template fields whose change makes existing nodes drift.

        Like Karpenter's ``karpenter.sh/nodepool-hash``: template labels, annotations, taints, startup taints,
        nodeClassRef, expireAfter and terminationGracePeriod count; requirements don't (they drift by
        comparison with the node's labels), nor do disruption, limits and weight. Taint order does not
        matter, and durations are compared by value (``720h`` equals ``720h0m0s``).
        """
        template = self.spec.template
        spec = template.spec
        tgp = spec.termination_grace_period
        return stable_hash(
            {
                "labels": template.metadata.labels,
                "annotations": template.metadata.annotations,
                "taints": [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in spec.taints],
                "startupTaints": [
                    t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in spec.startup_taints
                ],
                "nodeClassRef": spec.node_class_ref.model_dump(by_alias=True, mode="json"),
                "expireAfter": format_duration(parse_duration(spec.expire_after)),
                "terminationGracePeriod": format_duration(parse_duration(tgp)) if tgp is not None else None,
            }
        )
