"""Synthesize the CDK app once for the whole infra suite: two clusters, so that every check also runs on a
second stack and name clashes between them show up.

Synthesis takes ~20 s (the jsii runtime, asset staging, cdk-nag), so it is session-scoped: every module
reads the same cloud assembly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.infra.helpers import CLUSTERS, CONTEXT

# Before aws_cdk is imported: the jsii runtime prints a Node.js support banner otherwise.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")
# Environment-agnostic stacks, whatever the developer's shell exports.
os.environ.pop("CDK_DEFAULT_ACCOUNT", None)
os.environ.pop("CDK_DEFAULT_REGION", None)


@dataclass
class Synthesized:
    outdir: Path
    stacks: dict[str, Any]  # cluster name -> ServerlessKarpenterStack
    templates: dict[str, dict[str, Any]]  # cluster name -> template JSON
    template_paths: dict[str, Path]
    validation_report: dict[str, Any]
    app: Any = field(repr=False)

    def resources(self, cluster: str, resource_type: str) -> dict[str, dict[str, Any]]:
        return {
            logical_id: resource
            for logical_id, resource in self.templates[cluster]["Resources"].items()
            if resource["Type"] == resource_type
        }


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synthesized]:
    from infra.app import build_app, synthesize

    outdir = tmp_path_factory.mktemp("cdk.out")
    app, stacks = build_app(CONTEXT, outdir=str(outdir))
    assembly = synthesize(app, stacks)
    templates: dict[str, dict[str, Any]] = {}
    paths: dict[str, Path] = {}
    for stack in stacks:
        path = Path(assembly.directory) / stack.template_file
        paths[stack.config.cluster_name] = path
        templates[stack.config.cluster_name] = json.loads(path.read_text())
    report = json.loads((outdir / "validation-report.json").read_text())
    yield Synthesized(
        outdir=outdir,
        stacks={stack.config.cluster_name: stack for stack in stacks},
        templates=templates,
        template_paths=paths,
        validation_report=report,
        app=app,
    )


@pytest.fixture(scope="session")
def template(synthesized: Synthesized) -> dict[str, Any]:
    """The first cluster's template, for checks that need only one."""
    return synthesized.templates[CLUSTERS[0]]
