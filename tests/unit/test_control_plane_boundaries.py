"""The control plane's boundaries: the provisioner is woken through the plane's invoker (which the
simulator replaces, rather than overwriting handler attributes), disruption reads instances through the
plane's EC2 adapter, and every environment variable is read by Settings."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws
from serverless_karpenter import amifamily
from serverless_karpenter.adapters import aws
from serverless_karpenter.adapters.invoker import LambdaProvisionerInvoker
from serverless_karpenter.adapters.kubernetes import KubernetesGateway
from serverless_karpenter.adapters.providers.fleet import FleetLauncher
from serverless_karpenter.adapters.providers.model import Instance
from serverless_karpenter.api import labels as wk
from serverless_karpenter.clock import ManualClock
from serverless_karpenter.config import Settings
from serverless_karpenter.disruption.candidates import InstanceNetwork
from serverless_karpenter.disruption.usecases import _instance_network, disruption_lease
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.observability import tracer
from serverless_karpenter.provisioning.usecases import provisioner_lease
from serverless_karpenter.runtime import build_control_plane
from serverless_karpenter_sim.lambdas import InProcessInvoker, load_handler

from tests.unit.lambda_context import Context
from tests.unit.test_termination_drain import pod, world

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "layers" / "core" / "python" / "serverless_karpenter"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Recorder:
    """A ProvisionerInvoker that remembers what it was asked."""

    def __init__(self) -> None:
        self.payloads: list[Mapping[str, object]] = []

    def invoke(self, payload: Mapping[str, object]) -> None:
        self.payloads.append(payload)


# -- the provisioner invoker ---------------------------------------------------------------------------


def test_the_lambda_invoker_sends_an_asynchronous_invocation(monkeypatch: pytest.MonkeyPatch) -> None:
    client = boto3.client("lambda", region_name="eu-west-1", aws_access_key_id="a", aws_secret_access_key="b")
    made: list[tuple[str, str]] = []

    def made_client(service: str, region: str, **_: Any) -> Any:
        made.append((service, region))
        return client

    monkeypatch.setattr(aws, "client", made_client)
    with Stubber(client) as stub:
        stub.add_response(
            "invoke",
            {"StatusCode": 202},
            {"FunctionName": "demo-provisioner", "InvocationType": "Event", "Payload": b'{"reason": "x"}'},
        )
        LambdaProvisionerInvoker("demo-provisioner", "eu-west-1").invoke({"reason": "x"})
        stub.assert_no_pending_responses()
    assert made == [("lambda", "eu-west-1")]


def test_without_a_function_name_the_lambda_invoker_leaves_it_to_the_schedule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(aws, "client", lambda *a, **k: pytest.fail("no client is made"))
    LambdaProvisionerInvoker("", "eu-west-1").invoke({"reason": "x"})


def test_the_simulators_invoker_runs_the_function_in_process() -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    InProcessInvoker(lambda name, event: calls.append((name, event)), "provisioner").invoke({"reason": "x"})
    assert calls == [("provisioner", {"reason": "x"})]


def test_the_termination_handler_hands_a_drains_pods_to_the_planes_invoker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "test")
    w = world(pod("app"))
    woken = Recorder()
    plane = dataclasses.replace(w.plane, provisioner=woken)
    module = load_handler("termination")
    monkeypatch.setattr(module, "control_plane", lambda: plane)
    assert not hasattr(module, "invoke_provisioner")  # nothing for the simulator to overwrite
    result = module.lambda_handler({}, Context())
    assert woken.payloads == [{"reason": "draining-node", "node": w.record().node_name, "pods": 1}]
    assert result["nodes"] == [w.record().node_name]


@pytest.mark.parametrize("name", ["watcher", "termination", "disruption"])
def test_no_handler_keeps_a_module_attribute_for_the_simulator_to_overwrite(name: str) -> None:
    source = (ROOT / "functions" / name / "handler.py").read_text()
    assert "invoke_provisioner" not in source


# -- disruption's EC2 reads ----------------------------------------------------------------------------


class Launcher:
    def __init__(self, instances: dict[str, Instance]) -> None:
        self.instances = instances
        self.asked: list[list[str]] = []

    def cluster_instances(self, ids: list[str]) -> dict[str, Instance]:
        self.asked.append(sorted(ids))
        return {i: self.instances[i] for i in ids if i in self.instances}


def instance(instance_id: str, subnet: str, groups: frozenset[str]) -> Instance:
    return Instance(
        instance_id,
        "m5.large",
        "us-east-1a",
        "running",
        "on-demand",
        NOW,
        {},
        "",
        None,
        subnet_id=subnet,
        security_group_ids=groups,
    )


def test_drift_by_network_reads_instances_through_the_planes_ec2_adapter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(aws, "client", lambda *a, **k: pytest.fail("disruption makes no client of its own"))
    launcher = Launcher({"i-1": instance("i-1", "subnet-a", frozenset({"sg-1", "sg-2"}))})
    plane = dataclasses.replace(world().plane, launcher=cast(Any, launcher))
    records = [
        NodeClaimRecord(
            name=name,
            nodepool="default",
            nodeclass="default",
            instance_id=iid,
            state=NodeClaimState.INITIALIZED,
            created_at=NOW,
        )
        for name, iid in (("a", "i-1"), ("b", "i-gone"))
    ]
    assert _instance_network(plane, records) == {
        "i-1": InstanceNetwork("subnet-a", frozenset({"sg-1", "sg-2"}))
    }
    assert launcher.asked == [["i-1", "i-gone"]]


@pytest.fixture
def moto_ec2(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield boto3.client("ec2", region_name="us-east-1")


def test_the_ec2_adapter_reports_an_instances_subnet_and_security_groups(moto_ec2: Any) -> None:
    vpc = moto_ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = moto_ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    group = moto_ec2.create_security_group(GroupName="nodes", Description="n", VpcId=vpc)["GroupId"]
    image = moto_ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    tags = [{"Key": f"{wk.TAG_CLUSTER_PREFIX}demo", "Value": "owned"}]
    [raw] = moto_ec2.run_instances(
        ImageId=image,
        MinCount=1,
        MaxCount=1,
        SubnetId=subnet,
        SecurityGroupIds=[group],
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )["Instances"]
    cluster = amifamily.ClusterInfo("demo", "https://api.example", "Q0E=", "10.100.0.0/16", "1.31")
    found = FleetLauncher(moto_ec2, "demo", cluster).cluster_instances([raw["InstanceId"]])
    assert found[raw["InstanceId"]].subnet_id == subnet
    assert found[raw["InstanceId"]].security_group_ids == frozenset({group})


# -- Settings: every environment read ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "field", "expected"),
    [
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:5000", "aws_endpoint_url", "http://127.0.0.1:5000"),
        (
            "AWS_LAMBDA_LOG_STREAM_NAME",
            "2026/03/01/[$LATEST]ab",
            "aws_lambda_log_stream_name",
            "2026/03/01/[$LATEST]ab",
        ),
        ("STATE_TABLE_NAME", "demo-state", "state_table_name", "demo-state"),
        ("KUBERNETES_CONNECT_TIMEOUT_SECONDS", "2", "kubernetes_connect_timeout_seconds", 2.0),
        ("KUBERNETES_READ_TIMEOUT_SECONDS", "0.5", "kubernetes_read_timeout_seconds", 0.5),
    ],
)
def test_each_variable_sets_its_field(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, field: str, expected: object
) -> None:
    monkeypatch.setenv(variable, value)
    assert getattr(Settings(cluster_name="demo"), field) == expected


def test_the_defaults_without_the_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "AWS_ENDPOINT_URL",
        "AWS_LAMBDA_LOG_STREAM_NAME",
        "STATE_TABLE_NAME",
        "KUBERNETES_CONNECT_TIMEOUT_SECONDS",
        "KUBERNETES_READ_TIMEOUT_SECONDS",
    ):
        monkeypatch.delenv(name, raising=False)
    settings = Settings(cluster_name="demo")
    assert settings.aws_endpoint_url is None and settings.aws_lambda_log_stream_name == "local"
    # config.py's default, which the interruption handler now uses too (it had "serverless-karpenter").
    assert settings.state_table_name == ""
    assert settings.kubernetes_timeouts == (5.0, 30.0)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("KUBERNETES_CONNECT_TIMEOUT_SECONDS", "0"),
        ("KUBERNETES_READ_TIMEOUT_SECONDS", "soon"),
        ("TERMINATION_REQUEUE_SECONDS", "never"),
        ("DISRUPTION_POLL_INTERVAL_SECONDS", "-1"),
        ("INTERRUPTION_REBALANCE", "ignore"),
    ],
)
def test_an_invalid_value_is_reported_by_its_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=re.escape(f"{variable}={value!r}")):
        Settings(cluster_name="demo")


def test_a_missing_cluster_name_is_reported_by_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLUSTER_NAME", raising=False)
    with pytest.raises(ValueError, match="CLUSTER_NAME: Field required"):
        Settings()


def test_the_leases_name_their_holder_by_the_log_stream_in_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_LAMBDA_LOG_STREAM_NAME", "stream-1")
    monkeypatch.setattr(aws, "client", lambda *a, **k: object())
    plane = dataclasses.replace(world().plane, settings=Settings(cluster_name="demo"))
    assert provisioner_lease(plane, "req").holder == "stream-1/req"
    assert disruption_lease(plane, "req").holder == "stream-1/req"


def test_the_interruption_handlers_idempotency_table_is_the_settings_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in {
        "CLUSTER_NAME": "demo",
        "STATE_TABLE_NAME": "demo-state",
        "AWS_DEFAULT_REGION": "us-east-1",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_NAMESPACE": "test",
    }.items():
        monkeypatch.setenv(name, value)
    assert load_handler("interruption").persistence.table_name == "demo-state"


def test_only_config_reads_the_environment() -> None:
    readers = re.compile(r"os\.environ|getenv")
    found = [
        str(path.relative_to(ROOT))
        for root in (CORE, ROOT / "functions")
        for path in sorted(root.rglob("*.py"))
        if readers.search(path.read_text()) and path != CORE / "config.py"
    ]
    assert found == []


def test_the_drain_pass_is_traced(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str | None] = []
    real = tracer.provider.in_subsegment

    def in_subsegment(name: str | None = None, **kwargs: Any) -> Any:
        opened.append(name)
        return real(name, **kwargs)

    monkeypatch.setattr(tracer.provider, "in_subsegment", in_subsegment)
    world(pod("app")).terminator().reconcile()
    assert opened == ["## serverless_karpenter.termination.terminator.Terminator.reconcile"]


# -- the runtime's wiring ------------------------------------------------------------------------------


@pytest.fixture
def moto_eks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setattr(aws, "_clients", {})  # clients made outside this mock would reach real AWS
    with mock_aws():
        eks = boto3.client("eks", region_name="us-east-1")
        eks.create_cluster(
            name="demo",
            roleArn="arn:aws:iam::123456789012:role/eks",
            resourcesVpcConfig={"subnetIds": []},
        )
        yield


def test_the_runtime_gives_the_gateway_the_settings_timeouts_and_wakes_through_lambda(moto_eks: None) -> None:
    settings = Settings(
        cluster_name="demo",
        provisioner_function_name="demo-provisioner",
        kubernetes_connect_timeout_seconds=2,
        kubernetes_read_timeout_seconds=7,
    )
    plane = build_control_plane(settings, ManualClock(NOW))
    assert cast(KubernetesGateway, plane.kube).timeouts == (2.0, 7.0)
    assert isinstance(plane.provisioner, LambdaProvisionerInvoker)
    assert plane.provisioner.function_name == "demo-provisioner"


def test_the_runtime_takes_the_invoker_it_is_given(moto_eks: None) -> None:
    woken = Recorder()
    plane = build_control_plane(Settings(cluster_name="demo"), ManualClock(NOW), woken)
    assert plane.provisioner is woken
