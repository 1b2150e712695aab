"""Switches that used to be environment variables read inside the replication core are broker flags now
(issue 22): ``--unsafe-ack-before-isr`` (the planted bug of `odradek verify`'s self-test) and
``--producer-id-expiration-ms``. Each goes flag -> BrokerConfig -> ReplicaManager -> Partition / producer state,
and the environment no longer changes anything."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from broker import cli
from broker.config import BrokerConfig
from broker.log import Log
from broker.replication.partition import Partition
from broker.replication.replica_manager import ReplicaManager
from odradek.protocol.errors import NotEnoughReplicasError
from tests.harness.wait import SLOW_MACHINE_S

from .fakes import TOPIC, Clock, FakeIsrManager, batch, config, info, settle
from .test_replica_manager import FakeFacade, cache_with, with_manager


def partition(tmp_path: Path, **kw: Any) -> Partition:
    log = Log.open(tmp_path / f"{TOPIC}-0")
    log.high_watermark = 0
    return Partition(TOPIC, 0, 1, log, FakeIsrManager(), lambda b: f"http://broker-{b}", now=Clock(), **kw)


def test_a_partition_built_without_the_flag_acks_all_only_once_the_isr_has_the_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ODRADEK_UNSAFE_ACK_BEFORE_ISR", "1")  # the old switch: no effect any more

    async def main() -> None:
        part = partition(tmp_path)
        assert part.unsafe_ack_before_isr is False
        await part.apply(info(1, 0, (1, 2)), config())
        produce = asyncio.create_task(part.append(batch(2), acks=-1, timeout_ms=5000))
        await settle()
        assert not produce.done() and part.high_watermark == 0  # broker 2 has not fetched it
        await part.read_for_follower(2, 2, 0, 1 << 20, 0)
        assert (await asyncio.wait_for(produce, SLOW_MACHINE_S)).last_offset == 1 and part.high_watermark == 2
        await part.apply(info(1, 0, (1,), version=1), config(min_isr=2))
        with pytest.raises(NotEnoughReplicasError):
            await part.append(batch(), acks=-1, timeout_ms=1000)

    asyncio.run(main())


def test_a_partition_built_with_the_flag_acks_all_before_the_isr_has_the_write(tmp_path: Path) -> None:
    async def main() -> None:
        part = partition(tmp_path, unsafe_ack_before_isr=True)
        await part.apply(info(1, 0, (1, 2)), config())
        # A wait for the ISR would end in its 5 s timeout (an error), not in this result.
        result = await asyncio.wait_for(part.append(batch(2), acks=-1, timeout_ms=5000), SLOW_MACHINE_S)
        assert result.last_offset == 1 and part.high_watermark == 0  # acknowledged, yet not committed: the bug
        await part.apply(info(1, 0, (1,), version=1), config(min_isr=2))
        assert (await part.append(batch(), acks=-1, timeout_ms=1000)).first_offset == 2  # min.insync ignored too

    asyncio.run(main())


@pytest.mark.parametrize("unsafe", [False, True])
def test_the_replica_manager_hands_its_settings_to_every_partition_it_opens(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unsafe: bool) -> None:
    monkeypatch.setenv("ODRADEK_PRODUCER_ID_EXPIRATION_MS", "5")  # the old switch: no effect any more
    cache = cache_with({0: (1, 0, (1, 2, 3)), 1: (1, 0, (1, 2))})  # led here: no follower fetcher needed

    async def body(rm: ReplicaManager, _: FakeFacade) -> None:
        for p in (0, 1):
            await rm.on_partition(cache.partitions[(TOPIC, p)], {})
        for p in (0, 1):
            part = rm.partitions[(TOPIC, p)]
            assert part.unsafe_ack_before_isr is unsafe
            assert part.producer_state is not None and part.producer_state.expiration_ms == 3_600_000

    with_manager(tmp_path, cache, body, unsafe_ack_before_isr=unsafe, producer_id_expiration_ms=3_600_000)


def _config_from_flags(monkeypatch: pytest.MonkeyPatch, *flags: str) -> BrokerConfig:
    import broker.server

    seen: list[BrokerConfig] = []
    monkeypatch.setattr(broker.server, "run_broker", lambda c: seen.append(c) or 0)
    args = cli.build_parser().parse_args(["--id", "1", "--zk", "127.0.0.1:2181", "--listen", "127.0.0.1:9092",
                                          "--data-dir", "/tmp/unused", *flags])
    assert cli.run(args) == 0
    return seen[0]


def test_the_broker_flags_reach_broker_config(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    default = _config_from_flags(monkeypatch)
    assert default.unsafe_ack_before_isr is False
    assert default.producer_id_expiration_ms == 86_400_000  # Kafka's producer.id.expiration.ms
    assert "WARNING" not in capsys.readouterr().err
    set_ = _config_from_flags(monkeypatch, "--unsafe-ack-before-isr", "--producer-id-expiration-ms", "60000")
    assert set_.unsafe_ack_before_isr is True and set_.producer_id_expiration_ms == 60_000
    assert "WARNING: --unsafe-ack-before-isr" in capsys.readouterr().err
    help_text = cli.build_parser().format_help()
    assert "testing odradek verify only" in help_text
    with pytest.raises(SystemExit):
        _config_from_flags(monkeypatch, "--producer-id-expiration-ms", "0")


def test_the_replica_fetch_transport_flags_reach_broker_config(monkeypatch: pytest.MonkeyPatch) -> None:
    default = _config_from_flags(monkeypatch)
    assert (default.replica_fetch_transport, default.num_replica_fetchers) == ("auto", 1)
    assert default.effective_replica_fetch_transport() == "http"  # auto, and no Kafka listener
    kafka = _config_from_flags(monkeypatch, "--replica-fetch-transport", "kafka", "--num-replica-fetchers", "3",
                               "--kafka-listeners", "PLAINTEXT://127.0.0.1:9192,INTERNAL://127.0.0.1:9193",
                               "--kafka-listener-security-protocol-map", "INTERNAL:PLAINTEXT",
                               "--kafka-inter-broker-listener-name", "internal")
    assert (kafka.replica_fetch_transport, kafka.num_replica_fetchers) == ("kafka", 3)
    listener = kafka.kafka_inter_broker_listener()
    assert listener is not None and (listener.name, listener.port) == ("INTERNAL", 9193)
    first = _config_from_flags(monkeypatch, "--kafka-listeners", "PLAINTEXT://127.0.0.1:9192")
    assert first.kafka_inter_broker_listener() == first.kafka_listeners[0]  # Kafka's default: the first


def test_auto_fetches_over_kafka_when_this_broker_has_a_kafka_listener_it_can_use(
        monkeypatch: pytest.MonkeyPatch) -> None:
    plain = _config_from_flags(monkeypatch, "--kafka-listeners", "PLAINTEXT://127.0.0.1:9192",
                               "--replica-fetch-transport", "auto")
    assert plain.effective_replica_fetch_transport() == "kafka"
    none = _config_from_flags(monkeypatch, "--replica-fetch-transport", "auto")
    assert none.effective_replica_fetch_transport() == "http"  # no Kafka listener to fetch through
    default = _config_from_flags(monkeypatch, "--kafka-listeners", "PLAINTEXT://127.0.0.1:9192")
    assert default.effective_replica_fetch_transport() == "kafka"  # auto is the default
    http = _config_from_flags(monkeypatch, "--kafka-listeners", "PLAINTEXT://127.0.0.1:9192",
                              "--replica-fetch-transport", "http")
    assert http.effective_replica_fetch_transport() == "http"
    sasl = BrokerConfig(1, "zk:2181", "127.0.0.1", 0, Path("/d"), replica_fetch_transport="auto",
                        kafka_listeners=cli_listeners("SASL_PLAINTEXT://127.0.0.1:9192"))
    assert sasl.effective_replica_fetch_transport() == "http"  # a SASL listener and no user to log in as


def test_the_broker_and_its_replica_manager_take_the_kafka_transport(tmp_path: Path) -> None:
    from broker.server import Broker

    async def main() -> None:
        for transport, fetches_over_kafka in (("http", False), ("kafka", True), ("auto", True)):
            config = BrokerConfig(1, "127.0.0.1:1", "127.0.0.1", 0, tmp_path / transport,
                                  kafka_listeners=cli_listeners("PLAINTEXT://127.0.0.1:9192"),
                                  replica_fetch_transport=transport, num_replica_fetchers=2)
            manager = Broker(config).replicas.fetcher_manager
            assert (manager is not None) is fetches_over_kafka
            assert manager is None or manager.num_fetchers == 2

    asyncio.run(main())


def cli_listeners(spec: str) -> Any:
    from broker.kafka.listeners import parse_kafka_listeners

    return parse_kafka_listeners(spec)
