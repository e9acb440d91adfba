"""The two Lambda layers: our core package, and the third-party dependencies built by build.py."""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

from aws_cdk import IgnoreMode
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra.paths import CORE_LAYER_DIR, DEPENDENCY_LAYER_BUILD_SCRIPT, DEPENDENCY_LAYER_DIR, FUNCTIONS_DIR

# The latest Lambda Python runtime for which every locked dependency has a wheel (pydantic-core and PyYAML,
# the layer's only compiled ones, publish cp314 aarch64 manylinux wheels): cdk-nag's L1 then holds with no
# acknowledgment. It moves with layers/dependencies/build.py's PYTHON_VERSION.
RUNTIME = lambda_.Runtime.PYTHON_3_14
ARCHITECTURE = lambda_.Architecture.ARM_64
BYTECODE_EXCLUDES = ["__pycache__/", "*.pyc", "*.pyo"]
# The dependency layer's asset is layers/dependencies/python only (gitignore syntax: "/*" drops every
# top-level entry, "!/python/" brings the built tree back).
DEPENDENCY_LAYER_EXCLUDES = ["/*", "!/python/", "/python/.build-stamp", *BYTECODE_EXCLUDES]


@cache
def build_script() -> ModuleType:
    """layers/dependencies/build.py, loaded by path: it is a stand-alone script, not a package module."""
    spec = importlib.util.spec_from_file_location(
        "serverless_karpenter_dependency_layer_build", DEPENDENCY_LAYER_BUILD_SCRIPT
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {DEPENDENCY_LAYER_BUILD_SCRIPT}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module through sys.modules
    spec.loader.exec_module(module)
    return module


def ensure_dependency_layer() -> Path:
    """Build the dependency layer if it is missing or stale (a fresh clone), and return its directory."""
    script = build_script()
    if not script.is_current():
        print(
            "dependency layer missing or stale: building it (layers/dependencies/build.py)", file=sys.stderr
        )
        result = script.build()
        print(f"dependency layer: {result.size_bytes / 2**20:.1f} MiB unzipped", file=sys.stderr)
    return Path(script.TARGET)


def unzipped_size_bytes(function_name: str) -> int:
    """What Lambda counts against its unzipped limit for one function: its code plus both layers."""
    script = build_script()
    return int(
        script.directory_size(FUNCTIONS_DIR / function_name)
        + script.directory_size(CORE_LAYER_DIR / "python")
        + script.directory_size(DEPENDENCY_LAYER_DIR / "python")
    )


def check_unzipped_sizes(function_names: list[str]) -> dict[str, int]:
    script = build_script()
    sizes = {name: unzipped_size_bytes(name) for name in function_names}
    for name, size in sizes.items():
        if size > script.UNZIPPED_LIMIT_BYTES:
            raise ValueError(
                f"function {name!r} with its layers is {size / 2**20:.1f} MiB unzipped, over Lambda's "
                f"{script.UNZIPPED_LIMIT_BYTES / 2**20:.0f} MiB limit"
            )
    return sizes


class Layers(Construct):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        ensure_dependency_layer()
        self.core = lambda_.LayerVersion(
            self,
            "Core",
            description="serverless-karpenter core package",
            code=lambda_.Code.from_asset(
                str(CORE_LAYER_DIR), exclude=BYTECODE_EXCLUDES, ignore_mode=IgnoreMode.GIT
            ),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
        )
        self.dependencies = lambda_.LayerVersion(
            self,
            "Dependencies",
            description="serverless-karpenter dependencies (layers/dependencies/requirements.txt)",
            code=lambda_.Code.from_asset(
                str(DEPENDENCY_LAYER_DIR), exclude=DEPENDENCY_LAYER_EXCLUDES, ignore_mode=IgnoreMode.GIT
            ),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
        )

    @property
    def all(self) -> list[lambda_.ILayerVersion]:
        return [self.dependencies, self.core]
