"""Security groups an EC2NodeClass's ``securityGroupSelectorTerms`` select (karpenter-provider-aws
``pkg/providers/securitygroup``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from serverless_karpenter.adapters.providers.errors import translates
from serverless_karpenter.adapters.providers.model import SecurityGroup, tag_filters

if TYPE_CHECKING:  # the stubs are a development dependency only
    from mypy_boto3_ec2 import EC2Client


class SecurityGroupProvider(Protocol):
    def select(self, terms: Sequence[Mapping[str, Any]]) -> list[SecurityGroup]:
        """The groups any term selects (by id, name or tags), by id."""
        ...


class DefaultSecurityGroupProvider:
    def __init__(self, ec2: EC2Client) -> None:
        self._ec2 = ec2

    @translates
    def select(self, terms: Sequence[Mapping[str, Any]]) -> list[SecurityGroup]:
        found: dict[str, SecurityGroup] = {}
        for term in terms:
            kwargs: dict[str, Any] = {}
            filters = tag_filters(term.get("tags") or {})
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
