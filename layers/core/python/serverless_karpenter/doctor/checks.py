"""The set-up checks behind ``serverless-karpenter doctor``: pure functions over gathered facts.

Each check looks at one class of set-up mistake that Karpenter users meet too late (untagged subnets, a
queue EventBridge cannot write to, a node role that cannot join, a KMS key the launcher may not use, the
missing spot service-linked role, DaemonSets that outgrew a NodePool) and says how to fix it. Gathering
the facts from AWS and the cluster is :mod:`serverless_karpenter.doctor.gather`.
"""

from __future__ import annotations

import fnmatch
import ipaddress
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from serverless_karpenter import naming
from serverless_karpenter.api import labels as wk
from serverless_karpenter.interruption.rules import RULE_PATTERNS
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.scheduler import instance_type_mismatch, nodepool_requirements

if TYPE_CHECKING:
    from serverless_karpenter.doctor.karpenter import KarpenterFacts


class Status(StrEnum):
    OK = "ok"
    FAIL = "fail"
    # The check could not run (an API the endpoint does not implement): never reported as a pass.
    SKIPPED = "skipped"


class CheckId(StrEnum):
    STACK = "stack"
    INTERRUPTION_QUEUE = "interruption-queue"
    INTERRUPTION_RULES = "interruption-rules"
    NODECLASS_SELECTORS = "nodeclass-selectors"
    AMI_ALIASES = "ami-aliases"
    NODE_ROLE = "node-role"
    KMS_KEYS = "kms-keys"
    SPOT_SERVICE_LINKED_ROLE = "spot-service-linked-role"
    LAMBDA_PERMISSIONS = "lambda-permissions"
    CLUSTER_NETWORK = "cluster-network"
    DAEMONSETS_FIT = "daemonsets-fit"
    KARPENTER_CRDS = "karpenter-crds"
    IN_CLUSTER_KARPENTER = "in-cluster-karpenter"


@dataclass(frozen=True)
class CheckResult:
    check: CheckId
    status: Status
    summary: str
    fix: str = ""

    def to_json(self) -> dict[str, str]:
        return {
            "check": str(self.check),
            "status": str(self.status),
            "summary": self.summary,
            "fix": self.fix,
        }


# -- facts ---------------------------------------------------------------------------------------------


@dataclass
class StackFacts:
    name: str
    status: str | None  # None: no such stack
    outputs: dict[str, str] = field(default_factory=dict)
    # What each output names, and whether it exists ("table tbl", True).
    resources: dict[str, bool] = field(default_factory=dict)
    # The EKS cluster the stack serves (its access entries live on it).
    cluster_exists: bool = True


@dataclass
class KmsKeyFacts:
    key_id: str
    exists: bool
    enabled: bool = False
    key_manager: str = "CUSTOMER"  # AWS for AWS-managed keys (alias/aws/...)
    policy: dict[str, Any] | None = None


@dataclass
class EventSourceFacts:
    uuid: str
    source_arn: str
    state: str


@dataclass
class QueueConsumerFacts:
    """The interruption function, as it is configured: which queue it reads."""

    function: str
    # Its INTERRUPTION_QUEUE_URL (None: not set), where it returns failed messages early; and whether
    # that queue exists.
    configured_url: str | None
    configured_exists: bool
    # Its SQS event source mappings: what Lambda feeds it from.
    event_sources: list[EventSourceFacts] = field(default_factory=list)


@dataclass
class QueueFacts:
    url: str
    arn: str
    attributes: dict[str, str]
    policy: dict[str, Any] | None
    kms_key: KmsKeyFacts | None = None
    consumer: QueueConsumerFacts | None = None  # None: no interruption function (the stack check says)


@dataclass
class RuleFacts:
    name: str
    state: str
    pattern: dict[str, Any]
    target_arns: list[str]


@dataclass
class NodeClassFacts:
    name: str
    spec: dict[str, Any]
    subnets: list[tuple[str, str]]  # (subnet id, zone)
    security_groups: list[str]
    # arch -> image id, for the AMI terms; an alias that resolves nowhere leaves this empty.
    images: dict[str, str]
    image_error: str | None = None
    instance_profile_roles: list[str] | None = None  # None: spec.instanceProfile names no existing profile
    role_exists: bool | None = None
    kms_keys: list[KmsKeyFacts] = field(default_factory=list)


@dataclass
class AccessFacts:
    # Principal ARN -> access entry type, or None when the endpoint has no access-entry API.
    entries: dict[str, str] | None
    authentication_mode: str | None
    # Role ARN -> groups from the aws-auth ConfigMap, or None when there is none.
    aws_auth_roles: dict[str, list[str]] | None
    unavailable_reason: str = ""


@dataclass
class PermissionFacts:
    function: str
    role_arn: str
    denied: list[str] | None  # None: not simulated
    unavailable_reason: str = ""
    # Condition keys the denying policies read that the simulation did not supply.
    missing_context: list[str] = field(default_factory=list)


@dataclass
class IngressRule:
    """One inbound permission of a security group, as DescribeSecurityGroups reports it."""

    protocol: str  # "tcp", or "-1" for all traffic
    from_port: int | None
    to_port: int | None
    source_groups: list[str] = field(default_factory=list)
    cidrs: list[str] = field(default_factory=list)

    def admits_https(self, groups: Sequence[str], cidrs: Sequence[str]) -> bool:
        """Whether it lets traffic from one of ``groups``, or from every one of ``cidrs``, in on 443."""
        if self.protocol not in ("tcp", "6", "-1"):
            return False
        if self.protocol != "-1" and not (
            self.from_port is not None and self.to_port is not None and self.from_port <= 443 <= self.to_port
        ):
            return False
        if set(self.source_groups) & set(groups):
            return True
        # A CIDR rule admits the functions when it covers every one of their subnets (IPv4: their ENIs'
        # addresses).
        nets = [ipaddress.IPv4Network(c, strict=False) for c in self.cidrs if ":" not in c]
        ours = [ipaddress.IPv4Network(c, strict=False) for c in cidrs if c and ":" not in c]
        return bool(ours) and all(any(sub.subnet_of(net) for net in nets) for sub in ours)


@dataclass
class EndpointFacts:
    """A VPC endpoint in the functions' VPC."""

    id: str
    service: str  # the service's short name: the last part of com.amazonaws.<region>.<service>
    type: str  # Interface or Gateway
    state: str
    private_dns: bool = False
    route_tables: list[str] = field(default_factory=list)
    security_groups: list[str] = field(default_factory=list)


@dataclass
class SubnetFacts:
    id: str
    cidr: str
    zone: str
    # Where 0.0.0.0/0 goes from it: "igw-..." (a public subnet), "nat-..." (or another egress target),
    # or None (no way out but the VPC's endpoints).
    default_route: str | None
    route_table: str | None
    vpc_id: str = ""


@dataclass
class FunctionNetworkFacts:
    vpc_id: str | None  # None: outside any VPC
    subnet_ids: list[str] = field(default_factory=list)
    security_groups: list[str] = field(default_factory=list)


@dataclass
class NetworkFacts:
    """How the functions reach the cluster's API endpoint and the AWS APIs (VPC mode or not)."""

    # DescribeCluster's resourcesVpcConfig: None where the endpoint does not report the field.
    cluster_vpc_id: str | None
    public_access: bool | None
    private_access: bool | None
    public_access_cidrs: list[str]
    cluster_security_group_id: str | None
    # The groups on the API endpoint's ENIs (the cluster group and the additional ones), with their rules.
    endpoint_group_ingress: dict[str, list[IngressRule]] = field(default_factory=dict)
    functions: dict[str, FunctionNetworkFacts] = field(default_factory=dict)
    subnets: dict[str, SubnetFacts] = field(default_factory=dict)  # the functions' subnets
    endpoints: list[EndpointFacts] = field(default_factory=list)  # in the functions' VPC
    # The ingress rules of the interface endpoints' groups.
    endpoint_ingress: dict[str, list[IngressRule]] = field(default_factory=dict)
    # For the fix of a cluster the functions cannot reach: the cluster's subnets that route to no
    # internet gateway (candidates for subnetIds), and their route tables.
    private_cluster_subnets: list[str] = field(default_factory=list)
    private_cluster_route_tables: list[str] = field(default_factory=list)


@dataclass
class Facts:
    cluster: str
    region: str
    account: str
    stack: StackFacts
    queue: QueueFacts | None
    rules: list[RuleFacts]
    nodeclasses: list[NodeClassFacts]
    nodepools: list[dict[str, Any]]
    daemonsets: list[dict[str, Any]]
    # Instance types per node class, as the provisioner sees them (name, allocatable, labels).
    instance_types: dict[str, list[Any]]
    node_role_arn: str | None
    access: AccessFacts
    spot_service_linked_role: bool
    permissions: list[PermissionFacts]
    launch_role_arn: str | None  # the provisioner's role: it calls CreateFleet
    # Why the cluster (EKS and Kubernetes) could not be read, or "": its checks are then not run.
    cluster_unavailable: str = ""
    # None: not gathered (no EKS cluster, or no function of the stack to look at).
    network: NetworkFacts | None = None
    # Karpenter's CRDs and controller in the cluster; None: the cluster was not read.
    karpenter: KarpenterFacts | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("instance_types")
        return out


# -- helpers -------------------------------------------------------------------------------------------


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _statements(policy: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    return [s for s in _as_list((policy or {}).get("Statement")) if isinstance(s, Mapping)]


def _principals(statement: Mapping[str, Any]) -> list[str]:
    principal = statement.get("Principal")
    if principal == "*":
        return ["*"]
    if isinstance(principal, Mapping):
        return [str(p) for values in principal.values() for p in _as_list(values)]
    return [str(p) for p in _as_list(principal)]


def _allows(statement: Mapping[str, Any], action: str) -> bool:
    if statement.get("Effect") != "Allow":
        return False
    return any(fnmatch.fnmatchcase(action.lower(), str(a).lower()) for a in _as_list(statement.get("Action")))


def policy_grants(policy: Mapping[str, Any] | None, principal: str, actions: Sequence[str]) -> list[str]:
    """The ``actions`` that no Allow statement of ``policy`` grants to ``principal`` (an ARN or service)."""
    granted = {
        action
        for statement in _statements(policy)
        if principal in _principals(statement) or "*" in _principals(statement)
        for action in actions
        if _allows(statement, action)
    }
    return [a for a in actions if a not in granted]


def _ok(check: CheckId, summary: str) -> CheckResult:
    return CheckResult(check, Status.OK, summary)


def _fail(check: CheckId, summary: str, fix: str) -> CheckResult:
    return CheckResult(check, Status.FAIL, summary, fix)


def _skip(check: CheckId, summary: str) -> CheckResult:
    return CheckResult(check, Status.SKIPPED, summary)


def queue_name(url: str) -> str:
    return url.rsplit("/", 1)[-1]  # a queue's URL ends with its name


def _deploy(cluster: str) -> str:
    return f"cdk deploy -c clusterName={cluster}  (or: make deploy CLUSTER={cluster})"


# -- checks --------------------------------------------------------------------------------------------


def check_stack(facts: Facts) -> list[CheckResult]:
    stack = facts.stack
    deploy = _deploy(facts.cluster)
    if stack.status is None:
        if not stack.cluster_exists:
            return [
                _fail(
                    CheckId.STACK,
                    f"stack {stack.name} is not deployed in {facts.region}, and there is no EKS cluster "
                    f"{facts.cluster} there either",
                    "check --cluster and --region; the stack serves an existing EKS cluster: create it, "
                    f"then {deploy}",
                )
            ]
        return [_fail(CheckId.STACK, f"stack {stack.name} is not deployed in {facts.region}", deploy)]
    if not stack.status.endswith("_COMPLETE") or "ROLLBACK" in stack.status or "DELETE" in stack.status:
        return [
            _fail(
                CheckId.STACK,
                f"stack {stack.name} is {stack.status}",
                f"see its events (aws cloudformation describe-stack-events --stack-name {stack.name}), "
                f"fix the cause, then {deploy}",
            )
        ]
    if not stack.cluster_exists:
        return [
            _fail(
                CheckId.STACK,
                f"stack {stack.name} is {stack.status}, but its EKS cluster {facts.cluster} does not exist "
                f"in {facts.region}",
                "check --cluster and --region; if the cluster was deleted, delete its stack too "
                f"(cdk destroy -c clusterName={facts.cluster})",
            )
        ]
    missing_outputs = [
        key
        for key in (
            naming.StackOutput.STATE_TABLE_NAME,
            naming.StackOutput.INTERRUPTION_QUEUE_URL,
            naming.StackOutput.NODE_ROLE_NAME,
            *(naming.function_output(n) for n in naming.FUNCTION_NAMES),
        )
        if key not in stack.outputs
    ]
    if missing_outputs:
        return [
            _fail(
                CheckId.STACK,
                f"stack {stack.name} lacks outputs {', '.join(missing_outputs)} (an older version?)",
                f"update the stack: {deploy}",
            )
        ]
    missing = sorted(name for name, exists in stack.resources.items() if not exists)
    if missing:
        return [
            _fail(
                CheckId.STACK,
                f"stack {stack.name} is {stack.status} but {', '.join(missing)} no longer exist(s)",
                f"something deleted them outside CloudFormation; recreate them: {deploy}",
            )
        ]
    return [
        _ok(
            CheckId.STACK, f"stack {stack.name} is {stack.status}; its {len(stack.resources)} resources exist"
        )
    ]


# The interruption function's setting (Settings.interruption_queue_url) naming its queue.
QUEUE_SETTING = "INTERRUPTION_QUEUE_URL"
# EventBridge must encrypt with the key to deliver: it needs these on a customer-managed key.
EVENTBRIDGE_KMS_ACTIONS = ("kms:GenerateDataKey", "kms:Decrypt")


# Event source mapping states in which Lambda reads the queue, or soon will.
_CONSUMING_STATES = ("Creating", "Enabling", "Enabled", "Updating")


def _consumer_problems(facts: Facts, queue: QueueFacts) -> tuple[list[str], list[str]]:
    """Whether the interruption function reads the queue the rules fill, rather than another name."""
    consumer = queue.consumer
    if consumer is None:
        return [], []
    problems: list[str] = []
    fixes: list[str] = []
    name, function = queue_name(queue.url), consumer.function
    configured = consumer.configured_url
    if configured is None or queue_name(configured) != name:
        if configured is None:
            problems.append(f"the interruption function {function} has no {QUEUE_SETTING}")
        else:
            missing = "" if consumer.configured_exists else ", which does not exist"
            problems.append(
                f"the interruption function {function} is configured with queue {queue_name(configured)} "
                f"({QUEUE_SETTING}){missing}, not {name}, which the stack created and the rules target"
            )
        fixes.append(
            f"set {function}'s {QUEUE_SETTING} to {queue.url} (queue {name}"
            + (f", not {queue_name(configured)}" if configured else "")
            + f"): redeploy the stack ({_deploy(facts.cluster)}), or aws lambda "
            f"update-function-configuration --function-name {function} --environment "
            f"'Variables={{...,{QUEUE_SETTING}={queue.url}}}' keeping its other variables"
        )
    create = (
        f"aws lambda create-event-source-mapping --function-name {function} --event-source-arn {queue.arn} "
        "--function-response-types ReportBatchItemFailures"
    )
    elsewhere = [e for e in consumer.event_sources if e.source_arn != queue.arn]
    here = [e for e in consumer.event_sources if e.source_arn == queue.arn]
    for source in elsewhere:
        problems.append(
            f"the interruption function's event source mapping {source.uuid} reads queue "
            f"{source.source_arn.rsplit(':', 1)[-1]}, not {name}"
        )
        fixes.append(f"aws lambda delete-event-source-mapping --uuid {source.uuid}")
    if not here:
        problems.append(f"no event source mapping feeds {name} to the interruption function {function}")
        fixes.append(create)
    elif not any(e.state in _CONSUMING_STATES for e in here):
        problems.append(
            f"the interruption function's event source mapping {here[0].uuid} on {name} is {here[0].state}"
        )
        fixes.append(f"aws lambda update-event-source-mapping --uuid {here[0].uuid} --enabled")
    return problems, fixes


def check_interruption_queue(facts: Facts) -> list[CheckResult]:
    queue = facts.queue
    if queue is None:
        # No stack, no queue output, or the queue was deleted: the stack check fails for each.
        return [_skip(CheckId.INTERRUPTION_QUEUE, "no interruption queue to check (see the stack check)")]
    problems, fixes = _consumer_problems(facts, queue)
    missing = policy_grants(queue.policy, "events.amazonaws.com", ("sqs:SendMessage",))
    if missing:
        problems.append("its policy does not let EventBridge (events.amazonaws.com) send messages")
        fixes.append(
            "add a queue-policy statement allowing events.amazonaws.com sqs:SendMessage on "
            f"{queue.arn}, conditioned on the rules' ARNs (redeploying the stack restores it)"
        )
    attributes = queue.attributes
    key = queue.kms_key
    sse = attributes.get("SqsManagedSseEnabled", "false").lower() == "true"
    if key is None and not sse:
        problems.append("it is not encrypted")
        fixes.append(
            f"aws sqs set-queue-attributes --queue-url {queue.url} --attributes SqsManagedSseEnabled=true"
        )
    elif key is not None:
        if not key.exists or not key.enabled:
            problems.append(f"its KMS key {key.key_id} is missing or disabled")
            fixes.append("use SSE-SQS (SqsManagedSseEnabled=true) or an enabled customer-managed key")
        elif key.key_manager == "AWS":
            problems.append(
                f"it is encrypted with the AWS-managed key {key.key_id}, which EventBridge cannot use"
            )
            fixes.append(
                "use SSE-SQS (SqsManagedSseEnabled=true), or a customer-managed key whose policy allows "
                "events.amazonaws.com kms:GenerateDataKey and kms:Decrypt"
            )
        else:
            lacking = policy_grants(key.policy, "events.amazonaws.com", EVENTBRIDGE_KMS_ACTIONS)
            if lacking:
                problems.append(
                    f"its KMS key {key.key_id} does not let EventBridge use it ({', '.join(lacking)})"
                )
                fixes.append(
                    f"add to the key policy of {key.key_id}: Allow events.amazonaws.com "
                    + ", ".join(EVENTBRIDGE_KMS_ACTIONS)
                )
    if problems:
        return [
            _fail(
                CheckId.INTERRUPTION_QUEUE,
                f"interruption queue {queue.url}: " + "; ".join(problems),
                "; ".join(fixes),
            )
        ]
    encryption = "SSE-SQS" if key is None else f"KMS key {key.key_id}"
    return [
        _ok(
            CheckId.INTERRUPTION_QUEUE,
            f"interruption queue accepts EventBridge messages; encrypted ({encryption})",
        )
    ]


def _rule_matches(pattern: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    return set(_as_list(pattern.get("source"))) >= set(wanted["source"]) and set(
        _as_list(pattern.get("detail-type"))
    ) >= set(wanted["detail-type"])


def check_interruption_rules(facts: Facts) -> list[CheckResult]:
    if facts.queue is None:
        return [
            _skip(
                CheckId.INTERRUPTION_RULES,
                "no interruption queue for the rules to target (see the stack check)",
            )
        ]
    arn = facts.queue.arn
    unrouted: list[str] = []
    for kind, wanted in RULE_PATTERNS.items():
        routed = any(
            rule.state == "ENABLED" and arn in rule.target_arns and _rule_matches(rule.pattern, wanted)
            for rule in facts.rules
        )
        if not routed:
            unrouted.append(kind)
    if unrouted:
        return [
            _fail(
                CheckId.INTERRUPTION_RULES,
                f"no enabled EventBridge rule sends {', '.join(unrouted)} events to the interruption queue",
                "redeploy the stack to restore its five rules, or re-add the queue as their target: "
                f"aws events put-targets --rule <rule> --targets Id=InterruptionQueue,Arn={arn}",
            )
        ]
    return [_ok(CheckId.INTERRUPTION_RULES, f"all {len(RULE_PATTERNS)} interruption rules target the queue")]


def check_nodeclass_selectors(facts: Facts) -> list[CheckResult]:
    if not facts.nodeclasses:
        return [
            _fail(
                CheckId.NODECLASS_SELECTORS,
                "no EC2NodeClass in the cluster",
                "kubectl apply an EC2NodeClass (karpenter.k8s.aws/v1) and a NodePool that refers to it",
            )
        ]
    out = []
    for nc in facts.nodeclasses:
        problems = []
        if not nc.subnets:
            problems.append(f"spec.subnetSelectorTerms {nc.spec.get('subnetSelectorTerms')} match no subnet")
        if not nc.security_groups:
            problems.append(
                "spec.securityGroupSelectorTerms "
                f"{nc.spec.get('securityGroupSelectorTerms')} match no security group"
            )
        if problems:
            out.append(
                _fail(
                    CheckId.NODECLASS_SELECTORS,
                    f'EC2NodeClass "{nc.name}": ' + "; ".join(problems),
                    f"tag the cluster's private subnets and node security group (e.g. "
                    "aws ec2 create-tags --resources <ids> "
                    f"--tags Key=karpenter.sh/discovery,Value={facts.cluster}) "
                    "or correct the selector terms",
                )
            )
            continue
        zones = sorted({zone for _, zone in nc.subnets})
        out.append(
            _ok(
                CheckId.NODECLASS_SELECTORS,
                f'EC2NodeClass "{nc.name}": {len(nc.subnets)} subnet(s) in {len(zones)} zone(s) '
                f"({', '.join(zones)}), {len(nc.security_groups)} security group(s)",
            )
        )
    return out


def check_ami_aliases(facts: Facts) -> list[CheckResult]:
    out = []
    for nc in facts.nodeclasses:
        terms = nc.spec.get("amiSelectorTerms") or []
        described = ", ".join(str(t.get("alias") or t) for t in terms)
        if not nc.images:
            reason = f" ({nc.image_error})" if nc.image_error else ""
            out.append(
                _fail(
                    CheckId.AMI_ALIASES,
                    f'EC2NodeClass "{nc.name}": amiSelectorTerms {described} resolve to no AMI{reason}',
                    "use an alias EKS publishes (al2023@latest, bottlerocket@latest, al2@latest) or "
                    "select images that exist in this region and account",
                )
            )
            continue
        found = ", ".join(f"{arch} {image}" for arch, image in sorted(nc.images.items()))
        out.append(_ok(CheckId.AMI_ALIASES, f'EC2NodeClass "{nc.name}": {described} -> {found}'))
    return out


NODE_ACCESS_TYPES = ("EC2_LINUX", "EC2_WINDOWS", "EC2")
# EKS authentication modes: which of access entries and aws-auth the cluster reads.
API, CONFIG_MAP = "API", "CONFIG_MAP"
NODE_USERNAME = "system:node:{{EC2PrivateDNSName}}"


def _node_access(facts: Facts, arn: str, origin: str) -> CheckResult:
    """Whether nodes with the role ``arn`` may join, by the sources the cluster's mode reads: access entries
    unless it is CONFIG_MAP, aws-auth unless it is API (both when the mode is unknown)."""
    access = facts.access
    mode = access.authentication_mode
    who = f"{origin} {arn}"
    entry = (access.entries or {}).get(arn) if mode != CONFIG_MAP else None
    groups = (access.aws_auth_roles or {}).get(arn)
    mapped = groups is not None and "system:nodes" in groups
    cannot_join = "its nodes cannot join the cluster"
    create = (
        f"aws eks create-access-entry --cluster-name {facts.cluster} --principal-arn {arn} --type EC2_LINUX"
    )
    if entry in NODE_ACCESS_TYPES:
        return _ok(CheckId.NODE_ROLE, f"{who} has an {entry} access entry")
    if mapped and mode != API:
        return _ok(CheckId.NODE_ROLE, f"{who} is mapped to system:nodes in aws-auth")
    if entry is not None:
        return _fail(
            CheckId.NODE_ROLE,
            f"{who} has a {entry} access entry, not EC2_LINUX: {cannot_join}",
            f"aws eks delete-access-entry --cluster-name {facts.cluster} --principal-arn {arn} && {create}",
        )
    if mode == CONFIG_MAP:
        return _fail(
            CheckId.NODE_ROLE,
            f"{who} is not mapped to system:nodes in aws-auth, which is all the cluster reads (its "
            f"authentication mode is CONFIG_MAP): {cannot_join}",
            "add it to aws-auth's mapRoles: eksctl create iamidentitymapping --cluster "
            f"{facts.cluster} --arn {arn} --username '{NODE_USERNAME}' --group system:bootstrappers "
            "--group system:nodes; or move to access entries, which the stack needs: aws eks "
            f"update-cluster-config --name {facts.cluster} --access-config "
            f"authenticationMode=API_AND_CONFIG_MAP, then {create}",
        )
    if access.entries is None:
        # Access entries could not be read, and the mode says they may be what grants the role.
        return _skip(CheckId.NODE_ROLE, f"{who}: access entries not read ({access.unavailable_reason})")
    if mapped:
        return _fail(
            CheckId.NODE_ROLE,
            f"{who} has no access entry, and its system:nodes mapping in aws-auth is ignored: the cluster's "
            f"authentication mode is API, so {cannot_join}",
            create,
        )
    return _fail(CheckId.NODE_ROLE, f"{who} has no access entry: {cannot_join}", create)


def _role_arn(account: str, role: str) -> str:
    return (
        role if role.startswith("arn:") else f"arn:aws:iam::{account}:role/{role.rsplit('/', maxsplit=1)[-1]}"
    )


def check_node_role(facts: Facts) -> list[CheckResult]:
    roles: dict[str, str] = {}  # role ARN -> where it comes from
    if facts.node_role_arn:
        roles[facts.node_role_arn] = "the stack's node role"
    out: list[CheckResult] = []
    for nc in facts.nodeclasses:
        if nc.spec.get("role"):
            arn = _role_arn(facts.account, str(nc.spec["role"]))
            roles.setdefault(arn, f'EC2NodeClass "{nc.name}" spec.role')
            if nc.role_exists is False:
                out.append(
                    _fail(
                        CheckId.NODE_ROLE,
                        f'EC2NodeClass "{nc.name}": spec.role {nc.spec["role"]} does not exist',
                        "create the node role (the stack creates KarpenterNodeRole-<cluster>) "
                        "or correct spec.role",
                    )
                )
        elif nc.spec.get("instanceProfile"):
            profile = nc.spec["instanceProfile"]
            if not nc.instance_profile_roles:
                out.append(
                    _fail(
                        CheckId.NODE_ROLE,
                        f'EC2NodeClass "{nc.name}": instance profile {profile} '
                        "does not exist or holds no role",
                        f"aws iam create-instance-profile --instance-profile-name {profile} && "
                        "aws iam add-role-to-instance-profile "
                        f"--instance-profile-name {profile} --role-name <node role>",
                    )
                )
            else:
                for role in nc.instance_profile_roles:
                    roles.setdefault(_role_arn(facts.account, role), f"instance profile {profile}")
    for arn, origin in sorted(roles.items()):
        out.append(_node_access(facts, arn, origin))
    if not out:
        out.append(
            _fail(
                CheckId.NODE_ROLE,
                "no node role: neither the stack nor any EC2NodeClass names one",
                "set spec.role (or spec.instanceProfile) on every EC2NodeClass",
            )
        )
    stack_profile = facts.stack.outputs.get(naming.StackOutput.NODE_INSTANCE_PROFILE_NAME)
    if stack_profile and facts.stack.resources.get(f"instance profile {stack_profile}") is False:
        out.append(
            _fail(
                CheckId.NODE_ROLE,
                f"the stack's instance profile {stack_profile} does not exist",
                f"redeploy the stack (cdk deploy -c clusterName={facts.cluster})",
            )
        )
    return out


# What a caller needs on a customer-managed key to launch with encrypted EBS volumes.
EBS_KMS_ACTIONS = (
    "kms:CreateGrant",
    "kms:Decrypt",
    "kms:GenerateDataKeyWithoutPlaintext",
    "kms:ReEncryptFrom",
)


def check_kms_keys(facts: Facts) -> list[CheckResult]:
    out = []
    launcher = facts.launch_role_arn
    for nc in facts.nodeclasses:
        for key in nc.kms_keys:
            where = f'EC2NodeClass "{nc.name}" blockDeviceMappings kmsKeyID {key.key_id}'
            if not key.exists or not key.enabled:
                out.append(
                    _fail(
                        CheckId.KMS_KEYS,
                        f"{where}: the key is missing or disabled, so every node dies at launch",
                        "point kmsKeyID at an enabled key in this region (aws kms describe-key --key-id ...)",
                    )
                )
                continue
            if key.key_manager == "AWS":
                out.append(
                    _ok(CheckId.KMS_KEYS, f"{where}: AWS-managed key, usable by any caller in the account")
                )
                continue
            if launcher is None:
                # No provisioner function: the stack check fails for it.
                out.append(
                    _skip(CheckId.KMS_KEYS, f"{where}: the launching role is unknown (see the stack check)")
                )
                continue
            lacking = policy_grants(key.policy, launcher, EBS_KMS_ACTIONS)
            if lacking:
                out.append(
                    _fail(
                        CheckId.KMS_KEYS,
                        f"{where}: the key policy does not grant the launching role {launcher} "
                        f"{', '.join(lacking)}: volumes cannot be created and nodes die at once",
                        f"add a key-policy statement: Allow {{AWS: {launcher}}} "
                        + ", ".join(EBS_KMS_ACTIONS)
                        + ", kms:DescribeKey",
                    )
                )
            else:
                out.append(_ok(CheckId.KMS_KEYS, f"{where}: grants the launching role"))
    if not out:
        out.append(_ok(CheckId.KMS_KEYS, "no customer-managed KMS key in any blockDeviceMappings"))
    return out


def allows_spot(nodepool: Mapping[str, Any]) -> bool:
    """Karpenter launches on-demand unless the NodePool's requirements admit spot."""
    requirements, _, _ = nodepool_requirements(nodepool)
    return wk.CAPACITY_TYPE in requirements and requirements.get(wk.CAPACITY_TYPE).has(wk.CAPACITY_TYPE_SPOT)


def check_spot_role(facts: Facts) -> list[CheckResult]:
    spot = [np["metadata"]["name"] for np in facts.nodepools if allows_spot(np)]
    if not spot:
        return [_ok(CheckId.SPOT_SERVICE_LINKED_ROLE, "no NodePool allows spot")]
    if facts.spot_service_linked_role:
        return [
            _ok(
                CheckId.SPOT_SERVICE_LINKED_ROLE,
                f"{naming.SPOT_SERVICE_LINKED_ROLE} exists (NodePools allowing spot: {', '.join(spot)})",
            )
        ]
    return [
        _fail(
            CheckId.SPOT_SERVICE_LINKED_ROLE,
            f"NodePool(s) {', '.join(spot)} allow spot but {naming.SPOT_SERVICE_LINKED_ROLE} does not exist: "
            "spot launches fail with ServiceLinkedRoleCreationNotPermitted",
            f"aws iam create-service-linked-role --aws-service-name {naming.SPOT_SERVICE}",
        )
    ]


def check_lambda_permissions(facts: Facts) -> list[CheckResult]:
    if not facts.permissions:
        # No stack, or its functions are gone: the stack check fails for each.
        return [_skip(CheckId.LAMBDA_PERMISSIONS, "no control-plane function to check (see the stack check)")]
    out = []
    for p in facts.permissions:
        if p.denied is None:
            out.append(
                CheckResult(
                    CheckId.LAMBDA_PERMISSIONS,
                    Status.SKIPPED,
                    f"{p.function} role {p.role_arn}: not simulated ({p.unavailable_reason})",
                )
            )
        elif p.denied:
            unknown = (
                f" (its policies also read {', '.join(p.missing_context)}, which the simulation "
                "could not supply)"
                if p.missing_context
                else ""
            )
            out.append(
                _fail(
                    CheckId.LAMBDA_PERMISSIONS,
                    f"{p.function} role {p.role_arn} may not {', '.join(p.denied)}{unknown}",
                    "redeploy the stack to restore its policies; check SCPs and permission boundaries "
                    "that deny these actions",
                )
            )
        else:
            out.append(_ok(CheckId.LAMBDA_PERMISSIONS, f"{p.function} role may do what it needs"))
    return out


# The AWS APIs the functions call, as the VPC endpoint services (and types) that serve them from a VPC
# without NAT. The stack's default endpoints also include STS, CloudWatch Logs and Monitoring, which the
# functions do not call over their own network (the EKS token is presigned locally; logs and EMF metrics
# leave through the Lambda service), so their absence is no failure. IAM has no endpoint (see
# _role_without_nat), nor has the Pricing API in most regions (prices fall back to persisted and bundled).
REQUIRED_ENDPOINTS: dict[str, tuple[str, str]] = {
    "ec2": ("Interface", "instances, fleets, launch templates, subnets, spot prices"),
    "eks": ("Interface", "DescribeCluster, for the API endpoint and its CA"),
    "sqs": ("Interface", "the interruption and termination-work queues"),
    "ssm": ("Interface", "the EKS-optimised AMI parameters"),
    "lambda": ("Interface", "waking the provisioner"),
    "dynamodb": ("Gateway", "the state table: NodeClaims, leases, cached catalog and prices"),
}


def _open_to_all(network: NetworkFacts) -> bool:
    return bool(network.public_access) and (
        not network.public_access_cidrs or "0.0.0.0/0" in network.public_access_cidrs
    )


def vpc_mode_context(facts: Facts, network: NetworkFacts) -> str:
    """The `cdk deploy` that puts the functions in the cluster's VPC, from what DescribeCluster says."""
    subnets = ",".join(network.private_cluster_subnets) or "<private subnets of the VPC, one per zone>"
    tables = ",".join(network.private_cluster_route_tables) or "<their route tables>"
    return (
        f"cdk deploy -c clusterName={facts.cluster} -c vpcId={network.cluster_vpc_id or '<the cluster VPC>'} "
        f"-c subnetIds={subnets} -c clusterSecurityGroupId="
        f"{network.cluster_security_group_id or '<the cluster security group>'} -c routeTableIds={tables} "
        "(add -c vpcEndpoints=none when the subnets route through a NAT gateway; see infra/README.md)"
    )


def _outside_vpc(facts: Facts, network: NetworkFacts, outside: list[str]) -> CheckResult | None:
    """Functions outside any VPC reach only a public endpoint open to every address: they have no fixed
    address of their own to put in publicAccessCidrs."""
    check = CheckId.CLUSTER_NETWORK
    who = f"function(s) {', '.join(outside)} run outside any VPC"
    fix = f"deploy in VPC mode: {vpc_mode_context(facts, network)}"
    if network.public_access is False:
        return _fail(
            check,
            f"the cluster's API endpoint is private (endpointPublicAccess=false) and {who}: they cannot "
            "reach it",
            fix,
        )
    if not _open_to_all(network):
        return _fail(
            check,
            f"the cluster's public endpoint admits only {', '.join(network.public_access_cidrs)} "
            f"(publicAccessCidrs) and {who}, from no fixed address: they are refused",
            fix + "; or open publicAccessCidrs to 0.0.0.0/0",
        )
    return None


def _admitted(
    rules: Mapping[str, list[IngressRule]], groups: Sequence[str], cidrs: Sequence[str]
) -> list[str]:
    return sorted(
        group for group, found in rules.items() if any(r.admits_https(groups, cidrs) for r in found)
    )


def _endpoint_problems(
    facts: Facts, network: NetworkFacts, vpc: str, groups: list[str], subnets: list[SubnetFacts]
) -> list[CheckResult]:
    check = CheckId.CLUSTER_NETWORK
    out: list[CheckResult] = []
    cidrs = [s.cidr for s in subnets]
    tables = sorted({s.route_table for s in subnets if s.route_table})
    redeploy = "redeploy with the service in -c vpcEndpoints (the stack's default creates it), or"
    for service, (kind, use) in REQUIRED_ENDPOINTS.items():
        found = [e for e in network.endpoints if e.service == service and e.state.lower() == "available"]
        what = f"the functions cannot reach {service} ({use}): their subnets have no NAT route"
        if kind == "Gateway":
            routed = [e for e in found if e.type == "Gateway" and set(tables) <= set(e.route_tables)]
            # An interface endpoint with private DNS serves the default hostname as well.
            if routed or [e for e in found if e.type == "Interface" and e.private_dns]:
                continue
            if found:
                out.append(
                    _fail(
                        check,
                        f"the {service} gateway endpoint {found[0].id} is not in the route tables of the "
                        f"functions' subnets ({', '.join(tables)}): {what}",
                        f"aws ec2 modify-vpc-endpoint --vpc-endpoint-id {found[0].id} --add-route-table-ids "
                        + " ".join(sorted(set(tables) - set(found[0].route_tables))),
                    )
                )
            else:
                out.append(
                    _fail(
                        check,
                        f"no {service} gateway endpoint in {vpc}: {what}",
                        f"{redeploy} aws ec2 create-vpc-endpoint --vpc-id {vpc} --vpc-endpoint-type Gateway "
                        f"--service-name com.amazonaws.{facts.region}.{service} --route-table-ids "
                        + " ".join(tables),
                    )
                )
            continue
        interfaces = [e for e in found if e.type == "Interface"]
        if not interfaces:
            out.append(
                _fail(
                    check,
                    f"no {service} interface endpoint in {vpc}: {what}",
                    f"{redeploy} aws ec2 create-vpc-endpoint --vpc-id {vpc} --vpc-endpoint-type Interface "
                    f"--service-name com.amazonaws.{facts.region}.{service} --private-dns-enabled "
                    "--subnet-ids <one per zone> --security-group-ids "
                    f"<a group admitting 443 from {groups[0]}>",
                )
            )
            continue
        endpoint = next((e for e in interfaces if e.private_dns), None)
        if endpoint is None:
            out.append(
                _fail(
                    check,
                    f"the {service} endpoint {interfaces[0].id} has private DNS off: the SDK's default "
                    "hostname "
                    f"still resolves to the public service, which {what.split(': ')[1]}",
                    f"aws ec2 modify-vpc-endpoint --vpc-endpoint-id {interfaces[0].id} --private-dns-enabled",
                )
            )
            continue
        rules = {g: network.endpoint_ingress.get(g, []) for g in endpoint.security_groups}
        if not _admitted(rules, groups, cidrs):
            out.append(
                _fail(
                    check,
                    f"the {service} endpoint {endpoint.id}'s security group(s) "
                    f"{', '.join(endpoint.security_groups)} do not admit the functions' group(s) "
                    f"{', '.join(groups)} on 443",
                    f"aws ec2 authorize-security-group-ingress --group-id {endpoint.security_groups[0]} "
                    f"--protocol tcp --port 443 --source-group {groups[0]}",
                )
            )
    return out


def _role_without_nat(facts: Facts) -> list[CheckResult]:
    """IAM has no VPC endpoint: without NAT the provisioner cannot make the instance profile of a node
    class that names a role (Karpenter's docs give the same advice for private clusters)."""
    profile = (
        facts.stack.outputs.get(naming.StackOutput.NODE_INSTANCE_PROFILE_NAME)
        or "an instance profile holding the node role"
    )
    return [
        _fail(
            CheckId.CLUSTER_NETWORK,
            f'EC2NodeClass "{nc.name}" uses spec.role, for which the provisioner creates an instance profile '
            "through IAM; IAM has no VPC endpoint and the functions' subnets have no NAT route",
            f"set spec.instanceProfile to {profile} "
            "(the stack's NodeInstanceProfileName output) instead of spec.role, or route the subnets through "
            "a NAT gateway",
        )
        for nc in facts.nodeclasses
        if nc.spec.get("role") and not nc.spec.get("instanceProfile")
    ]


def check_cluster_network(facts: Facts) -> list[CheckResult]:
    """Whether the functions reach the API endpoint and the AWS APIs from their network."""
    check = CheckId.CLUSTER_NETWORK
    network = facts.network
    if network is None:
        return [_skip(check, "the functions' network was not read (see the stack check)")]
    if not network.functions:
        return [_skip(check, "no control-plane function to check (see the stack check)")]
    if network.public_access is None and network.private_access is None:
        return [_skip(check, "DescribeCluster reports no endpoint access mode (resourcesVpcConfig)")]
    outside = sorted(name for name, f in network.functions.items() if not f.vpc_id)
    inside = {name: f for name, f in network.functions.items() if f.vpc_id}
    out: list[CheckResult] = []
    if outside:
        problem = _outside_vpc(facts, network, outside)
        if problem is not None:
            out.append(problem)
        if not inside:
            return out or [
                _ok(
                    check,
                    "the API endpoint is public to 0.0.0.0/0: the functions reach it from outside any VPC",
                )
            ]

    for name, function in sorted(inside.items()):
        if network.cluster_vpc_id and function.vpc_id != network.cluster_vpc_id:
            out.append(
                _fail(
                    check,
                    f"function {name} runs in {function.vpc_id}, not in the cluster's VPC "
                    f"{network.cluster_vpc_id}",
                    f"deploy in the cluster's VPC: {vpc_mode_context(facts, network)}",
                )
            )
    vpc = network.cluster_vpc_id or str(next(iter(inside.values())).vpc_id)
    groups = sorted({g for f in inside.values() for g in f.security_groups})
    subnet_ids = sorted({s for f in inside.values() for s in f.subnet_ids})
    subnets = [network.subnets[s] for s in subnet_ids if s in network.subnets]
    for subnet in subnets:
        if subnet.default_route and subnet.default_route.startswith("igw-"):
            out.append(
                _fail(
                    check,
                    f"the functions' subnet {subnet.id} is public (0.0.0.0/0 goes to "
                    f"{subnet.default_route}): "
                    "a Lambda ENI gets no public address, so nothing outside the VPC answers it there",
                    "list private subnets (routing to a NAT gateway, or served by the VPC endpoints) in "
                    f"subnetIds and redeploy: {vpc_mode_context(facts, network)}",
                )
            )
    private = [s for s in subnets if not (s.default_route and s.default_route.startswith("igw-"))]
    nat = bool(private) and all(s.default_route for s in private)

    if network.private_access is False and not (nat and _open_to_all(network)):
        out.append(
            _fail(
                check,
                "the cluster's private endpoint access is off (endpointPrivateAccess=false): from the VPC "
                "the functions cannot reach the API endpoint"
                + ("" if nat else " (their subnets have no NAT route to the public one)"),
                f"aws eks update-cluster-config --name {facts.cluster} --resources-vpc-config "
                "endpointPrivateAccess=true",
            )
        )
    elif network.private_access:
        cidrs = [s.cidr for s in subnets]
        if not _admitted(network.endpoint_group_ingress, groups, cidrs):
            target = network.cluster_security_group_id or "<the cluster security group>"
            guarding = ", ".join(sorted(network.endpoint_group_ingress)) or target
            source = groups[0] if groups else "<the functions' group>"
            out.append(
                _fail(
                    check,
                    f"no security group of the API endpoint ({guarding}) "
                    f"admits the functions' group(s) {', '.join(groups) or '(none)'} on 443",
                    f"aws ec2 authorize-security-group-ingress --group-id {target} --protocol tcp --port 443 "
                    f"--source-group {source} (redeploying the stack "
                    "restores its rule)",
                )
            )

    if not nat:
        out.extend(_endpoint_problems(facts, network, vpc, groups, private))
        out.extend(_role_without_nat(facts))
    if not out:
        how = (
            "through " + ", ".join(sorted({str(s.default_route) for s in private}))
            if nat
            else "through VPC endpoints; no NAT, so on-demand prices come from the persisted, else the "
            "bundled snapshot (the Pricing API has no endpoint here)"
        )
        out.append(
            _ok(
                check,
                f"the functions run in {vpc} and reach the "
                f"{'private' if network.private_access else 'public'} API endpoint on 443; AWS APIs {how}",
            )
        )
    return out


@dataclass(frozen=True)
class Smallest:
    name: str
    allocatable: Mapping[str, int]


def smallest_instance_type(nodepool: Mapping[str, Any], instance_types: Sequence[Any]) -> Smallest | None:
    """The smallest (by CPU, then memory) instance type the NodePool's requirements allow."""
    requirements, _, _ = nodepool_requirements(nodepool)
    allowed = [
        it
        for it in instance_types
        if instance_type_mismatch(requirements, it) is None
        and any(requirements.get(wk.CAPACITY_TYPE).has(o.capacity_type) for o in it.offerings)
    ]
    if not allowed:
        return None
    best = min(
        allowed,
        key=lambda it: (
            it.allocatable.get(resources.CPU, 0),
            it.allocatable.get(resources.MEMORY, 0),
            it.name,
        ),
    )
    return Smallest(best.name, best.allocatable)


def check_daemonsets_fit(facts: Facts, overhead: Callable[..., resources.ResourceList]) -> list[CheckResult]:
    """``overhead`` is the provisioner's own daemon-overhead function, so both agree on which DaemonSets
    land on a NodePool's nodes."""
    out = []
    for nodepool in facts.nodepools:
        name = nodepool["metadata"]["name"]
        ref = (((nodepool.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
            "nodeClassRef"
        ) or {}
        types = facts.instance_types.get(str(ref.get("name")))
        if ref.get("name") not in {nc.name for nc in facts.nodeclasses}:
            out.append(
                _fail(
                    CheckId.DAEMONSETS_FIT,
                    f'NodePool "{name}": nodeClassRef names no EC2NodeClass ("{ref.get("name")}")',
                    "create the EC2NodeClass or correct spec.template.spec.nodeClassRef",
                )
            )
            continue
        if types is None:
            # The node class's own check fails already; this one cannot be judged without its types.
            out.append(
                CheckResult(
                    CheckId.DAEMONSETS_FIT,
                    Status.SKIPPED,
                    f'NodePool "{name}": its EC2NodeClass "{ref.get("name")}" is not usable (see above)',
                )
            )
            continue
        smallest = smallest_instance_type(nodepool, types)
        if smallest is None:
            out.append(
                _fail(
                    CheckId.DAEMONSETS_FIT,
                    f'NodePool "{name}": its requirements allow no instance type',
                    "relax the NodePool's requirements",
                )
            )
            continue
        requirements, labels, taints = nodepool_requirements(nodepool)
        daemons = overhead(facts.daemonsets, requirements, labels, taints)
        over = resources.exceeded(daemons, smallest.allocatable)
        if over:
            out.append(
                _fail(
                    CheckId.DAEMONSETS_FIT,
                    f'NodePool "{name}": DaemonSets request {resources.format_list(daemons)}, more '
                    f"{', '.join(over)} than the smallest allowed type {smallest.name} has "
                    f"({resources.format_list({k: smallest.allocatable.get(k, 0) for k in over})})",
                    "exclude the small types (e.g. a karpenter.k8s.aws/instance-cpu Gt requirement) or "
                    "reduce the DaemonSets' requests",
                )
            )
        else:
            out.append(
                _ok(
                    CheckId.DAEMONSETS_FIT,
                    f'NodePool "{name}": DaemonSets ({resources.format_list(daemons) or "none"}) fit '
                    f"{smallest.name}",
                )
            )
    return out


def _karpenter_checks(
    run: Callable[[KarpenterFacts], list[CheckResult]],
) -> Callable[[Facts], list[CheckResult]]:
    def checked(facts: Facts) -> list[CheckResult]:
        assert facts.karpenter is not None, "gathered with the cluster"
        return run(facts.karpenter)

    return checked


def run_checks(facts: Facts, overhead: Callable[..., resources.ResourceList]) -> list[CheckResult]:
    # Here, not at the top: doctor.karpenter builds on this module's results.
    from serverless_karpenter.doctor.karpenter import check_crds, check_in_cluster_karpenter

    checks: list[tuple[CheckId, bool, Callable[[Facts], list[CheckResult]]]] = [
        # (check, whether it reads the cluster, the check)
        (CheckId.STACK, False, check_stack),
        (CheckId.INTERRUPTION_QUEUE, False, check_interruption_queue),
        (CheckId.INTERRUPTION_RULES, False, check_interruption_rules),
        (CheckId.NODECLASS_SELECTORS, True, check_nodeclass_selectors),
        (CheckId.AMI_ALIASES, True, check_ami_aliases),
        (CheckId.NODE_ROLE, True, check_node_role),
        (CheckId.KMS_KEYS, True, check_kms_keys),
        (CheckId.SPOT_SERVICE_LINKED_ROLE, True, check_spot_role),
        (CheckId.LAMBDA_PERMISSIONS, False, check_lambda_permissions),
        (CheckId.CLUSTER_NETWORK, False, check_cluster_network),
        (CheckId.DAEMONSETS_FIT, True, lambda f: check_daemonsets_fit(f, overhead)),
        (CheckId.KARPENTER_CRDS, True, _karpenter_checks(check_crds)),
        (CheckId.IN_CLUSTER_KARPENTER, True, _karpenter_checks(check_in_cluster_karpenter)),
    ]
    out: list[CheckResult] = []
    for check, reads_cluster, run in checks:
        if reads_cluster and facts.cluster_unavailable:
            out.append(_skip(check, f"not checked: {facts.cluster_unavailable}"))
        else:
            out.extend(run(facts))
    return out


def failed(results: Sequence[CheckResult]) -> set[CheckId]:
    return {r.check for r in results if r.status == Status.FAIL}
