"""Partition reassignment: validation against this broker's metadata, and the requests written to ZooKeeper.

As in Kafka's ZooKeeper route, any broker may take a reassignment: the request is a write of
``/admin/reassign_partitions`` (zk/client.py), which the controller watches and carries out; no broker
has to own it. Moves are checked here against the metadata cache (the partitions exist, the replicas are
registered brokers, nothing is listed twice), so a bad request is refused before anything is written.

``validate_moves`` reads only the cache (call it on the loop); the other methods block on ZooKeeper, and
front doors call them with ``asyncio.to_thread`` (as broker/admin/topics.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.protocol.errors import InvalidRequestError, UnknownPartitionError, UnknownTopicError
from odradek.protocol.model import TopicPartition

if TYPE_CHECKING:
    from broker.metadata.cache import MetadataCache
    from zk.client import ZkClient

Moves = dict[TopicPartition, list[int]]


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    """A running move: its target replicas, and (from the topic's assignment, KIP-455) the replicas being added
    and removed; both empty when this broker's metadata does not show the move yet."""

    partition: TopicPartition
    replicas: list[int]
    adding_replicas: list[int]
    removing_replicas: list[int]


@dataclass(frozen=True, slots=True)
class CancelledReassignments:
    """``cancelled``: the moves reverted (sorted); ``not_running``: the partitions asked for that had none."""

    cancelled: list[TopicPartition]
    not_running: list[TopicPartition]


class ReassignmentAdmin:
    def __init__(self, zk: ZkClient, cache: MetadataCache) -> None:
        self._zk = zk
        self._cache = cache

    def validate_moves(self, proposed: Iterable[tuple[TopicPartition, list[int]]]) -> Moves:
        """The moves, checked in order as Kafka 2.6 checks a reassignment file: no partition twice, every
        partition exists, every replica is a registered broker. ``proposed`` may be lazy (a decoder raising on
        a malformed item): items are checked as they come, so the first bad item is the one reported."""
        brokers = set(self._cache.brokers)
        moves: Moves = {}
        for tp, replicas in proposed:
            if tp in moves:
                raise InvalidRequestError(f"Reassignment data contains duplicate partitions: {tp}")
            assignment = self._cache.topics.get(tp.topic)
            if assignment is None:
                raise UnknownTopicError(f"topic '{tp.topic}' does not exist")
            if tp.partition >= len(assignment.partitions):
                raise UnknownPartitionError(f"partition {tp} does not exist")
            unknown = sorted(set(replicas) - brokers)
            if unknown:
                raise InvalidRequestError(f"Unknown broker id(s) {unknown} in the replicas of {tp}")
            moves[tp] = list(replicas)
        return moves

    def ongoing(self) -> list[OngoingReassignment]:
        """The running moves, sorted by partition."""
        moves = self._zk.get_reassignment() or {}
        out = []
        for tp, target in sorted(moves.items()):
            assignment = self._cache.topics.get(tp.topic)
            out.append(OngoingReassignment(
                tp, list(target),
                list(assignment.adding_replicas.get(tp.partition, [])) if assignment else [],
                list(assignment.removing_replicas.get(tp.partition, [])) if assignment else []))
        return out

    def request(self, moves: Mapping[TopicPartition, list[int]], *, additional: bool = False) -> bool:
        """Start the moves; False (nothing written) when a reassignment runs and ``additional`` is not set."""
        return self._zk.request_reassignment(moves, merge=additional)

    def cancel(self, wanted: set[TopicPartition] | None = None) -> CancelledReassignments:
        """Revert running moves (all of them, or those in ``wanted``) to their original replicas: the topic's
        current replica set minus the replicas being added. A move whose topic or partition is gone is skipped.
        Read after a ZooKeeper ``sync``: a move just requested through another broker, and the assignments as the
        controller last wrote them, are seen even where this broker's server lags."""
        ongoing = self._zk.get_reassignment(fresh=True) or {}
        moves: Moves = {}
        for tp in ongoing:
            if wanted is not None and tp not in wanted:
                continue
            assignment = self._zk.get_topic_assignment(tp.topic)
            if assignment is None or tp.partition not in assignment.partitions:
                continue
            adding = assignment.adding_replicas.get(tp.partition, [])
            moves[tp] = [r for r in assignment.partitions[tp.partition] if r not in adding]
        if moves:
            self._zk.request_reassignment(moves, merge=True)
        return CancelledReassignments(sorted(moves), sorted(tp for tp in (wanted or set()) if tp not in moves))
