"""Label, annotation, taint and tag names, with Karpenter v1's meanings."""

from __future__ import annotations

# Kubernetes well-known labels.
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ARCH = "kubernetes.io/arch"
OS = "kubernetes.io/os"
WINDOWS_BUILD = "node.kubernetes.io/windows-build"

# karpenter.sh
GROUP = "karpenter.sh"
NODEPOOL = "karpenter.sh/nodepool"
NODECLAIM = "karpenter.sh/nodeclaim"  # an instance tag, not a node label
CAPACITY_TYPE = "karpenter.sh/capacity-type"
REGISTERED = "karpenter.sh/registered"
INITIALIZED = "karpenter.sh/initialized"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
NODEPOOL_HASH = "karpenter.sh/nodepool-hash"
NODEPOOL_HASH_VERSION = "karpenter.sh/nodepool-hash-version"
TERMINATION_FINALIZER = "karpenter.sh/termination"
UNREGISTERED_TAINT_KEY = "karpenter.sh/unregistered"
DISRUPTED_TAINT_KEY = "karpenter.sh/disrupted"
EXCLUDE_FROM_LB = "node.kubernetes.io/exclude-from-external-load-balancers"

CAPACITY_TYPE_SPOT = "spot"
CAPACITY_TYPE_ON_DEMAND = "on-demand"
CAPACITY_TYPE_RESERVED = "reserved"
CAPACITY_TYPES = (CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT, CAPACITY_TYPE_ON_DEMAND)

# karpenter.k8s.aws
AWS_GROUP = "karpenter.k8s.aws"
EC2NODECLASS = "karpenter.k8s.aws/ec2nodeclass"
EC2NODECLASS_HASH = "karpenter.k8s.aws/ec2nodeclass-hash"
EC2NODECLASS_HASH_VERSION = "karpenter.k8s.aws/ec2nodeclass-hash-version"
INSTANCE_CATEGORY = "karpenter.k8s.aws/instance-category"
INSTANCE_FAMILY = "karpenter.k8s.aws/instance-family"
INSTANCE_GENERATION = "karpenter.k8s.aws/instance-generation"
INSTANCE_SIZE = "karpenter.k8s.aws/instance-size"
INSTANCE_CPU = "karpenter.k8s.aws/instance-cpu"
INSTANCE_CPU_MANUFACTURER = "karpenter.k8s.aws/instance-cpu-manufacturer"
INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ = "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz"
INSTANCE_MEMORY = "karpenter.k8s.aws/instance-memory"
INSTANCE_EBS_BANDWIDTH = "karpenter.k8s.aws/instance-ebs-bandwidth"
INSTANCE_NETWORK_BANDWIDTH = "karpenter.k8s.aws/instance-network-bandwidth"
INSTANCE_HYPERVISOR = "karpenter.k8s.aws/instance-hypervisor"
INSTANCE_ENCRYPTION_IN_TRANSIT = "karpenter.k8s.aws/instance-encryption-in-transit-supported"
INSTANCE_GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
INSTANCE_GPU_MANUFACTURER = "karpenter.k8s.aws/instance-gpu-manufacturer"
INSTANCE_GPU_COUNT = "karpenter.k8s.aws/instance-gpu-count"
INSTANCE_GPU_MEMORY = "karpenter.k8s.aws/instance-gpu-memory"
INSTANCE_ACCELERATOR_NAME = "karpenter.k8s.aws/instance-accelerator-name"
INSTANCE_ACCELERATOR_MANUFACTURER = "karpenter.k8s.aws/instance-accelerator-manufacturer"
INSTANCE_ACCELERATOR_COUNT = "karpenter.k8s.aws/instance-accelerator-count"
INSTANCE_LOCAL_NVME = "karpenter.k8s.aws/instance-local-nvme"
INSTANCE_CAPABILITY_FLEX = "karpenter.k8s.aws/instance-capability-flex"
ZONE_ID = "topology.k8s.aws/zone-id"
CAPACITY_RESERVATION_ID = "karpenter.k8s.aws/capacity-reservation-id"

# Labels a NodePool may require or set, which the provider fills in per instance type and offering.
WELL_KNOWN_LABELS = frozenset(
    {
        NODEPOOL,
        ZONE,
        REGION,
        INSTANCE_TYPE,
        ARCH,
        OS,
        WINDOWS_BUILD,
        CAPACITY_TYPE,
        INSTANCE_CATEGORY,
        INSTANCE_FAMILY,
        INSTANCE_GENERATION,
        INSTANCE_SIZE,
        INSTANCE_CPU,
        INSTANCE_CPU_MANUFACTURER,
        INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
        INSTANCE_MEMORY,
        INSTANCE_EBS_BANDWIDTH,
        INSTANCE_NETWORK_BANDWIDTH,
        INSTANCE_HYPERVISOR,
        INSTANCE_ENCRYPTION_IN_TRANSIT,
        INSTANCE_GPU_NAME,
        INSTANCE_GPU_MANUFACTURER,
        INSTANCE_GPU_COUNT,
        INSTANCE_GPU_MEMORY,
        INSTANCE_ACCELERATOR_NAME,
        INSTANCE_ACCELERATOR_MANUFACTURER,
        INSTANCE_ACCELERATOR_COUNT,
        INSTANCE_LOCAL_NVME,
        INSTANCE_CAPABILITY_FLEX,
        ZONE_ID,
        CAPACITY_RESERVATION_ID,
        EC2NODECLASS,
    }
)

# Label domains Karpenter refuses in NodePool labels and requirements, except for the well-known
# labels above and the sub-domains listed as allowed.
RESTRICTED_LABEL_DOMAINS = frozenset({"kubernetes.io", "k8s.io", "karpenter.sh", "karpenter.k8s.aws"})
ALLOWED_LABEL_DOMAINS = frozenset({"kops.k8s.io", "node.kubernetes.io", "node-restriction.kubernetes.io"})
# Labels nobody may set, even though their domain is otherwise allowed.
RESTRICTED_LABELS = frozenset({HOSTNAME, "kubernetes.io/hostname", REGISTERED, INITIALIZED})

# EC2 tags on everything we launch.
TAG_CLUSTER_PREFIX = "kubernetes.io/cluster/"
TAG_EKS_CLUSTER_NAME = "eks:eks-cluster-name"
TAG_NAME = "Name"


def label_domain(key: str) -> str:
    return key.split("/", 1)[0] if "/" in key else ""


def is_restricted_label(key: str) -> str | None:
    """Why ``key`` may not be used in a NodePool's labels or requirements, or None when it may."""
    if key in WELL_KNOWN_LABELS:
        return None
    if key in RESTRICTED_LABELS:
        return f"label {key!r} is restricted"
    domain = label_domain(key)
    for allowed in ALLOWED_LABEL_DOMAINS:
        if domain == allowed or domain.endswith("." + allowed):
            return None
    for restricted in RESTRICTED_LABEL_DOMAINS:
        if domain == restricted or domain.endswith("." + restricted):
            return f"label domain {restricted!r} is restricted"
    return None
