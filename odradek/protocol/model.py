"""The cluster's domain values, shared by ZooKeeper codecs, brokers, the client and the Spark connector.

Why a module of its own: these are what the system is about (a partition, a broker, a leadership), not how
ZooKeeper stores them. ``zk/znodes.py`` encodes and decodes them; the replication core and the controller use
them without importing anything of ZooKeeper (Kafka keeps ``LeaderAndIsr`` in ``kafka.api`` for the same reason).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = ["NO_LEADER", "BrokerInfo", "KafkaEndpoint", "LeaderAndIsr", "TopicAssignment", "TopicPartition"]

NO_LEADER = -1


class TopicPartition(NamedTuple):
    """Hashable and a plain tuple, so it keys dicts as Kafka's ``TopicPartition`` does and costs little to build."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class KafkaEndpoint(NamedTuple):
    """One advertised Kafka-protocol listener of a broker: what Metadata answers name for that listener."""

    listener: str
    host: str
    port: int
    security_protocol: str


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A broker's registration. ``url`` is its HTTP endpoint, the one clients and followers use;
    ``kafka_endpoints`` its Kafka-protocol listeners (none on a broker without one, or registered before them)."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    timestamp_ms: int = 0
    epoch: int = -1  # the registration znode's czxid (Kafka's broker epoch, KIP-380); read, never written
    # "https" when host:port is a TLS listener (SSL or SASL_SSL); every listener, as (NAME://HOST:PORT, protocol).
    scheme: str = "http"
    endpoints: tuple[tuple[str, str], ...] = ()
    kafka_endpoints: tuple[KafkaEndpoint, ...] = ()

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """Replica lists per partition; the first replica of each list is the preferred leader."""

    partitions: dict[int, list[int]]
    topic_id: str | None = None
    adding_replicas: dict[int, list[int]] = field(default_factory=dict)
    removing_replicas: dict[int, list[int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """A partition's leadership as the controller (or, for ISR changes, the leader) last wrote it.

    The controller's changes go through ``new_leader`` / ``new_leader_and_isr``, which bump the leader epoch (as
    Kafka's ``LeaderAndIsr.newLeader``/``newLeaderAndIsr`` do), so no caller can forget the bump that fences the
    previous leader. A leader's own ISR change (``new_isr``) keeps the epoch, as Kafka's ZK-mode leader does: a
    bump would fail every acks=all request waiting in that epoch and look like a leadership change. The ISR is
    never empty once a partition has been created.
    """

    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int

    NO_LEADER = NO_LEADER

    @staticmethod
    def initial(leader: int, isr: Iterable[int], controller_epoch: int) -> LeaderAndIsr:
        return LeaderAndIsr(leader, 0, list(isr), controller_epoch)

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER

    def new_leader(self, leader: int, controller_epoch: int) -> LeaderAndIsr:
        return self.new_leader_and_isr(leader, self.isr, controller_epoch)

    def new_leader_and_isr(self, leader: int, isr: Iterable[int], controller_epoch: int) -> LeaderAndIsr:
        return LeaderAndIsr(leader, self.leader_epoch + 1, list(isr), controller_epoch)

    def new_isr(self, isr: Iterable[int]) -> LeaderAndIsr:
        """An ISR change by the leader itself: same leader, leader epoch and controller epoch; only the znode's
        version moves (the conditional write fences a leader that lost the partition)."""
        return LeaderAndIsr(self.leader, self.leader_epoch, list(isr), self.controller_epoch)
