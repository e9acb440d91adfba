"""Disruption candidates: which nodes a method may consider, and what blocks each one. Pure.

A candidate is an Initialized NodeClaim with a Node, owned by a NodePool that still exists, not being
deleted and not part of a disruption command already under way. What blocks a candidate depends on
the method: graceful methods (drift, consolidation) respect ``karpenter.sh/do-not-disrupt`` and PDBs that
forbid evictions, except that drift, an eventual method, ignores the pods' blockers on a NodeClaim with a
``terminationGracePeriod`` (the grace period forces them out, as Karpenter's ``NewCandidate``);
consolidation also refuses pods without a controller and nodes whose last pod event is more recent than
consolidateAfter (and, off by default and beyond Karpenter, nodes younger than ``min_node_age``).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from serverless_karpenter.api import labels as wk
from serverless_karpenter.api.ec2nodeclass import EC2NodeClass
from serverless_karpenter.api.nodepool import NodePool
from serverless_karpenter.disruption.command import read_command
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter.scheduling.scheduler import NodePoolTemplate
from serverless_karpenter.termination.handoff import (
    do_not_disrupt_active,
    is_reschedulable,
    pdb_key,
    pdb_selects,
)

# Record annotations that carry disruption state from one invocation to the next (the command's:
# ``command.COMMAND_ANNOTATION``).
POD_SET_ANNOTATION = "serverless-karpenter.io/pod-set"
POD_EVENT_ANNOTATION = "serverless-karpenter.io/last-pod-event"
REPLACEMENT_FOR_ANNOTATION = "serverless-karpenter.io/replacement-for"


class ResolvedNodeClassLike(Protocol):
    @property
    def amis(self) -> dict[str, str]: ...
    @property
    def security_group_ids(self) -> list[str]: ...
    @property
    def zones(self) -> list[str]: ...
    @property
    def subnets(self) -> Sequence[Any]: ...


@dataclass(frozen=True)
class InstanceNetwork:
    subnet_id: str | None
    security_group_ids: frozenset[str]


@dataclass(frozen=True)
class Options:
    """Knobs, Karpenter's and ours (documented in docs and config.Settings)."""

    # Karpenter's rule is a strictly cheaper replacement; a margin on top is ours, off by default.
    min_savings_percent: float = 0.0
    # consolidateAfter is the user's churn guard (Karpenter has no other); a minimum age is ours, off.
    min_node_age: timedelta = timedelta(0)
    spot_to_spot: bool = False
    same_type_replacement: bool = False
    # Karpenter's commandValidationDelay and pollingPeriod.
    validation_delay: timedelta = timedelta(seconds=15)
    poll_interval: timedelta = timedelta(seconds=10)
    replacement_timeout: timedelta = timedelta(minutes=10)
    spot_to_spot_min_types: int = 15
    # Compute time one pass may spend simulating multi-node and single-node consolidation. Karpenter
    # bounds them at 1 and 3 minutes; a quarter of those here, so that a pass that starts as its
    # invocation's loop ends still finishes under the disruption lease (120 s past the loop). Simulations
    # grow with the cluster (issue 22: 1,000 nodes took minutes a pass, unbounded).
    multi_node_timeout: timedelta = timedelta(seconds=15)
    single_node_timeout: timedelta = timedelta(seconds=45)


@dataclass
class Snapshot:
    """Everything one disruption pass reads, gathered by the use case."""

    now: datetime
    records: list[NodeClaimRecord]
    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]  # bound, non-terminal
    nodepools: dict[str, NodePool]
    nodepool_manifests: dict[str, dict[str, Any]]
    nodeclasses: dict[str, EC2NodeClass]
    resolved: Mapping[str, ResolvedNodeClassLike]
    pdbs: list[dict[str, Any]]
    templates: Sequence[NodePoolTemplate]
    instance_network: dict[str, InstanceNetwork] = field(default_factory=dict)
    # Provisionable pods: a disruption's simulation places them too, so it never counts on capacity
    # launched for them (Karpenter's SimulateScheduling starts from the pending pods).
    pending: list[dict[str, Any]] = field(default_factory=list)
    # What the simulations of one pass work out alike from this snapshot (the nodes that stay, as
    # capacity), kept for the next one; a view made with ``dataclasses.replace`` starts empty.
    memo: dict[str, Any] = field(init=False, default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._nodes = {n["metadata"]["name"]: n for n in self.nodes}
        self._pods_by_node: dict[str, list[dict[str, Any]]] = {}
        for pod in self.pods:
            name = podlib.node_name(pod)
            if name:
                self._pods_by_node.setdefault(name, []).append(pod)

    def node(self, name: str | None) -> dict[str, Any] | None:
        return self._nodes.get(name) if name else None

    def pods_on(self, node_name: str) -> list[dict[str, Any]]:
        return list(self._pods_by_node.get(node_name, []))

    def leaving(self) -> set[str]:
        """Nodes on their way out: being deleted, or their NodeClaim deleting or in a command. Their
        pods need a place too, and they are no place for other pods."""
        names = {n["metadata"]["name"] for n in self.nodes if n["metadata"].get("deletionTimestamp")}
        names |= {r.node_name for r in self.records if r.node_name and (r.is_deleting or in_command(r))}
        return names


@dataclass
class Candidate:
    record: NodeClaimRecord
    node: dict[str, Any]
    nodepool: NodePool
    pods: list[dict[str, Any]]
    last_pod_event: datetime

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def node_name(self) -> str:
        return str(self.node["metadata"]["name"])

    @property
    def reschedulable(self) -> list[dict[str, Any]]:
        return [p for p in self.pods if is_reschedulable(p)]

    @property
    def instance_type(self) -> str:
        return self.record.instance_type or "?"

    @property
    def capacity_type(self) -> str:
        return self.record.capacity_type or wk.CAPACITY_TYPE_ON_DEMAND

    @property
    def price(self) -> float:
        return self.record.price_per_hour if self.record.price_per_hour is not None else float("inf")

    def describe(self) -> str:
        return f"{self.instance_type} {self.capacity_type} ${self.price:.4f}/h"

    def disruption_cost(self) -> tuple[int, float, str]:
        # Karpenter prefers the nodes whose disruption evicts the least; among equals, the dearest.
        return (len(self.reschedulable), -self.price, self.name)


def pending_command(record: NodeClaimRecord) -> dict[str, Any] | None:
    """The record's disruption command as its annotation's JSON object, for readers outside the core
    (the simulator's checks); the core reads it typed, with ``command.read_command``."""
    command = read_command(record)
    return command.to_json() if command is not None else None


def pod_fingerprint(pods: Sequence[Mapping[str, Any]]) -> str:
    keys = sorted(podlib.key(p) for p in pods if not podlib.is_daemonset_pod(p))
    return hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16]


def observe_pod_events(
    record: NodeClaimRecord, pods: Sequence[Mapping[str, Any]], now: datetime
) -> dict[str, str] | None:
    """The record's new annotations when its node's pods changed since the last pass, else None.

    Deleted pods leave no trace in the API, so the last pod event is observed: each pass fingerprints
    the node's non-DaemonSet pods, and a change stamps the time of the pass that saw it (so it is late
    by at most one disruption interval).
    """
    fingerprint = pod_fingerprint(pods)
    if record.annotations.get(POD_SET_ANNOTATION) == fingerprint:
        return None
    return {
        **record.annotations,
        POD_SET_ANNOTATION: fingerprint,
        POD_EVENT_ANNOTATION: now.isoformat(),
    }


def last_pod_event(record: NodeClaimRecord, pods: Sequence[Mapping[str, Any]]) -> datetime:
    """The latest of: initialization, any pod's start on the node, the last observed pod-set change."""
    times = [record.initialized_at or record.registered_at or record.created_at]
    times += [t for p in pods if not podlib.is_daemonset_pod(p) and (t := podlib.started(p)) is not None]
    observed = record.annotations.get(POD_EVENT_ANNOTATION)
    if observed:
        with contextlib.suppress(ValueError):
            times.append(datetime.fromisoformat(observed))
    return max(times)


def in_command(record: NodeClaimRecord) -> bool:
    return read_command(record) is not None and not record.is_deleting


def candidates(snapshot: Snapshot) -> tuple[list[Candidate], dict[str, str]]:
    """Candidates, and why each other NodeClaim (by name) is not one."""
    out: list[Candidate] = []
    skipped: dict[str, str] = {}
    for record in snapshot.records:
        if record.state != NodeClaimState.INITIALIZED:
            if record.state != NodeClaimState.TERMINATED:
                skipped[record.name] = f"nodeclaim is {record.state.value}, not Initialized"
            continue
        node = snapshot.node(record.node_name)
        if node is None:
            skipped[record.name] = "nodeclaim has no node"
            continue
        if node["metadata"].get("deletionTimestamp"):
            skipped[record.name] = "node is being deleted"
            continue
        nodepool = snapshot.nodepools.get(record.nodepool)
        if nodepool is None:
            skipped[record.name] = f'nodepool "{record.nodepool}" does not exist'
            continue
        if in_command(record):
            command = pending_command(record) or {}
            skipped[record.name] = (
                f"already part of a {command.get('method')} command ({command.get('stage', 'validating')})"
            )
            continue
        pods = snapshot.pods_on(node["metadata"]["name"])
        out.append(Candidate(record, node, nodepool, pods, last_pod_event(record, pods)))
    return out, skipped


# --- blockers -------------------------------------------------------------------------------------------


def pdb_blocking(pod: Mapping[str, Any], pdbs: Sequence[Mapping[str, Any]]) -> str | None:
    """The PDB (``namespace/name``) that forbids evicting ``pod`` now, read from its status."""
    for pdb in pdbs:
        if not pdb_selects(pdb, pod):
            continue
        status = pdb.get("status") or {}
        if int(status.get("disruptionsAllowed") or 0) <= 0:
            return pdb_key(pdb)
    return None


@dataclass(frozen=True)
class Blocker:
    kind: str  # metric dimension: DoNotDisrupt, PDB, NoController, NodeAge, ConsolidateAfter, Policy, Budget
    message: str


def graceful_blocker(
    candidate: Candidate, pdbs: Sequence[Mapping[str, Any]], now: datetime, *, eventual: bool = False
) -> Blocker | None:
    """What blocks drift and consolidation of the candidate: annotations and PDBs.

    ``eventual`` (drift): on a NodeClaim with a terminationGracePeriod the pods' do-not-disrupt and PDBs
    do not block, since the grace period bounds how long they can hold the drain (Karpenter's
    ``NewCandidate`` ignores pod eviction blockers for the eventual class). The node's own annotation
    still blocks."""
    annotations = candidate.node["metadata"].get("annotations") or {}
    if (annotations.get(wk.DO_NOT_DISRUPT) or "").strip().lower() == "true":
        return Blocker(
            "DoNotDisrupt", f'node {candidate.node_name} has annotation {wk.DO_NOT_DISRUPT}="true"'
        )
    if eventual and candidate.record.termination_grace_period_seconds is not None:
        return None
    for pod in candidate.reschedulable:
        value = ((pod.get("metadata") or {}).get("annotations") or {}).get(wk.DO_NOT_DISRUPT)
        if do_not_disrupt_active(pod, now):
            return Blocker(
                "DoNotDisrupt", f'pod {podlib.key(pod)} has annotation {wk.DO_NOT_DISRUPT}="{value}"'
            )
    for pod in candidate.reschedulable:
        pdb = pdb_blocking(pod, pdbs)
        if pdb is not None:
            return Blocker("PDB", f"pdb {pdb} prevents pod evictions (pod {podlib.key(pod)})")
    return None


def consolidation_blocker(candidate: Candidate, options: Options, now: datetime) -> Blocker | None:
    """What keeps the candidate from emptiness and consolidation beyond the graceful blockers."""
    consolidate_after = candidate.nodepool.consolidate_after_timedelta()
    if consolidate_after is None:
        return Blocker(
            "ConsolidateAfter", f'nodepool "{candidate.nodepool.metadata.name}" has consolidateAfter: Never'
        )
    born = candidate.record.initialized_at or candidate.record.created_at
    if now - born < options.min_node_age:
        return Blocker(
            "NodeAge",
            f"node is {int((now - born).total_seconds())}s old, younger than minNodeAge "
            f"{int(options.min_node_age.total_seconds())}s",
        )
    ready_at = candidate.last_pod_event + consolidate_after
    if now < ready_at:
        return Blocker(
            "ConsolidateAfter",
            f"last pod event {int((now - candidate.last_pod_event).total_seconds())}s ago; consolidateAfter "
            f"{int(consolidate_after.total_seconds())}s not elapsed",
        )
    return None


def no_controller_blocker(candidate: Candidate) -> Blocker | None:
    for pod in candidate.reschedulable:
        if podlib.owner_kind(pod) is None:
            return Blocker("NoController", f"pod {podlib.key(pod)} has no controller")
    return None


def expired(candidate_record: NodeClaimRecord, nodepool: NodePool, now: datetime) -> timedelta | None:
    """How far past expireAfter the NodeClaim is, or None when it has not expired."""
    if candidate_record.expire_after_seconds is not None:
        expire_after: timedelta | None = timedelta(seconds=candidate_record.expire_after_seconds)
    else:
        expire_after = nodepool.expire_after_timedelta()
    if expire_after is None:
        return None
    overdue = now - (candidate_record.created_at + expire_after)
    return overdue if overdue >= timedelta(0) else None
