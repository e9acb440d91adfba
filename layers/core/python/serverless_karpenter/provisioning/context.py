"""What the provisioning and lifecycle use cases need from the outside world: narrow interfaces."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from serverless_karpenter.adapters.ec2 import FleetLauncher, NodeClassResolver, ResolvedNodeClass
from serverless_karpenter.adapters.invoker import NoProvisionerInvoker
from serverless_karpenter.adapters.kubernetes import KubernetesGateway
from serverless_karpenter.adapters.state_store import NodeClaimStore
from serverless_karpenter.clock import Clock
from serverless_karpenter.config import Settings
from serverless_karpenter.scheduling.scheduler import InstanceTypeLike


class ProvisionerInvoker(Protocol):
    """Asks the provisioner for a pass now, asynchronously (adapters/invoker.py: a Lambda invocation; the
    simulator runs it in-process). The watcher, termination and disruption wake it this way."""

    def invoke(self, payload: Mapping[str, object]) -> None: ...


class InstanceTypeProvider(Protocol):
    def instance_types(
        self, nodeclass: ResolvedNodeClass, spec: Mapping[str, Any]
    ) -> Sequence[InstanceTypeLike]:
        """The instance types usable with this node class, offerings in its zones, availability applied."""
        ...

    def mark_unavailable(self, capacity_type: str, instance_type: str, zone: str, reason: str) -> None: ...

    def mark_capacity_type_unavailable(self, capacity_type: str, reason: str) -> None:
        """Every offering of the capacity type, in every zone, until the unavailable-offerings TTL."""
        ...

    def is_unavailable(self, capacity_type: str, instance_type: str, zone: str) -> bool: ...


@dataclass
class ControlPlane:
    """The adapters one invocation works with; built once per warm Lambda by the runtime."""

    settings: Settings
    clock: Clock
    kube: KubernetesGateway
    store: NodeClaimStore
    launcher: FleetLauncher
    resolver: NodeClassResolver
    instance_types: InstanceTypeProvider
    # A plane built by hand (tests, tools) wakes nothing; runtime.build_control_plane gives the Lambda one.
    provisioner: ProvisionerInvoker = field(default_factory=NoProvisionerInvoker)
