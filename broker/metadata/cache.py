"""The broker's view of the cluster: plain data, with no ZooKeeper in it.

``broker.metadata.watcher`` keeps it current from ZooKeeper watches; the replica manager, the produce router,
the group coordinator and the HTTP handlers read it. Keeping the data apart from the watcher lets the pure
replication core (Partition) import it without importing ZooKeeper.

Concurrency: ``MetadataCache`` is owned by the broker's event task. HTTP handlers on the same loop read it
without awaiting in between, so they always see one consistent snapshot of each entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from odradek.protocol.model import BrokerInfo, LeaderAndIsr, TopicAssignment


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
    # (entity type, name) -> overrides of clients, users and brokers (quotas, throttles), and of nested
    # user+client entities under ("users/<user>/clients", <client id>) (broker.quotas.user_client_entity);
    # see MetadataWatcher
    dynamic: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)

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
