"""NodeClaim (karpenter.sh/v1, cluster-scoped): one request for one node, and what became of it."""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Annotated, ClassVar, Literal, Self

from pydantic import AfterValidator, Field, field_validator, model_validator

from serverless_karpenter.api.common import (
    Condition,
    Duration,
    LenientModel,
    NillableDuration,
    NodeClassReference,
    NodeSelectorRequirementWithMinValues,
    ObjectMeta,
    Quantity,
    ResourceModel,
    SpecModel,
    Taint,
    Timestamp,
    check_requirement_count,
    duplicate_taint_problems,
    find_condition,
    omitempty,
    parse_duration,
    parse_quantities,
    quantity_map_problems,
)
from serverless_karpenter.api.errors import raise_problems

# Karpenter's NodeClaim condition types.
CONDITION_LAUNCHED = "Launched"
CONDITION_REGISTERED = "Registered"
CONDITION_INITIALIZED = "Initialized"
CONDITION_READY = "Ready"
CONDITION_CONSOLIDATABLE = "Consolidatable"
CONDITION_DRIFTED = "Drifted"
CONDITION_DISRUPTION_REASON = "DisruptionReason"
CONDITION_TERMINATING = "Terminating"


class NodeClaimPhase(StrEnum):
    """Our durable states of a NodeClaim record (docs/architecture.md §2), in lifecycle order."""

    PENDING = "Pending"
    LAUNCHED = "Launched"
    REGISTERED = "Registered"
    INITIALIZED = "Initialized"
    DISRUPTING = "Disrupting"
    DRAINING = "Draining"
    TERMINATING = "Terminating"
    TERMINATED = "Terminated"

    @property
    def is_live(self) -> bool:
        """Launched or about to be, and not yet on its way out."""
        return self in _LIVE_PHASES

    @property
    def is_terminal(self) -> bool:
        return self is NodeClaimPhase.TERMINATED


_LIVE_PHASES = frozenset(
    {NodeClaimPhase.PENDING, NodeClaimPhase.LAUNCHED, NodeClaimPhase.REGISTERED, NodeClaimPhase.INITIALIZED}
)


class ResourceRequirements(SpecModel):
    requests: dict[str, Quantity] = omitempty(dict)

    @field_validator("requests")
    @classmethod
    def _requests_valid(cls, requests: dict[str, Quantity]) -> dict[str, Quantity]:
        raise_problems(quantity_map_problems(requests, non_negative=True))
        return requests


class NodeClaimSpec(SpecModel):
    taints: list[Taint] = omitempty(list)
    startup_taints: list[Taint] = omitempty(list)
    requirements: Annotated[
        list[NodeSelectorRequirementWithMinValues], AfterValidator(check_requirement_count)
    ]
    resources: ResourceRequirements = omitempty(ResourceRequirements)
    node_class_ref: NodeClassReference
    expire_after: NillableDuration = "720h"
    termination_grace_period: Duration | None = None

    @model_validator(mode="after")
    def _taints_unique(self) -> Self:
        raise_problems(
            duplicate_taint_problems([("taints", self.taints), ("startupTaints", self.startup_taints)])
        )
        return self


class NodeClaimStatus(LenientModel):
    node_name: str | None = None
    provider_id: str | None = Field(default=None, alias="providerID")
    image_id: str | None = Field(default=None, alias="imageID")
    capacity: dict[str, Quantity] = omitempty(dict)
    allocatable: dict[str, Quantity] = omitempty(dict)
    conditions: list[Condition] = omitempty(list)
    last_pod_event_time: Timestamp | None = None


class NodeClaim(ResourceModel):
    """A Karpenter v1 NodeClaim."""

    API_VERSION: ClassVar[str] = "karpenter.sh/v1"
    KIND: ClassVar[str] = "NodeClaim"
    NAME_REQUIRED: ClassVar[bool] = False

    api_version: Literal["karpenter.sh/v1"] = "karpenter.sh/v1"
    kind: Literal["NodeClaim"] = "NodeClaim"
    metadata: ObjectMeta
    spec: NodeClaimSpec
    status: NodeClaimStatus = omitempty(NodeClaimStatus)

    def expire_after_timedelta(self) -> timedelta | None:
        """How long the node lives before it expires; None means Never."""
        return parse_duration(self.spec.expire_after)

    def termination_grace_period_timedelta(self) -> timedelta | None:
        tgp = self.spec.termination_grace_period
        return parse_duration(tgp) if tgp is not None else None

    def parsed_requests(self) -> dict[str, int]:
        return parse_quantities(self.spec.resources.requests)

    def parsed_capacity(self) -> dict[str, int]:
        return parse_quantities(self.status.capacity)

    def parsed_allocatable(self) -> dict[str, int]:
        return parse_quantities(self.status.allocatable)

    def condition(self, condition_type: str) -> Condition | None:
        return find_condition(self.status.conditions, condition_type)

    def is_condition_true(self, condition_type: str) -> bool:
        condition = self.condition(condition_type)
        return condition is not None and condition.status == "True"
