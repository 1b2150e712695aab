"""The ISR manager: how a leader's ISR change reaches ZooKeeper (Kafka's ``ZkIsrManager``).

A partition never writes its ISR itself: it submits an ``IsrChange`` (the new ``LeaderAndIsr`` and the znode
version it was based on) with a callback, and learns the outcome through it. That keeps ZooKeeper out of the
partition state machine and gives failures one place to be handled:

* success: the callback gets the new znode version; the partition commits the ISR;
* a version conflict (a controller decision, or another write, came first): not retried, since retrying with
  the same version cannot succeed; the callback hears of it and the controller's state reaches the partition
  through the watch;
* anything else (connection loss, an operation timeout, the facade's ``CoordinationUnavailableError``): logged
  and retried with exponential backoff for as long as the partition still wants the change
  (``still_wanted``: it is still leader in the same epoch), so a ZooKeeper blip delays an ISR change instead
  of losing it.

One change per partition is in flight at a time (the partition's pending-ISR state enforces it too).

Concurrency: owned by the broker's event loop; the blocking write runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from odradek.protocol.model import LeaderAndIsr

log = logging.getLogger(__name__)

IsrWrite = Callable[[str, int, LeaderAndIsr, int], int]  # (topic, partition, state, expected version) -> version


@dataclass(frozen=True, slots=True)
class IsrResult:
    """The outcome of one change: ``zk_version`` >= 0 once written, else ``error`` says why not."""

    state: LeaderAndIsr
    zk_version: int = -1
    error: BaseException | None = None
    conflict: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class IsrChange:
    topic: str
    partition: int
    state: LeaderAndIsr
    zk_version: int  # the version of the state znode the change is based on (the conditional write's guard)
    callback: Callable[[IsrResult], None]
    still_wanted: Callable[[], bool] = field(default=lambda: True)


class IsrManager:
    """Writes ISR changes conditionally, retrying what may succeed later; see the module docstring."""

    def __init__(self, write: IsrWrite, *, conflicts: tuple[type[BaseException], ...] = (),
                 backoff_s: float = 0.1, max_backoff_s: float = 2.0) -> None:
        self._write = write
        self._conflicts = conflicts
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._in_flight: dict[tuple[str, int], asyncio.Task[None]] = {}

    def submit(self, change: IsrChange) -> bool:
        """Start writing ``change``; False (and nothing done) if one for that partition is still in flight."""
        key = (change.topic, change.partition)
        if key in self._in_flight:
            return False
        task = asyncio.get_running_loop().create_task(self._run(change))
        self._in_flight[key] = task
        task.add_done_callback(lambda t: self._done(key, t))
        return True

    def in_flight(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self._in_flight

    def _done(self, key: tuple[str, int], task: asyncio.Task[None]) -> None:
        if self._in_flight.get(key) is task:
            del self._in_flight[key]
        if not task.cancelled() and task.exception() is not None:  # a bug (a callback raised): say so loudly
            log.error("ISR change of %s-%d failed unexpectedly", *key, exc_info=task.exception())

    async def _run(self, change: IsrChange) -> None:
        backoff = self._backoff_s
        attempt = 0
        while True:
            attempt += 1
            try:
                version = await asyncio.to_thread(self._write, change.topic, change.partition, change.state,
                                                  change.zk_version)
            except self._conflicts as e:
                log.info("%s-%d: ISR change to %s lost to a newer state (version %d is stale); waiting for it",
                         change.topic, change.partition, change.state.isr, change.zk_version)
                change.callback(IsrResult(change.state, error=e, conflict=True))
                return
            except Exception as e:
                if not change.still_wanted():
                    log.info("%s-%d: ISR change to %s dropped after %s: the partition moved on",
                             change.topic, change.partition, change.state.isr, e)
                    change.callback(IsrResult(change.state, error=e))
                    return
                log.warning("%s-%d: ISR change to %s failed (attempt %d: %s: %s); retrying in %.1f s",
                            change.topic, change.partition, change.state.isr, attempt, type(e).__name__, e,
                            backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff_s)
                continue
            log.info("%s-%d: ISR is now %s (zkVersion %d)", change.topic, change.partition, change.state.isr,
                     version)
            change.callback(IsrResult(change.state, zk_version=version))
            return

    async def close(self) -> None:
        tasks = list(self._in_flight.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
