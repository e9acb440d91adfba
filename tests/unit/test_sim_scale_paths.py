"""The simulator's faster paths (issue 22) answer exactly what the slow ones did.

- moto's tags of one EC2 resource, read from the backend's map, equal moto's own ``describe_tags`` answer;
- DynamoDB items written to the wire as they are held come back to botocore unchanged, binary included;
- the records view returns what ``list_live`` returns, reading each record's body once per version.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from moto import mock_aws
from serverless_karpenter import state_schema
from serverless_karpenter.adapters.state_store import NodeClaimStore
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter_sim import moto_speed
from serverless_karpenter_sim.cloud import ACCOUNT
from serverless_karpenter_sim.record_view import RecordView

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("MOTO_ACCOUNT_ID", ACCOUNT)
    with mock_aws():
        yield


def test_plain_attributes_are_those_already_in_their_wire_form() -> None:
    assert moto_speed.plain_attribute({"S": "x"})
    assert moto_speed.plain_attribute({"N": "12"})
    assert moto_speed.plain_attribute({"M": {"a": {"L": [{"BOOL": True}, {"NULL": True}, {"SS": ["a"]}]}}})
    assert not moto_speed.plain_attribute({"N": 12})  # a number held as a number takes moto's own path
    assert not moto_speed.plain_attribute({"B": b"\x00"})  # bytes are base64-encoded by moto
    assert not moto_speed.plain_attribute({"M": {"a": {"BS": [b"\x00"]}}})
    assert not moto_speed.plain_attribute({"S": "x", "N": "1"})


def test_ec2_tags_of_one_resource_are_moto_s_own_answer(aws: None) -> None:
    from moto.ec2.models import ec2_backends

    ec2: Any = boto3.client("ec2", region_name="us-east-1")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    made = ec2.run_instances(ImageId=image, MinCount=3, MaxCount=3)["Instances"]
    for n, instance in enumerate(made):
        tags = [{"Key": f"k{i}", "Value": f"{n}-{i}"} for i in range(n + 2)]
        ec2.create_tags(Resources=[instance["InstanceId"]], Tags=tags)
    from moto.ec2.models.core import TaggedEC2Resource

    assert getattr(TaggedEC2Resource, "_serverless_karpenter_fast", False)  # the fast path is the one tested
    backend = ec2_backends[ACCOUNT]["us-east-1"]
    for reservation in backend.reservations.values():
        for instance in reservation.instances:
            assert instance.get_tags() == backend.describe_tags(filters={"resource-id": [instance.id]})
    described = ec2.describe_instances(InstanceIds=[made[2]["InstanceId"]])["Reservations"][0]
    assert {t["Key"]: t["Value"] for t in described["Instances"][0]["Tags"]} == {
        "k0": "2-0",
        "k1": "2-1",
        "k2": "2-2",
        "k3": "2-3",
    }


def test_dynamodb_items_come_back_unchanged_whatever_their_attributes(aws: None) -> None:
    from moto.core.serialize import BaseJSONSerializer

    assert getattr(BaseJSONSerializer, "_serverless_karpenter_fast", False)
    ddb: Any = boto3.client("dynamodb", region_name="us-east-1")
    ddb.create_table(**state_schema.table_definition("t"))
    item = {
        "pk": {"S": "P"},
        "sk": {"S": "a"},
        "n": {"N": "3.5"},
        "flag": {"BOOL": False},
        "none": {"NULL": True},
        "names": {"SS": ["x", "y"]},
        "nested": {"M": {"l": {"L": [{"S": "v"}, {"N": "1"}]}}},
        "blob": {"B": b"\x00\x01"},
        "blobs": {"M": {"b": {"BS": [b"\x02"]}}},
    }
    ddb.put_item(TableName="t", Item=item)
    got = ddb.get_item(TableName="t", Key={"pk": {"S": "P"}, "sk": {"S": "a"}})["Item"]
    assert got["blob"] == {"B": b"\x00\x01"} and got["blobs"] == {"M": {"b": {"BS": [b"\x02"]}}}
    assert {k: v for k, v in got.items() if k != "names"} == {k: v for k, v in item.items() if k != "names"}
    assert sorted(got["names"]["SS"]) == ["x", "y"]
    queried = ddb.query(
        TableName="t",
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": "P"}},
    )["Items"]
    assert queried[0]["nested"] == item["nested"] and base64.b64encode(queried[0]["blob"]["B"])


def test_the_records_view_reads_a_body_once_per_version(aws: None) -> None:
    ddb: Any = boto3.client("dynamodb", region_name="us-east-1")
    ddb.create_table(**state_schema.table_definition("t"))
    store = NodeClaimStore(ddb, "t")
    for name in ("default-a", "default-b", "default-c"):
        store.create(NodeClaimRecord(name=name, nodepool="default", nodeclass="default", created_at=NOW))
    generation = [0]
    view = RecordView(ddb, "t", lambda: generation[0])
    assert view.list_live() == store.list_live()
    assert view.parsed == 3
    requests = view.queries
    assert view.list_live() == store.list_live() and view.queries == requests  # same generation: no read
    b = store.get("default-b")
    c = store.get("default-c")
    assert b is not None and c is not None
    store.save(b.model_copy(update={"state": NodeClaimState.LAUNCHED, "instance_id": "i-1"}))
    store.save(c.model_copy(update={"state": NodeClaimState.TERMINATED, "expires_at": NOW}))
    generation[0] += 1
    live = view.list_live()
    assert live == store.list_live() and [r.name for r in live] == ["default-a", "default-b"]
    assert live[1].state == NodeClaimState.LAUNCHED
    assert view.parsed == 4  # only default-b's new version was read again
    assert view.queries == requests + 1  # one BatchGetItem for it; the versions were read in process


def test_a_prefix_search_over_sorted_parameters_agrees_with_a_walk_over_all() -> None:
    from moto.core.parse import QueryParser

    assert getattr(QueryParser, "_serverless_karpenter_fast", False)
    keys = sorted(
        [
            "Action",
            "LaunchTemplateConfigs.1.Overrides.1.InstanceType",
            "LaunchTemplateConfigs.1.Overrides.10.InstanceType",
            "LaunchTemplateConfigs.1.Overrides.2.SubnetId",
            "TagSpecification.1.Tag.1.Key",
            "Type",
        ]
    )
    prefixes = [
        "LaunchTemplateConfigs.1.Overrides.1",
        "LaunchTemplateConfigs.1.Overrides.3",
        "LaunchTemplateConfigs.2",
        "TagSpecification.1.Tag.2",
        "Type",
        "Z",
        "A",
    ]
    for prefix in prefixes:
        assert moto_speed.has_key_with_prefix(keys, prefix) == any(k.startswith(prefix) for k in keys)


def test_a_create_fleet_with_many_overrides_is_parsed_whole(aws: None) -> None:
    ec2: Any = boto3.client("ec2", region_name="us-east-1")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    template = ec2.create_launch_template(LaunchTemplateName="t", LaunchTemplateData={"ImageId": image})[
        "LaunchTemplate"
    ]["LaunchTemplateId"]
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    types = [f"m5.{size}" for size in ("large", "xlarge", "2xlarge", "4xlarge")] + ["c5.large", "r5.large"]
    fleet = ec2.create_fleet(
        Type="instant",
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"},
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {"LaunchTemplateId": template, "Version": "$Latest"},
                "Overrides": [
                    {"InstanceType": t, "SubnetId": subnet, "Priority": i} for i, t in enumerate(types)
                ],
            }
        ],
        OnDemandOptions={"AllocationStrategy": "lowest-price"},
    )
    launched = [i for group in fleet["Instances"] for i in group["InstanceIds"]]
    assert len(launched) == 1
    described = ec2.describe_instances(InstanceIds=launched)["Reservations"][0]["Instances"][0]
    assert described["InstanceType"] in types


def _registry() -> tuple[Any, Any]:
    from serverless_karpenter.clock import ManualClock
    from serverless_karpenter_sim.kubeapi.audit import Audit
    from serverless_karpenter_sim.kubeapi.store import Store
    from serverless_karpenter_sim.kubeapi.watches import WatchRegistry

    store = Store(ManualClock(NOW), Audit())
    return store, WatchRegistry(store)


def test_settling_waits_for_a_watch_still_writing_past_the_timeout() -> None:
    """A burst (thousands of pods in one tick) takes the watch's thread longer than the timeout on a
    loaded host; it is still writing, so the simulator waits instead of failing the run."""
    import threading
    import time

    store, registry = _registry()
    stream = registry.open("a", "watcher", "pods")
    target = store.resource_version

    def write_slowly() -> None:
        for step in range(1, 7):  # 3 s in all, every step well within the 2 s allowed without progress
            time.sleep(0.5)
            registry.sent(stream, 1, cursor=target - 1 if step < 6 else target, checked=store.clock.now())

    writer = threading.Thread(target=write_slowly)
    writer.start()
    progress = registry.settle("watcher", timeout=2.0)
    writer.join()
    assert progress["a"].lines == 6


def test_settling_gives_up_on_a_watch_that_stopped_writing() -> None:
    _, registry = _registry()
    registry.open("a", "watcher", "pods")
    with pytest.raises(TimeoutError):
        registry.settle("watcher", timeout=0.2)
