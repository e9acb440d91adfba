"""EventBridge envelopes on the interruption queue, parsed with pydantic."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.utilities.parser.models.event_bridge import EventBridgeModel
from pydantic import AwareDatetime, ConfigDict, Field, ValidationError

from serverless_karpenter.interruption.rules import RULE_PATTERNS, MessageKind


class MalformedMessage(ValueError):
    """A body that is not an EventBridge envelope we can act on; it belongs in the DLQ."""


class EventEnvelope(EventBridgeModel):
    """Powertools' EventBridge envelope, narrowed to what the interruption rules deliver."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    # EventBridge always stamps UTC ("...Z"); a time without a zone cannot be compared with ours.
    time: AwareDatetime
    # Karpenter's parsers need neither; a message replayed or sent by hand may lack them.
    account: str | None = None  # type: ignore[assignment]
    region: str | None = None  # type: ignore[assignment]
    resources: list[str] = Field(default_factory=list)
    # Every rule's detail is a JSON object; its fields are checked per kind below.
    detail: dict[str, Any]

    @property
    def kind(self) -> MessageKind | None:
        try:
            return MessageKind(self.detail_type)
        except ValueError:
            return None

    def instance_ids(self) -> list[str]:
        """The EC2 instances the message is about."""
        if self.kind == MessageKind.SCHEDULED_CHANGE:
            ids = [e.get("entityValue") for e in self.detail.get("affectedEntities") or []]
            return [i for i in ids if isinstance(i, str) and i.startswith("i-")]
        instance_id = self.detail.get("instance-id")
        return [instance_id] if isinstance(instance_id, str) else []


# The AWS Health events acted on: the ScheduledChange rule's detail filter (EC2's scheduled changes), which
# Karpenter's scheduledchange parser checks again. The rule keeps others off the queue; one that arrives
# anyway (sent by hand, replayed, or through a rule edited by someone) is not about an EC2 instance's
# scheduled maintenance, whatever its affectedEntities say, and must not drain a node.
_SCHEDULED_CHANGE_RULE = "ScheduledChange"
_SCHEDULED_CHANGE_DETAIL: dict[str, list[str]] = RULE_PATTERNS[_SCHEDULED_CHANGE_RULE]["detail"]


def _check_scheduled_change(detail: dict[str, Any]) -> None:
    for name, accepted in _SCHEDULED_CHANGE_DETAIL.items():
        value = detail.get(name)
        if value not in accepted:
            shown = "missing" if value is None else repr(value)
            raise MalformedMessage(
                f"AWS Health Event: detail.{name} is {shown}, not {' or '.join(map(repr, accepted))}; "
                f"only the events of the {_SCHEDULED_CHANGE_RULE} rule (EC2 scheduled changes) are acted on"
            )


def parse_message(body: str) -> EventEnvelope:
    try:
        raw = json.loads(body)
    except (json.JSONDecodeError, TypeError) as error:
        raise MalformedMessage(f"body is not JSON: {error}") from error
    if not isinstance(raw, dict):
        raise MalformedMessage(f"body is JSON {type(raw).__name__}, not an EventBridge envelope object")
    try:
        envelope = EventEnvelope.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(root)"
        raise MalformedMessage(f"envelope field {where}: {first['msg']}") from error
    if (
        envelope.kind
        in (
            MessageKind.SPOT_INTERRUPTION,
            MessageKind.REBALANCE_RECOMMENDATION,
            MessageKind.STATE_CHANGE,
            MessageKind.CAPACITY_RESERVATION_INTERRUPTION,
        )
        and not envelope.instance_ids()
    ):
        raise MalformedMessage(f"{envelope.detail_type}: detail.instance-id is missing")
    if envelope.kind == MessageKind.STATE_CHANGE and not isinstance(envelope.detail.get("state"), str):
        raise MalformedMessage("EC2 Instance State-change Notification: detail.state is missing")
    if envelope.kind == MessageKind.SCHEDULED_CHANGE:
        _check_scheduled_change(envelope.detail)
        entities = envelope.detail.get("affectedEntities")
        if entities is not None and not (
            isinstance(entities, list) and all(isinstance(e, dict) for e in entities)
        ):
            raise MalformedMessage(
                f"AWS Health Event: detail.affectedEntities is {type(entities).__name__}, "
                "not a list of entity objects"
            )
    return envelope
