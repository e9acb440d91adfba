"""Host ports: two pods that bind the same port, protocol and host IP cannot share a node."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

HostPort = tuple[str, str, int]  # (protocol, host IP, port)

_ANY_IP = "0.0.0.0"


def host_ports(pod: Mapping[str, Any]) -> frozenset[HostPort]:
    spec = pod.get("spec") or {}
    out: set[HostPort] = set()
    for container in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]:
        for port in container.get("ports") or ():
            number = port.get("hostPort")
            if number:
                out.add((port.get("protocol") or "TCP", port.get("hostIP") or _ANY_IP, int(number)))
    return frozenset(out)


def conflict(wanted: Iterable[HostPort], used: Iterable[HostPort]) -> HostPort | None:
    """The first wanted port already taken; an unspecified host IP clashes with every IP (kube-scheduler)."""
    taken = list(used)
    if not taken:
        return None
    for protocol, ip, port in wanted:
        for other_protocol, other_ip, other_port in taken:
            if (
                port == other_port
                and protocol == other_protocol
                and (ip == other_ip or _ANY_IP in (ip, other_ip))
            ):
                return (protocol, ip, port)
    return None


def describe(port: HostPort) -> str:
    protocol, ip, number = port
    return f"hostPort {number}/{protocol}" + ("" if ip == _ANY_IP else f" on {ip}")
