"""Instances launched by CreateFleet get their launch template's security groups, as in EC2.

moto's fleets read a template's groups from a ``GroupSet`` key that launch templates never have, so a
spot instance came up in the VPC's default group and an on-demand one in none. The disruption pass
compares an instance's groups with its EC2NodeClass's selected ones, so every spot node of a simulation
looked drifted (``SecurityGroupDrift``) and was replaced again and again. This module gives each
instance a fleet launches the groups of its template version: ``SecurityGroupIds``, or those of the
primary network interface when the template sets interfaces (as ours does with
``associatePublicIPAddress``).

Importing this module installs it on moto (see :func:`install`); :mod:`serverless_karpenter_sim.cloud`
imports it, so every moto server the simulator starts launches this way.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import Any

from serverless_karpenter_sim.iam_simulation import when_imported

_FLEETS_MODULE = "moto.ec2.models.fleets"
_INSTALLED = "_serverless_karpenter_groups"


def template_groups(data: Mapping[str, Any]) -> list[str]:
    """The security group ids a launch template version gives its instances."""
    groups = list(data.get("SecurityGroupIds") or [])
    if groups:
        return [str(g) for g in groups]
    interfaces = sorted(data.get("NetworkInterfaces") or [], key=lambda i: int(i.get("DeviceIndex") or 0))
    return [str(g) for g in (interfaces[0].get("Groups") or [])] if interfaces else []


def _launched(fleet: Any) -> Iterator[tuple[Any, Any]]:
    for item in fleet.on_demand_instances:
        yield item.get("instance"), item.get("launch_spec")
    for request in fleet.spot_requests:
        yield getattr(request, "instance", None), getattr(request, "launch_spec", None)


def _apply(backend: Any, fleet: Any) -> None:
    for instance, spec in _launched(fleet):
        template_spec = getattr(spec, "launch_template_spec", None) or {}
        template_id = template_spec.get("LaunchTemplateId")
        if instance is None or not template_id:
            continue
        template = backend.get_launch_template(template_id)
        version = template.get_version(template_spec.get("Version", template.default_version_number))
        found = [backend.get_security_group_from_id(g) for g in template_groups(version.data)]
        groups = [g for g in found if g is not None]
        if groups:
            instance.security_groups = groups


def register(module: ModuleType) -> None:
    backend_class = module.FleetsBackend
    if getattr(backend_class, _INSTALLED, False):
        return
    create_fleet = backend_class.create_fleet

    def create_fleet_with_groups(self: Any, *args: Any, **kwargs: Any) -> Any:
        fleet = create_fleet(self, *args, **kwargs)
        _apply(self, fleet)
        return fleet

    backend_class.create_fleet = create_fleet_with_groups
    setattr(backend_class, _INSTALLED, True)


def install() -> None:
    """Make moto's CreateFleet apply launch template security groups in this process."""
    when_imported(_FLEETS_MODULE, register)


install()
