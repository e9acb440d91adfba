"""What the EC2 providers answer and are asked: plain frozen values, free of the SDK's shapes.

The rest of the control plane (provisioning, lifecycle, disruption, ``plan``) reads these; the providers
build them from DescribeSubnets, DescribeInstances, CreateFleet... answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from serverless_karpenter import amifamily
from serverless_karpenter.adapters.providers.errors import CloudError
from serverless_karpenter.api import labels as wk

# CreateFleet error codes that mean "this offering has no capacity now" (Karpenter's list).
UNFULFILLABLE_CAPACITY_ERRORS = frozenset(
    {
        "InsufficientInstanceCapacity",
        "MaxSpotInstanceCountExceeded",
        "VcpuLimitExceeded",
        "UnfulfillableCapacity",
        "Unsupported",
        "InsufficientFreeAddressesInSubnet",
        "ReservationCapacityExceeded",
    }
)
# CreateFleet's answer to a spot request when the account lacks the EC2 Spot service-linked role and the
# caller may not create it: no spot launch can succeed until someone creates the role.
SPOT_SERVICE_LINKED_ROLE_ERROR = "AuthFailure.ServiceLinkedRoleCreationNotPermitted"


class NodeClassResolutionError(ValueError):
    """An EC2NodeClass could not be resolved because AWS refused or failed a call for it (a ValueError, as
    every other reason a node class is not ready: callers skip that one node class, not the whole pass)."""

    def __init__(self, nodeclass: str, error: CloudError) -> None:
        self.code = error.code
        super().__init__(
            f'EC2NodeClass "{nodeclass}": {error.operation or "a call"} failed ({self.code}): '
            f"{error.message or error}"
        )


@dataclass(frozen=True)
class Subnet:
    id: str
    zone: str
    zone_id: str | None
    available_ips: int


@dataclass(frozen=True)
class SecurityGroup:
    id: str
    name: str


@dataclass(frozen=True)
class Image:
    id: str
    name: str
    arch: str  # amd64 | arm64
    creation_date: str = ""


@dataclass(frozen=True)
class ResolvedNodeClass:
    name: str
    subnets: list[Subnet]
    security_group_ids: list[str]
    amis: dict[str, str]  # arch -> image id
    ami_family: str
    instance_profile: str | None
    tags: dict[str, str] = field(default_factory=dict)
    user_data: str | None = None
    metadata_options: dict[str, Any] = field(default_factory=dict)
    block_device_mappings: list[dict[str, Any]] = field(default_factory=list)
    detailed_monitoring: bool = False
    associate_public_ip: bool | None = None
    kubelet: dict[str, Any] = field(default_factory=dict)
    # What the EC2NodeClass status reports (names beside the ids).
    security_groups: list[SecurityGroup] = field(default_factory=list)
    images: list[Image] = field(default_factory=list)
    role: str | None = None

    @property
    def zones(self) -> list[str]:
        return sorted({s.zone for s in self.subnets})

    def subnet_for_zone(self, zone: str) -> Subnet | None:
        """Karpenter's choice: the subnet in the zone with the most free addresses."""
        candidates = [s for s in self.subnets if s.zone == zone]
        return max(candidates, key=lambda s: (s.available_ips, s.id)) if candidates else None


@dataclass(frozen=True)
class Instance:
    id: str
    instance_type: str
    zone: str
    state: str
    capacity_type: str
    launch_time: datetime
    tags: dict[str, str]
    private_dns_name: str
    image_id: str | None
    launch_template: str | None = None  # known right after CreateFleet only
    # The primary interface's subnet and the instance's security groups (drift by network reads them).
    subnet_id: str | None = field(default=None, compare=False)
    security_group_ids: frozenset[str] = field(default=frozenset(), compare=False)

    @property
    def provider_id(self) -> str:
        return f"aws:///{self.zone}/{self.id}"


@dataclass(frozen=True)
class FleetError:
    code: str
    message: str
    instance_type: str | None
    zone: str | None
    capacity_type: str


class LaunchError(Exception):
    def __init__(self, message: str, errors: list[FleetError]) -> None:
        super().__init__(message)
        self.errors = errors

    @property
    def unavailable_offerings(self) -> list[FleetError]:
        return [e for e in self.errors if e.code in UNFULFILLABLE_CAPACITY_ERRORS and e.instance_type]

    @property
    def spot_service_linked_role_missing(self) -> bool:
        return any(e.code == SPOT_SERVICE_LINKED_ROLE_ERROR for e in self.errors)


@dataclass(frozen=True)
class LaunchRequest:
    nodeclaim: str
    nodepool: str
    capacity_type: str
    # (instance type, zone, arch), cheapest first; the launch (lifecycle.launch) has already cut them to
    # the instance types CreateFleet may be offered.
    overrides: list[tuple[str, str, str]]
    bootstrap: amifamily.NodeBootstrap
    # Pods each instance type takes: the kubelet's maxPods, so one launch template per distinct value.
    max_pods: Mapping[str, int] = field(default_factory=dict)
    # ClientToken; a retry of a failed fleet within one launch needs a fresh one (EC2 would answer the
    # first request's result again).
    client_token: str | None = None


def tag_filters(tags: Mapping[str, str]) -> list[dict[str, Any]]:
    """EC2 filters for a selector term's tags (``*``: the key with any value)."""
    filters = []
    for key, value in tags.items():
        if value == "*":
            filters.append({"Name": "tag-key", "Values": [key]})
        else:
            filters.append({"Name": f"tag:{key}", "Values": [value]})
    return filters


def tags_of(tags: Iterable[Mapping[str, str]] | None) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in tags or []}


def tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def cluster_tags(cluster_name: str) -> dict[str, str]:
    """The tags that mark a resource as this cluster's (the stack's IAM conditions match on them)."""
    return {f"{wk.TAG_CLUSTER_PREFIX}{cluster_name}": "owned", wk.TAG_EKS_CLUSTER_NAME: cluster_name}
