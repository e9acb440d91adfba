"""Subnets an EC2NodeClass's ``subnetSelectorTerms`` select (karpenter-provider-aws
``pkg/providers/subnet``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from serverless_karpenter.adapters.providers.errors import translates
from serverless_karpenter.adapters.providers.model import Subnet, tag_filters

if TYPE_CHECKING:  # the stubs are a development dependency only
    from mypy_boto3_ec2 import EC2Client


class SubnetProvider(Protocol):
    def select(self, terms: Sequence[Mapping[str, Any]]) -> list[Subnet]:
        """The subnets any term selects, most free addresses first (the order Karpenter reports)."""
        ...


class DefaultSubnetProvider:
    def __init__(self, ec2: EC2Client) -> None:
        self._ec2 = ec2

    @translates
    def select(self, terms: Sequence[Mapping[str, Any]]) -> list[Subnet]:
        found: dict[str, Subnet] = {}
        for term in terms:
            kwargs: dict[str, Any] = {}
            if term.get("id"):
                kwargs["SubnetIds"] = [term["id"]]
            if term.get("tags"):
                kwargs["Filters"] = tag_filters(term["tags"])
            for page in self._ec2.get_paginator("describe_subnets").paginate(**kwargs):
                for s in page["Subnets"]:
                    found[s["SubnetId"]] = Subnet(
                        s["SubnetId"],
                        s["AvailabilityZone"],
                        s.get("AvailabilityZoneId"),
                        int(s.get("AvailableIpAddressCount", 0)),
                    )
        return sorted(found.values(), key=lambda s: (-s.available_ips, s.id))
