"""What each interruption message does (issue 6's table), given the NodeClaim it concerns."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from serverless_karpenter.api import labels as wk
from serverless_karpenter.interruption.messages import EventEnvelope
from serverless_karpenter.interruption.rules import MessageKind
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.observability import MetricName, MetricUnit, Msg, emit_dimensioned, logger, metrics
from serverless_karpenter.provisioning.context import ControlPlane
from serverless_karpenter.termination.terminator import begin_deletion, close
from serverless_karpenter.termination.usecases import queue_termination_pass

SPOT_WARNING = timedelta(minutes=2)
DRAIN_STATES = frozenset({"stopping", "stopped", "shutting-down", "terminated"})
GONE_STATES = frozenset({"shutting-down", "terminated"})


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
    match kind:
        case MessageKind.SPOT_INTERRUPTION:
            if record.instance_type and record.zone:
                plane.instance_types.mark_unavailable(
                    wk.CAPACITY_TYPE_SPOT, record.instance_type, record.zone, "SpotInterruption"
                )
            logger.info(Msg.INITIATING_DELETE_FROM_INTERRUPTION, extra=log)
            begin_deletion(plane, record, "SpotInterrupted", deadline=message.time + SPOT_WARNING)
            return Action.CORDON_AND_DRAIN
        case MessageKind.REBALANCE_RECOMMENDATION:
            if plane.settings.interruption_rebalance == "replace":
                # Launch the replacement first: evictions wait until it is initialized (or a deadline).
                logger.info(Msg.INITIATING_DELETE_FROM_INTERRUPTION, extra=log)
                begin_deletion(
                    plane,
                    record,
                    "RebalanceRecommendation",
                    replace_first=True,
                    replace_timeout=timedelta(seconds=plane.settings.rebalance_replace_timeout_seconds),
                )
                return Action.CORDON_AND_DRAIN
            node = plane.kube.get_node(record.node_name) if record.node_name else None
            if node is not None:
                plane.kube.record_event(
                    node,
                    "RebalanceRecommendation",
                    "EC2 recommends rebalancing this spot instance",
                    "Warning",
                )
            return Action.EVENT
        case MessageKind.STATE_CHANGE:
            state = str(message.detail.get("state"))
            if state not in DRAIN_STATES:
                return Action.NO_ACTION
            instance = plane.launcher.describe(instance_id)
            if instance is None or instance.state in GONE_STATES:
                _clean_up(plane, record)
                return Action.CLEAN_UP
            logger.info(Msg.INITIATING_DELETE_FROM_INTERRUPTION, extra=log)
            begin_deletion(plane, record, "InstanceStateChange")
            return Action.CORDON_AND_DRAIN
        case MessageKind.SCHEDULED_CHANGE | MessageKind.CAPACITY_RESERVATION_INTERRUPTION:
            logger.info(Msg.INITIATING_DELETE_FROM_INTERRUPTION, extra=log)
            begin_deletion(
                plane,
                record,
                "ScheduledChange"
                if kind == MessageKind.SCHEDULED_CHANGE
                else "CapacityReservationInterrupted",
            )
            return Action.CORDON_AND_DRAIN
    return Action.NO_ACTION


def _clean_up(plane: ControlPlane, record: NodeClaimRecord) -> None:
    """The instance is already gone: nothing to drain; remove the Node, its finalizer and the claim."""
    if record.node_name:
        plane.kube.delete_node(record.node_name)
        node = plane.kube.get_node(record.node_name)
        if node is not None:
            plane.kube.remove_node_finalizer(node, wk.TERMINATION_FINALIZER)
    close(plane, plane.store.get(record.name) or record)
