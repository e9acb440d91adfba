"""Liveness, as Karpenter's lifecycle ``liveness.go`` and what it does for a claim whose machine went away:
an instance terminated behind our back, one launched but never registered within the registration TTL,
and a Node deleted without our finalizer running. Each closes the claim; none may outlive the others."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.lifecycle.phases.base import NEXT, LifecyclePass, Outcome
from serverless_karpenter.observability import Msg, logger
from serverless_karpenter.termination.terminator import GONE_STATES


class InstanceGone:
    """The claim's instance is gone: the claim goes too (a claim being deleted keeps its Node's drain)."""

    def reconcile(self, record: NodeClaimRecord, state: LifecyclePass) -> Outcome:
        instance = state.instances.get(record.instance_id or "")
        if instance is not None and instance.state not in GONE_STATES:
            return NEXT
        gone_node = state.node_of(record)
        if not record.is_deleting:
            self._instance_gone(record, gone_node, state)
            return None
        if gone_node is None:
            # Nothing is left to drain or terminate (a termination pass died between removing the
            # finalizer and closing the record, and nothing else revisits it): close it here.
            state.close(record)
            return None
        return record

    def _instance_gone(
        self, record: NodeClaimRecord, node: Mapping[str, Any] | None, state: LifecyclePass
    ) -> None:
        """The instance was terminated behind our back: remove the Node (its finalizer too) and the claim."""
        plane = state.plane
        if node is not None:
            name = node["metadata"]["name"]
            plane.kube.delete_node(name)
            fresh = plane.kube.get_node(name)
            if fresh is not None:
                plane.kube.remove_node_finalizer(fresh, wk.TERMINATION_FINALIZER)
            state.updated_nodes[name] = None  # gone, or going once its last finalizer is off
        state.close(record)


class RegistrationTimeout:
    """Launched, no Node yet: wait up to the registration TTL, then terminate the instance."""

    def reconcile(self, record: NodeClaimRecord, state: LifecyclePass) -> Outcome:
        if record.state != NodeClaimState.LAUNCHED or state.node_of(record) is not None:
            return NEXT
        plane = state.plane
        now = plane.clock.now()
        if record.launched_at and now - record.launched_at > timedelta(
            seconds=plane.settings.registration_timeout_seconds
        ):
            logger.warning(
                Msg.LIVENESS_DELETED, extra={"nodeclaim": record.name, "instance": record.instance_id}
            )
            plane.launcher.terminate([state.instances[record.instance_id or ""].id])
            state.close(record)
            return None
        return record


class NodeGone:
    """Registered, and its Node went away without our finalizer running: the instance must not outlive it."""

    def reconcile(self, record: NodeClaimRecord, state: LifecyclePass) -> Outcome:
        if state.node_of(record) is not None or record.state not in (
            NodeClaimState.REGISTERED,
            NodeClaimState.INITIALIZED,
        ):
            return NEXT
        logger.info(Msg.DELETED_NODE, extra={"nodeclaim": record.name, "node": record.node_name})
        state.plane.launcher.terminate([state.instances[record.instance_id or ""].id])
        state.close(record)
        return None
