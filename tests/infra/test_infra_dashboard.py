"""The dashboard against the code: its metric names are MetricName members, its dimension sets are the
ones the code's EMF output carries, and every MetricName member is emitted somewhere."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from serverless_karpenter.observability import (
    CLUSTER_DIMENSION,
    DEFAULT_DIMENSION_NAMES,
    NAMESPACE,
    SERVICE,
    MetricName,
)

from tests.infra.conftest import Synthesized
from tests.infra.helpers import CLUSTERS, resources_of_type

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]
CODE_ROOTS = (REPO / "layers" / "core" / "python" / "serverless_karpenter", REPO / "functions")
SEARCH = re.compile(r"SEARCH\('\{(?P<namespace>[^,}]+),(?P<dimensions>[^}]*)\} MetricName=\"(?P<name>\w+)\"")
METRIC_VALUES = {m.value for m in MetricName}

# The issue's widget list, as dashboard titles.
REQUIRED_WIDGETS = {
    "Pending pods": {MetricName.PENDING_PODS},
    "NodeClaims by state": {MetricName.NODECLAIMS_BY_STATE},
    "Launches": {MetricName.NODECLAIMS_LAUNCHED},
    "Launch latency (pending → launched → initialized)": {
        MetricName.LAUNCH_LATENCY,
        MetricName.INITIALIZATION_LATENCY,
    },
    "Interruption messages by kind": {MetricName.INTERRUPTION_MESSAGES},
    "Interruption latency and actions": {MetricName.INTERRUPTION_LATENCY},
    "Drains": {MetricName.DRAINS_STARTED, MetricName.DRAINS_COMPLETED},
    "Disruption actions by method": {MetricName.DISRUPTION_ACTIONS},
    "Cost per hour of managed capacity": {MetricName.COST_PER_HOUR},
    "Unavailable offerings and launch errors": {MetricName.UNAVAILABLE_OFFERING_HITS},
    "Lambda errors": set(),
    "Lambda throttles": set(),
    "Lambda duration (p90)": set(),
    "Dead-letter queue depth": set(),
}


@dataclass(frozen=True)
class DashboardMetric:
    widget: str
    namespace: str
    name: str
    dimensions: frozenset[str]


def dashboard_body(template: dict[str, Any]) -> dict[str, Any]:
    (dashboard,) = resources_of_type(template, "AWS::CloudWatch::Dashboard").values()
    body = dashboard["Properties"]["DashboardBody"]
    if isinstance(body, dict):
        # Function and queue names are references; inside JSON strings a placeholder keeps it parseable.
        body = "".join(part if isinstance(part, str) else "TOKEN" for part in body["Fn::Join"][1])
    return json.loads(body)


def dashboard_metrics(template: dict[str, Any]) -> Iterator[DashboardMetric]:
    for widget in dashboard_body(template)["widgets"]:
        properties = widget["properties"]
        for entry in properties.get("metrics", []):
            options = entry[-1] if isinstance(entry[-1], dict) else {}
            if "expression" in options:
                for match in SEARCH.finditer(options["expression"]):
                    dims = frozenset(d.strip() for d in match["dimensions"].split(",") if d.strip())
                    yield DashboardMetric(
                        properties.get("title", ""), match["namespace"], match["name"], dims
                    )
                continue
            plain = [e for e in entry if isinstance(e, str)]
            namespace, name, *pairs = plain
            yield DashboardMetric(properties.get("title", ""), namespace, name, frozenset(pairs[0::2]))


@dataclass
class CodeUsage:
    referenced: set[str] = field(default_factory=set)  # MetricName member names
    dimensions: dict[str, set[frozenset[str]]] = field(default_factory=dict)  # metric value -> dim sets


def _metric_member(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "MetricName":
        return node.attr
    return None


def scan_code() -> CodeUsage:
    usage = CodeUsage()
    for root in CODE_ROOTS:
        for path in root.rglob("*.py"):
            if path.name == "observability.py" and path.parent.name == "serverless_karpenter":
                continue
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                member = _metric_member(node)
                if member is not None:
                    usage.referenced.add(member)
                if not isinstance(node, ast.Call):
                    continue
                callee = (
                    node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                )
                if (
                    callee == "emit_dimensioned"
                    and len(node.args) >= 3
                    and isinstance(node.args[2], ast.Dict)
                ):
                    member = _metric_member(node.args[0])
                    keys = [str(k.value) for k in node.args[2].keys if isinstance(k, ast.Constant)]
                    if member is not None:
                        value = MetricName[member].value
                        usage.dimensions.setdefault(value, set()).add(
                            frozenset({*keys, *DEFAULT_DIMENSION_NAMES})
                        )
                elif callee == "add_metric":
                    name = next((kw.value for kw in node.keywords if kw.arg == "name"), None)
                    member = _metric_member(name) if name is not None else None
                    if member is not None:
                        usage.dimensions.setdefault(MetricName[member].value, set()).add(
                            frozenset(DEFAULT_DIMENSION_NAMES)
                        )
    return usage


@pytest.fixture(scope="module")
def code_usage() -> CodeUsage:
    return scan_code()


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_dashboard_metric_names_all_exist_in_metric_name(synthesized: Synthesized, cluster: str) -> None:
    ours = [m for m in dashboard_metrics(synthesized.templates[cluster]) if m.namespace == NAMESPACE]
    assert ours
    assert {m.name for m in ours} <= METRIC_VALUES, {m.name for m in ours} - METRIC_VALUES
    for metric in ours:
        assert set(DEFAULT_DIMENSION_NAMES) <= metric.dimensions, metric
    foreign = {m.namespace for m in dashboard_metrics(synthesized.templates[cluster])} - {NAMESPACE}
    assert foreign == {"AWS/Lambda", "AWS/SQS"}


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_dashboard_has_the_widgets_the_issue_lists(synthesized: Synthesized, cluster: str) -> None:
    metrics = list(dashboard_metrics(synthesized.templates[cluster]))
    titles = {w["properties"].get("title") for w in dashboard_body(synthesized.templates[cluster])["widgets"]}
    for title, required in REQUIRED_WIDGETS.items():
        assert title in titles
        in_widget = {m.name for m in metrics if m.widget == title}
        assert in_widget, title
        assert {r.value for r in required} <= in_widget, (title, in_widget)
    lambda_metrics = {(m.widget, m.name) for m in metrics if m.namespace == "AWS/Lambda"}
    assert {"Errors", "Throttles", "Duration", "Invocations"} == {name for _, name in lambda_metrics}
    # The provisioner's runs, beside its solve time: what its stalled alarm reads.
    assert ("Provisioner", "Invocations") in lambda_metrics
    dlq = [
        m
        for m in metrics
        if m.widget == "Dead-letter queue depth" and m.name == "ApproximateNumberOfMessagesVisible"
    ]
    assert len(dlq) == 2


def test_dashboard_dimension_sets_are_the_ones_the_code_emits(
    synthesized: Synthesized, code_usage: CodeUsage
) -> None:
    for metric in dashboard_metrics(synthesized.templates[CLUSTERS[0]]):
        if metric.namespace != NAMESPACE or metric.name not in code_usage.dimensions:
            continue  # not emitted yet: see the test below
        assert metric.dimensions in code_usage.dimensions[metric.name], (
            metric,
            code_usage.dimensions[metric.name],
        )


def test_emf_output_of_dimensioned_metrics_matches_the_dashboard_search(
    synthesized: Synthesized,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    """What Powertools really prints for a dimensioned metric, with the environment the stack sets."""
    from serverless_karpenter.observability import bind_cluster, emit_dimensioned, metrics

    template = synthesized.templates[CLUSTERS[0]]
    env = next(iter(resources_of_type(template, "AWS::Lambda::Function").values()))["Properties"][
        "Environment"
    ]["Variables"]
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", env["POWERTOOLS_SERVICE_NAME"])
    bind_cluster(CLUSTERS[0])
    request.addfinalizer(metrics.clear_default_dimensions)
    searched = [
        m
        for m in dashboard_metrics(template)
        if m.namespace == NAMESPACE and len(m.dimensions) > len(DEFAULT_DIMENSION_NAMES)
    ]
    assert {m.name for m in searched} >= {
        MetricName.NODECLAIMS_BY_STATE.value,
        MetricName.INTERRUPTION_MESSAGES.value,
    }
    for metric in searched:
        (dimension,) = metric.dimensions - set(DEFAULT_DIMENSION_NAMES)
        capsys.readouterr()
        emit_dimensioned(MetricName(metric.name), 1, {dimension: "example"})
        emf = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        (directive,) = emf["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == NAMESPACE
        assert [m["Name"] for m in directive["Metrics"]] == [metric.name]
        assert {frozenset(d) for d in directive["Dimensions"]} == {metric.dimensions}
        assert emf["service"] == SERVICE
        assert emf[CLUSTER_DIMENSION] == CLUSTERS[0]


def test_every_metric_name_is_emitted_somewhere_in_the_code(code_usage: CodeUsage) -> None:
    missing = sorted(m.name for m in MetricName if m.name not in code_usage.referenced)
    assert missing == []


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_each_clusters_dashboard_and_alarms_select_that_cluster_only(
    synthesized: Synthesized, cluster: str
) -> None:
    """Two clusters' stacks in one account publish to one namespace: the ClusterName dimension keeps a
    heartbeat of one from satisfying the other's alarm."""
    template = synthesized.templates[cluster]
    searches = plain_metrics = 0
    for widget in dashboard_body(template)["widgets"]:
        for entry in widget["properties"].get("metrics", []):
            options = entry[-1] if isinstance(entry[-1], dict) else {}
            if "expression" in options and NAMESPACE in options["expression"]:
                assert f'{CLUSTER_DIMENSION}="{cluster}"' in options["expression"], options
                searches += 1
            plain = [e for e in entry if isinstance(e, str)]
            if plain and plain[0] == NAMESPACE:
                pairs = dict(zip(plain[2::2], plain[3::2], strict=True))
                assert pairs[CLUSTER_DIMENSION] == cluster, entry
                plain_metrics += 1
    # Both forms were read: a change to the dashboard's format cannot leave this test checking nothing.
    assert searches and plain_metrics
    # Every custom metric an alarm reads, alone or inside its metric math (the launch error rate).
    alarm_metrics = []
    for alarm in resources_of_type(template, "AWS::CloudWatch::Alarm").values():
        properties = alarm["Properties"]
        alarm_metrics.append(properties)
        alarm_metrics += [
            m["MetricStat"]["Metric"] for m in properties.get("Metrics", []) if "MetricStat" in m
        ]
    ours = [m for m in alarm_metrics if m.get("Namespace") == NAMESPACE]
    assert ours
    for metric in ours:
        assert {"Name": CLUSTER_DIMENSION, "Value": cluster} in metric["Dimensions"], metric
