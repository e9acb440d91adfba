"""What the lifecycle pass's sub-reconcilers share: the pass's view of the cluster (``LifecyclePass``),
what it reports (``LifecycleResult``), and the two shapes of sub-reconciler.

A ``Phase`` moves one NodeClaim record on, as each of Karpenter's lifecycle sub-reconcilers (launch,
registration, initialization, liveness) does one NodeClaim. A record takes at most one step a pass: the
first phase that acts on it decides what is left of it (the record as it left it, or None once it is no
longer live); a phase that has nothing to do with it returns ``NEXT``. The steps after them run once a
pass over everything the phases left (garbage collection, the NodeClaim mirror, the NodePools' status).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from serverless_karpenter.adapters.providers.model import Instance, ResolvedNodeClass
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.lifecycle.nodeclaim_writer import NodeClaimObjects, SyncResult
from serverless_karpenter.observability import MetricName, MetricUnit, Msg, logger, metrics
from serverless_karpenter.provisioning.context import ControlPlane
from serverless_karpenter.termination.terminator import TERMINATED_RETENTION


@dataclass
class LifecycleResult:
    launched: list[str] = field(default_factory=list)
    registered: list[str] = field(default_factory=list)
    initialized: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    garbage_collected: list[str] = field(default_factory=list)
    launch_templates_deleted: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    finalized: list[str] = field(default_factory=list)
    # The NodeClaim objects mirrored from the records (lifecycle.nodeclaim_writer); None when not synced.
    objects: SyncResult | None = None
    # What the pass read, as it left it, for the provisioning that follows in the same invocation: the live
    # records after their transitions, the Nodes (patched or deleted by registration and clean-up) and the
    # EC2NodeClasses. Each is read once an invocation (issue 22).
    records: list[NodeClaimRecord] = field(default_factory=list, repr=False)
    nodes: list[dict[str, Any]] = field(default_factory=list, repr=False)
    nodeclass_specs: list[dict[str, Any]] = field(default_factory=list, repr=False)
    # Listed only when a Pending record was launched (its NodePool's startupTaints).
    nodepools: list[dict[str, Any]] | None = field(default=None, repr=False)


class Next:
    """A phase's answer when the record is not its business: the next phase looks at it."""

    def __repr__(self) -> str:
        return "NEXT"


NEXT: Final = Next()
Outcome = NodeClaimRecord | None | Next


@dataclass
class LifecyclePass:
    """One pass's reading of the cluster, and what its sub-reconcilers changed of it."""

    plane: ControlPlane
    result: LifecycleResult
    objects: NodeClaimObjects
    listed: list[dict[str, Any]]  # the Nodes as listed
    records: list[NodeClaimRecord]  # the live records, adopted ones included
    instances: dict[str, Instance]  # by instance id, terminated ones included
    instances_by_claim: dict[str | None, Instance]  # by NodeClaim tag, the ones not gone
    nodes: dict[str, dict[str, Any]]  # by providerID
    resolved: dict[str, ResolvedNodeClass | None]
    claims: list[dict[str, Any]]  # the NodeClaim objects
    claimed_instances: set[str] = field(default_factory=set)  # instances some NodeClaim object names
    # Nodes the phases patched (the new object) or deleted (None), for the pass's view of the Nodes.
    updated_nodes: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    nodepools: list[dict[str, Any]] | None = None  # listed after the phases; None when the LIST failed
    # Each EC2NodeClass with the status this pass gave it, for its NodePools' NodeClassReady.
    nodeclasses: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def node_of(self, record: NodeClaimRecord) -> Mapping[str, Any] | None:
        return self.nodes.get(record.provider_id or "")

    def close(self, record: NodeClaimRecord) -> None:
        """Mark the record Terminated (no longer live: None, for the pass's view of the records)."""
        now = self.plane.clock.now()
        self.plane.store.save(
            record.model_copy(
                update={
                    "state": NodeClaimState.TERMINATED,
                    "terminated_at": now,
                    "expires_at": now + TERMINATED_RETENTION,
                }
            )
        )
        metrics.add_metric(name=MetricName.NODECLAIMS_TERMINATED, unit=MetricUnit.Count, value=1)
        logger.info(Msg.DELETED_NODECLAIM, extra={"nodeclaim": record.name})
        self.result.deleted.append(record.name)
        self.objects.release(record.name)


class Phase(Protocol):
    def reconcile(self, record: NodeClaimRecord, state: LifecyclePass) -> Outcome: ...
