"""Waking the provisioner: an asynchronous Lambda invocation (the simulator runs it in-process)."""

from __future__ import annotations

import json

from serverless_karpenter.adapters import aws
from serverless_karpenter.provisioning.context import ControlPlane


def invoke_provisioner(plane: ControlPlane, payload: dict[str, object]) -> None:
    """Ask the provisioner for a pass now; without a function name its own schedule does it later."""
    name = plane.settings.provisioner_function_name
    if not name:
        return
    aws.client("lambda", plane.settings.aws_region).invoke(
        FunctionName=name, InvocationType="Event", Payload=json.dumps(payload).encode()
    )
