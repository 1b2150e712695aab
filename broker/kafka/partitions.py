"""The services a Kafka client's data path calls (Produce, Fetch, ListOffsets, OffsetForLeaderEpoch), as the Kafka
front door hands them to its handlers.

Why no logic here: the HTTP binary paths and the Kafka door append, read and look offsets up through the same
services, each leader-only where Kafka is (a Kafka client finds the leader itself and expects
NOT_LEADER_OR_FOLLOWER, naming the leader, from any other broker; nothing is forwarded):

* ``produce.append_batches``: the client's batches, checked as Kafka's LogValidator checks them (a refused batch
  leaves no trace), transactional ones verified with the coordinator first (``transactions``, KIP-890);
* ``fetches.fetch`` (through Kafka's fetch rules, :mod:`broker.kafka.fetch`) and ``fetches.epoch_end_offset``: the
  leader's reads and epoch ends, the client's leader epoch checked (KIP-320);
* ``offsets.leader_offset``: ListOffsets on the leader, with the found record's timestamp and leader epoch;
* ``sessions``: the broker's incremental fetch sessions (KIP-227, broker/fetch/sessions.py).

Records move as bytes: batches are appended as the client encoded them and read back as stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.fetch.offsets import OffsetsService
    from broker.fetch.service import FetchService
    from broker.fetch.sessions import FetchSessionCache
    from broker.produce.service import ProduceService
    from broker.transaction_router import TransactionRouter


@dataclass(frozen=True, slots=True)
class PartitionServices:
    produce: ProduceService
    fetches: FetchService
    offsets: OffsetsService
    sessions: FetchSessionCache
    transactions: TransactionRouter | None = None  # None: transactional batches are not verified (unit tests)
