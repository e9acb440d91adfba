"""Builds the control plane's adapters from the environment, once per warm Lambda.

Handlers call :func:`control_plane`; the local simulator and tests install their own (virtual clock,
loopback endpoints) with :func:`use_control_plane`.
"""

from __future__ import annotations

import base64
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s

from serverless_karpenter import amifamily
from serverless_karpenter.adapters import aws
from serverless_karpenter.adapters.ec2 import FleetLauncher, NodeClassResolver, ResolvedNodeClass
from serverless_karpenter.adapters.eks_token import TokenSource
from serverless_karpenter.adapters.kubernetes import KubernetesGateway, configuration
from serverless_karpenter.adapters.state_store import NodeClaimStore
from serverless_karpenter.catalog import (
    InMemoryUnavailableOfferings,
    KubeletConfig,
    Offering,
    load_bundled_catalog,
)
from serverless_karpenter.clock import Clock, SystemClock
from serverless_karpenter.config import Settings, load_settings
from serverless_karpenter.observability import MetricName, MetricUnit, metrics
from serverless_karpenter.provisioning.context import ControlPlane


@dataclass(frozen=True, slots=True)
class SchedulableInstanceType:
    """An instance type with the offerings that are available right now (the scheduler's view)."""

    name: str
    allocatable: Mapping[str, int]
    capacity: Mapping[str, int]
    labels: Mapping[str, str]
    offerings: Sequence[Offering]


class CatalogInstanceTypes:
    """Instance types per node class from the catalog, with the unavailable-offerings cache applied."""

    def __init__(self, region: str, clock: Clock) -> None:
        self._region = region
        self.unavailable = InMemoryUnavailableOfferings(clock)

    def instance_types(
        self, nodeclass: ResolvedNodeClass, spec: Mapping[str, Any]
    ) -> list[SchedulableInstanceType]:
        kubelet = KubeletConfig.from_spec((spec.get("spec") or {}).get("kubelet"))
        catalog = load_bundled_catalog(
            self._region,
            nodeclass.zones,
            kubelet=kubelet,
            ami_family_name=nodeclass.ami_family,
            unavailable=self.unavailable,
        )
        out = []
        for it in catalog:
            if it.arch not in nodeclass.amis:
                continue
            offerings = catalog.available_offerings(it)
            if offerings:
                out.append(
                    SchedulableInstanceType(it.name, it.allocatable, it.capacity, it.labels, offerings)
                )
        return out

    def mark_unavailable(self, capacity_type: str, instance_type: str, zone: str, reason: str) -> None:
        self.unavailable.mark_unavailable(capacity_type, instance_type, zone)
        metrics.add_metric(name=MetricName.UNAVAILABLE_OFFERING_HITS, unit=MetricUnit.Count, value=1)

    def is_unavailable(self, capacity_type: str, instance_type: str, zone: str) -> bool:
        return self.unavailable.is_unavailable(capacity_type, instance_type, zone)


def build_control_plane(settings: Settings | None = None, clock: Clock | None = None) -> ControlPlane:
    settings = settings or load_settings()
    clock = clock or SystemClock()
    region = settings.aws_region
    eks = aws.client("eks", region)
    cluster = eks.describe_cluster(name=settings.cluster_name)["cluster"]
    endpoint = settings.kubernetes_api_url or cluster["endpoint"]
    ca_data = (cluster.get("certificateAuthority") or {}).get("data") or ""
    ca_file = None
    if ca_data and not settings.kubernetes_api_url:
        with tempfile.NamedTemporaryFile("wb", suffix=".crt", delete=False) as handle:
            handle.write(base64.b64decode(ca_data))
            ca_file = handle.name
    tokens = TokenSource(settings.cluster_name, region, clock.now)
    cfg = configuration(
        endpoint,
        tokens.token,
        verify_tls=settings.kubernetes_verify_tls and ca_file is not None,
        ca_file=ca_file,
    )
    kube = KubernetesGateway(k8s.ApiClient(cfg), clock)
    network = cluster.get("kubernetesNetworkConfig") or {}
    info = amifamily.ClusterInfo(
        name=settings.cluster_name,
        endpoint=cluster.get("endpoint", endpoint),
        certificate_authority=ca_data,
        service_cidr=network.get("serviceIpv4Cidr") or "10.100.0.0/16",
        kubernetes_version=str(cluster.get("version") or "1.31"),
    )
    ec2 = aws.client("ec2", region)
    return ControlPlane(
        settings=settings,
        clock=clock,
        kube=kube,
        store=NodeClaimStore(aws.client("dynamodb", region), settings.state_table_name),
        launcher=FleetLauncher(ec2, settings.cluster_name, info),
        resolver=NodeClassResolver(
            ec2,
            aws.client("ssm", region),
            aws.client("iam", region),
            settings.cluster_name,
            info.kubernetes_version,
        ),
        instance_types=CatalogInstanceTypes(region, clock),
    )


_lock = threading.Lock()
_plane: ControlPlane | None = None


def control_plane() -> ControlPlane:
    """The control plane of this (warm) Lambda; built on first use."""
    global _plane
    with _lock:
        if _plane is None:
            _plane = build_control_plane()
        return _plane


def use_control_plane(plane: ControlPlane | None) -> None:
    """Install a control plane (simulator, tests), or None to build from the environment again."""
    global _plane
    with _lock:
        _plane = plane
