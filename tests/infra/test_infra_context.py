"""Context parsing (no synth), the CLI's error for a missing cluster name, and cdk-nag failing the synth."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.config import (
    DEFAULT_NODE_ROLE_NAME,
    ClusterConfig,
    ContextError,
    context_getter,
    read_cluster_configs,
)

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]


def configs(**context: object) -> list[ClusterConfig]:
    return read_cluster_configs(context_getter(context))


def test_missing_cluster_name_is_a_clear_error() -> None:
    with pytest.raises(ContextError, match=r"missing context 'clusterName'.*cdk deploy -c clusterName="):
        configs()
    with pytest.raises(ContextError, match="clusterName"):
        configs(clusterName="  ")


def test_defaults_for_one_cluster() -> None:
    (config,) = configs(clusterName="demo")
    assert config.cluster_name == "demo"
    assert config.stack_name == "ServerlessKarpenter-demo"
    assert config.node_role_name == DEFAULT_NODE_ROLE_NAME.replace("{clusterName}", "demo")
    assert config.interruption_rebalance == "event"
    assert config.log_retention_days == 30
    assert config.memory_overrides_mb == {}
    assert config.alarm_email is None
    assert (config.account, config.region) == (None, None)
    assert config.import_node_role is False
    assert config.node_access_entry is True
    assert config.tracing is False
    assert config.dashboard is True


def test_every_context_key_is_read() -> None:
    (config,) = configs(
        clusterName="prod",
        region="eu-west-1",
        account="123456789012",
        nodeRoleName="nodes-{clusterName}",
        importNodeRole="true",
        nodeAccessEntry="false",
        interruptionRebalance="replace",
        watcherMemoryMb="512",
        terminationMemoryMb=768,
        logRetentionDays="90",
        logLevel="debug",
        alarmEmail="ops@example.com",
        tracing="true",
        dashboard="false",
    )
    assert config.region == "eu-west-1"
    assert config.account == "123456789012"
    assert config.node_role_name == "nodes-prod"
    assert config.import_node_role is True
    assert config.node_access_entry is False
    assert config.interruption_rebalance == "replace"
    assert config.memory_overrides_mb == {"watcher": 512, "termination": 768}
    assert config.log_retention_days == 90
    assert config.log_level == "DEBUG"
    assert config.alarm_email == "ops@example.com"
    assert config.tracing is True
    assert config.dashboard is False


def test_several_clusters_from_a_string_or_a_list() -> None:
    assert [c.cluster_name for c in configs(clusterNames="a, b,,c")] == ["a", "b", "c"]
    assert [c.cluster_name for c in configs(clusterNames=["x", "y"], clusterName="x")] == ["x", "y"]
    assert [c.node_role_name for c in configs(clusterNames="a,b")] == [
        "KarpenterNodeRole-a",
        "KarpenterNodeRole-b",
    ]


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"clusterName": "-bad"}, "not a valid EKS cluster name"),
        ({"clusterName": "x" * 101}, "not a valid EKS cluster name"),
        ({"clusterNames": "a_b,a-b"}, "same stack name"),
        ({"clusterNames": "a,b", "nodeRoleName": "shared"}, r"must contain '\{clusterName\}'"),
        ({"clusterName": "c" * 60}, "not a valid IAM role name"),
        ({"clusterName": "c", "interruptionRebalance": "sometimes"}, "'event' or 'replace'"),
        ({"clusterName": "c", "logRetentionDays": "31"}, "CloudWatch's periods"),
        ({"clusterName": "c", "logRetentionDays": "month"}, "must be an integer"),
        ({"clusterName": "c", "provisionerMemoryMb": "64"}, "between 128 and 10240"),
        ({"clusterName": "c", "alarmEmail": "ops"}, "not an e-mail address"),
        ({"clusterName": "c", "importNodeRole": "maybe"}, "true or false"),
        ({"clusterName": "c", "logLevel": "LOUD"}, "logLevel"),
        ({"clusterNames": 7}, "comma-separated"),
    ],
)
def test_invalid_context_names_the_key(context: dict[str, object], message: str) -> None:
    with pytest.raises(ContextError, match=message):
        configs(**context)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("CDK_CONTEXT_JSON", None)
    env["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "20"
    return env


def test_app_py_without_cluster_name_exits_with_the_message(tmp_path: Path) -> None:
    env = _env()
    env["CDK_OUTDIR"] = str(tmp_path / "cdk.out")
    result = subprocess.run(
        [sys.executable, "app.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert "missing context 'clusterName'" in result.stderr
    assert not list((tmp_path / "cdk.out").glob("*.template.json"))


def test_app_py_rejects_malformed_context_arguments() -> None:
    result = subprocess.run(
        [sys.executable, "app.py", "-c", "clusterName"],
        check=False,
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "key=value" in result.stderr


def test_cdk_nag_fails_the_synth_on_an_unacknowledged_finding(tmp_path: Path) -> None:
    from aws_cdk import aws_sqs as sqs

    from infra.app import build_app

    app, (stack,) = build_app({"clusterName": "nagcheck"}, outdir=str(tmp_path))
    sqs.Queue(stack, "UnencryptedQueue", encryption=sqs.QueueEncryption.UNENCRYPTED)
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    report = json.loads((tmp_path / "validation-report.json").read_text())
    (aws_solutions,) = [r for r in report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    paths = {c["constructPath"] for v in aws_solutions["violations"] for c in v["violatingConstructs"]}
    # Only the new queue fails: everything the stack itself contains passes or is acknowledged.
    assert paths == {"ServerlessKarpenter-nagcheck/UnencryptedQueue/Resource"}
