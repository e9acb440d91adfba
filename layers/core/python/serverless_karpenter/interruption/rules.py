"""The EventBridge rules that feed the interruption queue: one pattern per message kind.

The CDK stack creates these rules and the local simulator creates the same ones in moto, so what a
scenario's ``event`` step reaches is exactly what production would.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class MessageKind(StrEnum):
    SPOT_INTERRUPTION = "EC2 Spot Instance Interruption Warning"
    REBALANCE_RECOMMENDATION = "EC2 Instance Rebalance Recommendation"
    STATE_CHANGE = "EC2 Instance State-change Notification"
    SCHEDULED_CHANGE = "AWS Health Event"
    CAPACITY_RESERVATION_INTERRUPTION = "EC2 Capacity Reservation Instance Interruption Warning"


# Rule id (stable; used in construct ids and rule names) -> event pattern.
RULE_PATTERNS: dict[str, dict[str, Any]] = {
    "SpotInterruption": {
        "source": ["aws.ec2"],
        "detail-type": [MessageKind.SPOT_INTERRUPTION.value],
    },
    "RebalanceRecommendation": {
        "source": ["aws.ec2"],
        "detail-type": [MessageKind.REBALANCE_RECOMMENDATION.value],
    },
    "InstanceStateChange": {
        "source": ["aws.ec2"],
        "detail-type": [MessageKind.STATE_CHANGE.value],
    },
    "ScheduledChange": {
        "source": ["aws.health"],
        "detail-type": [MessageKind.SCHEDULED_CHANGE.value],
        "detail": {"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]},
    },
    "CapacityReservationInterruption": {
        "source": ["aws.ec2"],
        "detail-type": [MessageKind.CAPACITY_RESERVATION_INTERRUPTION.value],
    },
}
