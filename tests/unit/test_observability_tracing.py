"""X-Ray only when the function traces: a handler's cold start imports the X-Ray SDK, and patches
libraries, only if Powertools' rule says tracing is on."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = """
import json, sys
from serverless_karpenter.observability import tracer
patched = []
if "aws_xray_sdk.core" in sys.modules:
    from aws_xray_sdk.core import patcher
    patched = sorted(patcher._PATCHED_MODULES)
xray = "aws_xray_sdk.core" in sys.modules
print(json.dumps({"disabled": tracer.disabled, "xray": xray, "patched": patched}))
"""


def probe(**env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("POWERTOOLS_", "LAMBDA_", "AWS_"))}
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**clean, "AWS_REGION": "us-east-1", **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(result.stdout.splitlines()[-1]))


def test_a_disabled_tracer_never_imports_the_xray_sdk() -> None:
    in_lambda = {"LAMBDA_TASK_ROOT": "/var/task", "AWS_LAMBDA_FUNCTION_NAME": "f"}

    assert probe(**in_lambda, POWERTOOLS_TRACE_DISABLED="true") == {
        "disabled": True,
        "xray": False,
        "patched": [],
    }
    # Outside Lambda (the simulator, the CLI) Powertools disables tracing too.
    assert probe() == {"disabled": True, "xray": False, "patched": []}


def test_a_tracing_function_patches_only_what_the_control_plane_calls_through() -> None:
    traced = probe(LAMBDA_TASK_ROOT="/var/task", AWS_LAMBDA_FUNCTION_NAME="f")

    assert traced == {"disabled": False, "xray": True, "patched": ["botocore", "httplib"]}
