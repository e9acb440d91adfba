"""`serverless-karpenter explain`: why the control plane does, or does not, act on an object.

Targets are sub-commands: ``explain node NAME`` (disruption: which method would act, or the rule that
blocks it) and ``explain pod NAME`` (provisioning). Each target is one ``register_<target>`` function
adding its parser under ``explain``; a new target adds its own function and a line in ``TARGETS``.
Explanations run against the live cluster through the runtime the Lambdas use (``runtime.
control_plane()``), so in tests a running Simulation's plane, installed with ``use_control_plane``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from serverless_karpenter.disruption.explain import explain_node
from serverless_karpenter.disruption.usecases import options_from, take_snapshot
from serverless_karpenter.runtime import control_plane


def run_node(args: argparse.Namespace) -> int:
    plane = control_plane()
    snapshot = take_snapshot(plane)
    explanation = explain_node(snapshot, args.name, options_from(plane))
    print(explanation.render())
    return 0 if explanation.nodeclaim is not None else 1


def register_node(targets: argparse._SubParsersAction) -> None:
    parser = targets.add_parser(
        "node",
        help="which disruption method would act on a node, or which rule blocks it",
        description=(
            "Runs emptiness, drift, multi-node and single-node consolidation for the node, read-only, and "
            "prints what each would do or the rule that blocks it (budget, PDB, do-not-disrupt, no "
            "cheaper replacement...)."
        ),
    )
    parser.add_argument("name", metavar="NAME", help="a Node name, or a NodeClaim name")
    parser.set_defaults(run=run_node)


def run_pod_unavailable(args: argparse.Namespace) -> int:
    print("explain pod: not available yet", file=sys.stderr)
    return 2


def register_pod(targets: argparse._SubParsersAction) -> None:
    parser = targets.add_parser("pod", help="why a pod is pending (not available yet)")
    parser.add_argument("name", metavar="NAME", help="namespace/name of the pod")
    parser.set_defaults(run=run_pod_unavailable)


TARGETS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (register_node, register_pod)


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "explain",
        help="explain why a node is or is not disrupted, or why a pod is pending",
        epilog="examples:\n  serverless-karpenter explain node ip-10-0-1-23.ec2.internal",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    targets = parser.add_subparsers(dest="target", required=True, metavar="TARGET")
    for add_target in TARGETS:
        add_target(targets)
