"""The watcher's invocation stops watching in time: its last watch, asked to end at the deadline
(``timeoutSeconds``), and read for the connect timeout past it, end before Lambda ends the invocation."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from serverless_karpenter.adapters.kubernetes import DEFAULT_CONNECT_TIMEOUT_SECONDS
from serverless_karpenter.clock import ManualClock
from serverless_karpenter.config import Settings
from serverless_karpenter.deployment import FUNCTION_TIMEOUT_SECONDS
from serverless_karpenter.provisioning.context import ControlPlane
from serverless_karpenter.provisioning.usecases import WATCH_END_MARGIN_SECONDS, watcher_deadline


def plane(clock: ManualClock) -> ControlPlane:
    return cast(ControlPlane, SimpleNamespace(clock=clock))


def test_the_configured_watch_when_the_invocation_has_time_for_it() -> None:
    clock = ManualClock()
    deadline = watcher_deadline(plane(clock), 55.0, FUNCTION_TIMEOUT_SECONDS["watcher"])
    assert (deadline - clock.now()).total_seconds() == 55.0


def test_shorter_when_lambda_would_end_the_invocation_first() -> None:
    clock = ManualClock()
    deadline = watcher_deadline(plane(clock), 55.0, 30.0)
    assert (deadline - clock.now()).total_seconds() == 30.0 - WATCH_END_MARGIN_SECONDS
    assert watcher_deadline(plane(clock), 55.0, 5.0) == clock.now()  # no time for a watch at all


def test_the_margin_covers_the_watch_read_past_its_end() -> None:
    # The last watch's read timeout is its timeoutSeconds plus the connect timeout.
    assert WATCH_END_MARGIN_SECONDS > DEFAULT_CONNECT_TIMEOUT_SECONDS
    watch_seconds = Settings.model_fields["watcher_poll_seconds"].default
    assert FUNCTION_TIMEOUT_SECONDS["watcher"] >= watch_seconds + WATCH_END_MARGIN_SECONDS
