"""Listener declarations as in Kafka, refused when they would run less secure than asked, and registrations."""

from __future__ import annotations

import pytest

from broker.security.settings import SecuritySettings, parse_listeners
from odradek.protocol.model import BrokerInfo
from zk.znodes import BrokerIdZNode


def test_parse_listeners_and_protocol_map() -> None:
    ls = parse_listeners("PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093", "INTERNAL:SSL")
    assert [(x.name, x.port, x.protocol, x.scheme) for x in ls] == [
        ("PLAINTEXT", 9092, "PLAINTEXT", "http"), ("INTERNAL", 9093, "SSL", "https")]
    for bad in ("127.0.0.1:9092", "FOO://127.0.0.1:1", "SSL://h:1,SSL://h:2", "SASL_PLAINTEXT://h:1"):
        with pytest.raises(ValueError):
            parse_listeners(bad)


def test_secured_settings_need_certificates_and_a_ca() -> None:
    ls = tuple(parse_listeners("SSL://127.0.0.1:9092"))
    with pytest.raises(ValueError, match="ssl-certfile"):
        SecuritySettings(listeners=ls).check()
    with pytest.raises(ValueError, match="ssl-cafile"):
        SecuritySettings(listeners=ls, ssl_certfile="c", ssl_keyfile="k", ssl_client_auth="required").check()
    with pytest.raises(ValueError, match="inter-broker"):
        SecuritySettings(listeners=ls, inter_broker_listener="NOPE").check()
    assert SecuritySettings(listeners=ls).authorizer_enabled and not SecuritySettings().authorizer_enabled


def test_registration_names_every_endpoint_and_tls_scheme() -> None:
    info = BrokerInfo(1, "127.0.0.1", 9093, endpoints=(("PLAINTEXT://127.0.0.1:9092", "PLAINTEXT"),
                                                       ("SASL_SSL://127.0.0.1:9093", "SASL_SSL")), scheme="https")
    decoded = BrokerIdZNode.decode(1, BrokerIdZNode.encode(info))
    assert decoded.url == "https://127.0.0.1:9093" and decoded.endpoints == info.endpoints
    plain = BrokerIdZNode.decode(2, BrokerIdZNode.encode(BrokerInfo(2, "127.0.0.1", 9092)))
    assert plain.url == "http://127.0.0.1:9092"


def test_inter_broker_identity_and_sites() -> None:
    from pathlib import Path

    from broker.config import BrokerConfig
    from broker.security.authn import basic_header
    from broker.security.listeners import inter_broker_headers, listener_sites, registration

    ls = tuple(parse_listeners("PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9093"))
    sec = SecuritySettings(listeners=ls, inter_broker_listener="SASL_SSL", inter_broker_user="broker",
                           inter_broker_password="pw", ssl_certfile="c", ssl_keyfile="k")
    assert inter_broker_headers(sec) == {"Authorization": basic_header("broker", "pw")}
    assert inter_broker_headers(SecuritySettings()) is None
    config = BrokerConfig(1, "zk", "127.0.0.1", 9093, Path("."), security=sec)
    info = registration(1, config, 0)
    assert info.url == "https://127.0.0.1:9093"
    assert dict(info.endpoints) == {"PLAINTEXT://127.0.0.1:9092": "PLAINTEXT", "SASL_SSL://127.0.0.1:9093": "SASL_SSL"}
    plain = BrokerConfig(1, "zk", "127.0.0.1", 9092, Path("."))
    assert listener_sites(plain) == [("127.0.0.1", 9092, None)]
