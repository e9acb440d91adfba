"""The ``karpenter`` scenario step: a cluster as an in-cluster Karpenter left it, before we were deployed.

``karpenter: {nodeclaims: 3, nodepool: default, nodeclass: default, instanceType: c5.xlarge,
untagged: 0}`` does what Karpenter (v1, AWS provider) would have done, in the order it does it:

- stamps the NodePool and EC2NodeClass with its drift hashes (``karpenter.sh/nodepool-hash`` v3,
  ``karpenter.k8s.aws/ec2nodeclass-hash`` v4), values of its own that ours never equal;
- launches each instance with its tags (cluster ``owned``, ``eks:eks-cluster-name``, NodePool,
  EC2NodeClass; then the tagging controller's ``karpenter.sh/nodeclaim`` and ``Name``, except on the last
  ``untagged`` ones, whose tagging had not run yet) and nodeadm user data registering the node with its
  labels and the ``karpenter.sh/unregistered`` taint;
- lets the kubelets register their Nodes and become Ready, and the kube-scheduler bind pending pods:
  the world runs, our control plane does not (it is not deployed yet);
- registers each Node as its lifecycle controller does (the claim's labels and annotations,
  ``karpenter.sh/registered`` and ``initialized``, the termination finalizer, the owner reference, the
  unregistered taint off), with its NodeClaim object: spec, labels, annotations, finalizer and a status
  with providerID, nodeName, imageID, capacity, allocatable and conditions Launched, Registered,
  Initialized and Ready true.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kubernetes import client as k8s
from serverless_karpenter import amifamily
from serverless_karpenter.api import labels as wk
from serverless_karpenter.clock import to_rfc3339

from serverless_karpenter_sim.cluster.objects import KubeRest, node_path

if TYPE_CHECKING:
    from serverless_karpenter_sim.simulation import Simulation

# Karpenter's hash versions at v1.x: what its claims, Nodes and NodePools carry.
KARPENTER_NODEPOOL_HASH_VERSION = "v3"
KARPENTER_NODECLASS_HASH_VERSION = "v4"
NODECLASS_HASH_VERSION_KEY = "karpenter.k8s.aws/ec2nodeclass-hash-version"
KARPENTER_NODEPOOL_HASH = "6817397935813469226"
KARPENTER_NODECLASS_HASH = "15616957348189460630"
# How long the world may run for the kubelets to register and the pods to bind.
SETTLE_LIMIT = timedelta(minutes=3)
GROUP, VERSION = "karpenter.sh", "v1"


class KarpenterWorldError(ValueError):
    """A ``karpenter`` step that cannot run."""


def karpenter_world(sim: Simulation, spec: dict[str, Any]) -> str:
    count = int(spec.get("nodeclaims", 3))
    nodepool = str(spec.get("nodepool", "default"))
    nodeclass = str(spec.get("nodeclass", "default"))
    instance_type = str(spec.get("instanceType", "c5.xlarge"))
    untagged = int(spec.get("untagged", 0))
    resources = sim.resources
    if resources is None or count < 1:
        raise KarpenterWorldError(
            f"karpenter step {spec!r}: start the simulation, and ask for nodeclaims >= 1"
        )
    custom = k8s.CustomObjectsApi(sim.api_client)
    custom.patch_cluster_custom_object(
        GROUP,
        VERSION,
        "nodepools",
        nodepool,
        {
            "metadata": {
                "annotations": {
                    wk.NODEPOOL_HASH: KARPENTER_NODEPOOL_HASH,
                    wk.NODEPOOL_HASH_VERSION: KARPENTER_NODEPOOL_HASH_VERSION,
                }
            }
        },
    )
    custom.patch_cluster_custom_object(
        "karpenter.k8s.aws",
        VERSION,
        "ec2nodeclasses",
        nodeclass,
        {
            "metadata": {
                "annotations": {
                    wk.EC2NODECLASS_HASH: KARPENTER_NODECLASS_HASH,
                    NODECLASS_HASH_VERSION_KEY: KARPENTER_NODECLASS_HASH_VERSION,
                }
            }
        },
    )
    claims: list[tuple[str, str]] = []  # (claim name, instance id)
    for index in range(count):
        name = f"{nodepool}-kp{index:03d}"
        labels = {wk.NODEPOOL: nodepool, wk.EC2NODECLASS: nodeclass, wk.CAPACITY_TYPE: "on-demand"}
        user_data = amifamily.al2023_user_data(
            amifamily.ClusterInfo(sim.cluster_name, "https://cluster.local", "Y2E="),
            amifamily.NodeBootstrap(
                labels=labels, taints=[{"key": wk.UNREGISTERED_TAINT_KEY, "effect": "NoExecute"}]
            ),
        )
        tags = {
            f"{wk.TAG_CLUSTER_PREFIX}{sim.cluster_name}": "owned",
            wk.TAG_EKS_CLUSTER_NAME: sim.cluster_name,
            wk.NODEPOOL: nodepool,
            wk.EC2NODECLASS: nodeclass,
        }
        instance_id = sim.ec2.run_instances(
            ImageId=resources.amis["amd64"],
            InstanceType=instance_type,
            MinCount=1,
            MaxCount=1,
            SubnetId=resources.subnet_ids[index % len(resources.subnet_ids)],
            UserData=user_data,
            TagSpecifications=[
                {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
            ],
        )["Instances"][0]["InstanceId"]
        claims.append((name, instance_id))
    nodes = _run_world(sim, lambda: _nodes_ready(sim, {i for _, i in claims}))
    rest = KubeRest(sim.api_client)
    for index, (name, instance_id) in enumerate(claims):
        node = nodes[instance_id]
        if index < count - untagged:
            sim.ec2.create_tags(
                Resources=[instance_id],
                Tags=[
                    {"Key": wk.NODECLAIM, "Value": name},
                    {"Key": wk.TAG_NAME, "Value": node["metadata"]["name"]},
                ],
            )
        _register(sim, custom, rest, name, nodepool, nodeclass, instance_id, node)
    # Registered, the Nodes lose the unregistered taint and run the pods waiting for them.
    _run_world(sim, lambda: {} if _pending(sim) else nodes)
    return f"karpenter left {count} nodeclaim(s) of nodepool {nodepool}: {', '.join(n for n, _ in claims)}"


def _run_world(sim: Simulation, done: Callable[[], dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Step the cluster (workload controllers, kubelets, scheduler) without our functions, until
    ``done`` answers something."""
    deadline = sim.clock.now() + SETTLE_LIMIT
    while True:
        now = sim.clock.now()
        sim.controllers.step(now)
        sim.kubelets.step(now)
        sim.scheduler.step(now)
        answer = done()
        if answer:
            return answer
        if now >= deadline:
            raise KarpenterWorldError("karpenter step: the cluster did not settle (Nodes Ready, pods bound)")
        sim.clock.advance(sim.schedule.tick_seconds)


def _nodes_ready(sim: Simulation, instance_ids: set[str]) -> dict[str, dict[str, Any]]:
    """Each instance's Node once all are Ready; nothing before."""
    found = {(n.get("spec") or {}).get("providerID", "").rsplit("/", 1)[-1]: n for n in sim.kube.list_nodes()}
    return (
        {i: found[i] for i in instance_ids}
        if all(i in found and _ready(found[i]) for i in instance_ids)
        else {}
    )


def _pending(sim: Simulation) -> bool:
    """Whether some pod is not Running yet (unbound, or bound and not started)."""
    return any((p.get("status") or {}).get("phase") != "Running" for p in sim.kube.list_pods())


def _ready(node: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


def _register(
    sim: Simulation,
    custom: k8s.CustomObjectsApi,
    rest: KubeRest,
    name: str,
    nodepool: str,
    nodeclass: str,
    instance_id: str,
    node: dict[str, Any],
) -> None:
    node_meta, node_status = node["metadata"], node.get("status") or {}
    node_labels = node_meta.get("labels") or {}
    now = to_rfc3339(sim.clock.now())
    instance = sim.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    labels = {
        wk.NODEPOOL: nodepool,
        wk.EC2NODECLASS: nodeclass,
        wk.CAPACITY_TYPE: "on-demand",
        **{
            k: node_labels[k]
            for k in (wk.INSTANCE_TYPE, wk.ZONE, wk.ARCH, wk.OS, wk.REGION)
            if k in node_labels
        },
        **{k: v for k, v in node_labels.items() if k.startswith("karpenter.k8s.aws/instance-")},
    }
    annotations = {
        wk.NODEPOOL_HASH: KARPENTER_NODEPOOL_HASH,
        wk.NODEPOOL_HASH_VERSION: KARPENTER_NODEPOOL_HASH_VERSION,
        wk.EC2NODECLASS_HASH: KARPENTER_NODECLASS_HASH,
        NODECLASS_HASH_VERSION_KEY: KARPENTER_NODECLASS_HASH_VERSION,
        "karpenter.k8s.aws/tagged": "true",
    }
    pool = _obj(custom.get_cluster_custom_object(GROUP, VERSION, "nodepools", nodepool))
    template = pool["spec"]["template"]["spec"]
    created = _obj(
        custom.create_cluster_custom_object(
            GROUP,
            VERSION,
            "nodeclaims",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "NodeClaim",
                "metadata": {
                    "name": name,
                    "labels": labels,
                    "annotations": annotations,
                    "finalizers": [wk.TERMINATION_FINALIZER],
                    "ownerReferences": [
                        {
                            "apiVersion": f"{GROUP}/{VERSION}",
                            "kind": "NodePool",
                            "name": nodepool,
                            "uid": pool["metadata"]["uid"],
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {
                    "nodeClassRef": dict(template["nodeClassRef"]),
                    "requirements": list(template.get("requirements") or []),
                    "resources": {"requests": {"cpu": "3", "memory": "3Gi", "pods": "3"}},
                    "expireAfter": template.get("expireAfter", "720h"),
                },
            },
        )
    )
    conditions = [
        {"type": kind, "status": "True", "reason": kind, "message": "", "lastTransitionTime": now}
        for kind in ("Launched", "Registered", "Initialized", "Ready")
    ]
    custom.patch_cluster_custom_object_status(
        GROUP,
        VERSION,
        "nodeclaims",
        name,
        {
            "status": {
                "providerID": node["spec"]["providerID"],
                "nodeName": node_meta["name"],
                "imageID": instance["ImageId"],
                "capacity": node_status.get("capacity") or {},
                "allocatable": node_status.get("allocatable") or {},
                "conditions": conditions,
            }
        },
    )
    taints = [
        t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != wk.UNREGISTERED_TAINT_KEY
    ]
    rest.patch(
        node_path(node_meta["name"]),
        {
            "metadata": {
                "labels": {**labels, wk.REGISTERED: "true", wk.INITIALIZED: "true"},
                "annotations": annotations,
                "finalizers": [*(node_meta.get("finalizers") or []), wk.TERMINATION_FINALIZER],
                "ownerReferences": [
                    {
                        "apiVersion": f"{GROUP}/{VERSION}",
                        "kind": "NodeClaim",
                        "name": name,
                        "uid": created["metadata"]["uid"],
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {"taints": taints},
        },
    )


def _obj(value: object) -> dict[str, Any]:
    assert isinstance(value, dict), value
    return value
