"""Reads what :mod:`serverless_karpenter.doctor.checks` judges, from AWS and the cluster. Read-only: unlike
the provisioner's resolver, nothing here creates instance profiles or anything else."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import yaml

from serverless_karpenter import naming
from serverless_karpenter.adapters.kubernetes import KubernetesGateway
from serverless_karpenter.adapters.operator_reads import read_config_map
from serverless_karpenter.adapters.providers.errors import CloudError, EndpointUnanswered, translated
from serverless_karpenter.adapters.providers.model import ResolvedNodeClass
from serverless_karpenter.api import labels
from serverless_karpenter.doctor import karpenter
from serverless_karpenter.doctor.checks import (
    CONFIG_MAP,
    QUEUE_SETTING,
    AccessFacts,
    EndpointFacts,
    EventSourceFacts,
    Facts,
    FunctionNetworkFacts,
    IngressRule,
    KmsKeyFacts,
    NetworkFacts,
    NodeClassFacts,
    PermissionFacts,
    QueueConsumerFacts,
    QueueFacts,
    RuleFacts,
    StackFacts,
    SubnetFacts,
    queue_name,
)
from serverless_karpenter.provisioning.context import ControlPlane, KubernetesApi

ClientFactory = Callable[[str], Any]


def _gateway(kube: KubernetesApi) -> KubernetesGateway:
    """The doctor's reads beyond the control plane's (API discovery, kube-system's ConfigMaps) go through
    the client itself: its plane is runtime.build_control_plane's, whose gateway is the real one."""
    if not isinstance(kube, KubernetesGateway):
        raise TypeError(f"doctor reads the cluster through a KubernetesGateway, not {type(kube).__name__}")
    return kube


@dataclass(frozen=True)
class Permission:
    """A call a function makes, as IAM authorizes it: the action, on the resource it touches, with the
    request context the call carries.

    ``resource`` and the context's keys and values are templates over the names :func:`stack_names` gives.
    The stack grants most actions only on its own resources and under conditions (Karpenter's scoping:
    the region, the cluster's tags), and IAM's simulator matches the simulated resource and context
    against exactly those: asked about ``*`` with no context, it would deny a correctly deployed role.
    """

    action: str
    resource: str = "*"
    context: tuple[tuple[str, str], ...] = ()


_PROBE_TAG = "doctor"  # any value: the stack requires these tags to be present, whatever they hold
_REGIONAL = (("aws:RequestedRegion", "{region}"),)
_CREATING = (
    (f"aws:RequestTag/{labels.TAG_CLUSTER_PREFIX}{{cluster}}", "owned"),
    (f"aws:RequestTag/{labels.TAG_EKS_CLUSTER_NAME}", "{cluster}"),
)
# What a launch tags its fleet and instances with, and its launch templates with.
_LAUNCHING = (*_CREATING, (f"aws:RequestTag/{labels.NODEPOOL}", _PROBE_TAG))
_CREATING_LAUNCH_TEMPLATE = (*_CREATING, (f"aws:RequestTag/{labels.EC2NODECLASS}", _PROBE_TAG))
# The tags our instances carry.
_OURS = (
    (f"aws:ResourceTag/{labels.TAG_CLUSTER_PREFIX}{{cluster}}", "owned"),
    (f"aws:ResourceTag/{labels.NODEPOOL}", _PROBE_TAG),
)
_EC2 = "arn:{partition}:ec2:{region}:{account}"
_DESCRIBE_CLUSTER = Permission(
    "eks:DescribeCluster", "arn:{partition}:eks:{region}:{account}:cluster/{cluster}"
)
_INVOKE_PROVISIONER = Permission(
    "lambda:InvokeFunction", "arn:{partition}:lambda:{region}:{account}:function:{provisioner}"
)
_TERMINATE = Permission("ec2:TerminateInstances", f"{_EC2}:instance/*", _OURS)
_SEND_TERMINATION_WORK = Permission(
    "sqs:SendMessage", "arn:{partition}:sqs:{region}:{account}:{termination_queue}"
)


def _state(*actions: str) -> tuple[Permission, ...]:
    return tuple(Permission(a, "arn:{partition}:dynamodb:{region}:{account}:table/{table}") for a in actions)


def _consume(queue: str) -> tuple[Permission, ...]:
    arn = f"arn:{{partition}}:sqs:{{region}}:{{account}}:{{{queue}}}"
    return (Permission("sqs:ReceiveMessage", arn), Permission("sqs:DeleteMessage", arn))


# What each function must be allowed to do: a sample of its calls, enough to catch a role that lost its
# policy, an SCP or a permission boundary.
REQUIRED_PERMISSIONS: dict[str, tuple[Permission, ...]] = {
    "watcher": (_DESCRIBE_CLUSTER, _INVOKE_PROVISIONER),
    "provisioner": (
        _DESCRIBE_CLUSTER,
        *_state("dynamodb:PutItem", "dynamodb:Query"),
        Permission("ec2:CreateFleet", f"{_EC2}:fleet/*", _LAUNCHING),
        Permission("ec2:RunInstances", f"{_EC2}:instance/*", _LAUNCHING),
        Permission("ec2:CreateLaunchTemplate", f"{_EC2}:launch-template/*", _CREATING_LAUNCH_TEMPLATE),
        Permission("ec2:DescribeSubnets", "*", _REGIONAL),
        _TERMINATE,
        Permission(
            "iam:PassRole",
            "arn:{partition}:iam::{account}:role/{node_role}",
            (("iam:PassedToService", "ec2.amazonaws.com"),),
        ),
        Permission("ssm:GetParameter", "arn:{partition}:ssm:{region}::parameter/aws/service/eks/*"),
    ),
    "interruption": (
        _DESCRIBE_CLUSTER,
        *_state("dynamodb:UpdateItem"),
        *_consume("interruption_queue"),
        # Failed messages are retried within seconds rather than after the visibility timeout.
        Permission(
            "sqs:ChangeMessageVisibility", "arn:{partition}:sqs:{region}:{account}:{interruption_queue}"
        ),
        _SEND_TERMINATION_WORK,
    ),
    "disruption": (
        _DESCRIBE_CLUSTER,
        *_state("dynamodb:UpdateItem"),
        Permission("ec2:DescribeInstances", "*", _REGIONAL),
        _SEND_TERMINATION_WORK,
    ),
    "termination": (
        _DESCRIBE_CLUSTER,
        *_state("dynamodb:UpdateItem"),
        _TERMINATE,
        *_consume("termination_queue"),
        _INVOKE_PROVISIONER,
    ),
}


def stack_names(
    outputs: Mapping[str, str], cluster: str, region: str, account: str, partition: str
) -> dict[str, str]:
    """What :data:`REQUIRED_PERMISSIONS`' templates refer to, from the stack's outputs."""
    names = {"cluster": cluster, "region": region, "account": account, "partition": partition}
    interruption_queue = outputs.get(naming.StackOutput.INTERRUPTION_QUEUE_URL)
    termination_queue = outputs.get(naming.StackOutput.TERMINATION_QUEUE_URL)
    sources = {
        "table": outputs.get(naming.StackOutput.STATE_TABLE_NAME),
        "provisioner": outputs.get(naming.function_output("provisioner")),
        "node_role": outputs.get(naming.StackOutput.NODE_ROLE_NAME),
        "interruption_queue": queue_name(interruption_queue) if interruption_queue else None,
        "termination_queue": queue_name(termination_queue) if termination_queue else None,
    }
    names.update({key: value for key, value in sources.items() if value})
    return names


def simulation_requests(
    permissions: Sequence[Permission], names: Mapping[str, str]
) -> list[tuple[str, dict[str, str], list[str]]]:
    """(resource ARN, context, actions) for each simulation the permissions need: IAM evaluates every
    action of a call on every resource with the same context, so permissions are grouped by both.

    A permission whose resource the outputs do not name (an older stack) is left out: the stack check
    reports the missing outputs.
    """
    grouped: dict[tuple[str, tuple[tuple[str, str], ...]], list[str]] = {}
    for permission in permissions:
        try:
            resource = permission.resource.format(**names)
            context = tuple((k.format(**names), v.format(**names)) for k, v in permission.context)
        except KeyError:
            continue
        grouped.setdefault((resource, context), []).append(permission.action)
    return [(resource, dict(context), actions) for (resource, context), actions in grouped.items()]


def not_implemented(error: Exception) -> str | None:
    """Why an API is unavailable on this endpoint (moto lacks some), or None for a real error."""
    if isinstance(error, CloudError):
        return f"{error.operation} is not implemented by this endpoint" if error.not_implemented else None
    if isinstance(error, EndpointUnanswered):  # an emulator's HTML 500: unparseable
        return f"the endpoint could not answer ({error.kind})"
    return None


def _access_denied(error: Exception) -> str | None:
    """Why the caller may not make the call, or None for another error."""
    if isinstance(error, CloudError) and error.code in ("AccessDenied", "AccessDeniedException"):
        return f"the caller may not call {error.operation} ({error.code})"
    return None


# Where a default route may lead, in the order DescribeRouteTables names the target.
_ROUTE_TARGETS = (
    "GatewayId",
    "NatGatewayId",
    "TransitGatewayId",
    "NetworkInterfaceId",
    "InstanceId",
    "VpcPeeringConnectionId",
    "EgressOnlyInternetGatewayId",
)


def _default_route(table: Mapping[str, Any] | None) -> str | None:
    """The target of the table's active 0.0.0.0/0 route: igw-... for a public subnet, nat-... (or another
    egress target) for a private one with a way out, None for one with none."""
    for route in (table or {}).get("Routes") or []:
        if route.get("DestinationCidrBlock") == "0.0.0.0/0" and route.get("State", "active") == "active":
            for key in _ROUTE_TARGETS:
                if route.get(key):
                    return str(route[key])
    return None


def _policy(document: Any) -> dict[str, Any] | None:
    if not document:
        return None
    if isinstance(document, str):
        parsed = json.loads(unquote(document) if document.startswith("%7B") else document)
        return parsed if isinstance(parsed, dict) else None
    return dict(document)


class Gatherer:
    def __init__(
        self,
        cluster: str,
        region: str,
        clients: ClientFactory,
        plane: ControlPlane | None,
        probe_clients: ClientFactory | None = None,
    ) -> None:
        """``plane`` reads the cluster (Kubernetes, and EC2 as the provisioner resolves node classes); without
        one the checks that need the cluster are not run.
        ``probe_clients`` make the calls an emulator may not implement; give them no retries."""
        self.cluster = cluster
        self.region = region
        self._clients = clients
        self.plane = plane
        self._probe_clients = probe_clients or clients
        self._cache: dict[str, Any] = {}

    # The clients' refusals arrive as CloudError, an endpoint's non-answer as EndpointUnanswered.
    def client(self, service: str) -> Any:
        if service not in self._cache:
            self._cache[service] = translated(self._clients(service))
        return self._cache[service]

    def _probe(self, service: str) -> Any:
        return translated(self._probe_clients(service))

    def gather(self) -> Facts:
        account = str(self.client("sts").get_caller_identity()["Account"])
        eks_cluster = self.eks_cluster()
        stack = self.stack(cluster_exists=eks_cluster is not None)
        outputs = stack.outputs
        queue = self.queue(
            outputs.get(naming.StackOutput.INTERRUPTION_QUEUE_URL),
            outputs.get(naming.function_output("interruption")),
        )
        roles = self.function_roles(outputs)
        node_role = outputs.get(naming.StackOutput.NODE_ROLE_NAME)
        facts = Facts(
            cluster=self.cluster,
            region=self.region,
            account=account,
            stack=stack,
            queue=queue,
            rules=self.rules() if queue is not None else [],
            nodeclasses=[],
            nodepools=[],
            daemonsets=[],
            instance_types={},
            node_role_arn=f"arn:aws:iam::{account}:role/{node_role}" if node_role else None,
            access=AccessFacts(entries=None, authentication_mode=None, aws_auth_roles=None),
            spot_service_linked_role=self.role_exists(naming.SPOT_SERVICE_LINKED_ROLE),
            permissions=self.permissions(roles, outputs, account),
            launch_role_arn=roles.get("provisioner"),
        )
        if eks_cluster is not None:
            facts.network = self.network(eks_cluster, outputs)
        if eks_cluster is None:
            facts.cluster_unavailable = f"there is no EKS cluster {self.cluster} in {self.region}"
        elif self.plane is None:  # the cluster exists, but this run was given no way to read it
            facts.cluster_unavailable = "the cluster could not be reached"
        else:
            kube = self.plane.kube
            nodeclass_specs = kube.list_ec2nodeclasses()
            facts.nodepools = kube.list_nodepools()
            facts.nodeclasses = [self.nodeclass(nc) for nc in nodeclass_specs]
            facts.daemonsets = kube.list_daemonsets()
            facts.instance_types = self.instance_types(nodeclass_specs, facts.nodeclasses)
            facts.access = self.access(eks_cluster)
            facts.karpenter = karpenter.gather(_gateway(kube))
        return facts

    def eks_cluster(self) -> dict[str, Any] | None:
        """DescribeCluster's answer, or None when there is no such cluster."""
        try:
            return dict(self._probe("eks").describe_cluster(name=self.cluster)["cluster"])
        except CloudError as error:
            if error.code == "ResourceNotFoundException":
                return None
            raise

    # -- the stack -----------------------------------------------------------------------------------

    def stack(self, cluster_exists: bool = True) -> StackFacts:
        name = naming.stack_name(self.cluster)
        try:
            described = self.client("cloudformation").describe_stacks(StackName=name)["Stacks"][0]
        except CloudError as error:
            if error.code == "ValidationError":  # CloudFormation's "Stack ... does not exist"
                return StackFacts(name=name, status=None, cluster_exists=cluster_exists)
            raise
        outputs = {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs") or []}
        facts = StackFacts(
            name=name, status=str(described["StackStatus"]), outputs=outputs, cluster_exists=cluster_exists
        )
        table = outputs.get(naming.StackOutput.STATE_TABLE_NAME)
        if table:
            facts.resources[f"table {table}"] = self._exists(
                lambda: self.client("dynamodb").describe_table(TableName=table), "ResourceNotFoundException"
            )
        for key in (naming.StackOutput.INTERRUPTION_QUEUE_URL, naming.StackOutput.TERMINATION_QUEUE_URL):
            url = outputs.get(key)
            if url:
                facts.resources[f"queue {queue_name(url)}"] = self._queue_exists(url)
        role = outputs.get(naming.StackOutput.NODE_ROLE_NAME)
        if role:
            facts.resources[f"role {role}"] = self.role_exists(role)
        profile = outputs.get(naming.StackOutput.NODE_INSTANCE_PROFILE_NAME)
        if profile:
            facts.resources[f"instance profile {profile}"] = self._exists(
                lambda: self.client("iam").get_instance_profile(InstanceProfileName=profile), "NoSuchEntity"
            )
        for function in naming.FUNCTION_NAMES:
            physical = outputs.get(naming.function_output(function))
            if physical:
                facts.resources[f"function {physical}"] = self._function_exists(physical)
        return facts

    @staticmethod
    def _exists(call: Callable[[], Any], missing_code: str) -> bool:
        try:
            call()
        except CloudError as error:
            if error.code == missing_code:
                return False
            raise
        return True

    def _function_exists(self, name: str) -> bool:
        return self._exists(
            lambda: self.client("lambda").get_function(FunctionName=name), "ResourceNotFoundException"
        )

    def _queue_exists(self, url: str) -> bool:
        try:
            self.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        except CloudError as error:
            if "NonExistentQueue" in error.code or error.code == "QueueDoesNotExist":
                return False
            raise
        return True

    def role_exists(self, name: str) -> bool:
        return self._exists(lambda: self.client("iam").get_role(RoleName=name), "NoSuchEntity")

    # -- interruption --------------------------------------------------------------------------------

    def queue(self, url: str | None, function: str | None) -> QueueFacts | None:
        """The interruption queue, and ``function`` (the interruption function) as it reads it."""
        if not url or not self._queue_exists(url):
            return None
        attributes = self.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["All"])[
            "Attributes"
        ]
        key_id = attributes.get("KmsMasterKeyId")
        return QueueFacts(
            url=url,
            arn=attributes["QueueArn"],
            attributes=dict(attributes),
            policy=_policy(attributes.get("Policy")),
            kms_key=self.kms_key(key_id) if key_id else None,
            consumer=self.queue_consumer(function, url) if function else None,
        )

    def queue_consumer(self, function: str, queue_url: str) -> QueueConsumerFacts | None:
        """How ``function`` reads the interruption queue at ``queue_url`` (known to exist)."""
        lambda_ = self.client("lambda")
        try:
            configuration = lambda_.get_function_configuration(FunctionName=function)
        except CloudError as error:
            if error.code == "ResourceNotFoundException":
                return None
            raise
        configured = ((configuration.get("Environment") or {}).get("Variables") or {}).get(QUEUE_SETTING)
        sources = [
            EventSourceFacts(str(m["UUID"]), str(m["EventSourceArn"]), str(m.get("State", "")))
            for page in lambda_.get_paginator("list_event_source_mappings").paginate(FunctionName=function)
            for m in page["EventSourceMappings"]
            if ":sqs:" in str(m.get("EventSourceArn", ""))
        ]
        # The queue the stack names is known to exist; only another one needs a look.
        exists = configured == queue_url or (bool(configured) and self._queue_exists(str(configured)))
        return QueueConsumerFacts(
            function=function,
            configured_url=configured,
            configured_exists=exists,
            event_sources=sources,
        )

    def rules(self) -> list[RuleFacts]:
        events = self.client("events")
        out = []
        for page in events.get_paginator("list_rules").paginate():
            for rule in page["Rules"]:
                if not rule.get("EventPattern"):
                    continue
                targets = events.list_targets_by_rule(Rule=rule["Name"])["Targets"]
                out.append(
                    RuleFacts(
                        name=rule["Name"],
                        state=str(rule.get("State", "")),
                        pattern=json.loads(rule["EventPattern"]),
                        target_arns=[t["Arn"] for t in targets],
                    )
                )
        return out

    # -- node classes --------------------------------------------------------------------------------

    def kms_key(self, key_id: str) -> KmsKeyFacts:
        kms = self.client("kms")
        try:
            metadata = kms.describe_key(KeyId=key_id)["KeyMetadata"]
        except CloudError as error:
            if error.code in ("NotFoundException", "InvalidArnException"):
                return KmsKeyFacts(key_id=key_id, exists=False)
            raise
        facts = KmsKeyFacts(
            key_id=key_id,
            exists=True,
            enabled=metadata.get("KeyState", "Enabled") == "Enabled" and metadata.get("Enabled", True),
            key_manager=str(metadata.get("KeyManager", "CUSTOMER")),
        )
        if facts.key_manager != "AWS":
            facts.policy = _policy(
                kms.get_key_policy(KeyId=metadata["KeyId"], PolicyName="default")["Policy"]
            )
        return facts

    def nodeclass(self, manifest: Mapping[str, Any]) -> NodeClassFacts:
        assert self.plane is not None, "the cluster side is read through a control plane"
        resolver = self.plane.resolver
        spec = dict(manifest.get("spec") or {})
        subnets = resolver.subnets(spec.get("subnetSelectorTerms") or [])
        groups = resolver.security_groups(spec.get("securityGroupSelectorTerms") or [])
        image_error = None
        try:
            _, images = resolver.amis(spec.get("amiSelectorTerms") or [], spec.get("amiFamily"))
        except (CloudError, ValueError) as error:
            images, image_error = {}, str(error)
        facts = NodeClassFacts(
            name=manifest["metadata"]["name"],
            spec=spec,
            subnets=[(s.id, s.zone) for s in subnets],
            security_groups=groups,
            images=images,
            image_error=image_error,
        )
        if spec.get("role"):
            facts.role_exists = self.role_exists(str(spec["role"]).split("/")[-1])
        elif spec.get("instanceProfile"):
            try:
                profile = self.client("iam").get_instance_profile(InstanceProfileName=spec["instanceProfile"])
                facts.instance_profile_roles = [
                    r["RoleName"] for r in profile["InstanceProfile"].get("Roles") or []
                ]
            except CloudError as error:
                if error.code != "NoSuchEntity":
                    raise
        keys = {
            str((m.get("ebs") or {}).get("kmsKeyID"))
            for m in spec.get("blockDeviceMappings") or []
            if (m.get("ebs") or {}).get("kmsKeyID")
        }
        facts.kms_keys = [self.kms_key(k) for k in sorted(keys)]
        return facts

    def instance_types(
        self, specs: list[dict[str, Any]], nodeclasses: list[NodeClassFacts]
    ) -> dict[str, list[Any]]:
        """Per usable node class, the instance types the provisioner would consider."""
        assert self.plane is not None, "the cluster side is read through a control plane"
        resolver = self.plane.resolver
        by_name = {nc["metadata"]["name"]: nc for nc in specs}
        out: dict[str, list[Any]] = {}
        for facts in nodeclasses:
            if not facts.subnets or not facts.images:
                continue
            resolved = ResolvedNodeClass(
                name=facts.name,
                subnets=resolver.subnets(facts.spec.get("subnetSelectorTerms") or []),
                security_group_ids=facts.security_groups,
                amis=facts.images,
                ami_family=resolver.amis(
                    facts.spec.get("amiSelectorTerms") or [], facts.spec.get("amiFamily")
                )[0],
                instance_profile=None,
            )
            out[facts.name] = list(self.plane.instance_types.instance_types(resolved, by_name[facts.name]))
        return out

    # -- the functions' network ----------------------------------------------------------------------

    def network(self, eks_cluster: Mapping[str, Any], outputs: Mapping[str, str]) -> NetworkFacts | None:
        """The cluster's endpoint access and groups, the functions' VPC configuration, their subnets' routes
        and the VPC endpoints they could use; None without a function to look at."""
        functions: dict[str, FunctionNetworkFacts] = {}
        for function in naming.FUNCTION_NAMES:
            physical = outputs.get(naming.function_output(function))
            if not physical:
                continue
            try:
                configuration = self.client("lambda").get_function_configuration(FunctionName=physical)
            except CloudError as error:
                if error.code == "ResourceNotFoundException":
                    continue  # the stack check reports it
                raise
            vpc = configuration.get("VpcConfig") or {}
            functions[function] = FunctionNetworkFacts(
                vpc_id=vpc.get("VpcId") or None,
                subnet_ids=list(vpc.get("SubnetIds") or []),
                security_groups=list(vpc.get("SecurityGroupIds") or []),
            )
        if not functions:
            return None
        config = eks_cluster.get("resourcesVpcConfig") or {}
        cluster_group = config.get("clusterSecurityGroupId") or None
        facts = NetworkFacts(
            cluster_vpc_id=config.get("vpcId") or None,
            public_access=config.get("endpointPublicAccess"),
            private_access=config.get("endpointPrivateAccess"),
            public_access_cidrs=list(config.get("publicAccessCidrs") or []),
            cluster_security_group_id=cluster_group,
            functions=functions,
        )
        # The API endpoint's ENIs carry the cluster security group and the additional ones.
        endpoint_groups = list(
            dict.fromkeys(
                [*([cluster_group] if cluster_group else []), *(config.get("securityGroupIds") or [])]
            )
        )
        facts.endpoint_group_ingress = self.ingress(endpoint_groups)
        function_subnets = sorted({s for f in functions.values() for s in f.subnet_ids})
        facts.subnets = self.subnets(function_subnets)
        for function_facts in functions.values():
            # The VPC is the subnets' (an emulator's VpcConfig may name another).
            vpcs_of_subnets = {
                facts.subnets[s].vpc_id for s in function_facts.subnet_ids if s in facts.subnets
            }
            if len(vpcs_of_subnets) == 1:
                function_facts.vpc_id = vpcs_of_subnets.pop()
        vpcs = sorted({str(f.vpc_id) for f in functions.values() if f.vpc_id})
        if vpcs:
            pages = (
                self.client("ec2")
                .get_paginator("describe_vpc_endpoints")
                .paginate(Filters=[{"Name": "vpc-id", "Values": vpcs}])
            )
            facts.endpoints = [
                EndpointFacts(
                    id=str(e["VpcEndpointId"]),
                    service=str(e.get("ServiceName", "")).rsplit(".", 1)[-1],
                    type=str(e.get("VpcEndpointType", "")),
                    state=str(e.get("State", "")),
                    private_dns=bool(e.get("PrivateDnsEnabled")),
                    route_tables=list(e.get("RouteTableIds") or []),
                    security_groups=[str(g["GroupId"]) for g in e.get("Groups") or []],
                )
                for page in pages
                for e in page.get("VpcEndpoints") or []
            ]
            facts.endpoint_ingress = self.ingress(
                sorted({g for e in facts.endpoints if e.type == "Interface" for g in e.security_groups})
            )
        # For the fix of unreachable functions: the cluster's subnets that route to no internet gateway.
        cluster_subnet_ids = list(config.get("subnetIds") or [])
        cluster_subnets = self.subnets(cluster_subnet_ids)
        private = [
            cluster_subnets[s]
            for s in cluster_subnet_ids
            if s in cluster_subnets and not (cluster_subnets[s].default_route or "").startswith("igw-")
        ]
        facts.private_cluster_subnets = [s.id for s in private]
        facts.private_cluster_route_tables = sorted({s.route_table for s in private if s.route_table})
        return facts

    def ingress(self, group_ids: Sequence[str]) -> dict[str, list[IngressRule]]:
        if not group_ids:
            return {}
        groups = self.client("ec2").describe_security_groups(GroupIds=list(group_ids))["SecurityGroups"]
        return {
            str(group["GroupId"]): [
                IngressRule(
                    protocol=str(rule.get("IpProtocol", "")),
                    from_port=rule.get("FromPort"),
                    to_port=rule.get("ToPort"),
                    source_groups=[str(p["GroupId"]) for p in rule.get("UserIdGroupPairs") or []],
                    cidrs=[str(r["CidrIp"]) for r in rule.get("IpRanges") or []],
                )
                for rule in group.get("IpPermissions") or []
            ]
            for group in groups
        }

    def subnets(self, subnet_ids: Sequence[str]) -> dict[str, SubnetFacts]:
        """Each subnet with where its default route goes (its own route table's, else its VPC's main one)."""
        if not subnet_ids:
            return {}
        ec2 = self.client("ec2")
        described = ec2.describe_subnets(SubnetIds=list(subnet_ids))["Subnets"]
        tables: dict[str, dict[str, Any]] = {}  # subnet id -> route table
        main: dict[str, dict[str, Any]] = {}  # vpc id -> main route table
        for table in ec2.describe_route_tables(
            Filters=[{"Name": "vpc-id", "Values": sorted({str(s["VpcId"]) for s in described})}]
        )["RouteTables"]:
            for association in table.get("Associations") or []:
                if association.get("SubnetId"):
                    tables[str(association["SubnetId"])] = table
                if association.get("Main"):
                    main[str(table["VpcId"])] = table
        out: dict[str, SubnetFacts] = {}
        for subnet in described:
            table = tables.get(str(subnet["SubnetId"])) or main.get(str(subnet["VpcId"]))
            out[str(subnet["SubnetId"])] = SubnetFacts(
                id=str(subnet["SubnetId"]),
                cidr=str(subnet.get("CidrBlock", "")),
                zone=str(subnet.get("AvailabilityZone", "")),
                default_route=_default_route(table),
                route_table=str(table["RouteTableId"]) if table else None,
                vpc_id=str(subnet["VpcId"]),
            )
        return out

    # -- access and permissions ----------------------------------------------------------------------

    def access(self, eks_cluster: Mapping[str, Any]) -> AccessFacts:
        """Access entries and the aws-auth mappings, whichever the cluster's authentication mode reads."""
        assert self.plane is not None, "the cluster side is read through a control plane"
        eks = self._probe("eks")
        mode = (eks_cluster.get("accessConfig") or {}).get("authenticationMode")
        entries: dict[str, str] | None = None
        reason = ""
        try:
            entries = {}
            # A CONFIG_MAP cluster has no access entries, and EKS refuses to list them.
            pages = (
                []
                if mode == CONFIG_MAP
                else eks.get_paginator("list_access_entries").paginate(clusterName=self.cluster)
            )
            for page in pages:
                for arn in page.get("accessEntries") or []:
                    entry = eks.describe_access_entry(clusterName=self.cluster, principalArn=arn)[
                        "accessEntry"
                    ]
                    entries[arn] = str(entry.get("type", ""))
        except (CloudError, EndpointUnanswered) as error:
            why = not_implemented(error) or _access_denied(error)
            if why is None:
                raise
            entries, reason = None, why
        aws_auth: dict[str, list[str]] | None = None
        config_map = read_config_map(_gateway(self.plane.kube), "kube-system", "aws-auth")
        if config_map is not None:
            aws_auth = {}
            for item in yaml.safe_load((config_map.get("data") or {}).get("mapRoles") or "[]") or []:
                aws_auth[str(item.get("rolearn"))] = [str(g) for g in item.get("groups") or []]
        return AccessFacts(
            entries=entries, authentication_mode=mode, aws_auth_roles=aws_auth, unavailable_reason=reason
        )

    def function_roles(self, outputs: Mapping[str, str]) -> dict[str, str]:
        roles = {}
        for function in naming.FUNCTION_NAMES:
            physical = outputs.get(naming.function_output(function))
            if not physical:
                continue
            try:
                roles[function] = self.client("lambda").get_function(FunctionName=physical)["Configuration"][
                    "Role"
                ]
            except CloudError as error:
                if error.code != "ResourceNotFoundException":
                    raise
        return roles

    def permissions(
        self, roles: Mapping[str, str], outputs: Mapping[str, str], account: str
    ) -> list[PermissionFacts]:
        # One attempt: an endpoint without the API answers 500, which the usual retries would repeat.
        iam = self._probe("iam")
        out: list[PermissionFacts] = []
        unavailable = ""
        for function, role_arn in roles.items():
            if unavailable:
                out.append(PermissionFacts(function, role_arn, None, unavailable))
                continue
            partition = role_arn.split(":")[1] if role_arn.count(":") >= 5 else "aws"
            names = stack_names(outputs, self.cluster, self.region, account, partition)
            denied: list[str] = []
            missing_context: set[str] = set()
            try:
                for resource, context, actions in simulation_requests(
                    REQUIRED_PERMISSIONS.get(function, ()), names
                ):
                    request: dict[str, Any] = {"PolicySourceArn": role_arn, "ActionNames": actions}
                    if resource != "*":
                        request["ResourceArns"] = [resource]
                    if context:
                        request["ContextEntries"] = [
                            {"ContextKeyName": k, "ContextKeyValues": [v], "ContextKeyType": "string"}
                            for k, v in context.items()
                        ]
                    for result in iam.simulate_principal_policy(**request)["EvaluationResults"]:
                        if result.get("EvalDecision") != "allowed":
                            denied.append(str(result["EvalActionName"]))
                            missing_context.update(result.get("MissingContextValues") or [])
            except (CloudError, EndpointUnanswered) as error:
                why = not_implemented(error) or _access_denied(error)
                if why is None:
                    raise
                unavailable = why = f"iam:SimulatePrincipalPolicy unavailable: {why}"
                out.append(PermissionFacts(function, role_arn, None, why))
                continue
            out.append(PermissionFacts(function, role_arn, denied, missing_context=sorted(missing_context)))
        return out
