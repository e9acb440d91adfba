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
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off", ""})

ContextGetter = Callable[[str], object]


class ContextError(ValueError):
    """A missing or invalid context value. The message names the key and how to pass it."""


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
    account: str | None = None
    region: str | None = None

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
                account=_string(get, "account"),
                region=_string(get, "region"),
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
