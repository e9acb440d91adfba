"""Builds the control plane's adapters from the environment, once per warm Lambda.

Handlers call :func:`control_plane`; the local simulator and tests install their own (virtual clock,
loopback endpoints) with :func:`use_control_plane`.
"""

from __future__ import annotations

import base64
import tempfile
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from kubernetes import client as k8s

from serverless_karpenter import amifamily
from serverless_karpenter.adapters import aws
from serverless_karpenter.adapters.catalog_source import LiveCatalogSource
from serverless_karpenter.adapters.eks_token import TokenSource
from serverless_karpenter.adapters.invoker import LambdaProvisionerInvoker
from serverless_karpenter.adapters.kubernetes import KubernetesGateway, configuration
from serverless_karpenter.adapters.persisted import PersistedBlobs
from serverless_karpenter.adapters.pricing import PriceSource
from serverless_karpenter.adapters.providers.fleet import FleetLauncher
from serverless_karpenter.adapters.providers.model import ResolvedNodeClass
from serverless_karpenter.adapters.providers.nodeclass import NodeClassResolver
from serverless_karpenter.adapters.state_store import NodeClaimStore
from serverless_karpenter.adapters.unavailable_offerings import DynamoDBUnavailableOfferings
from serverless_karpenter.catalog import (
    DEFAULT_SPOT_MODEL,
    InMemoryUnavailableOfferings,
    InstanceTypeCatalog,
    KubeletConfig,
    Offering,
    build_catalog,
    bundled_on_demand_prices,
    load_bundled_catalog,
)
from serverless_karpenter.catalog.overlays import Overlays
from serverless_karpenter.catalog.sources import PriceTable, SnapshotSource
from serverless_karpenter.clock import Clock, SystemClock
from serverless_karpenter.config import Settings, load_settings
from serverless_karpenter.observability import MetricName, MetricUnit, metrics
from serverless_karpenter.provisioning.context import ControlPlane, ProvisionerInvoker

if TYPE_CHECKING:  # the stubs are a development dependency only
    from mypy_boto3_pricing import PricingClient


@dataclass(frozen=True, slots=True)
class SchedulableInstanceType:
    """An instance type with the offerings that are available right now (the scheduler's view)."""

    name: str
    allocatable: Mapping[str, int]
    capacity: Mapping[str, int]
    labels: Mapping[str, str]
    offerings: Sequence[Offering]


def schedulable_types(
    catalog: InstanceTypeCatalog, nodeclass: ResolvedNodeClass, overlays: Overlays
) -> list[SchedulableInstanceType]:
    """The catalog's types the node class has an image for, with their available offerings and the
    NodeOverlay prices and capacity applied: what the scheduler sees, live and in ``plan``."""
    out = []
    for it in catalog:
        if it.arch not in nodeclass.amis:
            continue
        offerings = catalog.available_offerings(it)
        if not offerings:
            continue
        allocatable: Mapping[str, int] = it.allocatable
        capacity: Mapping[str, int] = it.capacity
        if overlays:
            offerings = overlays.offerings(it.labels, offerings)
            extra = overlays.capacity(it.labels)
            if extra:
                allocatable = {**allocatable, **extra}
                capacity = {**capacity, **extra}
        out.append(SchedulableInstanceType(it.name, allocatable, capacity, it.labels, offerings))
    return out


class CatalogInstanceTypes:
    """Instance types per node class: the live catalog (bundled when EC2 cannot be read), real prices,
    NodeOverlay prices and capacity, and the unavailable-offerings cache applied at each read.

    With no ``catalog_source`` it reads the bundled snapshot (``plan``, tests); ``plan --catalog`` gives a
    file as the source and the prices (``catalog.sources.DescribedCatalog``). Built catalogs are cached
    per (facts, prices, zones, kubelet, AMI family), so a warm invocation only re-applies availability
    and overlays, which are cheap.
    """

    def __init__(
        self,
        region: str,
        clock: Clock,
        *,
        catalog_source: SnapshotSource | None = None,
        prices: PriceTable | None = None,
        unavailable: InMemoryUnavailableOfferings | DynamoDBUnavailableOfferings | None = None,
        overlays: Callable[[], Sequence[Mapping[str, Any]]] | None = None,
        overlay_refresh_seconds: float = 10.0,
        model_missing_spot: bool = True,
    ) -> None:
        self._region = region
        # With no spot prices, spot offerings are modelled (EC2's history unread); a file's are complete.
        self._model_missing_spot = model_missing_spot
        self._clock = clock
        self._source = catalog_source
        self._prices = prices
        self.unavailable = unavailable if unavailable is not None else InMemoryUnavailableOfferings(clock)
        self._overlay_source = overlays
        self._overlay_refresh = timedelta(seconds=overlay_refresh_seconds)
        self._overlays = Overlays(())
        self._overlays_at: datetime | None = None
        self._built: dict[tuple[Any, ...], tuple[Any, Any, Any, InstanceTypeCatalog]] = {}

    def overlays(self) -> Overlays:
        if self._overlay_source is None:
            return self._overlays
        now = self._clock.now()
        if self._overlays_at is None or now - self._overlays_at >= self._overlay_refresh:
            self._overlays = Overlays.from_manifests(self._overlay_source())
            self._overlays_at = now
        return self._overlays

    def catalog(
        self, zones: Collection[str], kubelet: KubeletConfig | None, ami_family: str
    ) -> InstanceTypeCatalog:
        if self._source is None:
            return load_bundled_catalog(self._region, zones, kubelet=kubelet, ami_family_name=ami_family)
        snapshot = self._source.snapshot()
        on_demand = (
            self._prices.on_demand_prices() if self._prices else bundled_on_demand_prices(self._region)
        )
        spot = self._prices.spot_prices() if self._prices else {}
        key = (frozenset(zones), kubelet, ami_family)
        cached = self._built.get(key)
        # The inputs are kept with the catalog and compared by identity: a refresh makes new objects.
        if cached is not None and cached[0] is snapshot and cached[1] is on_demand and cached[2] is spot:
            return cached[3]
        built_spot = spot
        if not built_spot and self._model_missing_spot:
            built_spot = DEFAULT_SPOT_MODEL.spot_prices(on_demand, snapshot.offered_zones)
        built = build_catalog(
            snapshot.instance_types,
            snapshot.offered_zones,
            region=self._region,
            zones=zones,
            zone_ids=snapshot.zone_ids,
            on_demand_prices=on_demand,
            spot_prices=built_spot,
            kubelet=kubelet,
            ami_family_name=ami_family,
        )
        if len(self._built) >= 16:
            self._built.clear()
        self._built[key] = (snapshot, on_demand, spot, built)
        return built

    def instance_types(
        self, nodeclass: ResolvedNodeClass, spec: Mapping[str, Any]
    ) -> list[SchedulableInstanceType]:
        kubelet = KubeletConfig.from_spec((spec.get("spec") or {}).get("kubelet"))
        catalog = self.catalog(nodeclass.zones, kubelet, nodeclass.ami_family).with_unavailable(
            self.unavailable.frozen()
        )
        return schedulable_types(catalog, nodeclass, self.overlays())

    def mark_unavailable(self, capacity_type: str, instance_type: str, zone: str, reason: str) -> None:
        self.unavailable.mark_unavailable(capacity_type, instance_type, zone, reason)
        metrics.add_metric(name=MetricName.UNAVAILABLE_OFFERING_HITS, unit=MetricUnit.Count, value=1)

    def mark_capacity_type_unavailable(self, capacity_type: str, reason: str) -> None:
        self.unavailable.mark_capacity_type_unavailable(capacity_type, reason)
        metrics.add_metric(name=MetricName.UNAVAILABLE_OFFERING_HITS, unit=MetricUnit.Count, value=1)

    def is_unavailable(self, capacity_type: str, instance_type: str, zone: str) -> bool:
        return self.unavailable.is_unavailable(capacity_type, instance_type, zone)


def pricing_client(endpoint_region: str) -> PricingClient:
    """The Pricing API's client: bounded, since prices fall back to the persisted and bundled ones."""
    return aws.client("pricing", endpoint_region, has_fallback=True)


def build_control_plane(
    settings: Settings | None = None,
    clock: Clock | None = None,
    provisioner: ProvisionerInvoker | None = None,
) -> ControlPlane:
    """The Lambda's adapters; ``provisioner`` replaces the Lambda invocation that wakes the provisioner
    (the simulator runs it in-process)."""
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
    tokens = TokenSource(settings.cluster_name, region, clock.now, aws.shared_session(region))
    cfg = configuration(
        endpoint,
        tokens.token,
        verify_tls=settings.kubernetes_verify_tls and ca_file is not None,
        ca_file=ca_file,
    )
    kube = KubernetesGateway(k8s.ApiClient(cfg), clock, timeouts=settings.kubernetes_timeouts)
    network = cluster.get("kubernetesNetworkConfig") or {}
    info = amifamily.ClusterInfo(
        name=settings.cluster_name,
        endpoint=cluster.get("endpoint", endpoint),
        certificate_authority=ca_data,
        service_cidr=network.get("serviceIpv4Cidr") or "10.100.0.0/16",
        kubernetes_version=str(cluster.get("version") or "1.31"),
    )
    ec2 = aws.client("ec2", region)
    dynamodb = aws.client("dynamodb", region)
    # An emulated endpoint (the local simulation, moto) has no Pricing API and no spot market worth
    # reading, and its instance types are the bundled snapshot's (made from moto's data), which loads in
    # milliseconds where moto's DescribeInstanceTypes takes seconds: use the bundled catalog there.
    emulated = bool(settings.aws_endpoint_url)
    persisted = PersistedBlobs(dynamodb, settings.state_table_name) if settings.state_table_name else None
    instance_types = CatalogInstanceTypes(
        region,
        clock,
        catalog_source=None if emulated else LiveCatalogSource(ec2, region, clock, persisted=persisted),
        prices=PriceSource(
            region,
            clock,
            pricing_client=None if emulated else pricing_client,
            ec2=ec2,
            use_spot_history=not emulated,
            persisted=persisted,
        ),
        unavailable=(
            DynamoDBUnavailableOfferings(dynamodb, settings.state_table_name, clock)
            if settings.state_table_name
            else InMemoryUnavailableOfferings(clock)
        ),
        overlays=kube.list_nodeoverlays,
    )
    return ControlPlane(
        settings=settings,
        clock=clock,
        kube=kube,
        store=NodeClaimStore(dynamodb, settings.state_table_name),
        launcher=FleetLauncher(ec2, settings.cluster_name, info, clock),
        resolver=NodeClassResolver(
            ec2,
            aws.client("ssm", region),
            aws.client("iam", region),
            settings.cluster_name,
            info.kubernetes_version,
            now=clock.now,
        ),
        instance_types=instance_types,
        provisioner=provisioner or LambdaProvisionerInvoker(settings.provisioner_function_name, region),
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


def installed_control_plane() -> ControlPlane | None:
    """The control plane installed or built so far in this process, without building one."""
    with _lock:
        return _plane
