"""Runs our Lambda handlers in-process, as the Lambda service would, with what CDK gives them."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

FUNCTIONS = ("watcher", "provisioner", "interruption", "termination", "disruption")


def functions_dir() -> Path:
    """``functions/`` of the checkout this package runs from."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "functions"
        if (candidate / "provisioner" / "handler.py").is_file():
            return candidate
    raise FileNotFoundError(
        "functions/ not found beside the simulator; run from a checkout of serverless-karpenter"
    )


@dataclass
class LambdaContext:
    """The parts of the Lambda context object our handlers and Powertools read."""

    function_name: str
    memory_limit_in_mb: int = 1024
    timeout_seconds: int = 300
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"

    @property
    def function_version(self) -> str:
        return "$LATEST"

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    @property
    def log_stream_name(self) -> str:
        return "local"

    def get_remaining_time_in_millis(self) -> int:
        return self.timeout_seconds * 1000


def load_handler(name: str) -> ModuleType:
    """A fresh copy of the handler module: a new simulation is a new Lambda, with no warm state."""
    path = functions_dir() / name / "handler.py"
    module_name = f"serverless_karpenter_function_{name}_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


class LambdaRuntime:
    """Invokes handlers by name; their stdout (JSON logs and EMF metrics) goes to ``log``."""

    def __init__(self, cluster_name: str, log: TextIO | None = None) -> None:
        self.cluster_name = cluster_name
        self.log: TextIO = log or io.StringIO()
        self.handlers: dict[str, ModuleType] = {}
        self.invocations: dict[str, int] = {}
        self.errors: dict[str, int] = {}

    def handler(self, name: str) -> ModuleType:
        if name not in self.handlers:
            self.handlers[name] = load_handler(name)
        return self.handlers[name]

    def invoke(self, name: str, event: dict[str, Any]) -> Any:
        module = self.handler(name)
        context = LambdaContext(function_name=f"{self.cluster_name}-{name}")
        self.invocations[name] = self.invocations.get(name, 0) + 1
        with contextlib.redirect_stdout(self.log):
            try:
                return module.lambda_handler(event, context)
            except Exception:
                self.errors[name] = self.errors.get(name, 0) + 1
                raise
