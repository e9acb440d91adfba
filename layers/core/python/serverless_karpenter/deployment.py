"""Numbers the CDK stack deploys the functions and the interruption queue with, which the local simulator
must reproduce: each function's timeout, and the interruption queue's visibility timeout, redrive,
retention and concurrency.

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
        # 20 s, not 60 s: with 6 x timeout visibility, a message whose every invocation crashed must be
        # received 5 times and reach the DLQ inside the queue's retention (below).
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
# AWS's guidance for an SQS event source's redrive policy ("set maxReceiveCount to at least 5"): a failed
# or throttled batch is received again, and each receive counts, so fewer lets a blip of a few seconds
# (a Kubernetes 5xx, a throttled call, a lost write race) dead-letter a live spot warning.
MIN_RECEIVES_BEFORE_DEAD_LETTER = 5
INTERRUPTION_MAX_RECEIVE_COUNT = MIN_RECEIVES_BEFORE_DEAD_LETTER
# A message must reach the DLQ (and its alarm) before the queue drops it: after a crash it stays hidden
# for the whole visibility timeout at each of its receives, 5 x 120 s = 600 s in the worst case, so the
# 300 s Karpenter keeps a message for cannot hold 5 receives. 900 s holds them with one more visibility
# timeout to spare for the pollers' back-off. A late message is still acted on correctly: an instance
# already gone is cleaned up, a rebalance or scheduled change is still ahead.
INTERRUPTION_RETENTION_SECONDS = 900
# Concurrent batches the interruption queue's event source may run (its MaximumConcurrency), and the
# function's reserved concurrency with it: the event source is the function's only invoker, so it is
# never throttled, neither by itself nor by the account's other functions.
INTERRUPTION_CONCURRENCY = 5


def reaches_dead_letter_before_expiry(
    visibility_seconds: int, max_receive_count: int, retention: int
) -> bool:
    """Whether a message hidden for the whole visibility timeout at each of its receives (the slowest
    path: every invocation crashed) is moved to the DLQ, with one visibility timeout to spare, before
    the queue's retention drops it."""
    return (max_receive_count + 1) * visibility_seconds <= retention


# The reason the termination function's one-minute schedule puts in the message it sends to the
# termination-work queue (the queue is the function's only trigger); a drain's own re-queued messages
# carry another.
TERMINATION_SCHEDULED_PASS = "schedule"
