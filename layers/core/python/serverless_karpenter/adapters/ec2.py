"""EC2 adapters: EC2NodeClass resolution, launch templates, CreateFleet, and instances by tag."""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from serverless_karpenter import amifamily
from serverless_karpenter.api import labels as wk
from serverless_karpenter.api.ec2nodeclass import ami_family_for
from serverless_karpenter.scheduling.resources import parse

# CreateFleet error codes that mean "this offering has no capacity now" (Karpenter's list).
UNFULFILLABLE_CAPACITY_ERRORS = frozenset(
    {
        "InsufficientInstanceCapacity",
        "MaxSpotInstanceCountExceeded",
        "VcpuLimitExceeded",
        "UnfulfillableCapacity",
        "Unsupported",
        "InsufficientFreeAddressesInSubnet",
        "ReservationCapacityExceeded",
    }
)
# CreateFleet's answer to a spot request when the account lacks the EC2 Spot service-linked role and the
# caller may not create it: no spot launch can succeed until someone creates the role.
SPOT_SERVICE_LINKED_ROLE_ERROR = "AuthFailure.ServiceLinkedRoleCreationNotPermitted"
LAUNCH_TEMPLATE_PREFIX = "karpenter.k8s.aws"
# The tag Karpenter puts on its launch templates; unused ones are found (and deleted) by it.
LAUNCH_TEMPLATE_CLUSTER_TAG = "karpenter.k8s.aws/cluster"
# DescribeInstances takes at most 200 values in one filter.
_FILTER_VALUES_MAX = 200


class NodeClassResolutionError(ValueError):
    """An EC2NodeClass could not be resolved because AWS refused or failed a call for it (a ValueError, as
    every other reason a node class is not ready: callers skip that one node class, not the whole pass)."""

    def __init__(self, nodeclass: str, error: ClientError) -> None:
        details = error.response.get("Error") or {}
        operation = getattr(error, "operation_name", "") or "a call"
        self.code = str(details.get("Code") or "")
        super().__init__(
            f'EC2NodeClass "{nodeclass}": {operation} failed ({self.code}): {details.get("Message") or error}'
        )


@dataclass(frozen=True)
class Subnet:
    id: str
    zone: str
    zone_id: str | None
    available_ips: int


@dataclass(frozen=True)
class SecurityGroup:
    id: str
    name: str


@dataclass(frozen=True)
class Image:
    id: str
    name: str
    arch: str  # amd64 | arm64
    creation_date: str = ""


@dataclass(frozen=True)
class ResolvedNodeClass:
    name: str
    subnets: list[Subnet]
    security_group_ids: list[str]
    amis: dict[str, str]  # arch -> image id
    ami_family: str
    instance_profile: str | None
    tags: dict[str, str] = field(default_factory=dict)
    user_data: str | None = None
    metadata_options: dict[str, Any] = field(default_factory=dict)
    block_device_mappings: list[dict[str, Any]] = field(default_factory=list)
    detailed_monitoring: bool = False
    associate_public_ip: bool | None = None
    kubelet: dict[str, Any] = field(default_factory=dict)
    # What the EC2NodeClass status reports (names beside the ids).
    security_groups: list[SecurityGroup] = field(default_factory=list)
    images: list[Image] = field(default_factory=list)
    role: str | None = None

    @property
    def zones(self) -> list[str]:
        return sorted({s.zone for s in self.subnets})

    def subnet_for_zone(self, zone: str) -> Subnet | None:
        """Karpenter's choice: the subnet in the zone with the most free addresses."""
        candidates = [s for s in self.subnets if s.zone == zone]
        return max(candidates, key=lambda s: (s.available_ips, s.id)) if candidates else None


@dataclass(frozen=True)
class Instance:
    id: str
    instance_type: str
    zone: str
    state: str
    capacity_type: str
    launch_time: datetime
    tags: dict[str, str]
    private_dns_name: str
    image_id: str | None
    launch_template: str | None = None  # known right after CreateFleet only
    # Its network as EC2 reports it now (drift by subnet or security group).
    subnet_id: str | None = None
    security_group_ids: frozenset[str] = frozenset()

    @property
    def provider_id(self) -> str:
        return f"aws:///{self.zone}/{self.id}"


@dataclass(frozen=True)
class FleetError:
    code: str
    message: str
    instance_type: str | None
    zone: str | None
    capacity_type: str


class LaunchError(Exception):
    def __init__(self, message: str, errors: list[FleetError]) -> None:
        super().__init__(message)
        self.errors = errors

    @property
    def unavailable_offerings(self) -> list[FleetError]:
        return [e for e in self.errors if e.code in UNFULFILLABLE_CAPACITY_ERRORS and e.instance_type]

    @property
    def spot_service_linked_role_missing(self) -> bool:
        return any(e.code == SPOT_SERVICE_LINKED_ROLE_ERROR for e in self.errors)


@dataclass(frozen=True)
class LaunchRequest:
    nodeclaim: str
    nodepool: str
    capacity_type: str
    # (instance type, zone, arch), cheapest first; the launch (lifecycle.launch) has already cut them to
    # the instance types CreateFleet may be offered.
    overrides: list[tuple[str, str, str]]
    bootstrap: amifamily.NodeBootstrap
    # Pods each instance type takes: the kubelet's maxPods, so one launch template per distinct value.
    max_pods: Mapping[str, int] = field(default_factory=dict)
    # ClientToken; a retry of a failed fleet within one launch needs a fresh one (EC2 would answer the
    # first request's result again).
    client_token: str | None = None


def _tag_filters(tags: Mapping[str, str]) -> list[dict[str, Any]]:
    filters = []
    for key, value in tags.items():
        if value == "*":
            filters.append({"Name": "tag-key", "Values": [key]})
        else:
            filters.append({"Name": f"tag:{key}", "Values": [value]})
    return filters


def _tags(tags: Iterable[Mapping[str, str]] | None) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in tags or []}


# Karpenter's cache TTL for what subnet, security-group and AMI selectors resolve to: a change in EC2
# (a new AMI behind an alias, a newly tagged subnet) is seen within a minute, and a pass that resolves
# every EC2NodeClass (the provisioner does each invocation, the lifecycle reconcile again) costs no API
# calls in between.
RESOLVE_TTL = timedelta(minutes=1)


class NodeClassResolver:
    """Turns an EC2NodeClass's selector terms into subnets, security groups, AMIs and a profile.

    Results are cached for :data:`RESOLVE_TTL` per (name, spec): an edited spec resolves afresh at once.
    Failures are not cached, so a fixed set-up is seen on the next pass.
    """

    def __init__(
        self,
        ec2: Any,
        ssm: Any,
        iam: Any,
        cluster_name: str,
        kubernetes_version: str,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self._ec2 = ec2
        self._ssm = ssm
        self._iam = iam
        self._cluster = cluster_name
        self._k8s_version = kubernetes_version
        self._now = now
        self._cache: dict[tuple[str, str, bool], tuple[datetime, ResolvedNodeClass]] = {}

    def resolve(
        self, nodeclass: Mapping[str, Any], *, manage_instance_profile: bool = True
    ) -> ResolvedNodeClass:
        """The node class's subnets, security groups, AMIs and instance profile. Only the function that
        launches (the provisioner) manages the instance profile of a ``spec.role``; a reader (disruption,
        whose role may not create profiles) names the profile without creating or changing it."""
        if self._now is None:
            return self._resolve_or_raise(nodeclass, manage_instance_profile)
        key = (
            nodeclass["metadata"]["name"],
            json.dumps(nodeclass.get("spec") or {}, sort_keys=True),
            manage_instance_profile,
        )
        now = self._now()
        cached = self._cache.get(key)
        if cached is not None and now - cached[0] < RESOLVE_TTL:
            return cached[1]
        resolved = self._resolve_or_raise(nodeclass, manage_instance_profile)
        # One entry per EC2NodeClass and mode: an older spec's entry is dropped, not left to grow the cache.
        self._cache = {k: v for k, v in self._cache.items() if k[0] != key[0] or k[2] != key[2]}
        self._cache[key] = (now, resolved)
        return resolved

    def _resolve_or_raise(
        self, nodeclass: Mapping[str, Any], manage_instance_profile: bool
    ) -> ResolvedNodeClass:
        try:
            return self._resolve(nodeclass, manage_instance_profile)
        except ClientError as error:  # refused (AccessDenied) or failed: this node class is not ready
            raise NodeClassResolutionError(str(nodeclass["metadata"]["name"]), error) from error

    def _resolve(self, nodeclass: Mapping[str, Any], manage_instance_profile: bool) -> ResolvedNodeClass:
        spec = nodeclass.get("spec") or {}
        name = nodeclass["metadata"]["name"]
        subnets = self.subnets(spec.get("subnetSelectorTerms") or [])
        if not subnets:
            raise ValueError(f'EC2NodeClass "{name}": spec.subnetSelectorTerms: no subnet matches')
        security_groups = self.security_group_details(spec.get("securityGroupSelectorTerms") or [])
        if not security_groups:
            raise ValueError(
                f'EC2NodeClass "{name}": spec.securityGroupSelectorTerms: no security group matches'
            )
        family, images = self.images(spec.get("amiSelectorTerms") or [], spec.get("amiFamily"))
        if not images:
            raise ValueError(f'EC2NodeClass "{name}": spec.amiSelectorTerms: no AMI resolves')
        amis: dict[str, str] = {}
        for image in images:  # newest first: the first per arch is the one launched
            amis.setdefault(image.arch, image.id)
        user_data = spec.get("userData")
        if family == "Bottlerocket" and user_data:
            try:
                tomllib.loads(user_data)
            except tomllib.TOMLDecodeError as error:
                raise ValueError(
                    f'EC2NodeClass "{name}": spec.userData: Bottlerocket user data must be TOML ({error})'
                ) from error
        return ResolvedNodeClass(
            name=name,
            subnets=subnets,
            security_group_ids=sorted(g.id for g in security_groups),
            amis=amis,
            ami_family=family,
            instance_profile=(
                self.instance_profile(name, spec)
                if manage_instance_profile
                else self.instance_profile_of(name, spec)
            ),
            tags=dict(spec.get("tags") or {}),
            user_data=user_data,
            metadata_options={
                "HttpEndpoint": "enabled",
                "HttpProtocolIpv6": "disabled",
                "HttpPutResponseHopLimit": 1,
                "HttpTokens": "required",
                **_metadata_options(spec.get("metadataOptions") or {}),
            },
            block_device_mappings=list(
                spec.get("blockDeviceMappings") or amifamily.DEFAULT_BLOCK_DEVICE_MAPPINGS.get(family, [])
            ),
            detailed_monitoring=bool(spec.get("detailedMonitoring")),
            associate_public_ip=spec.get("associatePublicIPAddress"),
            kubelet=dict(spec.get("kubelet") or {}),
            security_groups=security_groups,
            images=images,
            role=spec.get("role"),
        )

    def subnets(self, terms: list[Mapping[str, Any]]) -> list[Subnet]:
        found: dict[str, Subnet] = {}
        for term in terms:
            kwargs: dict[str, Any] = {}
            if term.get("id"):
                kwargs["SubnetIds"] = [term["id"]]
            if term.get("tags"):
                kwargs["Filters"] = _tag_filters(term["tags"])
            for page in self._ec2.get_paginator("describe_subnets").paginate(**kwargs):
                for s in page["Subnets"]:
                    found[s["SubnetId"]] = Subnet(
                        s["SubnetId"],
                        s["AvailabilityZone"],
                        s.get("AvailabilityZoneId"),
                        int(s.get("AvailableIpAddressCount", 0)),
                    )
        # Most free addresses first, the order Karpenter reports them in.
        return sorted(found.values(), key=lambda s: (-s.available_ips, s.id))

    def security_group_details(self, terms: list[Mapping[str, Any]]) -> list[SecurityGroup]:
        found: dict[str, SecurityGroup] = {}
        for term in terms:
            kwargs: dict[str, Any] = {}
            filters = _tag_filters(term.get("tags") or {})
            if term.get("id"):
                kwargs["GroupIds"] = [term["id"]]
            if term.get("name"):
                filters.append({"Name": "group-name", "Values": [term["name"]]})
            if filters:
                kwargs["Filters"] = filters
            for page in self._ec2.get_paginator("describe_security_groups").paginate(**kwargs):
                for group in page["SecurityGroups"]:
                    found[group["GroupId"]] = SecurityGroup(group["GroupId"], group.get("GroupName", ""))
        return sorted(found.values(), key=lambda g: g.id)

    def security_groups(self, terms: list[Mapping[str, Any]]) -> list[str]:
        return [g.id for g in self.security_group_details(terms)]

    def images(self, terms: list[Mapping[str, Any]], ami_family: str | None) -> tuple[str, list[Image]]:
        """The AMI family and the images the terms select, newest first."""
        found: dict[str, Image] = {}
        for term in terms:
            if term.get("alias"):
                # An alias stands alone (the API forbids other terms beside it); it sets the family
                # unless spec.amiFamily does (Custom with an alias: the AMIs, not the bootstrap).
                family_name, _, version = str(term["alias"]).partition("@")
                return ami_family_for(ami_family, family_name), self._alias_images(family_name, version)
            kwargs: dict[str, Any] = {}
            filters = _tag_filters(term.get("tags") or {})
            if term.get("id"):
                kwargs["ImageIds"] = [term["id"]]
            if term.get("name"):
                filters.append({"Name": "name", "Values": [term["name"]]})
                # A name alone could be anybody's image: Karpenter looks in this account and Amazon's.
                kwargs["Owners"] = [term["owner"]] if term.get("owner") else ["self", "amazon"]
            elif term.get("owner"):
                kwargs["Owners"] = [term["owner"]]
            if filters:
                kwargs["Filters"] = filters
            for image in self._ec2.describe_images(**kwargs)["Images"]:
                found[image["ImageId"]] = _image(image)
        return ami_family_for(ami_family, None), sorted(
            found.values(), key=lambda i: (i.creation_date, i.id), reverse=True
        )

    def amis(self, terms: list[Mapping[str, Any]], ami_family: str | None) -> tuple[str, dict[str, str]]:
        family, images = self.images(terms, ami_family)
        amis: dict[str, str] = {}
        for image in images:
            amis.setdefault(image.arch, image.id)
        return family, amis

    def _alias_images(self, family_name: str, version: str) -> list[Image]:
        """EKS's public SSM parameters name the AMI per Kubernetes version, arch and release."""
        ids: dict[str, str] = {}
        for arch in ("amd64", "arm64"):
            path = amifamily.ssm_parameter_for_alias(
                family_name, version or "latest", self._k8s_version, arch
            )
            try:
                ids[arch] = self._ssm.get_parameter(Name=path)["Parameter"]["Value"]
            except ClientError as error:
                if error.response["Error"]["Code"] != "ParameterNotFound":
                    raise
        details: dict[str, Mapping[str, Any]] = {}
        if ids:
            try:
                described = self._ec2.describe_images(ImageIds=sorted(set(ids.values())))["Images"]
                details = {i["ImageId"]: i for i in described}
            except ClientError as error:
                if "NotFound" not in error.response["Error"]["Code"]:
                    raise
        # The parameter's arch is authoritative (it is in the path); the image adds name and date.
        return [
            Image(
                id=image_id,
                name=str(details.get(image_id, {}).get("Name", "")),
                arch=arch,
                creation_date=str(details.get(image_id, {}).get("CreationDate", "")),
            )
            for arch, image_id in ids.items()
        ]

    def instance_profile_name(self, nodeclass_name: str) -> str:
        digest = hashlib.sha256(f"{self._cluster}/{nodeclass_name}".encode()).hexdigest()[:16]
        return f"{self._cluster}_{digest}"[:128]

    def instance_profile_of(self, nodeclass_name: str, spec: Mapping[str, Any]) -> str | None:
        """The profile ``instance_profile`` uses, named without an IAM call."""
        if spec.get("instanceProfile"):
            return str(spec["instanceProfile"])
        return self.instance_profile_name(nodeclass_name) if spec.get("role") else None

    def instance_profile(self, nodeclass_name: str, spec: Mapping[str, Any]) -> str | None:
        """``instanceProfile`` is used as given; ``role`` gets a profile we create and keep on that role."""
        if spec.get("instanceProfile"):
            return str(spec["instanceProfile"])
        role = spec.get("role")
        if not role:
            return None
        role_name = str(role).split("/")[-1]
        name = self.instance_profile_name(nodeclass_name)
        try:
            profile = self._iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
        except ClientError as error:
            if error.response["Error"]["Code"] != "NoSuchEntity":
                raise
            self._iam.create_instance_profile(
                InstanceProfileName=name,
                # The stack's IAM policy allows creating a profile only with these request tags
                # (Karpenter's conditions), so they must all be here.
                Tags=[
                    {"Key": f"{wk.TAG_CLUSTER_PREFIX}{self._cluster}", "Value": "owned"},
                    {"Key": wk.TAG_EKS_CLUSTER_NAME, "Value": self._cluster},
                    {"Key": wk.REGION, "Value": self._ec2.meta.region_name},
                    {"Key": LAUNCH_TEMPLATE_CLUSTER_TAG, "Value": self._cluster},
                    {"Key": wk.EC2NODECLASS, "Value": nodeclass_name},
                ],
            )
            profile = {"Roles": []}
        roles = [r["RoleName"] for r in profile.get("Roles") or []]
        if roles != [role_name]:
            # The node class's role changed: a profile holds one role, so swap it.
            for old in roles:
                self._iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=old)
            self._iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=role_name)
        return name


def _image(raw: Mapping[str, Any]) -> Image:
    arch = {"x86_64": "amd64", "arm64": "arm64"}.get(raw.get("Architecture", "x86_64"), "amd64")
    return Image(raw["ImageId"], raw.get("Name", ""), arch, raw.get("CreationDate", ""))


def _metadata_options(options: Mapping[str, Any]) -> dict[str, Any]:
    mapping = {
        "httpEndpoint": "HttpEndpoint",
        "httpProtocolIPv6": "HttpProtocolIpv6",
        "httpPutResponseHopLimit": "HttpPutResponseHopLimit",
        "httpTokens": "HttpTokens",
    }
    return {mapping[k]: v for k, v in options.items() if k in mapping}


def _is_launch_template_not_found(error: ClientError) -> bool:
    code = error.response["Error"]["Code"]
    return "LaunchTemplate" in code and ("NotFound" in code or "NotFoundException" in code)


class FleetLauncher:
    """Launch templates (one per distinct option set, named by a hash) and CreateFleet `instant`."""

    def __init__(self, ec2: Any, cluster_name: str, cluster: amifamily.ClusterInfo) -> None:
        self._ec2 = ec2
        self._cluster_name = cluster_name
        self._cluster = cluster
        self._known_templates: set[str] = set()
        # When the lifecycle pass last looked for unused templates (it rate-limits itself with this).
        self.last_template_sweep: datetime | None = None

    @property
    def ec2(self) -> Any:
        """The EC2 client (tests hook its events to see the requests made)."""
        return self._ec2

    def cluster_tags(self) -> dict[str, str]:
        return {
            f"{wk.TAG_CLUSTER_PREFIX}{self._cluster_name}": "owned",
            wk.TAG_EKS_CLUSTER_NAME: self._cluster_name,
        }

    def instance_tags(self, request: LaunchRequest, nodeclass: ResolvedNodeClass) -> dict[str, str]:
        return {
            wk.TAG_NAME: f"{request.nodepool}/{request.nodeclaim}",
            **nodeclass.tags,
            **self.cluster_tags(),
            wk.NODEPOOL: request.nodepool,
            wk.NODECLAIM: request.nodeclaim,
            wk.EC2NODECLASS: nodeclass.name,
        }

    def network_interface_tags(
        self, nodeclass: ResolvedNodeClass, bootstrap: amifamily.NodeBootstrap
    ) -> dict[str, str]:
        """What a launch tags the instance's network interfaces with: its instance's tags but the claim's."""
        tags = {**nodeclass.tags, **self.cluster_tags(), wk.EC2NODECLASS: nodeclass.name}
        nodepool = bootstrap.labels.get(wk.NODEPOOL)
        if nodepool:
            tags[wk.NODEPOOL] = nodepool
        return tags

    def _template_data(
        self, nodeclass: ResolvedNodeClass, arch: str, bootstrap: amifamily.NodeBootstrap
    ) -> dict[str, Any]:
        node = replace(
            bootstrap,
            kubelet={**nodeclass.kubelet, **bootstrap.kubelet},
            custom_user_data=bootstrap.custom_user_data or nodeclass.user_data,
        )
        user_data = amifamily.render_user_data(nodeclass.ami_family, self._cluster, node)
        data: dict[str, Any] = {
            "ImageId": nodeclass.amis[arch],
            "UserData": amifamily.encode(user_data),
            "MetadataOptions": nodeclass.metadata_options,
            "Monitoring": {"Enabled": nodeclass.detailed_monitoring},
        }
        if nodeclass.associate_public_ip is None:
            data["SecurityGroupIds"] = nodeclass.security_group_ids
        else:
            # The public-address choice lives on the primary interface, which then carries the groups.
            data["NetworkInterfaces"] = [
                {
                    "DeviceIndex": 0,
                    "AssociatePublicIpAddress": bool(nodeclass.associate_public_ip),
                    "Groups": nodeclass.security_group_ids,
                }
            ]
        if nodeclass.instance_profile:
            data["IamInstanceProfile"] = {"Name": nodeclass.instance_profile}
        # A launch creates the instance's network interface too, and the stack's policy (Karpenter's) lets
        # RunInstances/CreateFleet create one only with this cluster's and a NodePool's tags on the request.
        # CreateFleet cannot tag network interfaces, so the template does, as Karpenter's templates do.
        data["TagSpecifications"] = [
            {
                "ResourceType": "network-interface",
                "Tags": [
                    {"Key": k, "Value": v}
                    for k, v in self.network_interface_tags(nodeclass, bootstrap).items()
                ],
            }
        ]
        if nodeclass.block_device_mappings:
            data["BlockDeviceMappings"] = [_block_device(b) for b in nodeclass.block_device_mappings]
        return data

    def launch_template_name(
        self, nodeclass: ResolvedNodeClass, arch: str, bootstrap: amifamily.NodeBootstrap
    ) -> str:
        """The template's name is the hash of its content: equal option sets share one."""
        return self._name_for(self._template_data(nodeclass, arch, bootstrap))

    def _name_for(self, data: Mapping[str, Any]) -> str:
        digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:20]
        return f"{LAUNCH_TEMPLATE_PREFIX}/{self._cluster_name}/{digest}"

    def ensure_launch_template(
        self, nodeclass: ResolvedNodeClass, arch: str, bootstrap: amifamily.NodeBootstrap
    ) -> str:
        data = self._template_data(nodeclass, arch, bootstrap)
        name = self._name_for(data)
        if name in self._known_templates:
            return name
        tags = {
            **nodeclass.tags,
            **self.cluster_tags(),
            LAUNCH_TEMPLATE_CLUSTER_TAG: self._cluster_name,
            wk.EC2NODECLASS: nodeclass.name,
        }
        try:
            self._ec2.create_launch_template(
                LaunchTemplateName=name,
                LaunchTemplateData=data,
                TagSpecifications=[
                    {
                        "ResourceType": "launch-template",
                        "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                    }
                ],
            )
        except ClientError as error:
            if error.response["Error"]["Code"] not in ("InvalidLaunchTemplateName.AlreadyExistsException",):
                raise
        self._known_templates.add(name)
        return name

    def forget_launch_templates(self) -> None:
        """After a NotFound, re-create templates lazily on the next launch."""
        self._known_templates.clear()

    def _launchable(
        self, request: LaunchRequest, nodeclass: ResolvedNodeClass
    ) -> list[tuple[str, str, str, Subnet]]:
        """The request's overrides in zones that have a subnet, for arches with an AMI."""
        return [
            (instance_type, zone, arch, subnet)
            for instance_type, zone, arch in request.overrides
            if arch in nodeclass.amis and (subnet := nodeclass.subnet_for_zone(zone)) is not None
        ]

    def _template_groups(
        self, request: LaunchRequest, nodeclass: ResolvedNodeClass
    ) -> dict[tuple[str, int | None], list[tuple[str, str, Subnet]]]:
        """The launchable overrides per template option set: (arch, maxPods)."""
        groups: dict[tuple[str, int | None], list[tuple[str, str, Subnet]]] = {}
        for instance_type, zone, arch, subnet in self._launchable(request, nodeclass):
            key = (arch, request.max_pods.get(instance_type) or None)
            groups.setdefault(key, []).append((instance_type, zone, subnet))
        return groups

    def _group_bootstrap(self, request: LaunchRequest, max_pods: int | None) -> amifamily.NodeBootstrap:
        return replace(request.bootstrap, max_pods=max_pods) if max_pods else request.bootstrap

    def launch_template_names(self, request: LaunchRequest, nodeclass: ResolvedNodeClass) -> set[str]:
        """The templates a launch of ``request`` uses (without creating them)."""
        return {
            self.launch_template_name(nodeclass, arch, self._group_bootstrap(request, max_pods))
            for arch, max_pods in self._template_groups(request, nodeclass)
        }

    def _fleet_request(self, request: LaunchRequest, nodeclass: ResolvedNodeClass) -> dict[str, Any]:
        configs: dict[str, dict[str, Any]] = {}
        for (arch, max_pods), overrides in self._template_groups(request, nodeclass).items():
            template = self.ensure_launch_template(nodeclass, arch, self._group_bootstrap(request, max_pods))
            config = configs.setdefault(
                template,
                {
                    "LaunchTemplateSpecification": {"LaunchTemplateName": template, "Version": "$Latest"},
                    "Overrides": [],
                },
            )
            config["Overrides"].extend(
                {"InstanceType": instance_type, "SubnetId": subnet.id, "AvailabilityZone": zone}
                for instance_type, zone, subnet in overrides
            )
        if not configs:
            raise LaunchError(
                f"nodeclaim {request.nodeclaim}: no launchable offering (subnet and AMI per zone and arch)",
                [],
            )
        tags = [{"Key": k, "Value": v} for k, v in self.instance_tags(request, nodeclass).items()]
        spot = request.capacity_type == wk.CAPACITY_TYPE_SPOT
        kwargs: dict[str, Any] = {
            "Type": "instant",
            "ClientToken": request.client_token or request.nodeclaim,
            "LaunchTemplateConfigs": list(configs.values()),
            "TargetCapacitySpecification": {
                "TotalTargetCapacity": 1,
                "DefaultTargetCapacityType": "spot" if spot else "on-demand",
            },
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tags},
                {"ResourceType": "volume", "Tags": tags},
                {"ResourceType": "fleet", "Tags": tags},
            ],
        }
        if spot:
            kwargs["SpotOptions"] = {"AllocationStrategy": "price-capacity-optimized"}
        else:
            kwargs["OnDemandOptions"] = {"AllocationStrategy": "lowest-price"}
        return kwargs

    def _create_fleet(self, request: LaunchRequest, nodeclass: ResolvedNodeClass) -> dict[str, Any]:
        try:
            response: dict[str, Any] = self._ec2.create_fleet(**self._fleet_request(request, nodeclass))
        except ClientError as error:
            if not _is_launch_template_not_found(error):
                raise
            # A template we thought existed was deleted (by hand, or by the unused-template sweep of
            # another writer): forget what we know and re-create it, once.
            self.forget_launch_templates()
            response = self._ec2.create_fleet(**self._fleet_request(request, nodeclass))
        return response

    def launch(self, request: LaunchRequest, nodeclass: ResolvedNodeClass) -> Instance:
        try:
            response = self._create_fleet(request, nodeclass)
        except ClientError as error:
            code = error.response["Error"]["Code"]
            if code != SPOT_SERVICE_LINKED_ROLE_ERROR:
                raise
            # EC2 may refuse the whole request rather than list the error per override; the launch path
            # reacts to it the same way either way.
            message = error.response["Error"].get("Message", "")
            raise LaunchError(
                f"nodeclaim {request.nodeclaim}: CreateFleet refused ({code}): {message}",
                [FleetError(code, message, None, None, request.capacity_type)],
            ) from error
        errors = [
            FleetError(
                code=e.get("ErrorCode", ""),
                message=e.get("ErrorMessage", ""),
                instance_type=(e.get("LaunchTemplateAndOverrides") or {})
                .get("Overrides", {})
                .get("InstanceType"),
                zone=(e.get("LaunchTemplateAndOverrides") or {}).get("Overrides", {}).get("AvailabilityZone"),
                capacity_type=request.capacity_type,
            )
            for e in response.get("Errors") or []
        ]
        launched = [item for item in response.get("Instances") or [] if item.get("InstanceIds")]
        if not launched:
            codes = sorted({e.code for e in errors}) or ["no instance returned"]
            raise LaunchError(
                f"nodeclaim {request.nodeclaim}: CreateFleet launched nothing ({', '.join(codes)})", errors
            )
        instance_id = launched[0]["InstanceIds"][0]
        instance = self.describe(instance_id)
        if instance is None:
            raise LaunchError(
                f"nodeclaim {request.nodeclaim}: instance {instance_id} not found after launch", errors
            )
        template = (
            (launched[0].get("LaunchTemplateAndOverrides") or {}).get("LaunchTemplateSpecification") or {}
        ).get("LaunchTemplateName")
        return replace(instance, launch_template=template)

    def launch_templates(self) -> list[dict[str, Any]]:
        """The launch templates tagged for this cluster."""
        out: list[dict[str, Any]] = []
        filters = [{"Name": f"tag:{LAUNCH_TEMPLATE_CLUSTER_TAG}", "Values": [self._cluster_name]}]
        for page in self._ec2.get_paginator("describe_launch_templates").paginate(Filters=filters):
            out.extend(page.get("LaunchTemplates") or [])
        return out

    def delete_unused_launch_templates(self, in_use: set[str], created_before: datetime) -> list[str]:
        """Delete this cluster's templates that no live claim or current option set uses.

        Templates created after ``created_before`` are kept: a launch may be about to use one that the
        caller did not know of yet.
        """
        deleted = []
        for template in self.launch_templates():
            name = template["LaunchTemplateName"]
            created = template.get("CreateTime")
            if name in in_use or (isinstance(created, datetime) and created > created_before):
                continue
            try:
                self._ec2.delete_launch_template(LaunchTemplateName=name)
            except ClientError as error:
                if not _is_launch_template_not_found(error):
                    raise
            self._known_templates.discard(name)
            deleted.append(name)
        return deleted

    def describe(self, instance_id: str) -> Instance | None:
        try:
            reservations = self._ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
        except ClientError as error:
            if error.response["Error"]["Code"] == "InvalidInstanceID.NotFound":
                return None
            raise
        for reservation in reservations:
            for raw in reservation["Instances"]:
                return _instance(raw)
        return None

    def instances(
        self, extra_filters: list[dict[str, Any]] | None = None, include_terminated: bool = False
    ) -> list[Instance]:
        """Instances tagged for this cluster (by the cluster tag), optionally narrowed further."""
        states = ["pending", "running", "stopping", "stopped", "shutting-down"]
        if include_terminated:
            states.append("terminated")
        filters = [
            {"Name": f"tag:{wk.TAG_CLUSTER_PREFIX}{self._cluster_name}", "Values": ["owned"]},
            {"Name": "tag-key", "Values": [wk.NODECLAIM]},
            {"Name": "instance-state-name", "Values": states},
            *(extra_filters or []),
        ]
        out: list[Instance] = []
        for page in self._ec2.get_paginator("describe_instances").paginate(Filters=filters):
            for reservation in page["Reservations"]:
                out.extend(_instance(raw) for raw in reservation["Instances"])
        return out

    def cluster_instances(self, instance_ids: Iterable[str]) -> dict[str, Instance]:
        """This cluster's instances (by the cluster tag) among ``instance_ids``, in any state and whatever
        else they are tagged with: Karpenter tags its instances with their NodeClaim only once registered.
        By filter, not by id, so an id EC2 no longer knows is simply absent."""
        ids = sorted(set(instance_ids))
        out: dict[str, Instance] = {}
        for start in range(0, len(ids), _FILTER_VALUES_MAX):
            filters = [
                {"Name": f"tag:{wk.TAG_CLUSTER_PREFIX}{self._cluster_name}", "Values": ["owned"]},
                {"Name": "instance-id", "Values": ids[start : start + _FILTER_VALUES_MAX]},
            ]
            for page in self._ec2.get_paginator("describe_instances").paginate(Filters=filters):
                for reservation in page["Reservations"]:
                    for raw in reservation["Instances"]:
                        out[raw["InstanceId"]] = _instance(raw)
        return out

    def tag_instance(self, instance_id: str, tags: Mapping[str, str]) -> None:
        """Add tags to a running instance (the provider's tagging controller: Name and the NodeClaim)."""
        if tags:
            self._ec2.create_tags(
                Resources=[instance_id], Tags=[{"Key": k, "Value": v} for k, v in sorted(tags.items())]
            )

    def find_by_nodeclaim(self, nodeclaim: str) -> Instance | None:
        found = self.instances([{"Name": f"tag:{wk.NODECLAIM}", "Values": [nodeclaim]}])
        return found[0] if found else None

    def terminate(self, instance_ids: list[str]) -> None:
        if not instance_ids:
            return
        try:
            self._ec2.terminate_instances(InstanceIds=instance_ids)
        except ClientError as error:
            if error.response["Error"]["Code"] != "InvalidInstanceID.NotFound":
                raise


def _block_device(mapping: Mapping[str, Any]) -> dict[str, Any]:
    ebs = mapping.get("ebs") or {}
    keys = {
        "volumeSize": "VolumeSize",
        "volumeType": "VolumeType",
        "iops": "Iops",
        "throughput": "Throughput",
        "kmsKeyID": "KmsKeyId",
        "snapshotID": "SnapshotId",
        "deleteOnTermination": "DeleteOnTermination",
        "encrypted": "Encrypted",
    }
    out_ebs: dict[str, Any] = {}
    for k, v in ebs.items():
        if k in keys:
            # EC2 takes GiB; the manifest takes a quantity such as 100Gi.
            out_ebs[keys[k]] = max(1, -(-parse("storage", v) // (1 << 30))) if k == "volumeSize" else v
    return {"DeviceName": mapping.get("deviceName"), "Ebs": out_ebs}


def _instance(raw: Mapping[str, Any]) -> Instance:
    return Instance(
        id=raw["InstanceId"],
        instance_type=raw["InstanceType"],
        zone=raw.get("Placement", {}).get("AvailabilityZone", ""),
        state=raw.get("State", {}).get("Name", "pending"),
        capacity_type=wk.CAPACITY_TYPE_SPOT
        if raw.get("InstanceLifecycle") == "spot"
        else wk.CAPACITY_TYPE_ON_DEMAND,
        launch_time=raw["LaunchTime"],
        tags=_tags(raw.get("Tags")),
        private_dns_name=raw.get("PrivateDnsName", ""),
        image_id=raw.get("ImageId"),
        subnet_id=raw.get("SubnetId"),
        security_group_ids=frozenset(g["GroupId"] for g in raw.get("SecurityGroups") or []),
    )
