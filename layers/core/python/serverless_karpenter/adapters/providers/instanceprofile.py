"""The instance profile of an EC2NodeClass (karpenter-provider-aws ``pkg/providers/instanceprofile``):
``spec.instanceProfile`` as given, or for ``spec.role`` a profile named after the cluster and node class
that the provisioner creates and keeps holding that role."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import ClientError

from serverless_karpenter.adapters.providers.errors import translate, translates
from serverless_karpenter.adapters.providers.model import cluster_tags
from serverless_karpenter.api import labels as wk

if TYPE_CHECKING:  # the stubs are a development dependency only
    from mypy_boto3_iam import IAMClient

# The tag Karpenter puts on what it creates for a cluster (launch templates, instance profiles).
LAUNCH_TEMPLATE_CLUSTER_TAG = "karpenter.k8s.aws/cluster"


class InstanceProfileProvider(Protocol):
    def generated_name(self, nodeclass_name: str) -> str:
        """The name of the profile made for a node class's ``role``."""
        ...

    def name_for(self, nodeclass_name: str, spec: Mapping[str, Any]) -> str | None:
        """The profile the node class's instances get, named without an IAM call."""
        ...

    def ensure(self, nodeclass_name: str, spec: Mapping[str, Any]) -> str | None:
        """The profile, created (and its role set) first when the node class names a ``role``."""
        ...


class DefaultInstanceProfileProvider:
    def __init__(self, iam: IAMClient, cluster_name: str) -> None:
        self._iam = iam
        self._cluster = cluster_name

    def generated_name(self, nodeclass_name: str) -> str:
        digest = hashlib.sha256(f"{self._cluster}/{nodeclass_name}".encode()).hexdigest()[:16]
        return f"{self._cluster}_{digest}"[:128]

    def name_for(self, nodeclass_name: str, spec: Mapping[str, Any]) -> str | None:
        if spec.get("instanceProfile"):
            return str(spec["instanceProfile"])
        return self.generated_name(nodeclass_name) if spec.get("role") else None

    @translates
    def ensure(self, nodeclass_name: str, spec: Mapping[str, Any]) -> str | None:
        if spec.get("instanceProfile"):
            return str(spec["instanceProfile"])
        role = spec.get("role")
        if not role:
            return None
        role_name = str(role).split("/")[-1]
        name = self.generated_name(nodeclass_name)
        roles: list[str]
        try:
            profile = self._iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
            roles = [r["RoleName"] for r in profile.get("Roles") or []]
        except ClientError as error:
            if translate(error).code != "NoSuchEntity":
                raise
            self._iam.create_instance_profile(
                InstanceProfileName=name,
                # The stack's IAM policy allows creating a profile only with these request tags
                # (Karpenter's conditions), so they must all be here.
                Tags=[
                    {"Key": k, "Value": v}
                    for k, v in {
                        **cluster_tags(self._cluster),
                        # IAM is global; the client is made for the cluster's region.
                        wk.REGION: self._iam.meta.region_name,
                        LAUNCH_TEMPLATE_CLUSTER_TAG: self._cluster,
                        wk.EC2NODECLASS: nodeclass_name,
                    }.items()
                ],
            )
            roles = []
        if roles != [role_name]:
            # The node class's role changed: a profile holds one role, so swap it.
            for old in roles:
                self._iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=old)
            self._iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=role_name)
        return name
