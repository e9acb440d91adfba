"""The CDK context an operator passes (`cdk deploy -c clusterName=...`), validated into one config per
cluster.

Parsing is plain Python over a ``get(key)`` callable, so it is tested without synthesizing anything; every
error names the context key and how to set it, because the operator sees nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, cast

STACK_NAME_PREFIX = "ServerlessKarpenter"
DEFAULT_NODE_ROLE_NAME = "KarpenterNodeRole-{clusterName}"  # what Karpenter's own template creates
DEFAULT_LOG_RETENTION_DAYS = 30
DEFAULT_LOG_LEVEL = "INFO"
FUNCTION_NAMES = ("watcher", "provisioner", "interruption", "disruption", "termination")

# CloudWatch Logs accepts only these retention periods.
LOG_RETENTION_DAYS = frozenset(
    {1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653}
)
LOG_LEVELS = frozenset({"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"})
LAMBDA_MEMORY_MB = range(128, 10241)

# EKS: 1-100 characters, alphanumerics, hyphens and underscores, starting with an alphanumeric.
_CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$")
_IAM_ROLE_NAME = re.compile(r"^[\w+=,.@-]{1,64}$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_VPC_ID = re.compile(r"^vpc-[0-9a-f]{8,17}$")
_SUBNET_ID = re.compile(r"^subnet-[0-9a-f]{8,17}$")
_SECURITY_GROUP_ID = re.compile(r"^sg-[0-9a-f]{8,17}$")
_ROUTE_TABLE_ID = re.compile(r"^rtb-[0-9a-f]{8,17}$")
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off", ""})

ContextGetter = Callable[[str], object]


class ContextError(ValueError):
    """A missing or invalid context value. The message names the key and how to pass it."""


# The AWS APIs the functions reach from a VPC, by the short names of the `vpcEndpoints` context key:
# interface endpoints, and a gateway endpoint for DynamoDB. The Pricing API has none here (see
# infra/README.md: the functions fall back to persisted and bundled prices). IAM has none either.
INTERFACE_ENDPOINT_SERVICES = ("sts", "ec2", "sqs", "ssm", "eks", "lambda", "logs", "monitoring")
GATEWAY_ENDPOINT_SERVICES = ("dynamodb",)
VPC_ENDPOINT_SERVICES = INTERFACE_ENDPOINT_SERVICES + GATEWAY_ENDPOINT_SERVICES
# Named only on request: X-Ray, should the traces of functions in a VPC without NAT go missing.
OPTIONAL_ENDPOINT_SERVICES = ("xray",)
VPC_CONTEXT_KEYS = ("vpcId", "subnetIds", "clusterSecurityGroupId", "vpcEndpoints", "routeTableIds")


@dataclass(frozen=True)
class NetworkConfig:
    """VPC mode: the functions run in the cluster's VPC, for a cluster whose API endpoint is private.

    ``endpoints`` names the services the stack creates VPC endpoints for; empty means the subnets reach
    AWS through a NAT gateway (or endpoints the VPC already has), and the stack creates none.
    """

    vpc_id: str
    subnet_ids: tuple[str, ...]
    cluster_security_group_id: str
    endpoints: tuple[str, ...] = VPC_ENDPOINT_SERVICES
    route_table_ids: tuple[str, ...] = ()

    @property
    def interface_endpoints(self) -> tuple[str, ...]:
        return tuple(s for s in self.endpoints if s not in GATEWAY_ENDPOINT_SERVICES)

    @property
    def gateway_endpoints(self) -> tuple[str, ...]:
        return tuple(s for s in self.endpoints if s in GATEWAY_ENDPOINT_SERVICES)


def memory_context_key(function_name: str) -> str:
    return f"{function_name}MemoryMb"


@dataclass(frozen=True)
class ClusterConfig:
    """Everything one cluster's stack is built from."""

    cluster_name: str
    node_role_name: str
    import_node_role: bool = False
    node_access_entry: bool = True
    interruption_rebalance: Literal["event", "replace"] = "event"
    memory_overrides_mb: Mapping[str, int] = field(default_factory=dict)
    log_retention_days: int = DEFAULT_LOG_RETENTION_DAYS
    log_level: str = DEFAULT_LOG_LEVEL
    alarm_email: str | None = None
    # X-Ray on every function. Off by default: Lambda traces every invocation at our rates (its sampling,
    # 1 a second and 5% beyond, is not configurable), ~175,000 traces a month for an idle cluster.
    tracing: bool = False
    # The CloudWatch dashboard: $3 a month, or free as one of the account's first 3 dashboards. -c
    # dashboard=false leaves it out (a fourth cluster's, say); the alarms stay.
    dashboard: bool = True
    account: str | None = None
    region: str | None = None
    # None: the functions run outside any VPC (the cluster's endpoint must be public to 0.0.0.0/0).
    network: NetworkConfig | None = None

    @property
    def stack_name(self) -> str:
        # Stack names allow letters, digits and hyphens; cluster names may also hold underscores.
        return f"{STACK_NAME_PREFIX}-{self.cluster_name.replace('_', '-')}"


def _string(get: ContextGetter, key: str) -> str | None:
    value = get(key)
    if value is None:
        return None
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ContextError(f"context {key!r} must be a string, got {value!r}")
    text = str(value).strip()
    return text or None


def _boolean(get: ContextGetter, key: str, default: bool) -> bool:
    value = get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ContextError(f"context {key!r} must be true or false, got {value!r}")


def _integer(get: ContextGetter, key: str) -> int | None:
    value = get(key)
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ContextError(f"context {key!r} must be an integer, got {value!r}")
    try:
        return int(str(value).strip())
    except ValueError:
        raise ContextError(f"context {key!r} must be an integer, got {value!r}") from None


def _id_list(get: ContextGetter, key: str, pattern: re.Pattern[str], what: str) -> tuple[str, ...]:
    """A comma-separated string (or a JSON list in cdk.json) of AWS ids, each checked by ``pattern``."""
    value = get(key)
    if value is None:
        return ()
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",")]
    elif isinstance(value, list):
        items = [str(part).strip() for part in value]
    else:
        raise ContextError(f"context {key!r} must be a comma-separated string or a list, got {value!r}")
    ids = tuple(dict.fromkeys(item for item in items if item))
    for item in ids:
        if not pattern.match(item):
            raise ContextError(f"context {key!r}: {item!r} is not {what}")
    return ids


def _one_id(get: ContextGetter, key: str, pattern: re.Pattern[str], what: str) -> str | None:
    value = _string(get, key)
    if value is not None and not pattern.match(value):
        raise ContextError(f"context {key!r}: {value!r} is not {what}")
    return value


def read_network(get: ContextGetter, cluster_count: int) -> NetworkConfig | None:
    """VPC mode from ``vpcId``, ``subnetIds``, ``clusterSecurityGroupId``, ``vpcEndpoints`` and
    ``routeTableIds``; None when no VPC key is set.

    The keys are explicit rather than looked up from the cluster at synth time, so that a synth never
    needs credentials and the subnets are a reviewed choice: the cluster's own subnets often include
    public ones, where a Lambda ENI gets no public address and reaches nothing. ``doctor`` prints the
    keys it reads from DescribeCluster when the functions cannot reach the endpoint.
    """
    given = [key for key in VPC_CONTEXT_KEYS if get(key) not in (None, "")]
    if not given:
        return None
    how = (
        "VPC mode needs -c vpcId=vpc-... -c subnetIds=subnet-a,subnet-b -c clusterSecurityGroupId=sg-... "
        "(DescribeCluster's resourcesVpcConfig.vpcId and clusterSecurityGroupId; private subnets of that "
        "VPC, one per zone)"
    )
    if cluster_count > 1:
        raise ContextError(
            f"context {', '.join(repr(k) for k in given)}: VPC mode names one cluster's VPC and security "
            "group; deploy each VPC-mode cluster with its own `-c clusterName=...`"
        )
    vpc_id = _one_id(get, "vpcId", _VPC_ID, "a VPC id (vpc-...)")
    subnet_ids = _id_list(get, "subnetIds", _SUBNET_ID, "a subnet id (subnet-...)")
    security_group = _one_id(
        get, "clusterSecurityGroupId", _SECURITY_GROUP_ID, "a security group id (sg-...)"
    )
    missing = [
        key
        for key, value in (
            ("vpcId", vpc_id),
            ("subnetIds", subnet_ids),
            ("clusterSecurityGroupId", security_group),
        )
        if not value
    ]
    if missing:
        raise ContextError(f"missing context {', '.join(repr(k) for k in missing)}: {how}")
    assert vpc_id is not None and security_group is not None

    requested = get("vpcEndpoints")
    endpoints: tuple[str, ...]
    if requested is None or (isinstance(requested, str) and requested.strip().lower() in ("", "all")):
        endpoints = VPC_ENDPOINT_SERVICES
    elif isinstance(requested, str) and requested.strip().lower() == "none":
        endpoints = ()
    elif isinstance(requested, str | list):
        parts = requested.split(",") if isinstance(requested, str) else [str(p) for p in requested]
        names = [part.strip().lower() for part in parts if part.strip()]
        known = VPC_ENDPOINT_SERVICES + OPTIONAL_ENDPOINT_SERVICES
        unknown = sorted(set(names) - set(known))
        if unknown:
            raise ContextError(
                f"context 'vpcEndpoints': unknown service(s) {unknown}; use 'all', 'none' (through a NAT "
                f"gateway) or a comma-separated list of {', '.join(known)}"
            )
        endpoints = tuple(s for s in known if s in names)
    else:
        raise ContextError(f"context 'vpcEndpoints' must be 'all', 'none' or a list, got {requested!r}")

    route_tables = _id_list(get, "routeTableIds", _ROUTE_TABLE_ID, "a route table id (rtb-...)")
    if "dynamodb" in endpoints and not route_tables:
        raise ContextError(
            "missing context 'routeTableIds': the DynamoDB gateway endpoint is added to the route tables "
            "of the functions' subnets (-c routeTableIds=rtb-a,rtb-b), or leave dynamodb out of "
            "'vpcEndpoints' when the VPC has a DynamoDB endpoint already or routes through NAT"
        )
    if route_tables and "dynamodb" not in endpoints:
        raise ContextError(
            "context 'routeTableIds' is only for the DynamoDB gateway endpoint, which 'vpcEndpoints' "
            "leaves out"
        )
    return NetworkConfig(
        vpc_id=vpc_id,
        subnet_ids=subnet_ids,
        cluster_security_group_id=security_group,
        endpoints=endpoints,
        route_table_ids=route_tables,
    )


def cluster_names(get: ContextGetter) -> list[str]:
    """``clusterName`` and/or ``clusterNames`` (a comma-separated string or a JSON list), in order."""
    names: list[str] = []
    single = _string(get, "clusterName")
    if single:
        names.append(single)
    several = get("clusterNames")
    if isinstance(several, str):
        names.extend(part.strip() for part in several.split(",") if part.strip())
    elif isinstance(several, list):
        names.extend(str(part).strip() for part in several if str(part).strip())
    elif several is not None:
        raise ContextError(
            f"context 'clusterNames' must be a comma-separated string or a list, got {several!r}"
        )
    if not names:
        raise ContextError(
            "missing context 'clusterName': the stack is built for one EKS cluster. Run "
            "`cdk deploy -c clusterName=<cluster>` (or `-c clusterNames=a,b` for several clusters; "
            "`make synth CLUSTER=<cluster>` locally)"
        )
    unique = list(dict.fromkeys(names))
    for name in unique:
        if not _CLUSTER_NAME.match(name):
            raise ContextError(
                f"cluster name {name!r} is not a valid EKS cluster name (1-100 letters, digits, '-' or '_', "
                "starting with a letter or digit)"
            )
    return unique


def read_cluster_configs(get: ContextGetter) -> list[ClusterConfig]:
    """One :class:`ClusterConfig` per cluster named in the context, or a :class:`ContextError`."""
    names = cluster_names(get)

    rebalance = (_string(get, "interruptionRebalance") or "event").lower()
    if rebalance not in ("event", "replace"):
        raise ContextError(f"context 'interruptionRebalance' must be 'event' or 'replace', got {rebalance!r}")

    retention = _integer(get, "logRetentionDays") or DEFAULT_LOG_RETENTION_DAYS
    if retention not in LOG_RETENTION_DAYS:
        raise ContextError(
            f"context 'logRetentionDays' must be one of CloudWatch's periods {sorted(LOG_RETENTION_DAYS)}, "
            f"got {retention}"
        )

    log_level = (_string(get, "logLevel") or DEFAULT_LOG_LEVEL).upper()
    if log_level not in LOG_LEVELS:
        raise ContextError(f"context 'logLevel' must be one of {sorted(LOG_LEVELS)}, got {log_level!r}")

    memory: dict[str, int] = {}
    for function_name in FUNCTION_NAMES:
        key = memory_context_key(function_name)
        value = _integer(get, key)
        if value is None:
            continue
        if value not in LAMBDA_MEMORY_MB:
            raise ContextError(f"context {key!r} must be between 128 and 10240 (MB), got {value}")
        memory[function_name] = value

    alarm_email = _string(get, "alarmEmail")
    if alarm_email is not None and not _EMAIL.match(alarm_email):
        raise ContextError(f"context 'alarmEmail' is not an e-mail address: {alarm_email!r}")

    network = read_network(get, len(names))

    role_template = _string(get, "nodeRoleName") or DEFAULT_NODE_ROLE_NAME
    if len(names) > 1 and "{clusterName}" not in role_template:
        raise ContextError(
            "context 'nodeRoleName' must contain '{clusterName}' when several clusters are deployed, "
            f"or every cluster would get the same node role (got {role_template!r})"
        )

    configs: list[ClusterConfig] = []
    for name in names:
        node_role_name = role_template.replace("{clusterName}", name)
        if not _IAM_ROLE_NAME.match(node_role_name):
            raise ContextError(
                f"node role name {node_role_name!r} (from context 'nodeRoleName') is not a valid IAM role "
                "name: at most 64 characters of letters, digits and +=,.@_-"
            )
        configs.append(
            ClusterConfig(
                cluster_name=name,
                node_role_name=node_role_name,
                import_node_role=_boolean(get, "importNodeRole", default=False),
                node_access_entry=_boolean(get, "nodeAccessEntry", default=True),
                interruption_rebalance=cast(Literal["event", "replace"], rebalance),
                memory_overrides_mb=dict(memory),
                log_retention_days=retention,
                log_level=log_level,
                alarm_email=alarm_email,
                tracing=_boolean(get, "tracing", default=False),
                dashboard=_boolean(get, "dashboard", default=True),
                account=_string(get, "account"),
                region=_string(get, "region"),
                network=network,
            )
        )

    stack_names = [config.stack_name for config in configs]
    clashes = sorted({n for n in stack_names if stack_names.count(n) > 1})
    if clashes:
        raise ContextError(
            f"cluster names {names} map to the same stack name(s) {clashes} ('_' becomes '-'); "
            "deploy them from separate apps"
        )
    return configs


def context_getter(values: Mapping[str, object]) -> ContextGetter:
    """A getter over a plain mapping, for tests and for app.py's own -c parsing."""
    return values.get
