"""The simulator reads durations with the core's parser and matches selectors with one matcher: the API
server's label selectors and the cluster's selector expressions agree on every operator."""

from __future__ import annotations

import pytest
from serverless_karpenter_sim.cluster.objects import expression_matches, label_selector_matches
from serverless_karpenter_sim.kubeapi.selectors import matches, parse_label_selector
from serverless_karpenter_sim.scenario import Scenario, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        (" 2m ", 120.0),
        (45, 45.0),
        (1.5, 1.5),
        ("1.5h", 5400.0),
    ],
)
def test_a_scenario_duration_reads_as_karpenter_fields_do(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["soon", "", "5", "Never", "-"])
def test_a_scenario_duration_without_a_length_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(text)


def test_a_scenario_wait_step_takes_the_core_duration() -> None:
    scenario = Scenario.model_validate({"name": "d", "steps": [{"wait": "1m30s"}]})
    assert scenario.steps[0].wait == 90.0


LABELS = [{}, {"a": "1"}, {"a": "5"}, {"a": "x"}, {"a": "1", "b": "2"}, {"b": "7"}]
EXPRESSIONS = [
    ("In", ["1", "x"], "a in (1,x)"),
    ("NotIn", ["1"], "a notin (1)"),
    ("Exists", [], "a"),
    ("DoesNotExist", [], "!a"),
    ("Gt", ["2"], "a>2"),
    ("Lt", ["2"], "a<2"),
]


@pytest.mark.parametrize(("operator", "values", "text"), EXPRESSIONS)
def test_the_cluster_and_the_api_server_match_alike(operator: str, values: list[str], text: str) -> None:
    selector = parse_label_selector(text)
    for labels in LABELS:
        expression = {"matchExpressions": [{"key": "a", "operator": operator, "values": values}]}
        assert expression_matches(operator, "a", values, labels) == matches(selector, labels), labels
        assert label_selector_matches(expression, labels) == matches(selector, labels), labels


def test_gt_with_other_than_one_value_and_unknown_operators_match_nothing() -> None:
    assert not expression_matches("Gt", "a", ["1", "2"], {"a": "5"})
    assert not expression_matches("Lt", "a", [], {"a": "0"})
    assert not expression_matches("Matches", "a", ["5"], {"a": "5"})
