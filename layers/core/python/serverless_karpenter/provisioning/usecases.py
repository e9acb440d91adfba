"""Use cases behind the watcher and provisioner handlers."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from serverless_karpenter import crashpoints
from serverless_karpenter.adapters.kubernetes import KubernetesError, WatchEvent, WatchExpired, WatchStream
from serverless_karpenter.adapters.state_store import Lease
from serverless_karpenter.lifecycle.reconciler import LifecycleReconciler, LifecycleResult
from serverless_karpenter.observability import logger
from serverless_karpenter.provisioning.batcher import PendingPodBatcher
from serverless_karpenter.provisioning.context import ControlPlane
from serverless_karpenter.provisioning.provisioner import Provisioner, ProvisioningResult
from serverless_karpenter.scheduling import pods as podlib

LEASE_NAME = "provisioner"
# Short, and renewed before every launch: a writer that dies holds the others off for a minute at most.
LEASE_SECONDS = 60.0


@dataclass
class ProvisionerRun:
    leader: bool
    lifecycle: LifecycleResult = field(default_factory=LifecycleResult)
    provisioning: ProvisioningResult = field(default_factory=ProvisioningResult)


def run_provisioner(plane: ControlPlane, lease: Lease) -> ProvisionerRun:
    """One pass of the single writer: finish earlier launches, then provision pending pods."""
    if not lease.acquire(plane.clock.now(), LEASE_SECONDS):
        logger.info("another provisioner holds the lease; exiting", extra={"holder": lease.holder})
        return ProvisionerRun(leader=False)

    def renew() -> bool:
        return lease.acquire(plane.clock.now(), LEASE_SECONDS)

    try:
        lifecycle = LifecycleReconciler(plane).reconcile()
        # What the reconcile read, as it left it: each is read once an invocation (issue 22).
        provisioning = Provisioner(plane).provision(
            renew,
            records=lifecycle.records,
            nodes=lifecycle.nodes,
            nodeclass_specs=lifecycle.nodeclass_specs,
            nodepools=lifecycle.nodepools,
        )
    except crashpoints.InjectedCrash:
        raise  # a killed Lambda releases nothing: the lease runs out, as it would in AWS
    except BaseException:
        lease.release()
        raise
    lease.release()
    return ProvisionerRun(leader=True, lifecycle=lifecycle, provisioning=provisioning)


def provisioner_lease(plane: ControlPlane, request_id: str) -> Lease:
    from serverless_karpenter.adapters import aws

    return Lease(
        aws.client("dynamodb", plane.settings.aws_region),
        plane.settings.state_table_name,
        LEASE_NAME,
        holder=f"{plane.settings.aws_lambda_log_stream_name}/{request_id}",
    )


# The watcher's invocation ends this long before Lambda would end it: the watch's own timeout, and the read
# margin past it (the connect timeout), fit in the rest.
WATCH_END_MARGIN_SECONDS = 10.0
_END = object()


@dataclass(frozen=True)
class StreamProgress:
    """What the API server has written on one watch stream, as the simulation's driver reads it."""

    lines: int
    done: bool


class PendingPodWatch:
    """The watcher's invocation: LIST the pending pods once, then WATCH them from that resourceVersion
    until ``deadline``, as Karpenter's informer does, instead of listing every second.

    - 410 Gone (an ERROR event, or the watch request's own status) lists again;
    - bookmarks (``allowWatchBookmarks``) advance the resourceVersion a later watch starts from, so a quiet
      selector does not fall out of the server's window;
    - the batcher sees the pending pods as they change and, while any are pending, every
      ``watcher_poll_interval_seconds`` (Karpenter's 1 s idle / 10 s maximum window);
    - each watch asks the server to end it at ``deadline`` (``timeoutSeconds``), so it ends before the
      invocation does.

    An idle invocation costs the API server one LIST and one WATCH. :meth:`run` is the Lambda's loop; the
    simulation, which runs components in turns on a virtual clock, calls :meth:`step` once a turn.
    """

    def __init__(
        self,
        plane: ControlPlane,
        batcher: PendingPodBatcher,
        invoke_provisioner: Callable[[dict[str, object]], None],
        deadline: datetime,
    ) -> None:
        self._plane = plane
        self._batcher = batcher
        self._invoke = invoke_provisioner
        self.deadline = deadline
        self._provisionable: dict[str, bool] = {}
        self._version: str | None = None
        self._stream: WatchStream | None = None
        self.invocations = 0
        self.lists = 0
        self.watches = 0

    @property
    def pending(self) -> frozenset[str]:
        return frozenset(key for key, provisionable in self._provisionable.items() if provisionable)

    @property
    def resource_version(self) -> str:
        """Where the next watch starts: the last list's, event's or bookmark's version."""
        return self._version or ""

    @property
    def over(self) -> bool:
        return self._plane.clock.now() >= self.deadline

    # -- the Lambda's loop -----------------------------------------------------------------------------

    def run(self) -> int:
        """Watch until the deadline; the number of provisioner invocations."""
        self._list()
        self._observe()
        while not self.over:
            try:
                stream = self._open()
            except KubernetesError as error:
                if not error.transient:
                    raise
                # A blip: try again in a second, as the next turn would; pods already seen still batch.
                logger.warning("watching pending pods failed; retrying", extra={"error": str(error)})
                self._plane.clock.sleep(self._plane.settings.watcher_poll_interval_seconds)
                self._observe()
                continue
            if stream is None:
                break
            self._consume(stream)
        return self.invocations

    def _consume(self, stream: WatchStream) -> None:
        """Read ``stream`` on a thread while this one wakes the batcher on time, until the stream ends."""
        events: queue.SimpleQueue[object] = queue.SimpleQueue()

        def pump() -> None:
            try:
                while (event := stream.next()) is not None:
                    events.put(event)
            except BaseException as error:  # handed over: the loop decides
                events.put(error)
            events.put(_END)

        reader = threading.Thread(target=pump, name="pending-pod-watch", daemon=True)
        reader.start()
        try:
            while not self.over:
                left = (self.deadline - self._plane.clock.now()).total_seconds()
                wait = min(left, self._plane.settings.watcher_poll_interval_seconds) if self.pending else left
                try:
                    item = events.get(timeout=max(0.0, wait))
                except queue.Empty:
                    item = None
                if item is _END:
                    return
                if isinstance(item, WatchExpired):
                    self._list()
                    return  # and watch again from the new list's version
                if isinstance(item, KubernetesError) and item.transient:
                    return  # cut mid-stream: watch again from the last version seen
                if isinstance(item, BaseException):
                    raise item
                elif isinstance(item, WatchEvent):
                    self._apply(item)
                self._observe()
        finally:
            stream.close()
            reader.join(timeout=1.0)

    # -- the simulation's turns ------------------------------------------------------------------------

    def step(self, progress: Mapping[str, StreamProgress]) -> int:
        """One turn: read exactly what the server has written on the open watch (``progress``, by the
        stream's Audit-Id), then let the batcher look. Opens and reopens watches when :meth:`run` would,
        so the API server sees the same requests. The number of provisioner invocations so far."""
        if self._version is None:
            self._list()
        elif self._stream is not None:
            stream = self._stream
            written = progress.get(stream.audit_id, StreamProgress(stream.lines_read, False))
            ended = written.done
            try:
                while stream.lines_read < written.lines:
                    event = stream.next()
                    if event is None:
                        ended = True
                        break
                    self._apply(event)
            except WatchExpired:
                self._list()
                ended = True
            except KubernetesError as error:
                if not error.transient:
                    stream.close()
                    self._stream = None
                    raise
                ended = True  # cut mid-stream: watch again from the last version seen
            if ended:
                stream.close()
                self._stream = None
        if self._stream is None:
            try:
                self._stream = self._open()
            except KubernetesError as error:
                if not error.transient:
                    raise
                logger.warning("watching pending pods failed; retrying", extra={"error": str(error)})
        self._observe()
        return self.invocations

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    # -- shared ----------------------------------------------------------------------------------------

    def _list(self) -> None:
        pods, version = self._plane.kube.list_pending_pods_at()
        self.lists += 1
        self._provisionable = {podlib.key(p): podlib.is_provisionable(p) for p in pods}
        self._version = version

    def _open(self) -> WatchStream | None:
        """A watch from the current resourceVersion that the server ends by the deadline; None when too
        little time is left for one. A 410 on the request lists again first."""
        for _ in range(2):
            seconds = int((self.deadline - self._plane.clock.now()).total_seconds())
            if seconds < 1:
                return None
            assert self._version is not None
            try:
                self.watches += 1
                return self._plane.kube.watch_pending_pods(self._version, seconds)
            except WatchExpired:
                self._list()
        return None

    def _apply(self, event: WatchEvent) -> None:
        if event.resource_version:
            self._version = event.resource_version
        if event.type == "BOOKMARK":
            return
        key = podlib.key(event.object)
        if event.type == "DELETED":
            self._provisionable.pop(key, None)
        else:
            self._provisionable[key] = podlib.is_provisionable(event.object)

    def _observe(self) -> None:
        pending = self.pending
        if self._batcher.observe(pending, self._plane.clock.now()):
            self._invoke({"reason": "pending-pods", "pods": len(pending)})
            self.invocations += 1


def watcher_deadline(plane: ControlPlane, watch_seconds: float, remaining_seconds: float) -> datetime:
    """When an invocation stops watching: after ``watch_seconds``, and in time before Lambda ends it."""
    seconds = min(watch_seconds, max(0.0, remaining_seconds - WATCH_END_MARGIN_SECONDS))
    return plane.clock.now() + timedelta(seconds=seconds)
