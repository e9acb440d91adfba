"""The Lambdas' logs, as CloudWatch receives them: structured JSON with Karpenter's vocabulary (issue 9)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter.observability import CLUSTER_DIMENSION, SERVICE, Msg, logger
from serverless_karpenter.observability import metrics as powertools_metrics

from tests.builders import deployment, nodeclass, nodepool
from tests.integration.simulate import simulation

pytestmark = pytest.mark.integration


def lambda_output(text: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The log records and the EMF metric blobs in the handlers' stdout; every line is one or the other."""
    logs, metrics = [], []
    for line in text.splitlines():
        record = json.loads(line)  # a line that is not JSON fails the test: CloudWatch could not parse it
        (metrics if "_aws" in record else logs).append(record)
    return logs, metrics


def test_every_lambda_log_line_is_json_with_the_cluster_and_karpenters_nodeclaim_lines(
    tmp_path: Path,
) -> None:
    # The logger is one per process: forget the cluster an earlier simulation appended, so that a line
    # logged before a handler appends it (a cold start's, say) is caught here.
    logger.remove_keys(["cluster"])
    powertools_metrics.clear_default_dimensions()
    sim = simulation(
        tmp_path, {"name": "logs", "manifests": [nodepool(), nodeclass(), deployment("web", 2)], "steps": []}
    )
    try:
        sim.start()
        sim.run_for(90)
        initialized = [r.name for r in sim.plane.store.list() if r.state == NodeClaimState.INITIALIZED]
        output = sim.lambdas.log.getvalue()
    finally:
        sim.stop()
    assert initialized, "the scenario should have launched and initialized capacity"
    logs, metrics = lambda_output(output)
    assert logs and metrics
    for record in logs:
        assert record.get("cluster") == sim.cluster_name, record
        assert record.get("service") == SERVICE and record.get("level") and record.get("message"), record
        assert record.get("function_name", "").startswith(f"{sim.cluster_name}-"), record
    # Every metric, the dimensioned ones too, carries the cluster: a stack's alarms select on it.
    for blob in metrics:
        assert blob.get(CLUSTER_DIMENSION) == sim.cluster_name, blob
        for directive in blob["_aws"]["CloudWatchMetrics"]:
            assert all(CLUSTER_DIMENSION in dims for dims in directive["Dimensions"]), blob
    messages = {r["message"] for r in logs}
    assert {Msg.FOUND_PROVISIONABLE_PODS, Msg.COMPUTED_NEW_NODECLAIMS} <= messages
    nodeclaim_messages = (
        Msg.CREATED_NODECLAIM,
        Msg.LAUNCHED_NODECLAIM,
        Msg.REGISTERED_NODECLAIM,
        Msg.INITIALIZED_NODECLAIM,
    )
    for message in nodeclaim_messages:
        lines = [r for r in logs if r["message"] == message]
        assert lines, f"no {message!r} line"
        assert all(r.get("nodeclaim") for r in lines), lines
    launched = {r["nodeclaim"] for r in logs if r["message"] == Msg.LAUNCHED_NODECLAIM}
    assert set(initialized) <= launched
