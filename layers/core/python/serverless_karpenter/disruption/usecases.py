"""The disruption loop: gather a snapshot, expire, advance the commands under way, decide a new one.

Karpenter's disruption controller polls every 10 s and requeues at once after it acts. Here one
invocation runs passes for ``disruption_loop_seconds`` (the schedule starts one a minute), sleeping
between passes until the next thing is due: 10 s, a command's validation (15 s after its decision), or
the moment a node's ``consolidateAfter`` runs out; after a pass that acted, the next follows at once.
The simulator runs one pass an invocation and honours the same hint (``nextPassSeconds``).

What must outlive an invocation is on the NodeClaim records:
- ``serverless-karpenter.io/disruption-command`` on each candidate: the command's method, action and
  stage (``validating`` until re-simulated ``validation_delay`` after its decision, then ``replacing``
  while its replacements launch and initialize);
- the NodePool and EC2NodeClass hashes (``karpenter.sh/nodepool-hash``,
  ``karpenter.k8s.aws/ec2nodeclass-hash``), stamped on the record when first seen, for drift;
- the fingerprint of the node's pods and when it last changed, for consolidateAfter.

Several commands proceed at once, each within its NodePool's budget: candidates in a command are no
candidates for another, and every simulation counts their pods as needing a place. Drift, an eventual
method, acts without validation, as Karpenter's. Acting reuses the termination path: ``begin_deletion``
marks the record Disrupting and deletes the Node, and the Terminator drains it honouring PDBs and
do-not-disrupt. A ``replace`` launches its replacements first and deletes the old nodes only once they
are Initialized.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, overload

from serverless_karpenter import deployment
from serverless_karpenter.adapters.state_store import ConflictError, Lease
from serverless_karpenter.api.ec2nodeclass import EC2NodeClass
from serverless_karpenter.api.errors import ManifestError
from serverless_karpenter.api.nodepool import NodePool
from serverless_karpenter.disruption import methods as m
from serverless_karpenter.disruption.budgets import REASON_EXPIRED
from serverless_karpenter.disruption.candidates import (
    REPLACEMENT_FOR_ANNOTATION,
    Candidate,
    InstanceNetwork,
    Options,
    Snapshot,
    candidates,
    expired,
    in_command,
    observe_pod_events,
)
from serverless_karpenter.disruption.command import (
    STAGE_REPLACING,
    STAGE_VALIDATING,
    DisruptionCommand,
    read_command,
    with_command,
)
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.lifecycle.nodeclaim_writer import NodeClaimObjects
from serverless_karpenter.observability import MetricName, Msg, emit_dimensioned, logger, tracer
from serverless_karpenter.provisioning.context import ControlPlane
from serverless_karpenter.provisioning.provisioner import (
    Provisioner,
    build_templates,
    drift_hashes,
    nodepool_usage,
)
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter.scheduling.scheduler import NodePoolTemplate
from serverless_karpenter.termination.handoff import has_disrupted_taint
from serverless_karpenter.termination.terminator import begin_deletion, set_disrupted_taint

LEASE_NAME = "disruption"
# Held for the loop and this much more: a pass that overruns the loop still finishes under the lease.
LEASE_SECONDS = 120.0
# A pass that acted is followed at once, yet never in a tight loop against the API server.
MIN_SLEEP_SECONDS = 1.0


@dataclass
class DisruptionRun:
    leader: bool = True
    expired: list[str] = field(default_factory=list)
    decided: list[str] = field(default_factory=list)  # "method: action nodeclaims"
    executed: list[str] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    replacements: list[str] = field(default_factory=list)
    untainted: list[str] = field(default_factory=list)  # nodes whose orphaned disrupted taint was removed
    passes: int = 0
    # When the next pass is due, in seconds (the loop sleeps that long; the simulator schedules it).
    next_pass_seconds: float = 10.0
    # No candidate and no command: the loop ends and the schedule's next invocation looks again, so
    # a cluster without nodes pays for one short pass a minute, not a loop (Lambda bills the sleep).
    idle: bool = False

    @property
    def acted(self) -> bool:
        return bool(self.expired or self.decided or self.executed or self.aborted or self.replacements)

    def absorb(self, other: DisruptionRun) -> None:
        for name in ("expired", "decided", "executed", "aborted", "replacements", "untainted"):
            getattr(self, name).extend(getattr(other, name))
        self.passes += other.passes
        self.next_pass_seconds = other.next_pass_seconds
        self.idle = other.idle

    def to_json(self) -> dict[str, Any]:
        return {
            "leader": self.leader,
            "passes": self.passes,
            "nextPassSeconds": self.next_pass_seconds,
            "idle": self.idle,
            "expired": self.expired,
            "decided": self.decided,
            "executed": self.executed,
            "aborted": self.aborted,
            "replacements": self.replacements,
            "untainted": self.untainted,
        }


def options_from(plane: ControlPlane) -> Options:
    settings = plane.settings
    return Options(
        min_savings_percent=settings.min_savings_percent,
        min_node_age=timedelta(seconds=settings.min_node_age_seconds),
        spot_to_spot=settings.spot_to_spot_consolidation,
        same_type_replacement=settings.same_type_replacement,
        poll_interval=timedelta(seconds=settings.disruption_poll_interval_seconds),
    )


# --- the snapshot -------------------------------------------------------------------------------------------


# Instance id -> (when described, its subnet and security groups). A pass runs every 10 s; an instance's
# network changes rarely (a user's ModifyInstanceAttribute), so drift by network is seen within a minute
# for a DescribeInstances a minute, not one a pass. Kept while the Lambda container lives.
_NETWORK_TTL = timedelta(seconds=60)
_network_cache: dict[str, tuple[datetime, InstanceNetwork]] = {}


def _instance_network(plane: ControlPlane, records: Sequence[NodeClaimRecord]) -> dict[str, InstanceNetwork]:
    ids = [r.instance_id for r in records if r.instance_id and r.state == NodeClaimState.INITIALIZED]
    now = plane.clock.now()
    stale = [i for i in ids if i not in _network_cache or now - _network_cache[i][0] >= _NETWORK_TTL]
    if stale:
        try:
            for instance_id, instance in plane.launcher.cluster_instances(stale).items():
                network = InstanceNetwork(instance.subnet_id, instance.security_group_ids)
                _network_cache[instance_id] = (now, network)
        except Exception as error:  # drift by network is worth a retry next pass, never a failed pass
            logger.warning("could not describe instances for drift", extra={"error": str(error)})
    for gone in set(_network_cache) - set(ids):
        del _network_cache[gone]
    return {i: _network_cache[i][1] for i in ids if i in _network_cache}


class DeferredTemplates(Sequence[NodePoolTemplate]):
    """The NodePools' templates (instance types, DaemonSet overhead), built on first use: only a pass
    that simulates needs them, and most passes simulate nothing."""

    def __init__(self, build: Callable[[], list[NodePoolTemplate]]) -> None:
        self._build = build
        self._templates: list[NodePoolTemplate] | None = None

    def _items(self) -> list[NodePoolTemplate]:
        if self._templates is None:
            self._templates = self._build()
        return self._templates

    @overload
    def __getitem__(self, index: int) -> NodePoolTemplate: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[NodePoolTemplate]: ...
    def __getitem__(self, index: int | slice) -> NodePoolTemplate | Sequence[NodePoolTemplate]:
        return self._items()[index]

    def __len__(self) -> int:
        return len(self._items())


def take_snapshot(plane: ControlPlane, *, network: bool = True) -> Snapshot:
    kube = plane.kube
    now = plane.clock.now()
    manifests = {p["metadata"]["name"]: p for p in kube.list_nodepools()}
    nodepools: dict[str, NodePool] = {}
    for name, manifest in manifests.items():
        try:
            nodepools[name] = NodePool.model_validate(manifest)
        except (ManifestError, ValueError) as error:
            logger.warning(
                "invalid NodePool ignored by disruption", extra={"nodepool": name, "error": str(error)}
            )
    specs = {nc["metadata"]["name"]: nc for nc in kube.list_ec2nodeclasses()}
    nodeclasses: dict[str, EC2NodeClass] = {}
    resolved = {}
    for name, spec in specs.items():
        try:
            nodeclasses[name] = EC2NodeClass.model_validate(spec)
            # Disruption only reads: the provisioner creates a spec.role's instance profile before a launch.
            resolved[name] = plane.resolver.resolve(spec, manage_instance_profile=False)
        except (ManifestError, ValueError) as error:
            logger.warning("EC2NodeClass not ready", extra={"ec2nodeclass": name, "error": str(error)})
    records = plane.store.list_live()
    nodes = kube.list_nodes()
    usage = nodepool_usage(nodes, records)
    templates = DeferredTemplates(
        lambda: build_templates(
            [manifests[n] for n in nodepools], resolved, specs, plane, kube.list_daemonsets(), usage
        )[0]
    )
    # One LIST of the pods, bound and pending both (two disjoint field-selected LISTs read the same).
    every_pod = kube.list_pods()
    pods = [p for p in every_pod if podlib.node_name(p) and not podlib.is_terminal(p)]
    pending = [
        p
        for p in every_pod
        if (p.get("status") or {}).get("phase") == "Pending" and podlib.is_provisionable(p)
    ]
    return Snapshot(
        now=now,
        records=records,
        nodes=nodes,
        pods=pods,
        nodepools=nodepools,
        nodepool_manifests={n: manifests[n] for n in nodepools},
        nodeclasses=nodeclasses,
        resolved=resolved,
        pdbs=kube.list_pdbs(),
        templates=templates,
        instance_network=_instance_network(plane, records) if network else {},
        pending=pending,
    )


def _save(
    plane: ControlPlane, record: NodeClaimRecord, annotations: dict[str, str]
) -> NodeClaimRecord | None:
    try:
        return plane.store.save(record.model_copy(update={"annotations": annotations}))
    except ConflictError:
        return None  # somebody moved it on; the next pass sees the new version


def stamp_records(plane: ControlPlane, snapshot: Snapshot) -> None:
    """Hashes for drift on records that lack them, and pod-set changes for consolidateAfter.

    The provisioner writes the hashes with each record; this stamps records written before it did (or
    while a NodePool or EC2NodeClass did not parse) at first sight.
    """
    updated: list[NodeClaimRecord] = []
    for record in snapshot.records:
        if record.state not in (NodeClaimState.REGISTERED, NodeClaimState.INITIALIZED):
            updated.append(record)
            continue
        # Hashes the record already carries win: they are what it was made from.
        hashes = drift_hashes(
            snapshot.nodepools.get(record.nodepool), snapshot.nodeclasses.get(record.nodeclass)
        )
        annotations = {**hashes, **record.annotations}
        if record.node_name:
            pods = snapshot.pods_on(record.node_name)
            annotations = (
                observe_pod_events(record.model_copy(update={"annotations": annotations}), pods, snapshot.now)
                or annotations
            )
        if annotations != record.annotations:
            saved = _save(plane, record, annotations)
            updated.append(saved or record)
        else:
            updated.append(record)
    snapshot.records = updated


# --- acting ---------------------------------------------------------------------------------------------


def _log_decision(command: m.Command, stage: str) -> None:
    logger.info(
        Msg.DISRUPTING_NODECLAIMS.format(method=command.method),
        extra={
            "decision": command.action,
            "stage": stage,
            "nodeclaims": command.names(),
            "nodes": [c.node_name for c in command.candidates],
            "pods": sum(len(c.reschedulable) for c in command.candidates),
            "replacements": len(command.replacements),
            "detail": command.detail,
        },
    )


def _mark(plane: ControlPlane, records: Sequence[NodeClaimRecord], command: DisruptionCommand | None) -> bool:
    ok = True
    for record in records:
        ok = _save(plane, record, with_command(record, command)) is not None and ok
    return ok


def _taint(plane: ControlPlane, records: Sequence[NodeClaimRecord], present: bool) -> None:
    for record in records:
        if record.node_name:
            set_disrupted_taint(plane, record.node_name, present)


def _abandon(plane: ControlPlane, records: Sequence[NodeClaimRecord]) -> None:
    """Drop the command from its records and let their nodes take pods again."""
    _mark(plane, records, None)
    _taint(plane, records, False)


def untaint_orphans(plane: ControlPlane, snapshot: Snapshot) -> list[str]:
    """Take the disrupted taint off nodes that no command or deletion holds any more: a pass that
    tainted a command's candidates and then crashed, or a command dropped part-way. Only our own taint
    on our own NodeClaims' nodes; each record is read again first, as a deletion may have begun since
    the snapshot (the terminator taints such a node anyway)."""
    tainted = [
        n["metadata"]["name"]
        for n in snapshot.nodes
        if has_disrupted_taint(n) and not n["metadata"].get("deletionTimestamp")
    ]
    if not tainted:
        return []  # every pass looks; almost every pass finds nothing
    by_node = {r.node_name: r for r in snapshot.records if r.node_name}
    untainted: list[str] = []
    for name in tainted:
        record = by_node.get(name)
        if record is None or record.is_deleting or in_command(record):
            continue
        fresh = plane.store.get(record.name)
        if fresh is None or fresh.is_deleting or in_command(fresh):
            continue
        if set_disrupted_taint(plane, name, False):
            untainted.append(name)
    return untainted


Wake = Callable[[dict[str, object]], None]


def _request_replacements(
    plane: ControlPlane, snapshot: Snapshot, command: m.Command, command_id: str, wake: Wake
) -> list[str]:
    """Write the replacements' NodeClaim records, Pending, and wake the provisioner; their names.

    The provisioner's lifecycle reconcile launches them (it launches every Pending record), as it holds
    the launch rights: the disruption role has none (policies.py), so a CreateFleet from here is refused
    on AWS and every replacing command was abandoned (issue 17). Woken now, it launches them at once
    rather than at its next scheduled run.
    """
    provisioner = Provisioner(plane)
    names: list[str] = []
    for claim in command.replacements:
        record = provisioner.create_record(
            claim, snapshot.nodepools.get(claim.nodepool), snapshot.nodeclasses.get(claim.nodeclass)
        )
        if record is None:
            continue
        annotations = {**record.annotations, REPLACEMENT_FOR_ANNOTATION: command_id}
        plane.store.save(record.model_copy(update={"annotations": annotations}))
        names.append(record.name)
    if names:
        _wake(wake, {"reason": "disruption-replacements", "nodeclaims": names})
    return names


def _wake(wake: Wake, payload: dict[str, object]) -> None:
    try:
        wake(payload)
    except Exception as error:  # the provisioner's schedule does it within a minute anyway
        logger.warning("could not wake the provisioner", extra={"error": str(error)})


def _delete(
    plane: ControlPlane, command: m.Command | DisruptionCommand, records: Sequence[NodeClaimRecord]
) -> None:
    method = command.method
    reason = m.BUDGET_REASON.get(method, REASON_EXPIRED)
    for record in records:
        try:
            begin_deletion(plane, record, reason)
        except ConflictError:
            continue
        emit_dimensioned(MetricName.DISRUPTION_ACTIONS, 1, {"Method": method})


def _records_by_name(plane: ControlPlane) -> dict[str, NodeClaimRecord]:
    return {r.name: r for r in plane.store.list_live()}


def expire(plane: ControlPlane, snapshot: Snapshot, pool: Sequence[Candidate], run: DisruptionRun) -> None:
    """Expiration is forceful: no budgets, no validation; the terminator still honours PDBs."""
    for candidate, _ in m.Expiration().due(snapshot, pool):
        logger.info(
            Msg.DISRUPTING_NODECLAIMS.format(method=m.EXPIRATION),
            extra={"decision": "delete", "nodeclaims": [candidate.name], "node": candidate.node_name},
        )
        try:
            begin_deletion(plane, candidate.record, REASON_EXPIRED)
        except ConflictError:
            continue
        emit_dimensioned(MetricName.DISRUPTION_ACTIONS, 1, {"Method": m.EXPIRATION})
        run.expired.append(candidate.name)


def _validation_due(command: DisruptionCommand, now: datetime, options: Options) -> timedelta:
    """How long until the command's validation is due (due at once when its decision time is lost)."""
    if command.decided_at is None:
        return timedelta(0)
    return command.decided_at + options.validation_delay - now


def commands_under_way(snapshot: Snapshot) -> dict[str, tuple[DisruptionCommand, list[NodeClaimRecord]]]:
    """Command id -> (the command, its candidates' records not yet deleting)."""
    groups: dict[str, tuple[DisruptionCommand, list[NodeClaimRecord]]] = {}
    for record in snapshot.records:
        command = read_command(record)
        if command is None or record.is_deleting or record.state == NodeClaimState.TERMINATED:
            continue
        groups.setdefault(command.id, (command, []))[1].append(record)
    return groups


def advance_commands(
    plane: ControlPlane, snapshot: Snapshot, options: Options, run: DisruptionRun, wake: Wake
) -> None:
    """Validate the commands whose validation is due, and finish those whose replacements are up.

    Each validation reads the cluster as the commands before it in this pass left it: one that acted
    takes budget (and perhaps capacity) a later one must see, or two commands validated on the same
    snapshot could together exceed a budget that each alone respects."""
    for command_id in list(commands_under_way(snapshot)):
        current = commands_under_way(snapshot).get(command_id)
        if current is None:
            continue  # abandoned or carried out by an earlier step of this pass
        command, records = current
        acted = (len(run.executed), len(run.aborted), len(run.replacements))
        if command.validating:
            if _validation_due(command, snapshot.now, options) <= timedelta(0):
                validate(plane, snapshot, options, command_id, command, records, run, wake)
        elif command.replacing:
            finish_replacement(plane, snapshot, options, command_id, command, records, run, wake)
        if (len(run.executed), len(run.aborted), len(run.replacements)) != acted:
            snapshot = take_snapshot(plane, network=False)


def validate(
    plane: ControlPlane,
    snapshot: Snapshot,
    options: Options,
    command_id: str,
    command: DisruptionCommand,
    records: list[NodeClaimRecord],
    run: DisruptionRun,
    wake: Wake,
) -> None:
    """Re-simulate with the command's nodes as the only candidates; act when the decision holds.

    As Karpenter's validators: emptiness deletes those of its nodes still empty and within budget;
    consolidation needs every node still a candidate and the same decision, else it is abandoned.
    """
    names = {r.name for r in records}
    # Other commands keep their nodes; this one's nodes are candidates again.
    view = dataclasses.replace(
        snapshot,
        records=[
            r.model_copy(update={"annotations": with_command(r, None)}) if r.name in names else r
            for r in snapshot.records
        ],
    )
    pool, _ = candidates(view)
    pool = [c for c in pool if c.name in names]
    evaluation = m.evaluate(view, pool, options, methods=(command.method,))
    fresh = evaluation.command
    expected_names = sorted(command.candidates)
    if command.method == m.EMPTINESS:
        holds = fresh is not None and set(fresh.names()) <= set(expected_names)
    else:
        holds = (
            fresh is not None
            and fresh.names() == expected_names
            and fresh.action == command.action
            and len(pool) == len(names)
        )
    if fresh is None or not holds:
        why = (
            "; ".join(f"{n}: {t}" for n, notes in evaluation.notes.items() for _, t in notes)
            or "candidates changed"
        )
        logger.info(
            "abandoning disruption command, validation failed",
            extra={"method": command.method, "nodeclaims": expected_names, "reason": why},
        )
        emit_dimensioned(MetricName.DISRUPTION_BLOCKED, 1, {"Reason": "ValidationFailed"})
        _abandon(plane, records)
        run.aborted.append(f"{command.method}: {', '.join(expected_names)}")
        return
    dropped = [r for r in records if r.name not in set(fresh.names())]
    if dropped:
        _abandon(plane, dropped)
    execute(plane, view, fresh, command_id, command, run, wake)


def execute(
    plane: ControlPlane,
    snapshot: Snapshot,
    command: m.Command,
    command_id: str,
    marker: DisruptionCommand,
    run: DisruptionRun,
    wake: Wake,
) -> None:
    """Delete the candidates, or launch the replacements first (Karpenter's queue.StartCommand)."""
    if command.action == "delete":
        _log_decision(command, "executing")
        _delete(plane, command, [c.record for c in command.candidates])
        run.executed.append(f"{command.method}: delete {', '.join(command.names())}")
        return
    _log_decision(command, "launching replacements")
    names = set(command.names())
    launched = _request_replacements(plane, snapshot, command, command_id, wake)
    fresh_records = _records_by_name(plane)
    current = [fresh_records[n] for n in names if n in fresh_records]
    if len(launched) != len(command.replacements):
        _abandon(plane, current)
        run.aborted.append(f"{command.method}: replacement launch failed for {', '.join(command.names())}")
        return
    # As Karpenter does, nothing new lands on the candidates while their replacements come up. Tainted
    # once the replacements are in flight, so the provisioner, which takes the pods of tainted nodes
    # as pending, finds room for them on the replacements rather than launching more.
    _taint(plane, current, True)
    _mark(
        plane,
        current,
        marker.model_copy(
            update={"stage": STAGE_REPLACING, "replacements": launched, "replacing_since": snapshot.now}
        ),
    )
    run.replacements.extend(launched)


def finish_replacement(
    plane: ControlPlane,
    snapshot: Snapshot,
    options: Options,
    command_id: str,
    command: DisruptionCommand,
    records: list[NodeClaimRecord],
    run: DisruptionRun,
    wake: Wake,
) -> None:
    """Replacements Initialized: delete the old nodes. A replacement gone or late: abandon the command.
    Still coming up: wake the provisioner, whose lifecycle reconcile registers and initializes them, so
    each step follows its node's progress rather than the provisioner's next scheduled run."""
    by_name = {r.name: r for r in snapshot.records}
    replacements = [by_name.get(n) for n in command.replacements or []]
    since = command.replacing_since
    failed = any(r is None or r.is_deleting or r.state == NodeClaimState.TERMINATED for r in replacements)
    # A replacing command that lost when it began cannot time out: abandoned as one that has.
    if failed or since is None or snapshot.now - since > options.replacement_timeout:
        logger.warning(
            "abandoning disruption command, replacement not initialized",
            extra={"method": command.method, "nodeclaims": command.candidates},
        )
        emit_dimensioned(MetricName.DISRUPTION_BLOCKED, 1, {"Reason": "ReplacementFailed"})
        _abandon(plane, records)
        run.aborted.append(f"{command.method}: replacement failed")
        return
    if all(r is not None and r.state == NodeClaimState.INITIALIZED for r in replacements):
        logger.info(
            Msg.DISRUPTING_NODECLAIMS.format(method=command.method),
            extra={
                "decision": "replace",
                "stage": "replacements initialized",
                "nodeclaims": command.candidates,
            },
        )
        _delete(plane, command, records)
        run.executed.append(f"{command.method}: replace {', '.join(sorted(r.name for r in records))}")
        return
    _wake(wake, {"reason": "disruption-replacements", "nodeclaims": list(command.replacements or [])})


# The blockers Karpenter reports as a DisruptionBlocked Event on the Node: what it checks of the node and
# its pods before any method (do-not-disrupt, PDBs). Budgets it reports on the NodePool. Consolidation's
# own reasons it reports as Unconsolidatable on the Node, where it has words for them (NodePool policy or
# consolidateAfter: Never, no cheaper replacement, spot-to-spot, pods that would not schedule: the
# Evaluation's ``unconsolidatable``); node age and a consolidateAfter not yet elapsed give no Event.
NODE_EVENT_BLOCKERS = frozenset({"DoNotDisrupt", "PDB"})
BUDGET_BLOCKER = "Budget"


def record_blocked(
    plane: ControlPlane, snapshot: Snapshot, pool: Sequence[Candidate], evaluation: m.Evaluation
) -> None:
    """Karpenter's Events for what kept this pass off each node, at most one per node per pass: a
    DisruptionBlocked on a node a do-not-disrupt or PDB blocks (the evaluation keeps the first blocking
    rule per NodeClaim), else an Unconsolidatable on a node consolidation considered and turned down; and
    a DisruptionBlocked on each NodePool whose budget blocks a disruption (one per NodePool per pass)."""
    budget_blocked: dict[str, str] = {}
    # Karpenter records each on the NodeClaim too (their uids remembered, read at most once a pass).
    claims: NodeClaimObjects | None = None
    for candidate in pool:
        blocker = evaluation.blockers.get(candidate.name)
        event: tuple[str, str] | None = None
        if blocker is not None and blocker.kind in NODE_EVENT_BLOCKERS:
            # One message on both, as Karpenter's disruption events.Blocked publishes it.
            event = ("DisruptionBlocked", f"Cannot disrupt Node: {blocker.message}")
            plane.kube.record_event(candidate.node, *event)
        else:
            if blocker is not None and blocker.kind == BUDGET_BLOCKER:
                budget_blocked.setdefault(candidate.record.nodepool, blocker.message)
            unconsolidatable = evaluation.unconsolidatable.get(candidate.name)
            if unconsolidatable is not None:
                plane.kube.record_event(candidate.node, "Unconsolidatable", unconsolidatable)
                event = ("Unconsolidatable", unconsolidatable)
        if event is not None:
            claims = claims or NodeClaimObjects(plane.kube, plane.clock)
            claims.event(candidate.record.name, *event)
    for name, message in sorted(budget_blocked.items()):
        manifest = snapshot.nodepool_manifests.get(name)
        if manifest is not None:
            plane.kube.record_event(
                manifest, "DisruptionBlocked", f"No allowed disruptions due to blocking budget: {message}"
            )


# The state in which the last pass decided nothing, and when; a pass in the same state skips deciding.
_nothing_to_do: tuple[tuple[Any, ...], datetime, m.Evaluation] | None = None
_RECHECK = timedelta(seconds=60)


def _node_key(node: Mapping[str, Any]) -> tuple[Any, ...]:
    meta, spec = node["metadata"], node.get("spec") or {}
    ready = next(
        (
            c.get("status")
            for c in (node.get("status") or {}).get("conditions") or []
            if c.get("type") == "Ready"
        ),
        None,
    )
    return (
        meta["name"],
        bool(meta.get("deletionTimestamp")),
        json.dumps(meta.get("labels") or {}, sort_keys=True),
        json.dumps(meta.get("annotations") or {}, sort_keys=True),
        json.dumps(spec.get("taints") or [], sort_keys=True),
        bool(spec.get("unschedulable")),
        ready,
    )


def _pod_key(pod: Mapping[str, Any]) -> tuple[Any, ...]:
    meta = pod.get("metadata") or {}
    return (
        podlib.key(pod),
        podlib.node_name(pod),
        (pod.get("status") or {}).get("phase"),
        bool(meta.get("deletionTimestamp")),
        json.dumps(meta.get("annotations") or {}, sort_keys=True),
    )


def _state_key(snapshot: Snapshot, pool: Sequence[Candidate], options: Options) -> tuple[Any, ...]:
    """Everything a decision reads, and what time changes of it: consolidateAfter and expiry per
    candidate, the budgets' allowances (cron windows)."""
    reasons = sorted(set(m.BUDGET_REASON.values()))
    return (
        options,
        tuple(sorted((r.name, r.state.value, r.version) for r in snapshot.records)),
        tuple(sorted(_node_key(n) for n in snapshot.nodes)),
        tuple(sorted(_pod_key(p) for p in [*snapshot.pods, *snapshot.pending])),
        tuple(
            sorted(
                (
                    p["metadata"].get("namespace"),
                    p["metadata"]["name"],
                    (p.get("status") or {}).get("disruptionsAllowed"),
                )
                for p in snapshot.pdbs
            )
        ),
        tuple(
            sorted(
                (n, json.dumps(mf, sort_keys=True, default=str))
                for n, mf in snapshot.nodepool_manifests.items()
            )
        ),
        tuple(sorted((n, nc.static_hash()) for n, nc in snapshot.nodeclasses.items())),
        tuple(
            sorted(
                (
                    n,
                    tuple(sorted(r.amis.items())),
                    tuple(sorted(r.security_group_ids)),
                    tuple(sorted(r.zones)),
                )
                for n, r in snapshot.resolved.items()
            )
        ),
        tuple(sorted(snapshot.instance_network.items())),
        tuple(
            (
                c.name,
                consolidation_ready(c, snapshot.now),
                expired(c.record, c.nodepool, snapshot.now) is not None,
            )
            for c in pool
        ),
        tuple(
            (n, r, m.budget_for(snapshot, n, r).allowed) for n in sorted(snapshot.nodepools) for r in reasons
        ),
    )


def consolidation_ready(candidate: Candidate, now: datetime) -> bool:
    after = candidate.nodepool.consolidate_after_timedelta()
    return after is not None and candidate.last_pod_event + after <= now


# A span of its own in the disruption function's X-Ray trace (the methods' simulations are most of a busy
# pass); its return value is not recorded. Disabled (outside Lambda, or POWERTOOLS_TRACE_DISABLED) the
# span is Powertools' no-op provider (observability._UntracedProvider): no X-Ray SDK, nothing recorded.
@tracer.capture_method(capture_response=False)
def decide(
    plane: ControlPlane,
    snapshot: Snapshot,
    options: Options,
    pool: Sequence[Candidate],
    run: DisruptionRun,
    wake: Wake,
) -> None:
    """Decide one command. Consolidation and emptiness wait out their validation on a later pass;
    drift acts at once (Karpenter validates only consolidation and emptiness).

    As Karpenter's IsConsolidated, a pass that finds the cluster as the last pass that decided nothing
    left it decides nothing again, without simulating (its Events and metrics are recorded again, as
    every pass records them); at least once a minute it looks afresh, for what time alone changes (a
    do-not-disrupt duration running out)."""
    global _nothing_to_do
    key = _state_key(snapshot, pool, options)
    if (
        _nothing_to_do is not None
        and _nothing_to_do[0] == key
        and timedelta(0) <= snapshot.now - _nothing_to_do[1] < _RECHECK
    ):
        evaluation = _nothing_to_do[2]  # the same verdicts: reported again, as every pass reports them
    else:
        evaluation = m.evaluate(snapshot, pool, options)
        # Karpenter marks the cluster consolidated only when its methods looked at every candidate.
        settled = evaluation.command is None and not evaluation.timed_out
        _nothing_to_do = (key, snapshot.now, evaluation) if settled else None
    for kind, count in Counter(b.kind for b in evaluation.blockers.values()).items():
        emit_dimensioned(MetricName.DISRUPTION_BLOCKED, count, {"Reason": kind})
    record_blocked(plane, snapshot, pool, evaluation)
    command = evaluation.command
    if command is None:
        return
    command_id = secrets.token_hex(4)
    marker = DisruptionCommand(
        id=command_id,
        method=command.method,
        action=command.action,
        candidates=command.names(),
        decided_at=snapshot.now,
        stage=STAGE_VALIDATING,
        detail=command.detail,
    )
    if not _mark(plane, [c.record for c in command.candidates], marker):
        return  # a record moved on since the snapshot; the next pass decides on the new state
    _log_decision(command, STAGE_VALIDATING if command.method != m.DRIFT else "executing")
    run.decided.append(f"{command.method}: {command.action} {', '.join(command.names())}")
    if command.method == m.DRIFT:
        marked = _records_by_name(plane)
        command.candidates = [
            dataclasses.replace(c, record=marked.get(c.name, c.record)) for c in command.candidates
        ]
        execute(plane, snapshot, command, command_id, marker, run, wake)


def _next_pass(snapshot: Snapshot, pool: Sequence[Candidate], options: Options, run: DisruptionRun) -> float:
    """Seconds until the next pass: at once after acting (Karpenter requeues immediately), else the
    poll interval, or sooner when a command's validation or a node's consolidateAfter falls due."""
    if run.acted:
        return 0.0
    due = [options.poll_interval]
    for command, _ in commands_under_way(snapshot).values():
        if command.validating:
            due.append(_validation_due(command, snapshot.now, options))
    for candidate in pool:
        after = candidate.nodepool.consolidate_after_timedelta()
        if after is not None and candidate.last_pod_event + after > snapshot.now:
            due.append(candidate.last_pod_event + after - snapshot.now)
    return max(0.0, min(due).total_seconds())


def run_disruption_pass(
    plane: ControlPlane, options: Options | None = None, wake: Wake | None = None
) -> DisruptionRun:
    """One pass: stamp, expire, advance the commands under way, then decide at most one new command."""
    options = options or options_from(plane)
    wake = wake or plane.provisioner.invoke
    run = DisruptionRun(passes=1)
    snapshot = take_snapshot(plane)
    stamp_records(plane, snapshot)
    run.untainted = untaint_orphans(plane, snapshot)
    pool, _ = candidates(snapshot)
    expire(plane, snapshot, pool, run)
    if not run.expired:
        advance_commands(plane, snapshot, options, run, wake)
        if run.executed or run.aborted or run.replacements:
            # Commands moved on: decide on what the cluster looks like now.
            snapshot = take_snapshot(plane)
            pool, _ = candidates(snapshot)
        decide(plane, snapshot, options, pool, run, wake)
    # else the cluster just changed under us: decide on a fresh snapshot, at once.
    run.idle = not pool and not commands_under_way(snapshot) and not run.acted
    run.next_pass_seconds = (
        float(deployment.SCHEDULE_SECONDS) if run.idle else _next_pass(snapshot, pool, options, run)
    )
    return run


def run_disruption(
    plane: ControlPlane, lease: Lease, loop_seconds: float | None = None, wake: Wake | None = None
) -> DisruptionRun:
    """Passes for ``loop_seconds`` (the setting by default; 0: one pass), under the lease."""
    clock = plane.clock
    seconds = plane.settings.disruption_loop_seconds if loop_seconds is None else loop_seconds
    if not lease.acquire(clock.now(), seconds + LEASE_SECONDS):
        logger.info("another disruption pass holds the lease; exiting", extra={"holder": lease.holder})
        return DisruptionRun(leader=False)
    deadline = clock.now() + timedelta(seconds=seconds)
    total = DisruptionRun(passes=0)
    try:
        while True:
            total.absorb(run_disruption_pass(plane, wake=wake))
            wait = timedelta(seconds=max(total.next_pass_seconds, MIN_SLEEP_SECONDS))
            if total.idle or clock.now() + wait > deadline:
                return total
            clock.sleep(wait.total_seconds())
            if not lease.acquire(clock.now(), seconds + LEASE_SECONDS):
                logger.warning("lost the disruption lease; stopping")
                return total
    finally:
        lease.release()


def disruption_lease(plane: ControlPlane, request_id: str) -> Lease:
    from serverless_karpenter.adapters import aws

    return Lease(
        aws.client("dynamodb", plane.settings.aws_region),
        plane.settings.state_table_name,
        LEASE_NAME,
        holder=f"{plane.settings.aws_lambda_log_stream_name}/{request_id}",
    )


def disruption_outstanding(plane: ControlPlane, options: Options | None = None) -> str | None:
    """What disruption still has to do, read-only, or None when nothing: a command under way, an
    expired node, a node waiting out its consolidateAfter, or a command a pass would decide now
    (``simulate``'s "settled" needs None)."""
    options = options or options_from(plane)
    snapshot = take_snapshot(plane, network=False)
    under_way = commands_under_way(snapshot)
    if under_way:
        marker, records = next(iter(under_way.values()))
        return f"{marker.method} command under way for {', '.join(sorted(r.name for r in records))}"
    pool, _ = candidates(snapshot)
    for candidate in pool:
        if expired(candidate.record, candidate.nodepool, snapshot.now) is not None:
            return f"{candidate.name} has expired"
    evaluation = m.evaluate(snapshot, pool, options)
    decided = evaluation.command
    if decided is not None:
        return f"{decided.method} would {decided.action} {', '.join(decided.names())}"
    waiting = sorted(
        name
        for name, blocker in evaluation.blockers.items()
        if blocker.kind == "ConsolidateAfter" and "Never" not in blocker.message
    )
    if waiting:
        return f"consolidateAfter has not elapsed for {', '.join(waiting)}"
    return None
