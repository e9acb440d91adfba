"""What the launch and the lifecycle pass call: the launch template and instance providers behind one
object, as karpenter-provider-aws's cloud provider holds its providers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from serverless_karpenter import amifamily
from serverless_karpenter.adapters.providers.instance import (
    DefaultInstanceProvider,
    InstanceProvider,
    group_bootstrap,
    template_groups,
)
from serverless_karpenter.adapters.providers.launchtemplate import (
    DefaultLaunchTemplateProvider,
    LaunchTemplateProvider,
)
from serverless_karpenter.adapters.providers.model import Instance, LaunchRequest, ResolvedNodeClass
from serverless_karpenter.api import labels as wk
from serverless_karpenter.clock import Clock

if TYPE_CHECKING:  # the stubs are a development dependency only
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.type_defs import FilterTypeDef


class FleetLauncher:
    """Launch templates (one per distinct option set, named by a hash) and CreateFleet ``instant``."""

    def __init__(
        self, ec2: EC2Client, cluster_name: str, cluster: amifamily.ClusterInfo, clock: Clock | None = None
    ) -> None:
        self._ec2 = ec2
        self.launch_template_provider: LaunchTemplateProvider = DefaultLaunchTemplateProvider(
            ec2, cluster_name, cluster
        )
        self.instance_provider: InstanceProvider = DefaultInstanceProvider(
            ec2, cluster_name, self.launch_template_provider, clock
        )
        # When the lifecycle pass last looked for unused templates (it rate-limits itself with this).
        self.last_template_sweep: datetime | None = None

    @property
    def ec2(self) -> EC2Client:
        """The EC2 client (tests hook its events to see the requests made)."""
        return self._ec2

    def launch(self, request: LaunchRequest, nodeclass: ResolvedNodeClass) -> Instance:
        """CreateFleet for one NodeClaim: its instance, or a ``LaunchError`` that names the offerings EC2
        found without capacity; any other refusal is a ``CloudError``."""
        return self.instance_provider.create(request, nodeclass)

    # -- launch templates ----------------------------------------------------------------------------

    def ensure_launch_template(
        self, nodeclass: ResolvedNodeClass, arch: str, bootstrap: amifamily.NodeBootstrap
    ) -> str:
        return self.launch_template_provider.ensure(nodeclass, arch, bootstrap)

    def launch_template_name(
        self, nodeclass: ResolvedNodeClass, arch: str, bootstrap: amifamily.NodeBootstrap
    ) -> str:
        return self.launch_template_provider.name_for(nodeclass, arch, bootstrap)

    def launch_template_names(self, request: LaunchRequest, nodeclass: ResolvedNodeClass) -> set[str]:
        """The templates a launch of ``request`` uses (without creating them)."""
        return {
            self.launch_template_name(nodeclass, arch, group_bootstrap(request, max_pods))
            for arch, max_pods in template_groups(request, nodeclass)
        }

    def forget_launch_templates(self) -> None:
        self.launch_template_provider.forget()

    def launch_templates(self) -> list[dict[str, Any]]:
        return self.launch_template_provider.tagged()

    def delete_unused_launch_templates(self, in_use: set[str], created_before: datetime) -> list[str]:
        return self.launch_template_provider.delete_unused(in_use, created_before)

    # -- instances -----------------------------------------------------------------------------------

    def describe(self, instance_id: str) -> Instance | None:
        return self.instance_provider.get(instance_id)

    def instances(
        self, extra_filters: list[FilterTypeDef] | None = None, include_terminated: bool = False
    ) -> list[Instance]:
        return self.instance_provider.tagged(extra_filters, include_terminated)

    def cluster_instances(self, instance_ids: Iterable[str]) -> dict[str, Instance]:
        return self.instance_provider.cluster_instances(instance_ids)

    def describe_many(self, instance_ids: Sequence[str]) -> list[Instance]:
        return self.instance_provider.describe_many(instance_ids)

    def tag_instance(self, instance_id: str, tags: Mapping[str, str]) -> None:
        self.instance_provider.tag(instance_id, tags)

    def find_by_nodeclaim(self, nodeclaim: str) -> Instance | None:
        found = self.instances([{"Name": f"tag:{wk.NODECLAIM}", "Values": [nodeclaim]}])
        return found[0] if found else None

    def terminate(self, instance_ids: list[str]) -> None:
        self.instance_provider.terminate(instance_ids)
