"""A single-owner event queue: how ZooKeeper watches (on kazoo threads) reach broker and controller code.

Why: kazoo runs watch and state callbacks on its own threads. If those callbacks touched broker state, every
piece of it would need locks. Instead a callback only calls ``signal_threadsafe(event)``, which hands the event
to the asyncio loop (``call_soon_threadsafe``), and one task handles events one at a time, in order, so the
state it owns needs no locks (Kafka's ControllerEventManager, KAFKA-5028). Handlers re-read ZooKeeper; events
carry no znode data.

Why failed handlers are retried: a watch is one-shot, and the handler's re-read is what arms it again. A re-read
that fails because ZooKeeper is unreachable (``CoordinationUnavailableError``) must therefore not be dropped, or
that watch is never armed again and the broker's view stays stale for good. Such an event is put back after a
backoff (growing to ``max_backoff_s``) until its handler succeeds, as Kafka's
``retryRequestsUntilConnected`` does. Any other exception is a bug: it is logged and the event dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from odradek.protocol.errors import CoordinationUnavailableError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Event:
    """Base of all queued events; subclasses are plain frozen dataclasses."""


class EventQueue:
    """Owned by one asyncio task (``run``); ``signal_threadsafe`` may be called from any thread."""

    def __init__(self, name: str, handle: Callable[[Event], Awaitable[None]], *,
                 min_backoff_s: float = 0.05, max_backoff_s: float = 1.0) -> None:
        self.name = name
        self._handle = handle
        self._events: deque[Event] = deque()
        self._wakeup = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._closed = False
        self._min_backoff_s = min_backoff_s
        self._max_backoff_s = max_backoff_s
        self._retrying: dict[Event, int] = {}  # event -> failed attempts, while a retry is scheduled

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def retrying(self) -> int:
        """How many events wait to be retried (ZooKeeper was unreachable when they were handled)."""
        return len(self._retrying)

    def put(self, event: Event) -> bool:
        """From the owning loop's thread; False when the queue is closed and the event was dropped."""
        if self._closed:
            return False
        self._events.append(event)
        self._wakeup.set()
        return True

    def signal_threadsafe(self, event: Event) -> None:
        """From any thread (kazoo callbacks); never blocks."""
        if self._closed:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: the process is going away
            self._loop.call_soon_threadsafe(self.put, event)

    def clear_and_put_threadsafe(self, event: Event, on_dropped: Callable[[Event], None] | None = None) -> None:
        """From any thread: drop every queued event (each handed to ``on_dropped``) and queue ``event`` alone, as
        Kafka's ControllerEventManager.clearAndPut does on a session expiry: what was queued belongs to a term that
        is over, and must not run before ``event`` ends it. An event in flight finishes first."""
        if self._closed:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: the process is going away
            self._loop.call_soon_threadsafe(self._clear_and_put, event, on_dropped)

    def _clear_and_put(self, event: Event, on_dropped: Callable[[Event], None] | None) -> None:
        dropped, self._events = self._events, deque()
        self._retrying.clear()  # their scheduled retries find the term over, like any late event
        for e in dropped:
            if on_dropped is not None:
                on_dropped(e)
        self.put(event)

    def watcher(self, event: Event) -> Callable[[], None]:
        """A zero-argument callback for ``ZkClient`` watches that signals ``event``."""
        return lambda: self.signal_threadsafe(event)

    def take_pending(self, match: Callable[[Event], bool]) -> list[Event]:
        """Remove and return the queued events that ``match`` (in order), so a handler can serve many of one
        kind with one batched ZooKeeper read. Call from the owning task."""
        taken = [e for e in self._events if match(e)]
        if taken:
            self._events = deque(e for e in self._events if not match(e))
        return taken

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._wakeup.set()

    async def run(self) -> None:
        while True:
            while not self._events:
                if self._closed:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
            event = self._events.popleft()
            try:
                await self._handle(event)
            except asyncio.CancelledError:
                raise
            except CoordinationUnavailableError as e:
                self._retry_later(event, e)
            except Exception:
                log.exception("%s: handling %s failed", self.name, type(event).__name__)
            else:
                self._retrying.pop(event, None)

    def _retry_later(self, event: Event, error: Exception) -> None:
        if self._closed:
            return
        attempts = self._retrying.get(event, 0) + 1
        self._retrying[event] = attempts
        delay = min(self._max_backoff_s, self._min_backoff_s * 2 ** (attempts - 1))
        if attempts == 1 or attempts % 20 == 0:
            log.warning("%s: %s failed (%s); retrying until ZooKeeper answers (attempt %d)",
                        self.name, type(event).__name__, error, attempts)
        self._loop.call_later(delay, self._requeue, event)

    def _requeue(self, event: Event) -> None:
        if self._closed or event in self._events:
            return  # a fresher signal of the same event is already queued: it will do the re-read
        self.put(event)
