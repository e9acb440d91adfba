#!/usr/bin/env python3
"""CDK entry point: `cdk deploy -c clusterName=<cluster>`, or without the CDK CLI:

    .venv/bin/python app.py -c clusterName=demo      # what `make synth CLUSTER=demo` runs

Under the CDK CLI the context arrives in CDK_CONTEXT_JSON. Run directly, this script reads cdk.json's and
cdk.context.json's "context" and the `-c key=value` arguments itself, so both paths synthesize the same
templates (into CDK_OUTDIR, default cdk.out).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# The jsii runtime warns about the Node.js version on every start; the warning is not actionable here.
for _variable, _value in (
    ("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20"),
    ("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1"),
    ("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1"),
):
    os.environ.setdefault(_variable, _value)

ROOT = Path(__file__).resolve().parent


def context_from_files_and_args(argv: list[str]) -> dict[str, object]:
    context: dict[str, object] = {}
    for name in ("cdk.json", "cdk.context.json"):
        path = ROOT / name
        if path.is_file():
            data = json.loads(path.read_text())
            context.update(data.get("context", {}) if name == "cdk.json" else data)
    args = iter(argv)
    for arg in args:
        if arg in ("-c", "--context"):
            pair = next(args, "")
        elif arg.startswith("--context="):
            pair = arg.split("=", 1)[1]
        else:
            raise SystemExit(f"app.py: unexpected argument {arg!r}; usage: app.py [-c key=value ...]")
        key, separator, value = pair.partition("=")
        if not separator or not key:
            raise SystemExit(f"app.py: context must be key=value, got {pair!r}")
        context[key] = value
    return context


def main(argv: list[str]) -> int:
    under_cli = "CDK_CONTEXT_JSON" in os.environ
    context = {} if under_cli else context_from_files_and_args(argv)

    # Imported late: loading aws_cdk starts the jsii runtime, which argument errors need not wait for.
    from infra.app import build_app, synthesize
    from infra.config import ContextError

    outdir = None if under_cli else os.environ.get("CDK_OUTDIR", str(ROOT / "cdk.out"))
    try:
        app, stacks = build_app(context, outdir=outdir)
    except ContextError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        assembly = synthesize(app, stacks)
    except RuntimeError as error:
        # cdk-nag findings and other validation failures; the report is printed above.
        print(f"error: {error}", file=sys.stderr)
        return 1
    if not under_cli:
        for stack in assembly.stacks:
            template = Path(assembly.directory) / stack.template_file
            print(f"synthesized {stack.stack_name}: {template} ({template.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
