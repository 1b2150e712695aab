"""The broker's view of the cluster, kept current from ZooKeeper watches, and the events that update it.

Kafka's brokers learn metadata from the controller's UpdateMetadata requests; Odradek's brokers watch the same
znodes the controller writes (``/brokers/ids``, ``/brokers/topics``, each topic's assignment and config, each
partition's state). A watch only signals the broker's event queue; the handler re-reads the node (re-arming
the watch), updates this cache and tells the replica manager what changed.

Concurrency: ``MetadataCache`` is owned by the broker's event task. HTTP handlers on the same loop read it
without awaiting in between, so they always see one consistent snapshot of each entry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from broker.metadata.events import Event, EventQueue
from odradek.protocol.model import BrokerInfo, LeaderAndIsr, TopicAssignment
from zk.client import ZkClient


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int

    @classmethod
    def of(cls, topic: str, partition: int, replicas: list[int], state: LeaderAndIsr, version: int) -> PartitionInfo:
        return cls(topic, partition, tuple(replicas), state.leader, state.leader_epoch, tuple(state.isr),
                   state.controller_epoch, version)


@dataclass
class MetadataCache:
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    topics: dict[str, TopicAssignment] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    partitions: dict[tuple[str, int], PartitionInfo] = field(default_factory=dict)

    def partition_count(self, topic: str) -> int:
        assignment = self.topics.get(topic)
        return 0 if assignment is None else len(assignment.partitions)

    def leader_url(self, leader: int) -> str | None:
        info = self.brokers.get(leader)
        return None if info is None else info.url


@dataclass(frozen=True, slots=True)
class BrokersChanged(Event):
    pass


@dataclass(frozen=True, slots=True)
class TopicsChanged(Event):
    pass


@dataclass(frozen=True, slots=True)
class TopicAssignmentChanged(Event):
    topic: str


@dataclass(frozen=True, slots=True)
class TopicConfigChanged(Event):
    topic: str


@dataclass(frozen=True, slots=True)
class PartitionStateChanged(Event):
    topic: str
    partition: int


class MetadataListener:
    """What the replica manager wants to hear about. Called on the broker's event task."""

    async def on_partition(self, info: PartitionInfo, config: dict[str, str]) -> None: ...
    async def on_topic_config(self, topic: str, config: dict[str, str]) -> None: ...
    async def on_topic_deleted(self, topic: str) -> None: ...
    async def on_brokers(self, brokers: dict[int, BrokerInfo]) -> None: ...


class MetadataWatcher:
    """Handles the metadata events of one broker's queue, keeping ``cache`` current."""

    def __init__(self, zk: ZkClient, queue: EventQueue, cache: MetadataCache, listener: MetadataListener) -> None:
        self._zk = zk
        self._queue = queue
        self.cache = cache
        self._listener = listener
        self._changed: asyncio.Event = asyncio.Event()

    async def start(self) -> None:
        await self._brokers()
        await self._topics()

    async def resync(self) -> None:
        """Re-read everything and re-arm every watch (after a new ZooKeeper session: old watches are gone)."""
        await self._brokers()
        await self._topics(force=True)
        self._notify()

    async def changed(self, timeout: float) -> None:
        """Wait until the cache changes (for admin calls waiting on the controller)."""
        event = self._changed
        await asyncio.wait_for(event.wait(), timeout)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def handle(self, event: Event) -> bool:
        """Handle ``event`` if it is a metadata event; return whether it was."""
        handler: Callable[[], Awaitable[None]]
        match event:
            case BrokersChanged():
                handler = self._brokers
            case TopicsChanged():
                handler = self._topics
            case TopicAssignmentChanged(topic=topic):
                handler = lambda: self._assignment(topic)  # noqa: E731
            case TopicConfigChanged(topic=topic):
                handler = lambda: self._config(topic)  # noqa: E731
            case PartitionStateChanged(topic=topic, partition=partition):
                handler = lambda: self._state(topic, partition)  # noqa: E731
            case _:
                return False
        await handler()
        self._notify()
        return True

    async def _brokers(self) -> None:
        brokers = await asyncio.to_thread(self._zk.get_brokers, self._queue.watcher(BrokersChanged()))
        self.cache.brokers = brokers
        await self._listener.on_brokers(brokers)

    async def _topics(self, force: bool = False) -> None:
        topics = await asyncio.to_thread(self._zk.get_topics, self._queue.watcher(TopicsChanged()))
        for gone in [t for t in self.cache.topics if t not in topics]:
            await self._forget(gone)
        for topic in topics:
            if force or topic not in self.cache.topics:
                await self._config(topic)
                await self._assignment(topic, force)

    async def _assignment(self, topic: str, force: bool = False) -> None:
        assignment = await asyncio.to_thread(
            self._zk.get_topic_assignment, topic, self._queue.watcher(TopicAssignmentChanged(topic))
        )
        if assignment is None:
            await self._forget(topic)
            return
        known = self.cache.topics.get(topic)
        self.cache.topics[topic] = assignment
        for partition in sorted(assignment.partitions):
            if force or known is None or partition not in known.partitions:
                await self._state(topic, partition, force)

    async def _config(self, topic: str) -> None:
        watch = self._queue.watcher(TopicConfigChanged(topic))
        config = await asyncio.to_thread(self._zk.get_topic_config, topic, watch)
        changed = self.cache.configs.get(topic) != config
        self.cache.configs[topic] = config
        if changed and topic in self.cache.topics:
            await self._listener.on_topic_config(topic, config)

    async def _state(self, topic: str, partition: int, force: bool = False) -> None:
        assignment = self.cache.topics.get(topic)
        if assignment is None or partition not in assignment.partitions:
            return
        got = await asyncio.to_thread(
            self._zk.get_partition_state, topic, partition, self._queue.watcher(PartitionStateChanged(topic, partition))
        )
        if got is None:
            return  # the controller has not initialised it yet; the watch fires when it does
        state, version = got
        info = PartitionInfo.of(topic, partition, assignment.partitions[partition], state, version)
        if not force and self.cache.partitions.get((topic, partition)) == info:
            return
        self.cache.partitions[(topic, partition)] = info
        await self._listener.on_partition(info, self.cache.configs.get(topic, {}))

    async def _forget(self, topic: str) -> None:
        self.cache.topics.pop(topic, None)
        self.cache.configs.pop(topic, None)
        for key in [k for k in self.cache.partitions if k[0] == topic]:
            del self.cache.partitions[key]
        await self._listener.on_topic_deleted(topic)
