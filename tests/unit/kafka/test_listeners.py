"""--kafka-listeners (every Kafka security protocol, names mapped to protocols), --kafka-advertised-listeners,
and the Kafka endpoints in the broker's registration."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from broker.cli import build_parser, run
from broker.config import BrokerConfig
from broker.kafka.listeners import KafkaListener, advertised, check_tls, parse_kafka_listeners, parse_protocol_map
from broker.security.settings import SecuritySettings
from odradek.protocol.model import BrokerInfo, KafkaEndpoint
from zk.znodes import BrokerIdZNode


def test_kafka_syntax_is_parsed() -> None:
    assert parse_kafka_listeners("PLAINTEXT://127.0.0.1:9092") == (
        KafkaListener("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT"),)
    assert parse_kafka_listeners("plaintext://:9092")[0].host == "127.0.0.1"  # no host: loopback, never all


def test_every_kafka_security_protocol_is_served_and_names_map_to_protocols() -> None:
    listeners = parse_kafka_listeners("PLAINTEXT://:9092,SSL://:9093,SASL_PLAINTEXT://:9094,SASL_SSL://:9095")
    assert [(lst.security_protocol, lst.tls, lst.sasl) for lst in listeners] == [
        ("PLAINTEXT", False, False), ("SSL", True, False), ("SASL_PLAINTEXT", False, True),
        ("SASL_SSL", True, True)]
    mapping = parse_protocol_map("internal:sasl_ssl, CLIENTS:SSL")
    assert parse_kafka_listeners("INTERNAL://:9092,CLIENTS://:9093", protocol_map=mapping) == (
        KafkaListener("INTERNAL", "127.0.0.1", 9092, "SASL_SSL"), KafkaListener("CLIENTS", "127.0.0.1", 9093, "SSL"))
    # an advertised name takes its listener's protocol
    assert advertised(parse_kafka_listeners("INTERNAL://:9092", protocol_map=mapping), "INTERNAL://k.example:19092") \
        == (KafkaListener("INTERNAL", "k.example", 19092, "SASL_SSL"),)
    for bad in ("INTERNAL", "INTERNAL:TLS", "SSL:PLAINTEXT"):
        with pytest.raises(ValueError, match="--kafka-listener-security-protocol-map"):
            parse_protocol_map(bad)


def test_a_tls_listener_needs_the_brokers_certificate() -> None:
    listeners = parse_kafka_listeners("SASL_SSL://127.0.0.1:9093")
    with pytest.raises(ValueError, match=r"SASL_SSL://127.0.0.1:9093 needs --ssl-certfile and --ssl-keyfile"):
        check_tls(listeners, SecuritySettings())
    check_tls(listeners, SecuritySettings(ssl_certfile="c.pem", ssl_keyfile="c.key"))
    check_tls(parse_kafka_listeners("SASL_PLAINTEXT://127.0.0.1:9093"), SecuritySettings())


@pytest.mark.parametrize(("spec", "reason"), [
    ("INTERNAL://127.0.0.1:9093", "listener INTERNAL names no security protocol; name one of PLAINTEXT, SSL, "
                                  "SASL_PLAINTEXT, SASL_SSL or map it with --kafka-listener-security-protocol-map"),
    ("127.0.0.1:9092", "is not NAME://HOST:PORT"),
    ("PLAINTEXT://127.0.0.1:99999", "is not NAME://HOST:PORT"),
    ("PLAINTEXT://127.0.0.1:9092,PLAINTEXT://127.0.0.1:9093", "each listener needs its own name and port"),
    (",", "names no listener"),
])
def test_what_cannot_be_served_is_refused_with_a_reason(spec: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason.replace("(", r"\(")):
        parse_kafka_listeners(spec)


def test_advertised_listeners_default_to_the_listeners_and_must_name_one() -> None:
    listeners = parse_kafka_listeners("PLAINTEXT://0.0.0.0:9092")
    assert advertised(listeners, "PLAINTEXT://kafka.example:19092") == (
        KafkaListener("PLAINTEXT", "kafka.example", 19092, "PLAINTEXT"),)
    with pytest.raises(ValueError, match="not an address clients can reach"):
        advertised(listeners, None)
    plain = parse_kafka_listeners("PLAINTEXT://127.0.0.1:9092")
    assert advertised(plain, None) == plain
    with pytest.raises(ValueError, match="needs --kafka-listeners"):
        advertised((), "PLAINTEXT://h:1")


@pytest.mark.parametrize(("flags", "reason"), [
    (["--kafka-listeners", "SSL://127.0.0.1:9093"],
     "--kafka-listeners: SSL://127.0.0.1:9093 needs --ssl-certfile and --ssl-keyfile"),
    (["--kafka-listeners", "EXTERNAL://127.0.0.1:9093"], "--kafka-listeners: listener EXTERNAL names no security"),
    (["--kafka-listeners", "SASL_PLAINTEXT://127.0.0.1:9093", "--kafka-sasl-enabled-mechanisms", "GSSAPI"],
     "--kafka-sasl-enabled-mechanisms: GSSAPI; served: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    (["--replica-fetch-transport", "kafka"], "--replica-fetch-transport kafka needs --kafka-listeners"),
    (["--replica-fetch-transport", "kafka", "--kafka-listeners", "PLAINTEXT://127.0.0.1:9093",
      "--kafka-inter-broker-listener-name", "INTERNAL"],
     "--kafka-inter-broker-listener-name INTERNAL is not one of --kafka-listeners"),
    (["--replica-fetch-transport", "kafka", "--kafka-listeners", "SASL_PLAINTEXT://127.0.0.1:9093"],
     "--replica-fetch-transport kafka through the SASL listener SASL_PLAINTEXT://127.0.0.1:9093 needs "
     "--inter-broker-user"),
    (["--num-replica-fetchers", "0"], "--num-replica-fetchers must be at least 1"),
])
def test_the_broker_refuses_to_start_on_what_it_cannot_serve_with_one_line(tmp_path: Path, flags: list[str],
                                                                           reason: str) -> None:
    args = build_parser().parse_args(["--id", "1", "--zk", "127.0.0.1:1", "--listen", "127.0.0.1:1",
                                      "--data-dir", str(tmp_path), *flags])
    with pytest.raises(SystemExit) as e:
        run(args)
    message = str(e.value.code)
    assert message.startswith(f"odradek broker: {reason}")
    assert "\n" not in message


def test_config_registers_the_advertised_endpoints() -> None:
    listeners = parse_kafka_listeners("PLAINTEXT://0.0.0.0:9092")
    config = BrokerConfig(1, "zk", "127.0.0.1", 8082, Path("."), kafka_listeners=listeners,
                          kafka_advertised_listeners=advertised(listeners, "PLAINTEXT://b1.example:9092"))
    assert config.kafka_endpoints() == (KafkaEndpoint("PLAINTEXT", "b1.example", 9092, "PLAINTEXT"),)
    assert BrokerConfig(1, "zk", "h", 1, Path(".")).kafka_endpoints() == ()


def test_registration_round_trips_kafka_endpoints_and_older_registrations_decode() -> None:
    info = BrokerInfo(3, "127.0.0.1", 8084, rack="r", timestamp_ms=1,
                      kafka_endpoints=(KafkaEndpoint("PLAINTEXT", "127.0.0.1", 9094, "PLAINTEXT"),))
    raw = orjson.loads(BrokerIdZNode.encode(info))
    assert raw["kafka_endpoints"] == [
        {"listener": "PLAINTEXT", "host": "127.0.0.1", "port": 9094, "security_protocol": "PLAINTEXT"}]
    assert raw["endpoints"] == ["HTTP://127.0.0.1:8084"]  # the HTTP listeners stay where they were
    assert BrokerIdZNode.decode(3, BrokerIdZNode.encode(info), czxid=5) == BrokerInfo(
        3, "127.0.0.1", 8084, "r", 1, epoch=5, kafka_endpoints=info.kafka_endpoints)
    # a broker without a Kafka listener writes what it always wrote; a registration from before decodes
    assert "kafka_endpoints" not in orjson.loads(BrokerIdZNode.encode(BrokerInfo(1, "h", 1)))
    older = b'{"version":5,"host":"h","port":8082,"jmx_port":-1,"timestamp":"1","endpoints":["HTTP://h:8082"],' \
            b'"listener_security_protocol_map":{"HTTP":"PLAINTEXT"},"features":{}}'
    assert BrokerIdZNode.decode(1, older).kafka_endpoints == ()
