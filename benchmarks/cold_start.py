"""``python -m benchmarks cold-start --json``: seconds to import each Lambda handler, as a cold start does.

Each handler is imported in a fresh interpreter (``python -S -X importtime -c "import handler"``) laid out
as Lambda lays out the function (:func:`lambda_tree`):
- the function's code directory first on the path, then the core layer, then the dependency layer, then
  the runtime's AWS SDK (boto3, botocore, s3transfer), as Lambda orders /var/task, /opt/python and
  /var/runtime;
- the layers **without bytecode**, as the stack ships them (``infra/layers.py`` ``BYTECODE_EXCLUDES``):
  /opt is read-only, so Lambda compiles every module of ours and of the dependency layer from source at
  each cold start, and caches nothing;
- the interpreter's standard library and the runtime's SDK **with** their bytecode, as the Lambda
  runtime image installs them;
- ``-S``: nothing from this machine's site-packages, so a module the layers lack fails here as on Lambda;
- the environment Lambda and the stack give the function (``infra/functions.py``: the Settings fields,
  ``POWERTOOLS_*``, tracing off unless ``--tracing``, as ``-c tracing=true`` deploys it).
The dependency layer is this virtualenv's copy of the layer's distributions (``requirements.txt``), pruned
and trimmed by ``layers/dependencies/build.py``'s own rules. ``--bytecode`` ships the layers compiled
(``unchecked-hash``), for comparison. The figure is the handler module's cumulative import time from
``-X importtime``, best of ``--runs``; ``cpu_seconds`` is the whole child process's CPU time (interpreter
start-up included), steadier than the wall clock on a shared host.
"""

from __future__ import annotations

import argparse
import compileall
import importlib.metadata
import importlib.util
import json
import os
import py_compile
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serverless_karpenter.observability import NAMESPACE, SERVICE

from benchmarks.host import host_loop_seconds

REPO_ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS_DIR = REPO_ROOT / "functions"
CORE_LAYER_PYTHON = REPO_ROOT / "layers" / "core" / "python"
LAYER_REQUIREMENTS = REPO_ROOT / "layers" / "dependencies" / "requirements.txt"
# What the Lambda Python runtime provides in /var/runtime, with its bytecode (build.py drops them).
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer")
HANDLERS = ("disruption", "interruption", "provisioner", "termination", "watcher")
REGION = "us-east-1"
ACCOUNT = "111122223333"
CLUSTER = "cold-start"


def handler_names() -> list[str]:
    return sorted(p.parent.name for p in FUNCTIONS_DIR.glob("*/handler.py"))


@dataclass(frozen=True)
class LambdaTree:
    """Where a cold start finds its code: /var/task, /opt/python (core, then dependencies), /var/runtime."""

    core: Path
    dependencies: Path
    runtime: Path

    def path(self, function: str) -> list[str]:
        return [str(FUNCTIONS_DIR / function), str(self.core), str(self.dependencies), str(self.runtime)]


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def layer_distributions() -> list[str]:
    """The dependency layer's distributions: requirements.txt's pins."""
    text = LAYER_REQUIREMENTS.read_text().replace("\\\n", " ")
    names = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        match = re.match(r"[A-Za-z0-9_.-]+", line)
        if match:
            names.append(match[0])
    return names


def _copy_distribution(name: str, destination: Path, *, with_bytecode: bool = False) -> None:
    """One installed distribution's files (as its RECORD lists them), from this virtualenv; with
    ``with_bytecode``, each module's .pyc too (compiled at install, so RECORD does not list it)."""
    distribution = importlib.metadata.distribution(name)
    for file in distribution.files or ():
        source = Path(str(distribution.locate_file(file)))
        if not source.is_file() or str(file).startswith(".."):
            continue
        copies = [(source, destination / file)]
        if with_bytecode and source.suffix == ".py":
            cached = Path(importlib.util.cache_from_source(str(source)))
            if cached.is_file():
                copies.append((cached, Path(importlib.util.cache_from_source(str(destination / file)))))
        for origin, target in copies:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, target)  # the mtime too: timestamp-checked .pyc stay valid


@contextmanager
def lambda_tree(*, bytecode: bool = False) -> Iterator[LambdaTree]:
    """The layers as the stack ships them (no bytecode unless ``bytecode``), and the runtime's SDK."""
    from infra.layers import build_script

    script = build_script()
    with tempfile.TemporaryDirectory(prefix="cold-start-") as scratch:
        root = Path(scratch)
        tree = LambdaTree(core=root / "core", dependencies=root / "dependencies", runtime=root / "runtime")
        shutil.copytree(
            CORE_LAYER_PYTHON, tree.core, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo")
        )
        dropped = {_normalize(name) for name in script.DROPPED_DISTRIBUTIONS}
        for name in layer_distributions():
            if _normalize(name) in {_normalize(r) for r in RUNTIME_PROVIDED}:
                _copy_distribution(name, tree.runtime, with_bytecode=True)
            elif _normalize(name) not in dropped:
                _copy_distribution(name, tree.dependencies)
        script.prune(tree.dependencies)  # build.py's trimming: no bytecode, tests, aio...
        if bytecode:
            for layer in (tree.core, tree.dependencies):
                compileall.compile_dir(
                    layer,
                    quiet=2,
                    invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
                    workers=1,
                )
        yield tree


def lambda_environment(
    function: str, *, trace_disabled: bool = True, tree: LambdaTree | None = None
) -> dict[str, str]:
    """The variables the function starts with: Lambda's runtime ones, then the stack's (placeholders for
    the resources' names; nothing is called at import). Without a ``tree``, the repository's own
    directories (the function's code, then the core layer)."""
    queue = f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "en_US.UTF-8",
        "PYTHONPATH": os.pathsep.join(
            tree.path(function) if tree else (str(FUNCTIONS_DIR / function), str(CORE_LAYER_PYTHON))
        ),
        # /opt is read-only on Lambda: nothing compiled at a cold start is kept for the next.
        "PYTHONDONTWRITEBYTECODE": "1",
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
    function: str, tree: LambdaTree, runs: int = 3, *, trace_disabled: bool = True
) -> dict[str, Any]:
    """Best of ``runs`` fresh imports of one handler from ``tree``."""
    env = lambda_environment(function, trace_disabled=trace_disabled, tree=tree)
    interpreter = getattr(sys, "_base_executable", sys.executable)  # the runtime's Python, not this venv
    samples: list[float] = []
    cpu_samples: list[float] = []
    heaviest: list[tuple[str, float]] = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        result = subprocess.run(
            [interpreter, "-S", "-X", "importtime", "-c", "import handler"],
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


def measure(
    runs: int = 3, functions: list[str] | None = None, *, trace_disabled: bool = True, bytecode: bool = False
) -> dict[str, Any]:
    names = functions or handler_names()
    with lambda_tree(bytecode=bytecode) as tree:
        handlers = {name: measure_handler(name, tree, runs, trace_disabled=trace_disabled) for name in names}
    return {
        "host_loop_seconds": host_loop_seconds(),
        "python": ".".join(map(str, sys.version_info[:3])),
        "runs": runs,
        "tracing": "disabled" if trace_disabled else "enabled",
        "layer_bytecode": bytecode,
        "handlers": handlers,
        "max_seconds": max(figures["seconds"] for figures in handlers.values()),
    }


def register(commands: Any) -> None:
    parser = commands.add_parser("cold-start", help="seconds to import each Lambda handler, fresh process")
    parser.add_argument("--runs", type=int, default=5, help="fresh imports per handler; the best counts")
    parser.add_argument("--function", action="append", choices=HANDLERS, help="only these handlers")
    parser.add_argument(
        "--tracing", action="store_true", help="with X-Ray tracing on, as -c tracing=true deploys it"
    )
    parser.add_argument(
        "--bytecode", action="store_true", help="the layers with .pyc (the stack ships none), to compare"
    )
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    result = measure(args.runs, args.function, trace_disabled=not args.tracing, bytecode=args.bytecode)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0
    print(f"host loop {result['host_loop_seconds']} s; tracing {result['tracing']}; best of {args.runs}")
    for name, figures in result["handlers"].items():
        print(f"{name:>12}: {figures['seconds']:.3f} s  {figures['heaviest_imports']}")
    return 0
