"""NodeClaimRecord: our durable record of one launch (docs/architecture.md §2)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from serverless_karpenter.api.nodeclaim import NodeClaimPhase

# One enumeration of the durable states, defined with the API models.
NodeClaimState = NodeClaimPhase


# States in which the claim has, or will have, a node that can take pods.
IN_FLIGHT_STATES = frozenset({NodeClaimState.PENDING, NodeClaimState.LAUNCHED})
ACTIVE_STATES = frozenset(
    {NodeClaimState.PENDING, NodeClaimState.LAUNCHED, NodeClaimState.REGISTERED, NodeClaimState.INITIALIZED}
)
DELETING_STATES = frozenset({NodeClaimState.DISRUPTING, NodeClaimState.DRAINING, NodeClaimState.TERMINATING})


class InstanceTypeOption(BaseModel):
    """One instance type a claim may launch as, with the offerings CreateFleet may choose from."""

    model_config = ConfigDict(frozen=True)

    name: str
    arch: str = "amd64"
    # (zone, capacity type, $/h), cheapest first.
    offerings: list[tuple[str, str, float]]
    allocatable: dict[str, int] = Field(default_factory=dict)
    capacity: dict[str, int] = Field(default_factory=dict)


class NodeClaimRecord(BaseModel):
    name: str
    nodepool: str
    nodeclass: str
    state: NodeClaimState = NodeClaimState.PENDING
    version: int = 0

    requirements: list[dict[str, Any]] = Field(default_factory=list)
    # Before launch, every type the claim may launch as, with its offerings; from launch on, only the
    # launched type's (mark_launched), the others kept by name in ``instance_type_names``. A record is read
    # on every pass, and 60 options with offerings are about 20 KB of it: 20 MB a Query at 1,000 nodes.
    instance_type_options: list[InstanceTypeOption] = Field(default_factory=list)
    instance_type_names: list[str] = Field(default_factory=list)
    requests: dict[str, int] = Field(default_factory=dict)
    daemon_overhead: dict[str, int] = Field(default_factory=dict)
    capacity: dict[str, int] = Field(default_factory=dict)
    pods: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    taints: list[dict[str, str]] = Field(default_factory=list)
    startup_taints: list[dict[str, str]] = Field(default_factory=list)
    expire_after_seconds: float | None = None
    termination_grace_period_seconds: float | None = None

    instance_id: str | None = None
    instance_type: str | None = None
    zone: str | None = None
    capacity_type: str | None = None
    price_per_hour: float | None = None
    provider_id: str | None = None
    image_id: str | None = None
    launch_template_name: str | None = None
    node_name: str | None = None
    allocatable: dict[str, int] = Field(default_factory=dict)

    created_at: datetime
    launched_at: datetime | None = None
    registered_at: datetime | None = None
    initialized_at: datetime | None = None
    deletion_requested_at: datetime | None = None
    terminated_at: datetime | None = None
    disruption_reason: str | None = None
    drain_deadline: datetime | None = None
    last_error: str | None = None
    expires_at: datetime | None = None

    def option_names(self) -> list[str]:
        """The names of the instance types the claim could launch as (its NodeClaim's requirement)."""
        return list(self.instance_type_names) or [o.name for o in self.instance_type_options]

    def daemon_requests(self) -> dict[str, int]:
        return dict(self.daemon_overhead)

    def expected_allocatable(self) -> dict[str, int]:
        """The launched type's allocatable, or the cheapest option's before launch."""
        if self.allocatable:
            return dict(self.allocatable)
        return dict(self.instance_type_options[0].allocatable) if self.instance_type_options else {}

    def expected_capacity(self) -> dict[str, int]:
        if self.capacity:
            return dict(self.capacity)
        return dict(self.instance_type_options[0].capacity) if self.instance_type_options else {}

    @property
    def is_in_flight(self) -> bool:
        return self.state in IN_FLIGHT_STATES

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def is_deleting(self) -> bool:
        return self.state in DELETING_STATES
