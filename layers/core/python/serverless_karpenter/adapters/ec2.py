"""The EC2 providers' names where they were before the split into
:mod:`serverless_karpenter.adapters.providers`.

Nothing in this tree imports this module any more; it stays so that branches written against the old
module path (this session's concurrent ones) still import after they are merged. Import from the
providers' modules instead; delete this file once no branch needs it.
"""

from __future__ import annotations

from serverless_karpenter.adapters.providers.fleet import FleetLauncher
from serverless_karpenter.adapters.providers.instanceprofile import LAUNCH_TEMPLATE_CLUSTER_TAG
from serverless_karpenter.adapters.providers.launchtemplate import LAUNCH_TEMPLATE_PREFIX
from serverless_karpenter.adapters.providers.model import (
    SPOT_SERVICE_LINKED_ROLE_ERROR,
    UNFULFILLABLE_CAPACITY_ERRORS,
    FleetError,
    Image,
    Instance,
    LaunchError,
    LaunchRequest,
    NodeClassResolutionError,
    ResolvedNodeClass,
    SecurityGroup,
    Subnet,
)
from serverless_karpenter.adapters.providers.nodeclass import NodeClassResolver
from serverless_karpenter.cache import RESOLUTION_TTL as RESOLVE_TTL

__all__ = [
    "LAUNCH_TEMPLATE_CLUSTER_TAG",
    "LAUNCH_TEMPLATE_PREFIX",
    "RESOLVE_TTL",
    "SPOT_SERVICE_LINKED_ROLE_ERROR",
    "UNFULFILLABLE_CAPACITY_ERRORS",
    "FleetError",
    "FleetLauncher",
    "Image",
    "Instance",
    "LaunchError",
    "LaunchRequest",
    "NodeClassResolutionError",
    "NodeClassResolver",
    "ResolvedNodeClass",
    "SecurityGroup",
    "Subnet",
]
