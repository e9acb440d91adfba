"""The commands under way, read back from their candidates' records, and their stages: validation after
``validation_delay`` (Karpenter's validators), execution (Karpenter's ``queue.StartCommand``), and the
replacements' progress until the old nodes are deleted or the command is abandoned."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from serverless_karpenter.disruption import methods as m
from serverless_karpenter.disruption.acting import (
    Wake,
    abandon,
    delete_candidates,
    log_decision,
    mark,
    records_by_name,
    request_replacements,
    taint,
    wake_provisioner,
)
from serverless_karpenter.disruption.candidates import Options, Snapshot, candidates
from serverless_karpenter.disruption.command import (
    STAGE_REPLACING,
    DisruptionCommand,
    read_command,
    with_command,
)
from serverless_karpenter.disruption.run import DisruptionRun
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.observability import MetricName, Msg, emit_dimensioned, logger
from serverless_karpenter.provisioning.context import ControlPlane


def validation_due(command: DisruptionCommand, now: datetime, options: Options) -> timedelta:
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
        abandon(plane, records)
        run.aborted.append(f"{command.method}: {', '.join(expected_names)}")
        return
    dropped = [r for r in records if r.name not in set(fresh.names())]
    if dropped:
        abandon(plane, dropped)
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
        log_decision(command, "executing")
        delete_candidates(plane, command, [c.record for c in command.candidates])
        run.executed.append(f"{command.method}: delete {', '.join(command.names())}")
        return
    log_decision(command, "launching replacements")
    names = set(command.names())
    launched = request_replacements(plane, snapshot, command, command_id, wake)
    fresh_records = records_by_name(plane)
    current = [fresh_records[n] for n in names if n in fresh_records]
    if len(launched) != len(command.replacements):
        abandon(plane, current)
        run.aborted.append(f"{command.method}: replacement launch failed for {', '.join(command.names())}")
        return
    # As Karpenter does, nothing new lands on the candidates while their replacements come up. Tainted
    # once the replacements are in flight, so the provisioner, which takes the pods of tainted nodes
    # as pending, finds room for them on the replacements rather than launching more.
    taint(plane, current, True)
    mark(
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
        abandon(plane, records)
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
        delete_candidates(plane, command, records)
        run.executed.append(f"{command.method}: replace {', '.join(sorted(r.name for r in records))}")
        return
    wake_provisioner(
        wake, {"reason": "disruption-replacements", "nodeclaims": list(command.replacements or [])}
    )
