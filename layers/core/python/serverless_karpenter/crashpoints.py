"""Named points where tests and fault scenarios can make the control plane crash.

A crash point does nothing unless armed; armed, it raises :class:`InjectedCrash` as if the Lambda had
died there (out of memory, timeout, a kill). Recovery code must make such a crash harmless.
"""

from __future__ import annotations

import threading
from collections import Counter

AFTER_NODECLAIM_WRITE = "provisioner.after_nodeclaim_write"
AFTER_CREATE_FLEET = "provisioner.after_create_fleet"
MID_DRAIN = "termination.mid_drain"


class InjectedCrash(BaseException):
    """BaseException, so that no ``except Exception`` in the code under test swallows it."""


_lock = threading.Lock()
_armed: Counter[str] = Counter()
hits: Counter[str] = Counter()


def arm(name: str, times: int = 1) -> None:
    with _lock:
        _armed[name] += times


def disarm_all() -> None:
    with _lock:
        _armed.clear()


def hit(name: str) -> None:
    with _lock:
        if _armed[name] <= 0:
            return
        _armed[name] -= 1
        hits[name] += 1
    raise InjectedCrash(name)
