"""What the group coordinator needs from the process that hosts it, as narrow structural interfaces.

Why protocols and not the broker's classes: the coordinator sits below ``broker`` in the package layers (an
import-linter contract in pyproject.toml), so it may import ``zk`` and ``odradek.protocol`` but nothing of the
broker. The broker's own classes satisfy these interfaces structurally (``broker.metadata.cache.MetadataCache``
is a ``MetadataView``, the class ``broker.metadata.events.EventQueue`` is a ``QueueFactory``), and unit tests
pass small fakes.

Invariants the coordinator relies on:

* ``MetadataView.topics`` is read on the event loop's thread, between awaits, so it is one consistent snapshot.
* A ``SerialQueue`` runs its handler for one event at a time, in order, on one task (the coordinator's state
  needs no locks because of this); ``put`` is called from the loop's thread, ``signal_threadsafe`` from any
  thread (ZooKeeper session callbacks) and never blocks. It may retry an event whose handler failed: the
  coordinator's events are therefore hashable, and equal exactly when handling one stands in for the other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from odradek.protocol.model import TopicAssignment


class MetadataView(Protocol):
    """The cluster's topics as this broker last saw them: their names and partitions (patterns match new topics,
    a partition count change triggers a rebalance, a vanished topic has its offsets removed)."""

    @property
    def topics(self) -> Mapping[str, TopicAssignment]: ...


class SerialQueue(Protocol):
    """A single-owner event queue: ``run`` is the one task that handles every event, in order."""

    @property
    def closed(self) -> bool: ...

    def put(self, event: Any) -> bool: ...

    def signal_threadsafe(self, event: Any) -> None: ...

    def close(self) -> None: ...

    async def run(self) -> None: ...


class QueueFactory(Protocol):
    """Makes the coordinator's queue once its event loop runs (a queue binds to the running loop)."""

    def __call__(self, name: str, handle: Callable[[Any], Awaitable[None]]) -> SerialQueue: ...
