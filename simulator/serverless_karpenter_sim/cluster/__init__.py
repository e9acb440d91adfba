"""The simulated cluster actors: kubelets (with node lifecycle and pod GC), kube-scheduler and the workload
controllers. Each is stepped on virtual time by the simulator's loop and talks to the API server only over
HTTP, through the official ``kubernetes`` client."""

from serverless_karpenter_sim.cluster.controllers import ControllersReport, WorkloadControllers
from serverless_karpenter_sim.cluster.kubelet import (
    RUN_SECONDS_ANNOTATION,
    InMemoryInstances,
    InstanceSource,
    KubeletFleet,
    KubeletReport,
    NodeShape,
    NodeShapes,
    SimInstance,
    parse_user_data,
)
from serverless_karpenter_sim.cluster.scheduler import ClusterSnapshot, Scheduler, SchedulerReport

__all__ = [
    "RUN_SECONDS_ANNOTATION",
    "ClusterSnapshot",
    "ControllersReport",
    "InMemoryInstances",
    "InstanceSource",
    "KubeletFleet",
    "KubeletReport",
    "NodeShape",
    "NodeShapes",
    "Scheduler",
    "SchedulerReport",
    "SimInstance",
    "WorkloadControllers",
    "parse_user_data",
]
