"""boto3 clients with the project's one retry policy.

botocore's adaptive mode retries throttling and transient errors with client-side rate limiting, which
is what a control plane that bursts CreateFleet and DescribeInstances calls needs. ``AWS_ENDPOINT_URL``
(honoured by botocore itself) points every client at moto in the local simulation, so no code path
differs between the two.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import boto3
from botocore.config import Config

RETRY_CONFIG = Config(
    retries={"mode": "adaptive", "max_attempts": 8},
    connect_timeout=5,
    read_timeout=30,
    user_agent_extra="serverless-karpenter",
)


@cache
def _session(region: str) -> boto3.session.Session:
    return boto3.session.Session(region_name=region)


def session(region: str) -> boto3.session.Session:
    """The session every client of ``region`` is made from (its credentials are the function's)."""
    return _session(region)


def client(service: str, region: str) -> Any:
    """A client for ``service``; clients are cheap to reuse across warm invocations, so callers keep them."""
    return _session(region).client(service, config=RETRY_CONFIG)  # type: ignore[call-overload]


def reset_sessions() -> None:
    """Forget cached sessions (the simulator changes endpoints between runs)."""
    _session.cache_clear()
