"""``benchmarks idle-cost`` on the simulator: what an idle cluster's functions do, as the bill counts it."""

from __future__ import annotations

from serverless_karpenter.config import Settings

from benchmarks import idle_cost


def test_an_idle_period_bills_the_watch_and_one_pass_a_minute_of_the_others() -> None:
    period = idle_cost.simulate(minutes=3)
    assert period.lambda_failures == 0
    runs = period.functions
    watch = Settings.model_fields["watcher_poll_seconds"].default
    # One invocation a minute each; the watcher is billed for its watch, which blocks (~55 s).
    for name in ("watcher", "provisioner", "disruption", "termination"):
        assert runs[name].invocations == 3, name
    watcher_seconds = runs["watcher"].billed_seconds / 3
    assert watch <= watcher_seconds <= watch + 2
    # Nothing to disrupt: one pass a minute, no loop.
    assert runs["disruption"].billed_seconds / 3 < 5
    assert runs["interruption"].invocations == 0
    # An idle cluster publishes no custom metric: nothing pends, nothing is priced (each metric is billed
    # for every hour it is published in).
    assert period.metric_streams == []
