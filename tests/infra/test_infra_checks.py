"""cfn-lint and cdk-nag on the synthesized templates, and the rules for acknowledging cdk-nag findings."""

from __future__ import annotations

import re
from typing import Any

import pytest
from cfnlint.api import lint_file

from tests.infra.conftest import Synthesized
from tests.infra.helpers import CLUSTERS, as_list, render

pytestmark = pytest.mark.infra

# CloudFormation's limits for a template uploaded through S3 (as CDK does) and for resources per stack.
TEMPLATE_BODY_LIMIT_BYTES = 1_000_000
RESOURCES_PER_STACK_LIMIT = 500
GRANULAR_RULES = ("AwsSolutions-IAM4", "AwsSolutions-IAM5")


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_cfn_lint_reports_no_errors(synthesized: Synthesized, cluster: str) -> None:
    matches = lint_file(synthesized.template_paths[cluster])
    errors = [f"{m.rule.id} {m.message} ({m.path})" for m in matches if m.rule.id.startswith("E")]
    assert errors == []


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_templates_fit_cloudformation_limits(synthesized: Synthesized, cluster: str) -> None:
    assert synthesized.template_paths[cluster].stat().st_size < TEMPLATE_BODY_LIMIT_BYTES
    assert len(synthesized.templates[cluster]["Resources"]) < RESOURCES_PER_STACK_LIMIT


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_cdk_nag_aws_solutions_has_no_errors_on_a_fresh_run(synthesized: Synthesized, cluster: str) -> None:
    from cdk_nag import AwsSolutionsChecks

    report = AwsSolutionsChecks().validate_scope(synthesized.stacks[cluster])
    errors = [
        f"{v.rule_name}: {v.description[:80]}"
        for v in report.violations
        if str(v.severity).lower() == "error"
    ]
    assert errors == []


def test_every_acknowledgment_is_specific_and_reasoned(synthesized: Synthesized) -> None:
    for stack in synthesized.stacks.values():
        assert stack.acknowledgments
        for acknowledgment in stack.acknowledgments:
            # On a resource, never on the stack (no blanket suppression).
            assert acknowledgment.path != stack.node.path
            assert acknowledgment.path.startswith(stack.node.path + "/")
            # Granular rules are acknowledged one finding at a time.
            if acknowledgment.rule.startswith(GRANULAR_RULES):
                assert re.fullmatch(
                    r"AwsSolutions-IAM[45]\[(Resource|Policy|Action)::.+\]", acknowledgment.rule
                )
            assert len(acknowledgment.reason) >= 40, acknowledgment


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_every_acknowledgment_matches_something_in_the_template(
    synthesized: Synthesized, cluster: str
) -> None:
    """No acknowledgment is left over from code that changed: each names what the template really has."""
    stack = synthesized.stacks[cluster]
    resources = synthesized.templates[cluster]["Resources"]

    def resource_at(path: str, child: str | None = None) -> dict[str, Any]:
        construct = synthesized.app
        for part in path.split("/"):
            construct = construct.node.find_child(part)
        if child is not None:
            construct = construct.node.find_child(child)
        return resources[stack.get_logical_id(construct.node.default_child)]

    for acknowledgment in stack.acknowledgments:
        rule, _, finding = acknowledgment.rule.partition("[")
        # The functions run the latest Python runtime: nothing acknowledges AwsSolutions-L1.
        assert rule != "AwsSolutions-L1"
        if rule == "AwsSolutions-IAM4":
            arn = finding.removeprefix("Policy::").removesuffix("]")
            managed = [render(a) for a in resource_at(acknowledgment.path)["Properties"]["ManagedPolicyArns"]]
            assert arn in managed
        elif rule == "AwsSolutions-IAM5":
            arn = finding.removeprefix("Resource::").removesuffix("]")
            document = resource_at(acknowledgment.path, "DefaultPolicy")["Properties"]["PolicyDocument"]
            granted = {render(r) for st in document["Statement"] for r in as_list(st["Resource"])}
            assert arn in granted, acknowledgment
        else:
            pytest.fail(f"unexpected acknowledgment {acknowledgment}")


def test_the_validation_report_lists_every_acknowledged_finding(synthesized: Synthesized) -> None:
    """infra/README.md says cdk.out/validation-report.json lists the acknowledged findings: it does, each
    with its construct and reason, in the AwsSolutions plugin's report, with no open violation."""
    (plugin,) = [
        r for r in synthesized.validation_report["pluginReports"] if r["pluginName"] == "AwsSolutions"
    ]
    assert plugin["conclusion"] == "success" and plugin["violations"] == []
    listed = {
        (v["violatingConstructs"][0]["constructPath"], v["ruleName"], v["reason"])
        for v in plugin["suppressedViolations"]
    }
    acknowledged = {
        (a.path, a.rule, a.reason) for stack in synthesized.stacks.values() for a in stack.acknowledgments
    }
    assert listed == acknowledged
    assert len(listed) == len(plugin["suppressedViolations"])
    paths = {path for path, _, _ in listed}
    for cluster, stack in synthesized.stacks.items():
        assert any(p.startswith(stack.node.path + "/") for p in paths), cluster
    rules = {rule.partition("[")[0] for _, rule, _ in listed}
    # No L1: the functions run the latest Lambda Python runtime.
    assert rules == {"AwsSolutions-IAM4", "AwsSolutions-IAM5"}
    assert any("AmazonEC2ContainerRegistryPullOnly" in rule for _, rule, _ in listed)
