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
from typing import Any

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
        epilog="examples:\n  serverless-karpenter explain node ip-10-0-1-23.ec2.internal",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("name", metavar="NAME", help="a Node name, or a NodeClaim name")
    parser.set_defaults(run=run_node)


def find_pod(pods: list[dict[str, Any]], target: str) -> dict[str, Any] | None:
    namespace, _, name = target.rpartition("/")
    namespace = namespace or "default"
    return next(
        (
            p
            for p in pods
            if p["metadata"]["name"] == name and p["metadata"].get("namespace", "default") == namespace
        ),
        None,
    )


def run_pod(args: argparse.Namespace) -> int:
    """The live counterpart of `plan`'s explanation: the provisioner's own scheduling pass
    (``Provisioner.schedule``) for this one pod, against the cluster's NodePools, nodes and in-flight
    NodeClaims."""
    from serverless_karpenter.provisioning.provisioner import Provisioner, explain
    from serverless_karpenter.scheduling import pods as podlib

    from serverless_karpenter_cli.connection import ClusterNotFound, connect

    try:
        plane = connect(args)
    except ClusterNotFound as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    name = args.name.rpartition("/")[2]
    pod = find_pod(plane.kube.list_pods(field_selector=f"metadata.name={name}"), args.name)
    if pod is None:
        print(f"error: pod {args.name} not found (give it as NAMESPACE/NAME)", file=sys.stderr)
        return 2
    key = podlib.key(pod)
    node = podlib.node_name(pod)
    if node:
        print(f"pod {key} is bound to node {node}: nothing to provision")
        return 0
    if not podlib.is_provisionable(pod):
        print(f"pod {key} is not provisionable (not pending, or owned by a DaemonSet, or being deleted)")
        return 0
    result, _, _ = Provisioner(plane).schedule([pod], plane.store.list())
    reasons = result.unschedulable.get(key)
    if reasons is not None:
        print(f"pod {key} cannot be scheduled: {explain(reasons)}")
        for pool, reason in sorted(reasons.items()):
            print(f"  nodepool {pool or '(all)'}: {reason}")
        return 1
    for capacity, placed in result.existing.items():
        if key in placed:
            where = capacity.removeprefix("nodeclaim/")
            kind = "in-flight nodeclaim" if capacity.startswith("nodeclaim/") else "node"
            print(f"pod {key} fits on {kind} {where}: the kube-scheduler should bind it")
            return 0
    for claim in result.new_nodeclaims:
        if key in claim.pods:
            types = [it.name for it in claim.instance_types]
            more = f" and {len(types) - 5} other(s)" if len(types) > 5 else ""
            print(
                f"pod {key} needs a new nodeclaim from nodepool {claim.nodepool} "
                f"({', '.join(types[:5])}{more}); the provisioner launches it on its next pass"
            )
            return 0
    print(f"pod {key}: no decision (the scheduling pass did not consider it)")
    return 1


def register_pod(targets: argparse._SubParsersAction) -> None:
    parser = targets.add_parser(
        "pod",
        help="why a pod is pending: the provisioner's decision for it, with each NodePool's reason",
        description=(
            "Runs the provisioner's scheduling pass for one pod against the live cluster (NodePools, "
            "EC2NodeClasses, nodes, in-flight NodeClaims), read-only, and prints where it would go or why "
            "each NodePool cannot take it."
        ),
        epilog="examples:\n  serverless-karpenter explain pod default/inflate-7d9c6-abcde",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("name", metavar="NAMESPACE/NAME", help="the pod (namespace defaults to default)")
    from serverless_karpenter_cli.connection import add_arguments

    add_arguments(parser)
    parser.set_defaults(run=run_pod)


TARGETS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (register_node, register_pod)


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "explain",
        help="explain why a node is or is not disrupted, or why a pod is pending",
        epilog=(
            "examples:\n  serverless-karpenter explain node ip-10-0-1-23.ec2.internal\n"
            "  serverless-karpenter explain pod default/inflate-7d9c6-abcde"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    targets = parser.add_subparsers(dest="target", required=True, metavar="TARGET")
    for add_target in TARGETS:
        add_target(targets)
