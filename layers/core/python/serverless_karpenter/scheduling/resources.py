"""Resource lists in canonical integer units.

Quantities are parsed once, with the kubernetes client's parser, into integers: cpu in millicores,
everything else in base units (bytes for memory and storage, a count for pods and extended resources).
Integers keep the hot paths of the solver cheap and exact.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from decimal import ROUND_CEILING, Decimal

from kubernetes.utils.quantity import parse_quantity

ResourceList = dict[str, int]

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
EPHEMERAL_STORAGE = "ephemeral-storage"
POD_ENI = "vpc.amazonaws.com/pod-eni"
NVIDIA_GPU = "nvidia.com/gpu"
AMD_GPU = "amd.com/gpu"
AWS_NEURON = "aws.amazon.com/neuron"
AWS_NEURON_CORE = "aws.amazon.com/neuroncore"
EFA = "vpc.amazonaws.com/efa"
HABANA_GAUDI = "habana.ai/gaudi"
# Karpenter's resources.Node: a NodePool's ``limits.nodes``; every node (and NodeClaim) counts 1.
NODES = "nodes"

_MILLI_RESOURCES = frozenset({CPU})
_BINARY_UNITS = (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10))


def parse(name: str, quantity: str | int | float) -> int:
    """Parse one quantity for ``name`` into its canonical integer (rounded up, as the kubelet does)."""
    if isinstance(quantity, str | int | float):
        return _parse_cached(name, quantity)
    return _parse(name, quantity)  # malformed (a list, a map): the parser's own error names it


# Pods of one workload repeat the same few quantities thousands of times, and Decimal parsing is most
# of what reading a pod's requests costs.
@functools.lru_cache(maxsize=4096)
def _parse_cached(name: str, quantity: str | int | float) -> int:
    return _parse(name, quantity)


def _parse(name: str, quantity: str | int | float) -> int:
    value: Decimal = parse_quantity(quantity)
    if name in _MILLI_RESOURCES:
        value = value * 1000
    return int(value.to_integral_value(rounding=ROUND_CEILING))


def parse_list(quantities: Mapping[str, str | int | float] | None) -> ResourceList:
    return {name: parse(name, q) for name, q in (quantities or {}).items()}


def merge(*lists: Mapping[str, int]) -> ResourceList:
    """The sum of the lists."""
    out: ResourceList = {}
    for rl in lists:
        for name, v in rl.items():
            out[name] = out.get(name, 0) + v
    return out


def subtract(a: Mapping[str, int], b: Mapping[str, int]) -> ResourceList:
    out = dict(a)
    for name, v in b.items():
        out[name] = out.get(name, 0) - v
    return out


def maximum(lists: Iterable[Mapping[str, int]]) -> ResourceList:
    """The per-resource maximum of the lists."""
    out: ResourceList = {}
    for rl in lists:
        for name, v in rl.items():
            if v > out.get(name, 0):
                out[name] = v
    return out


def minimum(lists: Iterable[Mapping[str, int]]) -> ResourceList:
    """The per-resource minimum of the lists, an absent resource counting as 0 (so only what every list
    names is left)."""
    lists = list(lists)
    if not lists:
        return {}
    names = set(lists[0]).intersection(*lists[1:])
    return {name: min(rl[name] for rl in lists) for name in names if min(rl[name] for rl in lists) > 0}


def exceeded(requests: Mapping[str, int], available: Mapping[str, int]) -> list[str]:
    """The resources whose request is more than is available (an absent resource counts as 0)."""
    return [name for name, v in requests.items() if v > 0 and v > available.get(name, 0)]


def fits(requests: Mapping[str, int], available: Mapping[str, int]) -> bool:
    return not exceeded(requests, available)


def format_quantity(name: str, value: int) -> str:
    """Render a canonical value the way kubectl users read it: 3310m, 3344Mi, 2."""
    if name in _MILLI_RESOURCES:
        return f"{value // 1000}" if value % 1000 == 0 else f"{value}m"
    if name in (MEMORY, EPHEMERAL_STORAGE) or name.startswith("hugepages-"):
        for suffix, size in _BINARY_UNITS:
            if value >= size and value % size == 0:
                return f"{value // size}{suffix}"
        if value >= 1 << 20:
            return f"{-(-value // (1 << 20))}Mi"
        return str(value)
    return str(value)


def format_list(rl: Mapping[str, int]) -> str:
    """``cpu=3310m memory=3344Mi pods=1``, in a stable order (cpu, memory, then by name)."""
    order = {CPU: 0, MEMORY: 1}
    names = sorted(rl, key=lambda n: (order.get(n, 2), n))
    return " ".join(f"{n}={format_quantity(n, rl[n])}" for n in names if rl[n])
