"""`serverless-karpenter status`: NodeClaims from the state table, like `kubectl get nodeclaims`, the
pods waiting for capacity, and what the managed capacity costs per hour."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from serverless_karpenter_cli.connection import ClusterNotFound, add_arguments, connect

COLUMNS = ("NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "STATE", "AGE", "NODEPOOL")
MAX_PENDING_LISTED = 20


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "status",
        help="NodeClaims, pending pods and cost per hour of a cluster's managed capacity",
        description=(
            "Lists the NodeClaims recorded in the state table (type, capacity, zone, node, state, age, "
            "nodepool), the pods waiting for capacity, and the hourly cost of the launched instances."
        ),
        epilog=(
            "examples:\n"
            "  serverless-karpenter status --cluster my-cluster --region eu-west-1\n"
            "  serverless-karpenter status --local --json    # the simulator left by `simulate --keep`"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    parser.add_argument(
        "--all", action="store_true", help="include Terminated NodeClaims still kept for audit"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.set_defaults(run=run)


def age(seconds: float) -> str:
    """kubectl's short age: 45s, 12m, 3h20m, 2d4h."""
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes}m" if minutes and hours < 10 else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h" if hours and days < 10 else f"{days}d"


def rows(records: Sequence[Any], now: datetime) -> list[dict[str, Any]]:
    return [
        {
            "name": r.name,
            "type": r.instance_type or "",
            "capacity": r.capacity_type or "",
            "zone": r.zone or "",
            "node": r.node_name or "",
            "state": str(r.state),
            "age": age((now - r.created_at).total_seconds()),
            "nodepool": r.nodepool,
            "price_per_hour": r.price_per_hour,
        }
        for r in sorted(records, key=lambda r: (r.created_at, r.name))
    ]


def table(lines: Sequence[Sequence[str]]) -> str:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "\n".join(
        "   ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def run(args: argparse.Namespace) -> int:
    from serverless_karpenter.lifecycle.model import NodeClaimState
    from serverless_karpenter.scheduling import pods as podlib

    try:
        plane = connect(args)
    except ClusterNotFound as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    records = [r for r in plane.store.list() if args.all or r.state != NodeClaimState.TERMINATED]
    claims = rows(records, plane.clock.now())
    pending = sorted(podlib.key(p) for p in plane.kube.list_pending_pods() if podlib.is_provisionable(p))
    # What is billed: launched instances not yet terminated.
    billed = [
        r
        for r in records
        if r.instance_id and r.state not in (NodeClaimState.PENDING, NodeClaimState.TERMINATED)
    ]
    cost = sum(r.price_per_hour or 0.0 for r in billed)
    cluster = plane.settings.cluster_name
    if args.json:
        print(
            json.dumps(
                {
                    "cluster": cluster,
                    "nodeclaims": claims,
                    "pending_pods": pending,
                    "cost_per_hour": round(cost, 6),
                }
            )
        )
        return 0
    if claims:
        cells = [[str(c[k.lower()]) or "-" for k in COLUMNS] for c in claims]
        print(table([list(COLUMNS), *cells]))
    else:
        print(f"no NodeClaims in cluster {cluster}")
    print()
    listed = ", ".join(pending[:MAX_PENDING_LISTED]) + (
        f" and {len(pending) - MAX_PENDING_LISTED} more" if len(pending) > MAX_PENDING_LISTED else ""
    )
    print(f"pending pods: {len(pending)}" + (f" ({listed})" if pending else ""))
    print(f"cost: ${cost:.4f}/h for {len(billed)} instance(s)")
    return 0
