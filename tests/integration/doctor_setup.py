"""A simulated account and cluster set up correctly for ``doctor``: every check passes until a test
breaks one thing."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes import utils as k8s_utils
from serverless_karpenter import naming
from serverless_karpenter_sim.cloud import ACCOUNT, DeployedStack, map_event_source, put_stack
from serverless_karpenter_sim.eks_access import API, API_AND_CONFIG_MAP
from serverless_karpenter_sim.scenario import Scenario
from serverless_karpenter_sim.simulation import Simulation

CLUSTER = "doctor"


def nodepool(capacity_types: tuple[str, ...] = ("spot", "on-demand")) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "general"},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                        {
                            "key": "karpenter.sh/capacity-type",
                            "operator": "In",
                            "values": list(capacity_types),
                        },
                        {
                            "key": "karpenter.k8s.aws/instance-category",
                            "operator": "In",
                            "values": ["c", "m"],
                        },
                        {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["4"]},
                    ],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "general"},
                }
            }
        },
    }


def nodeclass(kms_key: str, **changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "role": f"KarpenterNodeRole-{CLUSTER}",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
        "blockDeviceMappings": [
            {
                "deviceName": "/dev/xvda",
                "ebs": {"volumeSize": "50Gi", "volumeType": "gp3", "encrypted": True, "kmsKeyID": kms_key},
            }
        ],
    }
    spec.update(changes)
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "general"},
        "spec": spec,
    }


def daemonset(name: str, cpu: str, memory: str = "64Mi") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {
                            "name": name,
                            "image": "agent",
                            "resources": {"requests": {"cpu": cpu, "memory": memory}},
                        }
                    ]
                },
            },
        },
    }


@dataclass
class DoctorSetup:
    sim: Simulation
    stack: DeployedStack
    kms_key: str
    queue_policy: str = ""

    def client(self, service: str) -> Any:
        return self.sim.cloud.client(service)

    @property
    def queue_url(self) -> str:
        return self.stack.outputs[naming.StackOutput.INTERRUPTION_QUEUE_URL]

    @property
    def interruption_function(self) -> str:
        return self.stack.outputs[naming.function_output("interruption")]

    @property
    def node_role_arn(self) -> str:
        assert self.sim.resources is not None
        return f"arn:aws:iam::{ACCOUNT}:role/{self.sim.resources.node_role_name}"

    def restore_queue(self) -> None:
        """The seeded policy and encryption (moto forgets the policy on some unrelated updates)."""
        assert self.queue_policy
        self.client("sqs").set_queue_attributes(
            QueueUrl=self.queue_url,
            Attributes={"Policy": self.queue_policy, "SqsManagedSseEnabled": "true", "KmsMasterKeyId": ""},
        )

    def undeploy_stack(self) -> None:
        """No stack, as before ``cdk deploy``: what the stack created is not found without its outputs."""
        self.client("cloudformation").delete_stack(StackName=self.stack.name)

    def redeploy_stack(self) -> None:
        put_stack(self.sim.cloud, self.stack.outputs)

    def delete_node_access_entry(self) -> None:
        self.client("eks").delete_access_entry(clusterName=CLUSTER, principalArn=self.node_role_arn)

    def create_node_access_entry(self) -> None:
        self.client("eks").create_access_entry(
            clusterName=CLUSTER, principalArn=self.node_role_arn, type="EC2_LINUX"
        )

    def map_node_role_in_aws_auth(self) -> None:
        k8s_utils.create_from_dict(self.sim.api_client, aws_auth(self.node_role_arn))

    def unmap_aws_auth(self) -> None:
        k8s.CoreV1Api(self.sim.api_client).delete_namespaced_config_map("aws-auth", "kube-system")

    def event_source(self) -> str:
        """The UUID of the interruption function's one event source mapping."""
        [mapping] = self.client("lambda").list_event_source_mappings(FunctionName=self.interruption_function)[
            "EventSourceMappings"
        ]
        return str(mapping["UUID"])

    def feed_interruption_function_from(self, queue_arn: str) -> None:
        """Replace its event source mapping by one from ``queue_arn``."""
        self.client("lambda").delete_event_source_mapping(UUID=self.event_source())
        map_event_source(self.sim.cloud, self.interruption_function, queue_arn)

    @property
    def custom(self) -> k8s.CustomObjectsApi:
        return k8s.CustomObjectsApi(self.sim.api_client)

    def replace_nodeclass(self, manifest: dict[str, Any]) -> None:
        current: Any = self.custom.get_cluster_custom_object(
            "karpenter.k8s.aws", "v1", "ec2nodeclasses", "general"
        )
        manifest = {
            **manifest,
            "metadata": {**manifest["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]},
        }
        self.custom.replace_cluster_custom_object(
            "karpenter.k8s.aws", "v1", "ec2nodeclasses", "general", manifest
        )


def key_policy(account: str, launcher_role: str | None) -> str:
    statements: list[dict[str, Any]] = [
        {
            "Sid": "Enable IAM User Permissions",
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{account}:root"},
            "Action": "kms:*",
            "Resource": "*",
        }
    ]
    if launcher_role:
        statements.append(
            {
                "Sid": "AllowLaunchWithEncryptedVolumes",
                "Effect": "Allow",
                "Principal": {"AWS": launcher_role},
                "Action": [
                    "kms:CreateGrant",
                    "kms:Decrypt",
                    "kms:DescribeKey",
                    "kms:GenerateDataKeyWithoutPlaintext",
                    "kms:ReEncrypt*",
                ],
                "Resource": "*",
            }
        )
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


def aws_auth(node_role_arn: str) -> dict[str, Any]:
    roles = [
        {
            "rolearn": node_role_arn,
            "username": "system:node:{{EC2PrivateDNSName}}",
            "groups": ["system:bootstrappers", "system:nodes"],
        }
    ]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "aws-auth", "namespace": "kube-system"},
        "data": {"mapRoles": json.dumps(roles)},
    }


def start_correct_setup(authentication_mode: str = API) -> Iterator[DoctorSetup]:
    """The set-up the stack expects, with the cluster in ``authentication_mode``. In API mode (as an EKS
    cluster made for access entries) the node role joins by the stack's EC2_LINUX access entry; in
    API_AND_CONFIG_MAP mode by its aws-auth mapping alone (a cluster still on aws-auth), so that either
    way of joining is checked against moto."""
    scenario = Scenario(name="doctor", cluster_name=CLUSTER, manifests=[], steps=[])
    sim = Simulation(scenario, log=io.StringIO())
    try:
        sim.start()
        # The stack's own policies on its function roles, for the Lambda-permissions check to simulate.
        stack = sim.stack
        account = ACCOUNT
        if authentication_mode != API_AND_CONFIG_MAP:  # the simulated cluster's mode, as created
            sim.cloud.client("eks").update_cluster_config(
                name=CLUSTER, accessConfig={"authenticationMode": authentication_mode}
            )
        iam = sim.cloud.client("iam")
        iam.create_role(
            RoleName=naming.SPOT_SERVICE_LINKED_ROLE,
            Path=f"/aws-service-role/{naming.SPOT_SERVICE}/",
            AssumeRolePolicyDocument=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": naming.SPOT_SERVICE},
                            "Action": "sts:AssumeRole",
                        }
                    ],
                }
            ),
        )
        kms = sim.cloud.client("kms")
        key = kms.create_key(Description="node volumes")["KeyMetadata"]["KeyId"]
        kms.put_key_policy(
            KeyId=key, PolicyName="default", Policy=key_policy(account, stack.function_roles["provisioner"])
        )
        sim.apply([nodepool(), nodeclass(key), daemonset("node-agent", "200m", "256Mi")])
        setup = DoctorSetup(sim, stack, key)
        if authentication_mode == API_AND_CONFIG_MAP:
            setup.delete_node_access_entry()
            setup.map_node_role_in_aws_auth()
        setup.queue_policy = setup.client("sqs").get_queue_attributes(
            QueueUrl=setup.queue_url, AttributeNames=["Policy"]
        )["Attributes"]["Policy"]
        yield setup
    finally:
        sim.stop()


def run_doctor_report(capsys: Any, cluster: str = CLUSTER) -> tuple[int, dict[str, Any]]:
    from serverless_karpenter_cli.main import main

    code = main(["doctor", "--cluster", cluster, "--json"])
    return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def run_doctor(capsys: Any) -> tuple[int, list[dict[str, str]]]:
    code, report = run_doctor_report(capsys)
    return code, report["checks"]


def failures(checks: list[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for check in checks:
        if check["status"] == "fail":
            out.setdefault(check["check"], []).append(check)
    return out


def only_failure(checks: list[dict[str, str]], check: str) -> dict[str, str]:
    """The one ✗ of a report, which must be of ``check`` and come with a fix."""
    failed = [c for c in checks if c["status"] == "fail"]
    assert [c["check"] for c in failed] == [check], failed
    assert failed[0]["fix"], failed[0]
    return failed[0]


def statuses(checks: list[dict[str, str]]) -> dict[str, set[str]]:
    """Check -> the statuses of its lines."""
    out: dict[str, set[str]] = {}
    for check in checks:
        out.setdefault(check["check"], set()).add(check["status"])
    return out


def lambda_zip() -> bytes:
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("handler.py", "def lambda_handler(event, context):\n    return None\n")
    return code.getvalue()


def empty_facts() -> Any:
    """Facts of a cluster with nothing in it, for checks exercised without AWS."""
    from serverless_karpenter.doctor.checks import AccessFacts, Facts, StackFacts

    return Facts(
        cluster=CLUSTER,
        region="us-east-1",
        account="123456789012",
        stack=StackFacts(name=naming.stack_name(CLUSTER), status=None),
        queue=None,
        rules=[],
        nodeclasses=[],
        nodepools=[],
        daemonsets=[],
        instance_types={},
        node_role_arn=None,
        access=AccessFacts(entries={}, authentication_mode="API", aws_auth_roles=None),
        spot_service_linked_role=False,
        permissions=[],
        launch_role_arn=None,
    )
