"""Keeps the broker's metadata cache current from ZooKeeper watches: the events and their handler.

Kafka's brokers learn metadata from the controller's UpdateMetadata requests; Odradek's brokers watch the same
znodes the controller writes (``/brokers/ids``, ``/brokers/topics``, each topic's assignment and config, each
partition's state). A watch only signals the broker's event queue; the handler re-reads the node (re-arming
the watch), updates this cache and tells the replica manager what changed.

ZooKeeper outages: kazoo fires every armed watch when the connection drops, and a handler whose re-read fails
(CoordinationUnavailableError) is retried by the event queue until ZooKeeper answers, so no watch is left
unarmed; on reconnect the broker also calls ``resync``, which re-reads everything. Partition states are read in
pipelined batches (a resync, a new topic, and every state-change signal queued behind the one being handled),
so a controller decision over N partitions costs the broker a few round trips, not N.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from broker.metadata.cache import MetadataCache, MetadataListener, PartitionInfo
from broker.metadata.events import Event, EventQueue
from broker.quotas import user_client_entity
from odradek.protocol.errors import CoordinationUnavailableError
from odradek.protocol.model import TopicPartition
from zk.client import ZkClient
from zk.configs import ENTITY_TYPES, EntityConfigs


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
class DynamicConfigChanged(Event):
    """A notification appeared under /config/changes (client, user and user+client quotas, broker configs)."""


@dataclass(frozen=True, slots=True)
class PartitionStateChanged(Event):
    topic: str
    partition: int


class MetadataWatcher:
    """Handles the metadata events of one broker's queue, keeping ``cache`` current."""

    def __init__(self, zk: ZkClient, queue: EventQueue, cache: MetadataCache, listener: MetadataListener) -> None:
        self._zk = zk
        self._queue = queue
        self.cache = cache
        self._listener = listener
        self._changed: asyncio.Event = asyncio.Event()
        self._unread: set[TopicPartition] = set()  # state signals whose batched re-read failed

    async def start(self) -> None:
        await self._brokers()
        await self._topics()
        await self._dynamic_configs()

    async def resync(self, force: bool = True) -> None:
        """Re-read everything and re-arm every watch (after a new ZooKeeper session: old watches are gone; after
        a reconnect: a change may have been missed). With ``force`` the listener hears of every partition, changed
        or not (its leaderships were fenced and wait to be confirmed); without, only of what changed."""
        await self._brokers()
        await self._topics(force=force, reread=True)
        await self._dynamic_configs()
        self._unread.clear()
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
            case DynamicConfigChanged():
                handler = self._dynamic_configs
            case PartitionStateChanged(topic=topic, partition=partition):
                more = self._queue.take_pending(lambda e: isinstance(e, PartitionStateChanged))
                tps = [TopicPartition(topic, partition)] + [
                    TopicPartition(e.topic, e.partition) for e in more if isinstance(e, PartitionStateChanged)]
                handler = lambda: self._state_batch(tps)  # noqa: E731
            case _:
                return False
        await handler()
        self._notify()
        return True

    async def _brokers(self) -> None:
        brokers = await asyncio.to_thread(self._zk.get_brokers, self._queue.watcher(BrokersChanged()))
        self.cache.brokers = brokers
        await self._listener.on_brokers(brokers)

    async def _topics(self, force: bool = False, reread: bool = False) -> None:
        topics = await asyncio.to_thread(self._zk.get_topics, self._queue.watcher(TopicsChanged()))
        for gone in [t for t in self.cache.topics if t not in topics]:
            await self._forget(gone)
        for topic in topics:
            if reread or topic not in self.cache.topics:
                await self._config(topic)
                await self._assignment(topic, force, reread)

    async def _assignment(self, topic: str, force: bool = False, reread: bool = False) -> None:
        assignment = await asyncio.to_thread(
            self._zk.get_topic_assignment, topic, self._queue.watcher(TopicAssignmentChanged(topic))
        )
        if assignment is None:
            await self._forget(topic)
            return
        known = self.cache.topics.get(topic)
        self.cache.topics[topic] = assignment
        # New partitions, and those whose replicas changed (a reassignment: a removed replica must hear it)
        await self._states([TopicPartition(topic, p) for p in sorted(assignment.partitions)
                            if reread or known is None or known.partitions.get(p) != assignment.partitions[p]], force)

    async def _config(self, topic: str) -> None:
        watch = self._queue.watcher(TopicConfigChanged(topic))
        config = await asyncio.to_thread(self._zk.get_topic_config, topic, watch)
        changed = self.cache.configs.get(topic) != config
        self.cache.configs[topic] = config
        if changed and topic in self.cache.topics:
            await self._listener.on_topic_config(topic, config)

    async def _dynamic_configs(self) -> None:
        """Client/user quotas and broker dynamic configs, applied without a restart (Kafka's DynamicConfigManager).

        A notification is only a trigger: every entity of those types is re-read (there are few), so a missed
        or expired notification costs nothing but a later re-read. Topic configs have their own watches. Nested
        ``/config/users/<user>/clients/<client id>`` entities go under the key broker/quotas.py looks them up by
        (``user_client_entity``).
        """
        await asyncio.to_thread(self._zk.get_config_changes, self._queue.watcher(DynamicConfigChanged()))
        store = EntityConfigs(self._zk)
        dynamic: dict[tuple[str, str], dict[str, str]] = {}
        for entity_type in ENTITY_TYPES:
            found = await asyncio.to_thread(store.list_entities, entity_type)
            dynamic.update({(entity_type, name): config for name, config in found.items()})
        nested = await asyncio.to_thread(store.list_user_clients)
        dynamic.update({user_client_entity(user, client): config for (user, client), config in nested.items()})
        self.cache.dynamic = dynamic

    async def _state_batch(self, tps: list[TopicPartition]) -> None:
        """State-change signals, served together. If ZooKeeper does not answer, the queue retries only the first
        signal, so the others are remembered and read with it (none of their watches may stay unarmed)."""
        batch = list(dict.fromkeys([*tps, *sorted(self._unread)]))
        try:
            await self._states(batch)
        except CoordinationUnavailableError:
            self._unread.update(batch)
            raise
        self._unread.difference_update(batch)

    async def _states(self, tps: list[TopicPartition], force: bool = False) -> None:
        """Re-read partitions' states in one batch (arming each one's watch) and pass on what changed."""
        tps = [tp for tp in tps if tp.partition in getattr(self.cache.topics.get(tp.topic), "partitions", {})]
        if not tps:
            return
        got = await asyncio.to_thread(self._zk.get_partition_states, tps, self._state_watch)
        for tp, current in got.items():
            assignment = self.cache.topics.get(tp.topic)
            if current is None or assignment is None or tp.partition not in assignment.partitions:
                continue  # not initialised by the controller yet (the watch fires when it is), or deleted
            state, version = current
            info = PartitionInfo.of(tp.topic, tp.partition, assignment.partitions[tp.partition], state, version)
            if not force and self.cache.partitions.get(tp) == info:
                continue
            self.cache.partitions[tp] = info
            await self._listener.on_partition(info, self.cache.configs.get(tp.topic, {}))

    def _state_watch(self, topic: str, partition: int) -> Callable[[], None]:
        return self._queue.watcher(PartitionStateChanged(topic, partition))

    async def _forget(self, topic: str) -> None:
        self.cache.topics.pop(topic, None)
        self.cache.configs.pop(topic, None)
        for key in [k for k in self.cache.partitions if k[0] == topic]:
            del self.cache.partitions[key]
        await self._listener.on_topic_deleted(topic)
