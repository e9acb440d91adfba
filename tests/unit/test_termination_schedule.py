"""The termination function's one-minute schedule arrives as a message on its own queue (so that the
event source is its only invoker and is never throttled): the handler tells the schedule's message from a
drain's re-queued ones, and only a drain's continues the chain unconditionally."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from serverless_karpenter.adapters.invoker import NoProvisionerInvoker
from serverless_karpenter.clock import ManualClock
from serverless_karpenter.deployment import TERMINATION_SCHEDULED_PASS
from serverless_karpenter.termination.usecases import TerminationChain, TerminationRun
from serverless_karpenter_sim.lambdas import load_handler

from tests.unit.lambda_context import Context

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def handler(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, list[bool], ManualClock]:
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "test")
    module = load_handler("termination")
    clock = ManualClock(NOW)
    plane = SimpleNamespace(
        clock=clock,
        settings=SimpleNamespace(cluster_name="c", termination_requeue_seconds=5),
        provisioner=NoProvisionerInvoker(),
    )
    requeues: list[bool] = []

    def run(_plane: Any, _wake: Any, *, requeue: bool) -> TerminationRun:
        requeues.append(requeue)
        return TerminationRun(requeued=requeue)

    monkeypatch.setattr(module, "control_plane", lambda: plane)
    monkeypatch.setattr(module, "chain", TerminationChain(run=run))
    return module, requeues, clock


def records(*bodies: str) -> dict[str, Any]:
    return {"Records": [{"messageId": str(i), "body": body} for i, body in enumerate(bodies)]}


# What the stack's schedule rule sends (tests/infra/test_infra_queues.py checks the template's).
SCHEDULED = json.dumps({"reason": TERMINATION_SCHEDULED_PASS})
DRAIN = json.dumps({"reason": "drains-in-progress"})


def test_a_scheduled_message_starts_a_chain_only_when_none_ran_lately(
    handler: tuple[ModuleType, list[bool], ManualClock],
) -> None:
    module, requeues, clock = handler
    module.lambda_handler(records(SCHEDULED), Context())
    assert requeues == [True]  # no chain yet: the schedule starts one
    clock.advance(1)
    module.lambda_handler(records(SCHEDULED), Context())
    assert requeues[-1] is False  # the chain it started is alive: no second one beside it
    clock.advance(1)
    module.lambda_handler(records(DRAIN, SCHEDULED), Context())
    assert requeues[-1] is True  # a drain's message continues its chain, whatever else is in the batch
    clock.advance(timedelta(minutes=1).total_seconds())
    module.lambda_handler(records(SCHEDULED), Context())
    assert requeues[-1] is True  # the chain went quiet (a lost message): the schedule revives it


@pytest.mark.parametrize("body", [DRAIN, json.dumps({"reason": "interruption"}), "not json", "[]"])
def test_any_other_message_continues_the_chain(
    handler: tuple[ModuleType, list[bool], ManualClock], body: str
) -> None:
    module, requeues, _ = handler
    module.lambda_handler(records(SCHEDULED), Context())
    module.lambda_handler(records(body), Context())
    assert requeues == [True, True]


def test_an_invocation_without_records_counts_as_the_schedule(
    handler: tuple[ModuleType, list[bool], ManualClock],
) -> None:
    module, requeues, _ = handler
    module.lambda_handler({"source": "aws.scheduler"}, Context())
    module.lambda_handler({}, Context())
    assert requeues == [True, False]
