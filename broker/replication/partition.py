"""One partition replica on this broker: leader or follower, its ISR, high watermark, acks and waiters.

This is where the replication promise is kept (Kafka's ``cluster/Partition.scala``):

* The leader stamps its leader epoch on every batch it appends and records ``(epoch, log end)`` in the
  leader-epoch cache when it becomes leader, so followers can find where their history diverged (KIP-101/279).
* The high watermark is the least log end offset over the ISR; it only moves forward. Consumers read below it;
  followers read up to the log end.
* A follower's fetch offset is its acknowledgement. A follower that has not caught up to the leader's log end
  for ``replica.lag.time.max.ms`` leaves the ISR; one that reaches the high watermark (and the start of the
  current epoch) rejoins. The leader changes the ISR with a conditional ZooKeeper write on the state znode's
  version and applies the change locally only after the write succeeded, so a leader deposed meanwhile (whose
  write fails) can never shrink the ISR to itself and acknowledge alone. The ISR is never empty.
* acks=all: refused before appending when the ISR is smaller than ``min.insync.replicas``
  (NOT_ENOUGH_REPLICAS); acknowledged once the high watermark passes the batch; NOT_ENOUGH_REPLICAS_AFTER_APPEND
  if the ISR shrank below the minimum meanwhile; NOT_LEADER_OR_FOLLOWER if leadership moved meanwhile.
* A replica that is no longer leader (a newer leader epoch seen, or its ZooKeeper session lost) stops
  acknowledging at once: every waiting produce fails with NOT_LEADER_OR_FOLLOWER naming the new leader.

Concurrency: owned by the broker's asyncio loop (no locks); the ``Log`` underneath is thread-safe for its own
background maintenance.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from broker.log.log import AppendResult, Log, ReadResult
from broker.metadata.cache import PartitionInfo
from odradek.protocol.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
)
from odradek.protocol.model import LeaderAndIsr

LEADER = "leader"
FOLLOWER = "follower"
OFFLINE = "offline"

IsrWriter = Callable[[str, int, LeaderAndIsr, int], Awaitable[int]]
LeaderUrl = Callable[[int], str | None]


@dataclass
class FollowerProgress:
    """The leader's view of one follower (Kafka's ``Replica`` fetch state)."""

    log_end_offset: int = -1
    last_caught_up_ms: float = 0.0
    last_fetch_ms: float = 0.0
    last_fetch_leader_leo: int = -1


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    min_insync_replicas: int = 1
    replica_lag_time_max_ms: int = 10000


class Partition:
    def __init__(self, topic: str, partition: int, broker_id: int, log: Log, write_isr: IsrWriter,
                 leader_url: LeaderUrl, now: Callable[[], float] = time.monotonic) -> None:
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        self.log = log
        self._write_isr = write_isr
        self._leader_url = leader_url
        self._now = now
        self.role = OFFLINE
        self.info: PartitionInfo | None = None
        self.leader = -1
        self.leader_epoch = -1
        self.isr: tuple[int, ...] = ()
        self.replicas: tuple[int, ...] = ()
        self.zk_version = -1
        self.epoch_start_offset = 0
        self.config = ReplicationConfig()
        self.followers: dict[int, FollowerProgress] = {}
        self._hw_advanced = asyncio.Event()  # replaced on every advance: wakes consumers and acks=all waiters
        self._appended = asyncio.Event()  # replaced on every append: wakes follower long-polls
        self._isr_change_in_flight = False
        self._background: set[asyncio.Task[None]] = set()  # held so a running ISR change is not collected

    # ------------------------------------------------------------------------------------------- offsets

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def _set_high_watermark(self, hw: int) -> None:
        hw = min(hw, self.log.log_end_offset)
        if hw > self.log.high_watermark:
            self.log.high_watermark = hw
            self._wake_hw_waiters()

    # -------------------------------------------------------------------------------------- role changes

    def apply(self, info: PartitionInfo, config: ReplicationConfig) -> str | None:
        """Apply a partition state read from ZooKeeper; returns the role change ("leader", "follower") if any.

        A state with an older leader epoch than one already applied is stale and ignored.
        """
        self.config = config
        if self.info is not None and info.leader_epoch < self.leader_epoch:
            return None
        new_epoch = info.leader_epoch != self.leader_epoch
        self.info = info
        self.replicas = info.replicas
        self.zk_version = info.zk_version
        self.isr = info.isr
        old_role = self.role
        self.leader = info.leader
        self.leader_epoch = info.leader_epoch
        if info.leader == self.broker_id:
            self.role = LEADER
            if new_epoch or old_role != LEADER:
                self._become_leader()
                return LEADER
            self._maybe_increment_hw()
            return None
        self.role = FOLLOWER if self.broker_id in info.replicas and info.leader >= 0 else OFFLINE
        if new_epoch or old_role != self.role:
            self._wake_all()
            return self.role if self.role == FOLLOWER else None
        return None

    def _become_leader(self) -> None:
        leo = self.log.log_end_offset
        self.log.epoch_cache.assign(self.leader_epoch, leo)
        self.epoch_start_offset = leo
        now = self._now() * 1000
        # Followers' positions are unknown until they fetch; those in the ISR count as caught up now, so
        # they are not dropped before they had a chance to fetch from us.
        self.followers = {
            r: FollowerProgress(last_caught_up_ms=now if r in self.isr else 0.0)
            for r in self.replicas if r != self.broker_id
        }
        self._wake_all()
        self._maybe_increment_hw()

    def fence(self, reason: str = "") -> None:
        """Stop acting as leader now (session lost): waiting produces fail, new ones are refused."""
        if self.role == LEADER:
            self.role = OFFLINE
            self.leader = -1
            self._wake_all()

    def _wake_all(self) -> None:
        """A role or epoch change: every waiter re-checks whether it may still proceed."""
        self._wake_hw_waiters()
        self._wake_followers()

    def _wake_hw_waiters(self) -> None:
        """Consumers' long-polls and acks=all waiters (who re-check the high watermark and the ISR size)."""
        self._hw_advanced.set()
        self._hw_advanced = asyncio.Event()

    def _wake_followers(self) -> None:
        self._appended.set()
        self._appended = asyncio.Event()

    def not_leader(self) -> NotLeaderOrFollowerError:
        url = self._leader_url(self.leader) if self.leader >= 0 else None
        return NotLeaderOrFollowerError(
            f"broker {self.broker_id} is not the leader of {self.topic}-{self.partition}"
            + (f"; broker {self.leader} is" if self.leader >= 0 else "; it has no leader now"),
            leader=self.leader, leader_url=url, leader_epoch=self.leader_epoch,
        )

    # ----------------------------------------------------------------------------------------- produce

    async def append(self, batches: bytes | bytearray, acks: int, timeout_ms: int) -> AppendResult:
        """Append as leader and wait as ``acks`` asks (0 and 1: after the local append; -1: committed)."""
        if self.role != LEADER:
            raise self.not_leader()
        epoch = self.leader_epoch
        if acks == -1 and len(self.isr) < self.config.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"the ISR of {self.topic}-{self.partition} is {list(self.isr)}, smaller than "
                f"min.insync.replicas={self.config.min_insync_replicas}; nothing was written"
            )
        result = self.log.append(batches, leader_epoch=epoch)
        self._wake_followers()
        self._maybe_increment_hw()
        if acks != -1:
            return result
        await self._wait_committed(result.last_offset + 1, epoch, timeout_ms)
        return result

    async def _wait_committed(self, offset: int, epoch: int, timeout_ms: int) -> None:
        deadline = self._now() + timeout_ms / 1000
        while True:
            if self.role != LEADER or self.leader_epoch != epoch:
                raise self.not_leader()
            if self.high_watermark >= offset:
                if len(self.isr) < self.config.min_insync_replicas:
                    raise NotEnoughReplicasAfterAppendError(
                        f"the ISR of {self.topic}-{self.partition} shrank to {list(self.isr)} before the write "
                        "was replicated; it is in the log and may survive"
                    )
                return
            remaining = deadline - self._now()
            if remaining <= 0:
                raise RequestTimedOutError(
                    f"{self.topic}-{self.partition}: not replicated to the ISR {list(self.isr)} within {timeout_ms} ms"
                )
            event = self._hw_advanced
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)

    # -------------------------------------------------------------------------------------------- fetch

    async def read(self, offset: int, max_bytes: int, timeout_ms: int) -> ReadResult:
        """A consumer's read: below the high watermark, long-polling up to ``timeout_ms`` at its end."""
        if self.role != LEADER:
            raise self.not_leader()
        hw = self.high_watermark
        if offset < self.log.log_start_offset or offset > hw:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.topic}-{self.partition}: "
                f"valid offsets are {self.log.log_start_offset} to {hw}",
                log_start_offset=self.log.log_start_offset, high_watermark=hw,
            )
        if offset == hw and timeout_ms > 0:
            event = self._hw_advanced
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout_ms / 1000)
            if self.role != LEADER:
                raise self.not_leader()
        return self.log.read(offset, max_bytes, max_offset=self.high_watermark)

    async def read_for_follower(self, replica_id: int, offset: int, fetch_epoch: int, max_bytes: int,
                                timeout_ms: int) -> ReadResult:
        """A follower's fetch: up to the log end; its offset is its acknowledgement of everything before."""
        self._check_follower_fetch(replica_id, fetch_epoch)
        self._record_follower_fetch(replica_id, offset)
        if offset == self.log.log_end_offset and timeout_ms > 0:
            event = self._appended
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout_ms / 1000)
            self._check_follower_fetch(replica_id, fetch_epoch)
        return self.log.read(offset, max_bytes)

    def _check_follower_fetch(self, replica_id: int, fetch_epoch: int) -> None:
        if fetch_epoch > self.leader_epoch or self.role != LEADER:
            # The follower knows a newer leader than we do: we are stale. Stop acknowledging right away.
            if fetch_epoch > self.leader_epoch:
                self.fence("a follower fetched with a newer leader epoch")
            raise self.not_leader()
        if fetch_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"fetch epoch {fetch_epoch} is older than the leader epoch {self.leader_epoch}",
                leader_epoch=self.leader_epoch,
            )
        if replica_id not in self.followers:
            raise NotLeaderOrFollowerError(f"broker {replica_id} is not a replica of {self.topic}-{self.partition}")

    def epoch_end_offset(self, epoch: int) -> tuple[int, int]:
        if self.role != LEADER:
            raise self.not_leader()
        return self.log.epoch_cache.end_offset_for(epoch, self.log.log_end_offset)

    # --------------------------------------------------------------------------------------------- ISR

    def _record_follower_fetch(self, replica_id: int, offset: int) -> None:
        now = self._now() * 1000
        progress = self.followers[replica_id]
        leo = self.log.log_end_offset
        if offset >= leo:
            progress.last_caught_up_ms = now
        elif offset >= progress.last_fetch_leader_leo >= 0:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.log_end_offset = offset
        progress.last_fetch_ms = now
        progress.last_fetch_leader_leo = leo
        if (replica_id not in self.isr and offset >= self.high_watermark
                and offset >= self.epoch_start_offset):
            task = asyncio.get_running_loop().create_task(self._change_isr((*self.isr, replica_id)))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        self._maybe_increment_hw()

    def _maybe_increment_hw(self) -> None:
        if self.role != LEADER:
            return
        leo = self.log.log_end_offset
        ends = [leo]
        for r in self.isr:
            if r != self.broker_id:
                progress = self.followers.get(r)
                ends.append(progress.log_end_offset if progress is not None else -1)
        self._set_high_watermark(min(ends))

    def out_of_sync_followers(self) -> list[int]:
        now = self._now() * 1000
        leo = self.log.log_end_offset
        lag = self.config.replica_lag_time_max_ms
        return [
            r for r in self.isr
            if r != self.broker_id
            and (p := self.followers.get(r)) is not None
            and p.log_end_offset != leo
            and now - p.last_caught_up_ms > lag
        ]

    async def maybe_shrink_isr(self) -> None:
        if self.role != LEADER or self._isr_change_in_flight:
            return
        lagging = self.out_of_sync_followers()
        if lagging:
            await self._change_isr(tuple(r for r in self.isr if r not in lagging))

    async def _change_isr(self, new_isr: tuple[int, ...]) -> None:
        if self.role != LEADER or self._isr_change_in_flight or set(new_isr) == set(self.isr) or not new_isr:
            return
        self._isr_change_in_flight = True
        epoch = self.leader_epoch
        try:
            info = self.info
            assert info is not None
            state = LeaderAndIsr(self.broker_id, epoch, sorted(new_isr, key=self.replicas.index),
                                 info.controller_epoch)
            try:
                version = await self._write_isr(self.topic, self.partition, state, self.zk_version)
            except Exception:
                return  # a controller decision came first; its state will reach us through the watch
            if self.leader_epoch == epoch and self.role == LEADER:
                self.isr = tuple(state.isr)
                self.zk_version = version
                self._maybe_increment_hw()
                self._wake_hw_waiters()  # a shrink can make acks=all waiters fail
        finally:
            self._isr_change_in_flight = False

    # -------------------------------------------------------------------------------------------- follower

    def append_replicated(self, data: bytes, leader_hw: int) -> None:
        if data:
            self.log.append_replicated(data)
        self._set_follower_hw(leader_hw)

    def _set_follower_hw(self, leader_hw: int) -> None:
        hw = min(leader_hw, self.log.log_end_offset)
        if hw > self.log.high_watermark:
            self.log.high_watermark = hw
