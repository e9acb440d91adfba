"""Numbers the CDK stack deploys the functions and the interruption queue with, which the local simulator
must reproduce: each function's timeout, and the interruption queue's visibility timeout, redrive and
retention.

They live in the core, not in ``infra/``, because the simulator ships without CDK but with the core: the
stack (``infra/functions.py``, ``infra/interruption.py``) and the simulator (``lambdas.py``, ``cloud.py``)
both read them from here, and ``tests/infra/test_sim_matches_stack.py`` checks the synthesized template
against them.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

# The scheduled functions' EventBridge rule: rate(1 minute).
SCHEDULE_SECONDS = 60

# By function name (``naming.FUNCTION_NAMES``).
FUNCTION_TIMEOUT_SECONDS: Mapping[str, int] = MappingProxyType(
    {
        "watcher": 90,
        "provisioner": 300,
        # 20 s, not 60 s: the queue keeps messages 300 s (Karpenter's value), and with 6 x timeout
        # visibility a crashed message must be retried once and then reach the DLQ inside those 300 s.
        "interruption": 20,
        "disruption": 300,
        "termination": 300,
    }
)

# AWS's guidance for SQS event sources: visibility >= 6 x the function timeout, so that messages held
# while the function is throttled are not redelivered (and counted towards the DLQ) too early.
VISIBILITY_TIMEOUT_FACTOR = 6


def queue_visibility_timeout_seconds(function_name: str) -> int:
    """The visibility timeout of the queue that triggers ``function_name``."""
    return FUNCTION_TIMEOUT_SECONDS[function_name] * VISIBILITY_TIMEOUT_FACTOR


INTERRUPTION_VISIBILITY_TIMEOUT_SECONDS = queue_visibility_timeout_seconds("interruption")
# Two receives: a message whose handler crashed (no batch response, so it stays hidden for the whole
# visibility timeout) is tried once more, then dead-lettered, both before the retention drops it.
INTERRUPTION_MAX_RECEIVE_COUNT = 2
# Karpenter's value: a spot warning is stale after two minutes.
INTERRUPTION_RETENTION_SECONDS = 300
