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

Callers on the loop ``await run(key, fn, *args)``: one hop per request, whatever it carries. A hop is cheap
but not free (a thread wake-up each way), so the executor keeps its own workers rather than a
``ThreadPoolExecutor`` (no per-job ``concurrent.futures.Future``), completes asyncio futures directly, and hands
the results of jobs that finish close together back to their loop in one ``call_soon_threadsafe``
(``_Handoff``). ``then`` runs on the loop when the job is done even if the awaiting caller was cancelled
meanwhile (a leader must wake its followers for an append that did happen). Work that is only a page-cache
write may skip the hop (``run_here``: on the caller's thread, when its key is idle, paused if it ever stalls); a
large one does when the loop has room (``loop_saturated``, broker/log/loop_load.py).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any, TypeVar

from broker.log.loop_load import LoopLoad

T = TypeVar("T")

log = logging.getLogger(__name__)

BURST = 16
DEFAULT_THREADS = 8
HERE_STALL_S = 0.02
HERE_PAUSE_S = 30.0

_Done = Callable[[Any, BaseException | None], None]  # (result, error): called on the worker thread
_Job = tuple[Callable[..., Any], tuple[Any, ...], _Done]
_STOP = object()


class StorageExecutor:
    """Per-key serial queues on a few worker threads; see the module docstring."""

    def __init__(self, name: str = "odradek-storage", threads: int = DEFAULT_THREADS) -> None:
        self._name = name
        self._threads_max = threads
        self._threads: list[threading.Thread] = []
        self._ready: queue.SimpleQueue[Any] = queue.SimpleQueue()  # keys with queued work, or _STOP
        self._lock = threading.Lock()
        self._queues: dict[Hashable, deque[_Job]] = {}  # a key is present while it is ready or being drained
        self._closed = False
        self._handoffs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Handoff] = weakref.WeakKeyDictionary()
        self._unkeyed = 0
        self._here_paused_until = 0.0
        self.loop_load = LoopLoad()

    # ------------------------------------------------------------------------------------------ callers

    def submit(self, key: Hashable | None, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Run ``fn(*args)`` after every job submitted earlier with the same ``key`` (for threads and tests)."""
        fut: Future[T] = Future()

        def done(result: Any, error: BaseException | None) -> None:
            if error is None:
                fut.set_result(result)
            else:
                fut.set_exception(error)

        self._enqueue(key, (fn, args, done))
        return fut

    async def run(self, key: Hashable | None, fn: Callable[..., T], *args: Any,
                  then: Callable[[], None] | None = None, discard: Callable[[T], None] | None = None) -> T:
        """Run ``fn(*args)`` in ``key``'s order (any order if None) and await its result on the running loop.

        ``then`` runs on the loop once the job is done, before the result is delivered, even if the caller
        was cancelled meanwhile. ``discard`` gets a result nobody will take (the caller was cancelled before or
        just after it arrived): a result that holds resources (a zero-copy read's file descriptors) is released.
        """
        afut = self.start(key, fn, *args, then=then, discard=discard)
        try:
            return await afut
        except asyncio.CancelledError:
            # Cancelled after the result was set but before this task resumed: the result is ours to release.
            if discard is not None and afut.done() and not afut.cancelled() and afut.exception() is None:
                discard(afut.result())
            raise

    def run_here(self, key: Hashable, fn: Callable[..., T], *args: Any) -> T | None:
        """Run ``fn(*args)`` on the calling thread (the event loop's) now, if no job of ``key`` is queued or
        running and runs here are not paused; None, without running it, otherwise (the caller then queues it).

        For work that only touches memory and the page cache (a leader's or a follower's append: a small one
        always, a large one while the loop has room, ``APPEND_HERE_MAX_BYTES`` in broker/replication/partition.py):
        a hop costs two thread wake-ups, which on our VMs cost more than such a write (bench/wakeup_bench.py).
        ``key`` is held meanwhile, so a job queued by another thread waits for it as for any job of ``key``. The
        loop must not wait on the disk: a run here that takes longer than ``HERE_STALL_S`` (the kernel throttling
        dirty pages, memory faulted back in from the host) pauses runs here for ``HERE_PAUSE_S``.
        """
        now = time.monotonic()
        if now < self._here_paused_until:
            return None
        with self._lock:
            if key in self._queues or self._closed:
                return None
            self._queues[key] = deque()
        try:
            return fn(*args)
        finally:
            took = time.monotonic() - now
            if took > HERE_STALL_S:
                self._here_paused_until = now + took + HERE_PAUSE_S
                log.info("a storage job run on the event loop took %.0f ms: such runs pause for %.0f s",
                         took * 1000, HERE_PAUSE_S)
            with self._lock:
                pending = self._queues[key]
                if not pending:
                    del self._queues[key]
                    pending = None
                else:
                    self._start_threads_locked()
            if pending is not None:  # queued by another thread meanwhile: drained as if after a job of ours
                self._ready.put(key)

    def loop_saturated(self) -> bool:
        """Whether the broker's work would saturate the loop's one thread (the process at about a core), so that
        a large page-cache write is worth its hop to a storage thread (broker/log/loop_load.py)."""
        return self.loop_load.saturated()

    def start(self, key: Hashable | None, fn: Callable[..., T], *args: Any, then: Callable[[], None] | None = None,
              discard: Callable[[T], None] | None = None) -> asyncio.Future[T]:
        """:meth:`run` without its coroutine: the job is queued now, and its result comes in the future returned
        (on the running loop). For a caller starting many jobs at once (one per partition of a produce), which
        then awaits them together without a task each. Cancelling the future does not stop the job: ``then``
        still runs, and ``discard`` gets the result."""
        loop = asyncio.get_running_loop()
        afut: asyncio.Future[T] = loop.create_future()

        def complete(result: Any, error: BaseException | None) -> None:
            if then is not None:
                then()
            if afut.cancelled():
                if discard is not None and error is None:
                    discard(result)
                return
            if error is None:
                afut.set_result(result)
            else:
                afut.set_exception(error)

        handoff = self._handoff(loop)

        def done(result: Any, error: BaseException | None) -> None:
            handoff.add(complete, result, error)

        self._enqueue(key, (fn, args, done))
        return afut

    def _handoff(self, loop: asyncio.AbstractEventLoop) -> _Handoff:
        handoff = self._handoffs.get(loop)
        if handoff is None:
            with self._lock:
                handoff = self._handoffs.setdefault(loop, _Handoff(loop))
        return handoff

    # ------------------------------------------------------------------------------------------ workers

    def _enqueue(self, key: Hashable | None, job: _Job) -> None:
        if key is None:  # reads: no order needed, but through the same workers (bounded threads)
            with self._lock:
                self._unkeyed += 1
                key = ("unkeyed", self._unkeyed)
        with self._lock:
            if self._closed:
                raise RuntimeError("the storage executor is shut down")
            pending = self._queues.get(key)
            if pending is not None:
                pending.append(job)
                return
            self._queues[key] = deque([job])
            self._start_threads_locked()
        self._ready.put(key)

    def _start_threads_locked(self) -> None:
        if not self._threads:  # started at first use; idle workers cost nothing but their stacks
            for i in range(self._threads_max):
                t = threading.Thread(target=self._work, name=f"{self._name}-{i}", daemon=True)
                self._threads.append(t)
                t.start()

    def _work(self) -> None:
        while True:
            key = self._ready.get()
            if key is _STOP:
                return
            self._drain(key)

    def _drain(self, key: Hashable) -> None:
        """Run ``key``'s jobs in order. The key is let go *before* its last result is handed back, so a caller
        that goes on at once finds it idle (``run_here``) rather than racing this thread's bookkeeping."""
        ran = 0
        with self._lock:
            pending = self._queues[key]
            if not pending:
                del self._queues[key]
                return
            job: _Job | None = pending.popleft()
        while job is not None:
            fn, args, done = job
            ran += 1
            error: BaseException | None = None
            try:
                result = fn(*args)
            except BaseException as e:  # handed to the caller, who decides
                result, error = None, e
            again = False
            with self._lock:
                if not pending:
                    del self._queues[key]
                    job = None
                elif ran >= BURST and not self._closed:
                    job, again = None, True
                else:
                    job = pending.popleft()
            done(result, error)
            if again:
                self._ready.put(key)  # more of this key: let other keys' drains run first

    def shutdown(self) -> None:
        """Finish what is queued, then stop the threads (the logs are closed after this)."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        for _ in threads:
            self._ready.put(_STOP)
        for t in threads:
            t.join()
        with self._lock:  # anything a drain re-queued behind a _STOP: finish it here
            left = list(self._queues)
        for key in left:
            self._drain(key)


class _Handoff:
    """Results on their way back to one event loop: the first finished job of a batch schedules one
    ``call_soon_threadsafe`` (a write to the loop's self-pipe and a wake-up), and every job that finishes before
    the loop ran it rides along. Results are completed in the order their jobs finished."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._items: deque[tuple[_Done, Any, BaseException | None]] = deque()
        self._scheduled = False

    def add(self, complete: _Done, result: Any, error: BaseException | None) -> None:
        with self._lock:
            self._items.append((complete, result, error))
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._run)
        except RuntimeError:  # the loop is closed (shutdown): nobody is waiting any more
            log.debug("storage job finished after its event loop closed")

    def _run(self) -> None:
        with self._lock:
            items, self._items = self._items, deque()
            self._scheduled = False
        for complete, result, error in items:
            try:
                complete(result, error)
            except Exception:  # one caller's bug must not strand the others' results
                log.exception("completing a storage job failed")
