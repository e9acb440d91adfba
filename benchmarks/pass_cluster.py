"""The cluster the control-plane pass benchmark (``passes.py``) and its test measure, and how they count.

:func:`seed` writes a cluster in its steady state straight into the simulator's stores, as if the control
plane had provisioned it: ``nodes`` running instances in moto (tagged as our launches are), their
NodeClaim records Initialized in DynamoDB (carrying the cheapest 60 instance types that fit, as a real
claim does, and the annotations a previous disruption pass left), their Nodes registered and Ready, and
``pods_per_node`` Running pods on each, owned by ReplicaSets; plus ``pending`` unschedulable pods of one
CPU that no existing node can take, a burst for the provisioner. Objects go into the API server's store
directly (11,000 POSTs would take minutes), shaped as the kubelet and the kube-scheduler leave them.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from serverless_karpenter.adapters.providers.model import Instance
from serverless_karpenter.api import labels as wk
from serverless_karpenter.api.ec2nodeclass import EC2NodeClass
from serverless_karpenter.api.nodepool import NodePool
from serverless_karpenter.clock import to_rfc3339
from serverless_karpenter.disruption.candidates import (
    POD_EVENT_ANNOTATION,
    POD_SET_ANNOTATION,
    pod_fingerprint,
)
from serverless_karpenter.lifecycle.launch import mark_launched
from serverless_karpenter.lifecycle.model import InstanceTypeOption, NodeClaimRecord, NodeClaimState
from serverless_karpenter.provisioning.provisioner import (
    build_templates,
    from_templates,
    new_nodeclaim_name,
)
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.requirements import Requirements
from serverless_karpenter.scheduling.scheduler import MAX_INSTANCE_TYPES
from serverless_karpenter_sim.kubeapi.kinds import kind_of
from serverless_karpenter_sim.kubeapi.store import Entry
from serverless_karpenter_sim.scenario import load_scenario
from serverless_karpenter_sim.simulation import Simulation

NAMESPACE = "default"
DEPLOYMENTS = 20
POD_CPU_MILLI = 150
POD_MEMORY_MI = 512
# A pending pod no seeded node has room for (they keep ~0.4 CPU free): the provisioner must launch.
PENDING_CPU = "1"
PENDING_MEMORY = "2Gi"
# Old enough that consolidateAfter (1m) has passed for every node: consolidation looks at all of them.
AGE = timedelta(hours=2)
PODS = kind_of("", "v1", "pods")
NODES = kind_of("", "v1", "nodes")


def simulation() -> Simulation:
    """The built-in default scenario's NodePool and EC2NodeClass (limits lifted), no workload."""
    scenario = load_scenario("default")
    nodepool, nodeclass = (dict(m) for m in scenario.manifests[:2])
    nodepool["spec"] = {**nodepool["spec"], "limits": {"cpu": "100000"}}
    scenario.manifests = [nodepool, nodeclass]
    scenario.name = "passes"
    return Simulation(scenario, log=io.StringIO())


@dataclass(frozen=True)
class Seeded:
    nodes: int
    bound_pods: int
    pending_pods: int
    instance_type: str


def _options(sim: Simulation, fits: resources.ResourceList) -> list[InstanceTypeOption]:
    """The cheapest on-demand types the NodePool allows that hold ``fits``, as a claim records them."""
    plane = sim.plane
    nodepools = plane.kube.list_nodepools()
    specs = {s["metadata"]["name"]: s for s in plane.kube.list_ec2nodeclasses()}
    resolved = {name: plane.resolver.resolve(spec) for name, spec in specs.items()}
    template = build_templates(nodepools, resolved, specs, plane, [], {})[0][0]
    options: list[tuple[float, InstanceTypeOption]] = []
    for it in template.instance_types:
        if template.requirements.intersects(Requirements.from_labels(it.labels)) is not None:
            continue
        if not resources.fits(fits, it.allocatable):
            continue
        offerings = sorted(
            ((o.zone, o.capacity_type, o.price) for o in it.offerings if o.capacity_type == "on-demand"),
            key=lambda o: o[2],
        )
        if offerings:
            option = InstanceTypeOption(
                name=it.name,
                arch=it.labels.get(wk.ARCH, "amd64"),
                offerings=offerings,
                allocatable=dict(it.allocatable),
                capacity=dict(it.capacity),
            )
            options.append((offerings[0][2], option))
    options.sort(key=lambda p: (p[0], p[1].name))
    return [o for _, o in options[:MAX_INSTANCE_TYPES]]


def _pod(name: str, app: str, node: str | None, started: datetime, cpu: str, memory: str) -> dict[str, Any]:
    meta = {
        "name": name,
        "namespace": NAMESPACE,
        "labels": {"app": app, "pod-template-hash": "5d4f8c7b9"},
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": f"{app}-5d4f8c7b9",
                "uid": f"00000000-0000-4000-8000-{abs(hash(app)) % 10**12:012d}",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": app,
                "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
        ],
        "terminationGracePeriodSeconds": 30,
    }
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _quantities(values: dict[str, int]) -> dict[str, str]:
    return {name: resources.format_quantity(name, value) for name, value in values.items()}


def _condition(kind: str, status: str, at: str, reason: str | None = None) -> dict[str, Any]:
    out = {"type": kind, "status": status, "lastTransitionTime": at}
    if reason:
        out["reason"] = reason
    return out


def _put(
    sim: Simulation, kind: Any, namespace: str | None, body: dict[str, Any], status: dict[str, Any]
) -> None:
    store = sim.kube_server.store
    name = body["metadata"]["name"]
    created = store.create(kind, namespace, body)
    obj = created.obj if isinstance(created, Entry) else created
    updated = store.update(kind, namespace, name, {**obj, "status": status}, subresource="status")
    if kind is NODES:
        # Admission gave the new Node the not-ready taint; Ready, the node lifecycle controller takes it off.
        obj = updated.obj if isinstance(updated, Entry) else updated
        store.update(kind, namespace, name, {**obj, "spec": {**obj["spec"], "taints": []}})


def seed(sim: Simulation, nodes: int, pods_per_node: int, pending: int) -> Seeded:
    """Write the cluster (see the module's docstring); ``sim`` started, nothing run."""
    plane, res = sim.plane, sim.resources
    assert res is not None
    pod_requests = {"cpu": POD_CPU_MILLI, "memory": POD_MEMORY_MI * 2**20}
    node_requests = {k: v * pods_per_node for k, v in pod_requests.items()} | {"pods": pods_per_node}
    options = _options(sim, node_requests)
    chosen = options[0]
    nodepool_manifest = plane.kube.list_nodepools()[0]
    nodeclass_spec = plane.kube.list_ec2nodeclasses()[0]
    nodepool = NodePool.model_validate(nodepool_manifest)
    nodeclass = EC2NodeClass.model_validate(nodeclass_spec)
    resolved = plane.resolver.resolve(nodeclass_spec)
    ec2 = sim.cloud.client("ec2")
    now = sim.clock.now()
    born = now - AGE
    stamp = to_rfc3339(born)
    subnets = list(resolved.subnets)
    for index in range(nodes):
        subnet = subnets[index % len(subnets)]
        name = new_nodeclaim_name("default")
        raw = ec2.run_instances(
            ImageId=next(iter(resolved.amis.values())),
            InstanceType=chosen.name,
            MinCount=1,
            MaxCount=1,
            SubnetId=subnet.id,
            TagSpecifications=[
                {
                    "ResourceType": "instance",
                    "Tags": [
                        {"Key": f"{wk.TAG_CLUSTER_PREFIX}{sim.cluster_name}", "Value": "owned"},
                        {"Key": wk.NODECLAIM, "Value": name},
                        {"Key": wk.NODEPOOL, "Value": "default"},
                    ],
                }
            ],
        )["Instances"][0]
        zone = raw["Placement"]["AvailabilityZone"]
        node_name = raw["PrivateDnsName"]
        provider_id = f"aws:///{zone}/{raw['InstanceId']}"
        pods = [
            _pod(
                f"app-{(index * pods_per_node + j) % DEPLOYMENTS:02d}-{index:04d}-{j:02d}",
                f"app-{(index * pods_per_node + j) % DEPLOYMENTS:02d}",
                node_name,
                born,
                f"{POD_CPU_MILLI}m",
                f"{POD_MEMORY_MI}Mi",
            )
            for j in range(pods_per_node)
        ]
        # Written Pending with every option, then launched and initialized by the code that does it.
        pending_record = NodeClaimRecord(
            name=name,
            nodepool="default",
            nodeclass="default",
            requirements=[
                {"key": wk.INSTANCE_TYPE, "operator": "In", "values": [o.name for o in options]},
                *(nodepool_manifest["spec"]["template"]["spec"]["requirements"]),
            ],
            instance_type_options=options,
            requests=node_requests,
            pods=[f"{NAMESPACE}/{p['metadata']['name']}" for p in pods],
            labels={wk.NODEPOOL: "default", wk.EC2NODECLASS: "default"},
            created_at=born,
            **from_templates(nodepool, nodeclass),
        )
        plane.store.create(pending_record)
        instance = Instance(
            id=raw["InstanceId"],
            instance_type=chosen.name,
            zone=zone,
            state="running",
            capacity_type=wk.CAPACITY_TYPE_ON_DEMAND,
            launch_time=born,
            tags={wk.NODECLAIM: name},
            private_dns_name=node_name,
            image_id=raw["ImageId"],
        )
        launched = mark_launched(plane, pending_record, instance)
        # As the last disruption pass left it: the pods' fingerprint, unchanged since they started.
        annotations = {POD_SET_ANNOTATION: pod_fingerprint(pods), POD_EVENT_ANNOTATION: born.isoformat()}
        plane.store.save(
            launched.model_copy(
                update={
                    "state": NodeClaimState.INITIALIZED,
                    "node_name": node_name,
                    "launched_at": born,
                    "registered_at": born,
                    "initialized_at": born,
                    "annotations": {**launched.annotations, **annotations},
                }
            )
        )
        labels = {**launched.labels, wk.ARCH: chosen.arch, wk.OS: "linux"}
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node_name,
                "labels": {**labels, wk.HOSTNAME: node_name, wk.REGISTERED: "true", wk.INITIALIZED: "true"},
                "finalizers": [wk.TERMINATION_FINALIZER],
            },
            "spec": {"providerID": provider_id},
        }
        _put(
            sim,
            NODES,
            None,
            node,
            {
                "capacity": _quantities(chosen.capacity),
                "allocatable": _quantities(chosen.allocatable),
                "conditions": [_condition("Ready", "True", stamp, "KubeletReady")],
                "addresses": [{"type": "InternalIP", "address": raw.get("PrivateIpAddress", "")}],
            },
        )
        for pod in pods:
            _put(
                sim,
                PODS,
                NAMESPACE,
                pod,
                {
                    "phase": "Running",
                    "startTime": stamp,
                    "conditions": [
                        _condition("PodScheduled", "True", stamp),
                        _condition("Ready", "True", stamp),
                    ],
                },
            )
    for index in range(pending):
        app = f"burst-{index % 4}"
        _put(
            sim,
            PODS,
            NAMESPACE,
            _pod(f"{app}-{index:05d}", app, None, now, PENDING_CPU, PENDING_MEMORY),
            {
                "phase": "Pending",
                "conditions": [_condition("PodScheduled", "False", to_rfc3339(now), "Unschedulable")],
            },
        )
    return Seeded(nodes, nodes * pods_per_node, pending, chosen.name)
