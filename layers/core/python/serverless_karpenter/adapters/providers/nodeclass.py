"""An EC2NodeClass resolved: its subnets, security groups, AMIs and instance profile, through the
per-resource providers, cached for :data:`~serverless_karpenter.cache.RESOLUTION_TTL` (Karpenter's
EC2NodeClass status controller does the same walk)."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from serverless_karpenter import amifamily
from serverless_karpenter.adapters.providers.ami import AMIProvider, DefaultAMIProvider
from serverless_karpenter.adapters.providers.errors import CloudError, translating
from serverless_karpenter.adapters.providers.instanceprofile import (
    DefaultInstanceProfileProvider,
    InstanceProfileProvider,
)
from serverless_karpenter.adapters.providers.model import (
    Image,
    NodeClassResolutionError,
    ResolvedNodeClass,
    SecurityGroup,
    Subnet,
)
from serverless_karpenter.adapters.providers.securitygroup import (
    DefaultSecurityGroupProvider,
    SecurityGroupProvider,
)
from serverless_karpenter.adapters.providers.subnet import DefaultSubnetProvider, SubnetProvider
from serverless_karpenter.cache import RESOLUTION_TTL

if TYPE_CHECKING:  # the stubs are a development dependency only
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_iam import IAMClient
    from mypy_boto3_ssm import SSMClient

# What the metadata service of a node allows unless the node class says otherwise (Karpenter's defaults).
DEFAULT_METADATA_OPTIONS: Mapping[str, Any] = {
    "HttpEndpoint": "enabled",
    "HttpProtocolIpv6": "disabled",
    "HttpPutResponseHopLimit": 1,
    "HttpTokens": "required",
}
_METADATA_KEYS = {
    "httpEndpoint": "HttpEndpoint",
    "httpProtocolIPv6": "HttpProtocolIpv6",
    "httpPutResponseHopLimit": "HttpPutResponseHopLimit",
    "httpTokens": "HttpTokens",
}


class NodeClassResolver:
    """Turns an EC2NodeClass's selector terms into subnets, security groups, AMIs and a profile.

    Results are cached for :data:`RESOLUTION_TTL` per (name, spec): an edited spec resolves afresh at once.
    Failures are not cached, so a fixed set-up is seen on the next pass.
    """

    def __init__(
        self,
        ec2: EC2Client,
        ssm: SSMClient,
        iam: IAMClient,
        cluster_name: str,
        kubernetes_version: str,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.subnet_provider: SubnetProvider = DefaultSubnetProvider(ec2)
        self.security_group_provider: SecurityGroupProvider = DefaultSecurityGroupProvider(ec2)
        self.ami_provider: AMIProvider = DefaultAMIProvider(ec2, ssm, kubernetes_version)
        self.instance_profile_provider: InstanceProfileProvider = DefaultInstanceProfileProvider(
            iam, cluster_name
        )
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
        if cached is not None and now - cached[0] < RESOLUTION_TTL:
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
            with translating():
                return self._resolve(nodeclass, manage_instance_profile)
        except CloudError as error:  # refused (AccessDenied) or failed: this node class is not ready
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
        user_data = spec.get("userData")
        if family == "Bottlerocket" and user_data:
            try:
                tomllib.loads(user_data)
            except tomllib.TOMLDecodeError as error:
                raise ValueError(
                    f'EC2NodeClass "{name}": spec.userData: Bottlerocket user data must be TOML ({error})'
                ) from error
        options = spec.get("metadataOptions") or {}
        return ResolvedNodeClass(
            name=name,
            subnets=subnets,
            security_group_ids=sorted(g.id for g in security_groups),
            amis=_by_arch(images),
            ami_family=family,
            instance_profile=(
                self.instance_profile(name, spec)
                if manage_instance_profile
                else self.instance_profile_of(name, spec)
            ),
            tags=dict(spec.get("tags") or {}),
            user_data=user_data,
            metadata_options={
                **DEFAULT_METADATA_OPTIONS,
                **{_METADATA_KEYS[k]: v for k, v in options.items() if k in _METADATA_KEYS},
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

    # Each look-up on its own (the doctor and ``plan`` call them; tests answer them in place).

    def subnets(self, terms: Sequence[Mapping[str, Any]]) -> list[Subnet]:
        return self.subnet_provider.select(terms)

    def security_group_details(self, terms: Sequence[Mapping[str, Any]]) -> list[SecurityGroup]:
        return self.security_group_provider.select(terms)

    def security_groups(self, terms: Sequence[Mapping[str, Any]]) -> list[str]:
        return [g.id for g in self.security_group_details(terms)]

    def images(self, terms: Sequence[Mapping[str, Any]], ami_family: str | None) -> tuple[str, list[Image]]:
        """The AMI family and the images the terms select, newest first."""
        return self.ami_provider.select(terms, ami_family)

    def amis(self, terms: Sequence[Mapping[str, Any]], ami_family: str | None) -> tuple[str, dict[str, str]]:
        family, images = self.images(terms, ami_family)
        return family, _by_arch(images)

    def instance_profile_name(self, nodeclass_name: str) -> str:
        return self.instance_profile_provider.generated_name(nodeclass_name)

    def instance_profile_of(self, nodeclass_name: str, spec: Mapping[str, Any]) -> str | None:
        """The profile ``instance_profile`` uses, named without an IAM call."""
        return self.instance_profile_provider.name_for(nodeclass_name, spec)

    def instance_profile(self, nodeclass_name: str, spec: Mapping[str, Any]) -> str | None:
        """``instanceProfile`` is used as given; ``role`` gets a profile we create and keep on that role."""
        return self.instance_profile_provider.ensure(nodeclass_name, spec)


def _by_arch(images: Sequence[Image]) -> dict[str, str]:
    """The image launched per arch: the first (newest) of each."""
    amis: dict[str, str] = {}
    for image in images:
        amis.setdefault(image.arch, image.id)
    return amis
