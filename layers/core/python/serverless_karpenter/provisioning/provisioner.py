"""Provisioning: pending pods -> scheduling simulation -> NodeClaim records -> CreateFleet."""

from __future__ import annotations

import contextlib
import secrets
import string
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from serverless_karpenter import crashpoints, solver
from serverless_karpenter.adapters.kubernetes import KubernetesError
from serverless_karpenter.adapters.providers.model import ResolvedNodeClass
from serverless_karpenter.api import labels as wk
from serverless_karpenter.api.ec2nodeclass import EC2NODECLASS_HASH_VERSION, EC2NodeClass
from serverless_karpenter.api.errors import ManifestError
from serverless_karpenter.api.nodepool import NODEPOOL_HASH_VERSION, NodePool
from serverless_karpenter.lifecycle.launch import launch_record
from serverless_karpenter.lifecycle.model import InstanceTypeOption, NodeClaimRecord, NodeClaimState
from serverless_karpenter.observability import MetricName, MetricUnit, Msg, logger, metrics
from serverless_karpenter.provisioning.context import ControlPlane, InstanceTypeProvider
from serverless_karpenter.provisioning.nodepool_validation import (
    VALIDATION_FAILED,
    InvalidNodePool,
    split_usable,
)
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.daemonsets import (
    daemonset_pod,
    node_daemons,
    remaining_daemon_requests,
    template_terms,
)
from serverless_karpenter.scheduling.requirements import Requirements
from serverless_karpenter.scheduling.scheduler import (
    ExistingCapacity,
    InstanceTypeLike,
    NewNodeClaim,
    NodePoolTemplate,
    Scheduler,
    SchedulingResult,
    choose_offering,
    instance_type_mismatch,
    nodepool_requirements,
    offering_allowed,
    truncate_instance_types,
)
from serverless_karpenter.scheduling.taints import is_known_ephemeral, taints_from_dicts
from serverless_karpenter.scheduling.volumes import VolumeIndex
from serverless_karpenter.termination.handoff import is_node_deleting, pods_on_deleting_nodes

_NAME_ALPHABET = string.ascii_lowercase + string.digits


@dataclass
class ProvisioningResult:
    pending: int = 0
    launched: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    unschedulable: dict[str, dict[str, str]] = field(default_factory=dict)


def new_nodeclaim_name(nodepool: str) -> str:
    return f"{nodepool}-" + "".join(secrets.choice(_NAME_ALPHABET) for _ in range(5))


class HasInstanceTypes(Protocol):
    """Where instance types come from: the control plane, or ``plan``'s offline catalog."""

    @property
    def instance_types(self) -> InstanceTypeProvider: ...


def nodeclass_ref(nodepool: Mapping[str, Any]) -> str:
    """The name of the EC2NodeClass a NodePool's template points to ("" when it names none)."""
    spec = nodepool.get("spec") or {}
    ref = ((spec.get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
    return str(ref.get("name") or "")


def build_templates(
    nodepools: Sequence[Mapping[str, Any]],
    nodeclasses: Mapping[str, ResolvedNodeClass],
    nodeclass_specs: Mapping[str, Mapping[str, Any]],
    plane: HasInstanceTypes,
    daemonsets: Sequence[Mapping[str, Any]],
    usage: Mapping[str, resources.ResourceList],
) -> tuple[list[NodePoolTemplate], dict[str, str]]:
    """NodePool templates for the scheduler, and why any NodePool cannot be used."""
    templates: list[NodePoolTemplate] = []
    problems: dict[str, str] = {}
    daemon_pods = [daemonset_pod(ds) for ds in daemonsets]
    for nodepool in nodepools:
        name = nodepool["metadata"]["name"]
        spec = nodepool.get("spec") or {}
        nodeclass = nodeclasses.get(nodeclass_ref(nodepool))
        if nodeclass is None:
            problems[name] = f'nodeClassRef "{nodeclass_ref(nodepool)}" is not a ready EC2NodeClass'
            continue
        reqs, labels, taints = nodepool_requirements(nodepool)
        limits = resources.parse_list(spec.get("limits"))
        remaining = (
            resources.subtract(limits, {k: usage.get(name, {}).get(k, 0) for k in limits}) if limits else None
        )
        templates.append(
            NodePoolTemplate(
                name=name,
                nodeclass=nodeclass.name,
                weight=int(spec.get("weight") or 0),
                requirements=reqs,
                labels=labels,
                taints=taints,
                instance_types=plane.instance_types.instance_types(
                    nodeclass, nodeclass_specs[nodeclass.name]
                ),
                remaining=remaining,
                daemonsets=daemon_pods,
            )
        )
    return templates, problems


def daemon_overhead(
    daemonsets: Sequence[Mapping[str, Any]],
    requirements: Requirements,
    labels: Mapping[str, str],
    taints: Any,
) -> resources.ResourceList:
    """Requests of the DaemonSets that could run on some node of this NodePool, all at once (``doctor``'s
    worst case; the scheduler charges each instance type its own, see NodePoolTemplate.daemon_groups)."""
    pods = [daemonset_pod(ds) for ds in daemonsets]
    return podlib.total_requests(p for p in pods if template_terms(p, requirements, taints)) if pods else {}


def existing_capacity(
    nodes: Sequence[Mapping[str, Any]],
    bound_pods: Sequence[Mapping[str, Any]],
    records: Sequence[NodeClaimRecord],
    *,
    nodepools: Sequence[Mapping[str, Any]] = (),
    daemon_pods: Sequence[Mapping[str, Any]] = (),
    instance_type_labels: Mapping[str, Mapping[str, str]] | None = None,
) -> list[ExistingCapacity]:
    """Nodes that take pods, then in-flight NodeClaims whose node has not registered yet.

    Nodes being deleted (or tainted for disruption) are not capacity: their pods are rescheduled. As
    Karpenter's cluster state: a node of ours not yet initialized is taken without the taints it will
    lose (Karpenter's known ephemeral taints and its NodePool's startupTaints), and each node keeps room
    for the DaemonSets that will run there but have no pod on it yet (``daemon_pods``: their pods, as
    :func:`daemonsets.daemonset_pod` makes them). A launched NodeClaim carries
    the labels of what is known of it (``instance_type_labels``: the launched type's, by name)."""
    used: dict[str, list[Mapping[str, Any]]] = {}
    for pod in bound_pods:
        name = podlib.node_name(pod)
        if name and not podlib.is_terminal(pod):
            used.setdefault(name, []).append(pod)
    by_node = {key: r for r in records for key in (r.provider_id, r.node_name) if key}
    startup = {
        np["metadata"]["name"]: (((np.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
            "startupTaints"
        )
        for np in nodepools
    }
    out: list[ExistingCapacity] = []
    starting_nodes: list[ExistingCapacity] = []
    provider_ids = set()
    for node in nodes:
        meta, spec = node.get("metadata", {}), node.get("spec", {})
        provider_ids.add(spec.get("providerID"))
        if meta.get("deletionTimestamp") or spec.get("unschedulable") or is_node_deleting(node):
            continue
        labels = dict(meta.get("labels") or {})
        record = by_node.get(spec.get("providerID")) or by_node.get(meta["name"])
        taints = taints_from_dicts(spec.get("taints"))
        starting = _starting(labels, record)
        if starting:
            # Karpenter assumes these go away as the node initializes, and schedules against it anyway.
            pool_startup = taints_from_dicts(
                record.startup_taints if record is not None else startup.get(labels.get(wk.NODEPOOL, ""))
            )
            taints = tuple(
                t for t in taints if not is_known_ephemeral(t) and not any(t.matches(s) for s in pool_startup)
            )
        running = used.get(meta["name"], [])
        allocatable = resources.parse_list((node.get("status") or {}).get("allocatable"))
        if starting and record is not None:
            # A kubelet reports extended resources (GPUs) as 0 until its device plugin registers; until
            # the node is initialized, Karpenter counts what its NodeClaim expects.
            for name, expected in record.expected_allocatable().items():
                if allocatable.get(name, 0) == 0 and expected > 0:
                    allocatable[name] = expected
        daemons = remaining_daemon_requests(node_daemons(daemon_pods, labels, taints), running)
        # Karpenter tries initialized nodes before those still starting (stable otherwise).
        (starting_nodes if starting else out).append(
            ExistingCapacity(
                name=meta["name"],
                labels=labels,
                taints=taints,
                available=resources.subtract(
                    allocatable, resources.merge(podlib.total_requests(running), daemons)
                ),
                bound_pods=list(running),
            )
        )
    out += starting_nodes
    for record in records:
        if not record.is_in_flight or (record.provider_id and record.provider_id in provider_ids):
            continue
        reqs = Requirements.from_node_selector_requirements(record.requirements)
        labels = in_flight_labels(record, reqs, instance_type_labels or {})
        taints = taints_from_dicts(record.taints)
        # Launched, its instance type says which DaemonSets it runs; before, the claim's estimate stands.
        daemons = (
            remaining_daemon_requests(node_daemons(daemon_pods, labels, taints), [])
            if record.instance_type and daemon_pods
            else record.daemon_requests()
        )
        out.append(
            ExistingCapacity(
                name=f"nodeclaim/{record.name}",
                labels=labels,
                taints=taints,
                available=resources.subtract(record.expected_allocatable(), daemons),
                in_flight=True,
                requirements=None if record.instance_id else reqs,
            )
        )
    return out


def _starting(labels: Mapping[str, str], record: NodeClaimRecord | None) -> bool:
    """A node of ours (a NodeClaim's, or labelled with a NodePool as in ``plan``'s manifests) that is not
    initialized yet: no ``karpenter.sh/initialized`` label, and no record saying it is."""
    if record is None and wk.NODEPOOL not in labels:
        return False  # not Karpenter's: its taints are what they are
    if labels.get(wk.INITIALIZED) == "true":
        return False
    return record is None or record.state != NodeClaimState.INITIALIZED


def in_flight_labels(
    record: NodeClaimRecord, requirements: Requirements, instance_type_labels: Mapping[str, Mapping[str, str]]
) -> dict[str, str]:
    """The labels a launched NodeClaim's node will have, from what is known: the launched instance type's
    labels, its zone and capacity type, its NodePool and its single-valued requirements (as Karpenter
    labels a NodeClaim at launch). Before launch the record's requirements stand in for them."""
    labels = {k: v for k, v in requirements.single_valued_labels().items() if k != wk.HOSTNAME}
    labels.update(record.labels)
    labels[wk.NODEPOOL] = record.nodepool
    if record.instance_type:
        labels.update(instance_type_labels.get(record.instance_type) or {})
        labels[wk.INSTANCE_TYPE] = record.instance_type
        option = next((o for o in record.instance_type_options if o.name == record.instance_type), None)
        if option is not None:
            labels.setdefault(wk.ARCH, option.arch)
    if record.zone:
        labels[wk.ZONE] = record.zone
    if record.capacity_type:
        labels[wk.CAPACITY_TYPE] = record.capacity_type
    return labels


def nodepool_usage(
    nodes: Sequence[Mapping[str, Any]], records: Sequence[NodeClaimRecord]
) -> dict[str, resources.ResourceList]:
    """What each NodePool's nodes use of its ``limits``: Karpenter's cluster state, where every node
    labelled with the NodePool (a Node with no NodeClaim record too) and every NodeClaim not yet a Node
    counts its capacity plus one ``nodes``. A record whose Node exists counts once, as the Node. Nodes
    being deleted or disrupted count no more (Karpenter's MarkedForDeletion), so their replacements fit."""
    usage: dict[str, resources.ResourceList] = {}

    def add(pool: str, capacity: Mapping[str, int]) -> None:
        usage[pool] = resources.merge(usage.get(pool, {}), capacity, {resources.NODES: 1})

    present: set[str] = set()
    for node in nodes:
        meta, spec = node.get("metadata") or {}, node.get("spec") or {}
        present.update(filter(None, (meta.get("name"), spec.get("providerID"))))
        pool = (meta.get("labels") or {}).get(wk.NODEPOOL)
        if not pool or meta.get("deletionTimestamp") or is_node_deleting(node):
            continue
        status = node.get("status") or {}
        add(pool, resources.parse_list(status.get("capacity") or status.get("allocatable")))
    for record in records:
        if not record.is_active or {record.node_name, record.provider_id} & present:
            continue
        add(record.nodepool, record.expected_capacity())
    return usage


@dataclass
class ClusterState:
    """Everything the provisioning simulation reads: from the API server live, from manifests in ``plan``."""

    nodepools: Sequence[Mapping[str, Any]]
    nodeclass_specs: Mapping[str, Mapping[str, Any]]
    resolved: Mapping[str, ResolvedNodeClass]
    nodes: Sequence[Mapping[str, Any]] = ()
    bound_pods: Sequence[Mapping[str, Any]] = ()
    records: Sequence[NodeClaimRecord] = ()
    daemonsets: Sequence[Mapping[str, Any]] = ()
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    volumes: VolumeIndex | None = None
    # Why each EC2NodeClass in nodeclass_specs but not in resolved is not ready.
    nodeclass_errors: Mapping[str, str] = field(default_factory=dict)
    # NodePools Karpenter's validation rejects: kept out of ``nodepools``, so that one bad NodePool is
    # skipped alone and never stops the others (see nodepool_validation).
    invalid_nodepools: list[InvalidNodePool] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.nodepools, self.invalid_nodepools = split_usable(self.nodepools)


def simulate_provisioning(
    state: ClusterState,
    pending: Sequence[Mapping[str, Any]],
    plane: HasInstanceTypes,
    *,
    time_budget_s: float | None = None,
) -> tuple[SchedulingResult, solver.SolveReport | None, list[NodePoolTemplate]]:
    """The one provisioning simulation, shared by the live provisioner and ``plan``: NodePool templates
    (DaemonSet overhead, limits net of what is launched), existing nodes and in-flight NodeClaims, then
    Karpenter's scheduling of the pending pods, then the cost solver's repacking of the new NodeClaims
    (with its report; None when nothing new is needed). NodePools that cannot be used give their reason
    to every unschedulable pod. The templates are returned too, for what a pass reports on NodePools."""
    templates, problems = build_templates(
        state.nodepools,
        state.resolved,
        state.nodeclass_specs,
        plane,
        state.daemonsets,
        nodepool_usage(state.nodes, state.records),
    )
    for invalid in state.invalid_nodepools:
        problems[invalid.name] = f"NodePool is not valid: {invalid.problem}"
    capacity = existing_capacity(
        state.nodes,
        state.bound_pods,
        state.records,
        nodepools=state.nodepools,
        daemon_pods=[daemonset_pod(ds) for ds in state.daemonsets],
        instance_type_labels={it.name: it.labels for t in templates for it in t.instance_types},
    )
    result = Scheduler(templates, capacity, namespaces=state.namespaces, volumes=state.volumes).solve(pending)
    for reasons in result.unschedulable.values():
        for pool, problem in problems.items():
            reasons.setdefault(pool, problem)
        if problems and "" in reasons and len(reasons) > 1:
            del reasons[""]
    report = None
    if result.new_nodeclaims:
        budget = solver.default_budget(len(pending)) if time_budget_s is None else time_budget_s
        result, report = solver.improve(
            result,
            templates,
            budget,
            pending,
            existing=capacity,
            namespaces=state.namespaces,
            volumes=state.volumes,
        )
    return truncate_instance_types(result), report, templates


# Karpenter's Warning on a NodePool whose requirements, with its EC2NodeClass, leave no instance type with
# an available offering (its provisioner's event, with its message).
NO_COMPATIBLE_INSTANCE_TYPES = "NoCompatibleInstanceTypes"
NO_COMPATIBLE_INSTANCE_TYPES_MESSAGE = (
    "NodePool requirements filtered out all compatible available instance types"
)
# Ours, where Karpenter is vaguer: for a nodeClassRef it cannot resolve it publishes a Warning "Failed
# resolving NodeClass" (with no reason in most versions) and sets the NodePool's NodeClassReady condition
# false (reasons NodeClassNotFound, or the class's own); for spec.limits its scheduler fails the pods
# with "all available instance types exceed limits for nodepool" and the NodePool gets nothing. The
# condition's reasons, and one in their style for limits, tell `kubectl describe nodepool` which it is.
NODECLASS_NOT_FOUND = "NodeClassNotFound"
NODECLASS_NOT_READY = "NodeClassNotReady"
LIMITS_EXCEEDED = "LimitsExceeded"
# Karpenter's Warning on a pod no NodePool can take; its message is "Failed to schedule pod, <error>",
# and ours is the reason NodePool by NodePool that `explain pod` prints.
FAILED_SCHEDULING = "FailedScheduling"


@dataclass(frozen=True)
class NodePoolWarning:
    nodepool: Mapping[str, Any]  # as listed: apiVersion, kind and metadata for the Event's reference
    reason: str
    message: str


def nodepool_warnings(
    state: ClusterState,
    unschedulable: Mapping[str, Mapping[str, str]],
    instance_types: Mapping[str, Sequence[InstanceTypeLike]] | None = None,
) -> list[NodePoolWarning]:
    """At most one Warning per NodePool for a provisioning pass: its nodeClassRef is not a ready
    EC2NodeClass, its requirements leave none of the class's ``instance_types`` (by EC2NodeClass name;
    a class not in it is not checked), or its spec.limits kept pods from being placed (one Warning
    however many pods)."""
    limited: dict[str, list[str]] = {}
    for _, reasons in sorted(unschedulable.items()):
        for pool, reason in reasons.items():
            # The scheduler's wording for a pod that only limits keep off this NodePool (_limits_reason).
            prefix = f'nodepool "{pool}" limits: '
            if reason.startswith(prefix):
                limited.setdefault(pool, []).append(reason[len(prefix) :])
    out: list[NodePoolWarning] = []
    for nodepool in state.nodepools:
        name = nodepool["metadata"]["name"]
        ref = nodeclass_ref(nodepool)
        if ref in state.resolved:
            if instance_types is not None and ref in instance_types:
                requirements, _, _ = nodepool_requirements(nodepool)
                if all(instance_type_mismatch(requirements, it) is not None for it in instance_types[ref]):
                    out.append(
                        NodePoolWarning(
                            nodepool, NO_COMPATIBLE_INSTANCE_TYPES, NO_COMPATIBLE_INSTANCE_TYPES_MESSAGE
                        )
                    )
                    continue
            if name in limited:
                out.append(
                    NodePoolWarning(
                        nodepool,
                        LIMITS_EXCEEDED,
                        "all available instance types exceed limits for nodepool: "
                        f"{len(limited[name])} pod(s) not placed ({limited[name][0]})",
                    )
                )
        elif ref in state.nodeclass_specs:
            why = state.nodeclass_errors.get(ref, "").removeprefix(f'EC2NodeClass "{ref}": ')
            out.append(
                NodePoolWarning(
                    nodepool,
                    NODECLASS_NOT_READY,
                    f'EC2NodeClass "{ref}" is not ready' + (f": {why}" if why else ""),
                )
            )
        else:
            out.append(
                NodePoolWarning(nodepool, NODECLASS_NOT_FOUND, f'EC2NodeClass "{ref}" not found on cluster')
            )
    return out


def namespace_labels(namespaces: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """Namespace name -> labels, with the automatic ``kubernetes.io/metadata.name`` label."""
    out: dict[str, dict[str, str]] = {}
    for ns in namespaces:
        name = (ns.get("metadata") or {}).get("name", "")
        out[name] = {"kubernetes.io/metadata.name": name, **((ns.get("metadata") or {}).get("labels") or {})}
    return out


class Provisioner:
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def cluster_state(
        self,
        records: Sequence[NodeClaimRecord],
        *,
        nodes: Sequence[dict[str, Any]] | None = None,
        nodeclass_specs: Sequence[dict[str, Any]] | None = None,
        nodepools: Sequence[dict[str, Any]] | None = None,
    ) -> ClusterState:
        """What scheduling reads of the cluster; ``nodes``, ``nodeclass_specs`` and ``nodepools`` as the
        caller listed them this pass (else listed here)."""
        kube = self.plane.kube
        listed_specs = kube.list_ec2nodeclasses() if nodeclass_specs is None else nodeclass_specs
        specs = {nc["metadata"]["name"]: nc for nc in listed_specs}
        resolved: dict[str, ResolvedNodeClass] = {}
        errors: dict[str, str] = {}
        for name, spec in specs.items():
            try:
                resolved[name] = self.plane.resolver.resolve(spec)
            except ValueError as error:
                errors[name] = str(error)
                logger.warning("EC2NodeClass not ready", extra={"ec2nodeclass": name, "error": str(error)})
        bound = [p for p in kube.list_pods(field_selector="spec.nodeName!=") if not podlib.is_terminal(p)]
        namespaces: dict[str, dict[str, str]] = {}
        volumes: VolumeIndex | None = None
        csinodes: Sequence[Mapping[str, Any]] = ()
        try:
            csinodes = kube.list_csi_nodes()
        except KubernetesError as error:
            # A ClusterRole from before csinodes were read: volume topology still holds, without the
            # existing nodes' volume limits.
            logger.warning("cannot read CSINodes", extra={"error": str(error)})
        try:
            namespaces = namespace_labels(kube.list_namespaces())
            volumes = VolumeIndex.build(
                kube.list_persistent_volume_claims(),
                kube.list_persistent_volumes(),
                kube.list_storage_classes(),
                csinodes,
            )
        except KubernetesError as error:
            # Without read access to these, pods are scheduled without volume topology, as before.
            logger.warning("cannot read namespaces or volumes", extra={"error": str(error)})
        return ClusterState(
            nodepools=kube.list_nodepools() if nodepools is None else list(nodepools),
            nodeclass_specs=specs,
            resolved=resolved,
            nodes=kube.list_nodes() if nodes is None else list(nodes),
            bound_pods=bound,
            records=list(records),
            daemonsets=kube.list_daemonsets(),
            namespaces=namespaces,
            volumes=volumes,
            nodeclass_errors=errors,
        )

    def schedule(
        self, pending: Sequence[Mapping[str, Any]], records: Sequence[NodeClaimRecord]
    ) -> tuple[SchedulingResult, solver.SolveReport | None, dict[str, ResolvedNodeClass]]:
        state = self.cluster_state(records)
        result, report, _ = simulate_provisioning(state, pending, self.plane)
        return result, report, dict(state.resolved)

    def provision(
        self,
        renew_lease: Callable[[], bool] | None = None,
        *,
        records: Sequence[NodeClaimRecord] | None = None,
        nodes: Sequence[dict[str, Any]] | None = None,
        nodeclass_specs: Sequence[dict[str, Any]] | None = None,
        nodepools: Sequence[dict[str, Any]] | None = None,
    ) -> ProvisioningResult:
        """Provision pending pods. ``renew_lease`` is called before each launch; when it fails, another
        writer has taken over and this one stops launching (fencing).

        ``records``, ``nodes``, ``nodeclass_specs`` and ``nodepools``: as the lifecycle reconcile of the
        same invocation left them, so that each is read once a pass (else read here, the Nodes before the
        records: see ``LifecycleReconciler.reconcile``)."""
        plane = self.plane
        pending = [p for p in plane.kube.list_pending_pods() if podlib.is_provisionable(p)]
        if nodes is None:
            nodes = plane.kube.list_nodes()
        # Issue 6 (termination): like Karpenter, count the reschedulable pods of nodes being deleted as
        # pending, so replacement capacity launches while the drain is still under way.
        pending += pods_on_deleting_nodes(plane.kube, plane.clock.now(), nodes)
        if pending:
            # Published only while pods wait: a custom metric is billed for every hour it is published
            # in, and an idle cluster's zeros would cost $0.30 a month to say nothing (the dashboard fills
            # the gaps with 0).
            metrics.add_metric(name=MetricName.PENDING_PODS, unit=MetricUnit.Count, value=len(pending))
        outcome = ProvisioningResult(pending=len(pending))
        if not pending:
            return outcome
        logger.info(
            Msg.FOUND_PROVISIONABLE_PODS,
            extra={"pods": [podlib.key(p) for p in pending][:50], "count": len(pending)},
        )
        if records is None:
            records = plane.store.list_live()
        started = time.perf_counter()  # compute time, not control-plane time: the clock may be virtual
        # As ``schedule``, keeping the state: NodePool Events need what it says about NodePools.
        state = self.cluster_state(records, nodes=nodes, nodeclass_specs=nodeclass_specs, nodepools=nodepools)
        result, report, templates = simulate_provisioning(state, pending, plane)
        resolved = state.resolved
        metrics.add_metric(
            name=MetricName.SOLVE_DURATION, unit=MetricUnit.Seconds, value=time.perf_counter() - started
        )
        if report is not None:
            metrics.add_metric(
                name=MetricName.SOLVE_COST_GAP, unit=MetricUnit.Percent, value=round(100 * report.gap, 3)
            )
            logger.info(
                Msg.SOLVED_PLACEMENT,
                extra={
                    "cost-per-hour": round(report.cost, 4),
                    "lower-bound-per-hour": round(report.lower_bound, 4),
                    "gap-percent": round(100 * report.gap, 2),
                    "first-fit-cost-per-hour": round(report.ffd_cost, 4),
                    "solver-seconds": round(report.seconds, 3),
                },
            )
        outcome.unschedulable = result.unschedulable
        if result.new_nodeclaims:
            logger.info(
                Msg.COMPUTED_NEW_NODECLAIMS,
                extra={
                    "nodeclaims": len(result.new_nodeclaims),
                    "pods": sum(len(c.pods) for c in result.new_nodeclaims),
                },
            )
        by_key = {podlib.key(p): p for p in pending}
        for pod_key, reasons in result.unschedulable.items():
            message = explain(reasons)
            logger.warning(Msg.COULD_NOT_SCHEDULE_POD, extra={"pod": pod_key, "reason": message})
            plane.kube.record_event(
                by_key[pod_key], FAILED_SCHEDULING, f"Failed to schedule pod, {message}", "Warning"
            )
        # The instance types each ready EC2NodeClass offers, as the templates listed them for this pass.
        offered = {t.nodeclass: t.instance_types for t in templates}
        for warning in nodepool_warnings(state, result.unschedulable, offered):
            plane.kube.record_event(warning.nodepool, warning.reason, warning.message, "Warning")
        self.report_validation(state)
        metrics.add_metric(
            name=MetricName.PODS_UNSCHEDULABLE, unit=MetricUnit.Count, value=len(result.unschedulable)
        )
        metrics.add_metric(
            name=MetricName.PODS_SCHEDULED,
            unit=MetricUnit.Count,
            value=sum(len(c.pods) for c in result.new_nodeclaims)
            + sum(len(v) for v in result.existing.values()),
        )
        pools, classes = parsed_templates(state) if result.new_nodeclaims else ({}, {})
        for claim in result.new_nodeclaims:
            if renew_lease is not None and not renew_lease():
                logger.warning("lost the provisioner lease; leaving the rest to the new writer")
                break
            record = self.create_record(claim, pools.get(claim.nodepool), classes.get(claim.nodeclass))
            if record is None:
                continue
            crashpoints.hit(crashpoints.AFTER_NODECLAIM_WRITE)
            for pod_key in record.pods:
                if pod_key in by_key:
                    # Karpenter's event: the pod is waiting for this claim's node, not stuck.
                    plane.kube.record_event(
                        by_key[pod_key], "Nominated", f"Pod should schedule on: nodeclaim/{record.name}"
                    )
            launched = launch_record(
                plane, record, resolved.get(record.nodeclass), state.nodepools, created_now=True
            )
            (outcome.launched if launched.state == NodeClaimState.LAUNCHED else outcome.failed).append(
                record.name
            )
        return outcome

    def report_validation(self, state: ClusterState) -> None:
        """Say why each invalid NodePool is skipped (a log line and a Warning Event). Its conditions
        (ValidationSucceeded, Ready) are written with the rest of its status by the lifecycle pass
        (:mod:`serverless_karpenter.lifecycle.nodepool_status`)."""
        for invalid in state.invalid_nodepools:
            logger.warning(
                "NodePool is not valid; skipping it",
                extra={"nodepool": invalid.name, "error": invalid.problem},
            )
            self.plane.kube.record_event(invalid.manifest, VALIDATION_FAILED, invalid.problem, "Warning")

    def create_record(
        self, claim: NewNodeClaim, nodepool: NodePool | None, nodeclass: EC2NodeClass | None
    ) -> NodeClaimRecord | None:
        """Write the record of a new NodeClaim, before any launch. Like Karpenter's NodeClaim it carries
        what its NodePool and EC2NodeClass said when it was made (see :func:`from_templates`)."""
        chosen = choose_offering(claim)
        if chosen is None:
            return None
        options = []
        for it in claim.instance_types:
            offerings = sorted(
                (
                    (o.zone, o.capacity_type, o.price)
                    for o in it.offerings
                    if offering_allowed(claim.requirements, o)
                ),
                key=lambda o: o[2],
            )
            options.append(
                InstanceTypeOption(
                    name=it.name,
                    arch=it.labels.get(wk.ARCH, "amd64"),
                    offerings=offerings,
                    allocatable=dict(it.allocatable),
                    capacity=dict(it.capacity),
                )
            )
        labels = {**claim.requirements.labels(), **claim.labels}
        record = NodeClaimRecord(
            name=new_nodeclaim_name(claim.nodepool),
            nodepool=claim.nodepool,
            nodeclass=claim.nodeclass,
            requirements=[
                r for req in claim.requirements.values() for r in req.to_node_selector_requirements()
            ],
            instance_type_options=options,
            requests=claim.requests,
            daemon_overhead=dict(claim.daemon_overhead),
            pods=list(claim.pods),
            labels=labels,
            taints=[t.to_dict() for t in claim.taints],
            created_at=self.plane.clock.now(),
            **from_templates(nodepool, nodeclass),
        )
        self.plane.store.create(record)
        metrics.add_metric(name=MetricName.NODECLAIMS_CREATED, unit=MetricUnit.Count, value=1)
        logger.info(
            Msg.CREATED_NODECLAIM,
            extra={
                "nodeclaim": record.name,
                "nodepool": record.nodepool,
                "requests": resources.format_list(claim.requests),
                "instance-types": ", ".join(o.name for o in options[:5])
                + (f" and {len(options) - 5} other(s)" if len(options) > 5 else ""),
            },
        )
        return record


def from_templates(nodepool: NodePool | None, nodeclass: EC2NodeClass | None) -> dict[str, Any]:
    """The record fields Karpenter copies onto a NodeClaim when it creates it: expireAfter and
    terminationGracePeriod (a later NodePool edit changes the hash, so old nodes drift, rather than
    reaching back into their lifetime), and the NodePool and EC2NodeClass hashes drift compares with."""
    fields: dict[str, Any] = {}
    if nodepool is not None:
        expire_after = nodepool.expire_after_timedelta()
        grace = nodepool.termination_grace_period_timedelta()
        fields["expire_after_seconds"] = expire_after.total_seconds() if expire_after is not None else None
        fields["termination_grace_period_seconds"] = grace.total_seconds() if grace is not None else None
    # The template's annotations go on the claim and its Node, as Karpenter's claim template does.
    template = dict(nodepool.spec.template.metadata.annotations or {}) if nodepool is not None else {}
    annotations = {**template, **drift_hashes(nodepool, nodeclass)}
    if annotations:
        fields["annotations"] = annotations
    return fields


def drift_hashes(nodepool: NodePool | None, nodeclass: EC2NodeClass | None) -> dict[str, str]:
    """The NodePool and EC2NodeClass hashes a NodeClaim carries, for drift to compare with, each with the
    version of its computation (Karpenter's ``-hash-version`` annotations; ours are our own, see
    :data:`~serverless_karpenter.api.nodepool.NODEPOOL_HASH_VERSION`)."""
    hashes: dict[str, str] = {}
    if nodepool is not None:
        hashes[wk.NODEPOOL_HASH] = nodepool.template_hash()
        hashes[wk.NODEPOOL_HASH_VERSION] = NODEPOOL_HASH_VERSION
    if nodeclass is not None:
        hashes[wk.EC2NODECLASS_HASH] = nodeclass.static_hash()
        hashes[wk.EC2NODECLASS_HASH_VERSION] = EC2NODECLASS_HASH_VERSION
    return hashes


def parsed_templates(
    state: ClusterState,
) -> tuple[dict[str, NodePool], dict[str, EC2NodeClass]]:
    """The NodePools and EC2NodeClasses of a pass as models, for :func:`from_templates`. One that does not
    parse is left out: its claims are then written without its fields, as before it was fixed."""
    pools: dict[str, NodePool] = {}
    for manifest in state.nodepools:
        with contextlib.suppress(ManifestError, ValueError):
            pools[manifest["metadata"]["name"]] = NodePool.model_validate(manifest)
    classes: dict[str, EC2NodeClass] = {}
    for name, spec in state.nodeclass_specs.items():
        with contextlib.suppress(ManifestError, ValueError):
            classes[name] = EC2NodeClass.model_validate(spec)
    return pools, classes


def explain(reasons: Mapping[str, str]) -> str:
    """One line a user can act on: the first failing constraint per NodePool."""
    if not reasons:
        return "no NodePool could take the pod"
    return "; ".join(
        f'nodepool "{pool}": {reason}' if pool else reason for pool, reason in sorted(reasons.items())
    )
