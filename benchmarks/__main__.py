"""``python -m benchmarks <name> ...``: one subcommand per benchmark."""

from __future__ import annotations

import argparse
import sys

from benchmarks import cold_start, consolidation, idle_cost, passes, scale, soak, solver, watcher_requests


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    subparsers = parser.add_subparsers(dest="command", required=True)
    solver.register(subparsers)
    soak.register(subparsers)
    consolidation.register(subparsers)
    watcher_requests.register(subparsers)
    cold_start.register(subparsers)
    idle_cost.register(subparsers)
    scale.register(subparsers)
    passes.register(subparsers)
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
