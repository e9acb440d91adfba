"""The NodeClaim lifecycle against moto server and the simulated API server, one reconcile at a time:
Pending -> Launched -> Registered -> Initialized with label and taint sync; the EC2NodeClass status
written through /status; list pagination and field selectors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from serverless_karpenter import amifamily
from serverless_karpenter.adapters import kubernetes as gateway_module
from serverless_karpenter.api import labels as wk
from serverless_karpenter.cache import RESOLUTION_TTL as RESOLVE_TTL
from serverless_karpenter.lifecycle.model import InstanceTypeOption, NodeClaimRecord, NodeClaimState
from serverless_karpenter.lifecycle.reconciler import LifecycleReconciler
from serverless_karpenter_sim.cloud import ZONES
from serverless_karpenter_sim.simulation import Simulation

from tests.builders import nodeclass, nodepool
from tests.integration.simulate import simulation

pytestmark = pytest.mark.integration

STARTUP_TAINT = {"key": "example.com/agent-not-ready", "effect": "NoSchedule"}
POOL_TAINT = {"key": "dedicated", "value": "web", "effect": "NoSchedule"}
GROUP, VERSION = "karpenter.k8s.aws", "v1"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    pool = nodepool()
    template = pool["spec"]["template"]
    pool["spec"]["template"] = {
        **template,
        "metadata": {"labels": {"team": "web"}},
        "spec": {**template["spec"], "taints": [POOL_TAINT], "startupTaints": [STARTUP_TAINT]},
    }
    sim = simulation(tmp_path_factory.mktemp("life"), {"name": "lifecycle", "manifests": [pool, nodeclass()]})
    sim.start()
    try:
        yield sim
    finally:
        sim.stop()


def pending_record(sim: Simulation, name: str) -> NodeClaimRecord:
    return sim.plane.store.create(
        NodeClaimRecord(
            name=name,
            nodepool="default",
            nodeclass="default",
            requirements=[{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}],
            instance_type_options=[
                InstanceTypeOption(
                    name="m5.large",
                    offerings=[(z, "on-demand", 0.096) for z in ZONES],
                    allocatable={"cpu": 1930, "memory": 7 << 30, "pods": 29},
                    capacity={"cpu": 2000, "memory": 8 << 30, "pods": 29},
                )
            ],
            labels={wk.NODEPOOL: "default", "team": "web"},
            taints=[POOL_TAINT],
            created_at=sim.clock.now(),
        )
    )


def register_node(sim: Simulation, record: NodeClaimRecord) -> str:
    """What the kubelet does: a Node with our providerID and the taints it registered with, not Ready."""
    name = f"ip-{record.name}.ec2.internal"
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {
            "providerID": record.provider_id,
            "taints": [{"key": wk.UNREGISTERED_TAINT_KEY, "effect": "NoExecute"}, POOL_TAINT, STARTUP_TAINT],
        },
        "status": {
            "conditions": [{"type": "Ready", "status": "False"}],
            "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"},
        },
    }
    core: Any = k8s.CoreV1Api(sim.api_client)
    core.create_node(node)
    return name


def node(sim: Simulation, name: str) -> dict[str, Any]:
    found = sim.kube.get_node(name)
    assert found is not None
    return found


def test_pending_to_initialized_with_label_and_taint_sync(sim: Simulation) -> None:
    reconciler = LifecycleReconciler(sim.plane)
    record = pending_record(sim, "default-life1")

    result = reconciler.reconcile()
    assert result.launched == ["default-life1"]
    launched = sim.plane.store.get("default-life1")
    assert launched is not None and launched.state == NodeClaimState.LAUNCHED
    assert launched.instance_id and launched.provider_id and launched.launch_template_name
    assert launched.version == record.version + 1  # one conditional, versioned transition
    assert launched.startup_taints == [STARTUP_TAINT]  # the NodePool's, kept with the claim
    instance = sim.plane.launcher.describe(launched.instance_id)
    assert instance is not None and instance.tags[wk.NODECLAIM] == "default-life1"

    # No node yet: it stays Launched.
    assert reconciler.reconcile().registered == []
    name = register_node(sim, launched)
    assert reconciler.reconcile().registered == ["default-life1"]
    registered = sim.plane.store.get("default-life1")
    assert registered is not None and registered.state == NodeClaimState.REGISTERED
    assert registered.node_name == name
    synced = node(sim, name)
    labels = synced["metadata"]["labels"]
    assert labels[wk.NODEPOOL] == "default" and labels["team"] == "web" and labels[wk.REGISTERED] == "true"
    taints = [(t["key"], t.get("value"), t["effect"]) for t in synced["spec"]["taints"]]
    assert (wk.UNREGISTERED_TAINT_KEY, None, "NoExecute") not in taints
    assert ("dedicated", "web", "NoSchedule") in taints
    assert (STARTUP_TAINT["key"], None, "NoSchedule") in taints  # kept until something removes it
    assert wk.TERMINATION_FINALIZER in synced["metadata"]["finalizers"]

    # Ready, but the startup taint is still there: not initialized.
    core: Any = k8s.CoreV1Api(sim.api_client)
    core.patch_node_status(name, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    assert reconciler.reconcile().initialized == []
    # The agent the startup taint waits for removes it; registration does not put it back.
    kept = [t for t in node(sim, name)["spec"]["taints"] if t["key"] != STARTUP_TAINT["key"]]
    core.patch_node(name, {"spec": {"taints": kept}})
    # The not-ready taint admission put on the new Node is still there, as Karpenter waits to see it go.
    assert ("node.kubernetes.io/not-ready", "NoSchedule") in {(t["key"], t["effect"]) for t in kept}
    assert reconciler.reconcile().initialized == []
    sim.kubelets.step(sim.clock.now())  # the node lifecycle controller sees Ready and lifts it
    assert reconciler.reconcile().initialized == ["default-life1"]
    final = sim.plane.store.get("default-life1")
    assert final is not None and final.state == NodeClaimState.INITIALIZED
    assert [t["key"] for t in node(sim, name)["spec"]["taints"]] == ["dedicated"]


def nodeclass_status(sim: Simulation, name: str) -> dict[str, Any]:
    custom: Any = k8s.CustomObjectsApi(sim.api_client)
    obj: dict[str, Any] = custom.get_cluster_custom_object(GROUP, VERSION, "ec2nodeclasses", name)
    status: dict[str, Any] = obj.get("status") or {}
    return status


def test_nodeclass_status_is_written_through_the_status_subresource(sim: Simulation) -> None:
    resources = sim.resources
    assert resources is not None
    ec2 = sim.ec2
    # A second, larger subnet in the first zone: that zone's launches go to it (most free addresses).
    bigger = ec2.create_subnet(
        VpcId=resources.vpc_id,
        CidrBlock="10.0.128.0/17",
        AvailabilityZone=ZONES[0],
        TagSpecifications=[
            {"ResourceType": "subnet", "Tags": [{"Key": "karpenter.sh/discovery", "Value": sim.cluster_name}]}
        ],
    )["Subnet"]["SubnetId"]

    # What the selectors resolved to is cached for Karpenter's minute: the new subnet is seen after it.
    sim.clock.advance(RESOLVE_TTL.total_seconds())
    LifecycleReconciler(sim.plane).resolve_nodeclasses()
    status = nodeclass_status(sim, "default")
    assert {s["id"] for s in status["subnets"]} == {*resources.subnet_ids, bigger}
    assert all(s["zone"] in ZONES and s["zoneID"] for s in status["subnets"])
    assert status["subnets"][0]["id"] == bigger
    [spec] = [nc for nc in sim.kube.list_ec2nodeclasses() if nc["metadata"]["name"] == "default"]
    resolved = sim.plane.resolver.resolve(spec)
    chosen = resolved.subnet_for_zone(ZONES[0])
    assert chosen is not None and chosen.id == bigger
    assert status["securityGroups"] == [
        {"id": resources.security_group_id, "name": f"{sim.cluster_name}-node"}
    ]
    amis = {a["id"]: a["requirements"] for a in status["amis"]}
    assert amis[resources.amis["amd64"]] == [{"key": wk.ARCH, "operator": "In", "values": ["amd64"]}]
    assert amis[resources.amis["arm64"]] == [{"key": wk.ARCH, "operator": "In", "values": ["arm64"]}]
    profile = status["instanceProfile"]
    roles = sim.cloud.client("iam").get_instance_profile(InstanceProfileName=profile)["InstanceProfile"][
        "Roles"
    ]
    assert [r["RoleName"] for r in roles] == [resources.node_role_name]
    # The request tags the stack's IAM conditions demand (as Karpenter's policy does).
    described = sim.cloud.client("iam").get_instance_profile(InstanceProfileName=profile)["InstanceProfile"]
    tags = {t["Key"]: t["Value"] for t in described.get("Tags", [])}
    assert tags[f"kubernetes.io/cluster/{sim.cluster_name}"] == "owned"
    assert tags["eks:eks-cluster-name"] == sim.cluster_name
    assert tags["topology.kubernetes.io/region"] == "us-east-1"
    assert tags[wk.EC2NODECLASS] == spec["metadata"]["name"]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == "True"
    assert {"SubnetsReady", "SecurityGroupsReady", "AMIsReady", "InstanceProfileReady"} <= set(conditions)

    # Unchanged: no write (the resourceVersion stays).
    custom: Any = k8s.CustomObjectsApi(sim.api_client)
    before: dict[str, Any] = custom.get_cluster_custom_object(GROUP, VERSION, "ec2nodeclasses", "default")
    LifecycleReconciler(sim.plane).resolve_nodeclasses()
    after: dict[str, Any] = custom.get_cluster_custom_object(GROUP, VERSION, "ec2nodeclasses", "default")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]

    # A node class whose subnets match nothing is not Ready, and says why.
    broken = nodeclass()
    broken = {
        **broken,
        "metadata": {"name": "broken"},
        "spec": {**broken["spec"], "subnetSelectorTerms": [{"tags": {"nothing": "matches"}}]},
    }
    custom.create_cluster_custom_object(GROUP, VERSION, "ec2nodeclasses", broken)
    LifecycleReconciler(sim.plane).resolve_nodeclasses()
    conditions = {c["type"]: c for c in nodeclass_status(sim, "broken")["conditions"]}
    assert conditions["Ready"]["status"] == "False" and conditions["SubnetsReady"]["status"] == "False"
    assert conditions["SubnetsReady"]["reason"] == "SubnetsNotFound"
    assert "subnetSelectorTerms" in conditions["SubnetsReady"]["message"]
    # Ready names what holds it back, as Karpenter's root condition does; the parts the resolver did not
    # reach after the failure are not claimed either way.
    assert conditions["Ready"]["reason"] == "UnhealthyDependents"
    assert "SubnetsReady=False" in conditions["Ready"]["message"]
    assert conditions["AMIsReady"]["status"] == "Unknown"
    assert conditions["ValidationSucceeded"]["reason"] == "DependenciesNotReady"


def test_ami_terms_resolve_by_alias_version_id_name_tags_and_owner(sim: Simulation) -> None:
    resources = sim.resources
    assert resources is not None
    resolver = sim.plane.resolver
    ec2 = sim.ec2
    base = nodeclass()

    def resolve(**spec: Any) -> Any:
        return resolver.resolve({**base, "spec": {**base["spec"], **spec}})

    # An alias with a release version reads that release's public parameter.
    image = ec2.describe_images(ImageIds=[resources.amis["amd64"]])["Images"][0]
    sim.cloud.publish_public_parameter(
        "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/"
        "amazon-eks-node-al2023-x86_64-standard-1.31-v20240807/image_id",
        image["ImageId"],
    )
    pinned = resolve(amiSelectorTerms=[{"alias": "al2023@v20240807"}])
    assert pinned.ami_family == "AL2023" and pinned.amis == {"amd64": image["ImageId"]}
    assert resolve(amiSelectorTerms=[{"alias": "bottlerocket@latest"}]).ami_family == "Bottlerocket"

    own = ec2.create_image(Name="team-golden-2026", InstanceId=_instance(sim))["ImageId"]
    ec2.create_tags(Resources=[own], Tags=[{"Key": "golden", "Value": "yes"}])
    by_id = resolve(amiFamily="AL2023", amiSelectorTerms=[{"id": own}])
    assert by_id.amis == {"amd64": own} and by_id.ami_family == "AL2023"
    assert resolve(amiFamily="AL2023", amiSelectorTerms=[{"name": "team-golden-*"}]).amis == {"amd64": own}
    assert resolve(amiFamily="AL2023", amiSelectorTerms=[{"tags": {"golden": "yes"}}]).amis == {"amd64": own}
    owner = ec2.describe_images(ImageIds=[own])["Images"][0]["OwnerId"]
    assert resolve(amiFamily="AL2023", amiSelectorTerms=[{"tags": {"golden": "*"}, "owner": owner}]).amis == {
        "amd64": own
    }
    with pytest.raises(ValueError, match="amiSelectorTerms"):
        resolve(amiFamily="AL2023", amiSelectorTerms=[{"tags": {"golden": "no"}}])

    # Security groups by id and by name; an instance profile given is used as is.
    by_sg = resolve(
        securityGroupSelectorTerms=[
            {"id": resources.security_group_id},
            {"name": f"{sim.cluster_name}-node"},
        ],
        role=None,
        instanceProfile="given-profile",
    )
    assert by_sg.security_group_ids == [resources.security_group_id]
    assert by_sg.instance_profile == "given-profile"


def _instance(sim: Simulation) -> str:
    resources = sim.resources
    assert resources is not None
    reservation = sim.ec2.run_instances(ImageId=resources.amis["amd64"], MinCount=1, MaxCount=1)
    return str(reservation["Instances"][0]["InstanceId"])


def test_lists_are_paginated_and_pending_pods_use_a_field_selector(
    sim: Simulation, monkeypatch: pytest.MonkeyPatch
) -> None:
    core: Any = k8s.CoreV1Api(sim.api_client)
    for index in range(5):
        pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"pending-{index}"},
            "spec": {"containers": [{"name": "c", "image": "pause"}]},
        }
        core.create_namespaced_pod("default", pod)
    monkeypatch.setattr(gateway_module, "PAGE_SIZE", 2)
    calls: list[dict[str, Any]] = []
    gateway = sim.kube
    original = gateway.core.list_pod_for_all_namespaces

    def spy(**kwargs: Any) -> Any:
        calls.append({k: v for k, v in kwargs.items() if not k.startswith("_") or k == "_continue"})
        return original(**kwargs)

    monkeypatch.setattr(gateway.core, "list_pod_for_all_namespaces", spy)
    pending = gateway.list_pending_pods()
    assert sorted(p["metadata"]["name"] for p in pending) == [f"pending-{i}" for i in range(5)]
    assert len(calls) == 3  # 2 + 2 + 1, following the continue token
    assert all(
        c["limit"] == 2 and c["field_selector"] == "spec.nodeName=,status.phase=Pending" for c in calls
    )
    assert "_continue" not in calls[0] and all(c["_continue"] for c in calls[1:])


def test_the_lifecycle_pass_deletes_unused_launch_templates_but_not_a_live_claims(sim: Simulation) -> None:
    launcher = sim.plane.launcher
    [spec] = [nc for nc in sim.kube.list_ec2nodeclasses() if nc["metadata"]["name"] == "default"]
    resolved = sim.plane.resolver.resolve(spec)
    record = pending_record(sim, "default-sweep")
    LifecycleReconciler(sim.plane).reconcile()
    live = sim.plane.store.get("default-sweep")
    assert live is not None and live.launch_template_name
    stale = launcher.ensure_launch_template(
        resolved, "amd64", amifamily.NodeBootstrap(labels={"stale": "yes"}, taints=[], max_pods=3)
    )
    assert record.name == live.name
    # Past the sweep interval (5 min), within the registration timeout (15 min) of the live claim.
    sim.clock.advance(600)
    result = LifecycleReconciler(sim.plane).reconcile()
    assert stale in result.launch_templates_deleted
    assert live.launch_template_name not in result.launch_templates_deleted
    names = {t["LaunchTemplateName"] for t in launcher.launch_templates()}
    assert live.launch_template_name in names and stale not in names
    # Rate-limited: the next pass does not look again.
    assert LifecycleReconciler(sim.plane).reconcile().launch_templates_deleted == []
