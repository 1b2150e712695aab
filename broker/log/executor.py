"""The storage executor: where a data directory's disk I/O runs, so the broker's event loop never waits on it.

Every append, read, truncation, leader-epoch checkpoint and high-watermark checkpoint of the partitions in
one data directory runs here (``LogManager`` owns one per directory). Two needs pull in opposite directions:

* per-partition order: a follower's appends, its truncation and the leader-epoch assignment of a new
  leadership must happen in the order the event loop decided them;
* no head-of-line blocking: a topic with ``flush.messages=1`` fsyncs on every append, and a single thread per
  directory would make every other partition's append wait behind those fsyncs.

So work is queued per key (a partition) and the queues are drained by a small thread pool: one key is never
run by two threads at once (order), different keys run side by side (isolation). A drain runs at most
``BURST`` jobs of one key before going to the back of the pool's queue, so a partition produced at full speed
cannot hold a thread forever. Keyless work (reads: they take a snapshot and need no order) goes straight to
the pool. The threads mostly sit in ``pwrite``/``pread``/``fsync``, which release the GIL.

Callers on the loop ``await run(key, fn, *args)``: one hop per request, whatever it carries.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

BURST = 16
DEFAULT_THREADS = 8

_Job = tuple[Callable[..., Any], tuple[Any, ...], "Future[Any]"]


class StorageExecutor:
    """Per-key serial queues on a shared thread pool; see the module docstring."""

    def __init__(self, name: str = "odradek-storage", threads: int = DEFAULT_THREADS) -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name)
        self._lock = threading.Lock()
        self._queues: dict[Hashable, deque[_Job]] = {}  # a key is present while a drain owns it
        self._closed = False

    def submit(self, key: Hashable | None, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Run ``fn(*args)`` after every job submitted earlier with the same ``key`` (any order if None)."""
        if key is None:
            return self._pool.submit(fn, *args)
        fut: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the storage executor is shut down")
            queue = self._queues.get(key)
            if queue is not None:
                queue.append((fn, args, fut))
                return fut
            self._queues[key] = deque([(fn, args, fut)])
        self._pool.submit(self._drain, key)
        return fut

    async def run(self, key: Hashable | None, fn: Callable[..., T], *args: Any) -> T:
        """``submit`` and await the result on the running loop."""
        return await asyncio.wrap_future(self.submit(key, fn, *args))

    def _drain(self, key: Hashable) -> None:
        ran = 0
        while True:
            with self._lock:
                queue = self._queues[key]
                if not queue:
                    del self._queues[key]
                    return
                if ran >= BURST and not self._closed:
                    break
                fn, args, fut = queue.popleft()
            ran += 1
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args)
            except BaseException as e:  # handed to the awaiting caller, who decides
                fut.set_exception(e)
            else:
                fut.set_result(result)
        try:
            self._pool.submit(self._drain, key)  # more of this key: let other keys' drains run first
        except RuntimeError:  # shutting down meanwhile: finish the queue here
            self._drain_inline(key)

    def _drain_inline(self, key: Hashable) -> None:
        with self._lock:
            self._closed = True
        self._drain(key)

    def shutdown(self) -> None:
        """Finish what is queued, then stop the threads (the logs are closed after this)."""
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=True)
