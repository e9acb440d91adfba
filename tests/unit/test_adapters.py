"""Adapters with exact contracts: the EKS token, user data, the NodeClaim store and the lease."""

from __future__ import annotations

import base64
import tomllib
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
import yaml
from moto import mock_aws
from serverless_karpenter import amifamily, state_schema
from serverless_karpenter.adapters.eks_token import TOKEN_PREFIX, TokenSource, decode_token, presigned_token
from serverless_karpenter.adapters.providers.nodeclass import NodeClassResolver
from serverless_karpenter.adapters.state_store import ConflictError, Lease, NodeClaimStore
from serverless_karpenter.clock import ManualClock
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield


def test_token_is_a_presigned_get_caller_identity_url_for_the_cluster(aws: None) -> None:
    token = presigned_token("prod-blue", "eu-west-1")
    assert token.startswith(TOKEN_PREFIX) and "=" not in token
    url = urllib.parse.urlparse(decode_token(token))
    query = urllib.parse.parse_qs(url.query)
    assert url.scheme == "https" and url.netloc == "sts.eu-west-1.amazonaws.com"
    assert query["Action"] == ["GetCallerIdentity"] and query["Version"] == ["2011-06-15"]
    assert query["X-Amz-Expires"] == ["60"]
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    # The cluster name is a signed header, so the token is only good for this cluster.
    assert "x-k8s-aws-id" in query["X-Amz-SignedHeaders"][0].split(";")
    assert query["X-Amz-Credential"][0].split("/")[2:4] == ["eu-west-1", "sts"]


@pytest.mark.parametrize(
    ("region", "host"),
    [
        ("cn-north-1", "sts.cn-north-1.amazonaws.com.cn"),
        ("cn-northwest-1", "sts.cn-northwest-1.amazonaws.com.cn"),
        ("us-gov-west-1", "sts.us-gov-west-1.amazonaws.com"),
        ("us-iso-east-1", "sts.us-iso-east-1.c2s.ic.gov"),
    ],
)
def test_token_names_sts_under_the_partitions_dns_suffix(aws: None, region: str, host: str) -> None:
    # A China cluster's authenticator accepts only STS hosts under amazonaws.com.cn.
    url = urllib.parse.urlparse(decode_token(presigned_token("prod-blue", region)))
    assert url.netloc == host
    assert urllib.parse.parse_qs(url.query)["X-Amz-Credential"][0].split("/")[2:4] == [region, "sts"]


def test_token_is_refreshed_before_its_fifteen_minutes_run_out(monkeypatch: pytest.MonkeyPatch) -> None:
    issued: list[int] = []

    def fake_presign(cluster: str, region: str, session: object = None) -> str:
        issued.append(len(issued))
        return f"{TOKEN_PREFIX}{len(issued)}"

    monkeypatch.setattr("serverless_karpenter.adapters.eks_token.presigned_token", fake_presign)
    clock = ManualClock(NOW)
    source = TokenSource("c", "us-east-1", clock.now)
    first = source.token()
    clock.advance(13 * 60)
    assert source.token() == first and len(issued) == 1
    clock.advance(61)  # 14 min 1 s: within a minute of expiry
    assert source.token() != first and len(issued) == 2


def test_token_is_refreshed_on_the_clock_that_signed_it_when_the_given_clock_lags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A simulation's virtual clock can fall behind the wall clock the signature is stamped from: the token
    must not outlive its 15 real minutes because only 10 virtual ones have passed (STS answers 401)."""
    issued: list[int] = []

    def fake_presign(cluster: str, region: str, session: object = None) -> str:
        issued.append(len(issued))
        return f"{TOKEN_PREFIX}{len(issued)}"

    monkeypatch.setattr("serverless_karpenter.adapters.eks_token.presigned_token", fake_presign)
    clock = ManualClock(NOW)
    wall = [1_000_000.0]
    source = TokenSource("c", "us-east-1", clock.now, signing_clock=lambda: wall[0])
    first = source.token()
    clock.advance(10 * 60)
    wall[0] += 13 * 60
    assert source.token() == first and len(issued) == 1
    wall[0] += 61  # 14 min 1 s on the signing clock, 10 min on the given one
    assert source.token() != first and len(issued) == 2


BOTTLEROCKET_USER_SETTINGS = "[settings.host-containers.admin]\nenabled = true\n"


def _user_data(family: str) -> str:
    cluster = amifamily.ClusterInfo("demo", "https://api.example", "Q0E=", "10.100.0.0/16", "1.31")
    node = amifamily.NodeBootstrap(
        labels={"karpenter.sh/nodepool": "default", "team": "a"},
        taints=[
            {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
            {"key": "gpu", "value": "true", "effect": "NoSchedule"},
        ],
        max_pods=58,
        custom_user_data=BOTTLEROCKET_USER_SETTINGS if family == "Bottlerocket" else "echo hello",
    )
    return amifamily.render_user_data(family, cluster, node)


def test_al2023_user_data_is_a_nodeadm_nodeconfig_after_the_users_part() -> None:
    text = _user_data("AL2023")
    assert text.startswith("MIME-Version: 1.0")
    parts = [p for p in text.split("--//") if "Content-Type" in p and "multipart" not in p]
    assert "echo hello" in parts[0]
    config = yaml.safe_load(parts[1].split("\n\n", 1)[1])
    assert config["kind"] == "NodeConfig" and config["spec"]["cluster"]["name"] == "demo"
    assert config["spec"]["kubelet"]["config"]["maxPods"] == 58
    flags = config["spec"]["kubelet"]["flags"]
    assert "--node-labels=karpenter.sh/nodepool=default,team=a" in flags
    assert "--register-with-taints=karpenter.sh/unregistered:NoExecute,gpu=true:NoSchedule" in flags


def test_al2_and_bottlerocket_put_labels_where_they_read_them() -> None:
    al2 = _user_data("AL2")
    assert (
        "/etc/eks/bootstrap.sh 'demo'" in al2
        and "--max-pods=58" in al2
        and "--dns-cluster-ip '10.100.0.10'" in al2
    )
    bottlerocket = tomllib.loads(_user_data("Bottlerocket"))["settings"]
    kubernetes = bottlerocket["kubernetes"]
    assert kubernetes["node-labels"]["team"] == "a"
    assert kubernetes["node-taints"]["gpu"] == ["true:NoSchedule"]
    assert kubernetes["max-pods"] == 58 and kubernetes["cluster-name"] == "demo"
    # The user's own settings are merged, not replaced.
    assert bottlerocket["host-containers"]["admin"]["enabled"] is True
    assert _user_data("Custom") == "echo hello"
    assert base64.b64decode(amifamily.encode("x")).decode() == "x"


def _store() -> tuple[NodeClaimStore, Any]:
    ddb: Any = boto3.client("dynamodb", region_name="us-east-1")
    ddb.create_table(**state_schema.table_definition("t"))
    return NodeClaimStore(ddb, "t"), ddb


def test_transitions_are_conditional_on_the_version(aws: None) -> None:
    store, _ = _store()
    record = store.create(
        NodeClaimRecord(name="default-abc", nodepool="default", nodeclass="default", created_at=NOW)
    )
    with pytest.raises(ConflictError):
        store.create(record)
    launched = store.save(record.model_copy(update={"state": NodeClaimState.LAUNCHED, "instance_id": "i-1"}))
    assert launched.version == 1
    # A writer holding the old version loses, and the newer state is kept.
    with pytest.raises(ConflictError):
        store.save(record.model_copy(update={"state": NodeClaimState.TERMINATED}))
    assert store.get("default-abc").state == NodeClaimState.LAUNCHED  # type: ignore[union-attr]
    assert store.find_by_instance_id("i-1").name == "default-abc"  # type: ignore[union-attr]
    registered = store.save(launched.model_copy(update={"node_name": "ip-1"}))
    assert store.find_by_node_name("ip-1").version == registered.version  # type: ignore[union-attr]
    assert [r.name for r in store.list()] == ["default-abc"]
    with pytest.raises(ConflictError):
        store.delete(launched)
    store.delete(registered)
    assert store.get("default-abc") is None


def test_live_listing_leaves_out_the_terminated_records_kept_for_audit(aws: None) -> None:
    store, _ = _store()
    for name in ("default-a", "default-b"):
        store.create(NodeClaimRecord(name=name, nodepool="default", nodeclass="default", created_at=NOW))
    done = store.get("default-b")
    assert done is not None
    store.save(done.model_copy(update={"state": NodeClaimState.TERMINATED, "expires_at": NOW}))
    assert [r.name for r in store.list_live()] == ["default-a"]
    assert [r.name for r in store.list()] == ["default-a", "default-b"]  # `status --all` and audits


def test_the_lease_has_one_holder_until_it_expires(aws: None) -> None:
    _, ddb = _store()
    a, b = Lease(ddb, "t", "provisioner", "a"), Lease(ddb, "t", "provisioner", "b")
    assert a.acquire(NOW, 60)
    assert not b.acquire(NOW + timedelta(seconds=30), 60)
    assert a.acquire(NOW + timedelta(seconds=30), 60)  # renewal by the holder
    assert not b.acquire(NOW + timedelta(seconds=80), 60)
    assert b.acquire(NOW + timedelta(seconds=91), 60)
    assert b.token > a.token  # the fencing token moved on
    b.release()
    assert a.acquire(NOW + timedelta(seconds=92), 60)


def test_nodeclass_resolution_is_cached_for_a_minute_per_spec(aws: None) -> None:
    ec2: Any = boto3.client("ec2", region_name="us-east-1")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    tags = [{"Key": "karpenter.sh/discovery", "Value": "c1"}]
    ec2.create_subnet(
        VpcId=vpc,
        CidrBlock="10.0.0.0/20",
        AvailabilityZone="us-east-1a",
        TagSpecifications=[{"ResourceType": "subnet", "Tags": tags}],
    )
    ec2.create_security_group(
        GroupName="nodes",
        Description="nodes",
        VpcId=vpc,
        TagSpecifications=[{"ResourceType": "security-group", "Tags": tags}],
    )
    # One of moto's Amazon AMIs by name: describing all 1,301 of them costs seconds of serialisation.
    image = ec2.describe_images(
        Owners=["amazon"], Filters=[{"Name": "name", "Values": ["amzn2-ami-hvm-2.0.20180810-x86_64-gp2"]}]
    )["Images"][0]["ImageId"]
    calls: list[str] = []

    def count(model: Any, **_: Any) -> None:  # returning a value would short-circuit the call
        if model.name.startswith("Describe"):
            calls.append(model.name)

    ec2.meta.events.register("before-call.ec2.*", count)
    clock = ManualClock(NOW)
    resolver = NodeClassResolver(
        ec2,
        boto3.client("ssm", region_name="us-east-1"),
        boto3.client("iam", region_name="us-east-1"),
        "c1",
        "1.31",
        now=clock.now,
    )
    nodeclass: dict[str, Any] = {
        "metadata": {"name": "default"},
        "spec": {
            "amiFamily": "AL2023",
            "amiSelectorTerms": [{"id": image}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c1"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c1"}}],
            "instanceProfile": "nodes",
        },
    }
    first = resolver.resolve(nodeclass)
    described = len(calls)
    assert described > 0 and [s.zone for s in first.subnets] == ["us-east-1a"]

    # Within the minute: the same answer, no call to EC2, though EC2 has changed meanwhile.
    ec2.create_subnet(
        VpcId=vpc,
        CidrBlock="10.0.16.0/20",
        AvailabilityZone="us-east-1b",
        TagSpecifications=[{"ResourceType": "subnet", "Tags": tags}],
    )
    clock.advance(59)
    assert resolver.resolve(nodeclass) is first
    assert len(calls) == described

    # An edited spec is resolved afresh at once.
    edited = {**nodeclass, "spec": {**nodeclass["spec"], "tags": {"team": "web"}}}
    assert {s.zone for s in resolver.resolve(edited).subnets} == {"us-east-1a", "us-east-1b"}

    # After the minute, EC2 is asked again.
    clock.advance(61)
    calls.clear()
    assert {s.zone for s in resolver.resolve(nodeclass).subnets} == {"us-east-1a", "us-east-1b"}
    assert calls

    # A selector that matches nothing is an error each time, never a cached answer.
    broken = {**nodeclass, "spec": {**nodeclass["spec"], "subnetSelectorTerms": [{"tags": {"none": "x"}}]}}
    for _ in range(2):
        with pytest.raises(ValueError, match="subnetSelectorTerms"):
            resolver.resolve(broken)
