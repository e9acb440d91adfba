"""Waking the provisioner: an asynchronous Lambda invocation (the simulator gives its own invoker)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from serverless_karpenter.adapters import aws


class LambdaProvisionerInvoker:
    """Invokes the provisioner function asynchronously (``InvocationType=Event``), as the watcher,
    termination and disruption do to ask for a pass now rather than on the provisioner's schedule."""

    def __init__(self, function_name: str, region: str) -> None:
        self.function_name = function_name
        self.region = region

    def invoke(self, payload: Mapping[str, object]) -> None:
        # Without a function name (a plane built for a tool) its own schedule does it later.
        if not self.function_name:
            return
        # The client is made on first use, not at cold start: most invocations never wake it.
        aws.client("lambda", self.region).invoke(
            FunctionName=self.function_name, InvocationType="Event", Payload=json.dumps(payload).encode()
        )


class NoProvisionerInvoker:
    """Wakes nothing: the provisioner's schedule picks the work up (a plane built by hand, ``plan``)."""

    def invoke(self, payload: Mapping[str, object]) -> None:
        return None
