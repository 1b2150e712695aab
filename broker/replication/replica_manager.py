"""The partitions this broker hosts: their logs, roles, follower fetchers, ISR expiry and HW checkpoints.

It hears about partition states from the metadata watcher (``MetadataListener``) and makes each local replica
leader or follower accordingly; HTTP handlers ask it for the partition to produce to or read from.

Followers replicate over one of two transports (the broker's ``replica.fetch.transport``; ``auto`` is ``kafka``
on a broker with a Kafka listener; with either, a leader whose registration lacks the inter-broker listener is
followed over HTTP):

* ``kafka``: Kafka's way. One ``LeaderFetcher`` per (leader broker, fetcher id) sends one multi-partition Fetch
  per round in an incremental fetch session over one connection to the leader's inter-broker Kafka listener
  (broker/replication/fetcher_manager.py; the endpoint, ``leader_endpoints``, is built by the broker from
  broker/kafka/leader_endpoint.py, a front-door module this package does not import);
* ``http`` (no ``leader_endpoints``): one ``FollowerFetcher`` long-poll per follower partition over the HTTP
  replica routes (broker/replication/replica_fetcher.py).

Either way the rules are the same: truncation by leader epoch first, the replication throttle, the leader's ISR
and high-watermark decisions (broker/replication/follower_fetch.py) from the fetch offsets it is sent.

Concurrency: owned by the broker's asyncio loop. Background jobs (ISR expiry, high-watermark checkpoints) are tasks
on the same loop; fetchers are one task per (leader, fetcher id), or one per follower partition over HTTP. Disk
work goes to the data directory's storage executor (``LogManager.executor``), ZooKeeper writes of ISR changes to
the ISR manager, so nothing here blocks the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker.interbroker import InterBrokerClient
from broker.log.checkpoint import read_offsets, write_offsets
from broker.log.manager import LogManager
from broker.metadata.cache import MetadataCache, MetadataListener, PartitionInfo
from broker.replication.fetcher_manager import EndPointFactory, FetcherManager
from broker.replication.isr_manager import IsrManager
from broker.replication.partition import FOLLOWER, LEADER, Partition, ReplicationConfig
from broker.replication.producer_state import DEFAULT_EXPIRATION_MS, ProducerStateManager
from broker.replication.replica_fetcher import FollowerFetcher
from broker.replication.throttle import ReplicationThrottle
from odradek.protocol.errors import (
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    UnknownPartitionError,
    UnknownTopicError,
)
from odradek.protocol.model import BrokerInfo
from zk.client import ZkClient, ZkVersionConflict
from zk.producer_ids import ProducerIdManager

log = logging.getLogger(__name__)

HW_CHECKPOINT = "replication-offset-checkpoint"


@dataclass(frozen=True, slots=True)
class ReplicaLogInfo:
    """One replica's log in a log dir (Kafka's DescribeLogDirs ReplicaInfo). ``offset_lag`` and ``is_future`` are
    Kafka's fields for a replica being moved between log dirs: always 0 and False here (one log dir)."""

    topic: str
    partition: int
    size: int
    log_end_offset: int
    offset_lag: int = 0
    is_future: bool = False


@dataclass(frozen=True, slots=True)
class LogDirInfo:
    """One log dir and its replicas (Kafka's DescribeLogDirs result); ``error`` names a failed dir (never here)."""

    path: str
    replicas: tuple[ReplicaLogInfo, ...]
    error: str | None = None


class ReplicaManager(MetadataListener):
    def __init__(self, broker_id: int, data_dir: Path, zk: ZkClient, cache: MetadataCache, *,
                 replica_lag_time_max_ms: int = 10000, hw_checkpoint_interval_ms: int = 5000,
                 retention_check_interval_ms: int = 300_000, producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS,
                 unsafe_ack_before_isr: bool = False, interbroker: InterBrokerClient | None = None,
                 broker_epoch: Callable[[], int | None] | None = None,
                 leader_endpoints: EndPointFactory | None = None, num_replica_fetchers: int = 1,
                 kafka_leader: Callable[[int], bool] | None = None) -> None:
        """``interbroker``: the broker's one inter-broker client, which HTTP follower fetches go through (only a
        replica manager that never follows, as in unit tests, may go without one). ``broker_epoch``: this
        broker's epoch now (its registration's czxid; None while unregistered), which follower fetches carry.
        ``leader_endpoints``: followers fetch over Kafka's protocol, one fetcher per (leader, fetcher id) with an
        endpoint from this factory, ``num_replica_fetchers`` per leader (Kafka's ``num.replica.fetchers``);
        None: over HTTP, one long-poll per partition. ``kafka_leader``: with ``leader_endpoints``, whether a
        leader can be fetched from over Kafka's protocol (its registration has the inter-broker listener);
        partitions of a leader that cannot are followed over HTTP (None: every leader can)."""
        self.broker_id = broker_id
        self._interbroker = interbroker
        self.data_dir = data_dir
        self._zk = zk
        self.cache = cache
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self._hw_checkpoint_interval_ms = hw_checkpoint_interval_ms
        self.logs = LogManager(data_dir, retention_check_interval_ms=retention_check_interval_ms)
        self.isr_manager = IsrManager(zk.update_isr, conflicts=(ZkVersionConflict,))
        self.throttle = ReplicationThrottle(broker_id, cache)  # KIP-73, both ends of replication
        self.partitions: dict[tuple[str, int], Partition] = {}
        # Idempotent producers: ids from ZooKeeper blocks (InitProducerId on any broker), and how long a
        # producer's state outlives its last write (BrokerConfig.producer_id_expiration_ms).
        self.producer_ids = ProducerIdManager(zk, broker_id)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        # The planted bug of `odradek verify`'s self-test (BrokerConfig.unsafe_ack_before_isr), handed to every
        # partition opened here; never on in production.
        self.unsafe_ack_before_isr = unsafe_ack_before_isr
        self._fetchers: dict[tuple[str, int], asyncio.Task[None]] = {}  # HTTP: one per follower partition
        self._tasks: list[asyncio.Task[None]] = []
        self._hw_checkpoint = read_offsets(data_dir / HW_CHECKPOINT) if (data_dir / HW_CHECKPOINT).exists() else {}
        self.broker_epoch: Callable[[], int | None] = broker_epoch or (lambda: None)
        # Kafka's protocol: one fetcher per (leader, fetcher id), partitions added and removed as states change
        self._kafka_leader = kafka_leader or (lambda _leader: True)
        self.fetcher_manager = None if leader_endpoints is None else FetcherManager(
            broker_id, leader_endpoints, num_fetchers=num_replica_fetchers, broker_epoch=self._broker_epoch_now,
            throttle=self.throttle)

    async def start(self) -> None:
        await asyncio.to_thread(self.logs.startup)
        self._tasks = [
            asyncio.create_task(self._isr_expiry_loop()),
            asyncio.create_task(self._hw_checkpoint_loop()),
        ]

    async def close(self) -> None:
        if self.fetcher_manager is not None:
            await self.fetcher_manager.close()
        for task in [*self._tasks, *self._fetchers.values()]:
            task.cancel()
        for task in [*self._tasks, *self._fetchers.values()]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._fetchers.clear()
        await self.isr_manager.close()
        await self._snapshot_producer_states(expire=False)
        await self.logs.executor.run(HW_CHECKPOINT, self._write_hw, self._hw_snapshot())
        await asyncio.to_thread(self.logs.close)

    # ------------------------------------------------------------------------------------------- lookups

    def leader_url(self, broker_id: int) -> str | None:
        return self.cache.leader_url(broker_id)

    def partition_info(self, topic: str, partition: int) -> PartitionInfo:
        if topic not in self.cache.topics:
            raise UnknownTopicError(f"topic '{topic}' does not exist")
        if partition not in self.cache.topics[topic].partitions:
            raise UnknownPartitionError(
                f"partition {partition} of topic '{topic}' does not exist "
                f"(it has {self.cache.partition_count(topic)} partitions)"
            )
        info = self.cache.partitions.get((topic, partition))
        if info is None or info.leader < 0:
            raise LeaderNotAvailableError(f"{topic}-{partition} has no leader right now")
        return info

    def leader_partition(self, topic: str, partition: int) -> Partition:
        """The local replica if this broker leads it; NOT_LEADER_OR_FOLLOWER (naming the leader) otherwise."""
        info = self.partition_info(topic, partition)
        part = self.partitions.get((topic, partition))
        if part is None or part.role != LEADER:
            if part is not None:
                raise part.not_leader()
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} is not the leader of {topic}-{partition}; broker {info.leader} is",
                leader=info.leader, leader_url=self.leader_url(info.leader), leader_epoch=info.leader_epoch,
            )
        return part

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> int | None:
        """Kafka's ListOffsets by time on a partition this broker leads, from the time index: the first offset
        whose timestamp is at or after ``timestamp``, among what consumers may read (below the high watermark);
        None when there is none. NOT_LEADER_OR_FOLLOWER (naming the leader) when this broker does not lead it."""
        part = self.leader_partition(topic, partition)
        found = await asyncio.to_thread(part.log.offset_for_timestamp, timestamp)
        return found if found is not None and found < part.high_watermark else None

    async def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """Kafka's DeleteRecords on a partition this broker leads: the log start offset moves up to ``offset``
        (-1: the high watermark); the new log start is returned (the leader's low watermark; each follower moves
        its own on its next fetch). NOT_LEADER_OR_FOLLOWER (naming the leader) when this broker does not lead
        it; see ``Partition.delete_records`` for the other refusals."""
        return await self.leader_partition(topic, partition).delete_records(offset)

    def describe_log_dirs(self) -> list[LogDirInfo]:
        """Kafka's DescribeLogDirs: this broker's one log dir and every replica log in it, with its size and log
        end offset (what a reassignment's progress is measured by), sorted by partition. Reads in-memory state."""
        replicas = tuple(ReplicaLogInfo(topic, partition, lg.size_in_bytes, lg.log_end_offset)
                         for (topic, partition), lg in sorted(self.logs.all_logs().items()))
        return [LogDirInfo(str(self.data_dir), replicas)]

    # --------------------------------------------------------------------------------- metadata listener

    async def on_brokers(self, brokers: dict[int, BrokerInfo]) -> None:
        return None

    async def on_partition(self, info: PartitionInfo, config: dict[str, str]) -> None:
        key = (info.topic, info.partition)
        if self.broker_id not in info.replicas:
            # Reassigned away (or a stray log from before a restart): stop and delete our copy, as Kafka's
            # StopReplica(delete=true) does.
            if key in self.partitions or self.logs.get_log(*key) is not None:
                await self._remove_replica(key, "no longer a replica")
                log.info("%s-%d: broker %d is no longer a replica; its copy is deleted", *key, self.broker_id)
            return
        part = self.partitions.get(key)
        if part is None:
            part = await self._open_partition(info.topic, info.partition, config)
        change = await part.apply(info, self._replication_config(config))
        if change is not None:
            log.info("%s-%d: %s for leader epoch %d (leader %d, isr %s)", info.topic, info.partition, change,
                     info.leader_epoch, info.leader, list(info.isr))
        if part.role == FOLLOWER and self.fetcher_manager is not None and self._kafka_leader(info.leader):
            await self._stop_http_fetcher(key)
            await self.fetcher_manager.follow(part, restart=change is not None)
        elif part.role == FOLLOWER:
            fetcher = self._fetchers.get(key)
            if change is not None or fetcher is None or fetcher.done():
                await self._stop_fetcher(key)
                runner = FollowerFetcher(part, self._client(), self.broker_id,
                                         throttle=self.throttle, broker_epoch=self.broker_epoch)
                self._fetchers[key] = asyncio.create_task(runner.run())
        else:
            await self._stop_fetcher(key)

    async def on_topic_config(self, topic: str, config: dict[str, str]) -> None:
        await asyncio.to_thread(self.logs.update_topic_config, topic, config)
        for (t, _), part in self.partitions.items():
            if t == topic:
                part.config = self._replication_config(config)

    async def on_topic_deleted(self, topic: str) -> None:
        for key in [k for k in self.partitions if k[0] == topic]:
            await self._remove_replica(key, "topic deleted")
        log.info("topic %s deleted from broker %d", topic, self.broker_id)

    async def _remove_replica(self, key: tuple[str, int], reason: str) -> None:
        """Stop the fetcher, fence the replica, delete its log (renamed now, removed after file.delete.delay.ms)."""
        await self._stop_fetcher(key)
        part = self.partitions.pop(key, None)
        if part is not None:
            part.fence(reason)
        await asyncio.to_thread(self.logs.delete_log, key[0], key[1])
        self._hw_checkpoint.pop(key, None)

    def on_session_lost(self) -> None:
        """Stop acknowledging as leader at once: a new leader may already have been elected."""
        for part in self.partitions.values():
            part.fence("ZooKeeper session lost")

    # ----------------------------------------------------------------------------------------- internals

    def _broker_epoch_now(self) -> int | None:
        return self.broker_epoch()

    def _client(self) -> InterBrokerClient:
        assert self._interbroker is not None, "a follower needs the broker's inter-broker client"
        return self._interbroker

    def _replication_config(self, config: dict[str, str]) -> ReplicationConfig:
        return ReplicationConfig(
            min_insync_replicas=int(config.get("min.insync.replicas", "1")),
            replica_lag_time_max_ms=self.replica_lag_time_max_ms,
        )

    async def _open_partition(self, topic: str, partition: int, config: dict[str, str]) -> Partition:
        log_ = await asyncio.to_thread(self.logs.get_or_create_log, topic, partition, config)
        log_.high_watermark = min(self._hw_checkpoint.get((topic, partition), 0), log_.log_end_offset)
        part = Partition(topic, partition, self.broker_id, log_, self.isr_manager, self.leader_url,
                         storage=self.logs.executor, unsafe_ack_before_isr=self.unsafe_ack_before_isr)
        state = ProducerStateManager(log_.dir, self.producer_id_expiration_ms)
        await self.logs.executor.run((topic, partition), state.load, log_)  # snapshot + replay of the tail
        part.producer_state = state
        self.partitions[(topic, partition)] = part
        return part

    async def _stop_fetcher(self, key: tuple[str, int]) -> None:
        if self.fetcher_manager is not None:
            await self.fetcher_manager.unfollow(key)
        await self._stop_http_fetcher(key)

    async def _stop_http_fetcher(self, key: tuple[str, int]) -> None:
        task = self._fetchers.pop(key, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _isr_expiry_loop(self) -> None:
        while True:
            await asyncio.sleep(self.replica_lag_time_max_ms / 2000)
            for part in list(self.partitions.values()):
                if part.role == LEADER:
                    try:
                        part.maybe_shrink_isr()
                    except Exception:
                        log.exception("ISR expiry of %s-%d failed", part.topic, part.partition)

    def _hw_snapshot(self) -> dict[tuple[str, int], int]:
        """On the loop: the offsets to checkpoint (the partition map is the loop's, not the writer thread's)."""
        for key, part in self.partitions.items():
            self._hw_checkpoint[key] = part.high_watermark
        return dict(self._hw_checkpoint)

    def _write_hw(self, offsets: dict[tuple[str, int], int]) -> None:
        try:
            write_offsets(self.data_dir / HW_CHECKPOINT, offsets)
        except OSError as e:
            log.warning("could not write the high-watermark checkpoint: %s", e)

    async def _hw_checkpoint_loop(self) -> None:
        while True:
            await asyncio.sleep(self._hw_checkpoint_interval_ms / 1000)
            await self.logs.executor.run(HW_CHECKPOINT, self._write_hw, self._hw_snapshot())
            await self._snapshot_producer_states(expire=True)

    async def _snapshot_producer_states(self, expire: bool) -> None:
        """Expire idle producers and snapshot each partition's producer state that changed (Kafka snapshots
        at segment rolls; a periodic snapshot bounds the replay on open the same way)."""
        for part in list(self.partitions.values()):
            try:
                await part.snapshot_producer_state(expire)
            except Exception as e:  # a full disk must not stop the loop; the log replays on open instead
                log.warning("%s-%d: producer-state snapshot failed: %s", part.topic, part.partition, e)
