"""``benchmarks idle-cost``: the EMF parsing, the price table and the arithmetic of the bill."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from benchmarks import idle_cost
from benchmarks.idle_cost import FunctionRun, SimulatedPeriod, TemplateFacts


def emf(name: str, dimensions: dict[str, str], value: float = 1.0) -> str:
    return json.dumps(
        {
            "_aws": {
                "Timestamp": 0,
                "CloudWatchMetrics": [
                    {
                        "Namespace": "ServerlessKarpenter",
                        "Dimensions": [sorted(dimensions)],
                        "Metrics": [{"Name": name}],
                    }
                ],
            },
            name: value,
            **dimensions,
        }
    )


def test_each_name_and_dimension_set_with_its_values_is_one_stream() -> None:
    base = {"service": "serverless-karpenter", "ClusterName": "c"}
    log = "\n".join(
        [
            emf("PendingPods", base),
            emf("PendingPods", base, 3),  # the same stream again
            emf("NodeClaims", {**base, "State": "Launched"}),
            emf("NodeClaims", {**base, "State": "Registered"}),
            '{"level": "INFO", "message": "not a metric"}',
            "START RequestId: 1",
        ]
    )
    streams = idle_cost.metric_streams(log)
    assert len(streams) == 3
    assert (
        "ServerlessKarpenter",
        "NodeClaims",
        (("ClusterName", "c"), ("State", "Launched"), ("service", "serverless-karpenter")),
    ) in streams


def test_the_price_table_is_dated_and_sourced() -> None:
    prices = idle_cost.load_prices()
    assert prices["region"] == "us-east-1"
    assert prices["as_of"]
    assert all(url.startswith("https://aws.amazon.com/") for url in prices["sources"].values())


def facts(**overrides: object) -> TemplateFacts:
    functions = {
        "watcher": {"memory_mb": 128, "architecture": "arm64", "tracing": "PassThrough"},
        "provisioner": {"memory_mb": 1024, "architecture": "arm64", "tracing": "PassThrough"},
    }
    values: dict[str, object] = {
        "functions": functions,
        "event_sources": 2,
        "alarms": [{"name": "a", "metrics": 1}, {"name": "rate", "metrics": 2}],
        "dashboards": 1,
        "kms_keys": 1,
        "scheduled_queue_messages_per_minute": 1,
    }
    values.update(overrides)
    return TemplateFacts(**values)  # type: ignore[arg-type]


def period() -> SimulatedPeriod:
    # 10 minutes: 10 watcher invocations billed 55 s each, 10 provisioner passes of 0.1 s.
    return SimulatedPeriod(
        minutes=10,
        wall_seconds=1,
        functions={
            "watcher": FunctionRun(passes=600, invocations=10, billed_seconds=550.0),
            "provisioner": FunctionRun(
                passes=10,
                invocations=10,
                billed_seconds=1.0,
                log_bytes=4000,
                api_calls=Counter({"dynamodb:Query": 20, "dynamodb:UpdateItem": 10}),
            ),
        },
        metric_streams=[
            {"namespace": "ServerlessKarpenter", "metric": "ProvisionerHeartbeat", "dimensions": {}}
        ],
        kube_requests={},
        lambda_failures=0,
    )


def test_the_bill_prices_each_item_per_month() -> None:
    prices = idle_cost.load_prices()
    result = idle_cost.bill(period(), facts(), prices)
    usd = result["usd_per_month"]
    invocations = idle_cost.MINUTES_PER_MONTH
    # 55 s at 128 MB, every minute of the month, at the arm64 price.
    assert usd["lambda watcher (duration)"] == pytest.approx(
        invocations * 55 * 0.125 * prices["lambda_gb_second"]["arm64"], abs=1e-3
    )
    assert usd["lambda provisioner (duration)"] == pytest.approx(
        invocations * 0.1 * prices["lambda_gb_second"]["arm64"], abs=1e-3
    )
    assert usd["cloudwatch alarms"] == pytest.approx(0.3)  # per metric read: 1 + 2
    assert usd["cloudwatch dashboards"] == 3.0
    assert usd["kms keys"] == 1.0
    assert usd["cloudwatch custom metrics"] == pytest.approx(0.3)
    assert usd["x-ray traces"] == 0  # not traced
    # 2 event sources x 5 idle pollers x 3 long polls a minute, and the schedule's message sent and deleted.
    assert result["counts_per_month"]["sqs_requests"] == (2 * 5 * 3 + 2) * invocations
    assert result["counts_per_month"]["dynamodb_read_requests"] == 2 * invocations
    assert result["counts_per_month"]["dynamodb_write_requests"] == 1 * invocations
    assert result["total_usd_per_month"] == pytest.approx(sum(usd.values()), abs=0.01)
    assert result["total_usd_per_month_dashboard_in_free_tier"] == pytest.approx(
        result["total_usd_per_month"] - 3, abs=0.01
    )


def test_active_tracing_is_one_trace_an_invocation() -> None:
    functions = {name: {**spec, "tracing": "Active"} for name, spec in facts().functions.items()}
    result = idle_cost.bill(period(), facts(functions=functions), idle_cost.load_prices())
    assert result["counts_per_month"]["xray_traces"] == 2 * idle_cost.MINUTES_PER_MONTH
