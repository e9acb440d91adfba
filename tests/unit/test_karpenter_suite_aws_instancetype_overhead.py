"""Karpenter's AWS provider ``pkg/providers/instancetype/suite_test.go``, Context("Overhead"), in our
words: kube/system reserved, eviction thresholds, max pods, reserved ENIs and pods per core, as our
catalog resolves them for one type (``instancetype.NewInstanceType``).

Rows: docs/compat/aws-instancetype.md."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from serverless_karpenter.catalog import (
    InstanceTypeInfo,
    ProviderOptions,
    load_bundled_catalog,
)
from serverless_karpenter.scheduling import resources

from tests.unit.karpenter_suite_helpers_selection_aws import (
    REGION,
    all_infos,
    q,
    resolve,
)

# -- Overhead -------------------------------------------------------------------------------------------

M5_XLARGE = "m5.xlarge"


def test_system_reserved_defaults_to_nothing() -> None:
    """InstanceTypeProvider > Overhead > System Reserved Resources > should use defaults when no kubelet is
    specified"""
    reserved = resolve(M5_XLARGE).overhead.system_reserved
    assert all(
        reserved.get(r, 0) == 0 for r in (resources.CPU, resources.MEMORY, resources.EPHEMERAL_STORAGE)
    )


def test_system_reserved_overrides() -> None:
    """InstanceTypeProvider > Overhead > System Reserved Resources > should override system reserved cpus
    when specified"""
    kubelet = {"systemReserved": {"cpu": "2", "memory": "20Gi", "ephemeral-storage": "10Gi"}}
    assert resolve(M5_XLARGE, kubelet).overhead.system_reserved == {
        resources.CPU: 2000,
        resources.MEMORY: q("memory", "20Gi"),
        resources.EPHEMERAL_STORAGE: q("ephemeral-storage", "10Gi"),
    }


def test_kube_reserved_defaults() -> None:
    """InstanceTypeProvider > Overhead > Kube Reserved Resources > should use defaults when no kubelet is
    specified: 80m, 893Mi (11 x 58 ENI pods + 255), 1Gi"""
    assert resolve(M5_XLARGE).overhead.kube_reserved == {
        resources.CPU: 80,
        resources.MEMORY: q("memory", "893Mi"),
        resources.EPHEMERAL_STORAGE: q("ephemeral-storage", "1Gi"),
    }


def test_kube_reserved_overrides() -> None:
    """InstanceTypeProvider > Overhead > Kube Reserved Resources > should override kube reserved when
    specified"""
    kubelet = {
        "systemReserved": {"cpu": "1", "memory": "20Gi", "ephemeral-storage": "1Gi"},
        "kubeReserved": {"cpu": "2", "memory": "10Gi", "ephemeral-storage": "2Gi"},
    }
    assert resolve(M5_XLARGE, kubelet).overhead.kube_reserved == {
        resources.CPU: 2000,
        resources.MEMORY: q("memory", "10Gi"),
        resources.EPHEMERAL_STORAGE: q("ephemeral-storage", "2Gi"),
    }


# The Eviction Thresholds context runs with no VM memory overhead.
NO_VM_OVERHEAD = ProviderOptions(vm_memory_overhead_percent=0)
RESERVED = {"systemReserved": {"memory": "20Gi"}, "kubeReserved": {"memory": "10Gi"}}


def _eviction_memory(kubelet: Mapping[str, Any], family: str = "AL2023") -> tuple[int, int]:
    """(memory eviction threshold, memory capacity)."""
    it = resolve(M5_XLARGE, {**RESERVED, **kubelet}, family, options=NO_VM_OVERHEAD)
    return it.overhead.eviction_threshold[resources.MEMORY], it.capacity[resources.MEMORY]


def test_eviction_hard_quantity() -> None:
    """InstanceTypeProvider > Overhead > Eviction Thresholds > Eviction Hard > should override eviction
    threshold when specified as a quantity"""
    assert _eviction_memory({"evictionHard": {"memory.available": "500Mi"}})[0] == q("memory", "500Mi")


def test_eviction_hard_percentage() -> None:
    """InstanceTypeProvider > Overhead > Eviction Thresholds > Eviction Hard > should override eviction
    threshold when specified as a percentage value"""
    threshold, capacity = _eviction_memory({"evictionHard": {"memory.available": "10%"}})
    assert threshold == pytest.approx(capacity * 0.1, abs=10)


def test_eviction_hard_100_percent_disables() -> None:
    """InstanceTypeProvider > Overhead > Eviction Thresholds > Eviction Hard > should consider the eviction
    threshold disabled when specified as 100%"""
    assert _eviction_memory({"evictionHard": {"memory.available": "100%"}})[0] == 0


def test_eviction_default_memory_without_eviction_hard() -> None:
    """InstanceTypeProvider > Overhead > Eviction Thresholds > Eviction Hard > should used default eviction
    threshold for memory when evictionHard not specified"""
    assert _eviction_memory({"evictionSoft": {"memory.available": "50Mi"}})[0] == q("memory", "100Mi")


def test_eviction_soft_alone_keeps_the_default() -> None:
    """InstanceTypeProvider > Overhead > Eviction Thresholds > Eviction Soft > should use default threshold
    when only evictionSoft is specified"""
    assert _eviction_memory({"evictionSoft": {"memory.available": "500Mi"}})[0] == q("memory", "100Mi")


def test_eviction_hard_percentage_wins_over_soft_percentage() -> None:
    """InstanceTypeProvider > Overhead > Eviction Thresholds > Eviction Soft > should use evictionHard
    percentage and ignore evictionSoft percentage"""
    threshold, capacity = _eviction_memory(
        {"evictionHard": {"memory.available": "5%"}, "evictionSoft": {"memory.available": "10%"}}
    )
    assert threshold == pytest.approx(capacity * 0.05, abs=10)


def test_eviction_soft_100_percent_is_ignored() -> None:
    """InstanceTypeProvider > Overhead > Eviction Thresholds > Eviction Soft > should use default threshold
    when evictionSoft is 100% (ignored)"""
    assert _eviction_memory({"evictionSoft": {"memory.available": "100%"}})[0] == q("memory", "100Mi")


def test_eviction_on_bottlerocket_uses_eviction_hard() -> None:
    """InstanceTypeProvider > Overhead > Eviction Thresholds > Eviction Soft > should ignore eviction
    threshold when using Bottlerocket AMI (evictionSoft is ignored; evictionHard counts)"""
    kubelet = {"evictionHard": {"memory.available": "1Gi"}, "evictionSoft": {"memory.available": "10Gi"}}
    assert _eviction_memory(kubelet, "Bottlerocket")[0] == q("memory", "1Gi")


def test_eviction_defaults() -> None:
    """InstanceTypeProvider > Overhead > Eviction Thresholds > should take the default eviction threshold
    when none is specified: no cpu, 100Mi memory, 10% of the 20Gi root volume"""
    threshold = resolve(M5_XLARGE, options=NO_VM_OVERHEAD).overhead.eviction_threshold
    assert threshold.get(resources.CPU, 0) == 0
    assert threshold[resources.MEMORY] == q("memory", "100Mi")
    assert threshold[resources.EPHEMERAL_STORAGE] == pytest.approx(q("ephemeral-storage", "2Gi"), abs=1)


def test_eviction_hard_quantity_wins_over_soft_quantity() -> None:
    """InstanceTypeProvider > Overhead > Eviction Thresholds > should use only evictionHard for overhead,
    ignoring evictionSoft"""
    kubelet = {"evictionSoft": {"memory.available": "3Gi"}, "evictionHard": {"memory.available": "1Gi"}}
    assert _eviction_memory(kubelet)[0] == q("memory", "1Gi")


def test_eviction_hard_percentage_wins_over_a_smaller_soft_percentage() -> None:
    """InstanceTypeProvider > Overhead > Eviction Thresholds > should use only evictionHard percentage for
    overhead, ignoring evictionSoft"""
    threshold, capacity = _eviction_memory(
        {"evictionSoft": {"memory.available": "2%"}, "evictionHard": {"memory.available": "5%"}}
    )
    assert threshold == pytest.approx(capacity * 0.05, abs=10)


def test_eviction_hard_quantity_wins_over_soft_percentage() -> None:
    """InstanceTypeProvider > Overhead > Eviction Thresholds > should use only evictionHard value with mixed
    percentage/value types"""
    kubelet = {"evictionSoft": {"memory.available": "10%"}, "evictionHard": {"memory.available": "1Gi"}}
    assert _eviction_memory(kubelet)[0] == q("memory", "1Gi")


def test_max_pods_default_from_network_interfaces() -> None:
    """InstanceTypeProvider > Overhead > should default max pods based off of network interfaces"""
    assert resolve("t3.large").capacity[resources.PODS] == 35
    assert resolve("m6idn.32xlarge").capacity[resources.PODS] == 394


def test_max_pods_user_defined() -> None:
    """InstanceTypeProvider > Overhead > should set max-pods to user-defined value if specified"""
    assert {resolve(i.name, {"maxPods": 10}).capacity[resources.PODS] for i in all_infos()} == {10}


# (alias family, pods, kube-reserved memory) for t3.large: 3 ENIs x 12 IPs.
MAX_PODS_10 = [
    ("AL2", 10, "640Mi"),  # 11 x 35 (ENI pods) + 255
    ("AL2023", 10, "640Mi"),
    ("Bottlerocket", 10, "365Mi"),  # 11 x 10 + 255
    ("Windows2019", 10, "365Mi"),
    ("Windows2022", 10, "365Mi"),
    ("Windows2025", 10, "365Mi"),
    ("Custom", 10, "640Mi"),
]
ENTRY_IDS = ["al2 (latest)", "al2023 (latest)", "bottlerocket (latest)", "windows2019 (latest)"]
ENTRY_IDS += ["windows2022 (latest)", "windows2025 (latest)", "custom"]


@pytest.mark.parametrize(("family", "pods", "memory"), MAX_PODS_10, ids=ENTRY_IDS)
def test_max_pods_user_defined_per_family(family: str, pods: int, memory: str) -> None:
    """InstanceTypeProvider > Overhead > should set max-pods to user-defined value if specified (table):
    maxPods 10 on t3.large; kube-reserved memory follows ENI pods where the family says so."""
    it = resolve("t3.large", {"maxPods": 10}, family)
    assert it.capacity[resources.PODS] == pods
    assert it.overhead.kube_reserved[resources.MEMORY] == q("memory", memory)


def test_max_pods_override() -> None:
    """InstanceTypeProvider > Overhead > should override max-pods value"""
    assert {resolve(i.name, {"maxPods": 10}).capacity[resources.PODS] for i in all_infos()} == {10}


ONE_RESERVED_ENI = ProviderOptions(reserved_enis=1)
RESERVED_ENIS = [
    ("AL2", 24, "640Mi"),  # 2 x 11 + 2 pods; memory from the unreserved 35
    ("AL2023", 24, "640Mi"),
    ("Bottlerocket", 24, "519Mi"),  # 11 x 24 + 255
    ("Windows2019", 110, "1465Mi"),  # 11 x 110 + 255
    ("Windows2022", 110, "1465Mi"),
    ("Windows2025", 110, "1465Mi"),
    ("Custom", 24, "640Mi"),
]


@pytest.mark.parametrize(("family", "pods", "memory"), RESERVED_ENIS, ids=ENTRY_IDS)
def test_reserved_enis_in_max_pods(family: str, pods: int, memory: str) -> None:
    """InstanceTypeProvider > Overhead > should reserve ENIs when aws.reservedENIs is set and use it in
    max-pods calculation"""
    it = resolve("t3.large", family=family, options=ONE_RESERVED_ENI)
    assert it.capacity[resources.PODS] == pods
    assert it.overhead.kube_reserved[resources.MEMORY] == q("memory", memory)


def test_reserved_enis_never_below_zero() -> None:
    """InstanceTypeProvider > Overhead > should reserve ENIs when aws.reservedENIs is set and not go below 0
    ENIs in max-pods calculation"""
    it = resolve("t3.large", options=ProviderOptions(reserved_enis=1_000_000))
    assert it.capacity[resources.PODS] == 0


def _eni_pods(i: InstanceTypeInfo) -> int:
    return resolve(i.name).capacity[resources.PODS]


def test_pods_per_core() -> None:
    """InstanceTypeProvider > Overhead > should override pods-per-core value"""
    for i in all_infos():
        assert resolve(i.name, {"podsPerCore": 1}).capacity[resources.PODS] == min(i.vcpus, _eni_pods(i)), (
            i.name
        )


def test_pods_per_core_and_max_pods_take_the_minimum() -> None:
    """InstanceTypeProvider > Overhead > should take the minimum of pods-per-core and max-pods"""
    for i in all_infos():
        pods = resolve(i.name, {"podsPerCore": 4, "maxPods": 20}).capacity[resources.PODS]
        assert pods == min(20, i.vcpus * 4), i.name


def test_bottlerocket_ignores_pods_per_core() -> None:
    """InstanceTypeProvider > Overhead > should ignore pods-per-core when using Bottlerocket AMI"""
    for i in all_infos():
        pods = resolve(i.name, {"podsPerCore": 1}, "Bottlerocket").capacity[resources.PODS]
        assert pods == resolve(i.name, family="Bottlerocket").capacity[resources.PODS], i.name


def test_pods_per_core_zero_keeps_eni_density() -> None:
    """InstanceTypeProvider > Overhead > should take limited pod density to be the default pods number when
    pods-per-core is 0"""
    assert resolve("t3.large", {"podsPerCore": 0}).capacity[resources.PODS] == 35
    assert resolve("m6idn.32xlarge", {"podsPerCore": 0}).capacity[resources.PODS] == 394


def test_allocatable_never_exceeds_what_the_kubelet_reports() -> None:
    """InstanceTypeProvider > Overhead > shouldn't report more resources than are actually available on
    instances (the kubelet's reported allocatable, from Karpenter's test)"""
    reported = {
        "t4g.small": ("1408312Ki", "1930m"),
        "t4g.medium": ("3377496Ki", "1930m"),
        "t4g.xlarge": ("15136012Ki", "3920m"),
        "m5.large": ("7220184Ki", "1930m"),
    }
    catalog = load_bundled_catalog(REGION)
    for name, (memory, cpu) in reported.items():
        allocatable = catalog[name].allocatable
        assert allocatable[resources.MEMORY] <= q("memory", memory), name
        assert allocatable[resources.CPU] <= q("cpu", cpu), name
