"""cfn-lint and cdk-nag on the synthesized templates, and the rules for acknowledging cdk-nag findings."""

from __future__ import annotations

import re

import pytest
from cfnlint.api import lint_file

from tests.infra.conftest import Synthesized
from tests.infra.helpers import CLUSTERS

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


def test_cdk_nag_ran_at_synth_and_left_no_unacknowledged_findings(synthesized: Synthesized) -> None:
    reports = {r["pluginName"]: r for r in synthesized.validation_report["pluginReports"]}
    aws_solutions = reports["AwsSolutions"]
    assert aws_solutions["conclusion"] == "success"
    assert aws_solutions["violations"] == []
    # It really checked something: the acknowledged findings are reported as suppressed.
    assert aws_solutions["suppressedViolations"]


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_cdk_nag_aws_solutions_has_no_errors_on_a_fresh_run(synthesized: Synthesized, cluster: str) -> None:
    from cdk_nag import AwsSolutionsChecks

    report = AwsSolutionsChecks().validate_scope(synthesized.stacks[cluster])
    errors = [f"{v.rule_name}: {v.description[:80]}" for v in report.violations if str(v.severity).lower() == "error"]
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
                assert re.fullmatch(r"AwsSolutions-IAM[45]\[(Resource|Policy|Action)::.+\]", acknowledgment.rule)
            assert len(acknowledgment.reason) >= 40, acknowledgment


def test_acknowledged_findings_match_the_acknowledgments(synthesized: Synthesized) -> None:
    report = next(r for r in synthesized.validation_report["pluginReports"] if r["pluginName"] == "AwsSolutions")
    suppressed = {v["acknowledgedId"].removeprefix("AwsSolutions::") for v in report["suppressedViolations"]}
    acknowledged = {a.rule for stack in synthesized.stacks.values() for a in stack.acknowledgments}
    # Every acknowledgment suppresses a real finding: none is left over from code that changed.
    assert suppressed == acknowledged
