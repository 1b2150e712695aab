"""A follower's ``LeaderEndPoint`` over Kafka's protocol: Fetch v15, OffsetsForLeaderEpoch v4 and ListOffsets v7 to
one leader's inter-broker Kafka listener, over one persistent ``KafkaChannel``, as Kafka's
``RemoteLeaderEndPoint`` over its ``BrokerBlockingSender``.

Why here and not in broker/replication/: the replication rules (what to ask, when to truncate, how to append) are
the fetcher's (broker/replication/leader_fetcher.py), which never imports a front door; how the questions travel
is the Kafka codec's business. This module translates, both ways, and decides nothing.

What goes on the wire:

* **Fetch v15** (KIP-903): ``replica_state`` carries this broker's id and broker epoch (the leader refuses a stale
  one); topics are named by topic id (KIP-516), from this broker's metadata cache at each request, and the
  answer's ids are turned back into the names of this request's topics (a partition of a session is always one
  of them: the session handler's ``wanted``); forgotten partitions are named by the id they were sent with; the
  session id
  and epoch, the partitions and the forgotten ones are the session handler's (broker/replication/
  fetch_session_handler.py). ``rack_id`` is empty; ``isolation_level`` is 0 (a follower reads to the log end).
  A topic with no id in the cache cannot be named on the wire: its partitions are answered locally with
  UNKNOWN_TOPIC_ID, and the fetcher backs them off (every topic created here has an id).
* **OffsetsForLeaderEpoch v4** with ``replica_id``: per partition our view of the current leader epoch (the leader
  fences a stale one either way) and the epoch whose end we want.
* **ListOffsets v7** with ``replica_id``: -2 for the leader's log start offset and -1 for its log end offset (a
  replica id is answered the log end, not the high watermark), in two pipelined requests (a request may not name a
  partition twice).

Error codes become typed errors once, in broker/kafka/errors.py. A failure to reach the leader (its registration
gone, no listener of the inter-broker name, the connection lost) is ``BrokerNotAvailableError``; the channel never
retries, and neither does this endpoint: the fetcher backs off and asks again.

The leader's address is looked up at each request from its registration in the metadata cache (the endpoint of
the inter-broker listener's name, Kafka's ``inter.broker.listener.name``); when it moves (a restart on another
port), the channel to the old one is closed and a new one made.

Concurrency: one endpoint per fetcher, used by that fetcher's task only, on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import ssl
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from broker.config import BrokerConfig
from broker.kafka import codec
from broker.kafka.channel import KafkaChannel, SaslCredentials
from broker.kafka.codec import FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH, make, nested
from broker.kafka.errors import error_for_code
from broker.kafka.fetch_request import VERSION as FETCH_VERSION
from broker.kafka.fetch_request import FetchPartitionAsk, ReplicaFetchRequest
from broker.metadata.cache import MetadataCache, topic_uuid
from broker.replication.fetch_session_handler import SessionRequest
from broker.replication.leader_endpoint import EpochEnd, FetchAnswer, FetchedPartition, FetchSettings, TopicPartition
from broker.security.tls import client_context
from odradek.protocol.errors import BrokerNotAvailableError, UnknownServerError, UnknownTopicIdError

__all__ = ["FETCH_VERSION", "KafkaLeaderEndPoint", "LeaderAddress", "leader_endpoints"]

EPOCHS_VERSION = 4
LIST_OFFSETS_VERSION = 7
EARLIEST, LATEST = -2, -1

LeaderAddress = Callable[[int], tuple[str, int] | None]  # a broker id -> its inter-broker listener's host and port


def registered_address(cache: MetadataCache, listener: str) -> LeaderAddress:
    """The address of a broker's listener named ``listener``, as its registration in ``cache`` gives it."""

    def address(broker_id: int) -> tuple[str, int] | None:
        info = cache.brokers.get(broker_id)
        if info is None:
            return None
        return next(((e.host, e.port) for e in info.kafka_endpoints if e.listener == listener), None)

    return address


def kafka_leaders(config: BrokerConfig, cache: MetadataCache) -> Callable[[int], bool]:
    """Whether a leader can be fetched from over Kafka's protocol: its registration in ``cache`` has this
    broker's inter-broker listener name (a broker started without Kafka listeners is followed over HTTP)."""
    listener = config.kafka_inter_broker_listener()
    if listener is None:
        return lambda _leader: False
    address = registered_address(cache, listener.name)
    return lambda leader: address(leader) is not None


def leader_endpoints(config: BrokerConfig, cache: MetadataCache) -> Callable[[int, int], KafkaLeaderEndPoint]:
    """The replica manager's endpoint factory, (leader id, fetcher id) -> a new endpoint: to the leader's Kafka
    listener of this broker's inter-broker listener name, with TLS as the broker's certificate and CA give it (on
    SSL and SASL_SSL), logged in as ``--inter-broker-user`` (on SASL_PLAINTEXT and SASL_SSL), with Kafka's client
    id for a replica fetcher (``broker-<id>-fetcher-<fetcher id>``). ValueError when this broker has no such
    listener, or no user for a SASL one."""
    listener = config.kafka_inter_broker_listener()
    if listener is None:
        raise ValueError("followers fetching over Kafka's protocol need a Kafka listener")
    sec = config.security
    tls = client_context(sec.ssl_cafile, sec.ssl_certfile, sec.ssl_keyfile) if listener.tls else None
    sasl = None
    if listener.sasl:
        if not sec.inter_broker_user or sec.inter_broker_password is None:
            raise ValueError(f"the SASL listener {listener} needs --inter-broker-user and its password")
        sasl = SaslCredentials(config.sasl_mechanism_inter_broker_protocol, sec.inter_broker_user,
                               sec.inter_broker_password)

    def endpoint(leader_id: int, fetcher_id: int) -> KafkaLeaderEndPoint:
        return KafkaLeaderEndPoint.for_cache(leader_id, cache, listener.name, ssl_context=tls, sasl=sasl,
                                             client_id=f"broker-{config.broker_id}-fetcher-{fetcher_id}")

    return endpoint


class KafkaLeaderEndPoint:
    """One leader (``leader_id``), reached by one fetcher of this broker (see the module docstring)."""

    def __init__(self, leader_id: int, address: LeaderAddress, topic_ids: Callable[[str], uuid.UUID | None], *,
                 client_id: str, ssl_context: ssl.SSLContext | None = None,
                 sasl: SaslCredentials | None = None) -> None:
        self.leader_id = leader_id
        self._address = address
        self._topic_ids = topic_ids
        self._client_id = client_id
        self._ssl = ssl_context
        self._sasl = sasl
        self._channel: KafkaChannel | None = None
        self._ids: dict[str, uuid.UUID] = {}  # the topic ids the last fetch named its topics by

    @classmethod
    def for_cache(cls, leader_id: int, cache: MetadataCache, listener: str, **kwargs: Any) -> KafkaLeaderEndPoint:
        """An endpoint to ``leader_id``'s listener named ``listener``, its address and topic ids from ``cache``."""

        def topic_id(topic: str) -> uuid.UUID | None:
            assignment = cache.topics.get(topic)
            return None if assignment is None else topic_uuid(assignment.topic_id)

        return cls(leader_id, registered_address(cache, listener), topic_id, **kwargs)

    # ------------------------------------------------------------------------------------------------ channel

    async def _ready(self) -> KafkaChannel:
        where = self._address(self.leader_id)
        if where is None:
            raise BrokerNotAvailableError(f"broker {self.leader_id} is not registered with the inter-broker "
                                          "Kafka listener", sent=False)
        channel = self._channel
        if channel is not None and (channel.host, channel.port) != where:
            self._channel = None
            await channel.close()
            channel = None
        if channel is None:
            channel = self._channel = KafkaChannel(
                where[0], where[1], client_id=self._client_id, ssl_context=self._ssl,
                server_hostname=where[0] if self._ssl is not None else None, sasl=self._sasl)
        return channel

    async def close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()

    # -------------------------------------------------------------------------------------------------- fetch

    async def fetch(self, request: SessionRequest, *, replica_id: int, broker_epoch: int,
                    settings: FetchSettings) -> FetchAnswer:
        channel = await self._ready()
        sent_ids = self._ids  # the ids the session's partitions were sent with: forgotten ones are named so
        ids: dict[str, uuid.UUID] = {}
        for topic in {t for t, _ in request.wanted}:
            tid = self._topic_ids(topic)
            if tid is not None:
                ids[topic] = tid
        self._ids = ids
        nameless: dict[TopicPartition, FetchedPartition] = {}
        by_topic: dict[uuid.UUID, list[FetchPartitionAsk]] = {}
        for (topic, partition), d in request.partitions.items():
            tid = ids.get(topic)
            if tid is None:
                nameless[(topic, partition)] = FetchedPartition(error=UnknownTopicIdError(
                    f"topic {topic} has no topic id here; it cannot be fetched by id"))
                continue
            by_topic.setdefault(tid, []).append(FetchPartitionAsk(
                partition, d.current_leader_epoch, d.fetch_offset, d.last_fetched_epoch, d.log_start_offset,
                d.max_bytes))
        forgotten: dict[uuid.UUID, list[int]] = {}
        for topic, partition in request.forgotten:
            tid = sent_ids.get(topic) or ids.get(topic)
            if tid is not None:
                forgotten.setdefault(tid, []).append(partition)
        body = ReplicaFetchRequest(
            replica_id=replica_id, replica_epoch=broker_epoch, max_wait_ms=settings.max_wait_ms,
            min_bytes=settings.min_bytes, max_bytes=settings.max_bytes, session_id=request.session_id,
            session_epoch=request.epoch, topics=list(by_topic.items()), forgotten=list(forgotten.items()))
        answer = await channel.send(FETCH, body, version=FETCH_VERSION)
        names = {tid: name for name, tid in ids.items()}
        partitions: dict[TopicPartition, FetchedPartition] = dict(nameless)
        for topic in answer.responses:
            # An id this round did not send stays unnamed: the session handler takes it as outside the session.
            name = names.get(topic.topic_id) or f"<unknown topic id {topic.topic_id}>"
            for p in topic.partitions:
                error = error_for_code(int(p.error_code), f"{name}-{p.partition_index} on broker {self.leader_id}")
                partitions[(name, int(p.partition_index))] = FetchedPartition(
                    records=p.records or b"", high_watermark=int(p.high_watermark),
                    log_start_offset=int(p.log_start_offset), error=error)
        return FetchAnswer(int(answer.error_code), int(answer.session_id), partitions)

    # -------------------------------------------------------------------------------------------- truncation

    async def epoch_end_offsets(self, asks: Mapping[TopicPartition, tuple[int, int]], *,
                                replica_id: int) -> dict[TopicPartition, EpochEnd]:
        channel = await self._ready()
        cls = codec.request_class(OFFSET_FOR_LEADER_EPOCH, EPOCHS_VERSION)
        part_cls = nested(cls, "OffsetForLeaderPartition")
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), (current, epoch) in asks.items():
            by_topic.setdefault(topic, []).append(make(part_cls, partition=partition, current_leader_epoch=current,
                                                       leader_epoch=epoch))
        body = make(cls, replica_id=replica_id, topics=tuple(
            make(nested(cls, "OffsetForLeaderTopic"), topic=topic, partitions=tuple(parts))
            for topic, parts in by_topic.items()))
        answer = await channel.send(OFFSET_FOR_LEADER_EPOCH, body, version=EPOCHS_VERSION)
        out = {key: EpochEnd(error=UnknownServerError(f"broker {self.leader_id} did not answer for {key}"))
               for key in asks}
        for topic in answer.topics:
            for p in topic.partitions:
                key = (str(topic.topic), int(p.partition))
                if key in out:
                    error = error_for_code(int(p.error_code), f"{key[0]}-{key[1]} on broker {self.leader_id}")
                    out[key] = EpochEnd(int(p.leader_epoch), int(p.end_offset), error)
        return out

    async def log_bounds(self, partition: TopicPartition, *, replica_id: int) -> tuple[int, int]:
        """The leader's (log start offset, log end offset) of one partition.

        Raises:
            BrokerNotAvailableError: the leader is out of reach.
            the typed error the leader answered for the partition (NOT_LEADER_OR_FOLLOWER, say).
        """
        channel = await self._ready()
        start, end = await asyncio.gather(self._list_offset(channel, partition, EARLIEST, replica_id),
                                          self._list_offset(channel, partition, LATEST, replica_id))
        return start, end

    async def _list_offset(self, channel: KafkaChannel, partition: TopicPartition, timestamp: int,
                           replica_id: int) -> int:
        topic, index = partition
        cls = codec.request_class(LIST_OFFSETS, LIST_OFFSETS_VERSION)
        body = make(cls, replica_id=replica_id, isolation_level=0, topics=(make(
            nested(cls, "ListOffsetsTopic"), name=topic, partitions=(make(
                nested(cls, "ListOffsetsPartition"), partition_index=index, current_leader_epoch=-1,
                timestamp=timestamp),)),))
        answer = await channel.send(LIST_OFFSETS, body, version=LIST_OFFSETS_VERSION)
        for t in answer.topics:
            for p in t.partitions:
                if str(t.name) == topic and int(p.partition_index) == index:
                    error = error_for_code(int(p.error_code), f"{topic}-{index} on broker {self.leader_id}")
                    if error is not None:
                        raise error
                    return int(p.offset)
        raise UnknownServerError(f"broker {self.leader_id} did not answer ListOffsets for {topic}-{index}")
