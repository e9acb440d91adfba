"""The open watches of the simulated API server, as the simulation's driver sees them (not a client API).

The simulation runs its components in turns on a virtual clock, and a watcher reads a watch stream that
another thread of this server writes. For a turn to see the same events whatever the threads' timing,
the driver first lets every watch catch up (:meth:`WatchRegistry.settle`: each stream has written all it
has to write up to the store's current resourceVersion and the clock's current time, bookmarks and the
end of a timed-out watch included), then tells the client how many lines each stream has written, by the
``Audit-Id`` header that kube-apiserver puts on every response. The client then reads exactly those,
with no wait on the wall clock.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import Store

_SETTLE_POLL_SECONDS = 0.02
_ENDED_KEPT = 256
_ENDED_KEPT_FOR = timedelta(minutes=1)


@dataclass
class WatchStream:
    audit_id: str
    user: str
    resource: str
    lines: int = 0  # event lines committed to the stream (bookmarks, ERRORs included); the write may lag
    cursor: int = 0  # every event up to this resourceVersion has been considered
    checked: datetime | None = None  # the virtual time at which it last looked at its deadline
    done: bool = False  # ended (timed out, errored, or cut): the terminating chunk is written
    ended_at: datetime | None = None  # virtual time


@dataclass(frozen=True)
class WatchProgress:
    lines: int
    done: bool


class WatchRegistry:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Condition()
        self._open: dict[str, WatchStream] = {}
        # Ended streams stay listed for a virtual minute, so a client learns that its stream ended even if
        # its next turn comes late or fails.
        self._ended: dict[str, WatchStream] = {}

    def open(self, audit_id: str, user: str, resource: str) -> WatchStream:
        stream = WatchStream(audit_id, user, resource)
        with self._lock:
            self._open[audit_id] = stream
        return stream

    def sent(self, stream: WatchStream, lines: int, *, cursor: int, checked: datetime | None) -> None:
        with self._lock:
            stream.lines += lines
            stream.cursor = max(stream.cursor, cursor)
            if checked is not None:
                stream.checked = checked
            self._lock.notify_all()

    def close(self, stream: WatchStream) -> None:
        ended_at = self._store.clock.now()
        with self._lock:
            stream.done = True
            stream.ended_at = ended_at
            self._open.pop(stream.audit_id, None)
            self._ended[stream.audit_id] = stream
            while len(self._ended) > _ENDED_KEPT:  # nobody settles (a test's own watches): forget the oldest
                del self._ended[next(iter(self._ended))]
            self._lock.notify_all()

    def settle(self, user: str | None = None, timeout: float = 10.0) -> dict[str, WatchProgress]:
        """Wait until the watches (of users whose name contains ``user``) have written everything up to
        now; what each has written. Raises TimeoutError when a watch makes no progress for ``timeout``
        seconds of wall time: one still writing a burst (5,000 pods created in a tick, on a loaded host)
        is waited for, one that hangs is not."""
        resource_version = self._store.resource_version
        now = self._store.clock.now()
        give_up = time.monotonic() + timeout
        last_progress: object = None
        while True:
            self._store.poke()  # a waiting stream wakes up and looks at the store and the clock again
            with self._lock:
                streams = [
                    s for s in (*self._open.values(), *self._ended.values()) if user is None or user in s.user
                ]
                behind = [
                    s
                    for s in streams
                    if not s.done and (s.cursor < resource_version or s.checked is None or s.checked < now)
                ]
                if not behind:
                    for s in list(self._ended.values()):
                        if s.ended_at is not None and now - s.ended_at > _ENDED_KEPT_FOR:
                            del self._ended[s.audit_id]
                    return {s.audit_id: WatchProgress(s.lines, s.done) for s in streams}
                progress = [(b.audit_id, b.cursor, b.lines, b.checked) for b in behind]
                if progress != last_progress:
                    last_progress = progress
                    give_up = time.monotonic() + timeout
                remaining = give_up - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"watches did not catch up: {[s.audit_id for s in behind]}")
                self._lock.wait(min(remaining, _SETTLE_POLL_SECONDS))
