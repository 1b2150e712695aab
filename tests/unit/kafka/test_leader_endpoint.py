"""The follower's Kafka-wire ``LeaderEndPoint`` (broker/kafka/leader_endpoint.py) against a real leader: its socket
server (broker/kafka/network.py), its KafkaApis, fetch service, follower-fetch service, offsets service and fetch
session cache, over real partitions on real logs (``tmp_path``); the follower's partitions are real too, driven by
the real fetcher (broker/replication/leader_fetcher.py). What is checked is what goes over the wire and what it does
to both sides: the high watermark an acks=all produce waits for, the bytes the follower's log ends up holding, the
session the leader keeps, the leader's log bounds and epoch ends, and each refusal as its typed error."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.fetch.offsets import OffsetsService
from broker.fetch.service import FetchService
from broker.fetch.sessions import FetchSessionCache
from broker.kafka.apis import KafkaApis
from broker.kafka.authorization import KafkaAuthorizer
from broker.kafka.leader_endpoint import KafkaLeaderEndPoint, leader_endpoints
from broker.kafka.listeners import KafkaListener
from broker.kafka.network import KafkaServer
from broker.kafka.partitions import PartitionServices
from broker.kafka.sasl import SaslGate
from broker.log import Log
from broker.metadata.cache import MetadataCache
from broker.replication.fetch_session_handler import FetchSessionHandler, PartitionData
from broker.replication.follower_fetch import FollowerFetchService
from broker.replication.leader_endpoint import FetchSettings
from broker.replication.leader_fetcher import LeaderFetcher
from broker.replication.partition import FOLLOWER, LEADER, Partition
from broker.security.authn import Authenticator
from broker.security.settings import SecuritySettings
from broker.security.tls import make_local_pki, server_context
from odradek.protocol import scram
from odradek.protocol.errors import (
    BrokerNotAvailableError,
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    StaleBrokerEpochError,
    UnknownTopicError,
)
from odradek.protocol.model import BrokerInfo, KafkaEndpoint, TopicAssignment
from tests.unit.kafka.test_apis import TOPIC_ID, TOPIC_UUID
from tests.unit.replication.fakes import FakeIsrManager, batch, config, info

LEADER_ID, FOLLOWER_ID = 1, 2
EPOCH = {1: 101, 2: 102, 3: 103}  # broker epochs as ZooKeeper holds them
LEADER_EPOCH = 4
PLAINTEXT = KafkaListener("PLAINTEXT", "127.0.0.1", 0, "PLAINTEXT")
QUICK = FetchSettings(max_wait_ms=200)


class Router:
    """The leader router's leader-only looks, over the partitions broker 1 leads."""

    def __init__(self, parts: dict[tuple[str, int], Partition]) -> None:
        self.parts = parts

    def leader(self, topic: str, partition: int) -> Partition:
        part = self.parts.get((topic, partition))
        if part is None:
            raise UnknownTopicError(f"{topic}-{partition}")
        if part.role != LEADER:
            raise part.not_leader()
        return part

    async def await_leader(self, topic: str, partition: int, deadline: float) -> Partition:
        return self.leader(topic, partition)


class Cluster:
    """Broker 1 leading t-0 and t-1 (replicas 1, 2; ISR 1, 2) behind a real Kafka listener; broker 2 following
    both, with a metadata cache naming broker 1's listener (once it is bound) and the topic's id."""

    def __init__(self, tmp_path: Path, listener: KafkaListener = PLAINTEXT, *, ssl_context: Any = None,
                 gate: Callable[[Any], Any] | None = None) -> None:
        self.tmp_path = tmp_path
        self.listener, self.ssl_context, self.gate = listener, ssl_context, gate
        self.asked: list[tuple[str, str]] = []  # (principal, operation) the leader's authorizer was asked
        self.leader_cache = MetadataCache()
        self.leader_cache.topics = {"t": TopicAssignment({0: [1, 2], 1: [1, 2]}, topic_id=TOPIC_ID)}
        self.leader_cache.brokers = {b: BrokerInfo(b, "127.0.0.1", 8080 + b, epoch=EPOCH[b]) for b in (1, 2, 3)}
        self.follower_cache = MetadataCache()
        self.follower_cache.topics = dict(self.leader_cache.topics)
        self.leaders: dict[tuple[str, int], Partition] = {}
        self.followers: dict[tuple[str, int], Partition] = {}
        self.sessions = FetchSessionCache(10, 120_000, rng=random.Random(3))
        self.server: KafkaServer | None = None
        self.dispatch: Any = None

    async def start(self) -> None:
        for p in (0, 1):
            for broker, out in ((LEADER_ID, self.leaders), (FOLLOWER_ID, self.followers)):
                log = Log.open(self.tmp_path / f"t-{p}-b{broker}")
                log.high_watermark = 0
                part = Partition("t", p, broker, log, FakeIsrManager(), lambda b: f"http://broker-{b}")
                await part.apply(info(LEADER_ID, LEADER_EPOCH, (1, 2), replicas=(1, 2), partition=p), config())
                out[("t", p)] = part
        assert {p.role for p in self.leaders.values()} == {LEADER}
        assert {p.role for p in self.followers.values()} == {FOLLOWER}
        throttle = SimpleNamespace(leader_limit=lambda topic, partition, in_isr: None)
        followers = FollowerFetchService(LEADER_ID, self.leader_cache, throttle,  # type: ignore[arg-type]
                                         reread_state=lambda topic, partition: None)
        router = Router(self.leaders)
        fetches = FetchService(LEADER_ID, router, followers, None)  # type: ignore[arg-type]
        replicas = SimpleNamespace(cache=self.leader_cache, leader_partition=router.leader)
        offsets = OffsetsService(replicas, None)  # type: ignore[arg-type]
        services = PartitionServices(None, fetches, offsets, self.sessions)  # type: ignore[arg-type]
        ready = asyncio.Event()
        ready.set()
        view = SimpleNamespace(broker_id=LEADER_ID, cluster_id="cid", controller_id=LEADER_ID, ready=ready)
        def allowed(principal: str, host: str, operation: str, resource_type: str, name: str) -> bool:
            self.asked.append((principal, operation))
            return True

        apis = KafkaApis(view, self.leader_cache, services,  # type: ignore[arg-type]
                         KafkaAuthorizer(SimpleNamespace(enforce=True, allowed=allowed)),  # type: ignore[arg-type]
                         BrokerConfig(LEADER_ID, "zk", "127.0.0.1", 8081, self.tmp_path))
        self.dispatch = apis.handle if self.gate is None else self.gate(apis.handle)
        self.server = KafkaServer((self.listener,), self.dispatch, ssl_context=self.ssl_context)
        await self.server.start()
        port = self.server.bound_port(self.listener.name)
        self.follower_cache.brokers = {LEADER_ID: BrokerInfo(LEADER_ID, "127.0.0.1", 8081, epoch=EPOCH[1],
                                                             kafka_endpoints=(KafkaEndpoint(
                                                                 self.listener.name, "127.0.0.1", port,
                                                                 self.listener.security_protocol),))}

    def endpoint(self, leader_id: int = LEADER_ID) -> KafkaLeaderEndPoint:
        return KafkaLeaderEndPoint.for_cache(leader_id, self.follower_cache, "PLAINTEXT",
                                             client_id=f"broker-{FOLLOWER_ID}-fetcher-0")

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()


def run(test: Callable[[Cluster], Awaitable[None]], tmp_path: Path, **kwargs: Any) -> None:
    async def main() -> None:
        cluster = Cluster(tmp_path, **kwargs)
        await cluster.start()
        try:
            await asyncio.wait_for(test(cluster), 20)
        finally:
            await cluster.stop()

    asyncio.run(main())


async def until(condition: Callable[[], Any], what: str, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"waited {timeout} s for {what}"
        await asyncio.sleep(0.01)


def log_bytes(part: Partition) -> bytes:
    return bytes(part.log.read(0, 1 << 22).data)


# ---------------------------------------------------------------------------------------------- the fetcher


def test_a_fetcher_replicates_both_partitions_over_the_kafka_listener_and_acks_all_completes(
        tmp_path: Path) -> None:
    async def test(c: Cluster) -> None:
        endpoint = c.endpoint()
        fetcher = LeaderFetcher(endpoint, FOLLOWER_ID, broker_epoch=lambda: EPOCH[FOLLOWER_ID], settings=QUICK)
        for part in c.followers.values():
            fetcher.add(part)
        task = asyncio.create_task(fetcher.run())
        try:
            # acks=all with ISR (1, 2): answered only once broker 2 has fetched past the records over the wire
            first = await asyncio.wait_for(c.leaders[("t", 0)].append(batch(3), acks=-1, timeout_ms=5000), 8)
            second = await asyncio.wait_for(c.leaders[("t", 1)].append(batch(2), acks=-1, timeout_ms=5000), 8)
            assert (first.last_offset, second.last_offset) == (2, 1)
            await until(lambda: all(c.followers[k].high_watermark == c.leaders[k].log_end_offset
                                    for k in c.leaders), "the followers to follow the high watermark")
            for key in c.leaders:
                assert log_bytes(c.followers[key]) == log_bytes(c.leaders[key])  # byte for byte
            # one session on the leader, privileged, by topic id, holding both partitions; rounds after the
            # first were incremental
            stats = c.sessions.stats()
            assert (stats.sessions, stats.partitions, stats.evictions) == (1, 2, 0)
            assert stats.contexts["full"] == 1 and stats.contexts["incremental"] >= 2, stats.contexts
        finally:
            task.cancel()
            await endpoint.close()

    run(test, tmp_path)


# ---------------------------------------------------------------------------------------- one request each


def test_a_full_then_an_incremental_fetch_carry_the_session_and_only_what_changed(tmp_path: Path) -> None:
    async def test(c: Cluster) -> None:
        endpoint = c.endpoint()
        handler = FetchSessionHandler()
        try:
            await c.leaders[("t", 0)].append(batch(2), acks=1, timeout_ms=1000)
            await c.leaders[("t", 1)].append(batch(1), acks=1, timeout_ms=1000)
            wanted = {("t", 0): PartitionData(0, 0, 1 << 20, LEADER_EPOCH), ("t", 1): PartitionData(0, 0, 1 << 20,
                                                                                                 LEADER_EPOCH)}
            request = handler.build(wanted)
            answer = await endpoint.fetch(request, replica_id=FOLLOWER_ID, broker_epoch=EPOCH[FOLLOWER_ID],
                                          settings=QUICK)
            assert handler.handle_response(answer.error_code, answer.session_id, list(answer.partitions)).ok
            assert answer.session_id != 0 and handler.epoch == 1
            assert {k: (len(p.records), p.error) for k, p in answer.partitions.items()} == {
                ("t", 0): (len(batch(2)), None), ("t", 1): (len(batch(1)), None)}
            assert bytes(answer.partitions[("t", 0)].records) == log_bytes(c.leaders[("t", 0)])
            # partition 1 moved on, partition 0 is forgotten: the incremental answer names partition 1 alone
            request = handler.build({("t", 1): PartitionData(1, 0, 1 << 20, LEADER_EPOCH)})
            assert not request.full and request.forgotten == (("t", 0),)
            await c.leaders[("t", 1)].append(batch(4), acks=1, timeout_ms=1000)
            answer = await endpoint.fetch(request, replica_id=FOLLOWER_ID, broker_epoch=EPOCH[FOLLOWER_ID],
                                          settings=QUICK)
            assert handler.handle_response(answer.error_code, answer.session_id, list(answer.partitions)).ok
            assert list(answer.partitions) == [("t", 1)]
            assert len(answer.partitions[("t", 1)].records) == len(batch(4))
            session = c.sessions.get(answer.session_id)
            assert session is not None and session.privileged and session.uses_topic_ids
            assert list(session.partitions) == [(TOPIC_UUID, 1)]  # by topic id; partition 0 forgotten
        finally:
            await endpoint.close()

    run(test, tmp_path)


def test_refusals_come_back_as_typed_errors(tmp_path: Path) -> None:
    async def test(c: Cluster) -> None:
        endpoint = c.endpoint()
        try:
            wanted = {("t", 0): PartitionData(0, 0, 1 << 20, LEADER_EPOCH),
                      ("t", 1): PartitionData(0, 0, 1 << 20, LEADER_EPOCH - 1)}
            answer = await endpoint.fetch(FetchSessionHandler().build(wanted), replica_id=FOLLOWER_ID,
                                          broker_epoch=EPOCH[FOLLOWER_ID] - 1, settings=QUICK)
            assert {k: type(p.error) for k, p in answer.partitions.items()} == {
                ("t", 0): StaleBrokerEpochError, ("t", 1): StaleBrokerEpochError}
            answer = await endpoint.fetch(FetchSessionHandler().build(wanted), replica_id=FOLLOWER_ID,
                                          broker_epoch=EPOCH[FOLLOWER_ID], settings=QUICK)
            assert answer.partitions[("t", 0)].error is None
            assert isinstance(answer.partitions[("t", 1)].error, FencedLeaderEpochError)
            ends = await endpoint.epoch_end_offsets({("t", 0): (LEADER_EPOCH - 1, LEADER_EPOCH)},
                                                    replica_id=FOLLOWER_ID)
            assert isinstance(ends[("t", 0)].error, FencedLeaderEpochError)
            # broker 1 steps down for t-1: the leader says so, typed, for the log bounds too
            await c.leaders[("t", 1)].apply(info(3, LEADER_EPOCH + 1, (1, 2, 3), replicas=(1, 2, 3), partition=1,
                                                 version=5), config())
            with pytest.raises(NotLeaderOrFollowerError):
                await endpoint.log_bounds(("t", 1), replica_id=FOLLOWER_ID)
        finally:
            await endpoint.close()
        # a leader with no registration (or none of this listener) is out of reach: nothing is sent
        nowhere = c.endpoint(leader_id=3)
        with pytest.raises(BrokerNotAvailableError) as e:
            await nowhere.log_bounds(("t", 0), replica_id=FOLLOWER_ID)
        assert e.value.details == {"sent": False}
        await nowhere.close()

    run(test, tmp_path)


def test_epoch_ends_and_log_bounds_are_the_leaders_log_not_its_high_watermark(tmp_path: Path) -> None:
    async def test(c: Cluster) -> None:
        endpoint = c.endpoint()
        leader = c.leaders[("t", 0)]
        try:
            await leader.append(batch(3), acks=1, timeout_ms=1000)  # nobody fetched: the high watermark stays 0
            await leader.delete_records(0)
            assert (leader.high_watermark, leader.log_end_offset) == (0, 3)
            assert await endpoint.log_bounds(("t", 0), replica_id=FOLLOWER_ID) == (0, 3)
            ends = await endpoint.epoch_end_offsets({("t", 0): (LEADER_EPOCH, LEADER_EPOCH),
                                                     ("t", 1): (LEADER_EPOCH, LEADER_EPOCH + 1)},
                                                    replica_id=FOLLOWER_ID)
            assert (ends[("t", 0)].leader_epoch, ends[("t", 0)].end_offset, ends[("t", 0)].error) == (
                LEADER_EPOCH, 3, None)
            assert (ends[("t", 1)].leader_epoch, ends[("t", 1)].end_offset) == (-1, -1)  # above every epoch it knows
        finally:
            await endpoint.close()

    run(test, tmp_path)


# ------------------------------------------------------------------------------- the broker's security settings


def test_the_brokers_endpoints_fetch_over_sasl_ssl_as_the_inter_broker_user(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("broker.kafka.sasl.FAILED_AUTHENTICATION_DELAY_S", 0.0)
    pki = tmp_path / "pki"
    pki.mkdir()
    make_local_pki(pki, ["broker-1", "broker-2"])
    users = {"replicator": {m: scram.make_credential(m, "secret").encode() for m in scram.MECHANISMS}}
    listener = KafkaListener("INTERNAL", "127.0.0.1", 0, "SASL_SSL")
    leader_tls = server_context(SecuritySettings(ssl_cafile=str(pki / "ca.pem"), ssl_certfile=str(pki / "broker-1.pem"),
                                                 ssl_keyfile=str(pki / "broker-1.key"), ssl_client_auth="none"))

    def gate(handle: Any) -> Any:
        return SaslGate(handle, Authenticator(lambda u: users.get(u, {}), None), ("SCRAM-SHA-512",)).dispatch

    async def test(c: Cluster) -> None:
        follower_config = BrokerConfig(
            FOLLOWER_ID, "zk", "127.0.0.1", 8082, tmp_path, kafka_listeners=(
                KafkaListener("PLAINTEXT", "127.0.0.1", 9192, "PLAINTEXT"), listener),
            kafka_inter_broker_listener_name="INTERNAL", sasl_mechanism_inter_broker_protocol="SCRAM-SHA-512",
            security=SecuritySettings(ssl_cafile=str(pki / "ca.pem"), ssl_certfile=str(pki / "broker-2.pem"),
                                      ssl_keyfile=str(pki / "broker-2.key"), inter_broker_user="replicator",
                                      inter_broker_password="secret"))
        endpoint = leader_endpoints(follower_config, c.follower_cache)(LEADER_ID, 0)
        fetcher = LeaderFetcher(endpoint, FOLLOWER_ID, broker_epoch=lambda: EPOCH[FOLLOWER_ID], settings=QUICK)
        for part in c.followers.values():
            fetcher.add(part)
        task = asyncio.create_task(fetcher.run())
        try:
            done = await asyncio.wait_for(c.leaders[("t", 0)].append(batch(2), acks=-1, timeout_ms=5000), 8)
            assert done.last_offset == 1
            await until(lambda: log_bytes(c.followers[("t", 0)]) == log_bytes(c.leaders[("t", 0)]),
                        "the follower to hold the leader's records")
        finally:
            task.cancel()
            await endpoint.close()
        assert ("User:replicator", "ClusterAction") in c.asked  # logged in as the inter-broker user

    run(test, tmp_path, listener=listener, ssl_context=leader_tls, gate=gate)
    with pytest.raises(ValueError, match="needs --inter-broker-user"):
        leader_endpoints(BrokerConfig(2, "zk", "127.0.0.1", 8082, tmp_path, kafka_listeners=(listener,)),
                         MetadataCache())


def test_a_leader_registered_on_another_port_is_reached_there_on_a_new_connection(tmp_path: Path) -> None:
    async def test(c: Cluster) -> None:
        endpoint = c.endpoint()
        try:
            await c.leaders[("t", 0)].append(batch(2), acks=1, timeout_ms=1000)
            assert await endpoint.log_bounds(("t", 0), replica_id=FOLLOWER_ID) == (0, 2)
            assert c.server is not None
            # the leader comes back on another port (a restart): its registration says so, and the endpoint follows
            moved = KafkaServer((PLAINTEXT,), c.dispatch)
            await moved.start()
            try:
                await c.server.stop()
                port = moved.bound_port(PLAINTEXT.name)
                c.follower_cache.brokers[LEADER_ID] = BrokerInfo(
                    LEADER_ID, "127.0.0.1", 8081, epoch=EPOCH[1],
                    kafka_endpoints=(KafkaEndpoint("PLAINTEXT", "127.0.0.1", port, "PLAINTEXT"),))
                assert await endpoint.log_bounds(("t", 0), replica_id=FOLLOWER_ID) == (0, 2)
                assert moved.connection_count == 1
            finally:
                await moved.stop()
        finally:
            await endpoint.close()

    run(test, tmp_path)
