"""EKS access entries and authentication modes for the simulated account.

moto's EKS keeps clusters but has no access-entry API and drops a cluster's ``accessConfig``, so a node
role could only be granted through the ``aws-auth`` ConfigMap, and ``doctor``'s access-entry path could
not run against it. This module adds, in the API's own shapes:

- ``CreateAccessEntry``, ``ListAccessEntries``, ``DescribeAccessEntry`` and ``DeleteAccessEntry``;
- ``accessConfig.authenticationMode`` on ``CreateCluster``, ``DescribeCluster`` and
  ``UpdateClusterConfig``.

It follows EKS where doctor could be misled otherwise:

- ``resourcesVpcConfig`` as DescribeCluster reports it: the VPC of the subnets, a cluster security group
  EKS creates (all traffic from itself), and the endpoint access CreateCluster defaults to (public to
  0.0.0.0/0, private off); UpdateClusterConfig changes only the fields it is given (moto keeps the
  request's fields and replaces them all);

- a cluster created without ``accessConfig`` is in ``CONFIG_MAP`` mode (the API's default), and the
  access-entry calls fail on it with ``InvalidRequestException``;
- the mode changes one way only, ``CONFIG_MAP`` to ``API_AND_CONFIG_MAP`` to ``API``;
- an ``EC2_LINUX``/``EC2_WINDOWS`` entry takes neither ``kubernetesGroups`` nor ``username``: EKS maps it
  to ``system:node:{{EC2PrivateDNSName}}`` in ``system:nodes``; a principal has one entry at most.

The cluster's creator gets an access entry with ``AmazonEKSClusterAdminPolicy`` when
``bootstrapClusterCreatorAdminPermissions`` holds (the default), as EKS makes it.

Not modelled: the access-policy API (``AssociateAccessPolicy``; ``associatedPolicyArn`` filters nothing),
``UpdateAccessEntry``, tags, checking that the principal exists. :mod:`.eks_authn` maps the entries to
Kubernetes users for the simulated API server.

Importing this module installs it on moto (see :func:`install`); :mod:`serverless_karpenter_sim.cloud`
imports it, so every moto server the simulator starts answers it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from types import ModuleType
from typing import Any, cast

from moto.core.utils import utcnow

from serverless_karpenter_sim.iam_simulation import when_imported

API = "API"
API_AND_CONFIG_MAP = "API_AND_CONFIG_MAP"
CONFIG_MAP = "CONFIG_MAP"
# The order in which a cluster may move between modes: never back.
MODES = (CONFIG_MAP, API_AND_CONFIG_MAP, API)
NODE_TYPES = ("EC2_LINUX", "EC2_WINDOWS")
TYPES = ("STANDARD", "FARGATE_LINUX", "EC2", *NODE_TYPES, "HYBRID_LINUX", "HYPERPOD_LINUX")
NODE_USERNAME = "system:node:{{EC2PrivateDNSName}}"
CLUSTER_ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
DEFAULT_PAGE = 100


def _errors() -> Any:
    from moto.eks import exceptions

    return exceptions


def _cluster(response: Any) -> Any:
    # moto's own lookup, so a missing cluster fails as every other EKS call fails on it.
    return response.eks_backend.describe_cluster(name=response._get_param("name"))


def _mode(cluster: Any) -> str:
    return str(cluster.access_config["authenticationMode"])


def _entries(cluster: Any) -> dict[str, dict[str, Any]]:
    # Kept on moto's cluster, so that deleting the cluster or resetting moto drops its entries too.
    if "access_entries" not in vars(cluster):
        cluster.access_entries = {}
    entries: dict[str, dict[str, Any]] = cluster.access_entries
    return entries


def _require_api(cluster: Any) -> None:
    if _mode(cluster) == CONFIG_MAP:
        raise _errors().InvalidRequestException(
            clusterName=cluster.name,
            message="The cluster's authentication mode must be set to one of [API, API_AND_CONFIG_MAP] "
            "to perform this operation.",
        )


def _entry(response: Any, cluster: Any) -> dict[str, Any]:
    principal = response._get_param("principalArn")
    entry = _entries(cluster).get(principal)
    if entry is None:
        raise _errors().ResourceNotFoundException(
            clusterName=cluster.name,
            message=f"The specified principalArn could not be found: {principal}. You can view your "
            "available access entries with 'list-access-entries'.",
        )
    return entry


def _default_username(kind: str, principal: str) -> str:
    if kind in NODE_TYPES:
        return NODE_USERNAME
    # arn:aws:iam::<account>:role/<path/>name: a role is assumed, so EKS names the session.
    parts = principal.split(":", 5)
    if len(parts) == 6 and parts[5].startswith("role/"):
        role = parts[5].rsplit("/", 1)[-1]
        return f"arn:{parts[1]}:sts::{parts[4]}:assumed-role/{role}/{{{{SessionName}}}}"
    return principal


def _create_access_entry(self: Any) -> Any:
    from moto.core.responses import ActionResult

    errors = _errors()
    cluster = _cluster(self)
    _require_api(cluster)
    principal = str(self._get_param("principalArn") or "")
    if not principal.startswith("arn:"):
        raise errors.InvalidParameterException(
            clusterName=cluster.name, message=f"principalArn {principal!r} is not an IAM principal ARN"
        )
    entries = _entries(cluster)
    if principal in entries:
        raise errors.ResourceInUseException(
            clusterName=cluster.name,
            message=f"The specified access entry resource is already in use on this cluster: {principal}",
        )
    kind = str(self._get_param("type") or "STANDARD")
    if kind not in TYPES:
        raise errors.InvalidParameterException(
            clusterName=cluster.name, message=f"type {kind!r} is not one of {', '.join(TYPES)}"
        )
    groups = list(self._get_param("kubernetesGroups") or [])
    username = self._get_param("username")
    if kind != "STANDARD" and (groups or username):
        raise errors.InvalidParameterException(
            clusterName=cluster.name,
            message=f"kubernetesGroups and username cannot be set on an access entry of type {kind}",
        )
    now = utcnow()
    account, name = principal.split(":")[4], principal.rsplit("/", 1)[-1]
    entry = {
        "clusterName": cluster.name,
        "principalArn": principal,
        "kubernetesGroups": ["system:nodes"] if kind in NODE_TYPES else groups,
        "accessEntryArn": cluster.arn.replace(":cluster/", ":access-entry/", 1)
        + f"/{principal.split(':')[5].split('/', 1)[0]}/{account}/{name}/{uuid.uuid4()}",
        "createdAt": now,
        "modifiedAt": now,
        "tags": dict(self._get_param("tags") or {}),
        "username": username or _default_username(kind, principal),
        "type": kind,
    }
    entries[principal] = entry
    return ActionResult({"accessEntry": entry})


def _list_access_entries(self: Any) -> Any:
    from moto.core.responses import ActionResult

    cluster = _cluster(self)
    _require_api(cluster)
    principals = sorted(_entries(cluster))
    start = int(self._get_param("nextToken") or 0)
    end = start + int(self._get_param("maxResults") or DEFAULT_PAGE)
    result: dict[str, Any] = {"accessEntries": principals[start:end]}
    if end < len(principals):
        result["nextToken"] = str(end)
    return ActionResult(result)


def _describe_access_entry(self: Any) -> Any:
    from moto.core.responses import ActionResult

    cluster = _cluster(self)
    _require_api(cluster)
    return ActionResult({"accessEntry": _entry(self, cluster)})


def _delete_access_entry(self: Any) -> Any:
    from moto.core.responses import ActionResult

    cluster = _cluster(self)
    _require_api(cluster)
    del _entries(cluster)[_entry(self, cluster)["principalArn"]]
    return ActionResult({})


@dataclass(frozen=True)
class IssuedKey:
    """An access key moto issued, and to whom: an assumed role's role, or an IAM user."""

    principal_arn: str
    account: str
    session_name: str  # the role session's name, or the user's
    secret_access_key: str


def issued_key(access_key: str) -> IssuedKey | None:
    from moto.iam.models import iam_backends
    from moto.sts.models import sts_backends

    for account, sts_by_partition in list(sts_backends.items()):
        for sts in list(sts_by_partition.values()):
            role = sts.get_assumed_role_from_access_key(access_key)
            if role is not None:
                return IssuedKey(role.role_arn, account, role.session_name, role.secret_access_key)
    for account, iam_by_partition in list(iam_backends.items()):
        for iam in list(iam_by_partition.values()):
            user = iam.get_user_from_access_key_id(access_key)
            if user is None:
                continue
            key = next(k for k in iam.list_access_keys(user.name) if k.access_key_id == access_key)
            return IssuedKey(user.arn, account, user.name, key.secret_access_key)
    return None


def _grant_creator_admin(cluster: Any, principal: str) -> None:
    """What ``bootstrapClusterCreatorAdminPermissions`` does: the creator's access entry, with the cluster
    admin access policy (in any mode: EKS keeps it for when the mode moves to the API)."""
    now = utcnow()
    account, name = principal.split(":")[4], principal.rsplit("/", 1)[-1]
    _entries(cluster)[principal] = {
        "clusterName": cluster.name,
        "principalArn": principal,
        "kubernetesGroups": [],
        "accessEntryArn": cluster.arn.replace(":cluster/", ":access-entry/", 1)
        + f"/{principal.split(':')[5].split('/', 1)[0]}/{account}/{name}/{uuid.uuid4()}",
        "createdAt": now,
        "modifiedAt": now,
        "tags": {},
        "username": _default_username("STANDARD", principal),
        "type": "STANDARD",
    }
    cluster.access_policies = {principal: [CLUSTER_ADMIN_POLICY]}


def has_cluster_admin_policy(cluster: Any, principal: str) -> bool:
    return CLUSTER_ADMIN_POLICY in (vars(cluster).get("access_policies") or {}).get(principal, [])


def _set_mode(cluster: Any, mode: str) -> None:
    current = _mode(cluster)
    if mode not in MODES:
        raise _errors().InvalidParameterException(
            clusterName=cluster.name,
            message=f"authenticationMode {mode!r} is not one of {', '.join(MODES)}",
        )
    if MODES.index(mode) < MODES.index(current):
        raise _errors().InvalidRequestException(
            clusterName=cluster.name,
            message=f"Unsupported authentication mode update from {current} to {mode}",
        )
    cluster.access_config = {**cluster.access_config, "authenticationMode": mode}


def _vpc_config(response: Any, cluster: Any, requested: dict[str, Any]) -> dict[str, Any]:
    """``resourcesVpcConfig`` as EKS reports it for a cluster created with ``requested``."""
    from moto.ec2.models import ec2_backends

    ec2 = ec2_backends[response.current_account][response.region]
    subnets = list(requested.get("subnetIds") or [])
    vpc_id = ec2.get_subnet(subnets[0]).vpc_id if subnets else None
    group = ec2.create_security_group(
        name=f"eks-cluster-sg-{cluster.name}-{uuid.uuid4().hex[:10]}",
        description="EKS created security group applied to ENI that is attached to EKS Control Plane master "
        "nodes, as well as any managed workloads.",
        vpc_id=vpc_id,
        tags={"aws:eks:cluster-name": cluster.name},
    )
    # All traffic (no ports) from the group itself, as EKS creates it.
    no_port = cast(str, None)
    ec2.authorize_security_group_ingress(
        group.id, "-1", no_port, no_port, [], source_groups=[{"GroupId": group.id}]
    )
    return {
        "subnetIds": subnets,
        "securityGroupIds": list(requested.get("securityGroupIds") or []),
        "clusterSecurityGroupId": group.id,
        "vpcId": vpc_id,
        "endpointPublicAccess": requested.get("endpointPublicAccess", True),
        "endpointPrivateAccess": requested.get("endpointPrivateAccess", False),
        "publicAccessCidrs": list(requested.get("publicAccessCidrs") or ["0.0.0.0/0"]),
    }


def register(urls: ModuleType) -> None:
    """Add the calls to moto's EKS responses and their routes to its URLs (moto builds its server's routes
    from ``url_paths`` when the first EKS request comes)."""
    from moto.eks import models

    eks = urls.EKSResponse
    if getattr(eks, "create_access_entry", None) is _create_access_entry:
        return  # registered already: wrapping create_cluster twice would be harmless, but pointless
    # What DescribeCluster reports for a cluster created without accessConfig: CreateCluster's default.
    # A class attribute, never changed in place: each cluster sets its own when its mode is set.
    setattr(  # noqa: B010  (moto's class does not declare it)
        models.Cluster,
        "access_config",
        {"authenticationMode": CONFIG_MAP, "bootstrapClusterCreatorAdminPermissions": True},
    )
    create_cluster, update_cluster_config = eks.create_cluster, eks.update_cluster_config

    def create_cluster_with_access(self: Any) -> Any:
        result = create_cluster(self)
        requested = self._get_param("accessConfig") or {}
        cluster = self.eks_backend.clusters[self._get_param("name")]
        cluster.resources_vpc_config = _vpc_config(self, cluster, dict(cluster.resources_vpc_config or {}))
        bootstrap_admin = requested.get("bootstrapClusterCreatorAdminPermissions", True)
        cluster.access_config = {
            "authenticationMode": CONFIG_MAP,
            "bootstrapClusterCreatorAdminPermissions": bootstrap_admin,
        }
        if requested.get("authenticationMode"):
            _set_mode(cluster, str(requested["authenticationMode"]))
        creator = issued_key(self.get_access_key())
        if bootstrap_admin and creator is not None:
            _grant_creator_admin(cluster, creator.principal_arn)
        return result

    def update_cluster_config_with_access(self: Any) -> Any:
        requested = self._get_param("accessConfig") or {}
        cluster = _cluster(self)
        if requested.get("authenticationMode"):
            _set_mode(cluster, str(requested["authenticationMode"]))
        before = dict(cluster.resources_vpc_config or {})
        result = update_cluster_config(self)
        cluster.resources_vpc_config = {**before, **(self._get_param("resourcesVpcConfig") or {})}
        return result

    # moto looks each action's method up on the class at each request, so setting them is enough.
    for name, method in {
        "create_cluster": create_cluster_with_access,
        "update_cluster_config": update_cluster_config_with_access,
        "create_access_entry": _create_access_entry,
        "list_access_entries": _list_access_entries,
        "describe_access_entry": _describe_access_entry,
        "delete_access_entry": _delete_access_entry,
    }.items():
        setattr(eks, name, method)
    urls.url_paths.update(
        {
            "{0}/clusters/(?P<name>[^/]+)/access-entries$": eks.dispatch,
            # The principal's ARN has slashes (role/path/name), which arrive decoded.
            "{0}/clusters/(?P<name>[^/]+)/access-entries/(?P<principalArn>.+)$": eks.dispatch,
        }
    )


def install() -> None:
    """Make moto answer the access-entry calls in this process, now or when its EKS is first loaded."""
    when_imported("moto.eks.urls", register)


install()
