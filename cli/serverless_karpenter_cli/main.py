"""The `serverless-karpenter` command."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from serverless_karpenter_cli import simulate as simulate_command

EXAMPLES = {
    "simulate": (
        "examples:\n"
        "  serverless-karpenter simulate\n"
        "  serverless-karpenter simulate --scenario my-scenario.yaml --json"
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="serverless-karpenter",
        description="A Karpenter-compatible node autoscaler for EKS that runs on AWS Lambda.",
        epilog="example:\n  serverless-karpenter simulate    # the local end-to-end simulation",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sim = commands.add_parser(
        "simulate",
        help="run the control plane end to end on a local simulated cluster and cloud",
        description=(
            "Runs the real Lambda handlers against moto (AWS) and a simulated Kubernetes API server on "
            "127.0.0.1, on virtual time. No AWS account is needed."
        ),
        epilog=EXAMPLES["simulate"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sim.add_argument(
        "--scenario", default="default", help="a built-in scenario name or a YAML file (default: %(default)s)"
    )
    sim.add_argument(
        "--json", action="store_true", help="print the report as one JSON object on the last line of stdout"
    )
    sim.set_defaults(run=simulate_command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def dump(obj: object) -> str:
    return json.dumps(obj, default=str)


if __name__ == "__main__":
    sys.exit(main())
