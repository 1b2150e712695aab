"""The producers a partition leader knows (Kafka's DescribeProducers): what its idempotence and transaction state
holds per producer id (broker/replication/producer_state.py).

Why on the leader only: every replica builds the same state, but the leader's is the one appends are checked
against, and Kafka answers DescribeProducers from the leader (NOT_LEADER_OR_FOLLOWER, naming it, elsewhere).

Concurrency: the producer state is changed on the partition's storage queue, while this runs on the event loop.
It takes copies of the state's dicts and deques (each one C-level copy under the GIL, so never half-changed) and
reads only those: an answer may be a moment old, never torn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.produce.routing import LeaderRouter


@dataclass(frozen=True, slots=True)
class ActiveProducer:
    producer_id: int
    producer_epoch: int
    last_sequence: int  # -1: no batch since its epoch began (a marker set it)
    last_timestamp: int  # -1: not known
    current_txn_start_offset: int  # -1: no transaction open on this partition
    coordinator_epoch: int = -1  # of the last marker written for it here (-1: none)


class ProducerStates:
    def __init__(self, router: LeaderRouter) -> None:
        self._router = router

    def describe(self, topic: str, partition: int) -> list[ActiveProducer]:
        """The producers this leader remembers for ``topic``-``partition``, by producer id.

        Raises NOT_LEADER_OR_FOLLOWER (naming the leader), LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION as the
        leader-only produce path does."""
        part = self._router.leader(topic, partition)
        state = part.producer_state
        if state is None:
            return []
        producers = dict(state.producers)
        ongoing = dict(state.ongoing)
        out = []
        for pid in sorted(producers):
            entry = producers[pid]
            batches = list(entry.batches)
            out.append(ActiveProducer(pid, entry.epoch, batches[-1].last_seq if batches else -1,
                                      entry.last_timestamp if entry.last_timestamp >= 0 else -1,
                                      ongoing.get(pid, -1), entry.coordinator_epoch))
        return out
