"""The client's and the Spark connector's security options: Kafka's names in, one checked value out."""

from __future__ import annotations

import base64

import pytest

from odradek.client.security import ClientSecurity
from odradek_spark.options import OptionError, parse_sink_options, parse_source_options

JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="p\\"w";'


def test_client_security_options() -> None:
    assert ClientSecurity.from_kwargs({}) is None
    sec = ClientSecurity.from_kwargs({"ssl_cafile": "/ca.pem", "sasl_username": "alice", "sasl_password": "pw"})
    assert sec is not None and sec.tls
    assert sec.authorization() == "Basic " + base64.b64encode(b"alice:pw").decode()
    token = ClientSecurity.from_kwargs({"security_protocol": "SASL_SSL", "sasl_token": "odt1.x.y"})
    assert token is not None and token.authorization() == "Bearer odt1.x.y"
    with pytest.raises(ValueError, match="only sent over TLS"):
        ClientSecurity.from_kwargs({"sasl_username": "alice", "sasl_password": "pw"})
    with pytest.raises(TypeError, match="ssl_cafle"):
        ClientSecurity.from_kwargs({"ssl_cafle": "/ca.pem"})


def test_spark_options_take_kafka_names() -> None:
    opts = parse_source_options({"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t",
                                 "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
                                 "kafka.ssl.truststore.location": "/ca.pem", "kafka.sasl.jaas.config": JAAS},
                                streaming=True)
    assert dict(opts.security) == {"security_protocol": "SASL_SSL", "ssl_cafile": "/ca.pem",
                                   "sasl_username": "alice", "sasl_password": 'p\\"w'}
    assert "p\\" not in repr(opts)  # never in Spark's logs
    sink = parse_sink_options({"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "t",
                               "kafka.ssl.cafile": "/ca.pem", "kafka.ssl.certfile": "/c.pem",
                               "kafka.ssl.keyfile": "/c.key"})
    assert dict(sink.security) == {"ssl_cafile": "/ca.pem", "ssl_certfile": "/c.pem", "ssl_keyfile": "/c.key"}
    for bad in ({"kafka.ssl.truststore.type": "JKS"}, {"kafka.sasl.mechanism": "GSSAPI"},
                {"kafka.sasl.username": "a", "kafka.sasl.password": "b"}, {"kafka.sasl.jaas.config": "x"}):
        with pytest.raises(OptionError):
            parse_sink_options({"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "t", **bad})
