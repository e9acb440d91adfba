"""Instances: CreateFleet ``instant`` for a NodeClaim, and this cluster's instances by tag
(karpenter-provider-aws ``pkg/providers/instance``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import ClientError

from serverless_karpenter import amifamily
from serverless_karpenter.adapters.providers.errors import translate, translates
from serverless_karpenter.adapters.providers.launchtemplate import (
    LaunchTemplateProvider,
    is_launch_template_not_found,
)
from serverless_karpenter.adapters.providers.model import (
    SPOT_SERVICE_LINKED_ROLE_ERROR,
    FleetError,
    Instance,
    LaunchError,
    LaunchRequest,
    ResolvedNodeClass,
    Subnet,
    cluster_tags,
    tag_list,
    tags_of,
)
from serverless_karpenter.api import labels as wk
from serverless_karpenter.clock import Clock, SystemClock

if TYPE_CHECKING:  # the stubs are a development dependency only
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.type_defs import FilterTypeDef

# DescribeInstances takes at most 200 values in one filter.
FILTER_VALUES_MAX = 200
# Every state but terminated: what GC, adoption and the launch's idempotency look at.
LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")


class InstanceProvider(Protocol):
    def create(self, request: LaunchRequest, nodeclass: ResolvedNodeClass) -> Instance: ...

    def get(self, instance_id: str) -> Instance | None: ...

    def tagged(
        self, extra_filters: list[FilterTypeDef] | None = None, include_terminated: bool = False
    ) -> list[Instance]: ...

    def cluster_instances(self, instance_ids: Iterable[str]) -> dict[str, Instance]: ...

    def describe_many(self, instance_ids: Sequence[str]) -> list[Instance]: ...

    def tag(self, instance_id: str, tags: Mapping[str, str]) -> None: ...

    def terminate(self, instance_ids: list[str]) -> None: ...


class DefaultInstanceProvider:
    def __init__(
        self, ec2: EC2Client, cluster_name: str, templates: LaunchTemplateProvider, clock: Clock | None = None
    ) -> None:
        self._ec2 = ec2
        self._cluster_name = cluster_name
        self._templates = templates
        self._clock: Clock = clock or SystemClock()

    def instance_tags(self, request: LaunchRequest, nodeclass: ResolvedNodeClass) -> dict[str, str]:
        return {
            wk.TAG_NAME: f"{request.nodepool}/{request.nodeclaim}",
            **nodeclass.tags,
            **cluster_tags(self._cluster_name),
            wk.NODEPOOL: request.nodepool,
            wk.NODECLAIM: request.nodeclaim,
            wk.EC2NODECLASS: nodeclass.name,
        }

    # -- CreateFleet ---------------------------------------------------------------------------------

    @translates
    def create(self, request: LaunchRequest, nodeclass: ResolvedNodeClass) -> Instance:
        try:
            response = self._create_fleet(request, nodeclass)
        except ClientError as client_error:
            error = translate(client_error)
            if error.code != SPOT_SERVICE_LINKED_ROLE_ERROR:
                raise error from client_error
            # EC2 may refuse the whole request rather than list the error per override; the launch path
            # reacts to it the same way either way.
            raise LaunchError(
                f"nodeclaim {request.nodeclaim}: CreateFleet refused ({error.code}): {error.message}",
                [FleetError(error.code, error.message, None, None, request.capacity_type)],
            ) from client_error
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
        instance = self._from_fleet(launched[0], request, nodeclass)
        if instance is None:
            # A response without the override it launched from: ask EC2 what it launched.
            instance_id = launched[0]["InstanceIds"][0]
            instance = self.get(instance_id)
            if instance is None:
                raise LaunchError(
                    f"nodeclaim {request.nodeclaim}: instance {instance_id} not found after launch", errors
                )
        template = (
            (launched[0].get("LaunchTemplateAndOverrides") or {}).get("LaunchTemplateSpecification") or {}
        ).get("LaunchTemplateName")
        return replace(instance, launch_template=template)

    def _from_fleet(
        self, launched: Mapping[str, Any], request: LaunchRequest, nodeclass: ResolvedNodeClass
    ) -> Instance | None:
        """The instance as CreateFleet's answer describes it, as Karpenter's ``NewInstanceFromFleet`` reads
        it, without a DescribeInstances per launch (at 1,000 launches, each a filter over every instance):
        its type, and the override's zone and subnet; its image is the AMI of its arch's template."""
        overrides = (launched.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        instance_type = launched.get("InstanceType") or overrides.get("InstanceType")
        zone = overrides.get("AvailabilityZone")
        arch = next(
            (a for t, z, a in request.overrides if t == instance_type and z == zone),
            None,
        )
        if not (instance_type and zone and arch):
            return None
        return Instance(
            id=launched["InstanceIds"][0],
            instance_type=str(instance_type),
            zone=str(zone),
            state="pending",
            capacity_type=request.capacity_type,
            launch_time=self._clock.now(),  # an estimate, as Karpenter's: the launch just happened
            tags=self.instance_tags(request, nodeclass),
            private_dns_name="",
            image_id=nodeclass.amis.get(arch),
            subnet_id=overrides.get("SubnetId"),
            security_group_ids=frozenset(nodeclass.security_group_ids),
        )

    def _create_fleet(self, request: LaunchRequest, nodeclass: ResolvedNodeClass) -> dict[str, Any]:
        try:
            response: dict[str, Any] = self._ec2.create_fleet(**self._fleet_request(request, nodeclass))  # type: ignore[assignment]
        except ClientError as error:
            if not is_launch_template_not_found(translate(error)):
                raise
            # A template we thought existed was deleted (by hand, or by the unused-template sweep of
            # another writer): forget what we know and re-create it, once.
            self._templates.forget()
            response = self._ec2.create_fleet(**self._fleet_request(request, nodeclass))  # type: ignore[assignment]
        return response

    def _fleet_request(self, request: LaunchRequest, nodeclass: ResolvedNodeClass) -> dict[str, Any]:
        configs: dict[str, dict[str, Any]] = {}
        for (arch, max_pods), overrides in template_groups(request, nodeclass).items():
            template = self._templates.ensure(nodeclass, arch, group_bootstrap(request, max_pods))
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
        tags = tag_list(self.instance_tags(request, nodeclass))
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

    # -- this cluster's instances --------------------------------------------------------------------

    @translates
    def get(self, instance_id: str) -> Instance | None:
        try:
            reservations = self._ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
        except ClientError as error:
            if translate(error).code == "InvalidInstanceID.NotFound":
                return None
            raise
        for reservation in reservations:
            for raw in reservation["Instances"]:
                return instance_of(raw)
        return None

    @translates
    def tagged(
        self, extra_filters: list[FilterTypeDef] | None = None, include_terminated: bool = False
    ) -> list[Instance]:
        """Instances tagged for this cluster (by the cluster tag), optionally narrowed further."""
        states = [*LIVE_STATES, "terminated"] if include_terminated else list(LIVE_STATES)
        filters: list[FilterTypeDef] = [
            {"Name": f"tag:{wk.TAG_CLUSTER_PREFIX}{self._cluster_name}", "Values": ["owned"]},
            {"Name": "tag-key", "Values": [wk.NODECLAIM]},
            {"Name": "instance-state-name", "Values": states},
            *(extra_filters or []),
        ]
        return self._described(filters)

    @translates
    def cluster_instances(self, instance_ids: Iterable[str]) -> dict[str, Instance]:
        """This cluster's instances (by the cluster tag) among ``instance_ids``, in any state and whatever
        else they are tagged with: Karpenter tags its instances with their NodeClaim only once registered.
        By filter, not by id, so an id EC2 no longer knows is simply absent."""
        ids = sorted(set(instance_ids))
        out: dict[str, Instance] = {}
        for start in range(0, len(ids), FILTER_VALUES_MAX):
            filters: list[FilterTypeDef] = [
                {"Name": f"tag:{wk.TAG_CLUSTER_PREFIX}{self._cluster_name}", "Values": ["owned"]},
                {"Name": "instance-id", "Values": ids[start : start + FILTER_VALUES_MAX]},
            ]
            out.update((i.id, i) for i in self._described(filters))
        return out

    @translates
    def describe_many(self, instance_ids: Sequence[str]) -> list[Instance]:
        """The instances by id, as DescribeInstances answers (an unknown id fails the call)."""
        out: list[Instance] = []
        for page in self._ec2.get_paginator("describe_instances").paginate(InstanceIds=list(instance_ids)):
            for reservation in page["Reservations"]:
                out.extend(instance_of(raw) for raw in reservation["Instances"])
        return out

    def _described(self, filters: list[FilterTypeDef]) -> list[Instance]:
        out: list[Instance] = []
        for page in self._ec2.get_paginator("describe_instances").paginate(Filters=filters):
            for reservation in page["Reservations"]:
                out.extend(instance_of(raw) for raw in reservation["Instances"])
        return out

    @translates
    def tag(self, instance_id: str, tags: Mapping[str, str]) -> None:
        """Add tags to a running instance (the provider's tagging controller: Name and the NodeClaim)."""
        if tags:
            self._ec2.create_tags(
                Resources=[instance_id], Tags=[{"Key": k, "Value": v} for k, v in sorted(tags.items())]
            )

    @translates
    def terminate(self, instance_ids: list[str]) -> None:
        if not instance_ids:
            return
        try:
            self._ec2.terminate_instances(InstanceIds=instance_ids)
        except ClientError as error:
            if translate(error).code != "InvalidInstanceID.NotFound":
                raise


def template_groups(
    request: LaunchRequest, nodeclass: ResolvedNodeClass
) -> dict[tuple[str, int | None], list[tuple[str, str, Subnet]]]:
    """The request's overrides in zones that have a subnet, for arches with an AMI, per launch template
    option set: (arch, maxPods)."""
    groups: dict[tuple[str, int | None], list[tuple[str, str, Subnet]]] = {}
    for instance_type, zone, arch in request.overrides:
        subnet = nodeclass.subnet_for_zone(zone)
        if arch not in nodeclass.amis or subnet is None:
            continue
        key = (arch, request.max_pods.get(instance_type) or None)
        groups.setdefault(key, []).append((instance_type, zone, subnet))
    return groups


def group_bootstrap(request: LaunchRequest, max_pods: int | None) -> amifamily.NodeBootstrap:
    return replace(request.bootstrap, max_pods=max_pods) if max_pods else request.bootstrap


def instance_of(raw: Mapping[str, Any]) -> Instance:
    return Instance(
        id=raw["InstanceId"],
        instance_type=raw["InstanceType"],
        zone=raw.get("Placement", {}).get("AvailabilityZone", ""),
        state=raw.get("State", {}).get("Name", "pending"),
        capacity_type=wk.CAPACITY_TYPE_SPOT
        if raw.get("InstanceLifecycle") == "spot"
        else wk.CAPACITY_TYPE_ON_DEMAND,
        launch_time=raw["LaunchTime"],
        tags=tags_of(raw.get("Tags")),
        private_dns_name=raw.get("PrivateDnsName", ""),
        image_id=raw.get("ImageId"),
        subnet_id=raw.get("SubnetId"),
        security_group_ids=frozenset(g["GroupId"] for g in raw.get("SecurityGroups") or []),
    )
