"""The simulator runs the functions and the interruption queue as the stack deploys them: both take the
numbers from ``serverless_karpenter.deployment``, and the synthesized template must hold exactly those."""

from __future__ import annotations

from typing import Any

import pytest
from serverless_karpenter import deployment, naming

from tests.infra.conftest import Synthesized
from tests.infra.helpers import CLUSTERS, resources_of_type

pytestmark = pytest.mark.infra


def function_timeouts(template: dict[str, Any]) -> dict[str, int]:
    timeouts = {}
    for logical_id, resource in resources_of_type(template, "AWS::Lambda::Function").items():
        for name in naming.FUNCTION_NAMES:
            if logical_id.startswith(f"Functions{name.capitalize()}"):
                timeouts[name] = resource["Properties"]["Timeout"]
    return timeouts


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_function_timeouts_are_the_deployment_constants(synthesized: Synthesized, cluster: str) -> None:
    assert function_timeouts(synthesized.templates[cluster]) == dict(deployment.FUNCTION_TIMEOUT_SECONDS)


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_interruption_queue_is_the_deployment_constants(synthesized: Synthesized, cluster: str) -> None:
    queues = [
        queue["Properties"]
        for logical_id, queue in resources_of_type(synthesized.templates[cluster], "AWS::SQS::Queue").items()
        if logical_id.startswith("InterruptionQueue")
    ]
    assert len(queues) == 1
    (queue,) = queues
    assert queue["VisibilityTimeout"] == deployment.INTERRUPTION_VISIBILITY_TIMEOUT_SECONDS
    assert queue["RedrivePolicy"]["maxReceiveCount"] == deployment.INTERRUPTION_MAX_RECEIVE_COUNT
    assert queue["MessageRetentionPeriod"] == deployment.INTERRUPTION_RETENTION_SECONDS
