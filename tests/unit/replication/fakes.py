"""In-memory collaborators for the replication core's unit tests: an ISR writer the test answers by hand, a
clock it moves, and partition states to apply. The log is the real one, on ``tmp_path``."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.log import Log
from broker.metadata.cache import PartitionInfo
from broker.replication.isr_manager import IsrChange, IsrResult
from broker.replication.partition import Partition, ReplicationConfig
from odradek.protocol.records import encode_batch

TOPIC = "t"


class Clock:
    """Monotonic seconds the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance_ms(self, ms: float) -> None:
        self.now += ms / 1000


class FakeIsrManager:
    """Keeps submitted changes; the test decides each one's fate (written, conflict, failure)."""

    def __init__(self) -> None:
        self.changes: list[IsrChange] = []
        self.version = 100

    def submit(self, change: IsrChange) -> bool:
        if self.changes:
            return False
        self.changes.append(change)
        return True

    def succeed(self) -> IsrChange:
        change = self.changes.pop(0)
        self.version += 1
        change.callback(IsrResult(change.state, zk_version=self.version))
        return change

    def conflict(self) -> IsrChange:
        change = self.changes.pop(0)
        change.callback(IsrResult(change.state, error=RuntimeError("version"), conflict=True))
        return change


def info(leader: int, epoch: int, isr: tuple[int, ...], replicas: tuple[int, ...] = (1, 2, 3),
         version: int = 0, partition: int = 0) -> PartitionInfo:
    return PartitionInfo(TOPIC, partition, replicas, leader, epoch, isr, 1, version)


def batch(n: int = 1, value: bytes = b"v") -> bytearray:
    return bytearray(encode_batch([(None, value, 1, ())] * n))


def make_partition(tmp_path: Path, broker_id: int = 1, clock: Clock | None = None,
                   isr_manager: FakeIsrManager | None = None) -> tuple[Partition, FakeIsrManager, Clock]:
    clock = clock or Clock()
    isr_manager = isr_manager or FakeIsrManager()
    log = Log.open(tmp_path / f"{TOPIC}-0-b{broker_id}")
    log.high_watermark = 0  # as ReplicaManager does from its checkpoint (None means "the log end")
    part = Partition(TOPIC, 0, broker_id, log, isr_manager, lambda b: f"http://broker-{b}", now=clock)
    return part, isr_manager, clock


def config(min_isr: int = 1, lag_ms: int = 10_000) -> ReplicationConfig:
    return ReplicationConfig(min_insync_replicas=min_isr, replica_lag_time_max_ms=lag_ms)


async def settle() -> None:
    """Let the loop run the callbacks and tasks an action scheduled (a few turns, no timer)."""
    for _ in range(5):
        await asyncio.sleep(0)
