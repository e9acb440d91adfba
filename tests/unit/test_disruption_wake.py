"""A disruption pass wakes the provisioner once, however many commands under way asked it to."""

from __future__ import annotations

from serverless_karpenter.disruption.acting import CoalescedWake


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
