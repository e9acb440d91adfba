"""NodeClaim lifecycle: Pending -> Launched -> Registered -> Initialized, liveness, and garbage collection."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from serverless_karpenter.adapters import nodeclass_status
from serverless_karpenter.adapters.kubernetes import KubernetesError
from serverless_karpenter.adapters.providers.errors import CloudError
from serverless_karpenter.adapters.providers.model import Instance, ResolvedNodeClass
from serverless_karpenter.adapters.state_store import ConflictError
from serverless_karpenter.api import labels as wk
from serverless_karpenter.api.ec2nodeclass import EC2NodeClass
from serverless_karpenter.api.nodepool import NodePool
from serverless_karpenter.deployment import FUNCTION_TIMEOUT_SECONDS
from serverless_karpenter.disruption.candidates import last_pod_event
from serverless_karpenter.disruption.drift import record_drift
from serverless_karpenter.lifecycle import node_metadata, nodepool_status
from serverless_karpenter.lifecycle.adoption import Adoption
from serverless_karpenter.lifecycle.launch import launch_record, launch_templates_of, mark_launched
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.lifecycle.nodeclaim_writer import NodeClaimObjects, SyncResult
from serverless_karpenter.observability import MetricName, MetricUnit, Msg, emit_dimensioned, logger, metrics
from serverless_karpenter.provisioning.context import ControlPlane
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.taints import is_known_ephemeral, taints_from_dicts
from serverless_karpenter.termination.terminator import GONE_STATES, begin_deletion, node_is_ready

# Whatever called begin_deletion has ended by then, successfully or not.
RESUME_DELETION_AFTER = timedelta(seconds=max(FUNCTION_TIMEOUT_SECONDS.values()))

TERMINATED_RETENTION = timedelta(days=1)


@dataclass
class LifecycleResult:
    launched: list[str] = field(default_factory=list)
    registered: list[str] = field(default_factory=list)
    initialized: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    garbage_collected: list[str] = field(default_factory=list)
    launch_templates_deleted: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    finalized: list[str] = field(default_factory=list)
    # The NodeClaim objects mirrored from the records (lifecycle.nodeclaim_writer); None when not synced.
    objects: SyncResult | None = None
    # What the pass read, as it left it, for the provisioning that follows in the same invocation: the live
    # records after their transitions, the Nodes (patched or deleted by registration and clean-up) and the
    # EC2NodeClasses. Each is read once an invocation (issue 22).
    records: list[NodeClaimRecord] = field(default_factory=list, repr=False)
    nodes: list[dict[str, Any]] = field(default_factory=list, repr=False)
    nodeclass_specs: list[dict[str, Any]] = field(default_factory=list, repr=False)
    # Listed only when a Pending record was launched (its NodePool's startupTaints).
    nodepools: list[dict[str, Any]] | None = field(default=None, repr=False)


def registration_patch(
    record: NodeClaimRecord,
    node: Mapping[str, Any],
    type_labels: Mapping[str, str] | None = None,
    nodeclass: ResolvedNodeClass | None = None,
) -> dict[str, Any]:
    """The claim's labels and annotations (:mod:`~serverless_karpenter.lifecycle.node_metadata`) and
    taints; the unregistered taint off; our finalizer on."""
    meta = node.get("metadata", {})
    taints = [
        t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != wk.UNREGISTERED_TAINT_KEY
    ]
    present = {(t.get("key"), t.get("effect")) for t in taints}
    for taint in [*record.taints, *record.startup_taints]:
        if (taint.get("key"), taint.get("effect")) not in present:
            taints.append(dict(taint))
    finalizers = list(meta.get("finalizers") or [])
    if wk.TERMINATION_FINALIZER not in finalizers:
        finalizers.append(wk.TERMINATION_FINALIZER)
    metadata = node_metadata.registration_metadata(record, node, type_labels or {}, nodeclass)
    return {"metadata": {**metadata, "finalizers": finalizers}, "spec": {"taints": taints}}


def is_initialized(record: NodeClaimRecord, node: Mapping[str, Any]) -> bool:
    """Ready, startup taints and Karpenter's known ephemeral taints gone, and every requested extended
    resource registered."""
    if not node_is_ready(node):
        return False
    present = taints_from_dicts((node.get("spec") or {}).get("taints"))
    if any(is_known_ephemeral(t) for t in present):
        return False
    for startup in taints_from_dicts(record.startup_taints):
        if any(t.matches(startup) for t in present):
            return False
    allocatable = resources.parse_list((node.get("status") or {}).get("allocatable"))
    for name, value in record.requests.items():
        if "/" in name and value > 0 and allocatable.get(name, 0) <= 0:
            return False
    return True


NODECLAIM_DELETED = "NodeClaimDeleted"  # the disruption reason of a claim deleted in the cluster


def _parsed(model: Any, manifests: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for manifest in manifests:
        try:
            out[manifest["metadata"]["name"]] = model.model_validate(manifest)
        except ValueError:
            continue  # one that does not parse shows no drift; its validation reports it elsewhere
    return out


def mirror_objects(
    plane: ControlPlane,
    writer: NodeClaimObjects,
    live: list[NodeClaimRecord],
    nodeclass_specs: list[dict[str, Any]],
    resolved: Mapping[str, ResolvedNodeClass | None],
    manifests: list[dict[str, Any]],
    claims: list[dict[str, Any]] | None = None,
) -> SyncResult:
    """Write every live record's NodeClaim object: the owner reference needs the live NodePool's uid (from
    ``manifests``, the pass's NodePools), the labels the launched type's (from the catalog), the Drifted
    condition the record's own drift and Consolidatable the NodePool's consolidateAfter since the node's
    last pod event."""
    now = plane.clock.now()
    uids = {
        m["metadata"]["name"]: str(m["metadata"].get("uid") or "")
        for m in manifests
        if not m["metadata"].get("deletionTimestamp")
    }
    pools: dict[str, NodePool] = _parsed(NodePool, manifests)
    classes: dict[str, EC2NodeClass] = _parsed(EC2NodeClass, nodeclass_specs)
    drift: dict[str, str] = {}
    consolidatable: dict[str, datetime] = {}
    for record in live:
        if not record.instance_id:
            continue
        pool = pools.get(record.nodepool)
        reason = record_drift(
            record, record.annotations, pool, classes.get(record.nodeclass), resolved.get(record.nodeclass)
        )
        if reason:
            drift[record.name] = reason
        after = pool.consolidate_after_timedelta() if pool is not None else None
        if record.state == NodeClaimState.INITIALIZED and after is not None:
            since = last_pod_event(record, []) + after
            if now >= since:
                consolidatable[record.name] = since
    labels_of = _TypeLabels(plane, nodeclass_specs, resolved)
    return writer.sync(
        live,
        record_of=plane.store.get,
        nodepool_uids={k: v for k, v in uids.items() if v},
        type_labels=labels_of,
        drift=drift,
        consolidatable_since=consolidatable,
        listed=claims,
    )


class _TypeLabels:
    """The catalog's labels of a launched type, read once per node class and pass, and only if asked."""

    def __init__(
        self,
        plane: ControlPlane,
        specs: list[dict[str, Any]],
        resolved: Mapping[str, ResolvedNodeClass | None],
    ) -> None:
        self.plane = plane
        self.specs = {s["metadata"]["name"]: s for s in specs}
        self.resolved = resolved
        self.by_class: dict[str, dict[str, Mapping[str, str]]] = {}

    def __call__(self, record: NodeClaimRecord) -> Mapping[str, str]:
        if record.nodeclass not in self.by_class:
            nodeclass = self.resolved.get(record.nodeclass)
            types: dict[str, Mapping[str, str]] = {}
            if nodeclass is not None:
                spec = self.specs.get(record.nodeclass, {})
                types = {
                    it.name: it.labels for it in self.plane.instance_types.instance_types(nodeclass, spec)
                }
            self.by_class[record.nodeclass] = types
        return self.by_class[record.nodeclass].get(record.instance_type or "", {})


class LifecycleReconciler:
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        # Each EC2NodeClass with the status this pass gave it, for its NodePools' NodeClassReady.
        self.nodeclasses: dict[str, Mapping[str, Any]] = {}
        # Per EC2NodeClass, each instance type's labels: what a registering node is labelled with.
        self._type_labels: dict[str, dict[str, Mapping[str, str]]] = {}
        self.objects = NodeClaimObjects(plane.kube, plane.clock)

    def reconcile(self) -> LifecycleResult:
        """One pass over every live NodeClaim.

        The Nodes are listed before the records are read: the disruption function writes a command's
        replacement records before it taints the candidates, so a taint this pass sees comes with the
        records of its replacements, and the provisioning that follows (which takes a tainted node's pods
        as pending) counts them rather than launching for those pods again. The records are read before
        the instances, as garbage collection needs (a record is written before its launch)."""
        plane = self.plane
        result = LifecycleResult()
        listed = plane.kube.list_nodes()
        records = plane.store.list_live()
        instances = {i.id: i for i in plane.launcher.instances(include_terminated=True)}
        instances_by_claim = {
            i.tags.get(wk.NODECLAIM): i for i in instances.values() if i.state not in GONE_STATES
        }
        nodes = {n["spec"].get("providerID"): n for n in listed if (n.get("spec") or {}).get("providerID")}
        result.nodeclass_specs = plane.kube.list_ec2nodeclasses()
        resolved = self.resolve_nodeclasses(result.nodeclass_specs)
        updated_nodes: dict[str, dict[str, Any] | None] = {}
        # NodeClaim objects with no record first: an adopted claim is reconciled below like any other,
        # and an instance some claim names is nobody's orphan.
        claims = self._list_claims()
        adoption = Adoption(plane).reconcile(records, nodes, resolved, objects=claims)
        records = [*records, *adoption.adopted]
        instances.update(adoption.instances)
        result.adopted.extend(r.name for r in adoption.adopted)
        result.launched.extend(adoption.launched)
        result.finalized.extend(adoption.finalized)
        for record in records:
            try:
                current = self._reconcile_one(
                    record, instances, instances_by_claim, nodes, resolved, result, updated_nodes
                )
            except ConflictError:
                current = record  # somebody else moved it; the next pass sees the new version
            if current is not None:
                result.records.append(current)
        for listed_node in listed:
            name = listed_node["metadata"]["name"]
            node = updated_nodes.get(name, listed_node)
            if node is not None:
                result.nodes.append(node)
        self._garbage_collect(records, instances, result, adoption.claimed_instances)
        self._sweep_launch_templates(result.records, resolved, result)
        nodepools = self._nodepools(result)
        result.objects = mirror_objects(
            plane, self.objects, result.records, result.nodeclass_specs, resolved, nodepools or [], claims
        )
        self._delete_claims_deleted_in_the_cluster(result)
        self._emit_state_counts(result.records)
        if nodepools is not None:
            self._write_nodepool_status(
                nodepools, result.records, nodes, {r.provider_id for r in records if r.provider_id}
            )
        return result

    def _list_claims(self) -> list[dict[str, Any]]:
        """The NodeClaim objects, one LIST a pass for adoption and the mirror both. A failed LIST fails the
        pass (garbage collection must know which instances some claim names); no CRD means no claims."""
        try:
            return self.plane.kube.list_nodeclaims()
        except KubernetesError as error:
            if error.status != 404:
                raise
            return []

    def _nodepools(self, result: LifecycleResult) -> list[dict[str, Any]] | None:
        """The NodePools, listed once a pass (the provisioning that follows reuses them); None when the API
        server would not list them."""
        if result.nodepools is None:
            try:
                result.nodepools = self.plane.kube.list_nodepools()
            except KubernetesError as error:
                logger.warning("could not list the NodePools", extra={"error": str(error)})
                return None
        return result.nodepools

    def _write_nodepool_status(
        self,
        nodepools: list[dict[str, Any]],
        live: list[NodeClaimRecord],
        nodes: Mapping[str, Mapping[str, Any]],
        known: set[str],
    ) -> None:
        """Each NodePool's status as of the end of this pass (what it launched, registered and closed)."""
        usage = nodepool_status.usage_by_nodepool(live, nodes, known)
        for nodepool, status in nodepool_status.pass_statuses(
            nodepools, self.nodeclasses, usage, self.plane.clock.now()
        ):
            nodepool_status.write_status(self.plane.kube, nodepool, status)

    def _delete_claims_deleted_in_the_cluster(self, result: LifecycleResult) -> None:
        """``kubectl delete nodeclaim``: the object waits on our finalizer while the claim is terminated
        gracefully, through the same flow as any disruption (taint, drain respecting PDBs, terminate).
        The pass's view (``result.records``, ``result.nodes``) follows: the provisioning after it takes
        the tainted node's pods as pending."""
        deleted = set(result.objects.deleted_by_user if result.objects else ())
        kept: list[NodeClaimRecord] = []
        for record in result.records:
            if record.name not in deleted or record.is_deleting:
                kept.append(record)
                continue
            logger.info(
                "nodeclaim deleted in the cluster: terminating it",
                extra={"nodeclaim": record.name, "node": record.node_name},
            )
            try:
                saved = begin_deletion(self.plane, record, NODECLAIM_DELETED, disruption_event=False)
            except (ConflictError, KubernetesError) as error:
                logger.warning(
                    "could not begin the deletion", extra={"nodeclaim": record.name, "error": str(error)}
                )
                kept.append(record)
                continue
            result.deleted.append(record.name)
            if saved.state == NodeClaimState.TERMINATED:  # no node to drain: the instance went at once
                self.objects.release(saved.name)
                continue
            kept.append(saved)
            if saved.node_name:
                fresh = self.plane.kube.get_node(saved.node_name)
                result.nodes = [n for n in result.nodes if n["metadata"]["name"] != saved.node_name]
                if fresh is not None:
                    result.nodes.append(fresh)
        result.records = kept

    def resolve_nodeclasses(
        self, specs: list[dict[str, Any]] | None = None
    ) -> dict[str, ResolvedNodeClass | None]:
        """Resolve every EC2NodeClass (``specs``, else listed) and write what it resolved to (or why not)
        to its status."""
        plane = self.plane
        out: dict[str, ResolvedNodeClass | None] = {}
        for spec in plane.kube.list_ec2nodeclasses() if specs is None else specs:
            name = spec["metadata"]["name"]
            resolved: ResolvedNodeClass | None = None
            error: str | None = None
            try:
                resolved = plane.resolver.resolve(spec)
            except (ValueError, CloudError) as failure:
                error = str(failure)
                logger.warning("EC2NodeClass not ready", extra={"ec2nodeclass": name, "error": error})
            out[name] = resolved
            self.nodeclasses[name] = spec
            if not (spec.get("metadata") or {}).get("deletionTimestamp"):
                nodeclass_status.write_status(plane.kube, spec, resolved, error, plane.clock.now())
                status = nodeclass_status.desired_status(spec, resolved, error, plane.clock.now())
                self.nodeclasses[name] = {**spec, "status": status}
        return out

    def _nodeclass(self, name: str, cache: dict[str, ResolvedNodeClass | None]) -> ResolvedNodeClass | None:
        return cache.get(name)

    def _sweep_launch_templates(
        self,
        records: list[NodeClaimRecord],
        resolved: Mapping[str, ResolvedNodeClass | None],
        result: LifecycleResult,
    ) -> None:
        """Delete the cluster's launch templates that no live NodeClaim uses, at most once per interval.

        A template younger than the interval is kept whatever its use: a launch may be about to use it.
        """
        plane = self.plane
        now = plane.clock.now()
        interval = timedelta(seconds=plane.settings.launch_template_sweep_seconds)
        # Kept on the launcher, which lives as long as the warm Lambda does.
        last = plane.launcher.last_template_sweep
        if last is not None and timedelta(0) <= now - last < interval:
            return
        plane.launcher.last_template_sweep = now
        in_use: set[str] = set()
        for record in records:
            if record.launch_template_name:
                in_use.add(record.launch_template_name)
            # A launched claim used the template it recorded; only one still to launch (or retry) may
            # need others, and working those out renders user data, so it is done for those alone.
            nodeclass = resolved.get(record.nodeclass)
            if record.instance_id is None and nodeclass is not None:
                in_use |= launch_templates_of(plane, record, nodeclass)
        try:
            deleted = plane.launcher.delete_unused_launch_templates(in_use, now - interval)
        except CloudError as failure:
            logger.warning("failed deleting unused launch templates", extra={"error": str(failure)})
            return
        for name in deleted:
            logger.info("deleted launch template", extra={"launch-template": name})
        result.launch_templates_deleted.extend(deleted)

    def _reconcile_one(
        self,
        record: NodeClaimRecord,
        instances: Mapping[str, Instance],
        instances_by_claim: Mapping[str | None, Instance],
        nodes: Mapping[str, Mapping[str, Any]],
        resolved: dict[str, ResolvedNodeClass | None],
        result: LifecycleResult,
        updated_nodes: dict[str, dict[str, Any] | None],
    ) -> NodeClaimRecord | None:
        """Move the record on; the record as it is left, or None when it is no longer live."""
        plane = self.plane
        now = plane.clock.now()
        settings = plane.settings
        if record.state == NodeClaimState.PENDING:
            instance = instances_by_claim.get(record.name)
            if instance is not None:
                result.launched.append(record.name)
                return mark_launched(plane, record, instance)
            if now - record.created_at > timedelta(seconds=settings.launch_timeout_seconds):
                logger.warning("deleting nodeclaim, launch ttl exceeded", extra={"nodeclaim": record.name})
                plane.store.delete(record)
                result.deleted.append(record.name)
                return None
            # A provisioner died between writing the record and CreateFleet: finish its work.
            if result.nodepools is None:
                result.nodepools = plane.kube.list_nodepools()
            launched = launch_record(
                plane, record, self._nodeclass(record.nodeclass, resolved), result.nodepools
            )
            if launched.state == NodeClaimState.LAUNCHED:
                result.launched.append(record.name)
            # A launch that failed deleted the record, to plan its pods afresh.
            return launched if launched.state == NodeClaimState.LAUNCHED else None
        instance = instances.get(record.instance_id or "")
        if instance is None or instance.state in GONE_STATES:
            gone_node = nodes.get(record.provider_id or "")
            if not record.is_deleting:
                self._instance_gone(record, gone_node, result, updated_nodes)
                return None
            if gone_node is None:
                # Nothing is left to drain or terminate (a termination pass died between removing the
                # finalizer and closing the record, and nothing else revisits it): close it here.
                self._close(record, result)
                return None
            return record
        node = nodes.get(record.provider_id or "")
        if record.state == NodeClaimState.DISRUPTING:
            return self._resume_deletion(record, node, result, updated_nodes)
        if record.state == NodeClaimState.LAUNCHED:
            if node is not None:
                return self._register(record, node, resolved.get(record.nodeclass), result, updated_nodes)
            if record.launched_at and now - record.launched_at > timedelta(
                seconds=settings.registration_timeout_seconds
            ):
                logger.warning(
                    Msg.LIVENESS_DELETED, extra={"nodeclaim": record.name, "instance": record.instance_id}
                )
                plane.launcher.terminate([instance.id])
                self._close(record, result)
                return None
            return record
        if node is None and record.state in (NodeClaimState.REGISTERED, NodeClaimState.INITIALIZED):
            # The Node object went away without our finalizer running: the instance must not outlive it.
            logger.info(Msg.DELETED_NODE, extra={"nodeclaim": record.name, "node": record.node_name})
            plane.launcher.terminate([instance.id])
            self._close(record, result)
            return None
        if record.state == NodeClaimState.INITIALIZED and node is not None:
            # Labelled when it initialized; a node initialized before we labelled (or adopted) gets it now.
            self._label_initialized(node, updated_nodes)
        if record.state == NodeClaimState.REGISTERED and node is not None and is_initialized(record, node):
            self._label_initialized(node, updated_nodes)
            saved = plane.store.save(
                record.model_copy(update={"state": NodeClaimState.INITIALIZED, "initialized_at": now})
            )
            metrics.add_metric(name=MetricName.NODECLAIMS_INITIALIZED, unit=MetricUnit.Count, value=1)
            if record.launched_at:
                metrics.add_metric(
                    name=MetricName.INITIALIZATION_LATENCY,
                    unit=MetricUnit.Seconds,
                    value=(now - record.launched_at).total_seconds(),
                )
            logger.info(Msg.INITIALIZED_NODECLAIM, extra={"nodeclaim": saved.name, "node": saved.node_name})
            result.initialized.append(record.name)
            return saved
        return record

    def _resume_deletion(
        self,
        record: NodeClaimRecord,
        node: Mapping[str, Any] | None,
        result: LifecycleResult,
        updated_nodes: dict[str, dict[str, Any] | None],
    ) -> NodeClaimRecord | None:
        """``begin_deletion`` marks the claim, then taints and deletes its Node (or terminates an
        unregistered instance); the two are not one write. A Lambda that died between them left a claim
        marked for deletion that nothing deletes, holding its NodePool's disruption budget. Once whatever
        began it must have ended (the longest function timeout), finish it: each step is idempotent."""
        if node is not None and node["metadata"].get("deletionTimestamp"):
            return record  # deleted: the termination function drains it
        requested = record.deletion_requested_at or record.created_at
        if self.plane.clock.now() - requested < RESUME_DELETION_AFTER:
            return record
        logger.warning(
            "resuming the deletion of a nodeclaim whose node was never deleted",
            extra={"nodeclaim": record.name, "node": record.node_name, "reason": record.disruption_reason},
        )
        try:
            resumed = begin_deletion(self.plane, record, record.disruption_reason or "Unknown")
            if node is not None:  # tainted and deleted now: provisioning takes its pods as pending
                updated_nodes[node["metadata"]["name"]] = self.plane.kube.get_node(node["metadata"]["name"])
        except KubernetesError as error:  # the API server's trouble must not stop the rest of the pass
            logger.warning(
                "could not resume the deletion", extra={"nodeclaim": record.name, "error": str(error)}
            )
            return record
        result.deleted.append(record.name)
        return None if resumed.state == NodeClaimState.TERMINATED else resumed

    def _label_initialized(
        self, node: Mapping[str, Any], updated_nodes: dict[str, dict[str, Any] | None]
    ) -> None:
        patch = node_metadata.initialized_patch(node)
        if patch is not None:
            name = node["metadata"]["name"]
            updated_nodes[name] = self.plane.kube.patch_node(name, patch)

    def type_labels(self, record: NodeClaimRecord, nodeclass: ResolvedNodeClass | None) -> Mapping[str, str]:
        """The launched instance type's labels, from the catalog the provisioner chose it from."""
        if nodeclass is None or not record.instance_type:
            return {}
        if record.nodeclass not in self._type_labels:
            types = self.plane.instance_types.instance_types(nodeclass, {})
            self._type_labels[record.nodeclass] = {it.name: it.labels for it in types}
        return self._type_labels[record.nodeclass].get(record.instance_type, {})

    def _register(
        self,
        record: NodeClaimRecord,
        node: Mapping[str, Any],
        nodeclass: ResolvedNodeClass | None,
        result: LifecycleResult,
        updated_nodes: dict[str, dict[str, Any] | None],
    ) -> NodeClaimRecord:
        plane = self.plane
        name = node["metadata"]["name"]
        patch = registration_patch(record, node, self.type_labels(record, nodeclass), nodeclass)
        updated_nodes[name] = plane.kube.patch_node(name, patch)
        saved = plane.store.save(
            record.model_copy(
                update={
                    "state": NodeClaimState.REGISTERED,
                    "node_name": name,
                    "registered_at": plane.clock.now(),
                }
            )
        )
        metrics.add_metric(name=MetricName.NODECLAIMS_REGISTERED, unit=MetricUnit.Count, value=1)
        logger.info(
            Msg.REGISTERED_NODECLAIM,
            extra={"nodeclaim": saved.name, "node": name, "provider-id": saved.provider_id},
        )
        result.registered.append(record.name)
        return saved

    def _instance_gone(
        self,
        record: NodeClaimRecord,
        node: Mapping[str, Any] | None,
        result: LifecycleResult,
        updated_nodes: dict[str, dict[str, Any] | None],
    ) -> None:
        """The instance was terminated behind our back: remove the Node (its finalizer too) and the claim."""
        plane = self.plane
        if node is not None:
            name = node["metadata"]["name"]
            plane.kube.delete_node(name)
            fresh = plane.kube.get_node(name)
            if fresh is not None:
                plane.kube.remove_node_finalizer(fresh, wk.TERMINATION_FINALIZER)
            updated_nodes[name] = None  # gone, or going once its last finalizer is off
        self._close(record, result)

    def _close(self, record: NodeClaimRecord, result: LifecycleResult) -> None:
        """Mark the record Terminated (no longer live: None, for the pass's view of the records)."""
        now = self.plane.clock.now()
        self.plane.store.save(
            record.model_copy(
                update={
                    "state": NodeClaimState.TERMINATED,
                    "terminated_at": now,
                    "expires_at": now + TERMINATED_RETENTION,
                }
            )
        )
        metrics.add_metric(name=MetricName.NODECLAIMS_TERMINATED, unit=MetricUnit.Count, value=1)
        logger.info(Msg.DELETED_NODECLAIM, extra={"nodeclaim": record.name})
        result.deleted.append(record.name)
        self.objects.release(record.name)

    def _garbage_collect(
        self,
        records: list[NodeClaimRecord],
        instances: Mapping[str, Instance],
        result: LifecycleResult,
        claimed: set[str],
    ) -> None:
        """Terminate our tagged instances that have had no live record for the grace period, and that no
        NodeClaim object names (Karpenter's garbage collection spares those; adoption takes them)."""
        plane = self.plane
        now = plane.clock.now()
        live = {r.name for r in records}  # list_live: no Terminated record
        grace = timedelta(seconds=plane.settings.garbage_collection_grace_seconds)
        orphans = [
            i
            for i in instances.values()
            if i.state not in GONE_STATES
            and i.tags.get(wk.NODECLAIM) not in live
            and i.id not in claimed
            and now - i.launch_time > grace
        ]
        if orphans:
            plane.launcher.terminate([i.id for i in orphans])
            for instance in orphans:
                logger.info(
                    Msg.GARBAGE_COLLECTED_INSTANCE,
                    extra={"instance": instance.id, "nodeclaim": instance.tags.get(wk.NODECLAIM)},
                )
                result.garbage_collected.append(instance.id)
            metrics.add_metric(
                name=MetricName.GARBAGE_COLLECTED_INSTANCES, unit=MetricUnit.Count, value=len(orphans)
            )

    def _emit_state_counts(self, records: list[NodeClaimRecord]) -> None:
        counts: dict[str, int] = {}
        cost = 0.0
        for record in records:
            counts[record.state.value] = counts.get(record.state.value, 0) + 1
            if record.is_active and record.price_per_hour:
                cost += record.price_per_hour
        for state, count in counts.items():
            emit_dimensioned(MetricName.NODECLAIMS_BY_STATE, count, {"State": state})
        if any(record.is_active for record in records):
            # As PendingPods: not published while there is no capacity to price (billed per hour published).
            metrics.add_metric(name=MetricName.COST_PER_HOUR, unit=MetricUnit.Count, value=round(cost, 4))
