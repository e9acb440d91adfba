"""What the provisioning simulation is told about the cluster, as Karpenter sees it: DaemonSets, NodePool
usage, nodes still starting, in-flight NodeClaims, pods of deleting nodes, volumes, pod-level resources
and the AMI family. Each case follows Karpenter's own tests (``scheduling/suite_test.go``,
``instancetype/suite_test.go``), through ``simulate_provisioning`` as the provisioner and ``plan`` run it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from serverless_karpenter.adapters.providers.model import ResolvedNodeClass
from serverless_karpenter.adapters.providers.nodeclass import NodeClassResolver
from serverless_karpenter.api import labels as wk
from serverless_karpenter.api.ec2nodeclass import EC2NodeClass
from serverless_karpenter.lifecycle.model import InstanceTypeOption, NodeClaimRecord, NodeClaimState
from serverless_karpenter.provisioning.provisioner import ClusterState, simulate_provisioning
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter.scheduling.scheduler import SchedulingResult, choose_offering
from serverless_karpenter.scheduling.volumes import VolumeIndex
from serverless_karpenter.termination.handoff import pods_on_deleting_nodes
from serverless_karpenter_cli.plan import offline_nodeclass

from tests import builders
from tests.unit.test_scheduling_constraints import catalog_types

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
RESOLVED = ResolvedNodeClass(
    name="default", subnets=[], security_group_ids=[], amis={}, ami_family="AL2023", instance_profile=None
)


class _Types:
    def __init__(self, types: Sequence[Any]) -> None:
        self._types = list(types)

    def instance_types(self, nodeclass: ResolvedNodeClass, spec: Any) -> list[Any]:
        return self._types


class _Plane:
    def __init__(self, types: Sequence[Any]) -> None:
        self.instance_types = _Types(types)


def simulate(
    pending: Sequence[dict[str, Any]],
    *,
    nodepools: Sequence[dict[str, Any]] | None = None,
    types: Sequence[Any] | None = None,
    **state: Any,
) -> SchedulingResult:
    cluster = ClusterState(
        nodepools=list(nodepools) if nodepools is not None else [builders.nodepool()],
        nodeclass_specs={"default": builders.nodeclass()},
        resolved={"default": RESOLVED},
        **state,
    )
    result, _, _ = simulate_provisioning(
        cluster, pending, _Plane(types if types is not None else catalog_types()), time_budget_s=0.5
    )
    return result


def pending(name: str, cpu: str = "1", memory: str = "1Gi", **fields: Any) -> dict[str, Any]:
    return builders.pod(name, cpu, memory, unschedulable=True, **fields)


# -- pods of deleting nodes (item 5) -----------------------------------------------------------------


class _Kube:
    def __init__(self, nodes: list[dict[str, Any]], pods: list[dict[str, Any]], pdbs: list[dict[str, Any]]):
        self.nodes, self.pods, self.pdbs = nodes, pods, pdbs

    def list_nodes(self) -> list[dict[str, Any]]:
        return self.nodes

    def list_pods_on_node(self, node_name: str) -> list[dict[str, Any]]:
        return [p for p in self.pods if podlib.node_name(p) == node_name]

    def list_pdbs(self) -> list[dict[str, Any]]:
        return self.pdbs


def pdb(name: str, app: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": app}}, **spec},
        "status": {"disruptionsAllowed": 0},
    }


def test_pods_a_pdb_fully_blocks_on_a_deleting_node_do_not_trigger_provisioning() -> None:
    node = builders.node("leaving")
    node["metadata"]["deletionTimestamp"] = "2026-11-24T11:59:00Z"
    pods = [
        builders.pod("db-0", node="leaving", labels={"app": "db"}),
        builders.pod("web-0", node="leaving", labels={"app": "web"}),
        builders.pod("api-0", node="leaving", labels={"app": "api"}),
        builders.pod("job-0", node="leaving", labels={"app": "job"}),
        builders.pod("pinned", node="leaving", annotations={"karpenter.sh/do-not-disrupt": "true"}),
    ]
    kube = _Kube(
        [node],
        pods,
        [
            pdb("db", "db", maxUnavailable=0),  # fully blocking: never evicted
            pdb("web", "web", minAvailable="100%"),  # fully blocking too
            pdb("api", "api", maxUnavailable=1),  # none allowed now, but it will move: capacity for it
            pdb("job-a", "job", maxUnavailable=1),  # two PDBs: the Eviction API refuses the pod
            pdb("job-b", "job", maxUnavailable=1),
        ],
    )
    assert [p["metadata"]["name"] for p in pods_on_deleting_nodes(kube, NOW)] == ["api-0"]


def test_an_unhealthy_pod_under_an_always_allow_pdb_is_still_rescheduled() -> None:
    node = builders.node("leaving")
    node["metadata"]["deletionTimestamp"] = "2026-11-24T11:59:00Z"
    unready = builders.pod("db-0", node="leaving", labels={"app": "db"})
    unready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    blocking = pdb("db", "db", maxUnavailable=0, unhealthyPodEvictionPolicy="AlwaysAllow")
    assert [
        p["metadata"]["name"] for p in pods_on_deleting_nodes(_Kube([node], [unready], [blocking]), NOW)
    ] == ["db-0"]


def test_plan_leaves_pods_a_pdb_fully_blocks_on_their_deleting_node() -> None:
    from serverless_karpenter.scheduling.inputs import classify

    node = builders.node("leaving")
    node["kind"] = "Node"
    node["metadata"]["deletionTimestamp"] = "2026-11-24T11:59:00Z"
    docs = [
        {**builders.pod("db-0", node="leaving", labels={"app": "db"}), "kind": "Pod"},
        {**builders.pod("web-0", node="leaving", labels={"app": "web"}), "kind": "Pod"},
        {**pdb("db", "db", maxUnavailable=0), "kind": "PodDisruptionBudget"},
        node,
    ]
    assert [p["metadata"]["name"] for p in classify(docs).pending] == ["web-0"]


# -- volumes (item 6) -------------------------------------------------------------------------------


def test_an_unbound_claim_of_an_immediate_storage_class_is_not_provisioned_for() -> None:
    claim = {"metadata": {"name": "data", "namespace": "default"}, "spec": {"storageClassName": "gp3"}}
    immediate = {"metadata": {"name": "gp3"}, "volumeBindingMode": "Immediate"}
    pod = pending("db", volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}])
    result = simulate([pod], volumes=VolumeIndex.build([claim], [], [immediate]))
    assert result.new_nodeclaims == []
    reason = result.unschedulable["default/db"]["default"]
    assert 'persistentvolumeclaim "default/data" is unbound' in reason and "binds Immediate" in reason
    # The API server's default binding mode is Immediate too.
    unset = {"metadata": {"name": "gp3"}}
    assert simulate([pod], volumes=VolumeIndex.build([claim], [], [unset])).new_nodeclaims == []
    # WaitForFirstConsumer: the volume is made where the pod lands, so Karpenter provisions.
    later = {"metadata": {"name": "gp3"}, "volumeBindingMode": "WaitForFirstConsumer"}
    assert len(simulate([pod], volumes=VolumeIndex.build([claim], [], [later])).new_nodeclaims) == 1


# -- pod-level resources (item 7) -------------------------------------------------------------------


def test_pod_level_requests_replace_the_containers_sum() -> None:
    pod = pending("big", "100m", "128Mi", resources={"requests": {"cpu": "6", "memory": "2Gi"}})
    assert podlib.requests(pod)["cpu"] == 6000 and podlib.requests(pod)["memory"] == 2 << 30
    # A pod-level limit alone is the request, as the API server defaults it; other resources still
    # come from the containers.
    limited = pending(
        "limited",
        "100m",
        "128Mi",
        resources={"limits": {"cpu": "3"}},
        containers=[builders.container("100m", "128Mi", extended={"nvidia.com/gpu": "1"})],
    )
    assert podlib.requests(limited)["cpu"] == 3000 and podlib.requests(limited)["nvidia.com/gpu"] == 1
    assert podlib.requests(limited)["memory"] == 128 << 20
    [claim] = simulate([pod]).new_nodeclaims
    assert all(it.allocatable["cpu"] >= 6000 for it in claim.instance_types)


# -- the AMI family (item 8) ------------------------------------------------------------------------


class _SSM:
    def get_parameter(self, Name: str) -> dict[str, Any]:  # noqa: N803 - boto3's keyword
        return {"Parameter": {"Value": "ami-0123456789abcdef0"}}


class _EC2:
    def describe_images(self, **_: Any) -> dict[str, Any]:
        return {"Images": []}


def test_ami_family_custom_with_an_alias_is_custom_everywhere() -> None:
    spec = {**builders.nodeclass()["spec"], "amiFamily": "Custom"}
    manifest = {**builders.nodeclass(), "spec": spec}
    assert EC2NodeClass.model_validate(manifest).resolved_ami_family() == "Custom"
    resolver = NodeClassResolver(_EC2(), _SSM(), None, "demo", "1.31")
    family, images = resolver.images(spec["amiSelectorTerms"], spec["amiFamily"])
    assert family == "Custom" and images
    assert offline_nodeclass(manifest, ["us-east-1a"]).ami_family == "Custom"
    # Without amiFamily, the alias decides.
    plain = builders.nodeclass()
    assert offline_nodeclass(plain, ["us-east-1a"]).ami_family == "AL2023"
    assert resolver.images(plain["spec"]["amiSelectorTerms"], None)[0] == "AL2023"


# -- NodePool limits (item 2) -----------------------------------------------------------------------


def pool_node(name: str, cpu: str = "8", **fields: Any) -> dict[str, Any]:
    """A node of NodePool "default" that has no room left for pending pods."""
    node = builders.node(
        name, "100m", labels={wk.NODEPOOL: "default"}, provider_id=f"aws:///{name}", **fields
    )
    node["status"]["capacity"] = {"cpu": cpu, "memory": "32Gi", "pods": "110"}
    return node


def record(name: str, *, node: str | None = None, state: NodeClaimState = NodeClaimState.REGISTERED) -> Any:
    return NodeClaimRecord(
        name=name,
        nodepool="default",
        nodeclass="default",
        state=state,
        node_name=node,
        provider_id=f"aws:///{node}" if node else None,
        capacity={"cpu": 8000, "memory": 32 << 30, "pods": 110},
        created_at=NOW,
    )


def test_existing_nodes_of_a_nodepool_count_against_its_limits_once() -> None:
    limited = builders.nodepool(limits={"cpu": 10})
    # 8 of the 10 CPUs are a Node's (with or without its NodeClaim record): a 4-CPU node would exceed.
    for records in ([], [record("default-abcde", node="n1")]):
        result = simulate(
            [pending("web", "3")], nodepools=[limited], nodes=[pool_node("n1")], records=records
        )
        assert result.new_nodeclaims == []
        assert "limits" in result.unschedulable["default/web"]["default"]
        # A 2-CPU node still fits under the limit: the record is not counted a second time.
        [claim] = simulate(
            [pending("web", "1")], nodepools=[limited], nodes=[pool_node("n1")], records=records
        ).new_nodeclaims
        assert {it.capacity["cpu"] for it in claim.instance_types} == {2000}
    # A record whose Node has not registered yet counts as its capacity.
    result = simulate([pending("web", "3")], nodepools=[limited], records=[record("default-fghij")])
    assert result.new_nodeclaims == []


def test_limits_nodes_counts_each_node_and_each_new_nodeclaim() -> None:
    limited = builders.nodepool(limits={"nodes": 2})
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "solo"}}, "topologyKey": wk.HOSTNAME}
            ]
        }
    }
    pods = [pending(f"solo-{i}", labels={"app": "solo"}, affinity=anti) for i in range(3)]
    result = simulate(pods, nodepools=[limited], nodes=[pool_node("n1")])
    assert len(result.new_nodeclaims) == 1
    reasons = [r["default"] for r in result.unschedulable.values()]
    assert len(reasons) == 2 and all("node limits have been exhausted" in r for r in reasons)


# -- DaemonSets (item 1) ----------------------------------------------------------------------------


def daemonset(
    name: str, cpu: str = "1", *, host_ports: Sequence[int] = (), **pod_spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"ds": name}},
            "template": {
                "metadata": {"labels": {"ds": name}},
                "spec": {"containers": [builders.container(cpu, "128Mi", host_ports=host_ports)], **pod_spec},
            },
        },
    }


def both_arches() -> dict[str, Any]:
    pool = builders.nodepool()
    requirements = [r for r in pool["spec"]["template"]["spec"]["requirements"] if r["key"] != wk.ARCH]
    pool["spec"]["template"]["spec"] = {**pool["spec"]["template"]["spec"], "requirements": requirements}
    return pool


def test_a_daemonset_is_charged_only_to_the_instance_types_it_runs_on() -> None:
    # Karpenter's "should not count daemonset overhead for instance types the daemonset cannot run on".
    arm_only = daemonset("arm-agent", "3", nodeSelector={wk.ARCH: "arm64"})
    family = daemonset(
        "c6a-agent",
        "3",
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": wk.INSTANCE_FAMILY, "operator": "In", "values": ["c6a"]}
                            ]
                        }
                    ]
                }
            }
        },
    )
    result = simulate([pending("web", "1")], nodepools=[both_arches()], daemonsets=[arm_only, family])
    [claim] = result.new_nodeclaims
    by_name = {it.name: it for it in claim.instance_types}
    # 2-vCPU amd64 types keep their room for the pod: neither DaemonSet runs there.
    assert "c6i.large" in by_name and "m6a.large" in by_name
    # Where a 3-CPU DaemonSet does run, a 2-vCPU type is too small.
    assert "c6g.large" not in by_name and "c6a.large" not in by_name
    assert claim.daemon_overhead.get("cpu", 0) == 0  # the least any of its types' DaemonSets take


def test_daemonset_host_ports_are_taken_on_a_new_node() -> None:
    web = pending("web", "1", host_ports=[80])
    # Karpenter's "should not schedule pods with conflicting host ports with daemonsets".
    result = simulate([web], daemonsets=[daemonset("ingress", "100m", host_ports=[80])])
    assert result.new_nodeclaims == []
    assert "hostPort 80/TCP is taken by a DaemonSet" in result.unschedulable["default/web"]["default"]
    # Where the DaemonSet does not run (arm64 only), the port is free.
    arm_ingress = daemonset("ingress", "100m", host_ports=[80], nodeSelector={wk.ARCH: "arm64"})
    [claim] = simulate([web], nodepools=[both_arches()], daemonsets=[arm_ingress]).new_nodeclaims
    assert {it.labels[wk.ARCH] for it in claim.instance_types} == {"amd64"}


def test_an_existing_node_keeps_room_for_daemonsets_not_running_there_yet() -> None:
    node = builders.node("n1", "4", labels={wk.ARCH: "amd64", wk.OS: "linux"})
    web = pending("web", "3500m")
    agent = daemonset("agent", "1")
    # Without the DaemonSet the pod fits on the node.
    assert simulate([web], nodes=[node]).existing == {"n1": ["default/web"]}
    # The agent will run there and take 1 CPU: the pod needs a new node.
    result = simulate([web], nodes=[node], daemonsets=[agent])
    assert result.existing == {} and len(result.new_nodeclaims) == 1
    # Once the agent runs there it is counted once, not twice.
    running = builders.pod("agent-x", "1", "128Mi", node="n1", owner="DaemonSet")
    small = pending("small", "2500m")
    assert simulate([small], nodes=[node], bound_pods=[running], daemonsets=[agent]).existing == {
        "n1": ["default/small"]
    }
    # A DaemonSet that will not run on the node (arm64 only) takes nothing of it.
    arm = daemonset("agent", "1", nodeSelector={wk.ARCH: "arm64"})
    assert simulate([web], nodes=[node], daemonsets=[arm]).existing == {"n1": ["default/web"]}


# -- nodes still starting (item 3) ------------------------------------------------------------------

STARTUP = {"key": "example.com/agent-not-ready", "value": "true", "effect": "NoSchedule"}


def test_a_node_still_starting_is_used_despite_its_startup_and_ephemeral_taints() -> None:
    pool = builders.nodepool()
    pool["spec"]["template"]["spec"] = {**pool["spec"]["template"]["spec"], "startupTaints": [STARTUP]}
    taints = [
        STARTUP,
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
        {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"},
    ]
    starting = builders.node("n1", labels={wk.NODEPOOL: "default", wk.ARCH: "amd64"}, taints=taints)
    assert simulate([pending("web")], nodepools=[pool], nodes=[starting]).existing == {"n1": ["default/web"]}
    # Once initialized, a startup taint that is back means what it says.
    initialized = builders.node(
        "n1", labels={wk.NODEPOOL: "default", wk.INITIALIZED: "true", wk.ARCH: "amd64"}, taints=[STARTUP]
    )
    result = simulate([pending("web")], nodepools=[pool], nodes=[initialized])
    assert result.existing == {} and len(result.new_nodeclaims) == 1
    # A node that is not Karpenter's keeps every taint (Karpenter's Initialized() is true for it).
    foreign = builders.node("n2", taints=taints[1:2])
    assert simulate([pending("web")], nodepools=[pool], nodes=[foreign]).existing == {}


# -- in-flight NodeClaims (item 4) ------------------------------------------------------------------


def launched(claim: Any, name: str) -> NodeClaimRecord:
    """The record of a claim the provisioner launched, as CreateFleet filled it in."""
    chosen = choose_offering(claim)
    assert chosen is not None
    it = next(it for it in claim.instance_types if it.name == chosen.instance_type)
    return NodeClaimRecord(
        name=name,
        nodepool=claim.nodepool,
        nodeclass=claim.nodeclass,
        state=NodeClaimState.LAUNCHED,
        requirements=[r for req in claim.requirements.values() for r in req.to_node_selector_requirements()],
        instance_type_options=[
            InstanceTypeOption(
                name=o.name, arch=o.labels[wk.ARCH], offerings=[], allocatable=dict(o.allocatable)
            )
            for o in claim.instance_types
        ],
        daemon_overhead=dict(claim.daemon_overhead),
        pods=list(claim.pods),
        labels={**claim.requirements.labels(), **claim.labels},
        instance_id="i-0123456789abcdef0",
        instance_type=chosen.instance_type,
        zone=chosen.zone,
        capacity_type=chosen.capacity_type,
        allocatable=dict(it.allocatable),
        created_at=NOW,
    )


def test_pods_asking_for_instance_labels_wait_for_the_launched_nodeclaim_rather_than_launch_again() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["c6a.xlarge"]},
                            {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["2"]},
                        ]
                    }
                ]
            }
        }
    }
    pods = [pending(f"web-{i}", "1", affinity=affinity) for i in range(2)]
    [claim] = simulate(pods).new_nodeclaims
    record = launched(claim, "default-abcde")
    # The next batch (the same pods, still pending a second later) finds the launched NodeClaim.
    again = simulate(pods, records=[record])
    assert again.new_nodeclaims == []
    assert again.existing == {"nodeclaim/default-abcde": ["default/web-0", "default/web-1"]}
