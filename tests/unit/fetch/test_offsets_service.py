"""The offsets service (broker/fetch/offsets.py, Kafka's ListOffsets) against a replica-manager double, the real
metadata cache and the fake inter-broker client: the leader's offsets here, the leader's answer from elsewhere,
and the errors that never leave this broker."""

from __future__ import annotations

import asyncio

import pytest

from broker.fetch.offsets import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    ListOffsetsRequest,
    OffsetsService,
    PartitionOffsets,
)
from broker.metadata.cache import MetadataCache
from odradek.protocol.errors import (
    InvalidRequestError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    UnknownPartitionError,
    UnknownTopicError,
)
from odradek.protocol.model import TopicAssignment
from tests.unit.fakes.interbroker import FakeInterBroker, reply


class FakePartition:
    log_start_offset, high_watermark, last_stable_offset = 3, 40, 35


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
