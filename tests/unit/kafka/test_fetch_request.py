"""A replica's Fetch request writer (broker/kafka/fetch_request.py) against kio's: for random rounds (sessions full
and incremental, topics and forgotten partitions, replica states default or not, client ids null, empty and
non-ASCII) the frame is byte for byte ``codec.encode_request`` of the same request as a kio entity, and the
broker's own request decoder reads it back."""

from __future__ import annotations

import datetime
import random
import uuid

from broker.kafka import codec
from broker.kafka.codec import FETCH, make, nested
from broker.kafka.fetch_request import VERSION, FetchPartitionAsk, ReplicaFetchRequest


def random_request(rnd: random.Random) -> ReplicaFetchRequest:
    def ask() -> FetchPartitionAsk:
        return FetchPartitionAsk(rnd.randrange(1 << 31), rnd.choice([-1, rnd.randrange(1 << 31)]),
                                 rnd.randrange(1 << 63), rnd.choice([-1, rnd.randrange(1 << 31)]),
                                 rnd.choice([-1, rnd.randrange(1 << 63)]), rnd.randrange(1 << 31))

    topics = [(uuid.UUID(int=rnd.getrandbits(128)), [ask() for _ in range(rnd.choice([0, 1, 2, 7, 200]))])
              for _ in range(rnd.choice([0, 1, 3, 130]))]
    forgotten = [(uuid.UUID(int=rnd.getrandbits(128)), [rnd.randrange(1 << 31) for _ in range(rnd.choice([0, 1, 5]))])
                 for _ in range(rnd.choice([0, 0, 1, 4]))]
    replica_id, epoch = rnd.choice([(-1, -1), (rnd.randrange(1000), -1), (-1, 5), (3, rnd.randrange(1 << 63))])
    return ReplicaFetchRequest(replica_id=replica_id, replica_epoch=epoch, max_wait_ms=rnd.randrange(1 << 31),
                               min_bytes=rnd.randrange(1 << 31), max_bytes=rnd.randrange(1 << 31),
                               session_id=rnd.randrange(1 << 31), session_epoch=rnd.choice([-1, 0, 1 << 30]),
                               topics=topics, forgotten=forgotten)


def kio_request(r: ReplicaFetchRequest) -> object:
    cls = codec.request_class(FETCH, VERSION)
    return make(
        cls, replica_state=make(nested(cls, "ReplicaState"), replica_id=r.replica_id, replica_epoch=r.replica_epoch),
        max_wait=datetime.timedelta(milliseconds=r.max_wait_ms), min_bytes=r.min_bytes, max_bytes=r.max_bytes,
        isolation_level=0, session_id=r.session_id, session_epoch=r.session_epoch, rack_id="",
        topics=tuple(make(nested(cls, "FetchTopic"), topic_id=tid, partitions=tuple(make(
            nested(cls, "FetchPartition"), partition=a.partition, current_leader_epoch=a.current_leader_epoch,
            fetch_offset=a.fetch_offset, last_fetched_epoch=a.last_fetched_epoch, log_start_offset=a.log_start_offset,
            partition_max_bytes=a.max_bytes) for a in asks)) for tid, asks in r.topics),
        forgotten_topics_data=tuple(make(nested(cls, "ForgottenTopic"), topic_id=tid, partitions=tuple(ps))
                                    for tid, ps in r.forgotten))


def test_the_frame_is_kios_encoding_of_the_same_request() -> None:
    rnd = random.Random(15)
    for i in range(300):
        request = random_request(rnd)
        client_id = [None, "", "broker-2", "brøker-é"][i % 4]
        correlation_id = rnd.randrange(-(1 << 31), 1 << 31)
        frame = request.frame(correlation_id, client_id)
        assert frame == codec.encode_request(FETCH, VERSION, correlation_id, client_id, kio_request(request))
        decoded = codec.decode_request(frame[4:])
        assert decoded.header == codec.RequestHeader(FETCH, VERSION, correlation_id, client_id)
        assert decoded.body.replica_state.replica_id == request.replica_id
        assert [t.topic_id for t in decoded.body.topics] == [tid for tid, _ in request.topics]
