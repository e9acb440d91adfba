"""What each interruption message does (issue 6's table), given the NodeClaim it concerns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.interruption.messages import EventEnvelope
from serverless_karpenter.interruption.rules import MessageKind
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.observability import MetricName, MetricUnit, Msg, emit_dimensioned, logger, metrics
from serverless_karpenter.provisioning.context import ControlPlane
from serverless_karpenter.termination.terminator import GONE_STATES, STOPPING_STATES, begin_deletion, close
from serverless_karpenter.termination.usecases import queue_termination_pass

# What EC2 gives between a spot interruption warning and the reclaim.
SPOT_WARNING = timedelta(minutes=2)
DRAIN_STATES = STOPPING_STATES | GONE_STATES


@dataclass(frozen=True)
class NodeEvent:
    reason: str
    message: str
    type: str = "Warning"


# Karpenter's interruption controller records one of these on the Node (and its NodeClaim, which for us is
# a DynamoDB item) for every message about an instance it manages, whatever it then does.
SPOT_INTERRUPTED = NodeEvent("SpotInterrupted", "Spot interruption warning was triggered")
SPOT_REBALANCE = NodeEvent(
    "SpotRebalanceRecommendation", "Spot rebalance recommendation was triggered", "Normal"
)
INSTANCE_STOPPING = NodeEvent("InstanceStopping", "Instance is stopping")
INSTANCE_TERMINATING = NodeEvent("InstanceTerminating", "Instance is terminating")
INSTANCE_UNHEALTHY = NodeEvent("InstanceUnhealthy", "An unhealthy warning was triggered for the instance")
# Karpenter's reason for this kind (its CapacityReservationInstanceInterrupted event); the message is ours,
# in the style of the spot one.
CAPACITY_RESERVATION_INTERRUPTED = NodeEvent(
    "CapacityReservationInstanceInterrupted", "Capacity reservation interruption warning was triggered"
)
# ... and this one when the message makes it delete the node. Karpenter's interruption controller deletes
# the NodeClaim itself rather than through its disruption controller, whose DisruptionTerminating Event an
# interrupted node therefore never gets: begin_deletion is told not to record it here.
TERMINATING_ON_INTERRUPTION = NodeEvent(
    "TerminatingOnInterruption", "Interruption triggered termination for the Node"
)


def node_event(kind: MessageKind, state: str | None = None) -> NodeEvent | None:
    """Karpenter's Event for a message of ``kind`` (``state``: an EC2 state change's new state)."""
    match kind:
        case MessageKind.SPOT_INTERRUPTION:
            return SPOT_INTERRUPTED
        case MessageKind.REBALANCE_RECOMMENDATION:
            return SPOT_REBALANCE
        case MessageKind.SCHEDULED_CHANGE:
            return INSTANCE_UNHEALTHY
        case MessageKind.CAPACITY_RESERVATION_INTERRUPTION:
            return CAPACITY_RESERVATION_INTERRUPTED
        case MessageKind.STATE_CHANGE if state in STOPPING_STATES:
            return INSTANCE_STOPPING
        case MessageKind.STATE_CHANGE if state in GONE_STATES:
            return INSTANCE_TERMINATING
    return None


class Action:
    CORDON_AND_DRAIN = "CordonAndDrain"
    CLEAN_UP = "CleanUp"
    EVENT = "Event"
    NO_ACTION = "NoAction"
    FOREIGN = "Foreign"
    UNKNOWN = "Unknown"


@dataclass
class Outcome:
    actions: dict[str, str] = field(default_factory=dict)  # instance id -> action


def handle(plane: ControlPlane, message: EventEnvelope) -> Outcome:
    now = plane.clock.now()
    kind = message.kind
    emit_dimensioned(MetricName.INTERRUPTION_MESSAGES, 1, {"Kind": kind.name if kind else "Unknown"})
    metrics.add_metric(
        name=MetricName.INTERRUPTION_LATENCY,
        unit=MetricUnit.Seconds,
        value=max(0.0, (now - message.time).total_seconds()),
    )
    outcome = Outcome()
    if kind is None:
        logger.info(
            "ignoring message of unknown kind", extra={"detail-type": message.detail_type, "id": message.id}
        )
        outcome.actions[""] = Action.UNKNOWN
        emit_dimensioned(MetricName.INTERRUPTION_ACTIONS, 1, {"Action": Action.UNKNOWN})
        return outcome
    for instance_id in message.instance_ids():
        outcome.actions[instance_id] = _handle_instance(plane, message, kind, instance_id)
        emit_dimensioned(MetricName.INTERRUPTION_ACTIONS, 1, {"Action": outcome.actions[instance_id]})
    if Action.CORDON_AND_DRAIN in outcome.actions.values():
        # Start the drain now rather than on the termination function's schedule.
        queue_termination_pass(plane, 0, "interruption")
    return outcome


def _handle_instance(plane: ControlPlane, message: EventEnvelope, kind: MessageKind, instance_id: str) -> str:
    record = plane.store.find_by_instance_id(instance_id)
    if record is None or record.state == NodeClaimState.TERMINATED:
        metrics.add_metric(name=MetricName.INTERRUPTION_FOREIGN, unit=MetricUnit.Count, value=1)
        logger.info(
            "ignoring message for an instance we do not manage",
            extra={"instance": instance_id, "kind": kind.value},
        )
        return Action.FOREIGN
    log = {
        "nodeclaim": record.name,
        "node": record.node_name,
        "instance": instance_id,
        "kind": kind.value,
        "message-id": message.id,
    }
    state = str(message.detail.get("state")) if kind == MessageKind.STATE_CHANGE else None
    event = node_event(kind, state)
    node = plane.kube.get_node(record.node_name) if event is not None and record.node_name else None
    if node is not None and event is not None:
        plane.kube.record_event(node, event.reason, event.message, event.type)
    match kind:
        case MessageKind.SPOT_INTERRUPTION:
            if record.instance_type and record.zone:
                plane.instance_types.mark_unavailable(
                    wk.CAPACITY_TYPE_SPOT, record.instance_type, record.zone, "SpotInterruption"
                )
            deadline = spot_deadline(message.time, plane.clock.now())
            return _delete(plane, record, node, log, "SpotInterrupted", deadline=deadline)
        case MessageKind.REBALANCE_RECOMMENDATION:
            if plane.settings.interruption_rebalance == "replace":
                # Launch the replacement first: evictions wait until it is initialized (or a deadline).
                return _delete(
                    plane,
                    record,
                    node,
                    log,
                    "RebalanceRecommendation",
                    replace_first=True,
                    replace_timeout=timedelta(seconds=plane.settings.rebalance_replace_timeout_seconds),
                )
            return Action.EVENT
        case MessageKind.STATE_CHANGE:
            if state not in DRAIN_STATES:
                return Action.NO_ACTION
            instance = plane.launcher.describe(instance_id)
            if instance is None or instance.state in GONE_STATES:
                _clean_up(plane, record, node)
                return Action.CLEAN_UP
            return _delete(plane, record, node, log, "InstanceStateChange")
        case MessageKind.SCHEDULED_CHANGE:
            return _delete(plane, record, node, log, "ScheduledChange")
        case MessageKind.CAPACITY_RESERVATION_INTERRUPTION:
            return _delete(plane, record, node, log, "CapacityReservationInterrupted")
    return Action.NO_ACTION


def spot_deadline(warned_at: datetime, received_at: datetime) -> datetime:
    """When a spot-warned node's pods must be gone: the warning's two minutes, counted from when we
    received it (``received_at``), or from the warning's own time should that read later (clock skew).

    As Karpenter's termination does: its interruption controller deletes the NodeClaim on receipt, and
    the node's termination time (when its pods are deleted past their budgets, each at that time minus
    its own grace period) is counted from that deletion, never from the event's ``time``. Counting from
    the event's time instead made an old or replayed warning (its time long past) force-delete every pod
    at once, past its PDB and with no grace. From receipt, each pod whose grace period fits in the two
    minutes gets all of it, after evictions that respect its PDB. A warning delivered late is acted on
    a little after EC2's own deadline; if EC2 reclaims the instance first, the next termination pass
    finds it gone and releases the node."""
    return max(warned_at, received_at) + SPOT_WARNING


def _delete(
    plane: ControlPlane,
    record: NodeClaimRecord,
    node: Mapping[str, Any] | None,
    log: Mapping[str, Any],
    reason: str,
    *,
    deadline: datetime | None = None,
    replace_first: bool = False,
    replace_timeout: timedelta | None = None,
) -> str:
    logger.info(Msg.INITIATING_DELETE_FROM_INTERRUPTION, extra=dict(log))
    starts = _starts_deletion(node)
    begin_deletion(
        plane,
        record,
        reason,
        deadline,
        replace_first=replace_first,
        replace_timeout=replace_timeout,
        disruption_event=False,
    )
    if starts:
        _record_terminating_on_interruption(plane, node)
    return Action.CORDON_AND_DRAIN


def _clean_up(plane: ControlPlane, record: NodeClaimRecord, node: Mapping[str, Any] | None) -> None:
    """The instance is already gone: nothing to drain; remove the Node, its finalizer and the claim."""
    starts = _starts_deletion(node)
    if record.node_name:
        plane.kube.delete_node(record.node_name)
        current = plane.kube.get_node(record.node_name)
        if current is not None:
            plane.kube.remove_node_finalizer(current, wk.TERMINATION_FINALIZER)
    if starts:
        _record_terminating_on_interruption(plane, node)
    close(plane, plane.store.get(record.name) or record)


def _starts_deletion(node: Mapping[str, Any] | None) -> bool:
    """Whether acting on the message deletes ``node`` (as read before acting). Karpenter records
    TerminatingOnInterruption only then: a node already going (being consolidated, or warned twice) gets
    the kind's Event alone, as its NodeClaim was already deleted."""
    return node is not None and not node["metadata"].get("deletionTimestamp")


def _record_terminating_on_interruption(plane: ControlPlane, node: Mapping[str, Any] | None) -> None:
    if node is not None:
        event = TERMINATING_ON_INTERRUPTION
        plane.kube.record_event(node, event.reason, event.message, event.type)
