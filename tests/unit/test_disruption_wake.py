"""A disruption pass wakes the provisioner once, however many commands under way asked it to, and the
termination function when it deleted nodes."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, cast

import pytest
from serverless_karpenter.config import Settings
from serverless_karpenter.disruption import usecases
from serverless_karpenter.disruption.acting import CoalescedWake
from serverless_karpenter.disruption.candidates import Options
from serverless_karpenter.disruption.run import DisruptionRun
from serverless_karpenter.provisioning.context import ControlPlane


def test_the_wakes_of_a_pass_go_out_as_one_with_every_nodeclaim_once() -> None:
    sent: list[dict[str, object]] = []
    wake = CoalescedWake(sent.append)

    wake({"reason": "disruption-replacements", "nodeclaims": ["a", "b"]})
    wake({"reason": "disruption-replacements", "nodeclaims": ["b", "c"]})
    assert sent == [], "nothing is sent before the pass ends"

    wake.flush()
    assert sent == [{"reason": "disruption-replacements", "nodeclaims": ["a", "b", "c"]}]

    wake.flush()
    assert len(sent) == 1, "a pass that asked for nothing more sends nothing more"


def test_a_failing_wake_is_left_to_the_provisioners_schedule() -> None:
    def unreachable(payload: dict[str, object]) -> None:
        raise ConnectionError("no route to Lambda")

    wake = CoalescedWake(unreachable)
    wake({"reason": "disruption-replacements", "nodeclaims": ["a"]})
    wake.flush()  # logged, not raised: the provisioner's schedule runs within a minute anyway


def _plane(url: str) -> ControlPlane:
    settings = Settings(cluster_name="test", termination_queue_url=url)
    return cast(ControlPlane, SimpleNamespace(settings=settings))


@pytest.mark.parametrize(
    ("done", "messages"),
    [
        (DisruptionRun(passes=1, executed=["Empty: delete a"]), 1),
        (DisruptionRun(passes=1, expired=["a"]), 1),
        (DisruptionRun(passes=1, decided=["Drifted: replace a"]), 0),  # nothing deleted yet
    ],
)
def test_a_pass_that_deleted_nodes_asks_for_a_termination_pass_at_once(
    sqs: Any, monkeypatch: pytest.MonkeyPatch, done: DisruptionRun, messages: int
) -> None:
    # Karpenter's terminator sees a Node's deletion through its watch; ours runs on its queue, whose
    # schedule sends a message a minute. Without a message of its own, a drain would wait up to that long.
    url = sqs.create_queue(QueueName="termination-work")["QueueUrl"]
    monkeypatch.setattr(usecases, "_pass", lambda plane, options, wake: done)

    usecases.run_disruption_pass(_plane(url), Options(), wake=lambda payload: None)

    received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages") or []
    assert len(received) == messages
    assert all(json.loads(m["Body"]) == {"reason": "disruption"} for m in received)


def test_a_termination_wake_that_fails_leaves_the_pass_done(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(plane: ControlPlane, delay: int, reason: str) -> bool:
        raise ConnectionError("no route to SQS")

    monkeypatch.setattr(usecases, "queue_termination_pass", unreachable)
    done = DisruptionRun(passes=1, executed=["Empty: delete a"])
    monkeypatch.setattr(usecases, "_pass", lambda plane, options, wake: done)

    assert usecases.run_disruption_pass(_plane("url"), Options(), wake=lambda payload: None) is done
