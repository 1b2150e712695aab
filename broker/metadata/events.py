"""A single-owner event queue: how ZooKeeper watches (on kazoo threads) reach broker and controller code.

Why: kazoo runs watch and state callbacks on its own threads. If those callbacks touched broker state, every
piece of it would need locks. Instead a callback only calls ``signal_threadsafe(event)``, which hands the event
to the asyncio loop (``call_soon_threadsafe``), and one task handles events one at a time, in order, so the
state it owns needs no locks (Kafka's ControllerEventManager, KAFKA-5028). Handlers re-read ZooKeeper; events
carry no znode data.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Event:
    """Base of all queued events; subclasses are plain frozen dataclasses."""


class EventQueue:
    """Owned by one asyncio task (``run``); ``signal_threadsafe`` may be called from any thread."""

    def __init__(self, name: str, handle: Callable[[Event], Awaitable[None]]) -> None:
        self.name = name
        self._handle = handle
        self._queue: asyncio.Queue[Event | None] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def put(self, event: Event) -> bool:
        """From the owning loop's thread; False when the queue is closed and the event was dropped."""
        if self._closed:
            return False
        self._queue.put_nowait(event)
        return True

    def signal_threadsafe(self, event: Event) -> None:
        """From any thread (kazoo callbacks); never blocks."""
        if self._closed:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: the process is going away
            self._loop.call_soon_threadsafe(self.put, event)

    def watcher(self, event: Event) -> Callable[[], None]:
        """A zero-argument callback for ``ZkClient`` watches that signals ``event``."""
        return lambda: self.signal_threadsafe(event)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._queue.put_nowait(None)

    async def run(self) -> None:
        while True:
            event = await self._queue.get()
            if event is None:
                return
            try:
                await self._handle(event)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: handling %s failed", self.name, type(event).__name__)
