"""Produce as a service: partition records, encode one batch per partition, append locally or forward.

Why here and not in the HTTP layer: the REST-proxy JSON produce takes records for many partitions in one
request; choosing partitions (Kafka's default partitioner), encoding batches, and going to each partition's
leader is broker work. The HTTP handler only parses the body and renders the per-record results.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from broker.produce import forwarding as forward
from broker.replication.replica_manager import ReplicaManager
from odradek.protocol.errors import InvalidRequestError, NotLeaderOrFollowerError, OdradekError, UnknownPartitionError
from odradek.protocol.partitioner import murmur2, to_positive
from odradek.protocol.records import encode_batch

Row = tuple[bytes | None, bytes | None, int | None, list[tuple[str, bytes | None]]]  # key, value, timestamp, headers

ACKS = {"0": 0, "1": 1, "all": -1, "-1": -1}


def parse_acks(raw: str | None) -> int:
    acks = ACKS.get((raw or "all").lower())
    if acks is None:
        raise InvalidRequestError(f"acks must be 0, 1 or all, not {raw!r}")
    return acks


@dataclass(frozen=True, slots=True)
class PartitionResult:
    partition: int
    base_offset: int | None
    leader: int | None
    error: OdradekError | None = None


class ProduceService:
    def __init__(self, replicas: ReplicaManager, session: aiohttp.ClientSession) -> None:
        self._replicas = replicas
        self._session = session
        self._round_robin: dict[str, itertools.count[int]] = {}

    def choose_partitions(self, topic: str, rows: Sequence[Row], named: Sequence[int | None] | None,
                          fixed: int | None) -> list[int]:
        """Each record's partition: the path's, else the one it names, else Kafka's default partitioner."""
        count = self._replicas.cache.partition_count(topic)
        if count == 0:
            self._replicas.partition_info(topic, 0)  # raises UNKNOWN_TOPIC with the right message
        if fixed is not None:
            self._check_partition(topic, fixed, count)
            return [fixed] * len(rows)
        counter = self._round_robin.setdefault(topic, itertools.count(random.randrange(1 << 16)))
        chosen = [
            to_positive(murmur2(key)) % count if key is not None else next(counter) % count
            for key, _value, _ts, _headers in rows
        ]
        if named is not None:
            for i, partition in enumerate(named):
                if partition is not None:
                    self._check_partition(topic, partition, count)
                    chosen[i] = partition
        return chosen

    @staticmethod
    def _check_partition(topic: str, partition: int, count: int) -> None:
        if partition >= count:
            raise UnknownPartitionError(f"partition {partition} of topic '{topic}' does not exist "
                                        f"(it has {count} partitions)")

    async def produce(self, topic: str, rows: Sequence[Row], partitions: Sequence[int], acks: int,
                      timeout_ms: int) -> dict[int, PartitionResult]:
        """One batch per partition, appended concurrently; per-partition errors are returned, not raised."""
        now_ms = int(time.time() * 1000)
        if len(set(partitions)) == 1:
            groups: dict[int, Sequence[Row]] = {partitions[0]: rows}
        else:
            grouped: dict[int, list[Row]] = {}
            for row, p in zip(rows, partitions, strict=True):
                grouped.setdefault(p, []).append(row)
            groups = dict(grouped)
        batches = {p: encode_batch(group, now_ms=now_ms) for p, group in groups.items()}
        results = await asyncio.gather(*(self.append(topic, p, data, acks, timeout_ms) for p, data in batches.items()))
        return {r.partition: r for r in results}

    async def append(self, topic: str, partition: int, data: bytes, acks: int, timeout_ms: int) -> PartitionResult:
        try:
            try:
                part = self._replicas.leader_partition(topic, partition)
            except NotLeaderOrFollowerError as e:
                leader_url = e.details.get("leader_url")
                if not leader_url:
                    raise
                reply = await forward.produce_batches(self._session, leader_url, topic, partition, data,
                                                      {0: "0", 1: "1", -1: "all"}[acks], timeout_ms)
                return PartitionResult(partition, reply.get("base_offset"), reply.get("leader"))
            result = await part.append(bytearray(data), acks, timeout_ms)
            return PartitionResult(partition, result.first_offset, self._replicas.broker_id)
        except OdradekError as e:
            return PartitionResult(partition, None, None, e)
