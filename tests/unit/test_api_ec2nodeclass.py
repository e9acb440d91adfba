"""EC2NodeClass: Karpenter v1 manifests, their CRD rules, and the drift hash."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from serverless_karpenter.api import AMIAlias, EC2NodeClass, ManifestError

# Karpenter v1 "Getting Started with Karpenter" (step 12), variables filled in as the guide's script does.
GETTING_STARTED_EC2NODECLASS = """
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  role: "KarpenterNodeRole-my-cluster" # replace with your cluster name
  amiSelectorTerms:
    - alias: "al2023@latest"
  subnetSelectorTerms:
    - tags:
        karpenter.sh/discovery: "my-cluster" # replace with your cluster name
  securityGroupSelectorTerms:
    - tags:
        karpenter.sh/discovery: "my-cluster" # replace with your cluster name
"""

# The NodeClasses concept page's example, every field set, with the status Karpenter writes back.
FULL_EC2NODECLASS = """
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  kubelet:
    podsPerCore: 2
    maxPods: 20
    systemReserved:
        cpu: 100m
        memory: 100Mi
        ephemeral-storage: 1Gi
    kubeReserved:
        cpu: 200m
        memory: 100Mi
        ephemeral-storage: 3Gi
    evictionHard:
        memory.available: 5%
        nodefs.available: 10%
        nodefs.inodesFree: 10%
    evictionSoft:
        memory.available: 500Mi
        nodefs.available: 15%
        nodefs.inodesFree: 15%
    evictionSoftGracePeriod:
        memory.available: 1m
        nodefs.available: 1m30s
        nodefs.inodesFree: 2m
    evictionMaxPodGracePeriod: 60
    imageGCHighThresholdPercent: 85
    imageGCLowThresholdPercent: 80
    cpuCFSQuota: true
    clusterDNS: ["10.0.1.100"]
  amiFamily: AL2
  subnetSelectorTerms:
    - tags:
        karpenter.sh/discovery: "my-cluster"
        environment: test
    - id: subnet-09fa4a0a8f233a921
  securityGroupSelectorTerms:
    - tags:
        karpenter.sh/discovery: "my-cluster"
        environment: test
    - name: my-security-group
    - id: sg-063d7acfb4b06c82c
  capacityReservationSelectorTerms:
    - tags:
        karpenter.sh/discovery: my-cluster
    - id: cr-123
  associatePublicIPAddress: true
  role: "KarpenterNodeRole-my-cluster"
  amiSelectorTerms:
    - tags:
        karpenter.sh/discovery: "my-cluster"
        environment: test
    - name: my-ami
    - id: ami-123
  tags:
    team: team-a
    app: team-a-app
  metadataOptions:
    httpEndpoint: enabled
    httpProtocolIPv6: disabled
    httpPutResponseHopLimit: 1
    httpTokens: required
  blockDeviceMappings:
    - deviceName: /dev/xvda
      ebs:
        volumeSize: 100Gi
        volumeType: gp3
        iops: 10000
        encrypted: true
        kmsKeyID: "1234abcd-12ab-34cd-56ef-1234567890ab"
        deleteOnTermination: true
        throughput: 125
        snapshotID: snap-0123456789
    - deviceName: /dev/xvdb
      rootVolume: true
      ebs:
        volumeSize: 200G
  instanceStorePolicy: RAID0
  userData: |
    echo "Hello world"
  detailedMonitoring: true
  context: ctx-0123
status:
  subnets:
    - id: subnet-0a462d98193ff9fac
      zone: us-east-2b
      zoneID: use2-az2
  securityGroups:
    - id: sg-041513b454818610b
      name: ClusterSharedNodeSecurityGroup
  amis:
    - id: ami-01234567890123456
      name: custom-ami-amd64
      requirements:
        - key: kubernetes.io/arch
          operator: In
          values:
            - amd64
  capacityReservations:
    - availabilityZone: us-west-2a
      id: cr-01234567890123456
      instanceMatchCriteria: targeted
      instanceType: g6.48xlarge
      ownerID: "012345678901"
  instanceProfile: "my-cluster-0123456778901234567789"
  conditions:
    - lastTransitionTime: "2024-02-02T19:54:34Z"
      status: "True"
      type: InstanceProfileReady
      reason: InstanceProfileReady
      message: ""
"""


def load(text: str) -> dict[str, Any]:
    doc = yaml.safe_load(text)
    assert isinstance(doc, dict)
    return doc


def base() -> dict[str, Any]:
    return load(GETTING_STARTED_EC2NODECLASS)


def error_of(doc: dict[str, Any]) -> ManifestError:
    with pytest.raises(ManifestError) as info:
        EC2NodeClass.from_manifest(doc)
    return info.value


def test_getting_started_ec2nodeclass_loads_with_defaults() -> None:
    doc = base()
    original = copy.deepcopy(doc)

    nc = EC2NodeClass.model_validate(doc)

    assert doc == original
    assert nc.name == "default"
    assert nc.spec.role == "KarpenterNodeRole-my-cluster"
    assert nc.spec.ami_family is None
    assert nc.resolved_ami_family() == "AL2023"
    assert nc.ami_alias() == AMIAlias("AL2023", "latest")
    opts = nc.spec.metadata_options
    assert (
        opts.http_endpoint,
        opts.http_protocol_ipv6,
        opts.http_put_response_hop_limit,
        opts.http_tokens,
    ) == (
        "enabled",
        "disabled",
        1,
        "required",
    )
    manifest = nc.to_manifest()
    assert manifest["spec"]["metadataOptions"] == {
        "httpEndpoint": "enabled",
        "httpProtocolIPv6": "disabled",
        "httpPutResponseHopLimit": 1,
        "httpTokens": "required",
    }
    expected = copy.deepcopy(doc)
    expected["spec"]["metadataOptions"] = manifest["spec"]["metadataOptions"]
    assert manifest == expected


def test_full_ec2nodeclass_round_trips_exactly() -> None:
    doc = load(FULL_EC2NODECLASS)

    nc = EC2NodeClass.from_manifest(doc)

    assert nc.to_manifest() == doc
    assert EC2NodeClass.model_validate(nc.to_manifest()) == nc
    kubelet = nc.spec.kubelet
    assert kubelet is not None
    assert kubelet.cluster_dns == ["10.0.1.100"]
    assert kubelet.cpu_cfs_quota is True
    assert kubelet.image_gc_high_threshold_percent == 85
    assert kubelet.eviction_soft_grace_period["nodefs.available"] == "1m30s"
    assert nc.resolved_ami_family() == "AL2"
    assert nc.ami_alias() is None
    assert nc.spec.block_device_mappings[0].ebs is not None
    assert nc.spec.block_device_mappings[0].ebs.kms_key_id == "1234abcd-12ab-34cd-56ef-1234567890ab"
    assert nc.status.subnets[0].zone_id == "use2-az2"
    assert nc.status.capacity_reservations[0].owner_id == "012345678901"
    assert nc.status.instance_profile == "my-cluster-0123456778901234567789"
    ready = nc.condition("InstanceProfileReady")
    assert ready is not None and ready.status == "True"


# --- AMI selection ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("alias", "family", "version"),
    [
        ("al2@latest", "AL2", "latest"),
        ("al2023@v20240625", "AL2023", "v20240625"),
        ("bottlerocket@v1.10.0", "Bottlerocket", "v1.10.0"),
        ("windows2019@latest", "Windows2019", "latest"),
        ("windows2022@latest", "Windows2022", "latest"),
    ],
)
def test_alias_gives_the_family(alias: str, family: str, version: str) -> None:
    doc = base()
    doc["spec"]["amiSelectorTerms"] = [{"alias": alias}]
    nc = EC2NodeClass.from_manifest(doc)
    assert nc.resolved_ami_family() == family
    assert nc.ami_alias() == AMIAlias(family, version)


@pytest.mark.parametrize(
    ("alias", "rule_part"),
    [
        ("al2023", "family@version"),
        ("ubuntu@latest", "family must be one of al2, al2023, bottlerocket, windows2019, windows2022"),
        ("windows2022@v20240101", "only support the version 'latest'"),
        ("al2023@20240625", "version must be 'latest' or a release"),
        ("al2023@v20240625-extra-long-text-x", "at most 30 characters"),
    ],
)
def test_bad_alias(alias: str, rule_part: str) -> None:
    doc = base()
    doc["spec"]["amiSelectorTerms"] = [{"alias": alias}]
    err = error_of(doc)
    assert err.field == "spec.amiSelectorTerms[0].alias"
    assert rule_part in err.rule


def test_alias_cannot_be_combined() -> None:
    doc = base()
    doc["spec"]["amiSelectorTerms"] = [{"alias": "al2023@latest"}, {"id": "ami-0123"}]
    err = error_of(doc)
    assert err.field == "spec.amiSelectorTerms[0].alias"
    assert "only amiSelectorTerms entry" in err.rule

    doc["spec"]["amiSelectorTerms"] = [{"alias": "al2023@latest", "owner": "self"}]
    err = error_of(doc)
    assert err.field == "spec.amiSelectorTerms[0].alias"
    assert "cannot be combined with 'owner'" in err.rule


def test_ami_term_rules() -> None:
    doc = base()
    doc["spec"]["amiFamily"] = "AL2023"
    doc["spec"]["amiSelectorTerms"] = [{"owner": "self"}]
    err = error_of(doc)
    assert err.field == "spec.amiSelectorTerms[0]"
    assert "at least one of alias, tags, id, name, ssmParameter" in err.rule

    doc["spec"]["amiSelectorTerms"] = [{"id": "ami-0123", "name": "x"}]
    assert "'id' cannot be combined with 'name'" in error_of(doc).rule

    doc["spec"]["amiSelectorTerms"] = [{"id": "image-1"}]
    assert error_of(doc).field == "spec.amiSelectorTerms[0].id"

    doc["spec"]["amiSelectorTerms"] = []
    err = error_of(doc)
    assert (err.field, err.rule) == ("spec.amiSelectorTerms", "must not be empty")

    doc["spec"]["amiSelectorTerms"] = [
        {"name": "my-ami", "owner": "123456789012"},
        {"ssmParameter": "/my/ami"},
    ]
    EC2NodeClass.from_manifest(doc)


def test_ami_family_rules() -> None:
    doc = base()
    doc["spec"]["amiFamily"] = "Bottlerocket"
    err = error_of(doc)
    assert err.field == "spec.amiFamily"
    assert "must be 'AL2023' or 'Custom'" in err.rule

    doc["spec"]["amiFamily"] = "Custom"
    nc = EC2NodeClass.from_manifest(doc)
    assert nc.resolved_ami_family() == "Custom"

    doc["spec"]["amiFamily"] = "AL2023"
    assert EC2NodeClass.from_manifest(doc).resolved_ami_family() == "AL2023"

    doc["spec"]["amiFamily"] = "Ubuntu"
    assert "AL2, AL2023, Bottlerocket, Windows2019, Windows2022, Custom" in error_of(doc).rule

    del doc["spec"]["amiFamily"]
    doc["spec"]["amiSelectorTerms"] = [{"tags": {"team": "a"}}]
    err = error_of(doc)
    assert err.field == "spec.amiFamily"
    assert "is required when amiSelectorTerms has no alias" in err.rule


# --- identity, tags, selectors ---------------------------------------------------------------------------


def test_role_xor_instance_profile() -> None:
    doc = base()
    doc["spec"]["instanceProfile"] = "my-profile"
    err = error_of(doc)
    assert err.field == "spec"
    assert err.rule == "must set exactly one of 'role' or 'instanceProfile' (both are set)"

    del doc["spec"]["role"]
    assert EC2NodeClass.from_manifest(doc).spec.instance_profile == "my-profile"

    del doc["spec"]["instanceProfile"]
    assert "(neither is set)" in error_of(doc).rule

    doc["spec"]["role"] = ""
    err = error_of(doc)
    assert (err.field, err.rule) == ("spec.role", "must not be empty")


@pytest.mark.parametrize(
    "key",
    [
        "kubernetes.io/cluster/my-cluster",
        "karpenter.sh/nodepool",
        "karpenter.sh/nodeclaim",
        "karpenter.k8s.aws/ec2nodeclass",
        "eks:eks-cluster-name",
        "",
    ],
)
def test_restricted_tags(key: str) -> None:
    doc = base()
    doc["spec"]["tags"] = {"team": "a", key: "x"}
    err = error_of(doc)
    assert err.field == f"spec.tags[{key}]"
    assert "restricted" in err.rule or "empty tag keys" in err.rule


def test_selector_term_rules() -> None:
    doc = base()
    doc["spec"]["subnetSelectorTerms"] = []
    err = error_of(doc)
    assert (err.field, err.rule) == ("spec.subnetSelectorTerms", "must not be empty")

    doc["spec"]["subnetSelectorTerms"] = [{}]
    err = error_of(doc)
    assert (err.field, err.rule) == ("spec.subnetSelectorTerms[0]", "must set at least one of tags, id")

    doc["spec"]["subnetSelectorTerms"] = [{"id": "subnet-0abc", "tags": {"a": "b"}}]
    assert "'id' cannot be combined with 'tags'" in error_of(doc).rule

    doc["spec"]["subnetSelectorTerms"] = [{"tags": {"a": ""}}]
    err = error_of(doc)
    assert err.field == "spec.subnetSelectorTerms[0].tags[a]"
    assert "use '*'" in err.rule

    doc["spec"]["subnetSelectorTerms"] = [{"tags": {"a": "*"}}]
    doc["spec"]["securityGroupSelectorTerms"] = [{"name": "web", "id": "sg-0123"}]
    err = error_of(doc)
    assert err.field == "spec.securityGroupSelectorTerms[0].id"

    doc["spec"]["securityGroupSelectorTerms"] = [{"id": "subnet-0123"}]
    err = error_of(doc)
    assert err.field == "spec.securityGroupSelectorTerms[0].id"
    assert "must look like sg-" in err.rule

    doc["spec"]["securityGroupSelectorTerms"] = [{"id": "sg-0123"}]
    doc["spec"]["capacityReservationSelectorTerms"] = [{"id": "cr-0123", "ownerID": "012345678901"}]
    assert "'id' cannot be combined with 'ownerID'" in error_of(doc).rule

    doc["spec"]["capacityReservationSelectorTerms"] = [{"tags": {"a": "b"}, "ownerID": "12345"}]
    assert error_of(doc).field == "spec.capacityReservationSelectorTerms[0].ownerID"


# --- kubelet, block devices, metadata options -------------------------------------------------------------


@pytest.mark.parametrize(
    ("kubelet", "field", "rule_part"),
    [
        ({"maxPods": -1}, "maxPods", "at least 0"),
        ({"systemReserved": {"gpu": "1"}}, "systemReserved[gpu]", "cpu, ephemeral-storage, memory, pid"),
        ({"kubeReserved": {"cpu": "-100m"}}, "kubeReserved[cpu]", "must not be negative"),
        ({"kubeReserved": {"memory": "1 GB"}}, "kubeReserved[memory]", "quantity"),
        ({"evictionHard": {"memory.free": "5%"}}, "evictionHard[memory.free]", "not an eviction signal"),
        ({"evictionHard": {"memory.available": "101%"}}, "evictionHard[memory.available]", "percentage"),
        (
            {"evictionSoft": {"memory.available": "500Mi"}},
            "evictionSoftGracePeriod",
            "needs a grace period for the evictionSoft signal 'memory.available'",
        ),
        (
            {"evictionSoftGracePeriod": {"memory.available": "1m"}},
            "evictionSoft",
            "needs a threshold",
        ),
        (
            {
                "evictionSoft": {"memory.available": "5%"},
                "evictionSoftGracePeriod": {"memory.available": "soon"},
            },
            "evictionSoftGracePeriod[memory.available]",
            "duration",
        ),
        (
            {"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60},
            "imageGCHighThresholdPercent",
            "greater than imageGCLowThresholdPercent",
        ),
        ({"imageGCLowThresholdPercent": 101}, "imageGCLowThresholdPercent", "between 0 and 100"),
        ({"clusterDNS": ["10.0.0.10", "kube-dns"]}, "clusterDNS[1]", "IP address"),
        ({"cpuCFSQuota": "yes"}, "cpuCFSQuota", "true or false"),
        ({"podsPerCores": 2}, "podsPerCores", "did you mean 'podsPerCore'"),
    ],
)
def test_kubelet_rules(kubelet: dict[str, Any], field: str, rule_part: str) -> None:
    doc = base()
    doc["spec"]["kubelet"] = kubelet
    err = error_of(doc)
    assert err.field == f"spec.kubelet.{field}"
    assert rule_part in err.rule


@pytest.mark.parametrize(
    ("mappings", "field", "rule_part"),
    [
        ([{"ebs": {"volumeType": "gp3"}}], "blockDeviceMappings[0].ebs", "snapshotID or volumeSize"),
        ([{"ebs": {"volumeSize": "20GB"}}], "blockDeviceMappings[0].ebs.volumeSize", "Gi, G, Ti or T"),
        ([{"ebs": {"volumeSize": "59001Gi"}}], "blockDeviceMappings[0].ebs.volumeSize", "59000Gi"),
        ([{"ebs": {"volumeSize": "0Gi"}}], "blockDeviceMappings[0].ebs.volumeSize", "from 1"),
        (
            [{"ebs": {"volumeSize": "20Gi", "volumeType": "gp4"}}],
            "blockDeviceMappings[0].ebs.volumeType",
            "gp3",
        ),
        (
            [
                {"rootVolume": True, "ebs": {"volumeSize": "20Gi"}},
                {"rootVolume": True, "ebs": {"volumeSize": "1T"}},
            ],
            "blockDeviceMappings[1].rootVolume",
            "only one block device mapping may be the root volume",
        ),
    ],
)
def test_block_device_rules(mappings: list[dict[str, Any]], field: str, rule_part: str) -> None:
    doc = base()
    doc["spec"]["blockDeviceMappings"] = mappings
    err = error_of(doc)
    assert err.field == f"spec.{field}"
    assert rule_part in err.rule


def test_metadata_options_default_per_field_and_bounds() -> None:
    doc = base()
    doc["spec"]["metadataOptions"] = {"httpPutResponseHopLimit": 2}
    opts = EC2NodeClass.from_manifest(doc).spec.metadata_options
    assert (opts.http_endpoint, opts.http_put_response_hop_limit, opts.http_tokens) == (
        "enabled",
        2,
        "required",
    )

    doc["spec"]["metadataOptions"] = {"httpPutResponseHopLimit": 65, "httpTokens": "maybe"}
    err = error_of(doc)
    assert {e.field for e in err.errors} == {
        "spec.metadataOptions.httpPutResponseHopLimit",
        "spec.metadataOptions.httpTokens",
    }


# --- drift hash ---------------------------------------------------------------------------------------------


def test_static_hash_ignores_selectors_and_resolved_family() -> None:
    original = EC2NodeClass.from_manifest(load(FULL_EC2NODECLASS)).static_hash()

    same = load(FULL_EC2NODECLASS)
    same["spec"]["subnetSelectorTerms"] = [{"id": "subnet-0123"}]
    same["spec"]["securityGroupSelectorTerms"] = [{"name": "other"}]
    same["spec"]["amiSelectorTerms"] = [{"name": "other-ami"}]
    same["spec"]["capacityReservationSelectorTerms"] = []
    same["spec"]["blockDeviceMappings"].reverse()
    same["status"] = {}
    same["metadata"]["annotations"] = {"x": "y"}
    assert EC2NodeClass.from_manifest(same).static_hash() == original

    for field, value in (
        ("userData", "echo changed"),
        ("tags", {"team": "team-b"}),
        ("detailedMonitoring", False),
        ("associatePublicIPAddress", False),
        ("context", "ctx-2"),
        ("metadataOptions", {"httpTokens": "optional"}),
        ("kubelet", {"maxPods": 110}),
        ("amiFamily", "Bottlerocket"),
    ):
        changed = load(FULL_EC2NODECLASS)
        changed["spec"][field] = value
        assert EC2NodeClass.from_manifest(changed).static_hash() != original, field

    alias_only = EC2NodeClass.from_manifest(base()).static_hash()
    explicit = base()
    explicit["spec"]["amiFamily"] = "AL2023"
    assert EC2NodeClass.from_manifest(explicit).static_hash() == alias_only
    explicit["spec"]["amiFamily"] = "Custom"
    assert EC2NodeClass.from_manifest(explicit).static_hash() != alias_only
