"""ENI, IPv4 and branch-ENI limits per instance type (the VPC CNI's and VPC resource controller's view).

DescribeInstanceTypes already tells how many interfaces and addresses a type has, but only this table
says whether a type can trunk (security groups for pods) and how many branch interfaces it gets, which
is where ``vpc.amazonaws.com/pod-eni`` comes from.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from serverless_karpenter.catalog._data import read_package_json

VPC_LIMITS_FILE = "aws-vpc-limits.json"


@dataclass(frozen=True, slots=True)
class VpcLimits:
    interfaces: int
    ipv4_per_interface: int
    branch_interfaces: int
    trunking_compatible: bool
    default_network_card_index: int
    network_cards_max_interfaces: tuple[int, ...]
    hypervisor: str
    bare_metal: bool

    @property
    def default_card_interfaces(self) -> int:
        """Interfaces on the default network card, the only card the VPC CNI uses."""
        cards = self.network_cards_max_interfaces
        if 0 <= self.default_network_card_index < len(cards):
            return cards[self.default_network_card_index]
        return self.interfaces

    @property
    def pod_eni(self) -> int:
        """The ``vpc.amazonaws.com/pod-eni`` capacity: branch interfaces, if the type can trunk at all."""
        return self.branch_interfaces if self.trunking_compatible else 0

    @property
    def private_ipv4_addresses(self) -> int:
        """The ``vpc.amazonaws.com/PrivateIPv4Address`` capacity Windows nodes advertise."""
        return max(self.ipv4_per_interface - 1, 0)


def _from_json(raw: Mapping[str, Any]) -> VpcLimits:
    return VpcLimits(
        interfaces=int(raw["interfaces"]),
        ipv4_per_interface=int(raw["ipv4_per_interface"]),
        branch_interfaces=int(raw.get("branch_interfaces", 0)),
        trunking_compatible=bool(raw.get("trunking_compatible", False)),
        default_network_card_index=int(raw.get("default_network_card_index", 0)),
        network_cards_max_interfaces=tuple(int(n) for n in raw.get("network_cards_max_interfaces", ())),
        hypervisor=str(raw.get("hypervisor", "")),
        bare_metal=bool(raw.get("bare_metal", False)),
    )


@functools.cache
def bundled_vpc_limits() -> Mapping[str, VpcLimits]:
    """The bundled table, parsed once per process."""
    raw = read_package_json(VPC_LIMITS_FILE)
    return {name: _from_json(limits) for name, limits in raw["limits"].items()}


def vpc_limits_for(instance_type: str) -> VpcLimits | None:
    return bundled_vpc_limits().get(instance_type)
