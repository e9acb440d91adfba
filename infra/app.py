"""The CDK app: one :class:`ServerlessKarpenterStack` per cluster named in the context, checked by cdk-nag."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aws_cdk import App, Validations
from aws_cdk import cx_api as cxapi
from cdk_nag import AwsSolutionsChecks

from infra.config import read_cluster_configs
from infra.stack import ServerlessKarpenterStack

# AwsSolutionsChecks().name: the plugin's name in the validation report.
NAG_PLUGIN = "AwsSolutions"
# Where CDK writes its policy-validation report in the cloud assembly (cx-api's VALIDATION_REPORT_FILE,
# which the Python bindings do not export).
VALIDATION_REPORT_FILE = "validation-report.json"


def build_app(
    context: Mapping[str, object] | None = None, outdir: str | None = None, nag: bool = True
) -> tuple[App, list[ServerlessKarpenterStack]]:
    """Build (not synthesize) the app. Raises :class:`infra.config.ContextError` on bad context."""
    app = App(context=dict(context or {}), outdir=outdir)
    configs = read_cluster_configs(app.node.try_get_context)
    stacks = [ServerlessKarpenterStack(app, config.stack_name, config=config) for config in configs]
    if nag:
        # A policy-validation plugin: app.synth() fails on any unacknowledged AwsSolutions error.
        Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True))
    return app, stacks


def synthesize(app: App, stacks: list[ServerlessKarpenterStack]) -> cxapi.CloudAssembly:
    """``app.synth()``, then the acknowledged cdk-nag findings written into the validation report.

    CDK's report lists a plugin's suppressed findings only when the plugin reports them; cdk-nag leaves
    out what is acknowledged, so the report CDK writes has no plugin report at all. Each acknowledgment
    (on one construct, for one finding, with its reason: ``infra/nag.py``) is added to it in CDK's own
    shape, a ``suppressedViolations`` entry of the AwsSolutions plugin's report.
    """
    assembly = app.synth()
    path = Path(assembly.directory) / VALIDATION_REPORT_FILE
    if path.is_file():
        path.write_text(json.dumps(with_acknowledgments(json.loads(path.read_text()), stacks), indent=2))
    return assembly


def with_acknowledgments(report: dict[str, Any], stacks: list[ServerlessKarpenterStack]) -> dict[str, Any]:
    suppressed = [
        {
            "ruleName": acknowledgment.rule,
            "violatingConstructs": [{"constructPath": acknowledgment.path}],
            "acknowledgedId": acknowledgment.rule,
            "reason": acknowledgment.reason,
        }
        for stack in stacks
        for acknowledgment in stack.acknowledgments
    ]
    if not suppressed:
        return report
    reports = list(report.get("pluginReports") or [])
    plugin = next((r for r in reports if r.get("pluginName") == NAG_PLUGIN), None)
    if plugin is None:
        # Synth got this far, so every finding the plugin raised was acknowledged.
        plugin = {"pluginName": NAG_PLUGIN, "conclusion": "success", "violations": []}
        reports.append(plugin)
    plugin["suppressedViolations"] = [*(plugin.get("suppressedViolations") or []), *suppressed]
    return {**report, "pluginReports": reports}
