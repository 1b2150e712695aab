"""The broker's view of the cluster: plain data, with no ZooKeeper in it.

``broker.metadata.watcher`` keeps it current from ZooKeeper watches; the replica manager, the produce router,
the group coordinator and the HTTP handlers read it. Keeping the data apart from the watcher lets the pure
replication core (Partition) import it without importing ZooKeeper.

Concurrency: ``MetadataCache`` is owned by the broker's event task. HTTP handlers on the same loop read it
without awaiting in between, so they always see one consistent snapshot of each entry.

Topic ids: Kafka's clients (Fetch v13+, Metadata v10+, DeleteTopics v6+) and every replica's Fetch name topics
by id, so ``topics`` is a :class:`TopicTable`, which answers "which topic has this id" from an index instead of a
walk over every topic: a walk per request made each Fetch cost time in proportion to the topics in the cluster
(about 0.8 ms per request at 10,000 topics), on every replication round.
"""

from __future__ import annotations

import base64
import functools
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from odradek.protocol.model import BrokerInfo, LeaderAndIsr, TopicAssignment


@functools.lru_cache(maxsize=65536)
def topic_uuid(topic_id: str | None) -> uuid.UUID | None:
    """The topic id as Kafka puts it on the wire (a UUID) from its ZooKeeper form (url-safe base64, padding
    optional); None for a topic without one or a form that does not decode to 16 bytes. Cached: a topic's id
    never changes."""
    if not topic_id:
        return None
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4)))
    except ValueError:
        return None


class TopicTable(dict[str, TopicAssignment]):
    """The topics by name, and by id (:meth:`name_of`).

    Invariant: ``name_of(i)`` is the topic whose assignment's id decodes to ``i`` in the table as it is now. Every
    mutator marks the index stale and the next lookup rebuilds it (one walk per change of the topics, not per
    request), so a topic deleted and created again under its name is never found by its old id. An assignment is
    replaced, never changed in place (the watcher stores a new one per change of its znode).
    """

    __slots__ = ("_by_id",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._by_id: dict[uuid.UUID, str] | None = None

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with this id now, or None."""
        by_id = self._by_id
        if by_id is None:
            by_id = self._by_id = {}
            for name, assignment in dict.items(self):
                decoded = topic_uuid(assignment.topic_id)
                if decoded is not None:
                    by_id[decoded] = name
        return by_id.get(topic_id)

    def __setitem__(self, name: str, assignment: TopicAssignment) -> None:
        self._by_id = None
        super().__setitem__(name, assignment)

    def __delitem__(self, name: str) -> None:
        self._by_id = None
        super().__delitem__(name)

    def __ior__(self, other: Any) -> TopicTable:  # type: ignore[override,misc]
        self._by_id = None
        return super().__ior__(other)

    def pop(self, name: str, *default: Any) -> Any:  # type: ignore[override]
        self._by_id = None
        return super().pop(name, *default)

    def popitem(self) -> tuple[str, TopicAssignment]:
        self._by_id = None
        return super().popitem()

    def clear(self) -> None:
        self._by_id = None
        super().clear()

    def setdefault(self, name: str, default: TopicAssignment) -> TopicAssignment:  # type: ignore[override]
        self._by_id = None
        return super().setdefault(name, default)

    def update(self, *args: Mapping[str, TopicAssignment] | Iterable[tuple[str, TopicAssignment]],
               **kwargs: TopicAssignment) -> None:
        self._by_id = None
        super().update(*args, **kwargs)


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
    topics: TopicTable = field(default_factory=TopicTable)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    partitions: dict[tuple[str, int], PartitionInfo] = field(default_factory=dict)
    # (entity type, name) -> overrides of clients, users and brokers (quotas, throttles), and of nested
    # user+client entities under ("users/<user>/clients", <client id>) (broker.quotas.user_client_entity);
    # see MetadataWatcher
    dynamic: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "topics" and not isinstance(value, TopicTable):  # a plain mapping assigned whole: indexed too
            value = TopicTable(value)
        super().__setattr__(name, value)

    def topic_name(self, topic_id: uuid.UUID | None) -> str | None:
        """The name of the topic whose id is ``topic_id`` now, or None (no such topic, or no id)."""
        return None if topic_id is None else self.topics.name_of(topic_id)

    def partition_count(self, topic: str) -> int:
        assignment = self.topics.get(topic)
        return 0 if assignment is None else len(assignment.partitions)

    def leader_url(self, leader: int) -> str | None:
        info = self.brokers.get(leader)
        return None if info is None else info.url


class MetadataListener:
    """What the replica manager wants to hear about. Called on the broker's event task."""

    async def on_partition(self, info: PartitionInfo, config: dict[str, str]) -> None: ...
    async def on_topic_config(self, topic: str, config: dict[str, str]) -> None: ...
    async def on_topic_deleted(self, topic: str) -> None: ...
    async def on_brokers(self, brokers: dict[int, BrokerInfo]) -> None: ...
