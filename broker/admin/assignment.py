"""Kafka's replica assignment (``AdminUtils.assignReplicasToBrokers``), as pure functions.

Leaders go round-robin over the brokers from a start index, and followers are staggered by a shift that grows
every time the partitions wrap around the broker list, so two partitions that share a leader do not share all
their followers. With racks, the broker list alternates racks and each partition's replicas land on distinct
racks first. ``start_index`` and ``shift`` are random in Kafka; tests pass them fixed.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from odradek.protocol.errors import InvalidPartitionsError, InvalidReplicationFactorError, InvalidRequestError


def assign_replicas(
    brokers: Sequence[int],
    partitions: int,
    replication_factor: int,
    *,
    racks: Mapping[int, str | None] | None = None,
    start_index: int = -1,
    start_partition: int = 0,
    shift: int = -1,
) -> dict[int, list[int]]:
    if partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}."
        )
    rack_of = {b: (racks or {}).get(b) for b in brokers}
    with_rack = [b for b in brokers if rack_of[b] is not None]
    if with_rack and len(with_rack) != len(brokers):
        raise InvalidRequestError("Not all brokers have rack information for replica rack aware assignment.")
    n = len(brokers)
    rng = random.Random()
    first_index = start_index if start_index >= 0 else rng.randrange(n)
    next_shift = shift if shift >= 0 else rng.randrange(n)
    if with_rack:
        return _rack_aware(brokers, rack_of, partitions, replication_factor, first_index, start_partition, next_shift)
    ordered = sorted(brokers)
    result: dict[int, list[int]] = {}
    for p in range(start_partition, start_partition + partitions):
        if p > 0 and p % n == 0:
            next_shift += 1
        first = (p + first_index) % n
        replicas = [ordered[first]]
        for j in range(replication_factor - 1):
            replicas.append(ordered[_replica_index(first, next_shift, j, n)])
        result[p] = replicas
    return result


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def _rack_aware(
    brokers: Sequence[int],
    rack_of: Mapping[int, str | None],
    partitions: int,
    replication_factor: int,
    start_index: int,
    start_partition: int,
    shift: int,
) -> dict[int, list[int]]:
    by_rack: dict[str, list[int]] = {}
    for b in sorted(brokers):
        by_rack.setdefault(str(rack_of[b]), []).append(b)
    alternating: list[int] = []
    for i in range(max(len(v) for v in by_rack.values())):
        for rack in sorted(by_rack):
            if i < len(by_rack[rack]):
                alternating.append(by_rack[rack][i])
    n = len(alternating)
    n_racks = len(by_rack)
    result: dict[int, list[int]] = {}
    for p in range(start_partition, start_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        leader = alternating[first]
        replicas = [leader]
        racks_used = {rack_of[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                candidate = alternating[_replica_index(first, shift * n_racks, k, n)]
                k += 1
                rack = rack_of[candidate]
                if candidate in brokers_used:
                    continue
                if rack in racks_used and len(racks_used) < n_racks:
                    continue
                break
            replicas.append(candidate)
            racks_used.add(rack_of[candidate])
            brokers_used.add(candidate)
        result[p] = replicas
    return result
