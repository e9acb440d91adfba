"""The `serverless-karpenter` command. Each subcommand lives in its own module with a ``register``."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Subcommand modules, in the order `--help` lists them. Each has ``register(subparsers)`` that adds its
# parser and sets ``run=`` to a function taking the parsed args and returning the exit code.
COMMANDS = ("simulate", "plan", "status", "explain", "doctor")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="serverless-karpenter",
        description="A Karpenter-compatible node autoscaler for EKS that runs on AWS Lambda.",
        epilog="example:\n  serverless-karpenter simulate    # the local end-to-end simulation",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"serverless_karpenter_cli.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"serverless_karpenter_cli.{name}":
                raise
            continue
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
