"""The host's speed, as every benchmark page states it beside its figures: hosts differ about 2x."""

from __future__ import annotations

import time


def host_loop_seconds() -> float:
    """Seconds for ``sum(i*i for i in range(10**7))`` on this host, rounded to the millisecond."""
    started = time.perf_counter()
    sum(i * i for i in range(10**7))
    return round(time.perf_counter() - started, 3)
