"""The unavailable-offerings cache in DynamoDB (moto), through the launch path, on a virtual clock.

After CreateFleet fails with InsufficientInstanceCapacity for (spot, m5.large, us-east-1a), the next
launch, made by another invocation that shares only the table, avoids that offering for 3 minutes and
offers it again after. After it fails for want of the spot service-linked role, spot as a whole is
avoided the same way. What is left to offer CreateFleet (available, the 60 cheapest types) must still
meet the claim's minValues, or the launch is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from serverless_karpenter import amifamily
from serverless_karpenter import state_schema as schema
from serverless_karpenter.adapters.providers.fleet import FleetLauncher
from serverless_karpenter.adapters.providers.model import (
    SPOT_SERVICE_LINKED_ROLE_ERROR,
    FleetError,
    Instance,
    LaunchError,
    LaunchRequest,
    ResolvedNodeClass,
    Subnet,
)
from serverless_karpenter.adapters.state_store import NodeClaimStore
from serverless_karpenter.adapters.unavailable_offerings import DynamoDBUnavailableOfferings
from serverless_karpenter.api import labels as wk
from serverless_karpenter.clock import ManualClock
from serverless_karpenter.config import Settings
from serverless_karpenter.lifecycle.launch import capacity_type_for, launch_record, launch_request
from serverless_karpenter.lifecycle.model import InstanceTypeOption, NodeClaimRecord, NodeClaimState
from serverless_karpenter.provisioning.context import ControlPlane
from serverless_karpenter.runtime import CatalogInstanceTypes
from serverless_karpenter.scheduling.scheduler import (
    MAX_INSTANCE_TYPES,
    NodePoolTemplate,
    Scheduler,
    choose_offering,
    nodepool_requirements,
)

TABLE = "state"
REGION = "us-east-1"
START = datetime(2026, 1, 1, tzinfo=UTC)
ZONES = ("us-east-1a", "us-east-1b")
NODECLASS = ResolvedNodeClass(
    name="default",
    subnets=[Subnet(f"subnet-{z[-1]}", z, None, 100) for z in ZONES],
    security_group_ids=["sg-1"],
    amis={"amd64": "ami-1"},
    ami_family="AL2023",
    instance_profile="profile",
)


class IceOnceLauncher:
    """CreateFleet that answers InsufficientInstanceCapacity for spot m5.large in zone a, once."""

    def __init__(self) -> None:
        self.requests: list[LaunchRequest] = []

    def find_by_nodeclaim(self, name: str) -> None:
        return None

    def launch(self, request: LaunchRequest, nodeclass: ResolvedNodeClass) -> Any:
        self.requests.append(request)
        error = FleetError(
            "InsufficientInstanceCapacity", "no capacity", "m5.large", "us-east-1a", wk.CAPACITY_TYPE_SPOT
        )
        raise LaunchError("CreateFleet failed", [error])


@pytest.fixture
def dynamodb(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    # A simulation earlier in this process may have left its (stopped) endpoint in the environment.
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        client: Any = boto3.client("dynamodb", region_name=REGION)
        client.create_table(**schema.table_definition(TABLE))
        yield client


def invocation(dynamodb: Any, clock: ManualClock, launcher: Any = None) -> ControlPlane:
    """A fresh control plane, as a new Lambda invocation has: it shares only the table."""
    return ControlPlane(
        settings=Settings(cluster_name="test", state_table_name=TABLE),
        clock=clock,
        kube=cast(Any, None),
        store=NodeClaimStore(dynamodb, TABLE),
        launcher=cast(Any, launcher),
        resolver=cast(Any, None),
        instance_types=CatalogInstanceTypes(
            REGION, clock, unavailable=DynamoDBUnavailableOfferings(dynamodb, TABLE, clock)
        ),
    )


def m5_claim(plane: ControlPlane, name: str) -> NodeClaimRecord:
    """A spot-or-on-demand claim for m5.large with the offerings the catalog has now."""
    types = plane.instance_types.instance_types(NODECLASS, {})
    m5 = next(it for it in types if it.name == "m5.large")
    record = NodeClaimRecord(
        name=name,
        nodepool="default",
        nodeclass="default",
        requirements=[{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]}],
        instance_type_options=[
            InstanceTypeOption(
                name="m5.large",
                offerings=[(o.zone, o.capacity_type, o.price) for o in m5.offerings],
            )
        ],
        created_at=plane.clock.now(),
    )
    return plane.store.create(record)


def spot_offerings(plane: ControlPlane) -> set[str]:
    types = plane.instance_types.instance_types(NODECLASS, {})
    m5 = next(it for it in types if it.name == "m5.large")
    return {o.zone for o in m5.offerings if o.capacity_type == wk.CAPACITY_TYPE_SPOT}


def test_ice_makes_the_next_launch_avoid_the_offering_for_three_minutes(dynamodb: Any) -> None:
    clock = ManualClock(START)
    launcher = IceOnceLauncher()
    first = invocation(dynamodb, clock, launcher)
    record = m5_claim(first, "default-first")
    assert spot_offerings(first) == set(ZONES)

    failed = launch_record(first, record, NODECLASS)
    assert failed.last_error is not None
    assert launcher.requests[0].capacity_type == wk.CAPACITY_TYPE_SPOT
    assert ("m5.large", "us-east-1a", "amd64") in launcher.requests[0].overrides

    # The mark is in the table, for every invocation.
    items = dynamodb.query(
        TableName=TABLE,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": schema.UNAVAILABLE_OFFERING_PARTITION}},
    )["Items"]
    assert [i["sk"]["S"] for i in items] == ["spot#m5.large#us-east-1a"]
    assert items[0]["reason"]["S"] == "InsufficientInstanceCapacity"

    for elapsed in (1, 90, 179):
        clock.set(START + timedelta(seconds=elapsed))
        later = invocation(dynamodb, clock)
        assert spot_offerings(later) == {"us-east-1b"}
        retry = m5_claim(later, f"default-retry-{elapsed}")
        request = launch_request(later, retry, wk.CAPACITY_TYPE_SPOT)
        assert request.overrides == [("m5.large", "us-east-1b", "amd64")]

    clock.set(START + timedelta(seconds=181))
    after = invocation(dynamodb, clock)
    assert spot_offerings(after) == set(ZONES)
    retry = m5_claim(after, "default-after")
    request = launch_request(after, retry, wk.CAPACITY_TYPE_SPOT)
    assert ("m5.large", "us-east-1a", "amd64") in request.overrides


def test_one_query_per_refresh_and_marks_are_seen_at_once(dynamodb: Any) -> None:
    clock = ManualClock(START)
    cache = DynamoDBUnavailableOfferings(dynamodb, TABLE, clock, refresh_seconds=10)
    for _ in range(50):
        assert not cache.is_unavailable("spot", "c6i.large", "us-east-1a")
    assert cache.queries == 1
    cache.mark_unavailable("spot", "c6i.large", "us-east-1a", "InsufficientInstanceCapacity")
    assert cache.is_unavailable("spot", "c6i.large", "us-east-1a")
    assert cache.queries == 1

    other = DynamoDBUnavailableOfferings(dynamodb, TABLE, clock)
    other.mark_capacity_type_unavailable("spot", "SpotServiceLinkedRole")
    assert not cache.is_unavailable("spot", "m5.large", "us-east-1b")  # the view is fresh enough
    clock.advance(10)
    assert cache.is_unavailable("spot", "m5.large", "us-east-1b")  # reloaded: one more Query
    assert cache.queries == 2
    assert not cache.is_unavailable("on-demand", "m5.large", "us-east-1b")


def test_expired_items_the_ttl_has_not_deleted_yet_do_not_count(dynamodb: Any) -> None:
    clock = ManualClock(START)
    writer = DynamoDBUnavailableOfferings(dynamodb, TABLE, clock)
    writer.mark_zone_unavailable("on-demand", "us-east-1a", "InsufficientFreeAddressesInSubnet")
    clock.advance(180.5)
    reader = DynamoDBUnavailableOfferings(dynamodb, TABLE, clock)
    assert not reader.is_unavailable("on-demand", "m5.large", "us-east-1a")
    assert (
        dynamodb.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": schema.UNAVAILABLE_OFFERING_PARTITION}},
        )["Count"]
        == 1
    )


def test_fleet_errors_for_the_spot_role_name_it_whether_listed_or_raised() -> None:
    class Ec2:
        def __init__(self, answer: Any) -> None:
            self.answer = answer

        def create_launch_template(self, **_: Any) -> None:
            return None

        def create_fleet(self, **_: Any) -> Any:
            if isinstance(self.answer, Exception):
                raise self.answer
            return self.answer

    listed = {
        "Instances": [],
        "Errors": [
            {
                "LaunchTemplateAndOverrides": {
                    "Overrides": {"InstanceType": "m5.large", "AvailabilityZone": "us-east-1a"}
                },
                "Lifecycle": "spot",
                "ErrorCode": SPOT_SERVICE_LINKED_ROLE_ERROR,
                "ErrorMessage": "The provided credentials may not create the service-linked role",
            }
        ],
    }
    raised = ClientError(
        {"Error": {"Code": SPOT_SERVICE_LINKED_ROLE_ERROR, "Message": "not permitted"}}, "CreateFleet"
    )
    cluster = amifamily.ClusterInfo("test", "https://example.invalid", "")
    request = LaunchRequest(
        nodeclaim="default-spot",
        nodepool="default",
        capacity_type=wk.CAPACITY_TYPE_SPOT,
        overrides=[("m5.large", "us-east-1a", "amd64")],
        bootstrap=amifamily.NodeBootstrap(labels={}, taints=[]),
    )
    for answer in (listed, raised):
        with pytest.raises(LaunchError) as failed:
            FleetLauncher(Ec2(answer), "test", cluster).launch(request, NODECLASS)
        assert failed.value.spot_service_linked_role_missing
        assert {e.capacity_type for e in failed.value.errors} == {wk.CAPACITY_TYPE_SPOT}
        assert not failed.value.unavailable_offerings  # no offering lacks capacity: spot as a whole is out
        assert SPOT_SERVICE_LINKED_ROLE_ERROR in str(failed.value)


class SpotRoleMissingLauncher:
    """CreateFleet that refuses every spot request for want of the spot service-linked role."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.requests: list[LaunchRequest] = []

    def find_by_nodeclaim(self, name: str) -> None:
        return None

    def launch(self, request: LaunchRequest, nodeclass: ResolvedNodeClass) -> Instance:
        self.requests.append(request)
        if request.capacity_type == wk.CAPACITY_TYPE_SPOT:
            error = FleetError(
                SPOT_SERVICE_LINKED_ROLE_ERROR, "not permitted", None, None, request.capacity_type
            )
            raise LaunchError("CreateFleet refused", [error])
        name, zone, _ = request.overrides[0]
        return Instance(
            id="i-0123456789abcdef0",
            instance_type=name,
            zone=zone,
            state="pending",
            capacity_type=request.capacity_type,
            launch_time=self.clock.now(),
            tags={wk.NODECLAIM: request.nodeclaim},
            private_dns_name="ip-10-0-0-1.ec2.internal",
            image_id="ami-1",
        )


def planned_capacity_type(plane: ControlPlane) -> str:
    """What a plan for one small pod buys, for a NodePool that allows spot and on-demand."""
    requirements, labels, taints = nodepool_requirements(
        {
            "metadata": {"name": "default"},
            "spec": {
                "template": {
                    "spec": {
                        "requirements": [
                            {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]}
                        ]
                    }
                }
            },
        }
    )
    pool = NodePoolTemplate(
        "default",
        "default",
        0,
        requirements,
        labels,
        taints,
        plane.instance_types.instance_types(NODECLASS, {}),
    )
    pod = {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]},
    }
    (claim,) = Scheduler([pool]).solve([pod]).new_nodeclaims
    chosen = choose_offering(claim)
    assert chosen is not None
    return chosen.capacity_type


class NodePoolEvents:
    """The API server as far as the launch reads and writes it: one NodePool, the Events written on it,
    and the NodeClaim objects created for launched claims."""

    NODEPOOL = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"}}

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []
        self.nodeclaims: dict[str, dict[str, Any]] = {}

    def create_nodeclaim(self, body: dict[str, Any]) -> dict[str, Any]:
        self.nodeclaims[body["metadata"]["name"]] = body
        return body

    def patch_nodeclaim_status(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.nodeclaims[name] = {**self.nodeclaims[name], **patch}
        return self.nodeclaims[name]

    def list_nodepools(self) -> list[dict[str, Any]]:
        return [self.NODEPOOL]

    def record_event(self, obj: dict[str, Any], reason: str, message: str, event_type: str) -> None:
        self.events.append((obj["metadata"]["name"], reason, message, event_type))


def test_a_missing_spot_role_sends_every_launch_to_on_demand_until_the_ttl(
    dynamodb: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = ManualClock(START)
    launcher = SpotRoleMissingLauncher(clock)
    kube = NodePoolEvents()
    first = replace(invocation(dynamodb, clock, launcher), kube=cast(Any, kube))
    assert planned_capacity_type(first) == wk.CAPACITY_TYPE_SPOT

    launched = launch_record(first, m5_claim(first, "default-first"), NODECLASS)
    # The refused spot fleet is retried at once on on-demand, which the claim allows.
    assert [r.capacity_type for r in launcher.requests] == [wk.CAPACITY_TYPE_SPOT, wk.CAPACITY_TYPE_ON_DEMAND]
    assert launched.state == NodeClaimState.LAUNCHED and launched.capacity_type == wk.CAPACITY_TYPE_ON_DEMAND
    # Its NodeClaim object is written as it launches, on-demand as it came up.
    labels = kube.nodeclaims["default-first"]["metadata"]["labels"]
    assert labels[wk.CAPACITY_TYPE] == wk.CAPACITY_TYPE_ON_DEMAND
    fix = "aws iam create-service-linked-role --aws-service-name spot.amazonaws.com"
    assert fix in capsys.readouterr().out
    ((nodepool, reason, message, kind),) = kube.events
    assert (nodepool, reason, kind) == ("default", "SpotServiceLinkedRoleCreationFailure", "Warning")
    assert fix in message

    items = dynamodb.query(
        TableName=TABLE,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": schema.UNAVAILABLE_OFFERING_PARTITION}},
    )["Items"]
    assert [(i["sk"]["S"], i["reason"]["S"]) for i in items] == [("spot#*#*", SPOT_SERVICE_LINKED_ROLE_ERROR)]

    for elapsed in (1, 90, 179):
        clock.set(START + timedelta(seconds=elapsed))
        later = invocation(dynamodb, clock)
        assert spot_offerings(later) == set()
        assert planned_capacity_type(later) == wk.CAPACITY_TYPE_ON_DEMAND
        assert (
            capacity_type_for(later, m5_claim(later, f"default-later-{elapsed}"))
            == wk.CAPACITY_TYPE_ON_DEMAND
        )

    clock.set(START + timedelta(seconds=181))
    after = invocation(dynamodb, clock)
    assert spot_offerings(after) == set(ZONES)
    assert planned_capacity_type(after) == wk.CAPACITY_TYPE_SPOT
    assert capacity_type_for(after, m5_claim(after, "default-after")) == wk.CAPACITY_TYPE_SPOT


class RecordingLauncher:
    """CreateFleet that answers InsufficientInstanceCapacity for every override of ``exhausted``."""

    def __init__(self, exhausted: frozenset[str] = frozenset()) -> None:
        self.exhausted = exhausted
        self.requests: list[LaunchRequest] = []

    def find_by_nodeclaim(self, name: str) -> None:
        return None

    def launch(self, request: LaunchRequest, nodeclass: ResolvedNodeClass) -> Any:
        self.requests.append(request)
        errors = [
            FleetError("InsufficientInstanceCapacity", "no capacity", name, zone, request.capacity_type)
            for name, zone, _ in request.overrides
            if name in self.exhausted
        ]
        raise LaunchError("CreateFleet failed", errors)


def claim_of(
    plane: ControlPlane, name: str, types: list[tuple[str, float]], min_values: tuple[str, int]
) -> NodeClaimRecord:
    """A spot claim for ``types`` at the given prices, with minValues on one key."""
    key, count = min_values
    return plane.store.create(
        NodeClaimRecord(
            name=name,
            nodepool="default",
            nodeclass="default",
            requirements=[
                {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["spot"]},
                {"key": key, "operator": "Exists", "minValues": count},
            ],
            instance_type_options=[
                InstanceTypeOption(name=t, offerings=[(z, wk.CAPACITY_TYPE_SPOT, price) for z in ZONES])
                for t, price in types
            ],
            created_at=plane.clock.now(),
        )
    )


def test_min_values_the_sixty_cheapest_types_break_refuse_the_launch(dynamodb: Any) -> None:
    clock = ManualClock(START)
    launcher = RecordingLauncher()
    plane = invocation(dynamodb, clock, launcher)
    catalog = {it.name: it for it in plane.instance_types.instance_types(NODECLASS, {})}
    by_family: dict[str, list[str]] = {}
    for name, it in sorted(catalog.items()):
        if it.labels.get(wk.ARCH) == "amd64":
            by_family.setdefault(it.labels[wk.INSTANCE_FAMILY], []).append(name)
    # The cheapest 60 come from the largest families; ten dearer types bring families of their own.
    big = sorted(by_family, key=lambda f: (-len(by_family[f]), f))
    cheap = [name for family in big for name in by_family[family]][:MAX_INSTANCE_TYPES]
    dear = [by_family[family][0] for family in big if by_family[family][0] not in cheap][:10]
    types = [(name, 0.01 + i * 0.001) for i, name in enumerate(cheap)] + [(name, 5.0) for name in dear]
    families = {catalog[name].labels[wk.INSTANCE_FAMILY] for name in cheap}
    assert len(families) < len(families | {catalog[n].labels[wk.INSTANCE_FAMILY] for n in dear})

    # Enough families among the sixty cheapest: CreateFleet gets exactly those sixty.
    record = claim_of(plane, "default-enough", types, (wk.INSTANCE_FAMILY, len(families)))
    launch_record(plane, record, NODECLASS)
    assert {name for name, _, _ in launcher.requests[-1].overrides} == set(cheap)

    # One family more than they span: the 70 types would meet it, the sixty CreateFleet takes do not.
    launcher.requests.clear()
    record = claim_of(plane, "default-short", types, (wk.INSTANCE_FAMILY, len(families) + 1))
    failed = launch_record(plane, record, NODECLASS)
    assert launcher.requests == []
    assert failed.last_error is not None
    assert "minValues requirement is not met" in failed.last_error
    assert wk.INSTANCE_FAMILY in failed.last_error
    assert plane.store.get(record.name) is None  # deleted: its pods are planned afresh


def test_min_values_are_checked_again_once_capacity_errors_remove_offerings(dynamodb: Any) -> None:
    clock = ManualClock(START)
    launcher = RecordingLauncher(exhausted=frozenset({"m5.large"}))
    plane = invocation(dynamodb, clock, launcher)
    types = [("m5.large", 0.03), ("c5.large", 0.04)]
    record = claim_of(plane, "default-ice", types, (wk.INSTANCE_TYPE, 2))
    failed = launch_record(plane, record, NODECLASS)
    # The first fleet lost m5.large everywhere; c5.large alone would break minValues, so no second fleet.
    assert len(launcher.requests) == 1
    assert {name for name, _, _ in launcher.requests[0].overrides} == {"m5.large", "c5.large"}
    assert failed.last_error is not None and "minValues requirement is not met" in failed.last_error
    assert wk.INSTANCE_TYPE in failed.last_error
    assert plane.store.get(record.name) is None

    # Another invocation, while the marks last, refuses without calling CreateFleet at all.
    other = RecordingLauncher()
    later = invocation(dynamodb, clock, other)
    failed = launch_record(later, claim_of(later, "default-later", types, (wk.INSTANCE_TYPE, 2)), NODECLASS)
    assert other.requests == [] and failed.last_error is not None
