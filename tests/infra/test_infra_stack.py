"""The synthesized stack against issue 8's acceptance points: interruption rules and queues, the state
table, functions and their triggers, IAM scoping, cluster access, alarms, and two clusters side by side."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from aws_cdk.assertions import Match, Template
from serverless_karpenter import state_schema
from serverless_karpenter.config import Settings
from serverless_karpenter.observability import NAMESPACE, SERVICE, MetricName
from serverless_karpenter_stack.policies import PRE_EXISTING_LAUNCH_RESOURCE_TYPES

from infra.access import kubernetes_group
from infra.iam import NODE_MANAGED_POLICIES
from tests.infra.conftest import Synthesized
from tests.infra.helpers import (
    ALARM_EMAIL,
    CLUSTERS,
    PROVISIONER_MEMORY_MB,
    as_list,
    identity_statements_of_role,
    render,
    resources_of_type,
    role_of_function,
    statements,
)

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]

# Written out here, not imported from infra, so that a changed pattern fails this test.
EXPECTED_INTERRUPTION_PATTERNS = [
    {"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]},
    {"source": ["aws.ec2"], "detail-type": ["EC2 Instance Rebalance Recommendation"]},
    {"source": ["aws.ec2"], "detail-type": ["EC2 Instance State-change Notification"]},
    {
        "source": ["aws.health"],
        "detail-type": ["AWS Health Event"],
        "detail": {"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]},
    },
    {"source": ["aws.ec2"], "detail-type": ["EC2 Capacity Reservation Instance Interruption Warning"]},
]
EXPECTED_FUNCTIONS = {
    # name: (memory MB, timeout s, reserved concurrency, invoked by the one-minute schedule)
    "watcher": (128, 90, 1, True),  # sized by measurement (infra/functions.py, benchmarks idle-cost)
    "provisioner": (PROVISIONER_MEMORY_MB, 300, 1, True),  # overridden by the test context
    "interruption": (512, 20, 5, False),  # reserved for its event source (test_infra_queues.py)
    "disruption": (1024, 300, 1, True),
    # Its schedule sends a message to its queue instead (test_infra_queues.py).
    "termination": (512, 300, 2, False),
}
TAG_SCOPED_ACTIONS = {
    "ec2:RunInstances",
    "ec2:CreateFleet",
    "ec2:CreateLaunchTemplate",
    "ec2:CreateTags",
    "ec2:TerminateInstances",
    "ec2:DeleteLaunchTemplate",
}


def functions_by_name(template: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    found = {}
    for logical_id, resource in resources_of_type(template, "AWS::Lambda::Function").items():
        for name in EXPECTED_FUNCTIONS:
            if logical_id.startswith(f"Functions{name.capitalize()}"):
                found[name] = (logical_id, resource)
    assert set(found) == set(EXPECTED_FUNCTIONS)
    return found


def staged_asset(synthesized: Synthesized, code: dict[str, Any]) -> Path:
    """The directory CDK staged for a Lambda code or layer asset (the zip it uploads)."""
    key = code["S3Key"]
    assert isinstance(key, str) and key.endswith(".zip")
    return synthesized.outdir / f"asset.{key.removesuffix('.zip')}"


def queue_by_prefix(template: dict[str, Any], prefix: str) -> tuple[str, dict[str, Any]]:
    matches = [
        (k, v) for k, v in resources_of_type(template, "AWS::SQS::Queue").items() if k.startswith(prefix)
    ]
    assert len(matches) == 1, (prefix, [k for k, _ in matches])
    return matches[0]


# -- interruption -------------------------------------------------------------------------------------


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_five_interruption_rules_with_exact_patterns_target_the_queue(
    synthesized: Synthesized, cluster: str
) -> None:
    template = synthesized.templates[cluster]
    queue_id, _ = queue_by_prefix(template, "InterruptionQueue")
    rules = [
        r["Properties"]
        for r in resources_of_type(template, "AWS::Events::Rule").values()
        if "EventPattern" in r["Properties"]
    ]
    patterns = sorted(json.dumps(r["EventPattern"], sort_keys=True) for r in rules)
    assert patterns == sorted(json.dumps(p, sort_keys=True) for p in EXPECTED_INTERRUPTION_PATTERNS)
    for rule in rules:
        assert rule["State"] == "ENABLED"
        assert [t["Arn"] for t in rule["Targets"]] == [{"Fn::GetAtt": [queue_id, "Arn"]}]


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_interruption_queue_is_encrypted_short_lived_and_has_a_dlq_reachable_before_expiry(
    synthesized: Synthesized, cluster: str
) -> None:
    template = synthesized.templates[cluster]
    _, queue = queue_by_prefix(template, "InterruptionQueue")
    dlq_id, dlq = queue_by_prefix(template, "InterruptionDeadLetterQueue")
    props = queue["Properties"]
    assert props["SqsManagedSseEnabled"] is True
    assert dlq["Properties"]["SqsManagedSseEnabled"] is True
    # Karpenter's 300 s cannot hold 5 receives of 120 s: see test_infra_queues.py.
    assert props["MessageRetentionPeriod"] == 900
    redrive = props["RedrivePolicy"]
    assert redrive["deadLetterTargetArn"] == {"Fn::GetAtt": [dlq_id, "Arn"]}
    assert redrive["maxReceiveCount"] == 5
    # A failed message is redelivered and then dead-lettered before the retention drops it.
    assert props["VisibilityTimeout"] * redrive["maxReceiveCount"] < props["MessageRetentionPeriod"]
    assert dlq["Properties"]["MessageRetentionPeriod"] > props["MessageRetentionPeriod"]


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_interruption_queue_policy_allows_only_eventbridge_and_sqs_and_denies_plain_http(
    synthesized: Synthesized, cluster: str
) -> None:
    template = synthesized.templates[cluster]
    queue_id, _ = queue_by_prefix(template, "InterruptionQueue")
    policies = [
        p["Properties"]["PolicyDocument"]["Statement"]
        for p in resources_of_type(template, "AWS::SQS::QueuePolicy").values()
        if p["Properties"]["Queues"] == [{"Ref": queue_id}]
    ]
    assert len(policies) == 1
    allows = [s for s in policies[0] if s["Effect"] == "Allow"]
    assert {p for s in allows for p in as_list(s["Principal"]["Service"])} == {
        "events.amazonaws.com",
        "sqs.amazonaws.com",
    }
    assert all(s["Action"] == "sqs:SendMessage" for s in allows)
    events_statement = next(s for s in allows if s["Principal"]["Service"] == "events.amazonaws.com")
    rule_ids = {
        k
        for k, r in resources_of_type(template, "AWS::Events::Rule").items()
        if "EventPattern" in r["Properties"]
    }
    assert {
        a["Fn::GetAtt"][0] for a in events_statement["Condition"]["ArnEquals"]["aws:SourceArn"]
    } == rule_ids
    assert {
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": "sqs:*",
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        "Resource": {"Fn::GetAtt": [queue_id, "Arn"]},
    } in policies[0]


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_every_queue_is_encrypted_tls_only_and_dead_lettered(synthesized: Synthesized, cluster: str) -> None:
    template = synthesized.templates[cluster]
    queues = resources_of_type(template, "AWS::SQS::Queue")
    dead_letter_targets = {
        q["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
        for q in queues.values()
        if "RedrivePolicy" in q["Properties"]
    }
    assert len(queues) == 4  # interruption, termination work, and their DLQs
    tls_denied = {
        q["Ref"]
        for p in resources_of_type(template, "AWS::SQS::QueuePolicy").values()
        if any(
            s["Effect"] == "Deny" and s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
            for s in p["Properties"]["PolicyDocument"]["Statement"]
        )
        for q in p["Properties"]["Queues"]
    }
    for logical_id, queue in queues.items():
        assert queue["Properties"]["SqsManagedSseEnabled"] is True, logical_id
        assert logical_id in tls_denied, logical_id
        assert logical_id in dead_letter_targets or "RedrivePolicy" in queue["Properties"], logical_id


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_sqs_visibility_is_at_least_six_times_the_consumer_timeout(
    synthesized: Synthesized, cluster: str
) -> None:
    template = synthesized.templates[cluster]
    functions = {
        logical_id: res for logical_id, res in resources_of_type(template, "AWS::Lambda::Function").items()
    }
    queues = resources_of_type(template, "AWS::SQS::Queue")
    mappings = resources_of_type(template, "AWS::Lambda::EventSourceMapping")
    assert len(mappings) == 2
    for mapping in mappings.values():
        props = mapping["Properties"]
        queue = queues[props["EventSourceArn"]["Fn::GetAtt"][0]]
        function = functions[props["FunctionName"]["Ref"]]
        assert queue["Properties"]["VisibilityTimeout"] >= 6 * function["Properties"]["Timeout"]
        assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert props["BatchSize"] == 10


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_only_the_interruption_function_may_change_visibility_on_its_queue(
    synthesized: Synthesized, cluster: str
) -> None:
    # The handler shortens the visibility of the messages that failed, so they are retried within seconds.
    template = synthesized.templates[cluster]
    queue_id, _ = queue_by_prefix(template, "InterruptionQueue")
    for name, (logical_id, _) in functions_by_name(template).items():
        role = role_of_function(template, logical_id)
        resources = {
            render(resource)
            for statement in identity_statements_of_role(template, role)
            if "sqs:ChangeMessageVisibility" in as_list(statement["Action"])
            for resource in as_list(statement["Resource"])
        }
        if name == "interruption":
            assert resources == {f"<{queue_id}.Arn>"}
        else:
            assert f"<{queue_id}.Arn>" not in resources, name


# -- state --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_state_table_has_pitr_ttl_encryption_and_the_gsis_the_code_queries(
    synthesized: Synthesized, cluster: str
) -> None:
    template = Template.from_json(synthesized.templates[cluster])
    template.resource_count_is("AWS::DynamoDB::Table", 1)
    template.has_resource(
        "AWS::DynamoDB::Table",
        {
            "DeletionPolicy": "Retain",
            "Properties": Match.object_like(
                {
                    "BillingMode": "PAY_PER_REQUEST",
                    "KeySchema": [
                        {"AttributeName": state_schema.PARTITION_KEY, "KeyType": "HASH"},
                        {"AttributeName": state_schema.SORT_KEY, "KeyType": "RANGE"},
                    ],
                    "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
                    "TimeToLiveSpecification": {"AttributeName": state_schema.TTL_ATTRIBUTE, "Enabled": True},
                    "SSESpecification": {"SSEEnabled": True},
                }
            ),
        },
    )
    table = next(iter(resources_of_type(synthesized.templates[cluster], "AWS::DynamoDB::Table").values()))
    indexes = {
        index["IndexName"]: [k["AttributeName"] for k in index["KeySchema"]]
        for index in table["Properties"]["GlobalSecondaryIndexes"]
    }
    assert indexes == {name: [attribute] for name, attribute in state_schema.GLOBAL_SECONDARY_INDEXES.items()}
    # The same definition the local simulator creates.
    local = state_schema.table_definition("t")
    assert sorted(table["Properties"]["AttributeDefinitions"], key=lambda a: a["AttributeName"]) == sorted(
        local["AttributeDefinitions"],
        key=lambda a: a["AttributeName"],
    )


# -- functions ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_functions_runtime_architecture_sizes_tracing_logs_and_layers(
    synthesized: Synthesized, cluster: str
) -> None:
    template = synthesized.templates[cluster]
    log_groups = resources_of_type(template, "AWS::Logs::LogGroup")
    layers = resources_of_type(template, "AWS::Lambda::LayerVersion")
    assert len(layers) == 2
    for layer in layers.values():
        assert layer["Properties"]["CompatibleRuntimes"] == ["python3.14"]
        assert layer["Properties"]["CompatibleArchitectures"] == ["arm64"]
    for name, (logical_id, function) in functions_by_name(template).items():
        memory, timeout, concurrency, _ = EXPECTED_FUNCTIONS[name]
        props = function["Properties"]
        assert props["Runtime"] == "python3.14"
        assert props["Architectures"] == ["arm64"]
        assert props["Handler"] == "handler.lambda_handler"
        assert props["MemorySize"] == memory, name
        assert props["Timeout"] == timeout, name
        assert props.get("ReservedConcurrentExecutions") == concurrency, name
        # X-Ray only with -c tracing=true: Lambda would trace every one of ~175,000 invocations a month.
        assert "TracingConfig" not in props, name
        assert props["Environment"]["Variables"]["POWERTOOLS_TRACE_DISABLED"] == "true"
        assert sorted(layer["Ref"] for layer in props["Layers"]) == sorted(layers)
        log_group = log_groups[props["LoggingConfig"]["LogGroup"]["Ref"]]
        assert log_group["Properties"]["RetentionInDays"] == 30
        code = staged_asset(synthesized, props["Code"])
        source = REPO / "functions" / name
        staged_files = sorted(str(p.relative_to(code)) for p in code.rglob("*") if p.is_file())
        source_files = sorted(
            str(p.relative_to(source))
            for p in source.rglob("*")
            if p.is_file() and p.suffix not in (".pyc", ".pyo")
        )
        assert staged_files == source_files, logical_id
        assert (code / "handler.py").read_text() == (source / "handler.py").read_text()


def test_layers_ship_the_core_package_and_the_trimmed_dependencies(synthesized: Synthesized) -> None:
    layers = resources_of_type(synthesized.templates[CLUSTERS[0]], "AWS::Lambda::LayerVersion")
    contents = {
        logical_id: {
            p.name for p in (staged_asset(synthesized, layer["Properties"]["Content"]) / "python").iterdir()
        }
        for logical_id, layer in layers.items()
    }
    core = next(names for logical_id, names in contents.items() if "Core" in logical_id)
    dependencies = next(names for logical_id, names in contents.items() if "Dependencies" in logical_id)
    assert core == {"serverless_karpenter"}
    assert {"pydantic", "pydantic_core", "kubernetes", "aws_lambda_powertools", "yaml"} <= dependencies
    assert not {"boto3", "botocore", "__pycache__", ".build-stamp"} & dependencies
    for layer_dir in (staged_asset(synthesized, layer["Properties"]["Content"]) for layer in layers.values()):
        assert not list(layer_dir.rglob("__pycache__"))


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_function_environment_names_are_settings_fields(synthesized: Synthesized, cluster: str) -> None:
    settings_env = {field.upper() for field in Settings.model_fields}
    # Powertools' own switches; POWERTOOLS_TRACE_DISABLED unless -c tracing=true.
    extra = {
        "POWERTOOLS_SERVICE_NAME",
        "POWERTOOLS_METRICS_NAMESPACE",
        "POWERTOOLS_TRACE_DISABLED",
        "LOG_LEVEL",
    }
    for name, (_, function) in functions_by_name(synthesized.templates[cluster]).items():
        env = function["Properties"]["Environment"]["Variables"]
        assert set(env) <= settings_env | extra, set(env) - settings_env - extra
        assert env["CLUSTER_NAME"] == cluster
        # Powertools adds the `service` dimension to single metrics only from this variable.
        assert env["POWERTOOLS_SERVICE_NAME"] == SERVICE
        assert env["POWERTOOLS_METRICS_NAMESPACE"] == NAMESPACE
        assert env["INTERRUPTION_REBALANCE"] == "event"
        for key in (
            "STATE_TABLE_NAME",
            "INTERRUPTION_QUEUE_URL",
            "INTERRUPTION_DLQ_URL",
            "TERMINATION_QUEUE_URL",
            "NODE_ROLE_NAME",
        ):
            assert key in env, (name, key)
        # The watcher wakes the provisioner per batch; termination wakes it when a drain starts.
        assert ("PROVISIONER_FUNCTION_NAME" in env) == (name in ("watcher", "termination", "disruption"))


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_schedules_run_every_minute_without_retries(synthesized: Synthesized, cluster: str) -> None:
    template = synthesized.templates[cluster]
    functions = functions_by_name(template)
    function_ids = {logical_id for logical_id, _ in functions.values()}
    scheduled = {
        target["Arn"]["Fn::GetAtt"][0]: target
        for rule in resources_of_type(template, "AWS::Events::Rule").values()
        if rule["Properties"].get("ScheduleExpression") == "rate(1 minute)"
        for target in rule["Properties"]["Targets"]
        if target["Arn"]["Fn::GetAtt"][0] in function_ids  # the termination queue's is in test_infra_queues
    }
    expected = {functions[name][0] for name, spec in EXPECTED_FUNCTIONS.items() if spec[3]}
    assert set(scheduled) == expected
    for target in scheduled.values():
        assert target["RetryPolicy"] == {"MaximumEventAgeInSeconds": 60, "MaximumRetryAttempts": 0}
    invoke_configs = resources_of_type(template, "AWS::Lambda::EventInvokeConfig")
    assert {c["Properties"]["FunctionName"]["Ref"] for c in invoke_configs.values()} == expected


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_termination_function_may_feed_its_own_queue(synthesized: Synthesized, cluster: str) -> None:
    functions = functions_by_name(synthesized.templates[cluster])
    for name, (_, function) in functions.items():
        expected = "Allow" if name == "termination" else "Terminate"
        assert function["Properties"]["RecursiveLoop"] == expected, name


def test_unzipped_function_and_layers_size_is_under_lambda_limit(synthesized: Synthesized) -> None:
    stack = synthesized.stacks[CLUSTERS[0]]
    assert set(stack.unzipped_sizes) == set(EXPECTED_FUNCTIONS)
    assert all(0 < size < 250 * 2**20 for size in stack.unzipped_sizes.values())


# -- IAM -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_launch_tag_and_terminate_statements_carry_this_clusters_tag_condition(
    synthesized: Synthesized, cluster: str
) -> None:
    template = synthesized.templates[cluster]
    cluster_tag = f"kubernetes.io/cluster/{cluster}"
    checked = 0
    for _, statement in statements(template, "identity"):
        actions = set(as_list(statement["Action"]))
        if not actions & TAG_SCOPED_ACTIONS:
            continue
        checked += 1
        resources = [render(r) for r in as_list(statement["Resource"])]
        equals = statement.get("Condition", {}).get("StringEquals", {})
        tag_condition = {
            key: value
            for key, value in equals.items()
            if key in (f"aws:RequestTag/{cluster_tag}", f"aws:ResourceTag/{cluster_tag}")
        }
        if tag_condition:
            assert set(tag_condition.values()) == {"owned"}, statement
            continue
        # The one exception, as in Karpenter's policy: RunInstances/CreateFleet on resources a launch
        # uses but does not create. EC2 evaluates request tags only on created resources.
        assert statement["Sid"] == "AllowLaunchWithExistingImagesSubnetsAndSecurityGroups", statement
        assert actions == {"ec2:RunInstances", "ec2:CreateFleet"}
        resource_types = {r.rsplit(":", 1)[1].split("/")[0] for r in resources}
        assert resource_types == set(PRE_EXISTING_LAUNCH_RESOURCE_TYPES), resources
    assert checked >= 8


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_pass_role_only_for_the_node_role_and_only_to_ec2(synthesized: Synthesized, cluster: str) -> None:
    template = synthesized.templates[cluster]
    node_role = next(k for k in resources_of_type(template, "AWS::IAM::Role") if k.startswith("NodeRole"))
    pass_role = [s for _, s in statements(template, "identity") if "iam:PassRole" in as_list(s["Action"])]
    assert len(pass_role) == 1
    statement = pass_role[0]
    assert as_list(statement["Action"]) == ["iam:PassRole"]
    assert statement["Resource"] == {"Fn::GetAtt": [node_role, "Arn"]}
    assert set(as_list(statement["Condition"]["StringEquals"]["iam:PassedToService"])) <= {
        "ec2.amazonaws.com",
        "ec2.amazonaws.com.cn",
    }


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_no_statement_grants_every_action(synthesized: Synthesized, cluster: str) -> None:
    template = synthesized.templates[cluster]
    for logical_id, statement in statements(template):
        assert "*" not in as_list(statement.get("Action", [])), (logical_id, statement)
        assert "NotAction" not in statement, (logical_id, statement)
    for logical_id, statement in statements(template, "identity"):
        wildcard_services = [a for a in as_list(statement["Action"]) if a.endswith(":*")]
        assert not wildcard_services, (logical_id, statement)


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_wildcard_resources_only_where_aws_offers_no_resource_level_permission(
    synthesized: Synthesized, cluster: str
) -> None:
    unscopable_prefixes = ("ec2:Describe", "xray:Put", "pricing:GetProducts")
    for logical_id, statement in statements(synthesized.templates[cluster], "identity"):
        if as_list(statement["Resource"]) == ["*"]:
            assert all(a.startswith(unscopable_prefixes) for a in as_list(statement["Action"])), (
                logical_id,
                statement,
            )
            if any(a.startswith("ec2:Describe") for a in as_list(statement["Action"])):
                assert statement["Condition"]["StringEquals"]["aws:RequestedRegion"] == {"Ref": "AWS::Region"}


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_data_queue_cluster_and_parameter_access_is_scoped(synthesized: Synthesized, cluster: str) -> None:
    template = synthesized.templates[cluster]
    table_id = next(iter(resources_of_type(template, "AWS::DynamoDB::Table")))
    queue_ids = set(resources_of_type(template, "AWS::SQS::Queue"))
    for logical_id, statement in statements(template, "identity"):
        actions = as_list(statement["Action"])
        resources = [render(r) for r in as_list(statement["Resource"])]
        if any(a.startswith("dynamodb:") for a in actions):
            allowed = {f"<{table_id}.Arn>"} | {
                f"<{table_id}.Arn>/index/{i}" for i in state_schema.GLOBAL_SECONDARY_INDEXES
            }
            assert set(resources) <= allowed, (logical_id, resources)
        if any(a.startswith("sqs:") for a in actions):
            assert {r.split(".")[0].strip("<") for r in resources} <= queue_ids, (logical_id, resources)
        if "eks:DescribeCluster" in actions:
            assert resources == [f"arn:<AWS::Partition>:eks:<AWS::Region>:<AWS::AccountId>:cluster/{cluster}"]
        if "ssm:GetParameter" in actions:
            assert resources == ["arn:<AWS::Partition>:ssm:<AWS::Region>::parameter/aws/service/*"]


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_only_watcher_and_termination_may_invoke_and_only_the_provisioner(
    synthesized: Synthesized, cluster: str
) -> None:
    template = synthesized.templates[cluster]
    functions = functions_by_name(template)
    for name, (logical_id, _) in functions.items():
        role = role_of_function(template, logical_id)
        invokes = [
            s
            for s in identity_statements_of_role(template, role)
            if "lambda:InvokeFunction" in as_list(s["Action"])
        ]
        if name in ("watcher", "termination", "disruption"):
            assert [s["Resource"] for s in invokes] == [{"Fn::GetAtt": [functions["provisioner"][0], "Arn"]}]
        else:
            assert invokes == [], name


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_each_function_has_its_own_role_and_only_the_provisioner_launches(
    synthesized: Synthesized, cluster: str
) -> None:
    template = synthesized.templates[cluster]
    functions = functions_by_name(template)
    roles = {name: role_of_function(template, logical_id) for name, (logical_id, _) in functions.items()}
    assert len(set(roles.values())) == len(roles)
    for name, role in roles.items():
        actions = {a for s in identity_statements_of_role(template, role) for a in as_list(s["Action"])}
        assert ("ec2:CreateFleet" in actions) == (name == "provisioner"), name
        assert ("ec2:TerminateInstances" in actions) == (name in ("provisioner", "termination")), name
        assert ("ec2:DeleteLaunchTemplate" in actions) == (name == "provisioner"), name
        assert ("dynamodb:PutItem" in actions) == (name != "watcher"), name
        assert ("dynamodb:GetItem" in actions) == (name != "watcher"), name


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_node_role_has_the_four_node_policies_and_an_instance_profile(
    synthesized: Synthesized, cluster: str
) -> None:
    # Karpenter's node role pulls images with PullOnly, not the wider ReadOnly (which lists and describes).
    assert NODE_MANAGED_POLICIES == (
        "AmazonEKSWorkerNodePolicy",
        "AmazonEKS_CNI_Policy",
        "AmazonEC2ContainerRegistryPullOnly",
        "AmazonSSMManagedInstanceCore",
    )
    template = Template.from_json(synthesized.templates[cluster])
    template.has_resource_properties(
        "AWS::IAM::Role",
        {
            "RoleName": f"KarpenterNodeRole-{cluster}",
            "AssumeRolePolicyDocument": {
                "Statement": [
                    {
                        "Action": "sts:AssumeRole",
                        "Effect": "Allow",
                        "Principal": {"Service": "ec2.amazonaws.com"},
                    }
                ],
                "Version": "2012-10-17",
            },
            "ManagedPolicyArns": [
                {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, f":iam::aws:policy/{name}"]]}
                for name in NODE_MANAGED_POLICIES
            ],
        },
    )
    template.resource_count_is("AWS::IAM::InstanceProfile", 1)


# -- cluster access -------------------------------------------------------------------------------------


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_access_entries_for_every_function_role_and_the_node_role(
    synthesized: Synthesized, cluster: str
) -> None:
    template = synthesized.templates[cluster]
    rbac = list(yaml.safe_load_all((REPO / "deploy" / "rbac.yaml").read_text()))
    bound = {
        subject["name"]
        for doc in rbac
        if doc and doc["kind"] == "ClusterRoleBinding"
        for subject in doc["subjects"]
    }
    entries = resources_of_type(template, "AWS::EKS::AccessEntry")
    standard = {
        e["Properties"]["PrincipalArn"]["Fn::GetAtt"][0]: e["Properties"]
        for e in entries.values()
        if e["Properties"]["Type"] == "STANDARD"
    }
    functions = functions_by_name(template)
    assert set(standard) == {role_of_function(template, logical_id) for logical_id, _ in functions.values()}
    # Each function's role in a group of its own, which deploy/rbac.yaml binds to its own ClusterRole.
    for name, (logical_id, _) in functions.items():
        entry = standard[role_of_function(template, logical_id)]
        assert entry["ClusterName"] == cluster
        assert entry["KubernetesGroups"] == [kubernetes_group(name)]
        assert kubernetes_group(name) in bound
    assert len({tuple(e["KubernetesGroups"]) for e in standard.values()}) == len(functions)
    nodes = [e["Properties"] for e in entries.values() if e["Properties"]["Type"] == "EC2_LINUX"]
    assert len(nodes) == 1
    assert nodes[0]["PrincipalArn"]["Fn::GetAtt"][0].startswith("NodeRole")


# -- alarms ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_alarms_for_dlq_depth_errors_stalled_provisioner_and_launch_error_rate(
    synthesized: Synthesized, cluster: str
) -> None:
    template = synthesized.templates[cluster]
    alarms = [a["Properties"] for a in resources_of_type(template, "AWS::CloudWatch::Alarm").values()]
    topic = next(iter(resources_of_type(template, "AWS::SNS::Topic")))
    for alarm in alarms:
        assert alarm["AlarmActions"] == [{"Ref": topic}]

    dlq = [a for a in alarms if a.get("MetricName") == "ApproximateNumberOfMessagesVisible"]
    assert len(dlq) == 2
    assert all(a["Threshold"] == 0 and a["ComparisonOperator"] == "GreaterThanThreshold" for a in dlq)

    errors = [a for a in alarms if a.get("MetricName") == "Errors" and a.get("Namespace") == "AWS/Lambda"]
    assert len(errors) == len(EXPECTED_FUNCTIONS)

    # The stalled alarm reads Lambda's free Invocations metric of this cluster's provisioner.
    every_alarm = [a["Properties"] for a in resources_of_type(template, "AWS::CloudWatch::Alarm").values()]
    stalled = [a for a in every_alarm if a.get("MetricName") == "Invocations"]
    assert len(stalled) == 1
    assert stalled[0]["Namespace"] == "AWS/Lambda"
    [dimension] = stalled[0]["Dimensions"]
    assert dimension["Name"] == "FunctionName"
    assert "Provisioner" in dimension["Value"]["Ref"]
    assert stalled[0]["Period"] == 300
    assert stalled[0]["TreatMissingData"] == "breaching"
    assert stalled[0]["ComparisonOperator"] == "LessThanThreshold"
    assert stalled[0]["AlarmActions"] == [{"Ref": topic}]

    rate = [a for a in alarms if "Metrics" in a]
    assert len(rate) == 1
    used = {m["MetricStat"]["Metric"]["MetricName"] for m in rate[0]["Metrics"] if "MetricStat" in m}
    assert used == {MetricName.LAUNCH_ERRORS, MetricName.NODECLAIMS_LAUNCHED}


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_alarm_topic_is_encrypted_tls_only_and_mails_the_context_address(
    synthesized: Synthesized, cluster: str
) -> None:
    template = Template.from_json(synthesized.templates[cluster])
    template.has_resource_properties("AWS::SNS::Topic", {"KmsMasterKeyId": Match.any_value()})
    template.has_resource_properties("AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": ALARM_EMAIL})
    template.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})
    template.has_resource_properties(
        "AWS::SNS::TopicPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
                        )
                    ]
                )
            }
        },
    )


# -- several clusters ------------------------------------------------------------------------------------

NAMED_PROPERTIES = {
    "AWS::IAM::Role": "RoleName",
    "AWS::CloudWatch::Dashboard": "DashboardName",
    "AWS::CloudWatch::Alarm": "AlarmName",
    "AWS::SQS::Queue": "QueueName",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::Lambda::Function": "FunctionName",
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::Events::Rule": "Name",
}


def test_two_clusters_from_one_app_have_no_name_clashes(synthesized: Synthesized) -> None:
    stack_names = {stack.stack_name for stack in synthesized.stacks.values()}
    assert stack_names == {"ServerlessKarpenter-demo", "ServerlessKarpenter-staging-2"}
    seen: dict[tuple[str, str], str] = {}
    for cluster, template in synthesized.templates.items():
        for resource_type, prop in NAMED_PROPERTIES.items():
            for logical_id, resource in resources_of_type(template, resource_type).items():
                name = resource["Properties"].get(prop)
                if name is None:
                    continue  # CloudFormation generates a unique name
                key = (resource_type, json.dumps(name))
                assert key not in seen, f"{resource_type} {name} in {cluster}/{logical_id} and {seen[key]}"
                seen[key] = f"{cluster}/{logical_id}"
    # Explicit names exist (node role, dashboard, alarms) and carry the cluster name.
    assert sum(1 for resource_type, _ in seen if resource_type == "AWS::CloudWatch::Dashboard") == len(
        CLUSTERS
    )


def test_outputs_name_what_an_operator_needs(synthesized: Synthesized) -> None:
    outputs = synthesized.templates[CLUSTERS[0]]["Outputs"]
    for key in (
        "NodeRoleName",
        "NodeInstanceProfileName",
        "StateTableName",
        "InterruptionQueueUrl",
        "DashboardName",
    ):
        assert key in outputs
