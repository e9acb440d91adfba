"""EC2 adapters: EC2NodeClass resolution, launch templates, CreateFleet, and instances by tag."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from serverless_karpenter import amifamily
from serverless_karpenter.api import labels as wk
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
MAX_FLEET_OVERRIDES = 60


@dataclass(frozen=True)
class Subnet:
    id: str
    zone: str
    zone_id: str | None
    available_ips: int


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


@dataclass(frozen=True)
class LaunchRequest:
    nodeclaim: str
    nodepool: str
    capacity_type: str
    # (instance type, zone, arch), cheapest first
    overrides: list[tuple[str, str, str]]
    bootstrap: amifamily.NodeBootstrap


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


class NodeClassResolver:
    """Turns an EC2NodeClass's selector terms into subnets, security groups, AMIs and a profile."""

    def __init__(self, ec2: Any, ssm: Any, iam: Any, cluster_name: str, kubernetes_version: str) -> None:
        self._ec2 = ec2
        self._ssm = ssm
        self._iam = iam
        self._cluster = cluster_name
        self._k8s_version = kubernetes_version

    def resolve(self, nodeclass: Mapping[str, Any]) -> ResolvedNodeClass:
        spec = nodeclass.get("spec") or {}
        name = nodeclass["metadata"]["name"]
        subnets = self.subnets(spec.get("subnetSelectorTerms") or [])
        if not subnets:
            raise ValueError(f'EC2NodeClass "{name}": spec.subnetSelectorTerms: no subnet matches')
        security_groups = self.security_groups(spec.get("securityGroupSelectorTerms") or [])
        if not security_groups:
            raise ValueError(
                f'EC2NodeClass "{name}": spec.securityGroupSelectorTerms: no security group matches'
            )
        family, amis = self.amis(spec.get("amiSelectorTerms") or [], spec.get("amiFamily"))
        if not amis:
            raise ValueError(f'EC2NodeClass "{name}": spec.amiSelectorTerms: no AMI resolves')
        return ResolvedNodeClass(
            name=name,
            subnets=subnets,
            security_group_ids=security_groups,
            amis=amis,
            ami_family=family,
            instance_profile=self.instance_profile(name, spec),
            tags=dict(spec.get("tags") or {}),
            user_data=spec.get("userData"),
            metadata_options={
                "HttpEndpoint": "enabled",
                "HttpProtocolIpv6": "disabled",
                "HttpPutResponseHopLimit": 1,
                "HttpTokens": "required",
                **_metadata_options(spec.get("metadataOptions") or {}),
            },
            block_device_mappings=list(spec.get("blockDeviceMappings") or []),
            detailed_monitoring=bool(spec.get("detailedMonitoring")),
            associate_public_ip=spec.get("associatePublicIPAddress"),
            kubelet=dict(spec.get("kubelet") or {}),
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
        return sorted(found.values(), key=lambda s: s.id)

    def security_groups(self, terms: list[Mapping[str, Any]]) -> list[str]:
        found: set[str] = set()
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
                found.update(g["GroupId"] for g in page["SecurityGroups"])
        return sorted(found)

    def amis(self, terms: list[Mapping[str, Any]], ami_family: str | None) -> tuple[str, dict[str, str]]:
        amis: dict[str, str] = {}
        for term in terms:
            if term.get("alias"):
                family, _, version = str(term["alias"]).partition("@")
                for arch in ("amd64", "arm64"):
                    path = amifamily.ssm_parameter_for_alias(
                        family, version or "latest", self._k8s_version, arch
                    )
                    try:
                        amis[arch] = self._ssm.get_parameter(Name=path)["Parameter"]["Value"]
                    except ClientError as error:
                        if error.response["Error"]["Code"] != "ParameterNotFound":
                            raise
                return {"al2023": "AL2023", "al2": "AL2", "bottlerocket": "Bottlerocket"}.get(
                    family, "Custom"
                ), amis
            kwargs: dict[str, Any] = {}
            filters = _tag_filters(term.get("tags") or {})
            if term.get("id"):
                kwargs["ImageIds"] = [term["id"]]
            if term.get("name"):
                filters.append({"Name": "name", "Values": [term["name"]]})
            if term.get("owner"):
                kwargs["Owners"] = [term["owner"]]
            if filters:
                kwargs["Filters"] = filters
            images = self._ec2.describe_images(**kwargs)["Images"]
            # Newest first, as Karpenter orders them; one per architecture.
            for image in sorted(images, key=lambda i: i.get("CreationDate", ""), reverse=True):
                arch = {"x86_64": "amd64", "arm64": "arm64"}.get(image.get("Architecture", "x86_64"), "amd64")
                amis.setdefault(arch, image["ImageId"])
        return ami_family or "Custom", amis

    def instance_profile(self, nodeclass_name: str, spec: Mapping[str, Any]) -> str | None:
        if spec.get("instanceProfile"):
            return str(spec["instanceProfile"])
        role = spec.get("role")
        if not role:
            return None
        digest = hashlib.sha256(f"{self._cluster}/{nodeclass_name}".encode()).hexdigest()[:16]
        name = f"{self._cluster}_{digest}"[:128]
        try:
            self._iam.get_instance_profile(InstanceProfileName=name)
        except ClientError as error:
            if error.response["Error"]["Code"] != "NoSuchEntity":
                raise
            self._iam.create_instance_profile(
                InstanceProfileName=name,
                Tags=[
                    {"Key": f"{wk.TAG_CLUSTER_PREFIX}{self._cluster}", "Value": "owned"},
                    {"Key": wk.EC2NODECLASS, "Value": nodeclass_name},
                ],
            )
            self._iam.add_role_to_instance_profile(
                InstanceProfileName=name, RoleName=str(role).split("/")[-1]
            )
        return name


def _metadata_options(options: Mapping[str, Any]) -> dict[str, Any]:
    mapping = {
        "httpEndpoint": "HttpEndpoint",
        "httpProtocolIPv6": "HttpProtocolIpv6",
        "httpPutResponseHopLimit": "HttpPutResponseHopLimit",
        "httpTokens": "HttpTokens",
    }
    return {mapping[k]: v for k, v in options.items() if k in mapping}


class FleetLauncher:
    """Launch templates (one per distinct option set, named by a hash) and CreateFleet `instant`."""

    def __init__(self, ec2: Any, cluster_name: str, cluster: amifamily.ClusterInfo) -> None:
        self._ec2 = ec2
        self._cluster_name = cluster_name
        self._cluster = cluster
        self._known_templates: set[str] = set()

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

    def _template_data(
        self, nodeclass: ResolvedNodeClass, arch: str, bootstrap: amifamily.NodeBootstrap
    ) -> dict[str, Any]:
        user_data = amifamily.render_user_data(nodeclass.ami_family, self._cluster, bootstrap)
        data: dict[str, Any] = {
            "ImageId": nodeclass.amis[arch],
            "UserData": amifamily.encode(user_data),
            "MetadataOptions": nodeclass.metadata_options,
            "Monitoring": {"Enabled": nodeclass.detailed_monitoring},
            "SecurityGroupIds": nodeclass.security_group_ids,
        }
        if nodeclass.instance_profile:
            data["IamInstanceProfile"] = {"Name": nodeclass.instance_profile}
        if nodeclass.block_device_mappings:
            data["BlockDeviceMappings"] = [_block_device(b) for b in nodeclass.block_device_mappings]
        return data

    def ensure_launch_template(
        self, nodeclass: ResolvedNodeClass, arch: str, bootstrap: amifamily.NodeBootstrap
    ) -> str:
        data = self._template_data(nodeclass, arch, bootstrap)
        digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:20]
        name = f"karpenter.k8s.aws/{self._cluster_name}/{digest}"
        if name in self._known_templates:
            return name
        try:
            self._ec2.create_launch_template(
                LaunchTemplateName=name,
                LaunchTemplateData=data,
                TagSpecifications=[
                    {
                        "ResourceType": "launch-template",
                        "Tags": [
                            {"Key": k, "Value": v}
                            for k, v in {**self.cluster_tags(), wk.EC2NODECLASS: nodeclass.name}.items()
                        ],
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

    def launch(self, request: LaunchRequest, nodeclass: ResolvedNodeClass) -> Instance:
        configs: dict[str, dict[str, Any]] = {}
        for instance_type, zone, arch in request.overrides[:MAX_FLEET_OVERRIDES]:
            subnet = nodeclass.subnet_for_zone(zone)
            if subnet is None or arch not in nodeclass.amis:
                continue
            template = self.ensure_launch_template(nodeclass, arch, request.bootstrap)
            config = configs.setdefault(
                template,
                {
                    "LaunchTemplateSpecification": {"LaunchTemplateName": template, "Version": "$Latest"},
                    "Overrides": [],
                },
            )
            config["Overrides"].append(
                {
                    "InstanceType": instance_type,
                    "SubnetId": subnet.id,
                    "AvailabilityZone": zone,
                    "Priority": float(len(config["Overrides"])),
                }
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
            "ClientToken": request.nodeclaim,
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
        try:
            response = self._ec2.create_fleet(**kwargs)
        except ClientError as error:
            if (
                "LaunchTemplate" in error.response["Error"]["Code"]
                and "NotFound" in error.response["Error"]["Code"]
            ):
                self.forget_launch_templates()
            raise
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
        instance_ids = [i for item in response.get("Instances") or [] for i in item.get("InstanceIds") or []]
        if not instance_ids:
            codes = sorted({e.code for e in errors}) or ["no instance returned"]
            raise LaunchError(
                f"nodeclaim {request.nodeclaim}: CreateFleet launched nothing ({', '.join(codes)})", errors
            )
        instance = self.describe(instance_ids[0])
        if instance is None:
            raise LaunchError(
                f"nodeclaim {request.nodeclaim}: instance {instance_ids[0]} not found after launch", errors
            )
        return instance

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
    )
