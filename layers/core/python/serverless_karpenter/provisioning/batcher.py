"""Karpenter's pod batching: wait for a quiet second (or at most ten) before provisioning.

Pods of one rollout arrive over a few seconds; provisioning them together packs them onto fewer nodes.
The batcher keeps its window across polls, so it works whether a poller loops inside one invocation or
is called once per tick. Pods that stay pending after a provisioning pass (waiting for their node to
boot, or unschedulable) trigger it again only after ``retry_seconds``, not on every poll.
"""

from __future__ import annotations

from datetime import datetime, timedelta


class PendingPodBatcher:
    def __init__(self, idle_seconds: float, max_seconds: float, retry_seconds: float = 30.0) -> None:
        self._idle = timedelta(seconds=idle_seconds)
        self._max = timedelta(seconds=max_seconds)
        self._retry = timedelta(seconds=retry_seconds)
        self._seen: frozenset[str] = frozenset()
        self._handed_over: frozenset[str] = frozenset()
        self._last_fired: datetime | None = None
        self._window_start: datetime | None = None
        self._last_change: datetime | None = None

    def observe(self, pending: frozenset[str], now: datetime) -> bool:
        """Record the pending pods seen now; True when a batch is ready to provision."""
        if not pending:
            self._seen, self._handed_over = frozenset(), frozenset()
            self._window_start = self._last_change = None
            return False
        new = pending - self._handed_over
        retry_due = self._last_fired is None or now - self._last_fired >= self._retry
        if not new:
            if not retry_due:
                return False
            # Nothing new to wait for: retry the pods that are still pending now.
            return self._fire(pending, now)
        if self._window_start is None:
            self._window_start = self._last_change = now
        elif not pending <= self._seen:
            self._last_change = now
        self._seen = pending
        assert self._last_change is not None
        if now - self._last_change >= self._idle or now - self._window_start >= self._max:
            return self._fire(pending, now)
        return False

    def _fire(self, pending: frozenset[str], now: datetime) -> bool:
        self._window_start = self._last_change = None
        self._handed_over = pending
        self._last_fired = now
        return True
