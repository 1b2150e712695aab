"""The offsets service (broker/fetch/offsets.py, Kafka's ListOffsets) against a replica-manager double, the real
metadata cache and the fake inter-broker client: the leader's offsets here, the leader's answer from elsewhere,
and the errors that never leave this broker; and its leader-only verb (Kafka's ListOffsets) over a real leader
partition on ``tmp_path``: the found record's offset, timestamp and leader epoch."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from broker.fetch.offsets import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    LeaderOffset,
    ListOffsetsRequest,
    OffsetsService,
    PartitionOffsets,
)
from broker.metadata.cache import MetadataCache
from broker.replication.partition import Partition
from odradek.protocol.errors import (
    FencedLeaderEpochError,
    InvalidRequestError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    UnknownLeaderEpochError,
    UnknownPartitionError,
    UnknownTopicError,
)
from odradek.protocol.model import TopicAssignment
from odradek.protocol.records import GZIP, encode_batch
from tests.unit.fakes.interbroker import FakeInterBroker, reply
from tests.unit.replication.fakes import config, info, make_partition


class FakePartition:
    topic, partition, leader_epoch = "t", 0, 2
    log_start_offset, high_watermark, last_stable_offset = 3, 40, 35
    epoch_start_offset = 40  # the epoch started at the high watermark: caught up


class FakeReplicas:
    def __init__(self, lead: bool = True, error: Exception | None = None) -> None:
        self.cache = MetadataCache()
        self.cache.topics["t"] = TopicAssignment({0: [1, 2], 1: [2, 1]})
        self.lead, self.error = lead, error
        self.lookups: list[tuple[str, int, int]] = []

    def leader_partition(self, topic: str, partition: int) -> FakePartition:
        if self.error is not None:
            raise self.error
        if not self.lead:
            raise NotLeaderOrFollowerError("broker 2 is", leader=2, leader_url="http://b2")
        return FakePartition()

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> int | None:
        self.lookups.append((topic, partition, timestamp))
        return None if timestamp > 1000 else 17


def _service(replicas: FakeReplicas, ib: FakeInterBroker | None = None) -> tuple[OffsetsService, FakeInterBroker]:
    ib = ib or FakeInterBroker()
    return OffsetsService(replicas, ib), ib  # type: ignore[arg-type]


def list_offsets(service: OffsetsService, request: ListOffsetsRequest) -> PartitionOffsets:
    return asyncio.run(service.list_offsets(request))


def test_the_leader_answers_its_log_start_and_the_end_for_the_isolation_level() -> None:
    replicas = FakeReplicas()
    service, ib = _service(replicas)
    assert list_offsets(service, ListOffsetsRequest("t", 0)) == PartitionOffsets(3, 40)
    assert list_offsets(service, ListOffsetsRequest("t", 0, "read_committed")) == PartitionOffsets(3, 35)
    assert list_offsets(service, ListOffsetsRequest("t", 0, timestamp=500)) == PartitionOffsets(3, 40, 500, 17)
    assert list_offsets(service, ListOffsetsRequest("t", 0, timestamp=5000)) == PartitionOffsets(3, 40, 5000, None)
    assert replicas.lookups == [("t", 0, 500), ("t", 0, 5000)] and ib.sent == []


def test_another_brokers_leadership_is_asked_over_the_inter_broker_client() -> None:
    body = {"beginning_offset": 8, "end_offset": 90, "timestamp": 500, "offset": 60}
    service, ib = _service(FakeReplicas(lead=False), FakeInterBroker(answer=lambda sent: reply(body)))
    answer = list_offsets(service, ListOffsetsRequest("t", 1, "read_committed", timestamp=500))
    assert answer == PartitionOffsets(8, 90, 500, 60)
    [sent] = ib.sent
    assert sent.where == "http://b2" and sent.request.path == "/topics/t/partitions/1/offsets"
    assert dict(sent.request.params or {}) == {"isolation": "read_committed", "timestamp": "500"}


def test_unknown_partitions_and_missing_leaders_are_answered_here() -> None:
    service, ib = _service(FakeReplicas())
    with pytest.raises(UnknownTopicError):
        list_offsets(service, ListOffsetsRequest("nope", 0))
    with pytest.raises(UnknownPartitionError):
        list_offsets(service, ListOffsetsRequest("t", 7))
    for error in (LeaderNotAvailableError("no leader"), NotLeaderOrFollowerError("not registered", leader=2)):
        with pytest.raises(type(error)):
            list_offsets(_service(FakeReplicas(error=error), ib)[0], ListOffsetsRequest("t", 0))
    assert ib.sent == []
    with pytest.raises(InvalidRequestError):
        ListOffsetsRequest("t", 0, "dirty")


def test_kafkas_sentinels_answer_the_earliest_and_the_latest() -> None:
    offsets = PartitionOffsets(3, 35, 500, 17)
    assert offsets.offset_for(EARLIEST_TIMESTAMP) == 3
    assert offsets.offset_for(LATEST_TIMESTAMP) == 35
    assert offsets.offset_for(500) == 17
    with pytest.raises(ValueError, match="answer timestamp 500"):
        offsets.offset_for(600)


# ------------------------------------------------------------------------------------ leader_offset (Kafka's)


class LeaderReplicas:
    """The replica manager's lookups over one real leader partition (on ``tmp_path``)."""

    def __init__(self, part: Partition) -> None:
        self.cache = MetadataCache()
        self.cache.topics["t"] = TopicAssignment({0: [1]})
        self.part = part

    def leader_partition(self, topic: str, partition: int) -> Partition:
        return self.part

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> int | None:
        found = self.part.log.offset_for_timestamp(timestamp)
        return found if found is not None and found < self.part.high_watermark else None


BASE_MS = 1_700_000_000_000


def _leader(tmp_path: Path, *batches: list[int], leader_epoch: int = 4) -> tuple[OffsetsService, Partition]:
    """A leader (epoch ``leader_epoch``) whose log holds one batch per list of record timestamps."""

    async def main() -> Partition:
        part, _, _ = make_partition(tmp_path)
        await part.apply(info(1, leader_epoch, (1,), replicas=(1,)), config())
        for stamps in batches:
            await part.append(bytearray(encode_batch([(None, b"v", ts, ()) for ts in stamps],
                                                     base_offset=part.log_end_offset)), 1, 1000)
        return part

    part = asyncio.run(main())
    return OffsetsService(LeaderReplicas(part), FakeInterBroker()), part  # type: ignore[arg-type]


def leader_offset(service: OffsetsService, timestamp: int | None, **kw: Any) -> LeaderOffset:
    return asyncio.run(service.leader_offset(ListOffsetsRequest("t", 0, timestamp=timestamp, **kw)))


def test_kafkas_list_offsets_answers_the_record_its_timestamp_and_the_epoch_that_wrote_it(tmp_path: Path) -> None:
    service, part = _leader(tmp_path, [BASE_MS + 10, BASE_MS + 30], [BASE_MS + 20, BASE_MS + 40, BASE_MS + 40])
    assert part.high_watermark == 5
    assert leader_offset(service, EARLIEST_TIMESTAMP) == LeaderOffset(0, -1, 4)
    assert leader_offset(service, LATEST_TIMESTAMP) == LeaderOffset(5, -1, 4)
    assert leader_offset(service, BASE_MS + 15) == LeaderOffset(1, BASE_MS + 30, 4)  # the first at or after
    assert leader_offset(service, BASE_MS + 35) == LeaderOffset(3, BASE_MS + 40, 4)
    assert leader_offset(service, BASE_MS + 41) == LeaderOffset(-1, -1, -1)  # none that late
    assert leader_offset(service, MAX_TIMESTAMP) == LeaderOffset(3, BASE_MS + 40, 4)  # the first largest


def test_the_largest_timestamp_in_a_compressed_batch_of_an_older_segment(tmp_path: Path) -> None:
    service, part = _leader(tmp_path, [BASE_MS + 5, BASE_MS + 90, BASE_MS + 7])
    part.log.roll()
    asyncio.run(part.append(bytearray(encode_batch([(None, b"v", BASE_MS + 50, ())], base_offset=3,
                                                   compression=GZIP)), 1, 1000))
    assert leader_offset(service, MAX_TIMESTAMP) == LeaderOffset(1, BASE_MS + 90, 4)


def test_kafkas_list_offsets_is_leader_only_and_checks_the_clients_epoch(tmp_path: Path) -> None:
    service, _ = _leader(tmp_path, [BASE_MS])
    with pytest.raises(FencedLeaderEpochError):
        leader_offset(service, LATEST_TIMESTAMP, current_leader_epoch=3)
    with pytest.raises(UnknownLeaderEpochError):
        leader_offset(service, LATEST_TIMESTAMP, current_leader_epoch=5)
    assert leader_offset(service, LATEST_TIMESTAMP, current_leader_epoch=4).offset == 1
    with pytest.raises(InvalidRequestError):
        leader_offset(service, None)
    with pytest.raises(InvalidRequestError):
        leader_offset(service, -7)
    moved, ib = _service(FakeReplicas(lead=False))
    with pytest.raises(NotLeaderOrFollowerError):  # never forwarded: a Kafka client goes to the leader itself
        asyncio.run(moved.leader_offset(ListOffsetsRequest("t", 1, timestamp=LATEST_TIMESTAMP)))
    assert ib.sent == []
    with pytest.raises(UnknownPartitionError):
        asyncio.run(moved.leader_offset(ListOffsetsRequest("t", 7, timestamp=LATEST_TIMESTAMP)))


def test_read_committed_offsets_stop_at_the_last_stable_offset(tmp_path: Path) -> None:
    service, part = _leader(tmp_path, [BASE_MS + 1], [BASE_MS + 2])
    part.producer_state = SimpleNamespace(first_unstable=lambda: 1)  # a transaction open from offset 1
    assert leader_offset(service, LATEST_TIMESTAMP, isolation_level="read_committed").offset == 1
    assert leader_offset(service, BASE_MS + 2, isolation_level="read_committed").offset == -1
    assert leader_offset(service, BASE_MS + 2).offset == 1


# ------------------------------------------------------------------- a new leader whose watermark lags its epoch


def _new_leader(tmp_path: Path) -> Partition:
    """Broker 1 followed broker 2 and holds offsets 0-4, told a high watermark of 2 (the follower's lagging view);
    then becomes leader with follower 2 in the ISR, whose log end it does not know yet."""

    async def main() -> Partition:
        part, _, _ = make_partition(tmp_path)
        await part.apply(info(2, 1, (1, 2), replicas=(1, 2)), config())
        records = [(None, b"v", BASE_MS + i, ()) for i in range(5)]
        assert await part.append_replicated(encode_batch(records), leader_hw=2, leader_epoch=1)
        await part.apply(info(1, 2, (1, 2), replicas=(1, 2)), config())
        return part

    part = asyncio.run(main())
    assert (part.high_watermark, part.epoch_start_offset) == (2, 5)
    return part


def test_a_new_leader_answers_no_latest_offset_until_its_watermark_reaches_its_epoch(tmp_path: Path) -> None:
    """The previous leader may have acknowledged offsets 0-4: answering 2 would hide two of them from whoever
    counts the log (Kafka's OFFSET_NOT_AVAILABLE); the earliest offset needs no watermark."""
    part = _new_leader(tmp_path)
    service = OffsetsService(LeaderReplicas(part), FakeInterBroker())  # type: ignore[arg-type]
    with pytest.raises(OffsetNotAvailableError, match="lags the start of leader epoch 2"):
        leader_offset(service, LATEST_TIMESTAMP)
    with pytest.raises(OffsetNotAvailableError):  # offset 3 is above the watermark: not "none found"
        leader_offset(service, BASE_MS + 3)
    found = leader_offset(service, BASE_MS + 1)  # below it: answered
    assert (found.offset, found.timestamp) == (1, BASE_MS + 1)
    with pytest.raises(OffsetNotAvailableError):  # the REST read answers the end offset too
        list_offsets(service, ListOffsetsRequest("t", 0))
    assert leader_offset(service, EARLIEST_TIMESTAMP).offset == 0
    assert leader_offset(service, LATEST_TIMESTAMP, replica=True).offset == 5  # a follower's: the log end
    asyncio.run(part.read_for_follower(2, 5, 2, 1 << 20, 0))  # the follower has it all: the watermark moves
    assert leader_offset(service, LATEST_TIMESTAMP) == LeaderOffset(5, -1, 2)
    assert list_offsets(service, ListOffsetsRequest("t", 0)) == PartitionOffsets(0, 5)
