"""NodePool status as Karpenter's nodepool controllers write it: resources, nodes, conditions.

- ``resources`` and ``nodes`` (the ``nodepool.counter`` controller): per NodePool, the sum of the capacity
  (not allocatable) of its nodes, from cpu, memory, pods and ephemeral-storage at zero up, plus ``nodes``
  (also given alone as ``status.nodes``, which ``kubectl get nodepools`` prints). A node counts from
  launch (the NodeClaim's expected capacity until its Node reports) until it is marked for deletion
  (a claim being disrupted, drained or terminated, or a Node being deleted). Until the claim is
  initialized, a resource the Node reports as zero or not at all is taken from the claim. A Node labelled
  with the NodePool that no NodeClaim of ours accounts for counts with its own capacity, as Karpenter's
  cluster state counts Nodes without NodeClaims.
- ``nodeClassObservedGeneration``: the generation of the EC2NodeClass the NodePool refers to.
- Conditions ``ValidationSucceeded`` (runtime validation), ``NodeClassReady`` (the class's own Ready, or
  why it has none) and their root ``Ready``.

Computed each lifecycle pass (pure, below) and written through ``/status`` only when it changed, with the
resourceVersion as read, so a concurrent writer's change is never overwritten.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from serverless_karpenter.adapters.kubernetes import KubernetesError
from serverless_karpenter.api import conditions
from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.observability import logger
from serverless_karpenter.provisioning.nodepool_validation import VALIDATION_FAILED, validation_problem
from serverless_karpenter.provisioning.provisioner import nodeclass_ref
from serverless_karpenter.scheduling import resources

if TYPE_CHECKING:
    from serverless_karpenter.provisioning.context import KubernetesApi

VALIDATION_SUCCEEDED = "ValidationSucceeded"
NODECLASS_READY = "NodeClassReady"
# Karpenter's reasons and messages (nodepool.validation and nodepool.readiness controllers).

NODECLASS_NOT_FOUND = ("NodeClassNotFound", "NodeClass not found on cluster")
NODECLASS_TERMINATING = ("NodeClassTerminating", "NodeClass is Terminating")
NODECLASS_READINESS_UNKNOWN = ("NodeClassReadinessUnknown", "Node Class Readiness Unknown")
# What every NodePool's resources list holds, even at zero.
BASE_RESOURCES = (
    resources.CPU,
    resources.MEMORY,
    resources.PODS,
    resources.EPHEMERAL_STORAGE,
    resources.NODES,
)

ResourceList = dict[str, int]


def _deleting(node: Mapping[str, Any] | None) -> bool:
    return bool(node and (node.get("metadata") or {}).get("deletionTimestamp"))


def claim_capacity(record: NodeClaimRecord, node: Mapping[str, Any] | None) -> ResourceList:
    """A launched claim's capacity: its Node's once initialized; before, the Node's with the claim's
    filling in what the Node reports as zero or not at all; without a Node, the claim's."""
    expected = record.expected_capacity()
    if node is None:
        return dict(expected)
    reported = resources.parse_list((node.get("status") or {}).get("capacity"))
    if record.state == NodeClaimState.INITIALIZED:
        return reported
    return {**reported, **{k: v for k, v in expected.items() if not reported.get(k)}}


def usage_by_nodepool(
    records: Iterable[NodeClaimRecord],
    nodes: Mapping[str, Mapping[str, Any]],
    known_provider_ids: Iterable[str] = (),
) -> dict[str, ResourceList]:
    """What each NodePool's nodes hold, ``nodes`` included. ``nodes`` are by providerID;
    ``known_provider_ids`` are those of claims no longer live, whose Nodes must not count as foreign."""
    out: dict[str, ResourceList] = {}
    accounted = set(known_provider_ids)

    def add(pool: str, capacity: Mapping[str, int]) -> None:
        total = out.setdefault(pool, {})
        for name, value in {**capacity, resources.NODES: 1}.items():
            total[name] = total.get(name, 0) + value

    for record in records:
        if record.provider_id:
            accounted.add(record.provider_id)
        # Counted from launch: a claim without a providerID has no instance yet.
        if not record.provider_id or record.state in (NodeClaimState.PENDING, NodeClaimState.TERMINATED):
            continue
        node = nodes.get(record.provider_id)
        if record.is_deleting or _deleting(node):
            continue  # marked for deletion: Karpenter stops counting it at once
        add(record.nodepool, claim_capacity(record, node))
    for provider_id, node in nodes.items():
        pool = ((node.get("metadata") or {}).get("labels") or {}).get(wk.NODEPOOL)
        if provider_id in accounted or not pool or _deleting(node):
            continue
        add(pool, resources.parse_list((node.get("status") or {}).get("capacity")))
    return out


def nodeclass_ready(nodeclass: Mapping[str, Any] | None) -> conditions.Wanted:
    """NodeClassReady as Karpenter's readiness controller derives it from the referenced class."""
    if nodeclass is None:
        return conditions.Wanted(NODECLASS_READY, conditions.FALSE, *NODECLASS_NOT_FOUND)
    if (nodeclass.get("metadata") or {}).get("deletionTimestamp"):
        return conditions.Wanted(NODECLASS_READY, conditions.FALSE, *NODECLASS_TERMINATING)
    ready = next(
        (
            c
            for c in (nodeclass.get("status") or {}).get("conditions") or []
            if c.get("type") == conditions.READY
        ),
        None,
    )
    if ready is None or ready.get("status") not in (conditions.TRUE, conditions.FALSE):
        return conditions.Wanted(NODECLASS_READY, conditions.FALSE, *NODECLASS_READINESS_UNKNOWN)
    if ready["status"] == conditions.FALSE:
        return conditions.Wanted(
            NODECLASS_READY, conditions.FALSE, str(ready.get("reason") or ""), str(ready.get("message") or "")
        )
    return conditions.Wanted.true(NODECLASS_READY)


def desired_status(
    nodepool: Mapping[str, Any],
    usage: Mapping[str, int],
    nodeclass: Mapping[str, Any] | None,
    now: datetime,
) -> dict[str, Any]:
    """The NodePool's whole status after this pass; ``nodeclass`` is the EC2NodeClass it refers to, with
    the status this pass gave it (None when there is none)."""
    previous = nodepool.get("status") or {}
    counted = {name: 0 for name in BASE_RESOURCES} | dict(usage)
    status: dict[str, Any] = {
        **previous,
        "resources": {name: resources.format_quantity(name, value) for name, value in counted.items()},
        "nodes": counted[resources.NODES],
    }
    if nodeclass is not None and (nodeclass.get("metadata") or {}).get("generation") is not None:
        status["nodeClassObservedGeneration"] = int(nodeclass["metadata"]["generation"])
    problem = validation_problem(nodepool)
    validation = (
        conditions.Wanted.true(VALIDATION_SUCCEEDED)
        if problem is None
        else conditions.Wanted(VALIDATION_SUCCEEDED, conditions.FALSE, VALIDATION_FAILED, problem)
    )
    generation = (nodepool.get("metadata") or {}).get("generation")
    status["conditions"] = conditions.with_conditions(
        previous.get("conditions") or [],
        [nodeclass_ready(nodeclass), validation],
        int(generation) if generation is not None else None,
        now,
    )
    return status


def pass_statuses(
    nodepools: Iterable[Mapping[str, Any]],
    nodeclasses: Mapping[str, Mapping[str, Any]],
    usage: Mapping[str, Mapping[str, int]],
    now: datetime,
) -> list[tuple[Mapping[str, Any], dict[str, Any]]]:
    """Each NodePool (not being deleted) with the status this pass wants for it."""
    return [
        (
            pool,
            desired_status(
                pool, usage.get(pool["metadata"]["name"], {}), nodeclasses.get(nodeclass_ref(pool)), now
            ),
        )
        for pool in nodepools
        if not (pool.get("metadata") or {}).get("deletionTimestamp")
    ]


def unchanged(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    rest = {k: v for k, v in before.items() if k != "conditions"}
    return rest == {k: v for k, v in after.items() if k != "conditions"} and conditions.same_conditions(
        before.get("conditions"), after.get("conditions")
    )


def write_status(kube: KubernetesApi, nodepool: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Write ``status`` if it differs from the NodePool's; whether a write was made. A NodePool changed or
    gone meanwhile is left to the next pass; other failures are logged: the status reports, it never
    decides."""
    if unchanged(nodepool.get("status") or {}, status):
        return False
    try:
        return kube.patch_nodepool_status(nodepool, status)
    except KubernetesError as error:
        name = nodepool["metadata"]["name"]
        logger.warning("failed writing NodePool status", extra={"nodepool": name, "error": str(error)})
        return False
