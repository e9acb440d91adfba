"""NodeClaim lifecycle: Pending -> Launched -> Registered -> Initialized, liveness, and garbage collection.

As Karpenter's NodeClaim lifecycle controller, one pass loops over small sub-reconcilers
(``lifecycle/phases/``): per record, launch, liveness (the instance gone), a deletion to resume,
registration, liveness (registration TTL, the Node gone) and initialization, the first that acts taking the
record one step; then, once a pass, adoption's leftovers, garbage collection, the launch-template sweep,
the NodeClaim mirror, NodeClaims deleted in the cluster, and what the pass publishes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from serverless_karpenter.adapters import nodeclass_status
from serverless_karpenter.adapters.kubernetes import KubernetesError
from serverless_karpenter.adapters.providers.errors import CloudError
from serverless_karpenter.adapters.providers.model import ResolvedNodeClass
from serverless_karpenter.adapters.state_store import ConflictError
from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.adoption import Adoption
from serverless_karpenter.lifecycle.launch import launch_templates_of
from serverless_karpenter.lifecycle.model import NodeClaimRecord
from serverless_karpenter.lifecycle.nodeclaim_writer import NodeClaimObjects
from serverless_karpenter.lifecycle.phases.base import LifecyclePass, LifecycleResult, Next, Phase
from serverless_karpenter.lifecycle.phases.deletion import DeletedInTheCluster, ResumeDeletion
from serverless_karpenter.lifecycle.phases.garbage_collection import GarbageCollection
from serverless_karpenter.lifecycle.phases.initialization import Initialization
from serverless_karpenter.lifecycle.phases.launch import Launch
from serverless_karpenter.lifecycle.phases.liveness import InstanceGone, NodeGone, RegistrationTimeout
from serverless_karpenter.lifecycle.phases.mirror import Mirror
from serverless_karpenter.lifecycle.phases.registration import Registration
from serverless_karpenter.lifecycle.phases.status import NodePoolStatus, StateCounts
from serverless_karpenter.observability import logger
from serverless_karpenter.provisioning.context import ControlPlane
from serverless_karpenter.termination.terminator import GONE_STATES


class LifecycleReconciler:
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        # Each EC2NodeClass with the status this pass gave it, for its NodePools' NodeClassReady.
        self.nodeclasses: dict[str, Mapping[str, Any]] = {}
        self.objects = NodeClaimObjects(plane.kube, plane.clock)
        # Per record, in this order; the first that acts takes the record its one step this pass.
        self.phases: tuple[Phase, ...] = (
            Launch(),
            InstanceGone(),
            ResumeDeletion(),
            Registration(plane),
            RegistrationTimeout(),
            NodeGone(),
            Initialization(),
        )
        # Once a pass, after the records: each reads what the ones before it left.
        self.steps: tuple[Callable[[LifecyclePass], None], ...] = (
            GarbageCollection().reconcile,
            self._sweep_step,
            self._nodepools_step,
            Mirror().reconcile,
            DeletedInTheCluster().reconcile,
            StateCounts().reconcile,
            NodePoolStatus().reconcile,
        )

    def reconcile(self) -> LifecycleResult:
        """One pass over every live NodeClaim.

        The Nodes are listed before the records are read: the disruption function writes a command's
        replacement records before it taints the candidates, so a taint this pass sees comes with the
        records of its replacements, and the provisioning that follows (which takes a tainted node's pods
        as pending) counts them rather than launching for those pods again. The records are read before
        the instances, as garbage collection needs (a record is written before its launch)."""
        state = self._read()
        result = state.result
        for record in state.records:
            try:
                current = self._reconcile_one(record, state)
            except ConflictError:
                current = record  # somebody else moved it; the next pass sees the new version
            if current is not None:
                result.records.append(current)
        for listed_node in state.listed:
            name = listed_node["metadata"]["name"]
            node = state.updated_nodes.get(name, listed_node)
            if node is not None:
                result.nodes.append(node)
        for step in self.steps:
            step(state)
        return result

    def _read(self) -> LifecyclePass:
        """The pass's LISTs, in the order ``reconcile`` explains, and adoption of the NodeClaim objects
        with no record: an adopted claim is reconciled like any other, and an instance some claim names
        is nobody's orphan."""
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
        claims = self._list_claims()
        adoption = Adoption(plane).reconcile(records, nodes, resolved, objects=claims)
        records = [*records, *adoption.adopted]
        instances.update(adoption.instances)
        result.adopted.extend(r.name for r in adoption.adopted)
        result.launched.extend(adoption.launched)
        result.finalized.extend(adoption.finalized)
        return LifecyclePass(
            plane=plane,
            result=result,
            objects=self.objects,
            listed=listed,
            records=records,
            instances=instances,
            instances_by_claim=instances_by_claim,
            nodes=nodes,
            resolved=resolved,
            claims=claims,
            claimed_instances=adoption.claimed_instances,
            nodeclasses=self.nodeclasses,
        )

    def _reconcile_one(self, record: NodeClaimRecord, state: LifecyclePass) -> NodeClaimRecord | None:
        """Move the record on; the record as it is left, or None when it is no longer live."""
        for phase in self.phases:
            outcome = phase.reconcile(record, state)
            if not isinstance(outcome, Next):
                return outcome
        return record

    def _sweep_step(self, state: LifecyclePass) -> None:
        self._sweep_launch_templates(state.result.records, state.resolved, state.result)

    def _nodepools_step(self, state: LifecyclePass) -> None:
        state.nodepools = self._nodepools(state.result)

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
