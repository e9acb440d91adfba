"""One Powertools Logger, Metrics and Tracer for the whole control plane, and its vocabulary.

Metric names live here and nowhere else: the CDK dashboard, the README's table and the code all read
:class:`MetricName`, and a test checks that each one is emitted somewhere.
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Generator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from enum import StrEnum
from typing import Any, TextIO

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit, single_metric
from aws_lambda_powertools.tracing.base import BaseProvider, BaseSegment

SERVICE = "serverless-karpenter"
NAMESPACE = "ServerlessKarpenter"
# Every metric carries ``service`` (Powertools) and this one: two clusters' stacks in one account and region
# publish to the same namespace, and each dashboard and alarm must see its own cluster's figures only.
CLUSTER_DIMENSION = "ClusterName"
DEFAULT_DIMENSION_NAMES = ("service", CLUSTER_DIMENSION)


class MetricName(StrEnum):
    """Every metric we emit, under :data:`NAMESPACE`. Dimensions are noted where a metric has one."""

    PENDING_PODS = "PendingPods"
    PODS_SCHEDULED = "PodsScheduled"
    PODS_UNSCHEDULABLE = "PodsUnschedulable"
    SOLVE_DURATION = "SolveDuration"
    SOLVE_COST_GAP = "SolveCostGapPercent"
    NODECLAIMS_CREATED = "NodeClaimsCreated"
    NODECLAIMS_LAUNCHED = "NodeClaimsLaunched"
    NODECLAIMS_REGISTERED = "NodeClaimsRegistered"
    NODECLAIMS_INITIALIZED = "NodeClaimsInitialized"
    NODECLAIMS_TERMINATED = "NodeClaimsTerminated"
    NODECLAIMS_BY_STATE = "NodeClaims"  # dimension State
    LAUNCH_LATENCY = "LaunchLatency"  # pending -> launched, seconds
    INITIALIZATION_LATENCY = "InitializationLatency"  # launched -> initialized, seconds
    LAUNCH_ERRORS = "LaunchErrors"
    UNAVAILABLE_OFFERING_HITS = "UnavailableOfferingHits"
    GARBAGE_COLLECTED_INSTANCES = "GarbageCollectedInstances"
    COST_PER_HOUR = "ManagedCostPerHour"
    INTERRUPTION_MESSAGES = "InterruptionMessages"  # dimension Kind
    INTERRUPTION_LATENCY = "InterruptionMessageLatency"
    INTERRUPTION_ACTIONS = "InterruptionActions"  # dimension Action
    INTERRUPTION_MALFORMED = "InterruptionMalformedMessages"
    INTERRUPTION_FOREIGN = "InterruptionForeignInstances"
    DRAINS_STARTED = "DrainsStarted"
    DRAINS_COMPLETED = "DrainsCompleted"
    DRAIN_DURATION = "DrainDuration"
    PODS_EVICTED = "PodsEvicted"
    PODS_FORCE_DELETED = "PodsForceDeleted"
    DISRUPTION_ACTIONS = "DisruptionActions"  # dimension Method
    DISRUPTION_BLOCKED = "DisruptionBlocked"  # dimension Reason


class Msg(StrEnum):
    """Karpenter's log messages, so that users' queries and habits carry over."""

    FOUND_PROVISIONABLE_PODS = "found provisionable pod(s)"
    COMPUTED_NEW_NODECLAIMS = "computed new nodeclaim(s) to fit pod(s)"
    COULD_NOT_SCHEDULE_POD = "could not schedule pod"
    CREATED_NODECLAIM = "created nodeclaim"
    LAUNCHED_NODECLAIM = "launched nodeclaim"
    REGISTERED_NODECLAIM = "registered nodeclaim"
    INITIALIZED_NODECLAIM = "initialized nodeclaim"
    DELETED_NODECLAIM = "deleted nodeclaim"
    TAINTED_NODE = "tainted node"
    UNTAINTED_NODE = "untainted node"
    FAILED_EVICTING_POD = "failed evicting pod"
    DELETED_NODE = "deleted node"
    DISRUPTING_NODECLAIMS = "disrupting nodeclaim(s) via {method}"
    INITIATING_DELETE_FROM_INTERRUPTION = "initiating delete from interruption message"
    GARBAGE_COLLECTED_INSTANCE = "garbage collected cloudprovider instance"
    LIVENESS_DELETED = "deleting nodeclaim, registration ttl exceeded"
    # Ours: Karpenter does not report how far its placement is from optimal.
    SOLVED_PLACEMENT = "solved placement"


class _CurrentStdout:
    """A stream that writes to whatever ``sys.stdout`` is now, so the simulator can capture logs."""

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()


def _make_logger() -> Logger:
    stream: TextIO = _CurrentStdout()  # type: ignore[assignment]
    return Logger(service=SERVICE, logger_handler=logging.StreamHandler(stream))


# A pass that had nothing to do emits no metric; Powertools warns about that on every such invocation.
warnings.filterwarnings("ignore", message="No application metrics to publish")


class _UntracedSegment(BaseSegment):
    """What the handler decorators annotate when tracing is disabled: nothing is recorded."""

    def close(self, end_time: int | None = None) -> None:
        return None

    def add_subsegment(self, subsegment: Any) -> None:
        return None

    def remove_subsegment(self, subsegment: Any) -> None:
        return None

    def put_annotation(self, key: str, value: Any) -> None:
        return None

    def put_metadata(self, key: str, value: Any, namespace: str = "default") -> None:
        return None

    def add_exception(self, exception: BaseException, stack: Any, remote: bool = False) -> None:
        return None


class _UntracedProvider(BaseProvider):
    """Powertools' Tracer imports the whole X-Ray SDK (and resolves its provider) even when tracing is
    disabled: ~0.1 s of every cold start on a full core, several times that on a Lambda's fraction of one.
    Given this provider when tracing is off, it never imports ``aws_xray_sdk.core``."""

    @contextmanager
    def in_subsegment(self, name: str | None = None, **kwargs: Any) -> Generator[BaseSegment, None, None]:
        yield _UntracedSegment()

    def in_subsegment_async(
        self, name: str | None = None, **kwargs: Any
    ) -> AbstractAsyncContextManager[BaseSegment]:
        @asynccontextmanager
        async def untraced() -> Any:
            yield _UntracedSegment()

        return untraced()

    def put_annotation(self, key: str, value: Any) -> None:
        return None

    def put_metadata(self, key: str, value: Any, namespace: str = "default") -> None:
        return None

    def patch(self, modules: Sequence[str]) -> None:
        return None

    def patch_all(self) -> None:
        return None


def _make_tracer() -> Tracer:
    # Powertools' own rule decides (POWERTOOLS_TRACE_DISABLED, or outside Lambda, or under SAM local): the
    # X-Ray SDK is imported, and its modules patched, only when the function will trace.
    if Tracer._is_tracer_disabled():
        return Tracer(service=SERVICE, disabled=True, provider=_UntracedProvider())
    # The adapters name the libraries they call through (only they know the AWS SDK); imported here only
    # when tracing, so a disabled tracer costs no import.
    from serverless_karpenter.adapters.aws import TRACED_MODULES

    return Tracer(service=SERVICE, patch_modules=TRACED_MODULES)


logger = _make_logger()
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
tracer = _make_tracer()


def bind_cluster(name: str) -> None:
    """Key the invocation's logs (``cluster``) and metrics (``ClusterName``) by the cluster; every
    handler calls it first."""
    logger.append_keys(cluster=name)
    metrics.set_default_dimensions(**{CLUSTER_DIMENSION: name})


def emit_dimensioned(
    name: MetricName, value: float, dimensions: Mapping[str, str], unit: MetricUnit = MetricUnit.Count
) -> None:
    """A metric with its own dimensions (State, Kind, Method...), flushed on its own as EMF."""
    with single_metric(
        name=name,
        unit=unit,
        value=value,
        namespace=NAMESPACE,
        default_dimensions=dict(metrics.default_dimensions),
    ) as metric:
        for key, dim_value in dimensions.items():
            metric.add_dimension(name=key, value=dim_value)


__all__ = [
    "CLUSTER_DIMENSION",
    "DEFAULT_DIMENSION_NAMES",
    "NAMESPACE",
    "SERVICE",
    "MetricName",
    "MetricUnit",
    "Msg",
    "bind_cluster",
    "emit_dimensioned",
    "logger",
    "metrics",
    "tracer",
]
