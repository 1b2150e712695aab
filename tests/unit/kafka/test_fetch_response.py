"""The Fetch response writer (broker/kafka/fetch_response.py) against kio's: for every version the broker serves
and random answers of every shape it builds (topics by name and by id, partitions in error naming the current
leader, aborted transactions, empty and large records, throttled, in a session or not), the frame is byte for byte
``codec.encode_response`` of the same answer as kio entities, and kio reads it back."""

from __future__ import annotations

import datetime
import random
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from broker.kafka import codec, fetch_response
from broker.kafka.codec import FETCH, make, nested
from broker.kafka.fetch_response import PartitionAnswer, TopicAnswer

VERSIONS = list(range(codec.SUPPORTED[FETCH][0], codec.SUPPORTED[FETCH][1] + 1))


def random_answer(rnd: random.Random, version: int) -> tuple[int, int, int, list[TopicAnswer]]:
    topics = []
    for _ in range(rnd.choice([0, 1, 1, 2, 5])):
        parts = []
        for p in rnd.sample(range(1000), rnd.choice([0, 1, 3, 7])):
            if rnd.random() < 0.3:  # in error; from v12 with the current leader, when known
                leader = rnd.choice([None, (-1, -1), (rnd.randrange(100), rnd.randrange(1 << 31))])
                parts.append(PartitionAnswer(p, rnd.choice([6, 74, 1, 3]), -1, -1, -1,
                                             rnd.choice([None, ()]), rnd.choice([b"", None]),
                                             leader if version >= 12 else None))
            else:
                aborted = rnd.choice([None, (), [(rnd.randrange(1 << 62), rnd.randrange(1 << 62))
                                                 for _ in range(rnd.randrange(1, 4))]])
                size = rnd.choice([0, 1, 70, 5000, 70_000, 200_000])
                parts.append(PartitionAnswer(p, 0, rnd.randrange(1 << 62), rnd.randrange(1 << 62),
                                             rnd.randrange(1 << 62), aborted, rnd.randbytes(size)))
        name = "".join(rnd.choice("abcxyz-._é") for _ in range(rnd.randrange(1, 40)))
        topics.append(TopicAnswer(name, rnd.choice([uuid.UUID(int=rnd.getrandbits(128)), None]), parts))
    return rnd.choice([0, 1, 29]), rnd.choice([0, rnd.randrange(1 << 31)]), rnd.choice([0, 500]), topics


def kio_body(version: int, error: int, session_id: int, throttle_ms: int, topics: list[TopicAnswer]) -> Any:
    """The same answer as kio entities, as the broker built it before this writer."""
    cls = codec.response_class(FETCH, version)
    part_cls, topic_cls = nested(cls, "PartitionData"), nested(cls, "FetchableTopicResponse")
    aborted_cls = nested(cls, "AbortedTransaction")
    leader_cls = nested(cls, "LeaderIdAndEpoch") if version >= 12 else None

    def part(p: PartitionAnswer) -> Any:
        extra = {"current_leader": make(leader_cls, leader_id=p.current_leader[0], leader_epoch=p.current_leader[1])
                 } if leader_cls is not None and p.current_leader is not None else {}
        aborted = None if p.aborted is None else tuple(make(aborted_cls, producer_id=pid, first_offset=first)
                                                       for pid, first in p.aborted)
        return make(part_cls, partition_index=p.partition, error_code=codec_error(p.error_code),
                    high_watermark=p.high_watermark, last_stable_offset=p.last_stable_offset,
                    log_start_offset=p.log_start_offset, aborted_transactions=aborted, preferred_read_replica=-1,
                    records=p.records, **extra)

    responses = tuple(make(topic_cls, topic=t.name, topic_id=t.topic_id,
                           partitions=tuple(part(p) for p in t.partitions)) for t in topics)
    return make(cls, throttle_time=datetime.timedelta(milliseconds=throttle_ms), error_code=codec_error(error),
                session_id=session_id, responses=responses)


def codec_error(value: int) -> ErrorCode:
    return ErrorCode(value)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_frame_is_kios_encoding_of_the_same_answer(version: int) -> None:
    rnd = random.Random(version)
    for _ in range(60):
        error, session_id, throttle_ms, topics = random_answer(rnd, version)
        correlation_id = rnd.randrange(-(1 << 31), 1 << 31)
        expected = codec.encode_response(FETCH, version, correlation_id,
                                         kio_body(version, error, session_id, throttle_ms, topics))
        frame = fetch_response.encode(version, correlation_id, error_code=error, session_id=session_id,
                                      topics=topics, throttle_ms=throttle_ms)
        assert frame == expected
        cls = codec.response_class(FETCH, version)
        header, used = entity_reader(cls.__header_schema__)(frame, 4)
        body, _ = entity_reader(cls)(frame, 4 + used)
        assert header.correlation_id == correlation_id
        assert [p.records for t in body.responses for p in t.partitions] == [
            p.records for t in topics for p in t.partitions]


@pytest.mark.parametrize("version", [4, 11, 12, 15])
def test_the_throttle_time_sits_where_throttle_position_says(version: int) -> None:
    frame = fetch_response.encode(version, 7, error_code=0, session_id=0, topics=(), throttle_ms=0x01020304)
    at = fetch_response.throttle_position(version)
    assert isinstance(frame, bytes) and frame[at:at + 4] == bytes((1, 2, 3, 4))
