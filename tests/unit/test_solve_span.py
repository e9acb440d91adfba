"""An X-Ray trace shows the solve as its own span (``## …Scheduler.solve``), without the result as
metadata: a whole SchedulingResult would swell the segment past what X-Ray takes."""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from typing import Any

import pytest
from aws_lambda_powertools.tracing.base import BaseSegment
from serverless_karpenter.observability import _UntracedProvider, _UntracedSegment, tracer
from serverless_karpenter.scheduling.scheduler import Scheduler

from tests.builders import pod


class _Segment(_UntracedSegment):
    def __init__(self, metadata: list[str]) -> None:
        self._metadata = metadata

    def put_metadata(self, key: str, value: Any, namespace: str = "default") -> None:
        self._metadata.append(key)


class _Recording(_UntracedProvider):
    def __init__(self) -> None:
        self.spans: list[str] = []
        self.metadata: list[str] = []

    @contextmanager
    def in_subsegment(self, name: str | None = None, **kwargs: Any) -> Generator[BaseSegment, None, None]:
        self.spans.append(str(name))
        yield _Segment(self.metadata)


def test_each_solve_is_a_span_without_its_result(monkeypatch: pytest.MonkeyPatch) -> None:
    recording = _Recording()
    monkeypatch.setattr(tracer, "provider", recording)

    result = Scheduler([]).solve([pod("p", cpu="100m")])

    assert recording.spans == ["## serverless_karpenter.scheduling.scheduler.Scheduler.solve"]
    assert recording.metadata == []
    assert not result.new_nodeclaims and len(result.unschedulable) == 1
