"""``python -m benchmarks cold-start --json``: seconds to import each Lambda handler, as a cold start does.

Each handler is imported in a fresh interpreter (``python -X importtime -c "import handler"``) with the
environment Lambda gives it: the function's code directory first on the path, then the core layer, then
the dependencies (this virtualenv's site-packages stands for the dependency layer), the runtime's own
variables and the ones the stack sets (``infra/functions.py``: the Settings fields and ``POWERTOOLS_*``).
The figure is the handler module's cumulative import time from ``-X importtime``, best of ``--runs``;
``cpu_seconds`` is the whole child process's CPU time (interpreter start-up included), steadier than the
wall clock on a shared host.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from serverless_karpenter.observability import NAMESPACE, SERVICE

REPO_ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS_DIR = REPO_ROOT / "functions"
CORE_LAYER_PYTHON = REPO_ROOT / "layers" / "core" / "python"
HANDLERS = ("disruption", "interruption", "provisioner", "termination", "watcher")
REGION = "us-east-1"
ACCOUNT = "111122223333"
CLUSTER = "cold-start"


def handler_names() -> list[str]:
    return sorted(p.parent.name for p in FUNCTIONS_DIR.glob("*/handler.py"))


def lambda_environment(function: str, *, trace_disabled: bool = False) -> dict[str, str]:
    """The variables the function starts with: Lambda's runtime ones, then the stack's (placeholders for
    the resources' names; nothing is called at import)."""
    queue = f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "en_US.UTF-8",
        "PYTHONPATH": os.pathsep.join((str(FUNCTIONS_DIR / function), str(CORE_LAYER_PYTHON))),
        # Lambda's runtime.
        "LAMBDA_TASK_ROOT": str(FUNCTIONS_DIR / function),
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.14",
        "AWS_LAMBDA_FUNCTION_NAME": f"{CLUSTER}-{function}",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "_HANDLER": "handler.lambda_handler",
        # The stack's (infra/functions.py common_env).
        "CLUSTER_NAME": CLUSTER,
        "STATE_TABLE_NAME": f"{CLUSTER}-state",
        "INTERRUPTION_QUEUE_URL": f"{queue}/{CLUSTER}-interruption",
        "INTERRUPTION_DLQ_URL": f"{queue}/{CLUSTER}-interruption-dlq",
        "TERMINATION_QUEUE_URL": f"{queue}/{CLUSTER}-termination",
        "NODE_ROLE_NAME": f"{CLUSTER}-node",
        "PROVISIONER_FUNCTION_NAME": f"{CLUSTER}-provisioner",
        "POWERTOOLS_SERVICE_NAME": SERVICE,
        "POWERTOOLS_METRICS_NAMESPACE": NAMESPACE,
        "LOG_LEVEL": "INFO",
    }
    if trace_disabled:
        env["POWERTOOLS_TRACE_DISABLED"] = "true"
    return env


def parse_importtime(stderr: str) -> tuple[float, list[tuple[str, float]]]:
    """The handler's cumulative seconds, and the heaviest top-level imports under it (cumulative)."""
    total: float | None = None
    children: list[tuple[str, float]] = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.removeprefix("import time:").split("|")
        if not cumulative.strip().isdigit():
            continue  # the header
        seconds = int(cumulative) / 1e6
        # One level under the handler: two spaces of indentation in importtime's tree.
        if name.startswith("   ") and not name.startswith("    "):
            children.append((name.strip(), seconds))
        elif name.strip() == "handler" and not name.startswith("  "):
            total = seconds
    if total is None:
        raise RuntimeError(f"no import time for the handler in:\n{stderr[-2000:]}")
    children.sort(key=lambda item: item[1], reverse=True)
    return total, children


def measure_handler(
    function: str, runs: int = 3, *, trace_disabled: bool = False, bytecode: bool = True
) -> dict[str, Any]:
    """Best of ``runs`` fresh imports of one handler. Without ``bytecode``, every module is compiled from
    source, as on Lambda when the layers ship no ``.pyc`` (their /opt is read-only: nothing is cached)."""
    env = lambda_environment(function, trace_disabled=trace_disabled)
    if not bytecode:
        # An empty cache prefix: no .pyc is found, none is written.
        env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="cold-start-")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    samples: list[float] = []
    cpu_samples: list[float] = []
    heaviest: list[tuple[str, float]] = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        result = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "import handler"],
            env=env,
            cwd=FUNCTIONS_DIR / function,
            capture_output=True,
            text=True,
            check=False,
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_samples.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        if result.returncode != 0:
            raise RuntimeError(f"importing {function}'s handler failed:\n{result.stderr[-4000:]}")
        seconds, children = parse_importtime(result.stderr)
        if not samples or seconds < min(samples):
            heaviest = children[:8]
        samples.append(seconds)
    return {
        "seconds": round(min(samples), 4),
        "samples": [round(s, 4) for s in samples],
        "cpu_seconds": round(min(cpu_samples), 4),
        "heaviest_imports": {name: round(s, 4) for name, s in heaviest},
    }


def host_loop_seconds() -> float:
    """The host's speed, as every benchmark page states it: ``sum(i*i for i in range(10**7))``."""
    start = time.perf_counter()
    sum(i * i for i in range(10**7))
    return round(time.perf_counter() - start, 3)


def measure(
    runs: int = 3, functions: list[str] | None = None, *, trace_disabled: bool = False, bytecode: bool = True
) -> dict[str, Any]:
    names = functions or handler_names()
    return {
        "host_loop_seconds": host_loop_seconds(),
        "python": ".".join(map(str, sys.version_info[:3])),
        "runs": runs,
        "tracing": "disabled" if trace_disabled else "enabled",
        "bytecode": bytecode,
        "handlers": {
            name: measure_handler(name, runs, trace_disabled=trace_disabled, bytecode=bytecode)
            for name in names
        },
    }


def register(commands: Any) -> None:
    parser = commands.add_parser("cold-start", help="seconds to import each Lambda handler, fresh process")
    parser.add_argument("--runs", type=int, default=5, help="fresh imports per handler; the best counts")
    parser.add_argument("--function", action="append", choices=HANDLERS, help="only these handlers")
    parser.add_argument(
        "--trace-disabled", action="store_true", help="with POWERTOOLS_TRACE_DISABLED=true (no X-Ray)"
    )
    parser.add_argument(
        "--no-bytecode", action="store_true", help="compile every module from source (no cached .pyc)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    result = measure(
        args.runs, args.function, trace_disabled=args.trace_disabled, bytecode=not args.no_bytecode
    )
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0
    print(f"host loop {result['host_loop_seconds']} s; tracing {result['tracing']}; best of {args.runs}")
    for name, figures in result["handlers"].items():
        print(f"{name:>12}: {figures['seconds']:.3f} s  {figures['heaviest_imports']}")
    return 0
