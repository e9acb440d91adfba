"""Launch templates, one per distinct option set and named by its hash (karpenter-provider-aws
``pkg/providers/launchtemplate``): created on first use, tagged for the cluster, and the unused ones
deleted by the lifecycle pass."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import ClientError

from serverless_karpenter import amifamily
from serverless_karpenter.adapters.providers.errors import CloudError, translate, translates
from serverless_karpenter.adapters.providers.instanceprofile import LAUNCH_TEMPLATE_CLUSTER_TAG
from serverless_karpenter.adapters.providers.model import ResolvedNodeClass, cluster_tags, tag_list
from serverless_karpenter.api import labels as wk
from serverless_karpenter.scheduling.resources import parse

if TYPE_CHECKING:  # the stubs are a development dependency only
    from mypy_boto3_ec2 import EC2Client

LAUNCH_TEMPLATE_PREFIX = "karpenter.k8s.aws"


def is_launch_template_not_found(error: CloudError) -> bool:
    return "LaunchTemplate" in error.code and "NotFound" in error.code


class LaunchTemplateProvider(Protocol):
    def name_for(self, nodeclass: ResolvedNodeClass, arch: str, bootstrap: amifamily.NodeBootstrap) -> str:
        """The template's name, without creating it."""
        ...

    def ensure(self, nodeclass: ResolvedNodeClass, arch: str, bootstrap: amifamily.NodeBootstrap) -> str:
        """The template's name, created first unless known to exist."""
        ...

    def forget(self) -> None:
        """After a NotFound: re-create templates lazily on the next launch."""
        ...

    def tagged(self) -> list[dict[str, Any]]:
        """The launch templates tagged for this cluster."""
        ...

    def delete_unused(self, in_use: set[str], created_before: datetime) -> list[str]:
        """Delete this cluster's templates not in ``in_use`` and created before ``created_before``."""
        ...


class DefaultLaunchTemplateProvider:
    def __init__(self, ec2: EC2Client, cluster_name: str, cluster: amifamily.ClusterInfo) -> None:
        self._ec2 = ec2
        self._cluster_name = cluster_name
        self._cluster = cluster
        self._known: set[str] = set()

    def network_interface_tags(
        self, nodeclass: ResolvedNodeClass, bootstrap: amifamily.NodeBootstrap
    ) -> dict[str, str]:
        """What a launch tags the instance's network interfaces with: its instance's tags but the claim's."""
        tags = {**nodeclass.tags, **cluster_tags(self._cluster_name), wk.EC2NODECLASS: nodeclass.name}
        nodepool = bootstrap.labels.get(wk.NODEPOOL)
        if nodepool:
            tags[wk.NODEPOOL] = nodepool
        return tags

    def template_data(
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
                "Tags": tag_list(self.network_interface_tags(nodeclass, bootstrap)),
            }
        ]
        if nodeclass.block_device_mappings:
            data["BlockDeviceMappings"] = [_block_device(b) for b in nodeclass.block_device_mappings]
        return data

    def name_for(self, nodeclass: ResolvedNodeClass, arch: str, bootstrap: amifamily.NodeBootstrap) -> str:
        """The template's name is the hash of its content: equal option sets share one."""
        return self._name_of(self.template_data(nodeclass, arch, bootstrap))

    def _name_of(self, data: Mapping[str, Any]) -> str:
        digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:20]
        return f"{LAUNCH_TEMPLATE_PREFIX}/{self._cluster_name}/{digest}"

    @translates
    def ensure(self, nodeclass: ResolvedNodeClass, arch: str, bootstrap: amifamily.NodeBootstrap) -> str:
        data = self.template_data(nodeclass, arch, bootstrap)
        name = self._name_of(data)
        if name in self._known:
            return name
        tags = {
            **nodeclass.tags,
            **cluster_tags(self._cluster_name),
            LAUNCH_TEMPLATE_CLUSTER_TAG: self._cluster_name,
            wk.EC2NODECLASS: nodeclass.name,
        }
        try:
            self._ec2.create_launch_template(
                LaunchTemplateName=name,
                LaunchTemplateData=data,  # type: ignore[arg-type]  # built as plain JSON, hashed for the name
                TagSpecifications=[
                    {
                        "ResourceType": "launch-template",
                        "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                    }
                ],
            )
        except ClientError as error:
            if translate(error).code != "InvalidLaunchTemplateName.AlreadyExistsException":
                raise
        self._known.add(name)
        return name

    def forget(self) -> None:
        self._known.clear()

    @translates
    def tagged(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for page in self._ec2.get_paginator("describe_launch_templates").paginate(
            Filters=[{"Name": f"tag:{LAUNCH_TEMPLATE_CLUSTER_TAG}", "Values": [self._cluster_name]}]
        ):
            out.extend(dict(t) for t in page.get("LaunchTemplates") or [])
        return out

    @translates
    def delete_unused(self, in_use: set[str], created_before: datetime) -> list[str]:
        """Templates created after ``created_before`` are kept: a launch may be about to use one that the
        caller did not know of yet."""
        deleted = []
        for template in self.tagged():
            name = template["LaunchTemplateName"]
            created = template.get("CreateTime")
            if name in in_use or (isinstance(created, datetime) and created > created_before):
                continue
            try:
                self._ec2.delete_launch_template(LaunchTemplateName=name)
            except ClientError as error:
                if not is_launch_template_not_found(translate(error)):
                    raise
            self._known.discard(name)
            deleted.append(name)
        return deleted


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
