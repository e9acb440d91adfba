"""Deletion the lifecycle pass carries on: a claim marked for deletion whose Node was never deleted (its
Lambda died between the two), and a NodeClaim object deleted in the cluster (``kubectl delete
nodeclaim``), which is terminated gracefully through the same flow as any disruption."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from serverless_karpenter.adapters.kubernetes import KubernetesError
from serverless_karpenter.adapters.state_store import ConflictError
from serverless_karpenter.deployment import FUNCTION_TIMEOUT_SECONDS
from serverless_karpenter.lifecycle.adoption import NODECLAIM_DELETED
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.lifecycle.phases.base import NEXT, LifecyclePass, Outcome
from serverless_karpenter.observability import logger
from serverless_karpenter.termination.terminator import begin_deletion

# Whatever called begin_deletion has ended by then, successfully or not.
RESUME_DELETION_AFTER = timedelta(seconds=max(FUNCTION_TIMEOUT_SECONDS.values()))


class ResumeDeletion:
    def reconcile(self, record: NodeClaimRecord, state: LifecyclePass) -> Outcome:
        if record.state != NodeClaimState.DISRUPTING:
            return NEXT
        return self._resume_deletion(record, state.node_of(record), state)

    def _resume_deletion(
        self, record: NodeClaimRecord, node: Mapping[str, Any] | None, state: LifecyclePass
    ) -> NodeClaimRecord | None:
        """``begin_deletion`` marks the claim, then taints and deletes its Node (or terminates an
        unregistered instance); the two are not one write. A Lambda that died between them left a claim
        marked for deletion that nothing deletes, holding its NodePool's disruption budget. Once whatever
        began it must have ended (the longest function timeout), finish it: each step is idempotent."""
        plane = state.plane
        if node is not None and node["metadata"].get("deletionTimestamp"):
            return record  # deleted: the termination function drains it
        requested = record.deletion_requested_at or record.created_at
        if plane.clock.now() - requested < RESUME_DELETION_AFTER:
            return record
        logger.warning(
            "resuming the deletion of a nodeclaim whose node was never deleted",
            extra={"nodeclaim": record.name, "node": record.node_name, "reason": record.disruption_reason},
        )
        try:
            resumed = begin_deletion(plane, record, record.disruption_reason or "Unknown")
            if node is not None:  # tainted and deleted now: provisioning takes its pods as pending
                state.updated_nodes[node["metadata"]["name"]] = plane.kube.get_node(node["metadata"]["name"])
        except KubernetesError as error:  # the API server's trouble must not stop the rest of the pass
            logger.warning(
                "could not resume the deletion", extra={"nodeclaim": record.name, "error": str(error)}
            )
            return record
        state.result.deleted.append(record.name)
        return None if resumed.state == NodeClaimState.TERMINATED else resumed


class DeletedInTheCluster:
    """A step after the mirror, which tells which NodeClaim objects were deleted by a user."""

    def reconcile(self, state: LifecyclePass) -> None:
        """``kubectl delete nodeclaim``: the object waits on our finalizer while the claim is terminated
        gracefully, through the same flow as any disruption (taint, drain respecting PDBs, terminate).
        The pass's view (``result.records``, ``result.nodes``) follows: the provisioning after it takes
        the tainted node's pods as pending."""
        result = state.result
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
                saved = begin_deletion(state.plane, record, NODECLAIM_DELETED, disruption_event=False)
            except (ConflictError, KubernetesError) as error:
                logger.warning(
                    "could not begin the deletion", extra={"nodeclaim": record.name, "error": str(error)}
                )
                kept.append(record)
                continue
            result.deleted.append(record.name)
            if saved.state == NodeClaimState.TERMINATED:  # no node to drain: the instance went at once
                state.objects.release(saved.name)
                continue
            kept.append(saved)
            if saved.node_name:
                fresh = state.plane.kube.get_node(saved.node_name)
                result.nodes = [n for n in result.nodes if n["metadata"]["name"] != saved.node_name]
                if fresh is not None:
                    result.nodes.append(fresh)
        result.records = kept
