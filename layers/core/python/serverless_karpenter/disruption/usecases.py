"""The disruption loop: gather a snapshot, expire, advance the commands under way, decide a new one.

Karpenter's disruption controller polls every 10 s and requeues at once after it acts. Here one
invocation runs passes for ``disruption_loop_seconds`` (the schedule starts one a minute), sleeping
between passes until the next thing is due: 10 s, a command's validation (15 s after its decision), or
the moment a node's ``consolidateAfter`` runs out; after a pass that acted, the next follows at once.
The simulator runs one pass an invocation and honours the same hint (``nextPassSeconds``).

What must outlive an invocation is on the NodeClaim records:
- ``serverless-karpenter.io/disruption-command`` on each candidate (``command.DisruptionCommand``): the
  command's method, action and stage (``validating`` until re-simulated ``validation_delay`` after its
  decision, then ``replacing`` while its replacements launch and initialize);
- the NodePool and EC2NodeClass hashes (``karpenter.sh/nodepool-hash``,
  ``karpenter.k8s.aws/ec2nodeclass-hash``), stamped on the record when first seen, for drift;
- the fingerprint of the node's pods and when it last changed, for consolidateAfter.

Several commands proceed at once, each within its NodePool's budget: candidates in a command are no
candidates for another, and every simulation counts their pods as needing a place. Drift, an eventual
method, acts without validation, as Karpenter's. Acting reuses the termination path: ``begin_deletion``
marks the record Disrupting and deletes the Node, and the Terminator drains it honouring PDBs and
do-not-disrupt. A ``replace`` launches its replacements first and deletes the old nodes only once they
are Initialized.

Where each part lives: the methods, pure, in ``methods/`` (one module each, Karpenter's order); a
command's stages (validation, execution, replacements) in ``stages.py`` and the writes they make in
``acting.py``; the Events of what blocked a node in ``events.py``; the "nothing changed, nothing to
decide" memo's key in ``consolidated.py``. This module gathers the snapshot and runs the passes.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, overload

from serverless_karpenter import deployment
from serverless_karpenter.adapters.state_store import ConflictError, Lease
from serverless_karpenter.api.ec2nodeclass import EC2NodeClass
from serverless_karpenter.api.errors import ManifestError
from serverless_karpenter.api.nodepool import NodePool
from serverless_karpenter.cache import INSTANCE_NETWORK_TTL
from serverless_karpenter.disruption import methods as m
from serverless_karpenter.disruption.acting import (
    CoalescedWake,
    Wake,
    log_decision,
    mark,
    records_by_name,
    save_annotations,
    untaint_orphans,
)
from serverless_karpenter.disruption.budgets import REASON_EXPIRED
from serverless_karpenter.disruption.candidates import (
    Candidate,
    InstanceNetwork,
    Options,
    Snapshot,
    candidates,
    expired,
    observe_pod_events,
)
from serverless_karpenter.disruption.command import STAGE_VALIDATING, DisruptionCommand
from serverless_karpenter.disruption.consolidated import state_key
from serverless_karpenter.disruption.events import record_blocked
from serverless_karpenter.disruption.run import DisruptionRun
from serverless_karpenter.disruption.stages import (
    commands_under_way,
    execute,
    finish_replacement,
    validate,
    validation_due,
)
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.observability import MetricName, Msg, emit_dimensioned, logger, tracer
from serverless_karpenter.provisioning.context import ControlPlane
from serverless_karpenter.provisioning.provisioner import build_templates, drift_hashes, nodepool_usage
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter.scheduling.scheduler import NodePoolTemplate
from serverless_karpenter.termination.terminator import begin_deletion
from serverless_karpenter.termination.usecases import queue_termination_pass

LEASE_NAME = "disruption"
# Held for the loop and this much more: a pass that overruns the loop still finishes under the lease.
LEASE_SECONDS = 120.0
# A pass that acted is followed at once, yet never in a tight loop against the API server.
MIN_SLEEP_SECONDS = 1.0


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


# Instance id -> (when described, its subnet and security groups), described again after
# cache.INSTANCE_NETWORK_TTL. Kept while the Lambda container lives.
_network_cache: dict[str, tuple[datetime, InstanceNetwork]] = {}


def _instance_network(plane: ControlPlane, records: Sequence[NodeClaimRecord]) -> dict[str, InstanceNetwork]:
    ids = [r.instance_id for r in records if r.instance_id and r.state == NodeClaimState.INITIALIZED]
    now = plane.clock.now()
    stale = [i for i in ids if i not in _network_cache or now - _network_cache[i][0] >= INSTANCE_NETWORK_TTL]
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
            saved = save_annotations(plane, record, annotations)
            updated.append(saved or record)
        else:
            updated.append(record)
    snapshot.records = updated


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
            if validation_due(command, snapshot.now, options) <= timedelta(0):
                validate(plane, snapshot, options, command_id, command, records, run, wake)
        elif command.replacing:
            finish_replacement(plane, snapshot, options, command, records, run, wake)
        if (len(run.executed), len(run.aborted), len(run.replacements)) != acted:
            snapshot = take_snapshot(plane, network=False)


# The state in which the last pass decided nothing, and when; a pass in the same state skips deciding.
_nothing_to_do: tuple[tuple[Any, ...], datetime, m.Evaluation] | None = None
_RECHECK = timedelta(seconds=60)


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
    key = state_key(snapshot, pool, options)
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
    if not mark(plane, [c.record for c in command.candidates], marker):
        return  # a record moved on since the snapshot; the next pass decides on the new state
    log_decision(command, STAGE_VALIDATING if command.method != m.DRIFT else "executing")
    run.decided.append(f"{command.method}: {command.action} {', '.join(command.names())}")
    if command.method == m.DRIFT:
        marked = records_by_name(plane)
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
            due.append(validation_due(command, snapshot.now, options))
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
    coalesced = CoalescedWake(wake or plane.provisioner.invoke)
    try:
        run = _pass(plane, options, coalesced)
    finally:
        coalesced.flush()
    if run.expired or run.executed:
        wake_termination(plane)
    return run


def wake_termination(plane: ControlPlane) -> None:
    """Ask for a termination pass now: the Nodes this pass deleted wait on our finalizer. Karpenter's
    terminator sees a deletion at once (a watch); ours runs when its queue has a message, and without
    this one the drains would start at the queue's next scheduled message, up to a minute later."""
    try:
        queue_termination_pass(plane, 0, "disruption")
    except Exception as error:  # the schedule's next message starts the drains all the same
        logger.warning("could not queue a termination pass", extra={"error": str(error)})


def _pass(plane: ControlPlane, options: Options, wake: Wake) -> DisruptionRun:
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
