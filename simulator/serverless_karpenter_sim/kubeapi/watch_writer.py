"""A watch stream's writes, on a thread of their own.

The driver lets every watch catch up before a client's turn (``watches.py``): a stream has caught up once
it has taken every event up to the store's resourceVersion. Written by the stream's own thread, a burst
larger than the socket's buffers (10,000 pods created in one tick, at 1,000 nodes) blocked that thread in
its write until the client read, and the client reads only on its turn, after the settle: a deadlock that
only large clusters hit. The stream therefore hands its chunks to this writer, which sends them in order
while the stream goes on taking events; the client then reads what it was told was sent, as it arrives.
What is queued is held until the client reads it, as a real server's send buffers hold it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable


class ChunkWriter:
    def __init__(self, write: Callable[[bytes], object]) -> None:
        self._write = write
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pending = 0  # chunks queued or being written
        self.failed = False  # a write failed: the client is gone
        self._thread = threading.Thread(target=self._run, name="kubeapi-watch-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (data := self._queue.get()) is not None:
            if not self.failed:
                try:
                    self._write(data)
                except OSError:
                    self.failed = True
            with self._lock:
                self._pending -= 1

    def put(self, data: bytes) -> None:
        with self._lock:
            self._pending += 1
        self._queue.put(data)

    @property
    def idle(self) -> bool:
        """Nothing queued or being written: the connection may be looked at from the stream's thread."""
        with self._lock:
            return self._pending == 0

    def close(self) -> None:
        """Send what is queued (or fail to), then stop; again, nothing."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
