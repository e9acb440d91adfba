"""The CDK app: one :class:`ServerlessKarpenterStack` per cluster named in the context, checked by cdk-nag."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import App, Validations
from cdk_nag import AwsSolutionsChecks

from infra.config import read_cluster_configs
from infra.stack import ServerlessKarpenterStack


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
