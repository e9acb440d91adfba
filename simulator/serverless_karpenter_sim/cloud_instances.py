"""The kubelets' view of EC2: our cluster's instances, read from the simulated cloud itself.

A real kubelet never calls DescribeInstances: it runs on its instance, and knows it is up because it is
running. The simulated kubelets therefore read moto's EC2 model in this process (the instances, their
state, zone and tags) instead of asking the EC2 API every tick: DescribeInstances over HTTP, serialized
to XML by moto and parsed back by botocore, cost about 4 ms per instance per tick, most of a tick's wall
time at a few hundred nodes. Only the simulator's machinery reads this way; the control plane's Lambdas
still reach EC2 through the API, signed and checked against their roles.

User data is read once per instance through the API (DescribeInstanceAttribute), as before: moto keeps it
in the launch template a fleet was made from, and the API is what resolves it.
"""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.clock import ManualClock

from serverless_karpenter_sim.cloud import ACCOUNT, REGION
from serverless_karpenter_sim.cluster import SimInstance

# The instance states the kubelets are shown; a terminated instance is as good as gone to them.
LIVE_INSTANCE_STATES = frozenset({"pending", "running", "shutting-down", "stopping", "stopped"})


def _ec2_backend(region: str) -> Any:
    from moto.ec2.models import ec2_backends

    return ec2_backends[ACCOUNT][region]


def cluster_instance_tags(
    cluster_name: str, states: frozenset[str], region: str = REGION
) -> dict[str, dict[str, str]]:
    """Instance id -> tags of the cluster's instances in ``states``, read from moto's model in this process:
    the simulator's invariant checks look on from outside, as the kubelets do. Through the API this was a
    DescribeInstances of every instance a virtual minute, serialized to XML and parsed back (seconds at
    1,000 nodes)."""
    backend = _ec2_backend(region)
    owned = f"{wk.TAG_CLUSTER_PREFIX}{cluster_name}"
    out: dict[str, dict[str, str]] = {}
    for reservation in list(backend.reservations.values()):
        for instance in list(reservation.instances):
            if str(instance.state) not in states:
                continue
            tags = dict(backend.tags.get(str(instance.id)) or {})
            if tags.get(owned) == "owned":
                out[str(instance.id)] = tags
    return out


class MotoInstances:
    """Our cluster's live instances, with their user data.

    moto stamps LaunchTime with the wall clock; a booting machine lives on the simulation's virtual time,
    so the launch time reported here is when the instance was first seen on that clock.
    """

    def __init__(self, ec2: Any, cluster_name: str, clock: ManualClock, region: str = REGION) -> None:
        self._ec2 = ec2
        self._region = region
        self._owned_tag = f"{wk.TAG_CLUSTER_PREFIX}{cluster_name}"
        self._clock = clock
        self._user_data: dict[str, str | None] = {}
        self._first_seen: dict[str, datetime] = {}
        # Instances seen terminated: moto keeps them for ever, and they are never looked at again.
        self._gone: set[str] = set()

    def running_instances(self) -> list[SimInstance]:
        backend = _ec2_backend(self._region)
        out = []
        # The main thread is moto's only client while a tick's actors run, so the model is not being
        # changed under this read; list() guards against a resize all the same.
        for reservation in list(backend.reservations.values()):
            for instance in list(reservation.instances):
                instance_id = str(instance.id)
                if instance_id in self._gone:
                    continue
                state = str(instance.state)
                if state not in LIVE_INSTANCE_STATES:
                    if state == "terminated":
                        self._gone.add(instance_id)
                        self._first_seen.pop(instance_id, None)
                        self._user_data.pop(instance_id, None)
                    continue
                tags = dict(backend.tags.get(instance_id) or {})
                if tags.get(self._owned_tag) != "owned":
                    continue
                out.append(
                    SimInstance(
                        instance_id=instance_id,
                        instance_type=str(instance.instance_type),
                        zone=str(instance.placement.zone),
                        private_dns_name=str(instance.private_dns_name or instance_id),
                        launch_time=self._first_seen.setdefault(instance_id, self._clock.now()),
                        state=state,
                        user_data=self._read_user_data(instance_id),
                        tags=tags,
                    )
                )
        return out

    def _read_user_data(self, instance_id: str) -> str | None:
        if instance_id not in self._user_data:
            attribute = self._ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
            value = (attribute.get("UserData") or {}).get("Value")
            self._user_data[instance_id] = base64.b64decode(value).decode(errors="replace") if value else None
        return self._user_data[instance_id]
