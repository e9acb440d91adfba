"""The disruption pass's writes: a command's marker on its candidates' records, the disrupted taint on
their nodes, the replacements' records, the deletion of the candidates; and waking the provisioner.

Each record write is conditional on the record's version: a marker written on a record that moved on
since the snapshot is dropped (the next pass decides on the new state), a deletion skipped."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from serverless_karpenter.adapters.state_store import ConflictError
from serverless_karpenter.disruption import methods as m
from serverless_karpenter.disruption.budgets import REASON_EXPIRED
from serverless_karpenter.disruption.candidates import REPLACEMENT_FOR_ANNOTATION, Snapshot, in_command
from serverless_karpenter.disruption.command import DisruptionCommand, with_command
from serverless_karpenter.lifecycle.model import NodeClaimRecord
from serverless_karpenter.observability import MetricName, Msg, emit_dimensioned, logger
from serverless_karpenter.provisioning.context import ControlPlane
from serverless_karpenter.provisioning.provisioner import Provisioner
from serverless_karpenter.termination.handoff import has_disrupted_taint
from serverless_karpenter.termination.terminator import begin_deletion, set_disrupted_taint


def save_annotations(
    plane: ControlPlane, record: NodeClaimRecord, annotations: dict[str, str]
) -> NodeClaimRecord | None:
    try:
        return plane.store.save(record.model_copy(update={"annotations": annotations}))
    except ConflictError:
        return None  # somebody moved it on; the next pass sees the new version


def log_decision(command: m.Command, stage: str) -> None:
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


def mark(plane: ControlPlane, records: Sequence[NodeClaimRecord], command: DisruptionCommand | None) -> bool:
    ok = True
    for record in records:
        ok = save_annotations(plane, record, with_command(record, command)) is not None and ok
    return ok


def taint(plane: ControlPlane, records: Sequence[NodeClaimRecord], present: bool) -> None:
    for record in records:
        if record.node_name:
            set_disrupted_taint(plane, record.node_name, present)


def abandon(plane: ControlPlane, records: Sequence[NodeClaimRecord]) -> None:
    """Drop the command from its records and let their nodes take pods again."""
    mark(plane, records, None)
    taint(plane, records, False)


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


def request_replacements(
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
        wake_provisioner(wake, {"reason": "disruption-replacements", "nodeclaims": names})
    return names


class CoalescedWake:
    """The wakes of one pass, sent as one at its end: each command under way whose replacements are still
    coming up asks for a wake every pass, and the provisioner's one lifecycle reconcile serves them all
    (a pass over 25 replacing commands would otherwise invoke it 25 times). Nothing in the pass waits on
    the wake: on Lambda it is an asynchronous invocation."""

    def __init__(self, wake: Wake) -> None:
        self._wake = wake
        self._reasons: list[str] = []
        self._nodeclaims: list[str] = []

    def __call__(self, payload: dict[str, object]) -> None:
        reason = str(payload.get("reason", ""))
        if reason not in self._reasons:
            self._reasons.append(reason)
        claims = payload.get("nodeclaims")
        for name in claims if isinstance(claims, list) else ():
            if name not in self._nodeclaims:
                self._nodeclaims.append(str(name))

    def flush(self) -> None:
        if not self._reasons:
            return
        payload: dict[str, object] = {"reason": ",".join(self._reasons), "nodeclaims": self._nodeclaims}
        self._reasons, self._nodeclaims = [], []
        wake_provisioner(self._wake, payload)


def wake_provisioner(wake: Wake, payload: dict[str, object]) -> None:
    try:
        wake(payload)
    except Exception as error:  # the provisioner's schedule does it within a minute anyway
        logger.warning("could not wake the provisioner", extra={"error": str(error)})


def delete_candidates(
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


def records_by_name(plane: ControlPlane) -> dict[str, NodeClaimRecord]:
    return {r.name: r for r in plane.store.list_live()}
