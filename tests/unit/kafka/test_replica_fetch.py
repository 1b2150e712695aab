"""Fetch v13-v15 on the Kafka door, and a replica's Fetch there (issue 25): topic ids, KIP-903's replica state,
ClusterAction, and the follower-fetch rules reached through the real fetch service, follower-fetch service and
partitions (real logs on ``tmp_path``), so that what a follower's fetch does to the leader (acknowledge, move the
high watermark, wait for the first append) is what is checked, not a stand-in's say-so."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime
import io
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_reader, entity_writer

from broker.config import BrokerConfig
from broker.fetch.service import FetchService
from broker.fetch.sessions import FetchSessionCache
from broker.kafka.apis import KafkaApis
from broker.kafka.authorization import KafkaAuthorizer
from broker.kafka.codec import make, nested
from broker.kafka.partitions import PartitionServices
from broker.log import Log
from broker.metadata.cache import MetadataCache, TopicTable
from broker.quotas import TokenBucket
from broker.replication.follower_fetch import FollowerFetchService
from broker.replication.partition import Partition
from odradek.protocol.errors import UnknownTopicError
from odradek.protocol.model import BrokerInfo, KafkaEndpoint, TopicAssignment
from tests.harness.wait import SLOW_MACHINE_S
from tests.unit.kafka.test_apis import CONN, TOPIC_ID, TOPIC_UUID, Leaders
from tests.unit.kafka.test_apis import setup as setup  # the stand-in services' fixture
from tests.unit.replication.fakes import FakeIsrManager, batch, config, info

FETCH = 1
NONE, UNKNOWN_TOPIC_ID, TOPIC_AUTHORIZATION_FAILED, NOT_LEADER_OR_FOLLOWER, STALE_BROKER_EPOCH = 0, 100, 29, 6, 77
FENCED_LEADER_EPOCH = 74
EPOCH = {1: 101, 2: 102, 3: 103}  # each broker's broker epoch (its registration's czxid) in ZooKeeper


# ------------------------------------------------------------------------------------------------- requests

def fetch_body(version: int, partitions: dict[int, int], *, topic: str = "t", topic_id: uuid.UUID | None = None,
               replica: int = -1, broker_epoch: int = -1, max_wait_ms: int = 0, min_bytes: int = 1,
               leader_epoch: int = -1, isolation: int = 0, session: tuple[int, int] = (0, -1)) -> dict[str, Any]:
    """A Fetch of ``{partition: fetch offset}`` of one topic (by name, or by id from v13)."""
    cls = load_request_schema(FETCH, version)
    parts = tuple(make(nested(cls, "FetchPartition"), partition=p, current_leader_epoch=leader_epoch,
                       fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=0, partition_max_bytes=1 << 20)
                  for p, offset in partitions.items())
    fields: dict[str, Any] = {
        "replica_id": replica, "max_wait": datetime.timedelta(milliseconds=max_wait_ms), "min_bytes": min_bytes,
        "max_bytes": 1 << 24, "isolation_level": isolation, "session_id": session[0], "session_epoch": session[1],
        "forgotten_topics_data": (), "rack_id": "",
        "topics": (make(nested(cls, "FetchTopic"), topic=topic, topic_id=topic_id or uuid.UUID(TOPIC_UUID),
                        partitions=parts),)}
    if version >= 15:
        fields["replica_state"] = make(nested(cls, "ReplicaState"), replica_id=replica, replica_epoch=broker_epoch)
    return fields


def frame(version: int, fields: dict[str, Any]) -> bytes:
    cls = load_request_schema(FETCH, version)
    out = io.BytesIO()
    entity_writer(HeaderV2)(out, HeaderV2(request_api_key=FETCH, request_api_version=version, correlation_id=7,
                                          client_id="unit"))
    entity_writer(cls)(out, make(cls, **fields))
    return out.getvalue()


async def ask(apis: KafkaApis, version: int, fields: dict[str, Any]) -> Any:
    """One Fetch through ``KafkaApis.handle``, on the running loop, its answer decoded as a client would."""
    answer = await apis.handle(CONN, frame(version, fields))
    assert answer is not None
    response_cls = load_response_schema(FETCH, version)
    _, size = entity_reader(response_cls.__header_schema__)(answer, 4)
    body, _ = entity_reader(response_cls)(answer, 4 + size)
    return body


def by_partition(body: Any) -> dict[int, Any]:
    return {p.partition_index: p for t in body.responses for p in t.partitions}


# ---------------------------------------------------------------------- topic ids and v15, stand-in services

@pytest.mark.parametrize("version", [13, 14, 15])
def test_from_v13_topics_are_named_by_id_in_the_request_and_the_answer(
        setup: tuple[KafkaApis, MetadataCache, Leaders], version: int) -> None:
    apis, _, leaders = setup
    body = asyncio.run(ask(apis, version, fetch_body(version, {0: 5}, topic="ignored")))
    (topic,) = body.responses
    assert (body.error_code, topic.topic_id, topic.partitions[0].error_code) == (NONE, uuid.UUID(TOPIC_UUID), NONE)
    assert leaders.calls == [("read", "t", 0, 5, 1 << 20, 0, False)]  # the id resolved to the topic's name


@pytest.mark.parametrize("replica", [-1, 2])
def test_an_unknown_topic_id_is_unknown_topic_id_and_nothing_is_read(
        setup: tuple[KafkaApis, MetadataCache, Leaders], replica: int) -> None:
    apis, _, leaders = setup
    stranger = uuid.UUID(int=42)
    body = asyncio.run(ask(apis, 15, fetch_body(15, {0: 0, 1: 0}, topic_id=stranger, replica=replica,
                                                broker_epoch=EPOCH.get(replica, -1))))
    (topic,) = body.responses
    assert topic.topic_id == stranger
    assert [(p.partition_index, p.error_code) for p in topic.partitions] == [(0, UNKNOWN_TOPIC_ID),
                                                                            (1, UNKNOWN_TOPIC_ID)]
    assert leaders.calls == []


def test_a_consumer_fetches_at_v15_read_committed_with_no_replica_state(
        setup: tuple[KafkaApis, MetadataCache, Leaders]) -> None:
    apis, _, leaders = setup
    fields = fetch_body(15, {0: 3}, isolation=1)
    del fields["replica_state"]  # a consumer leaves the tagged field out: its default says replica -1
    body = asyncio.run(ask(apis, 15, fields))
    part = by_partition(body)[0]
    assert (part.error_code, part.high_watermark, [a.first_offset for a in part.aborted_transactions]) == (0, 4, [3])
    assert leaders.calls == [("read", "t", 0, 3, 1 << 20, 0, True)]


def test_a_v13_session_is_keyed_by_topic_id_and_a_v12_request_cannot_continue_it(
        setup: tuple[KafkaApis, MetadataCache, Leaders]) -> None:
    apis, cache, leaders = setup

    async def main() -> None:
        opened = await ask(apis, 13, fetch_body(13, {0: 1}, session=(0, 0)))
        assert opened.session_id != 0
        held = leaders.sessions.get(opened.session_id)
        assert held is not None and held.uses_topic_ids and not held.privileged
        assert list(held.partitions) == [(TOPIC_UUID, 0)]
        # The topic is deleted and created again under its name: the session's topic (by id) is gone.
        cache.topics["t"] = TopicAssignment({0: [1, 2]}, topic_id="AAAAAAAAAAAAAAAAAAAAAA")
        again = await ask(apis, 13, fetch_body(13, {}, session=(opened.session_id, 1)) | {"topics": ()})
        assert [(p.partition_index, p.error_code) for p in again.responses[0].partitions] == [(0, UNKNOWN_TOPIC_ID)]
        # A v12 request (topics by name) cannot continue a session keyed by id (Kafka: FETCH_SESSION_TOPIC_ID_ERROR).
        mixed = await ask(apis, 12, fetch_body(12, {}, session=(opened.session_id, 2)) | {"topics": ()})
        assert (mixed.error_code, mixed.responses) == (106, ())  # FETCH_SESSION_TOPIC_ID_ERROR

    asyncio.run(main())


# ---------------------------------------------------------------- replica fetches on the real follower path

class Router:
    """The leader router's leader-only look, over the partitions this broker leads."""

    def __init__(self, parts: dict[tuple[str, int], Partition]) -> None:
        self.parts = parts

    def leader(self, topic: str, partition: int) -> Partition:
        part = self.parts.get((topic, partition))
        if part is None:
            raise UnknownTopicError(f"{topic}-{partition}")
        return part

    async def await_leader(self, topic: str, partition: int, deadline: float) -> Partition:
        return self.leader(topic, partition)


# A follower's fetch at the log end waits up to this for data: the broker's default cap on a fetch's wait
# (BrokerConfig.fetch_max_wait_ms), far longer than anything here takes on a loaded machine. An answer brought by
# an append comes within ANSWERED_WITHIN_S, which excludes one that came only when the wait ran out.
FETCH_WAIT_MS = 30_000
ANSWERED_WITHIN_S = FETCH_WAIT_MS / 1000 / 2


class Leader:
    """Broker 1 leading t-0 and t-1 (replicas 1, 2, 3; ISR 1, 2) through the real services."""

    def __init__(self, tmp_path: Path, isr: tuple[int, ...] = (1, 2), partitions: int = 2) -> None:
        self.tmp_path, self.isr, self.partitions = tmp_path, isr, partitions
        self.cache = MetadataCache()
        self.cache.brokers = {b: BrokerInfo(b, "127.0.0.1", 8080 + b, epoch=EPOCH[b], kafka_endpoints=(
            KafkaEndpoint("PLAINTEXT", "127.0.0.1", 9090 + b, "PLAINTEXT"),)) for b in (1, 2, 3)}
        self.cache.topics = {"t": TopicAssignment({p: [1, 2, 3] for p in range(partitions)}, topic_id=TOPIC_ID)}
        self.parts: dict[int, Partition] = {}
        self.sessions = FetchSessionCache()
        self.asked: list[tuple[str, ...]] = []
        self.throttle: Any = SimpleNamespace(leader_limit=lambda topic, partition, in_isr: None)

    async def start(self, cluster_action: bool = True) -> KafkaApis:
        for p in range(self.partitions):
            log = Log.open(self.tmp_path / f"t-{p}")
            log.high_watermark = 0
            part = Partition("t", p, 1, log, FakeIsrManager(), lambda b: f"http://broker-{b}")
            await part.apply(info(1, 4, self.isr, partition=p), config())
            self.parts[p] = part
        followers = FollowerFetchService(1, self.cache, self.throttle,
                                         reread_state=lambda topic, partition: None)
        fetches = FetchService(1, Router({("t", p): part for p, part in self.parts.items()}), followers,
                               None)  # type: ignore[arg-type]
        services = PartitionServices(None, fetches, None, self.sessions)  # type: ignore[arg-type]

        def allowed(principal: str, host: str, operation: str, resource_type: str, name: str) -> bool:
            self.asked.append((operation, resource_type, name))
            return operation != "ClusterAction" or cluster_action

        ready = asyncio.Event()
        ready.set()
        view = SimpleNamespace(broker_id=1, cluster_id="cid", controller_id=1, ready=ready)
        return KafkaApis(view, self.cache, services,  # type: ignore[arg-type]
                         KafkaAuthorizer(SimpleNamespace(enforce=True, allowed=allowed)),  # type: ignore[arg-type]
                         BrokerConfig(1, "zk", "127.0.0.1", 8081, self.tmp_path))


def test_a_replica_fetch_without_cluster_action_is_refused_per_partition_as_kafka_does(tmp_path: Path) -> None:
    async def main() -> None:
        leader = Leader(tmp_path)
        apis = await leader.start(cluster_action=False)
        await leader.parts[0].append(batch(3), acks=1, timeout_ms=1000)
        body = await ask(apis, 15, fetch_body(15, {0: 0, 1: 0}, replica=2, broker_epoch=EPOCH[2], leader_epoch=4,
                                              session=(0, 0)))
        session = leader.sessions.get(body.session_id)
        assert body.error_code == NONE and session is not None and not session.privileged  # it may evict no one
        assert {p: e.error_code for p, e in by_partition(body).items()} == {0: TOPIC_AUTHORIZATION_FAILED,
                                                                           1: TOPIC_AUTHORIZATION_FAILED}
        assert leader.parts[0].followers[2].log_end_offset == -1  # nothing acknowledged
        assert ("ClusterAction", "Cluster", "kafka-cluster") in leader.asked

    asyncio.run(main())


@pytest.mark.parametrize(("version", "replica", "broker_epoch", "error"), [
    (15, 2, EPOCH[2] - 50, STALE_BROKER_EPOCH),  # a stale incarnation of broker 2
    (14, 2, -1, STALE_BROKER_EPOCH),  # before v15 a fetch carries no broker epoch: refused
    (15, 4, 104, NOT_LEADER_OR_FOLLOWER),  # no replica of the partition
    (15, 1, EPOCH[1], NOT_LEADER_OR_FOLLOWER),  # the leader itself
])
def test_a_replica_fetch_that_may_not_acknowledge_is_refused_and_moves_nothing(
        tmp_path: Path, version: int, replica: int, broker_epoch: int, error: int) -> None:
    async def main() -> None:
        leader = Leader(tmp_path)
        apis = await leader.start()
        await leader.parts[0].append(batch(3), acks=1, timeout_ms=1000)
        body = await ask(apis, version, fetch_body(version, {0: 3}, replica=replica, broker_epoch=broker_epoch,
                                                   leader_epoch=4, max_wait_ms=2000))
        part = by_partition(body)[0]
        assert (part.error_code, part.records) == (error, b"")
        assert leader.parts[0].high_watermark == 0 and leader.parts[0].followers[2].log_end_offset == -1

    asyncio.run(main())


def test_a_replica_fetch_reads_to_the_log_end_by_topic_id_in_a_privileged_session(tmp_path: Path) -> None:
    async def main() -> None:
        leader = Leader(tmp_path)
        apis = await leader.start()
        await leader.parts[0].append(batch(3), acks=1, timeout_ms=1000)
        await leader.parts[1].append(batch(2), acks=1, timeout_ms=1000)
        body = await ask(apis, 15, fetch_body(15, {0: 0, 1: 0}, replica=2, broker_epoch=EPOCH[2], leader_epoch=4,
                                              isolation=1, session=(0, 0)))
        (topic,) = body.responses
        assert topic.topic_id == uuid.UUID(TOPIC_UUID)
        parts = by_partition(body)
        # Past the high watermark (0: nothing acknowledged yet), read_committed or not: a follower reads to the end.
        assert (len(parts[0].records), len(parts[1].records)) == (len(batch(3)), len(batch(2)))
        assert (parts[0].error_code, parts[0].high_watermark, parts[0].aborted_transactions) == (NONE, 0, None)
        session = leader.sessions.get(body.session_id)
        assert session is not None and session.privileged and session.uses_topic_ids

    asyncio.run(main())


async def produce_waiting_on_followers(leader: Leader) -> asyncio.Task[Any]:
    """An acks=all produce of 2 records to t-0, waiting: only broker 2's fetch can complete it (nothing else moves
    the high watermark)."""
    produce = asyncio.create_task(leader.parts[0].append(batch(2), acks=-1, timeout_ms=int(SLOW_MACHINE_S * 1000)))
    await asyncio.sleep(0.05)
    assert not produce.done() and leader.parts[0].high_watermark == 0
    return produce


def test_a_replica_fetch_moves_the_high_watermark_at_once_and_acks_all_completes_before_it_answers(
        tmp_path: Path) -> None:
    async def main() -> None:
        leader = Leader(tmp_path)
        apis = await leader.start()
        produce = await produce_waiting_on_followers(leader)
        # Broker 2 holds both records of t-0: its fetch at 2 says so, and then waits (nothing more to read).
        fetching = asyncio.create_task(ask(apis, 15, fetch_body(15, {0: 2, 1: 0}, replica=2, broker_epoch=EPOCH[2],
                                                                leader_epoch=4, max_wait_ms=FETCH_WAIT_MS)))
        result = await asyncio.wait_for(produce, SLOW_MACHINE_S)
        assert (result.last_offset, leader.parts[0].high_watermark) == (1, 2)
        assert not fetching.done()  # a moved high watermark does not end a follower's wait (Kafka's rule)
        await leader.parts[1].append(batch(1), acks=1, timeout_ms=1000)
        body = await asyncio.wait_for(fetching, ANSWERED_WITHIN_S)  # the append ended it, not max_wait
        assert by_partition(body)[0].high_watermark == 2

    asyncio.run(main())


def test_the_produce_a_replica_fetch_releases_is_answered_before_that_fetch_goes_on(tmp_path: Path) -> None:
    """The acks=all produce's answer is the latency a client sees; the fetch that moved the high watermark has
    nothing to add in the meantime, so it lets the produce through first (one turn of the loop)."""
    async def main() -> None:
        leader = Leader(tmp_path)
        apis = await leader.start()
        produce = await produce_waiting_on_followers(leader)

        async def fetch_then_look() -> tuple[Any, bool]:
            body = await ask(apis, 15, fetch_body(15, {0: 2}, replica=2, broker_epoch=EPOCH[2], leader_epoch=4))
            return body, produce.done()

        body, produce_answered = await fetch_then_look()
        assert by_partition(body)[0].high_watermark == 2 and leader.parts[0].high_watermark == 2
        assert produce_answered  # before the fetch's own answer was written
        assert (await produce).last_offset == 1

    asyncio.run(main())


def test_an_acknowledgement_at_the_log_end_is_recorded_without_the_read_path(tmp_path: Path) -> None:
    async def main() -> None:
        leader = Leader(tmp_path)
        apis = await leader.start()
        part = leader.parts[0]
        await part.append(batch(3), acks=1, timeout_ms=1000)

        async def no_read(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("the read path")

        part.read_for_follower = no_read  # type: ignore[method-assign]
        body = await ask(apis, 15, fetch_body(15, {0: 3}, replica=2, broker_epoch=EPOCH[2], leader_epoch=4))
        answer = by_partition(body)[0]
        assert (answer.error_code, answer.records, answer.high_watermark) == (NONE, b"", 3)
        assert (part.followers[2].log_end_offset, part.high_watermark) == (3, 3)

    asyncio.run(main())


def test_records_appended_while_an_acknowledgement_lets_the_produce_through_are_read_at_once(tmp_path: Path) -> None:
    """The produce the acknowledgement released appends again in the same turn: the fetch, no longer at the log
    end, goes the read path and carries the new records rather than answering empty."""
    async def main() -> None:
        leader = Leader(tmp_path)
        apis = await leader.start()
        part = leader.parts[0]

        async def produce_twice() -> None:
            await part.append(batch(2), acks=-1, timeout_ms=int(SLOW_MACHINE_S * 1000))
            await part.append(batch(1), acks=1, timeout_ms=1000)  # in the same step: no wait for acks=1

        producing = asyncio.create_task(produce_twice())
        await asyncio.sleep(0.05)
        body = await ask(apis, 15, fetch_body(15, {0: 2}, replica=2, broker_epoch=EPOCH[2], leader_epoch=4))
        answer = by_partition(body)[0]
        assert answer.error_code == NONE and len(answer.records) == len(batch(1))
        assert part.followers[2].log_end_offset == 2 and part.log_end_offset == 3
        await producing

    asyncio.run(main())


def test_a_replica_fetch_answers_on_the_first_append_to_any_partition_not_at_max_wait(tmp_path: Path) -> None:
    async def main() -> None:
        leader = Leader(tmp_path)
        apis = await leader.start()
        loop = asyncio.get_running_loop()
        started = loop.time()
        fetching = asyncio.create_task(ask(apis, 15, fetch_body(15, {0: 0, 1: 0}, replica=2, broker_epoch=EPOCH[2],
                                                                leader_epoch=4, max_wait_ms=FETCH_WAIT_MS)))
        await asyncio.sleep(0.2)
        assert not fetching.done()
        await leader.parts[1].append(batch(4), acks=1, timeout_ms=1000)
        body = await asyncio.wait_for(fetching, ANSWERED_WITHIN_S)
        assert loop.time() - started < ANSWERED_WITHIN_S  # the append ended it, not max_wait
        parts = by_partition(body)
        assert (parts[0].records, len(parts[1].records)) == (b"", len(batch(4)))

    asyncio.run(main())


def test_a_replica_fetchs_one_waiter_leaves_no_partition_holding_it(tmp_path: Path) -> None:
    """The fetch waits on both partitions with one waiter; answered (by an append to one) or timed out, neither
    partition keeps it: an idle partition fetched round after round must not collect a waiter per round."""
    async def main() -> None:
        leader = Leader(tmp_path)
        apis = await leader.start()
        for _ in range(3):  # timed out: nothing appended within max_wait
            body = await ask(apis, 15, fetch_body(15, {0: 0, 1: 0}, replica=2, broker_epoch=EPOCH[2],
                                                  leader_epoch=4, max_wait_ms=50))
            assert {p: e.records for p, e in by_partition(body).items()} == {0: b"", 1: b""}
        fetching = asyncio.create_task(ask(apis, 15, fetch_body(15, {0: 0, 1: 0}, replica=2, broker_epoch=EPOCH[2],
                                                                leader_epoch=4, max_wait_ms=FETCH_WAIT_MS)))
        await asyncio.sleep(0.1)
        assert [len(leader.parts[p]._append_waiters) for p in (0, 1)] == [1, 1]  # one waiter, on both
        await leader.parts[0].append(batch(2), acks=1, timeout_ms=1000)
        await asyncio.wait_for(fetching, ANSWERED_WITHIN_S)
        assert [len(leader.parts[p]._append_waiters) for p in (0, 1)] == [0, 0]

    asyncio.run(main())


def test_after_the_wait_only_the_partition_appended_to_is_looked_at_again(tmp_path: Path) -> None:
    """The fetch's first look finds both partitions empty; an append to partition 1 ends the wait, and only
    partition 1 is read again: partition 0, idle, is looked at once per fetch (its answer from the first look)."""
    async def main() -> None:
        leader = Leader(tmp_path)
        apis = await leader.start()
        fetches = apis._partitions.fetches
        real, real_ack, looks = fetches.fetch, fetches.acknowledge_at_log_end, []

        async def counted(request: Any, **kwargs: Any) -> Any:
            looks.append(request.partition)
            return await real(request, **kwargs)

        async def counted_ack(topic: str, partition: int, *args: Any) -> Any:
            answer = await real_ack(topic, partition, *args)
            if answer is not None:  # at the log end: looked at without the read path
                looks.append(partition)
            return answer

        fetches.fetch = counted
        fetches.acknowledge_at_log_end = counted_ack
        fetching = asyncio.create_task(ask(apis, 15, fetch_body(15, {0: 0, 1: 0}, replica=2, broker_epoch=EPOCH[2],
                                                                leader_epoch=4, max_wait_ms=FETCH_WAIT_MS)))
        await asyncio.sleep(0.2)
        assert sorted(looks) == [0, 1]
        await leader.parts[1].append(batch(3), acks=1, timeout_ms=1000)
        parts = by_partition(await asyncio.wait_for(fetching, ANSWERED_WITHIN_S))
        assert sorted(looks) == [0, 1, 1]
        assert (parts[0].records, len(parts[1].records), parts[0].high_watermark) == (b"", len(batch(3)), 0)

    asyncio.run(main())


def test_an_append_between_the_look_and_the_wait_answers_the_fetch_at_once(tmp_path: Path) -> None:
    """The reads of a replica's fetch see both partitions at their log end; a record lands on partition 0 before
    the fetch starts waiting (its reads can suspend, an append can come in between): the wait sees the log end
    past what the read saw and does not start, so the fetch is answered with it, not at max_wait."""
    async def main() -> None:
        leader = Leader(tmp_path)
        apis = await leader.start()
        fetches = apis._partitions.fetches
        real = fetches.wait_for_appends

        async def append_first(partitions: Any, timeout_s: float) -> list[int]:
            await leader.parts[0].append(batch(2), acks=1, timeout_ms=1000)  # after the look, before the wait
            return await real(partitions, timeout_s)

        fetches.wait_for_appends = append_first
        loop = asyncio.get_running_loop()
        started = loop.time()
        body = await asyncio.wait_for(ask(apis, 15, fetch_body(15, {0: 0, 1: 0}, replica=2, broker_epoch=EPOCH[2],
                                                                leader_epoch=4, max_wait_ms=FETCH_WAIT_MS)),
                                      ANSWERED_WITHIN_S)
        assert loop.time() - started < ANSWERED_WITHIN_S
        assert len(by_partition(body)[0].records) == len(batch(2))

    asyncio.run(main())


def test_a_throttled_partition_over_its_quota_is_answered_empty_and_never_holds_back_the_others(
        tmp_path: Path) -> None:
    async def main() -> None:
        leader = Leader(tmp_path)
        bucket = TokenBucket(20_000)  # KIP-73's leader quota, naming partition 1 for replica 3 (not in the ISR)
        leader.throttle = SimpleNamespace(
            leader_limit=lambda topic, partition, in_isr: bucket if partition == 1 and not in_isr else None)
        apis = await leader.start()
        for _ in range(3):
            await leader.parts[1].append(batch(1, b"x" * 30_000), acks=1, timeout_ms=1000)
        first = by_partition(await ask(apis, 15, fetch_body(15, {0: 0, 1: 0}, replica=3, broker_epoch=EPOCH[3],
                                                            leader_epoch=4)))
        taken = len(first[1].records)
        assert 0 < taken < leader.parts[1].log.size_in_bytes  # capped by the quota, which is in debt now
        loop = asyncio.get_running_loop()
        started = loop.time()
        fetching = asyncio.create_task(ask(apis, 15, fetch_body(15, {0: 0, 1: 1}, replica=3, broker_epoch=EPOCH[3],
                                                                leader_epoch=4, max_wait_ms=5000)))
        await asyncio.sleep(0.2)
        await leader.parts[0].append(batch(1), acks=1, timeout_ms=1000)
        parts = by_partition(await asyncio.wait_for(fetching, 5))
        assert loop.time() - started < 0.2 + 0.4  # answered on partition 0's append, not after partition 1's debt
        assert (len(parts[0].records), parts[1].records) == (len(batch(1)), b"")
        assert leader.parts[1].followers[3].log_end_offset == 1  # partition 1's offset acknowledged all the same

    asyncio.run(main())


def other_topics(count: int) -> dict[str, TopicAssignment]:
    """``count`` more topics in the cluster, each with an id of its own (in ZooKeeper's form), none on broker 1."""
    return {f"other-{i}": TopicAssignment({0: [2]}, topic_id=base64.urlsafe_b64encode(
        uuid.UUID(int=i + 1).bytes).decode().rstrip("=")) for i in range(count)}


class Unwalkable(TopicTable):
    """A topic table that fails whoever walks it: a request must find its topics by name or by id (the index is
    built by ``TopicTable.name_of`` itself, which walks the dict as a dict, not through these)."""

    def _walked(self, *args: Any) -> Any:
        raise AssertionError("a request walked every topic in the cluster")

    items = keys = values = __iter__ = _walked  # type: ignore[assignment]


def test_a_fetch_by_topic_id_finds_its_topic_without_walking_every_topic(tmp_path: Path) -> None:
    """Replicas fetch by id every round: a walk over the cluster's topics per request would make each round cost
    in proportion to the topics (0.8 ms a request at 10,000), however few of them the fetch names."""
    async def main() -> None:
        leader = Leader(tmp_path)
        apis = await leader.start()
        leader.cache.topics = Unwalkable({**other_topics(1000), "t": leader.cache.topics["t"]})
        await leader.parts[0].append(batch(3), acks=1, timeout_ms=1000)
        opened = await ask(apis, 15, fetch_body(15, {0: 0, 1: 0}, replica=2, broker_epoch=EPOCH[2], leader_epoch=4,
                                                session=(0, 0)))
        assert opened.error_code == NONE and opened.session_id != 0
        assert {p: len(e.records) for p, e in by_partition(opened).items()} == {0: len(batch(3)), 1: 0}
        await leader.parts[1].append(batch(2), acks=1, timeout_ms=1000)
        again = await ask(apis, 15, fetch_body(15, {0: 3}, replica=2, broker_epoch=EPOCH[2], leader_epoch=4,
                                               session=(opened.session_id, 1)))  # incremental: t-0 moved to 3
        got = {p: len(e.records) for p, e in by_partition(again).items()}
        assert (again.error_code, got.get(0, 0), got.get(1)) == (NONE, 0, len(batch(2)))
        consumer = await ask(apis, 13, fetch_body(13, {0: 0}))  # a consumer's fetch by id, sessionless
        # (all three records: broker 2's fetch at 3 moved the high watermark there)
        assert [(p.error_code, len(p.records)) for p in consumer.responses[0].partitions] == [(NONE, len(batch(3)))]

    asyncio.run(main())


# ------------------------------------------------------------- quiet partitions: acknowledged without a read

def count_reads(leader: Leader) -> list[int]:
    """Counts the leader's looks that record a follower's fetch, by partition: a read, or an acknowledgement at
    the log end without one (``Partition.acknowledge_at_log_end``); what a quiet partition skips."""
    calls: list[int] = []
    for p, part in leader.parts.items():
        real, real_ack = part.read_for_follower, part.acknowledge_at_log_end

        async def counted(*args: Any, _real: Any = real, _p: int = p, **kwargs: Any) -> Any:
            calls.append(_p)
            return await _real(*args, **kwargs)

        async def counted_ack(*args: Any, _real: Any = real_ack, _p: int = p) -> bool:
            done = await _real(*args)
            if done:  # (a fetch it leaves to the read path is counted there)
                calls.append(_p)
            return bool(done)

        part.read_for_follower = counted  # type: ignore[method-assign]
        part.acknowledge_at_log_end = counted_ack  # type: ignore[method-assign]
    return calls


def test_an_idle_partition_of_a_session_is_answered_without_a_read_and_a_changed_one_with_one(
        tmp_path: Path) -> None:
    async def main() -> None:
        leader = Leader(tmp_path, partitions=20)
        apis = await leader.start()
        await leader.parts[3].append(batch(2), acks=1, timeout_ms=1000)
        offsets = {p: 2 if p == 3 else 0 for p in range(20)}
        opened = await ask(apis, 15, fetch_body(15, offsets, replica=2, broker_epoch=EPOCH[2], leader_epoch=4,
                                                session=(0, 0)))
        reads = count_reads(leader)
        incremental = fetch_body(15, {}, replica=2, broker_epoch=EPOCH[2], session=(opened.session_id, 1))
        idle = await ask(apis, 15, incremental | {"topics": ()})
        assert (idle.error_code, by_partition(idle), reads) == (NONE, {}, [])  # 20 quiet partitions, no read
        await leader.parts[7].append(batch(1), acks=1, timeout_ms=1000)
        moved = await ask(apis, 15, fetch_body(15, {}, replica=2, broker_epoch=EPOCH[2],
                                               session=(opened.session_id, 2)) | {"topics": ()})
        assert {p: len(e.records) for p, e in by_partition(moved).items()} == {7: len(batch(1))}
        assert reads == [7]  # only the partition appended to went through the read path

    asyncio.run(main())


def test_a_quiet_partition_keeps_its_follower_caught_up_as_a_read_would(tmp_path: Path) -> None:
    """Kafka's rule: each fetch at the log end makes the follower caught up as of that fetch. A quiet answer that
    forgot it would leave an idle partition's follower to be dropped from the ISR at the first append after
    ``replica.lag.time.max.ms``."""
    async def main() -> None:
        leader = Leader(tmp_path)
        apis = await leader.start()
        clock = [1000.0]
        part = leader.parts[0]
        part._now = lambda: clock[0]  # type: ignore[method-assign]
        lag_s = part.config.replica_lag_time_max_ms / 1000
        await part.append(batch(2), acks=1, timeout_ms=1000)
        opened = await ask(apis, 15, fetch_body(15, {0: 2, 1: 0}, replica=2, broker_epoch=EPOCH[2],
                                                leader_epoch=4, session=(0, 0)))
        reads = count_reads(leader)
        clock[0] += 2 * lag_s  # idle for longer than the lag; the follower keeps fetching
        await ask(apis, 15, fetch_body(15, {}, replica=2, broker_epoch=EPOCH[2],
                                       session=(opened.session_id, 1)) | {"topics": ()})
        assert reads == []  # quiet: no read
        await part.append(batch(1), acks=1, timeout_ms=1000)
        clock[0] += lag_s / 2  # less than the lag since the follower's last fetch
        assert part.out_of_sync_followers() == []
        clock[0] += lag_s  # more than the lag since its last fetch, and it is behind: out of sync, as in Kafka
        assert part.out_of_sync_followers() == [2]

    asyncio.run(main())


def test_a_stale_incarnation_gets_no_quiet_answer_and_keeps_nothing_caught_up(tmp_path: Path) -> None:
    async def main() -> None:
        leader = Leader(tmp_path)
        apis = await leader.start()
        await leader.parts[0].append(batch(2), acks=1, timeout_ms=1000)
        clock = [1000.0]
        leader.parts[0]._now = lambda: clock[0]  # type: ignore[method-assign]
        opened = await ask(apis, 15, fetch_body(15, {0: 2, 1: 0}, replica=2, broker_epoch=EPOCH[2],
                                                leader_epoch=4, session=(0, 0)))
        before = leader.parts[0].followers[2].last_fetch_ms
        # Broker 2 restarted (a new broker epoch in ZooKeeper); its old incarnation fetches on, later.
        leader.cache.brokers[2] = dataclasses.replace(leader.cache.brokers[2], epoch=EPOCH[2] + 7)
        clock[0] += 5.0  # a fetch time recorded now would differ from the one before
        stale = await ask(apis, 15, fetch_body(15, {0: 2}, replica=2, broker_epoch=EPOCH[2], leader_epoch=4,
                                               session=(opened.session_id, 1)))
        assert {p: e.error_code for p, e in by_partition(stale).items()} == {0: STALE_BROKER_EPOCH,
                                                                            1: STALE_BROKER_EPOCH}
        assert leader.parts[0].followers[2].last_fetch_ms == before

    asyncio.run(main())


def test_a_partition_out_of_the_isr_is_never_quiet(tmp_path: Path) -> None:
    async def main() -> None:
        leader = Leader(tmp_path, isr=(1,))  # broker 2 out of the ISR: its fetch at the log end must expand it
        apis = await leader.start()
        reads = count_reads(leader)
        for _ in range(2):  # (the first fetch acknowledges; the second would be quiet if broker 2 were in the ISR)
            await ask(apis, 15, fetch_body(15, {0: 0, 1: 0}, replica=2, broker_epoch=EPOCH[2], leader_epoch=4))
        assert sorted(reads) == [0, 0, 1, 1]
        assert all(part.isr_state.in_flight or 2 in part.isr for part in leader.parts.values())

    asyncio.run(main())


def test_a_throttled_partition_is_never_quiet(tmp_path: Path) -> None:
    """KIP-73's leader quota decides a throttled partition's answer (and may hold it back): the read path's."""
    async def main() -> None:
        leader = Leader(tmp_path)
        buckets = {1: TokenBucket(1 << 30)}  # partition 1 throttled (with room to spare), partition 0 not
        leader.throttle = SimpleNamespace(leader_limit=lambda topic, partition, in_isr: buckets.get(partition))
        apis = await leader.start()
        reads = count_reads(leader)
        for _ in range(2):
            await ask(apis, 15, fetch_body(15, {0: 0, 1: 0}, replica=2, broker_epoch=EPOCH[2], leader_epoch=4))
        assert sorted(reads) == [0, 1, 1]  # partition 0 quiet at the second fetch; partition 1 read both times

    asyncio.run(main())


# ------------------------------------------------------- quiet partitions: left out of the session's rounds

def count_quiet_looks(apis: KafkaApis) -> list[int]:
    """Counts the quiet checks (``FetchService.fetch_if_quiet``), by partition: what a round costs a partition it
    looks at without reading. A partition the session holds quiet is not even looked at."""
    fetches = apis._partitions.fetches
    real, looks = fetches.fetch_if_quiet, []

    def counted(topic: str, partition: int, *args: Any) -> Any:
        looks.append(partition)
        return real(topic, partition, *args)

    fetches.fetch_if_quiet = counted  # type: ignore[method-assign]
    return looks


class Rounds:
    """Broker 2's session with the leader: opened with a full fetch, then one incremental round per call (``moved``:
    the partitions whose fetch offset the request updates)."""

    def __init__(self, apis: KafkaApis, offsets: dict[int, int], replica: int = 2) -> None:
        self.apis, self.offsets, self.replica = apis, offsets, replica
        self.session_id, self.epoch = 0, 0
        self.broker_epoch = EPOCH[replica]

    async def open(self) -> Any:
        body = await ask(self.apis, 15, fetch_body(15, self.offsets, replica=self.replica,
                                                   broker_epoch=self.broker_epoch, leader_epoch=4, session=(0, 0)))
        assert body.error_code == NONE and body.session_id != 0
        self.session_id, self.epoch = body.session_id, 1
        return body

    async def round(self, moved: dict[int, int] | None = None, max_wait_ms: int = 0) -> Any:
        body = await ask(self.apis, 15, self.request(moved, max_wait_ms))
        assert body.error_code == NONE, body.error_code
        self.epoch += 1
        return body

    def request(self, moved: dict[int, int] | None = None, max_wait_ms: int = 0) -> dict[str, Any]:
        fields = fetch_body(15, moved or {}, replica=self.replica, broker_epoch=self.broker_epoch, leader_epoch=4,
                            session=(self.session_id, self.epoch), max_wait_ms=max_wait_ms)
        return fields if moved else fields | {"topics": ()}


def test_a_quiet_partition_is_left_out_of_its_sessions_rounds_until_it_changes(tmp_path: Path) -> None:
    """A round costs what changed: once quiet, a partition is not even looked at until an append (or any other
    change of it) clears the mark; then it is read, acknowledged at its new end, and quiet again."""
    async def main() -> None:
        leader = Leader(tmp_path, partitions=20)
        apis = await leader.start()
        rounds = Rounds(apis, dict.fromkeys(range(20), 0))
        await rounds.open()
        looks, reads = count_quiet_looks(apis), count_reads(leader)
        await rounds.round()
        assert (sorted(looks), reads) == (list(range(20)), [])  # each looked at once, quiet: now marked
        looks.clear()
        assert by_partition(await rounds.round()) == {} and (looks, reads) == ([], [])  # none looked at
        await leader.parts[7].append(batch(2), acks=1, timeout_ms=1000)
        got = by_partition(await rounds.round())
        assert ({p: len(e.records) for p, e in got.items()}, looks, reads) == ({7: len(batch(2))}, [7], [7])
        await rounds.round({7: 2})  # the follower's new offset: acknowledged at the new log end (read path)
        await rounds.round()  # quiet again
        looks.clear()
        reads.clear()
        assert by_partition(await rounds.round()) == {} and (looks, reads) == ([], [])
        assert leader.parts[7].followers[2].log_end_offset == 2 and leader.parts[7].high_watermark == 2

    asyncio.run(main())


def test_an_append_to_a_quiet_partition_joins_the_round_waiting_on_no_partition(tmp_path: Path) -> None:
    """A round whose partitions are all quiet has none to read, and still waits (a follower's long-poll); an
    append to one of them joins the round and answers it, as Kafka's wait over the whole session would."""
    async def main() -> None:
        leader = Leader(tmp_path, partitions=4)
        apis = await leader.start()
        rounds = Rounds(apis, dict.fromkeys(range(4), 0))
        await rounds.open()
        await rounds.round()  # all four quiet now
        loop = asyncio.get_running_loop()
        started = loop.time()
        waiting = asyncio.create_task(rounds.round(max_wait_ms=FETCH_WAIT_MS))
        await asyncio.sleep(0.2)
        assert not waiting.done()  # no partition to read, and it waits
        await leader.parts[2].append(batch(3), acks=1, timeout_ms=1000)
        got = by_partition(await asyncio.wait_for(waiting, ANSWERED_WITHIN_S))
        assert loop.time() - started < ANSWERED_WITHIN_S  # the append ended it, not max_wait
        assert {p: len(e.records) for p, e in got.items()} == {2: len(batch(3))}
        assert leader.sessions.get(rounds.session_id).waiter is None  # nothing left armed  # type: ignore[union-attr]
        # The session goes on: partition 2 at its new offset, the others still left out.
        looks = count_quiet_looks(apis)
        await rounds.round({2: 3})
        assert looks == [2]

    asyncio.run(main())


async def clocked_leader(tmp_path: Path) -> tuple[Leader, KafkaApis, list[float]]:
    """The leader with one clock the test moves (seconds), for its partitions and its fetch sessions alike."""
    clock = [1000.0]
    leader = Leader(tmp_path)
    leader.sessions = FetchSessionCache(clock_ms=lambda: int(clock[0] * 1000))
    apis = await leader.start()
    for part in leader.parts.values():
        part._now = lambda: clock[0]  # type: ignore[method-assign]
    return leader, apis, clock


def test_a_quiet_partitions_follower_is_caught_up_as_of_its_sessions_last_fetch(tmp_path: Path) -> None:
    """Kafka's leader records each fetch at the log end as caught up; a round that leaves the partition out
    records it through the session's last fetch, folded in when the partition changes. So a follower that keeps
    fetching stays in sync however long the partition was idle, and one that stopped fetching is out of sync as
    soon as it is behind, as in Kafka: not only one more lag later."""
    async def main() -> None:
        leader, apis, clock = await clocked_leader(tmp_path)
        lag_s = leader.parts[0].config.replica_lag_time_max_ms / 1000
        rounds = Rounds(apis, {0: 0, 1: 0})
        await rounds.open()
        await rounds.round()  # both quiet from here
        reads = count_reads(leader)
        for _ in range(3):  # idle for three lags, the follower fetching on
            clock[0] += lag_s
            await rounds.round()
        assert reads == []
        await leader.parts[0].append(batch(1), acks=1, timeout_ms=1000)
        assert leader.parts[0].out_of_sync_followers() == []  # caught up as of its last round, just now
        clock[0] += lag_s * 1.5
        assert leader.parts[0].out_of_sync_followers() == [2]  # behind, and no fetch for longer than the lag
        # Partition 1: the follower stops fetching; two lags later an append finds it behind since its last
        # fetch, two lags ago: out of sync at once.
        clock[0] += lag_s * 0.5
        await leader.parts[1].append(batch(1), acks=1, timeout_ms=1000)
        assert leader.parts[1].out_of_sync_followers() == [2]

    asyncio.run(main())


def test_a_stale_incarnations_round_leaves_nothing_out_and_keeps_nothing_caught_up(tmp_path: Path) -> None:
    async def main() -> None:
        leader, apis, clock = await clocked_leader(tmp_path)
        lag_s = leader.parts[0].config.replica_lag_time_max_ms / 1000
        rounds = Rounds(apis, {0: 0, 1: 0})
        await rounds.open()
        await rounds.round()  # both quiet
        # Broker 2 restarted (a new broker epoch in ZooKeeper); its old incarnation goes on with the session.
        leader.cache.brokers[2] = dataclasses.replace(leader.cache.brokers[2], epoch=EPOCH[2] + 7)
        clock[0] += 2 * lag_s
        stale = by_partition(await rounds.round())
        assert {p: e.error_code for p, e in stale.items()} == {0: STALE_BROKER_EPOCH, 1: STALE_BROKER_EPOCH}
        await leader.parts[0].append(batch(1), acks=1, timeout_ms=1000)
        assert leader.parts[0].out_of_sync_followers() == [2]  # its last fetch as itself was two lags ago

    asyncio.run(main())


def test_a_high_watermark_moved_by_another_follower_reaches_a_quiet_follower_in_its_next_round(
        tmp_path: Path) -> None:
    async def main() -> None:
        leader = Leader(tmp_path, isr=(1, 2, 3))
        apis = await leader.start()
        part = leader.parts[0]
        await part.append(batch(2), acks=1, timeout_ms=1000)
        two = Rounds(apis, {0: 2, 1: 0})
        await two.open()
        await two.round()  # broker 2 at the log end of both: quiet (the high watermark waits for broker 3)
        assert part.high_watermark == 0 and by_partition(await two.round()) == {}
        three = Rounds(apis, {0: 2, 1: 0}, replica=3)
        await three.open()  # broker 3 at 2 as well: the high watermark moves to 2
        assert part.high_watermark == 2
        got = by_partition(await two.round())
        assert {p: (e.high_watermark, e.records) for p, e in got.items()} == {0: (2, b"")}

    asyncio.run(main())


def test_a_new_leader_epoch_brings_a_quiet_partition_back_with_its_error(tmp_path: Path) -> None:
    async def main() -> None:
        leader = Leader(tmp_path)
        apis = await leader.start()
        rounds = Rounds(apis, {0: 0, 1: 0})
        await rounds.open()
        await rounds.round()  # both quiet
        await leader.parts[0].apply(info(1, 5, (1, 2), partition=0), config())  # epoch 5: the session asks at 4
        got = by_partition(await rounds.round())
        assert {p: e.error_code for p, e in got.items()} == {0: FENCED_LEADER_EPOCH}

    asyncio.run(main())
