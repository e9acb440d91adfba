"""`serverless-karpenter doctor`: set-up checks against AWS and the cluster, each with its fix."""

from __future__ import annotations

import argparse
import json
import sys

from serverless_karpenter_cli.connection import ClusterNotFound, NoEksCluster, add_arguments, connect

SYMBOLS = {"ok": "✓", "fail": "✗", "skipped": "-"}


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "doctor",
        help="check the stack, the interruption queue, node classes, IAM and DaemonSets for set-up mistakes",
        description=(
            "Checks the deployed stack and the cluster for the set-up mistakes that break Karpenter late: "
            "untagged subnets or security groups, an interruption queue EventBridge cannot write to, a node "
            "role without an access entry, KMS keys the launcher may not use, the missing spot "
            "service-linked role, Lambda roles without their permissions, DaemonSets that no longer fit, "
            "Karpenter's CRDs missing or not serving karpenter.sh/v1, and an in-cluster Karpenter controller "
            "still running (two controllers would fight). "
            "Prints one line per check (✓ passed, ✗ failed with its fix, - could not run); exits 1 on any ✗."
        ),
        epilog=(
            "examples:\n"
            "  serverless-karpenter doctor --cluster my-cluster --region eu-west-1\n"
            "  serverless-karpenter doctor --local --json    # the simulator left by `simulate --keep`"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # Imported here so that `--help` stays fast.
    import boto3
    from botocore.config import Config
    from serverless_karpenter.adapters import aws
    from serverless_karpenter.doctor.checks import Status, run_checks
    from serverless_karpenter.doctor.gather import Gatherer
    from serverless_karpenter.provisioning.context import ControlPlane
    from serverless_karpenter.provisioning.provisioner import daemon_overhead

    plane: ControlPlane | None
    try:
        # Without the stack there is still a set-up to check: doctor says the stack is missing.
        plane = connect(args, stack_optional=True)
        cluster, region = plane.settings.cluster_name, plane.settings.aws_region
    except NoEksCluster as error:  # the checks of the stack still run; those of the cluster cannot
        plane, cluster, region = None, error.cluster, error.region
    except ClusterNotFound as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    gatherer = Gatherer(
        cluster,
        region,
        lambda service: aws.client(service, region),
        plane,
        # Calls an emulator may not implement get one attempt: its 500s are not worth retrying.
        probe_clients=lambda service: boto3.session.Session(region_name=region).client(  # type: ignore[call-overload]
            service, config=aws.RETRY_CONFIG.merge(Config(retries={"mode": "standard", "max_attempts": 1}))
        ),
    )
    results = run_checks(gatherer.gather(), daemon_overhead)
    failed = [r for r in results if r.status == Status.FAIL]
    if args.json:
        print(
            json.dumps(
                {
                    "cluster": cluster,
                    "region": region,
                    "ok": not failed,
                    "checks": [r.to_json() for r in results],
                }
            )
        )
    else:
        print(f"serverless-karpenter doctor: cluster {cluster} in {region}")
        for result in results:
            print(f"{SYMBOLS[result.status]} [{result.check}] {result.summary}")
            if result.fix:
                print(f"    fix: {result.fix}")
        skipped = sum(1 for r in results if r.status == Status.SKIPPED)
        print(f"{len(results) - len(failed) - skipped} passed, {len(failed)} failed, {skipped} could not run")
    return 1 if failed else 0
