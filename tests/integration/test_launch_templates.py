"""Launch templates and CreateFleet against moto server: content per AMI family (user data decoded),
the fleet request EC2 really receives, re-creation after NotFound, unused-template deletion, and fleet
errors retried with the remaining offerings."""

from __future__ import annotations

import base64
import email
import tomllib
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
import yaml
from botocore.awsrequest import AWSResponse, HTTPHeaders
from serverless_karpenter import amifamily
from serverless_karpenter.adapters.providers.instanceprofile import LAUNCH_TEMPLATE_CLUSTER_TAG
from serverless_karpenter.adapters.providers.model import LaunchRequest
from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.launch import launch_record, launch_request
from serverless_karpenter.lifecycle.model import InstanceTypeOption, NodeClaimRecord, NodeClaimState
from serverless_karpenter.scheduling.scheduler import MAX_INSTANCE_TYPES
from serverless_karpenter_sim.cloud import ZONES
from serverless_karpenter_sim.simulation import Simulation

from tests.integration.simulate import simulation

pytestmark = pytest.mark.integration

KMS_KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
USER_SCRIPT = "#!/bin/bash\necho user-part\n"
USER_MIME = (
    "MIME-Version: 1.0\n"
    'Content-Type: multipart/mixed; boundary="BOUNDARY"\n\n'
    "--BOUNDARY\n"
    'Content-Type: text/x-shellscript; charset="us-ascii"\n\n'
    "#!/bin/bash\necho from-mime\n"
    "--BOUNDARY\n"
    "Content-Type: application/node.eks.aws\n\n"
    "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n"
    "      shutdownGracePeriod: 30s\n"
    "--BOUNDARY--\n"
)
KUBELET = {
    "kubeReserved": {"cpu": "200m", "memory": "300Mi"},
    "systemReserved": {"cpu": "100m"},
    "evictionHard": {"memory.available": "5%"},
}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    sim = simulation(tmp_path_factory.mktemp("lt"), {"name": "launch-templates", "manifests": []})
    sim.start()
    try:
        yield sim
    finally:
        sim.stop()


def nodeclass(sim: Simulation, name: str, **spec: Any) -> dict[str, Any]:
    discovery = {"karpenter.sh/discovery": sim.cluster_name}
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": name},
        "spec": {
            "role": f"KarpenterNodeRole-{sim.cluster_name}",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": discovery}],
            "securityGroupSelectorTerms": [{"tags": discovery}],
            **spec,
        },
    }


def request(name: str, capacity_type: str, types: list[str], max_pods: int = 29) -> LaunchRequest:
    return LaunchRequest(
        nodeclaim=name,
        nodepool="default",
        capacity_type=capacity_type,
        overrides=[(t, z, "amd64") for t in types for z in ZONES],
        bootstrap=amifamily.NodeBootstrap(
            labels={wk.NODEPOOL: "default", "team": "a"},
            taints=[
                {"key": wk.UNREGISTERED_TAINT_KEY, "effect": "NoExecute"},
                {"key": "dedicated", "value": "web", "effect": "NoSchedule"},
            ],
        ),
        max_pods=dict.fromkeys(types, max_pods),
    )


def template_data(sim: Simulation, name: str) -> dict[str, Any]:
    versions = sim.ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"]
    data: dict[str, Any] = versions[0]["LaunchTemplateData"]
    return data


def launched_template(sim: Simulation, spec: dict[str, Any], claim: str) -> tuple[dict[str, Any], str]:
    resolved = sim.plane.resolver.resolve(spec)
    instance = sim.plane.launcher.launch(request(claim, "on-demand", ["m5.large"]), resolved)
    assert instance.launch_template is not None
    data = template_data(sim, instance.launch_template)
    return data, base64.b64decode(data["UserData"]).decode()


def mime_parts(text: str) -> list[tuple[str, str]]:
    message = email.message_from_string(text)
    assert message.is_multipart()
    return [(p.get_content_type(), str(p.get_payload())) for p in message.walk() if not p.is_multipart()]


def test_al2023_template_merges_the_users_mime_with_a_nodeadm_nodeconfig(sim: Simulation) -> None:
    spec = nodeclass(
        sim,
        "al2023",
        userData=USER_MIME,
        kubelet=KUBELET,
        blockDeviceMappings=[
            {
                "deviceName": "/dev/xvda",
                "ebs": {"volumeSize": "100Gi", "volumeType": "gp3", "encrypted": True, "kmsKeyID": KMS_KEY},
            }
        ],
        detailedMonitoring=True,
        associatePublicIPAddress=False,
        tags={"team": "payments"},
    )
    data, user_data = launched_template(sim, spec, "default-al2023")
    parts = mime_parts(user_data)
    # The user's parts come first, unnested, then ours: nodeadm merges in order.
    assert [t for t, _ in parts] == [
        "text/x-shellscript",
        "application/node.eks.aws",
        "application/node.eks.aws",
    ]
    assert "echo from-mime" in parts[0][1]
    ours = yaml.safe_load(parts[2][1])
    assert ours["kind"] == "NodeConfig" and ours["spec"]["cluster"]["name"] == sim.cluster_name
    assert ours["spec"]["cluster"]["cidr"] == "10.100.0.0/16"
    config = ours["spec"]["kubelet"]["config"]
    assert config["maxPods"] == 29
    assert config["kubeReserved"] == {"cpu": "200m", "memory": "300Mi"}
    assert config["systemReserved"] == {"cpu": "100m"} and config["evictionHard"] == {
        "memory.available": "5%"
    }
    flags = ours["spec"]["kubelet"]["flags"]
    assert "--node-labels=karpenter.sh/nodepool=default,team=a" in flags
    assert "--register-with-taints=karpenter.sh/unregistered:NoExecute,dedicated=web:NoSchedule" in flags
    # The rest of the template.
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
    assert data["Monitoring"] == {"Enabled": True}
    assert data["BlockDeviceMappings"] == [
        {
            "DeviceName": "/dev/xvda",
            "Ebs": {"VolumeSize": 100, "VolumeType": "gp3", "Encrypted": True, "KmsKeyId": KMS_KEY},
        }
    ]
    interface = data["NetworkInterfaces"][0]
    assert interface["AssociatePublicIpAddress"] is False and interface["DeviceIndex"] == 0
    assert interface["Groups"] == [sim.resources.security_group_id]
    assert "SecurityGroupIds" not in data
    assert data["IamInstanceProfile"]["Name"].startswith(f"{sim.cluster_name}_")
    assert data["ImageId"] == sim.resources.amis["amd64"]


@pytest.mark.parametrize(
    ("capacity_type", "interfaces"), [("on-demand", False), ("spot", False), ("spot", True)]
)
def test_instances_come_up_in_their_templates_security_groups(
    sim: Simulation, capacity_type: str, interfaces: bool
) -> None:
    # With associatePublicIPAddress the groups are on the template's network interface, else on it.
    extra = {"associatePublicIPAddress": False} if interfaces else {}
    name = f"groups-{capacity_type}-{interfaces}".lower()
    resolved = sim.plane.resolver.resolve(nodeclass(sim, name, **extra))
    instance = sim.plane.launcher.launch(request(name, capacity_type, ["m5.large"]), resolved)
    [reservation] = sim.ec2.describe_instances(InstanceIds=[instance.id])["Reservations"]
    groups = [g["GroupId"] for g in reservation["Instances"][0]["SecurityGroups"]]
    # What drift compares with the EC2NodeClass's selected groups: no SecurityGroupDrift at launch.
    assert groups == [sim.resources.security_group_id]


def test_al2_template_runs_bootstrap_sh_with_the_kubelet_settings(sim: Simulation) -> None:
    spec = nodeclass(
        sim, "al2", amiSelectorTerms=[{"alias": "al2@latest"}], userData=USER_SCRIPT, kubelet=KUBELET
    )
    data, user_data = launched_template(sim, spec, "default-al2")
    assert user_data.startswith("#!/bin/bash")
    assert user_data.index("echo user-part") < user_data.index("/etc/eks/bootstrap.sh")
    assert f"/etc/eks/bootstrap.sh '{sim.cluster_name}'" in user_data
    assert "--dns-cluster-ip '10.100.0.10'" in user_data and "--use-max-pods false" in user_data
    for arg in (
        "--max-pods=29",
        "--kube-reserved=cpu=200m,memory=300Mi",
        "--system-reserved=cpu=100m",
        "--eviction-hard=memory.available<5%",
        "--node-labels=karpenter.sh/nodepool=default,team=a",
    ):
        assert arg in user_data, arg
    # No interface override: the groups go on the template.
    assert data["SecurityGroupIds"] == [sim.resources.security_group_id]
    assert data["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 20  # the family's default root volume


def test_bottlerocket_template_is_toml_merged_with_the_users_settings(sim: Simulation) -> None:
    users = "\n".join(
        [
            "[settings.host-containers.admin]",
            "enabled = true",
            "[settings.kubernetes.node-labels]",
            '"mine" = "yes"',
        ]
    )
    spec = nodeclass(
        sim, "br", amiSelectorTerms=[{"alias": "bottlerocket@latest"}], userData=users, kubelet=KUBELET
    )
    data, user_data = launched_template(sim, spec, "default-br")
    settings = tomllib.loads(user_data)["settings"]
    kubernetes = settings["kubernetes"]
    assert settings["host-containers"]["admin"]["enabled"] is True
    assert kubernetes["cluster-name"] == sim.cluster_name and kubernetes["max-pods"] == 29
    assert kubernetes["node-labels"] == {"mine": "yes", wk.NODEPOOL: "default", "team": "a"}
    assert kubernetes["node-taints"] == {
        wk.UNREGISTERED_TAINT_KEY: [":NoExecute"],
        "dedicated": ["web:NoSchedule"],
    }
    assert kubernetes["kube-reserved"] == {"cpu": "200m", "memory": "300Mi"}
    assert kubernetes["eviction-hard"] == {"memory.available": "5%"}
    assert [b["DeviceName"] for b in data["BlockDeviceMappings"]] == ["/dev/xvda", "/dev/xvdb"]


def test_custom_family_passes_user_data_through(sim: Simulation) -> None:
    ami = sim.resources.amis["amd64"]
    spec = nodeclass(sim, "custom", amiFamily="Custom", amiSelectorTerms=[{"id": ami}], userData=USER_SCRIPT)
    _, user_data = launched_template(sim, spec, "default-custom")
    assert user_data == USER_SCRIPT


def test_bottlerocket_user_data_that_is_not_toml_fails_resolution(sim: Simulation) -> None:
    spec = nodeclass(sim, "br-bad", amiSelectorTerms=[{"alias": "bottlerocket@latest"}], userData="echo hi")
    with pytest.raises(ValueError, match=r"spec\.userData"):
        sim.plane.resolver.resolve(spec)


def capture_fleets(sim: Simulation) -> list[dict[str, Any]]:
    captured: list[dict[str, Any]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        captured.append(params)

    sim.plane.launcher.ec2.meta.events.register("before-parameter-build.ec2.CreateFleet", record)
    return captured


def test_fleet_request_has_cheapest_sixty_types_in_every_zone_and_the_tags(sim: Simulation) -> None:
    captured = capture_fleets(sim)
    resolved = sim.plane.resolver.resolve(nodeclass(sim, "fleet", tags={"cost-center": "42"}))
    catalog = sim.plane.instance_types.instance_types(resolved, {})
    cheapest = sorted(
        (min(o.price for o in it.offerings if o.capacity_type == "spot"), it.name)
        for it in catalog
        if it.labels.get(wk.ARCH) == "amd64" and any(o.capacity_type == "spot" for o in it.offerings)
    )
    types = [name for _, name in cheapest[:70]]
    # The launch path cuts the claim's 70 types to the sixty cheapest; the adapter sends what it gets.
    record = NodeClaimRecord(
        name="default-fleet1",
        nodepool="default",
        nodeclass="fleet",
        instance_type_options=[
            InstanceTypeOption(
                name=it.name,
                offerings=[(o.zone, o.capacity_type, o.price) for o in it.offerings],
                capacity={"pods": 29},
            )
            for it in catalog
            if it.name in types
        ],
        created_at=sim.clock.now(),
    )
    instance = sim.plane.launcher.launch(launch_request(sim.plane, record, "spot"), resolved)

    fleet = captured[-1]
    assert fleet["Type"] == "instant" and fleet["ClientToken"] == "default-fleet1"
    assert fleet["SpotOptions"] == {"AllocationStrategy": "price-capacity-optimized"}
    assert fleet["TargetCapacitySpecification"] == {
        "TotalTargetCapacity": 1,
        "DefaultTargetCapacityType": "spot",
    }
    overrides = [o for c in fleet["LaunchTemplateConfigs"] for o in c["Overrides"]]
    chosen = {o["InstanceType"] for o in overrides}
    assert chosen == set(types[:MAX_INSTANCE_TYPES])
    subnets = {z: sim.plane.resolver.resolve(nodeclass(sim, "fleet")).subnet_for_zone(z) for z in ZONES}
    spot_zones = {it.name: {o.zone for o in it.offerings if o.capacity_type == "spot"} for it in catalog}
    assert sorted((o["InstanceType"], o["AvailabilityZone"]) for o in overrides) == sorted(
        (name, zone) for name in chosen for zone in spot_zones[name]
    )
    for override in overrides:
        assert override["SubnetId"] == subnets[override["AvailabilityZone"]].id
    tags = {t["Key"]: t["Value"] for t in fleet["TagSpecifications"][0]["Tags"]}
    assert {s["ResourceType"] for s in fleet["TagSpecifications"]} == {"instance", "volume", "fleet"}
    assert tags == {
        "Name": "default/default-fleet1",
        "cost-center": "42",
        f"kubernetes.io/cluster/{sim.cluster_name}": "owned",
        "eks:eks-cluster-name": sim.cluster_name,
        wk.NODEPOOL: "default",
        wk.NODECLAIM: "default-fleet1",
        wk.EC2NODECLASS: "fleet",
    }
    assert instance.tags[wk.NODECLAIM] == "default-fleet1" and instance.instance_type in chosen

    sim.plane.launcher.launch(request("default-fleet2", "on-demand", ["m5.large", "c5.large"]), resolved)
    on_demand = captured[-1]
    assert on_demand["OnDemandOptions"] == {"AllocationStrategy": "lowest-price"}
    assert "SpotOptions" not in on_demand and on_demand["ClientToken"] == "default-fleet2"


def test_instance_types_with_different_max_pods_get_their_own_templates(sim: Simulation) -> None:
    captured = capture_fleets(sim)
    resolved = sim.plane.resolver.resolve(nodeclass(sim, "pods"))
    launch = request("default-pods", "on-demand", ["m5.large", "m5.xlarge"])
    launch = LaunchRequest(**{**vars(launch), "max_pods": {"m5.large": 29, "m5.xlarge": 58}})
    sim.plane.launcher.launch(launch, resolved)
    configs = captured[-1]["LaunchTemplateConfigs"]
    by_type = {
        c["Overrides"][0]["InstanceType"]: c["LaunchTemplateSpecification"]["LaunchTemplateName"]
        for c in configs
    }
    assert len(set(by_type.values())) == 2
    for instance_type, pods in (("m5.large", 29), ("m5.xlarge", 58)):
        user_data = base64.b64decode(template_data(sim, by_type[instance_type])["UserData"]).decode()
        config = yaml.safe_load(mime_parts(user_data)[-1][1])
        assert config["spec"]["kubelet"]["config"]["maxPods"] == pods


def test_a_deleted_template_is_recreated_and_the_launch_goes_on(sim: Simulation) -> None:
    resolved = sim.plane.resolver.resolve(nodeclass(sim, "recreate"))
    first = sim.plane.launcher.launch(request("default-re1", "on-demand", ["m5.large"]), resolved)
    assert first.launch_template is not None
    sim.ec2.delete_launch_template(LaunchTemplateName=first.launch_template)
    # The launcher still believes the template exists; CreateFleet says NotFound; it re-creates, once.
    second = sim.plane.launcher.launch(request("default-re2", "on-demand", ["m5.large"]), resolved)
    assert second.launch_template == first.launch_template
    assert template_data(sim, first.launch_template)["ImageId"] == resolved.amis["amd64"]


def test_unused_templates_are_deleted_and_used_or_young_ones_kept(sim: Simulation) -> None:
    resolved = sim.plane.resolver.resolve(nodeclass(sim, "sweep"))
    launcher = sim.plane.launcher
    used = launcher.ensure_launch_template(resolved, "amd64", request("x", "spot", ["m5.large"]).bootstrap)
    unused = launcher.ensure_launch_template(
        resolved, "amd64", replace(request("y", "spot", ["m5.large"]).bootstrap, max_pods=7)
    )
    foreign = sim.ec2.create_launch_template(
        LaunchTemplateName="somebody-elses", LaunchTemplateData={"ImageId": resolved.amis["amd64"]}
    )["LaunchTemplate"]["LaunchTemplateName"]
    now = sim.clock.now()
    # Young templates are kept even when unused.
    assert unused not in launcher.delete_unused_launch_templates({used}, now - timedelta(hours=1))
    deleted = launcher.delete_unused_launch_templates({used}, now + timedelta(hours=1))
    assert unused in deleted and used not in deleted and foreign not in deleted
    names = {t["LaunchTemplateName"] for t in sim.ec2.describe_launch_templates()["LaunchTemplates"]}
    assert used in names and foreign in names and unused not in names
    tagged = launcher.launch_templates()
    assert all(
        {t["Key"]: t["Value"] for t in lt.get("Tags", [])}[LAUNCH_TEMPLATE_CLUSTER_TAG] == sim.cluster_name
        for lt in tagged
    )


def test_fleet_errors_mark_offerings_unavailable_and_the_launch_retries_the_rest(sim: Simulation) -> None:
    """No capacity for the cheapest offering: the same launch retries without it and succeeds."""
    plane = sim.plane
    resolved = plane.resolver.resolve(nodeclass(sim, "default"))
    calls: list[dict[str, Any]] = []

    def no_capacity_first(params: dict[str, Any], **_: Any) -> None:
        calls.append(params)

    def answer(context: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        if len(calls) > 1:
            return None
        params = calls[-1]
        errors = [
            {
                "LaunchTemplateAndOverrides": {
                    "LaunchTemplateSpecification": c["LaunchTemplateSpecification"],
                    "Overrides": o,
                },
                "Lifecycle": "spot",
                "ErrorCode": "InsufficientInstanceCapacity",
                "ErrorMessage": "no capacity",
            }
            for c in params["LaunchTemplateConfigs"]
            for o in c["Overrides"]
            if o["InstanceType"] == "m5.large"
        ]
        return AWSResponse("http://fault.invalid/", 200, HTTPHeaders(), None), {
            "Instances": [],
            "Errors": errors,
        }

    events = plane.launcher.ec2.meta.events
    events.register("before-parameter-build.ec2.CreateFleet", no_capacity_first, unique_id="t-ice-params")
    events.register("before-call.ec2.CreateFleet", answer, unique_id="t-ice-answer")
    try:
        record = plane.store.create(
            NodeClaimRecord(
                name="default-ice",
                nodepool="default",
                nodeclass="default",
                requirements=[{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["spot"]}],
                instance_type_options=[
                    InstanceTypeOption(
                        name=name,
                        offerings=[(z, "spot", price + i * 0.001) for i, z in enumerate(ZONES)],
                        capacity={"pods": 29},
                    )
                    for name, price in (("m5.large", 0.03), ("m6i.large", 0.04))
                ],
                created_at=sim.clock.now(),
            )
        )
        launched = launch_record(plane, record, resolved)
    finally:
        events.unregister("before-parameter-build.ec2.CreateFleet", unique_id="t-ice-params")
        events.unregister("before-call.ec2.CreateFleet", unique_id="t-ice-answer")
    assert launched.state == NodeClaimState.LAUNCHED and launched.instance_type == "m6i.large"
    assert len(calls) == 2
    retried = {o["InstanceType"] for c in calls[1]["LaunchTemplateConfigs"] for o in c["Overrides"]}
    assert retried == {"m6i.large"}
    # A retry needs a fresh ClientToken: EC2 would answer the first request's result again.
    assert calls[0]["ClientToken"] == "default-ice" and calls[1]["ClientToken"] != "default-ice"
    assert all(plane.instance_types.is_unavailable("spot", "m5.large", z) for z in ZONES)
    assert plane.store.get("default-ice").state == NodeClaimState.LAUNCHED
