"""The simulated AWS account: moto in server mode on 127.0.0.1, seeded like a real cluster's account.

Our code reaches it through ``AWS_ENDPOINT_URL`` exactly as it reaches AWS, so nothing in the control
plane knows it is simulated. moto's SQS keeps its time on the simulation's clock (see :func:`sqs_on`).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import socket
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.credentials import ReadOnlyCredentials
from moto.core import utils as moto_utils
from moto.server import ThreadedMotoServer
from serverless_karpenter import amifamily, state_schema
from serverless_karpenter.adapters import aws
from serverless_karpenter.clock import Clock
from serverless_karpenter.deployment import (
    INTERRUPTION_MAX_RECEIVE_COUNT,
    INTERRUPTION_RETENTION_SECONDS,
    INTERRUPTION_VISIBILITY_TIMEOUT_SECONDS,
)
from serverless_karpenter.interruption.rules import RULE_PATTERNS

# Installs the EKS access-entry API on moto (which lacks it), launch template security groups on its
# fleets, and its faster tag and DynamoDB item paths, before any server starts.
from serverless_karpenter_sim import (
    eks_access,
    fleet_network,  # noqa: F401 (installed on import)
    moto_speed,  # noqa: F401 (installed on import)
)
from serverless_karpenter_sim.iam_enforcement import ENFORCEMENT

REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
KUBERNETES_VERSION = "1.31"
ACCOUNT = "123456789012"
# The account's operator, an IAM user, is its administrator: the simulator's own components (and tests
# acting on the account) sign with the operator's key and are allowed everything; each simulated Lambda
# signs with its role's (issue 17). moto's placeholder key only bootstraps the operator.
OPERATOR_USER = "operator"
BOOTSTRAP_ACCESS_KEY_ID = "testing"
BOOTSTRAP_SECRET_ACCESS_KEY = "testing"
# The names through which moto's SQS models read the time (imported from moto.core.utils).
SQS_TIME_READERS = ("unix_time", "unix_time_millis")
_SQS_TIME_STEP = 1e-5  # seconds between two readings of the clock by moto's SQS, at the least


@contextlib.contextmanager
def sqs_on(clock: Clock) -> Iterator[None]:
    """moto's SQS reads the time from ``clock`` while inside.

    SQS is all timing: visibility timeouts, a consumer's ChangeMessageVisibility, delays, retention, and
    the receive count that sends a message to the DLQ. The simulation runs on virtual time (hours in
    minutes), moto on the wall clock; rather than keep a second, virtual-time copy of SQS's bookkeeping in
    the simulator (which would have to spot, and re-time, every visibility change a handler makes), moto's
    own models are put on the simulation's clock. A failed message then stays hidden for the queue's
    visibility timeout, or for whatever the handler asked for, in virtual seconds, exactly as SQS and the
    Lambda event source would treat it. Only SQS is rebound: moto's other services keep the wall clock.

    The virtual clock stands still while a tick's work is done, but SQS needs time to pass between two
    calls: moto shows a message again only once the time is past its visibility, so a visibility set to
    0 would otherwise hide the message until the next tick. Each reading is therefore at least a few
    microseconds after the one before; that never accumulates, as readings follow the clock again as soon
    as it moves on.
    """
    from moto.sqs import models

    for name in SQS_TIME_READERS:
        if not callable(vars(models).get(name)):
            # moto changed how its SQS reads the time: fail rather than silently run SQS on the wall clock.
            raise RuntimeError(f"moto.sqs.models no longer reads the time as {name}(); update {__name__}")
    lock = threading.Lock()
    last = 0.0

    def unix_time(dt: datetime.datetime | None = None) -> float:
        nonlocal last
        if dt is not None:
            return moto_utils.unix_time(dt)
        with lock:  # moto's server answers on several threads
            last = max(clock.now().timestamp(), last + _SQS_TIME_STEP)
            return last

    def unix_time_millis(dt: datetime.datetime | None = None) -> float:
        return unix_time(dt) * 1000.0

    vars(models).update(unix_time=unix_time, unix_time_millis=unix_time_millis)
    try:
        yield
    finally:
        vars(models).update({name: getattr(moto_utils, name) for name in SQS_TIME_READERS})


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class CloudResources:
    cluster_name: str
    endpoint_url: str
    vpc_id: str = ""
    subnet_ids: list[str] = field(default_factory=list)
    security_group_id: str = ""
    table_name: str = ""
    queue_url: str = ""
    queue_arn: str = ""
    # Seconds a received message stays hidden unless its consumer changes that (virtual time, as all SQS's).
    queue_visibility_timeout: int = 0
    dlq_url: str = ""
    node_role_name: str = ""
    amis: dict[str, str] = field(default_factory=dict)


class SimulatedCloud:
    def __init__(self, cluster_name: str, clock: Clock, region: str = REGION) -> None:
        self.cluster_name = cluster_name
        self.clock = clock
        self.region = region
        self._server: ThreadedMotoServer | None = None
        self.resources: CloudResources | None = None
        # moto's placeholder key until start() makes the operator (the account's administrator).
        self.admin = ReadOnlyCredentials(BOOTSTRAP_ACCESS_KEY_ID, BOOTSTRAP_SECRET_ACCESS_KEY, None)
        self._admin_session: tuple[str, boto3.session.Session] | None = None
        self._saved_environment: dict[str, str | None] = {}
        self._sqs_clock = contextlib.ExitStack()

    def start(self) -> CloudResources:
        # werkzeug logs every request to stderr; the simulator has its own progress display.
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._sqs_clock.enter_context(sqs_on(self.clock))
        port = free_port()
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self._server.start()
        url = f"http://127.0.0.1:{port}"
        # moto's backends live in this process, shared by every server in it: start from an empty account,
        # whose operator does not exist yet to be enforced (a simulation left unstopped in this process, a
        # test that failed before its stop, must not leave its enforcement on the next one's bootstrap).
        ENFORCEMENT.disable()
        self._reset(url)
        # The same variables a Lambda would see, pointed at moto; no real credentials are ever used.
        self.set_environment(
            {
                "AWS_ENDPOINT_URL": url,
                "AWS_ACCESS_KEY_ID": BOOTSTRAP_ACCESS_KEY_ID,
                "AWS_SECRET_ACCESS_KEY": BOOTSTRAP_SECRET_ACCESS_KEY,
                "AWS_SESSION_TOKEN": None,
                "AWS_DEFAULT_REGION": self.region,
                "AWS_REGION": self.region,
                "AWS_PROFILE": None,
            }
        )
        aws.reset_sessions()
        # The account's operator, an IAM user, creates everything, the cluster included, so that EKS makes
        # them its admin (bootstrapClusterCreatorAdminPermissions), as on a cluster made from a laptop.
        iam = self.client("iam")  # as moto's placeholder key, before enforcement
        iam.create_user(UserName=OPERATOR_USER)
        key = iam.create_access_key(UserName=OPERATOR_USER)["AccessKey"]
        self.admin = ReadOnlyCredentials(key["AccessKeyId"], key["SecretAccessKey"], None)
        self.set_environment(
            {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}
        )
        aws.reset_sessions()
        ENFORCEMENT.enable(key["AccessKeyId"])
        self.resources = self._seed(url)
        return self.resources

    def set_environment(self, values: dict[str, str | None]) -> None:
        """Set (or, for None, unset) environment variables, remembering what to put back on stop."""
        for name, value in values.items():
            self._saved_environment.setdefault(name, os.environ.get(name))
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    def stop(self) -> None:
        if self._server is not None:
            if self.resources is not None:
                self._reset(self.resources.endpoint_url)
            self._server.stop()
            self._server = None
        self._sqs_clock.close()
        ENFORCEMENT.disable()
        # Leave the process as it was: later code must not reach a server that is gone.
        for name, value in self._saved_environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_environment.clear()
        aws.reset_sessions()

    @staticmethod
    def _reset(url: str) -> None:
        urllib.request.urlopen(
            urllib.request.Request(f"{url}/moto-api/reset", method="POST"), timeout=30
        ).close()

    def serve_cluster_endpoint(self, endpoint: str, certificate_authority_data: str) -> None:
        """Make DescribeCluster answer the simulated API server's address and certificate authority, as
        EKS answers its cluster's: the control plane reaches the cluster the way it does on AWS.

        moto has no API for it (EKS makes both itself), so this sets them on moto's model in this process.
        """
        from moto.eks.models import eks_backends

        cluster = eks_backends[ACCOUNT][self.region].clusters[self.cluster_name]
        cluster.endpoint = endpoint
        cluster.certificate_authority = {"data": certificate_authority_data}

    def publish_public_parameter(self, name: str, value: str) -> None:
        """Publish an AWS-owned ``/aws/service/...`` parameter, as EKS does for its AMIs.

        The API refuses writes under ``/aws/`` (as AWS does), so this goes to moto's backend, which
        shares this process with the server, the same way moto seeds its own public parameters.
        """
        from moto.core.utils import utcnow
        from moto.ssm.models import Parameter, ssm_backends

        backend = ssm_backends[ACCOUNT][self.region]
        versions = backend._parameters[name]
        versions.append(
            Parameter(  # type: ignore[abstract]  # moto's model; CloudFormation members unused here
                account_id=ACCOUNT,
                name=name,
                value=value,
                parameter_type="String",
                description=None,
                allowed_pattern=None,
                keyid=None,
                last_modified_date=utcnow(),
                version=len(versions) + 1,
                data_type="text",
            )
        )

    def client(self, service: str) -> Any:
        """A client signing as the account administrator, whatever function is running."""
        # One session per administrator key: a new session loads botocore's models again (~0.15 s).
        key = str(self.admin.access_key)
        if self._admin_session is None or self._admin_session[0] != key:
            session = boto3.session.Session(
                aws_access_key_id=key, aws_secret_access_key=self.admin.secret_key, region_name=self.region
            )
            self._admin_session = (key, session)
        return self._admin_session[1].client(service, config=aws.RETRY_CONFIG)  # type: ignore[call-overload]

    def _seed(self, url: str) -> CloudResources:
        name = self.cluster_name
        res = CloudResources(cluster_name=name, endpoint_url=url)
        ec2 = self.client("ec2")
        discovery = [{"Key": "karpenter.sh/discovery", "Value": name}]
        res.vpc_id = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        for index, zone in enumerate(ZONES):
            subnet = ec2.create_subnet(
                VpcId=res.vpc_id,
                CidrBlock=f"10.0.{index * 32}.0/19",
                AvailabilityZone=zone,
                TagSpecifications=[
                    {
                        "ResourceType": "subnet",
                        "Tags": [*discovery, {"Key": "Name", "Value": f"{name}-private-{zone}"}],
                    }
                ],
            )
            res.subnet_ids.append(subnet["Subnet"]["SubnetId"])
        res.security_group_id = ec2.create_security_group(
            GroupName=f"{name}-node",
            Description="nodes",
            VpcId=res.vpc_id,
            TagSpecifications=[{"ResourceType": "security-group", "Tags": discovery}],
        )["GroupId"]

        iam = self.client("iam")
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
            ],
        }
        res.node_role_name = f"KarpenterNodeRole-{name}"
        iam.create_role(RoleName=res.node_role_name, AssumeRolePolicyDocument=json.dumps(trust))
        cluster_role = iam.create_role(
            RoleName=f"{name}-cluster", AssumeRolePolicyDocument=json.dumps(trust)
        )["Role"]["Arn"]
        self.client("eks").create_cluster(
            name=name,
            version=KUBERNETES_VERSION,
            roleArn=cluster_role,
            resourcesVpcConfig={"subnetIds": res.subnet_ids, "securityGroupIds": [res.security_group_id]},
            kubernetesNetworkConfig={"serviceIpv4Cidr": "10.100.0.0/16"},
            # The stack's access entries need API in the mode; CONFIG_MAP too keeps aws-auth mappings
            # counting, as on a cluster part-way to access entries.
            accessConfig={"authenticationMode": eks_access.API_AND_CONFIG_MAP},
        )

        # EKS publishes its optimized AMIs as public SSM parameters; moto has the images but not those.
        by_arch = {"amd64": "x86_64", "arm64": "arm64"}
        for arch, ec2_arch in by_arch.items():
            # Filtered in EC2: moto holds 1,301 Amazon images, and describing them all costs seconds.
            image = ec2.describe_images(
                Owners=["amazon"],
                Filters=[
                    {"Name": "name", "Values": ["amzn2*"]},
                    {"Name": "architecture", "Values": [ec2_arch]},
                ],
            )["Images"][0]
            res.amis[arch] = image["ImageId"]
            for family in ("al2023", "al2", "bottlerocket"):
                parameter = amifamily.ssm_parameter_for_alias(family, "latest", KUBERNETES_VERSION, arch)
                self.publish_public_parameter(parameter, image["ImageId"])

        res.table_name = f"{name}-serverless-karpenter"
        self.client("dynamodb").create_table(**state_schema.table_definition(res.table_name))

        sqs = self.client("sqs")
        res.dlq_url = sqs.create_queue(QueueName=f"{name}-interruption-dlq")["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=res.dlq_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        redrive = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(INTERRUPTION_MAX_RECEIVE_COUNT)}
        res.queue_url = sqs.create_queue(
            QueueName=f"{name}-interruption",
            Attributes={
                "MessageRetentionPeriod": str(INTERRUPTION_RETENTION_SECONDS),
                "VisibilityTimeout": str(INTERRUPTION_VISIBILITY_TIMEOUT_SECONDS),
                "RedrivePolicy": json.dumps(redrive),
            },
        )["QueueUrl"]
        attributes = sqs.get_queue_attributes(
            QueueUrl=res.queue_url, AttributeNames=["QueueArn", "VisibilityTimeout"]
        )["Attributes"]
        res.queue_arn = attributes["QueueArn"]
        res.queue_visibility_timeout = int(attributes["VisibilityTimeout"])
        events = self.client("events")
        for rule_id, pattern in RULE_PATTERNS.items():
            rule = f"{name}-{rule_id}"
            events.put_rule(Name=rule, EventPattern=json.dumps(pattern), State="ENABLED")
            events.put_targets(Rule=rule, Targets=[{"Id": "interruption-queue", "Arn": res.queue_arn}])
        return res


@dataclass
class DeployedStack:
    """What :meth:`SimulatedCloud.seed_stack` created in place of ``cdk deploy``."""

    name: str
    outputs: dict[str, str]
    function_roles: dict[str, str]  # function -> role ARN
    instance_profile: str


def seed_stack(cloud: SimulatedCloud) -> DeployedStack:
    """Make the account look as if the CDK stack were deployed, for ``doctor`` and ``status``: a
    CloudFormation stack with the real stack's outputs, naming the seeded table, queue and node role, and
    the five functions (with their own roles), the interruption function's event source on the queue, a
    node instance profile, the node role's EC2_LINUX access entry, and the queue's policy and SSE.

    moto's CloudFormation cannot build the real template, so the resources are made directly and the
    stack only carries the outputs (``naming.StackOutput``) the tools read.
    """
    import io
    import zipfile

    from serverless_karpenter import naming

    res = cloud.resources
    assert res is not None, "start the cloud first"
    name = cloud.cluster_name
    iam = cloud.client("iam")
    lambda_trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("handler.py", "def lambda_handler(event, context):\n    return None\n")
    outputs: dict[str, str] = {}
    roles: dict[str, str] = {}
    for function in naming.FUNCTION_NAMES:
        role_name = f"{name}-{function}-role"[:64]
        try:  # the simulation made the functions' roles already, to run them with their credentials
            role = iam.get_role(RoleName=role_name)["Role"]["Arn"]
        except iam.exceptions.NoSuchEntityException:
            role = iam.create_role(RoleName=role_name, AssumeRolePolicyDocument=json.dumps(lambda_trust))[
                "Role"
            ]["Arn"]
        physical = f"{naming.stack_name(name)}-{function}"
        cloud.client("lambda").create_function(
            FunctionName=physical,
            Runtime="python3.14",
            Role=role,
            Handler="handler.lambda_handler",
            Code={"ZipFile": code.getvalue()},
            Environment={
                "Variables": {
                    "CLUSTER_NAME": name,
                    "STATE_TABLE_NAME": res.table_name,
                    "INTERRUPTION_QUEUE_URL": res.queue_url,
                }
            },
            Tags={naming.CLUSTER_TAG: name},
        )
        outputs[naming.function_output(function)] = physical
        roles[function] = role
    map_event_source(cloud, outputs[naming.function_output("interruption")], res.queue_arn)
    profile = f"{res.node_role_name}-profile"
    iam.create_instance_profile(InstanceProfileName=profile)
    iam.add_role_to_instance_profile(InstanceProfileName=profile, RoleName=res.node_role_name)
    cloud.client("eks").create_access_entry(
        clusterName=name,
        principalArn=iam.get_role(RoleName=res.node_role_name)["Role"]["Arn"],
        type="EC2_LINUX",
    )
    sqs = cloud.client("sqs")
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "AllowInterruptionEventRules",
                "Effect": "Allow",
                "Principal": {"Service": "events.amazonaws.com"},
                "Action": "sqs:SendMessage",
                "Resource": res.queue_arn,
            }
        ],
    }
    sqs.set_queue_attributes(
        QueueUrl=res.queue_url, Attributes={"Policy": json.dumps(policy), "SqsManagedSseEnabled": "true"}
    )
    outputs.update(
        {
            naming.StackOutput.NODE_ROLE_NAME: res.node_role_name,
            naming.StackOutput.NODE_INSTANCE_PROFILE_NAME: profile,
            naming.StackOutput.STATE_TABLE_NAME: res.table_name,
            naming.StackOutput.INTERRUPTION_QUEUE_URL: res.queue_url,
        }
    )
    put_stack(cloud, outputs)
    from serverless_karpenter_sim.stack_policies import grant_controller_policies

    # The function roles get the stack's own policies, so doctor's simulated permission checks pass.
    return grant_controller_policies(cloud, DeployedStack(naming.stack_name(name), outputs, roles, profile))


def put_stack(cloud: SimulatedCloud, outputs: dict[str, str]) -> None:
    """The CloudFormation stack of the cluster, carrying only ``outputs``."""
    import warnings

    from serverless_karpenter import naming

    template = {
        "Resources": {"Placeholder": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # moto notes it does not model the placeholder resource
        cloud.client("cloudformation").create_stack(
            StackName=naming.stack_name(cloud.cluster_name), TemplateBody=json.dumps(template)
        )


def map_event_source(cloud: SimulatedCloud, function: str, queue_arn: str) -> str:
    """An SQS event source mapping from the queue to the function, as the stack makes; its UUID.

    Lambda lists it, but moto does not act on it: the simulator's loop is the event source, and moto's
    would take each message off the queue to run the function in Docker.
    """
    from moto.sqs.models import sqs_backends

    mapping = cloud.client("lambda").create_event_source_mapping(
        FunctionName=function,
        EventSourceArn=queue_arn,
        BatchSize=10,
        FunctionResponseTypes=["ReportBatchItemFailures"],
    )
    for queue in sqs_backends[ACCOUNT][cloud.region].queues.values():
        if queue.queue_arn == queue_arn:
            queue.lambda_event_source_mappings.pop(mapping["FunctionArn"], None)
    return str(mapping["UUID"])


def boto3_client(service: Any, endpoint_url: str, region: str = REGION) -> Any:
    """A plain client for test assertions (no retries, so faults are visible)."""
    return boto3.client(service, region_name=region, endpoint_url=endpoint_url)
