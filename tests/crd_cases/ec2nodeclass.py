"""The invalid EC2NodeClass cases: one per rule of its CRD."""

from __future__ import annotations

from tests.crd_cases import Case

_TERMS = "spec.amiSelectorTerms"
EC2NODECLASS_CEL = [
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"alias": "al2023"}]}},
        f"{_TERMS}[0].alias",
        "'alias' is improperly formatted, must match the format 'family@version'",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"alias": "ubuntu@latest"}], "amiFamily": "Custom"}},
        f"{_TERMS}[0].alias",
        "family is not supported",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"alias": "windows2022@v1"}]}},
        f"{_TERMS}[0].alias",
        "windows families may only specify version 'latest'",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"tags": {"team": ""}}], "amiFamily": "AL2023"}},
        f"{_TERMS}[0].tags",
        "empty tag keys or values aren't supported",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"owner": "self"}], "amiFamily": "AL2023"}},
        _TERMS,
        "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"id": "ami-123", "name": "x"}], "amiFamily": "AL2023"}},
        _TERMS,
        "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"alias": "al2023@latest", "owner": "self"}]}},
        _TERMS,
        "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}, {"id": "ami-123"}]}},
        _TERMS,
        "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"encrypted": True}}]}},
        "spec.blockDeviceMappings[0].ebs",
        "snapshotID or volumeSize must be defined",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"blockDeviceMappings": [{"ebs": {"volumeSize": "20Gi", "volumeInitializationRate": 200}}]}},
        "spec.blockDeviceMappings[0].ebs",
        "snapshotID must be set when volumeInitializationRate is set",
    ),
    Case(
        "EC2NodeClass",
        {
            "spec": {
                "blockDeviceMappings": [
                    {"rootVolume": True, "ebs": {"volumeSize": "20Gi"}},
                    {"rootVolume": True, "ebs": {"volumeSize": "20Gi"}},
                ]
            }
        },
        "spec.blockDeviceMappings",
        "must have only one blockDeviceMappings with rootVolume",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"capacityReservationSelectorTerms": [{"tags": {"": "x"}}]}},
        "spec.capacityReservationSelectorTerms[0].tags",
        "empty tag keys or values aren't supported",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"capacityReservationSelectorTerms": [{"ownerID": "123456789012"}]}},
        "spec.capacityReservationSelectorTerms",
        "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"capacityReservationSelectorTerms": [{"id": "cr-123", "tags": {"a": "b"}}]}},
        "spec.capacityReservationSelectorTerms",
        "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation "
        "selector term",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"role": None, "instanceProfile": ""}},
        "spec.instanceProfile",
        "instanceProfile cannot be empty",
    ),
    Case("EC2NodeClass", {"spec": {"role": ""}}, "spec.role", "role cannot be empty"),
    Case(
        "EC2NodeClass",
        {"spec": {"kubelet": {"evictionHard": {"memory.free": "5%"}}}},
        "spec.kubelet.evictionHard",
        "valid keys for evictionHard are",
    ),
    Case(
        "EC2NodeClass",
        {
            "spec": {
                "kubelet": {
                    "evictionSoft": {"memory.free": "5%"},
                    "evictionSoftGracePeriod": {"memory.free": "1m"},
                }
            }
        },
        "spec.kubelet.evictionSoft",
        "valid keys for evictionSoft are",
    ),
    Case(
        "EC2NodeClass",
        {
            "spec": {
                "kubelet": {
                    "evictionSoft": {"memory.available": "5%"},
                    "evictionSoftGracePeriod": {"memory.free": "1m"},
                }
            }
        },
        "spec.kubelet.evictionSoftGracePeriod",
        "valid keys for evictionSoftGracePeriod are",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"kubelet": {"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60}}},
        "spec.kubelet",
        "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
    ),
    Case(
        "EC2NodeClass",
        {
            "spec": {
                "kubelet": {
                    "evictionSoft": {"memory.available": "5%"},
                    "evictionSoftGracePeriod": {"nodefs.available": "1m"},
                }
            }
        },
        "spec.kubelet",
        "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
    ),
    Case(
        "EC2NodeClass",
        {
            "spec": {
                "kubelet": {
                    "evictionSoft": {"nodefs.available": "5%", "memory.available": "5%"},
                    "evictionSoftGracePeriod": {"nodefs.available": "1m", "imagefs.available": "1m"},
                }
            }
        },
        "spec.kubelet",
        "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"kubelet": {"kubeReserved": {"gpu": "1"}}}},
        "spec.kubelet.kubeReserved",
        "valid keys for kubeReserved are",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"kubelet": {"kubeReserved": {"cpu": "-1"}}}},
        "spec.kubelet.kubeReserved",
        "kubeReserved value cannot be a negative resource quantity",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"kubelet": {"systemReserved": {"gpu": "1"}}}},
        "spec.kubelet.systemReserved",
        "valid keys for systemReserved are",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"kubelet": {"systemReserved": {"memory": "-1Gi"}}}},
        "spec.kubelet.systemReserved",
        "systemReserved value cannot be a negative resource quantity",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"securityGroupSelectorTerms": []}},
        "spec.securityGroupSelectorTerms",
        "securityGroupSelectorTerms cannot be empty",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"securityGroupSelectorTerms": [{}]}},
        "spec.securityGroupSelectorTerms",
        "expected at least one, got none, ['tags', 'id', 'name']",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"securityGroupSelectorTerms": [{"id": "sg-1", "tags": {"a": "b"}}]}},
        "spec.securityGroupSelectorTerms",
        "'id' is mutually exclusive",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"securityGroupSelectorTerms": [{"name": "web", "tags": {"a": "b"}}]}},
        "spec.securityGroupSelectorTerms",
        "'name' is mutually exclusive",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"securityGroupSelectorTerms": [{"tags": {"a": ""}}]}},
        "spec.securityGroupSelectorTerms[0].tags",
        "empty tag keys or values aren't supported",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"subnetSelectorTerms": []}},
        "spec.subnetSelectorTerms",
        "subnetSelectorTerms cannot be empty",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"subnetSelectorTerms": [{}]}},
        "spec.subnetSelectorTerms",
        "expected at least one, got none, ['tags', 'id']",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"subnetSelectorTerms": [{"id": "subnet-1", "tags": {"a": "b"}}]}},
        "spec.subnetSelectorTerms",
        "'id' is mutually exclusive",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"subnetSelectorTerms": [{"tags": {"": "b"}}]}},
        "spec.subnetSelectorTerms[0].tags",
        "empty tag keys or values aren't supported",
    ),
    Case("EC2NodeClass", {"spec": {"tags": {"": "x"}}}, "spec.tags", "empty tag keys aren't supported"),
    Case(
        "EC2NodeClass",
        {"spec": {"tags": {"eks:eks-cluster-name": "x"}}},
        "spec.tags",
        "tag contains a restricted tag matching eks:eks-cluster-name",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"tags": {"kubernetes.io/cluster/demo": "owned"}}},
        "spec.tags",
        "tag contains a restricted tag matching kubernetes.io/cluster/",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"tags": {"karpenter.sh/nodepool": "x"}}},
        "spec.tags",
        "tag contains a restricted tag matching karpenter.sh/nodepool",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"tags": {"karpenter.sh/nodeclaim": "x"}}},
        "spec.tags",
        "tag contains a restricted tag matching karpenter.sh/nodeclaim",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"tags": {"karpenter.k8s.aws/ec2nodeclass": "x"}}},
        "spec.tags",
        "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"instanceProfile": "KarpenterNodeInstanceProfile"}},
        "spec",
        "must specify exactly one of ['role', 'instanceProfile']",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"alias": "al2@latest"}], "amiFamily": "AL2023"}},
        "spec",
        "if set, amiFamily must be 'AL2' or 'Custom' when using an AL2 alias",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiFamily": "AL2"}},
        "spec",
        "if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"alias": "bottlerocket@latest"}], "amiFamily": "AL2"}},
        "spec",
        "if set, amiFamily must be 'Bottlerocket' or 'Custom' when using a Bottlerocket alias",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"alias": "windows2019@latest"}], "amiFamily": "AL2"}},
        "spec",
        "if set, amiFamily must be 'Windows2019' or 'Custom' when using a Windows2019 alias",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"alias": "windows2022@latest"}], "amiFamily": "AL2"}},
        "spec",
        "if set, amiFamily must be 'Windows2022' or 'Custom' when using a Windows2022 alias",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"amiSelectorTerms": [{"id": "ami-123"}]}},
        "spec",
        "must specify amiFamily if amiSelectorTerms does not contain an alias",
    ),
]

EC2NODECLASS_SCHEMA = [
    Case("EC2NodeClass", {"spec": {"amiFamily": "Ubuntu"}}, "spec.amiFamily", "Unsupported value"),
    Case(
        "EC2NodeClass",
        {"spec": {"metadataOptions": {"httpPutResponseHopLimit": 65}}},
        "spec.metadataOptions.httpPutResponseHopLimit",
        "should be less than or equal to 64",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"blockDeviceMappings": [{"ebs": {"volumeSize": "100000Gi"}}]}},
        "spec.blockDeviceMappings[0].ebs.volumeSize",
        "should match",
    ),
    Case(
        "EC2NodeClass",
        {"spec": {"subnetSelectorTerms": [{"tags": {"a": "b"}}] * 31}},
        "spec.subnetSelectorTerms",
        "must have at most 30 items",
    ),
]
