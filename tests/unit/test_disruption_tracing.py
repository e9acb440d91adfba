"""The disruption decision is a span of its own in an X-Ray trace, and costs nothing with tracing off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Generator
from contextlib import contextmanager
from typing import Any, cast

import pytest
from serverless_karpenter.disruption import usecases
from serverless_karpenter.observability import tracer

from tests.unit.test_disruption_core import OPTIONS, snapshot


class RecordingProvider:
    """Stands in for X-Ray: which subsegments were opened, and what was put on them."""

    def __init__(self) -> None:
        self.subsegments: list[str] = []
        self.metadata: list[str] = []

    @contextmanager
    def in_subsegment(self, name: str | None = None, **kwargs: Any) -> Generator[Any, None, None]:
        self.subsegments.append(str(name))
        outer = self

        class Segment:
            def put_metadata(self, key: str, value: Any, namespace: str = "default") -> None:
                outer.metadata.append(key)

            def add_exception(self, exception: BaseException, stack: Any, remote: bool = False) -> None:
                return None

        yield Segment()


def test_the_disruption_decision_is_a_span(monkeypatch: pytest.MonkeyPatch) -> None:
    provider = RecordingProvider()
    monkeypatch.setattr(tracer, "provider", provider)
    run = usecases.DisruptionRun()

    # Nothing to decide on: the decision reads no cluster, so no plane is needed.
    usecases.decide(cast(Any, None), snapshot([], []), OPTIONS, [], run, lambda payload: None)

    assert provider.subsegments == ["## serverless_karpenter.disruption.usecases.decide"]
    assert provider.metadata == [], "the evaluation is not copied into the trace"
    assert run.decided == []


PROBE = """
import json, sys
from serverless_karpenter.disruption import usecases
from serverless_karpenter.observability import tracer
print(json.dumps({
    "disabled": tracer.disabled,
    "provider": type(tracer.provider).__name__,
    "xray": "aws_xray_sdk.core" in sys.modules,
    "traced": hasattr(usecases.decide, "__wrapped__"),
}))
"""


def test_with_tracing_off_the_span_is_the_untraced_provider_and_no_xray_sdk() -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("POWERTOOLS_", "LAMBDA_", "AWS_"))}
    env = {
        **clean,
        "AWS_REGION": "us-east-1",
        "LAMBDA_TASK_ROOT": "/var/task",
        "AWS_LAMBDA_FUNCTION_NAME": "f",
        "POWERTOOLS_TRACE_DISABLED": "true",
    }
    result = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )

    assert json.loads(result.stdout.splitlines()[-1]) == {
        "disabled": True,
        "provider": "_UntracedProvider",
        "xray": False,
        "traced": True,
    }
