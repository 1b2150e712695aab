"""Producer ids, claimed from ZooKeeper in blocks (Kafka's ``ZkProducerIdManager``, KIP-98).

Why blocks: an id must be unique across the cluster and across restarts, and any broker may hand one out
(InitProducerId without a transactional id goes to any broker). One conditional write of
``/latest_producer_id_block`` per 1000 ids keeps ZooKeeper off the per-producer path. A broker that dies
wastes the rest of its block, which is fine: ids are int64.

Concurrency: ``next_id`` is thread-safe (a lock around the in-memory cursor; ZooKeeper I/O happens under it
only when a block runs out). Blocking: asyncio callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import threading

from zk.client import ZkClient
from zk.znodes import LatestProducerIdBlockZNode

BLOCK_SIZE = 1000
MAX_PRODUCER_ID = 2**63 - 1


class ProducerIdExhaustedError(RuntimeError):
    """Every int64 producer id has been handed out (never in practice)."""


class ProducerIdManager:
    def __init__(self, zk: ZkClient, broker_id: int, block_size: int = BLOCK_SIZE) -> None:
        self._zk = zk
        self._broker_id = broker_id
        self._block_size = block_size
        self._lock = threading.Lock()
        self._next = 0
        self._end = -1  # inclusive end of the block held; -1: none yet

    def next_id(self) -> int:
        """A producer id no other broker (nor this one, before a restart) has handed out."""
        with self._lock:
            if self._next > self._end:
                self._next, self._end = self._claim_block()
            pid = self._next
            self._next += 1
            return pid

    def _claim_block(self) -> tuple[int, int]:
        """Write the block after the latest one, conditionally on the node's version (re-read on a race; a
        retried write whose first attempt succeeded claims the next block: a wasted block, never a shared one)."""

        def claim(data: bytes) -> tuple[bytes, tuple[int, int]]:
            latest = LatestProducerIdBlockZNode.decode(data)
            start = 0 if latest is None else latest[2] + 1
            end = start + self._block_size - 1
            if end > MAX_PRODUCER_ID:
                raise ProducerIdExhaustedError("the producer id space is exhausted")
            return LatestProducerIdBlockZNode.encode(self._broker_id, start, end), (start, end)

        return self._zk.update_conditionally(LatestProducerIdBlockZNode.path, claim)
