"""Leader elections an operator asks for: which partitions may be named, and the preferred election request.

A preferred leader election is, as in Kafka's ZooKeeper route, a write of ``/admin/preferred_replica_election``
that the controller watches and clears when done; any broker may write it, and a second request while one is
pending is refused (nothing written). The unclean election is the controller's own event (broker/controller/);
both name partitions, which must exist in this broker's metadata.

``existing`` reads only the cache (call it on the loop); ``request_preferred`` blocks on ZooKeeper and front
doors call it with ``asyncio.to_thread`` (as broker/admin/topics.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from odradek.protocol.errors import UnknownPartitionError
from odradek.protocol.model import TopicPartition

if TYPE_CHECKING:
    from broker.metadata.cache import MetadataCache
    from zk.client import ZkClient


class ElectionAdmin:
    def __init__(self, zk: ZkClient, cache: MetadataCache) -> None:
        self._zk = zk
        self._cache = cache

    def existing(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """``partitions`` as a list, each checked to exist (UNKNOWN_TOPIC_OR_PARTITION otherwise). May be lazy (a
        decoder raising on a malformed item): items are checked in order, so the first bad one is reported."""
        out: list[TopicPartition] = []
        for tp in partitions:
            assignment = self._cache.topics.get(tp.topic)
            if assignment is None or tp.partition not in assignment.partitions:
                raise UnknownPartitionError(f"{tp.topic}-{tp.partition} does not exist")
            out.append(tp)
        return out

    def request_preferred(self, partitions: list[TopicPartition]) -> bool:
        """Ask the controller for a preferred leader election of ``partitions`` (empty: all of them); False
        when one is already pending."""
        return self._zk.request_preferred_election(partitions)
