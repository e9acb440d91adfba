"""How the operator commands (status, explain, doctor) reach a cluster's control plane: a deployed
stack (``--cluster``/``--region``), or the local simulator left running by ``simulate --keep``
(``--local``; ``make demo`` leaves one in the background)."""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path

from botocore.exceptions import ClientError
from serverless_karpenter import naming, runtime
from serverless_karpenter.adapters import aws
from serverless_karpenter.provisioning.context import ControlPlane

# Written by `simulate --keep`: the environment that points our clients at the running simulator.
LOCAL_ENV = Path(".serverless-karpenter") / "local-env"
# In that file: the simulator's process, for `simulate --stop`.
SIMULATOR_PID = "SERVERLESS_KARPENTER_SIMULATOR_PID"


class ClusterNotFound(Exception):
    """The cluster cannot be reached or found; the message says what to pass."""


class NoEksCluster(ClusterNotFound):
    """EKS has no cluster by that name in the region."""

    def __init__(self, cluster: str, region: str) -> None:
        super().__init__(f"there is no EKS cluster {cluster} in {region}: check --cluster and --region")
        self.cluster = cluster
        self.region = region


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", help="EKS cluster name (default: $CLUSTER_NAME)")
    parser.add_argument("--region", help="AWS region (default: $AWS_REGION)")
    parser.add_argument(
        "--local",
        action="store_true",
        help=(
            "use the simulator left running by `serverless-karpenter simulate --keep [--detach]` or "
            f"`make demo` in this directory ({LOCAL_ENV})"
        ),
    )


def write_local_env(values: dict[str, str], path: Path = LOCAL_ENV) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"export {key}={shlex.quote(value)}\n" for key, value in sorted(values.items())))
    return path


def read_local_env(path: Path = LOCAL_ENV) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        words = shlex.split(line)
        if words and words[0] == "export":
            words = words[1:]
        for word in words:
            key, sep, value = word.partition("=")
            if sep:
                values[key] = value
    return values


def stack_outputs(cluster: str, region: str) -> dict[str, str]:
    stacks = aws.client("cloudformation", region).describe_stacks(StackName=naming.stack_name(cluster))
    return {o["OutputKey"]: o["OutputValue"] for o in stacks["Stacks"][0].get("Outputs") or []}


def _no_such_stack(error: Exception) -> bool:
    # CloudFormation answers a DescribeStacks for a stack that does not exist with a ValidationError.
    return isinstance(error, ClientError) and error.response.get("Error", {}).get("Code") == "ValidationError"


def connect(args: argparse.Namespace, *, stack_optional: bool = False) -> ControlPlane:
    """The control plane the command works on: the one installed in this process (the simulator, tests),
    or one built from the arguments and the environment.

    ``stack_optional``: build it even when the cluster's stack is not deployed (``doctor`` reports that
    itself, and checks the cluster all the same).
    """
    if getattr(args, "local", False):
        if not LOCAL_ENV.exists():
            raise ClusterNotFound(
                f"{LOCAL_ENV} not found: start the simulator with `serverless-karpenter simulate --keep "
                "--detach` (or `make demo`) in this directory first"
            )
        os.environ.update(read_local_env())
        aws.reset_sessions()
    if args.cluster:
        os.environ["CLUSTER_NAME"] = args.cluster
    if args.region:
        os.environ["AWS_REGION"] = os.environ["AWS_DEFAULT_REGION"] = args.region
    installed = runtime.installed_control_plane()
    if installed is not None:
        return installed
    cluster = os.environ.get("CLUSTER_NAME")
    if not cluster:
        raise ClusterNotFound("no cluster: pass --cluster NAME (or set CLUSTER_NAME), or --local")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    if not os.environ.get("STATE_TABLE_NAME"):
        try:
            outputs = stack_outputs(cluster, region)
        except Exception as error:  # no stack, no credentials: say which and how to fix it
            if not (stack_optional and _no_such_stack(error)):
                raise ClusterNotFound(
                    f"cannot read stack {naming.stack_name(cluster)} in {region} ({error}); deploy it, or "
                    "set STATE_TABLE_NAME"
                ) from error
            outputs = {}
        if outputs:
            os.environ["STATE_TABLE_NAME"] = outputs.get(naming.StackOutput.STATE_TABLE_NAME, "")
    try:
        return runtime.control_plane()
    except ClientError as error:  # the plane reads the cluster's endpoint from DescribeCluster
        if error.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
            raise NoEksCluster(cluster, region) from error
        raise
