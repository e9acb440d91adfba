"""NodeClaim objects with no record: adopted, launched or finalized, never ignored.

DynamoDB is the source of truth, and every record is mirrored as a NodeClaim object. An object with no
live record is one of:

- **Karpenter's** (a cluster migrating from an in-cluster Karpenter, scaled to zero): ``status.providerID``
  names a running instance of this cluster. It is *adopted*: the record is written from the object (state
  from its conditions, instance from its providerID, type/zone/capacity type from its labels, NodePool,
  EC2NodeClass, requirements, resources, expireAfter and terminationGracePeriod from its spec, times
  from the object), and its instance keeps running. Nothing is terminated or relaunched.
- **A user's** (``kubectl create`` of a NodeClaim, no providerID): launched through our launch path, as
  Karpenter's lifecycle controller launches it. Never one of ours: the mirror writes the objects of
  launched records only, and deletes an object before its record goes.
- **A leftover** (providerID set, instance gone; or being deleted with nothing launched; or the object
  of a record we closed): finalized as Karpenter's garbage collection would, with an event.

Adoption is idempotent and crash-safe: the instance is tagged with its claim first (as the provider's
tagging controller would; our passes list instances by that tag), then the Node's drift hashes are
re-stamped with ours, then the record is created with ``attribute_not_exists``. A crash between any two
steps leaves an object with no record, which the next pass adopts again; a second adopter loses the
conditional write and moves on.

Drift: Karpenter stamps claims, Nodes and NodePools with its own hashes. A claim whose hash equalled its
NodePool's (or whose hash version differs, on which Karpenter re-stamps rather than drifts) is recorded
with our hash of the NodePool as it is now: not drifted for being adopted. One Karpenter already saw
drifted keeps its foreign hash, so drift replaces it. Drift reads the Node's annotations over the
record's, so the Node is re-stamped too, hash and version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from serverless_karpenter.adapters.kubernetes import KubernetesError
from serverless_karpenter.adapters.providers.errors import CloudError
from serverless_karpenter.adapters.providers.model import Instance, ResolvedNodeClass
from serverless_karpenter.adapters.state_store import ConflictError
from serverless_karpenter.api import labels as wk
from serverless_karpenter.api.ec2nodeclass import EC2NodeClass
from serverless_karpenter.api.errors import ManifestError
from serverless_karpenter.api.nodeclaim import NodeClaim
from serverless_karpenter.api.nodepool import NodePool
from serverless_karpenter.lifecycle import adoption_records as build
from serverless_karpenter.lifecycle.launch import launch_record
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.observability import logger
from serverless_karpenter.provisioning.context import ControlPlane
from serverless_karpenter.termination.terminator import GONE_STATES, begin_deletion, node_is_ready

ADOPTED_EVENT = "Adopted"
NODECLAIM_DELETED = "NodeClaimDeleted"  # the disruption reason of a claim deleted in the cluster
GARBAGE_COLLECTED_EVENT = "GarbageCollected"
INSUFFICIENT_CAPACITY_EVENT = "InsufficientCapacityError"
NODECLASS_NOT_READY_EVENT = "NodeClassNotReady"


@dataclass
class AdoptionResult:
    adopted: list[NodeClaimRecord] = field(default_factory=list)
    # The adopted claims' instances, so the rest of the pass sees them (it listed instances by the claim
    # tag before some of them had it).
    instances: dict[str, Instance] = field(default_factory=dict)
    # Every instance a NodeClaim object names: garbage collection never takes one for an orphan.
    claimed_instances: set[str] = field(default_factory=set)
    launched: list[str] = field(default_factory=list)
    finalized: list[str] = field(default_factory=list)


class Adoption:
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self._nodepools: dict[str, Mapping[str, Any]] | None = None
        self._nodeclasses: dict[str, Mapping[str, Any]] | None = None

    def reconcile(
        self,
        records: list[NodeClaimRecord],
        nodes: Mapping[str, Mapping[str, Any]],
        resolved: Mapping[str, ResolvedNodeClass | None],
        objects: list[dict[str, Any]] | None = None,
    ) -> AdoptionResult:
        """Act on every NodeClaim object with no live record. ``nodes`` are by providerID; ``objects`` are
        the NodeClaims when the caller listed them already. A failed LIST fails the pass, so that garbage
        collection never runs without knowing which instances some claim names."""
        result = AdoptionResult()
        if objects is None:
            try:
                objects = self.plane.kube.list_nodeclaims()
            except KubernetesError as error:
                if error.status != 404:
                    raise
                objects = []  # no NodeClaim CRD: no claims
        live = {r.name for r in records}
        unrecorded = [c for c in objects if c["metadata"]["name"] not in live]
        if not unrecorded:
            return result
        named = [build.instance_id_of((c.get("status") or {}).get("providerID")) for c in unrecorded]
        instances = self.plane.launcher.cluster_instances(i for i in named if i)
        result.claimed_instances = {i for i, inst in instances.items() if inst.state not in GONE_STATES}
        for manifest in unrecorded:
            try:
                self._one(manifest, instances, nodes, resolved, result)
            except (ConflictError, KubernetesError, CloudError) as error:
                # Another writer got there first, or a call failed: the next pass sees it afresh.
                logger.warning(
                    "could not reconcile a nodeclaim with no record",
                    extra={"nodeclaim": manifest["metadata"]["name"], "error": str(error)},
                )
        return result

    def _one(
        self,
        manifest: Mapping[str, Any],
        instances: Mapping[str, Instance],
        nodes: Mapping[str, Mapping[str, Any]],
        resolved: Mapping[str, ResolvedNodeClass | None],
        result: AdoptionResult,
    ) -> None:
        plane = self.plane
        name = manifest["metadata"]["name"]
        deleting = bool(manifest["metadata"].get("deletionTimestamp"))
        provider_id = (manifest.get("status") or {}).get("providerID")
        instance = instances.get(build.instance_id_of(provider_id) or "")
        alive = instance is not None and instance.state not in GONE_STATES
        stored = plane.store.get(name)
        if stored is not None and stored.state != NodeClaimState.TERMINATED:
            return  # recorded since the pass listed the live ones: ours, reconciled next pass
        closed = stored is not None  # ours, and finished: its object outlived it
        if closed or (provider_id and not alive) or (deleting and not provider_id):
            node = nodes.get(provider_id or "")
            if node is not None and node_is_ready(node) and not deleting:
                # Karpenter's garbage collection: a Ready Node means its kubelet still runs; wait.
                return
            self._finalize(manifest, node, result)
            return
        try:
            claim = NodeClaim.from_manifest(manifest)
        except ManifestError as error:
            logger.warning("nodeclaim is not valid", extra={"nodeclaim": name, "error": str(error)})
            plane.kube.record_event(manifest, "FailedValidation", str(error), "Warning")
            return
        if instance is not None and alive:
            record = self._adopt(claim, manifest, instance, nodes.get(provider_id or ""), resolved)
            result.instances[instance.id] = instance
            if deleting:  # `kubectl delete nodeclaim` while Karpenter was away: drain and terminate it
                record = begin_deletion(plane, record, NODECLAIM_DELETED, disruption_event=False)
            result.adopted.append(record)
            return
        self._launch(claim, manifest, resolved, result)

    # -- Karpenter's claims --------------------------------------------------------------------------

    def _adopt(
        self,
        claim: NodeClaim,
        manifest: Mapping[str, Any],
        instance: Instance,
        node: Mapping[str, Any] | None,
        resolved: Mapping[str, ResolvedNodeClass | None],
    ) -> NodeClaimRecord:
        plane = self.plane
        nodepool_manifest = self._nodepool(build.nodepool_of(claim))
        nodeclass_manifest = self._nodeclass(claim.spec.node_class_ref.name)
        nodepool = _parsed(NodePool, nodepool_manifest)
        nodeclass = _parsed(EC2NodeClass, nodeclass_manifest)
        option = build.option_for(self._catalog(claim.spec.node_class_ref.name, resolved), instance)
        record = build.adopted_record(
            claim,
            instance,
            node_name=(node or {}).get("metadata", {}).get("name"),
            option=option,
            nodepool=nodepool,
            nodepool_annotations=build.annotations_of(nodepool_manifest),
            nodeclass=nodeclass,
            nodeclass_annotations=build.annotations_of(nodeclass_manifest),
            now=plane.clock.now(),
        )
        tags = {
            wk.NODECLAIM: claim.name,
            wk.TAG_EKS_CLUSTER_NAME: plane.settings.cluster_name,
            **({wk.TAG_NAME: record.node_name} if record.node_name else {}),
        }
        missing = {k: v for k, v in tags.items() if k not in instance.tags}
        plane.launcher.tag_instance(instance.id, missing)
        if node is not None:
            hashes = build.node_hash_annotations(record)
            plane.kube.patch_node(node["metadata"]["name"], {"metadata": {"annotations": hashes}})
        plane.store.create(record)
        logger.info(
            "adopted nodeclaim",
            extra={
                "nodeclaim": record.name,
                "provider-id": record.provider_id,
                "state": record.state.value,
                "nodepool": record.nodepool,
            },
        )
        plane.kube.record_event(
            manifest, ADOPTED_EVENT, f"Adopted NodeClaim {record.name} ({record.provider_id}), {record.state}"
        )
        return record

    # -- users' claims -------------------------------------------------------------------------------

    def _launch(
        self,
        claim: NodeClaim,
        manifest: Mapping[str, Any],
        resolved: Mapping[str, ResolvedNodeClass | None],
        result: AdoptionResult,
    ) -> None:
        plane = self.plane
        nodeclass_name = claim.spec.node_class_ref.name
        nodeclass = resolved.get(nodeclass_name)
        if nodeclass is None:
            self._refuse(manifest, NODECLASS_NOT_READY_EVENT, f'EC2NodeClass "{nodeclass_name}" is not ready')
            return
        options = build.launch_options(claim, self._catalog(nodeclass_name, resolved))
        if not options:
            self._refuse(
                manifest,
                INSUFFICIENT_CAPACITY_EVENT,
                "no instance type meets the claim's requirements and resource requests",
            )
            return
        record = build.user_record(
            claim,
            options,
            _parsed(NodePool, self._nodepool(build.nodepool_of(claim))),
            _parsed(EC2NodeClass, self._nodeclass(nodeclass_name)),
            plane.clock.now(),
        )
        plane.store.create(record)
        launched = launch_record(plane, record, nodeclass)
        if launched.state == NodeClaimState.LAUNCHED:
            result.launched.append(record.name)
            return
        # launch_record deleted the record; Karpenter deletes a claim it could not launch.
        self._refuse(manifest, INSUFFICIENT_CAPACITY_EVENT, launched.last_error or "launch failed")

    def _refuse(self, manifest: Mapping[str, Any], reason: str, message: str) -> None:
        name = manifest["metadata"]["name"]
        logger.error("failed launching nodeclaim", extra={"nodeclaim": name, "error": message})
        self.plane.kube.record_event(manifest, reason, f"NodeClaim {name} event: {message}", "Warning")
        self.plane.kube.delete_nodeclaim(name)
        _remove_finalizer(self.plane, manifest)

    # -- leftovers -----------------------------------------------------------------------------------

    def _finalize(
        self, manifest: Mapping[str, Any], node: Mapping[str, Any] | None, result: AdoptionResult
    ) -> None:
        """Karpenter's garbage collection of a claim with no instance behind it: its Node (if any) and
        the object go, finalizers off, with an event on the claim."""
        kube = self.plane.kube
        name = manifest["metadata"]["name"]
        provider_id = (manifest.get("status") or {}).get("providerID")
        if node is not None:
            kube.delete_node(node["metadata"]["name"])
            fresh = kube.get_node(node["metadata"]["name"])
            if fresh is not None:
                kube.remove_node_finalizer(fresh, wk.TERMINATION_FINALIZER)
        kube.record_event(
            manifest,
            GARBAGE_COLLECTED_EVENT,
            "garbage collecting nodeclaim with no cloudprovider representation"
            + (f" ({provider_id})" if provider_id else ""),
        )
        kube.delete_nodeclaim(name)
        _remove_finalizer(self.plane, manifest)
        logger.info(
            "garbage collecting nodeclaim with no cloudprovider representation",
            extra={"nodeclaim": name, "provider-id": provider_id},
        )
        result.finalized.append(name)

    # -- reads, once per pass and only when a claim needs them -------------------------------------

    def _nodepool(self, name: str) -> Mapping[str, Any] | None:
        if self._nodepools is None:
            self._nodepools = {p["metadata"]["name"]: p for p in self.plane.kube.list_nodepools()}
        return self._nodepools.get(name)

    def _nodeclass(self, name: str) -> Mapping[str, Any] | None:
        if self._nodeclasses is None:
            self._nodeclasses = {c["metadata"]["name"]: c for c in self.plane.kube.list_ec2nodeclasses()}
        return self._nodeclasses.get(name)

    def _catalog(self, nodeclass: str, resolved: Mapping[str, ResolvedNodeClass | None]) -> list[Any]:
        found = resolved.get(nodeclass)
        spec = self._nodeclass(nodeclass)
        if found is None or spec is None:
            return []
        return list(self.plane.instance_types.instance_types(found, spec))


def _remove_finalizer(plane: ControlPlane, manifest: Mapping[str, Any]) -> None:
    """Our finalizer off a NodeClaim being deleted: a JSON patch testing the value it removes, so a
    concurrent change of the list fails it rather than being undone. Gone already is fine."""
    finalizers = list(manifest["metadata"].get("finalizers") or [])
    if wk.TERMINATION_FINALIZER not in finalizers:
        return
    index = finalizers.index(wk.TERMINATION_FINALIZER)
    path = f"/metadata/finalizers/{index}"
    try:
        plane.kube.patch_nodeclaim(
            manifest["metadata"]["name"],
            [{"op": "test", "path": path, "value": wk.TERMINATION_FINALIZER}, {"op": "remove", "path": path}],
        )
    except KubernetesError as error:
        if error.status != 404:
            raise


def _parsed(model: type[NodePool] | type[EC2NodeClass], manifest: Mapping[str, Any] | None) -> Any:
    if manifest is None:
        return None
    try:
        return model.from_manifest(manifest)
    except ManifestError:
        return None
