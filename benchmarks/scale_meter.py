"""What the scale benchmark measures while a simulation runs: memory, and each Lambda pass's cost.

- The simulator's memory: its resident set sampled every tick (``VmRSS``), the peak and the last sample.
- Per pass (one invocation of a function): wall time; the rise of the process's peak resident set over
  the pass (``VmHWM``, reset before each pass through ``/proc/self/clear_refs``; the API servers share the
  process, so it is an upper bound); DynamoDB requests by kind, counted where moto answers them and
  attributed to the function running; and API server requests, from the audit counters of the function's
  own user. A nested pass (the watcher invoking the provisioner) counts inside its caller's wall time.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from serverless_karpenter_sim.simulation import Simulation

DYNAMODB_READS = frozenset({"GetItem", "Query", "BatchGetItem", "Scan", "TransactGetItems"})


def _status_kb(name: str) -> int:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(name):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_mb() -> float:
    return _status_kb("VmRSS:") / 1024


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


@dataclass
class PassStats:
    passes: int = 0
    wall_seconds: list[float] = field(default_factory=list)
    rss_rise_mb: list[float] = field(default_factory=list)
    dynamodb: Counter[str] = field(default_factory=Counter)
    api_requests: int = 0

    def summary(self) -> dict[str, Any]:
        n = max(1, self.passes)
        walls = sorted(self.wall_seconds) or [0.0]
        reads = sum(v for k, v in self.dynamodb.items() if k in DYNAMODB_READS)
        return {
            "passes": self.passes,
            "wall_seconds_mean": round(sum(walls) / len(walls), 3),
            "wall_seconds_p95": round(walls[min(len(walls) - 1, int(0.95 * len(walls)))], 3),
            "wall_seconds_max": round(walls[-1], 3),
            "rss_rise_mb_max": round(max(self.rss_rise_mb or [0.0]), 1),
            "dynamodb_reads_per_pass": round(reads / n, 1),
            "dynamodb_scans": self.dynamodb.get("Scan", 0),
            "dynamodb_by_operation": dict(sorted(self.dynamodb.items())),
            "api_requests_per_pass": round(self.api_requests / n, 1),
        }


class Meter:
    """Installed on one started simulation; ``tick`` samples memory (the simulation's ``on_tick``)."""

    def __init__(self, sim: Simulation, *, progress: bool = False) -> None:
        self.sim = sim
        self.progress = progress
        self.started = time.monotonic()
        # CPU time of the whole process (the API servers' threads included): on a host shared with other
        # runs, wall time varies several-fold, CPU time much less.
        self.cpu_started = time.process_time()
        self.ticks = 0
        self.rss_peak_mb = rss_mb()
        self.rss_last_mb = self.rss_peak_mb
        self.rss_samples: list[tuple[float, float]] = []  # (virtual seconds, MB), one a virtual minute
        self.stats: dict[str, PassStats] = {}
        self._invoke = sim.lambdas.invoke
        sim.lambdas.invoke = self._metered
        sim._on_tick = self.tick

    def tick(self, sim: Simulation) -> None:
        self.ticks += 1
        self.rss_last_mb = rss_mb()
        self.rss_peak_mb = max(self.rss_peak_mb, self.rss_last_mb)
        if not self.rss_samples or sim.elapsed - self.rss_samples[-1][0] >= 60:
            self.rss_samples.append((round(sim.elapsed), round(self.rss_last_mb, 1)))
            if self.progress:
                wall = time.monotonic() - self.started
                cpu = time.process_time() - self.cpu_started
                rss = self.rss_last_mb
                line = f"{sim.elapsed:.0f}s virtual, {wall:.0f}s wall, {cpu:.0f}s CPU, {rss:.0f} MB"
                print(line, file=sys.stderr)

    def _requests_of(self, name: str) -> int:
        return sum(self.sim.kube_server.audit.requests_of(self.sim.function_user(name)).values())

    def _metered(self, name: str, event: dict[str, Any]) -> Any:
        stats = self.stats.setdefault(name, PassStats())
        requests_before = self._requests_of(name)
        rss_before = rss_mb()
        measured_peak = _reset_peak()
        started = time.monotonic()
        try:
            return self._invoke(name, event)
        finally:
            stats.passes += 1
            stats.wall_seconds.append(time.monotonic() - started)
            if measured_peak:
                stats.rss_rise_mb.append(max(0.0, _status_kb("VmHWM:") / 1024 - rss_before))
            stats.api_requests += self._requests_of(name) - requests_before

    def count_dynamodb(self, operation: str) -> None:
        function = self.sim.faults.function
        if function is not None:
            self.stats.setdefault(function, PassStats()).dynamodb[operation] += 1

    def summary(self) -> dict[str, Any]:
        wall = time.monotonic() - self.started
        cpu = time.process_time() - self.cpu_started
        return {
            "wall_seconds": round(wall, 1),
            "cpu_seconds": round(cpu, 1),
            "cpu_ms_per_tick": round(1000 * cpu / max(1, self.ticks), 1),
            "virtual_seconds": round(self.sim.elapsed, 1),
            "ticks": self.ticks,
            "wall_ms_per_tick": round(1000 * wall / max(1, self.ticks), 1),
            "rss_peak_mb": round(self.rss_peak_mb, 1),
            "rss_final_mb": round(self.rss_last_mb, 1),
            "rss_per_minute_mb": [mb for _, mb in self.rss_samples],
            "passes": {name: s.summary() for name, s in sorted(self.stats.items())},
        }


@contextmanager
def dynamodb_counted(meter: Meter) -> Iterator[None]:
    """Count DynamoDB requests where moto answers them, for the function running at the time."""
    from moto.dynamodb.responses import DynamoHandler

    call_action = DynamoHandler.call_action
    own = "call_action" in vars(DynamoHandler)

    def counted(self: Any) -> Any:
        meter.count_dynamodb(str(self._get_action()))
        return call_action(self)

    DynamoHandler.call_action = counted  # type: ignore[method-assign]
    try:
        yield
    finally:
        if own:
            DynamoHandler.call_action = call_action  # type: ignore[method-assign]
        else:
            del DynamoHandler.call_action
