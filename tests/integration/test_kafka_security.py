"""Security and quotas on Kafka's wire protocol, spoken by real clients installed unchanged (confluent-kafka, kcat,
kafka-python, aiokafka), on a real 3-broker TLS cluster (``LocalCluster(tls=True)``: a throwaway CA, HTTPS +
SASL_SSL HTTP listeners, ACLs and ZooKeeper ACLs on) whose brokers also have SASL_SSL, SSL and SASL_PLAINTEXT
Kafka listeners, and whose followers replicate over Kafka's protocol (``--replica-fetch-transport kafka``) through
the SASL_SSL Kafka listeners, as the cluster's inter-broker SCRAM user.

Users are made with scripts/odradek-configs.sh and ACLs with scripts/odradek-acls.sh (over ZooKeeper, with the
brokers' ZooKeeper identity), then:

* a Producer and a Consumer round-trip over SASL_SSL with SCRAM-SHA-256 and SCRAM-SHA-512, over SASL_PLAINTEXT
  with PLAIN, and over SSL with a client certificate (principal ``User:CN=carol``); without a certificate the
  SSL client is ``User:ANONYMOUS`` and is refused;
* kcat (librdkafka 2.0), kafka-python (SCRAM-SHA-512, PLAIN) and aiokafka (SCRAM-SHA-256) round-trip too;
* a wrong password gives the client an authentication error (SCRAM and PLAIN); a request other than ApiVersions
  or SaslHandshake before authenticating gets no answer: the connection is closed;
* a user without Write gets TOPIC_AUTHORIZATION_FAILED on produce, one without Read gets it on fetch, and the
  same user over HTTPS (Basic) gets the same decision (403 TOPIC_AUTHORIZATION_FAILED, or allowed);
* a 200 KB/s user produce quota holds a producer's measured rate within 25 % of it, and its statistics show the
  broker's throttle time;
* ``odradek cluster status --json`` reports the Kafka listeners;
* an RF 3 topic with min.insync.replicas 2 produced to acks=all over HTTPS has all three replicas in sync,
  every follower's log end offset equals its leader's, and the leaders' fetch sessions took in the followers'
  partitions (without an inter-broker user from the local cluster, the brokers refuse to start).
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import io
import json
import os
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from broker.security.tls import issue_certificate
from odradek_local.cluster import LocalCluster
from odradek_local.security import admin_files, local_client_context, tls_dir
from odradek_local.zookeeper import ZkEnsemble
from tests.harness.ports import free_port_block
from tests.harness.wait import SLOW_MACHINE_S, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka", reason="pip install confluent-kafka (the test extra)")
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition  # noqa: E402

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
ZK_DIGEST = "odradek-brokers:" + uuid.uuid4().hex
PASSWORDS = {"alice": "alice-pw", "rita": "rita-pw", "walt": "walt-pw", "quinn": "quinn-pw"}
TOPIC, ACL_TOPIC, QUOTA_TOPIC = "sec-orders", "sec-acl", "sec-quota"
REPLICATED_TOPIC = "sec-replicated"
KAFKA_TRANSPORT = ["--replica-fetch-transport", "kafka"]
JSON_V2 = "application/vnd.kafka.json.v2+json"
QUOTA = 200 * 1024  # producer_byte_rate, bytes/s
RATE_CEILING = 1.25
"""A producer held by QUOTA is acknowledged at most this times it: the property, whatever the machine's load."""
RATE_FLOOR = 0.6
"""...and at least this times it. Looser than the ceiling because a loaded machine can only make the producer
slower; it still excludes a broker that counts a request's bytes twice or throttles by the wrong quota."""
# (principal, operation, resource flags): the module's ACLs. alice and carol may read and write TOPIC; rita may
# only read ACL_TOPIC, walt only write it; quinn writes QUOTA_TOPIC; every consumer may use any group.
ACLS: list[tuple[str, str, list[str]]] = [
    ("User:alice", "All", ["--topic", TOPIC]),
    ("User:CN=carol", "All", ["--topic", TOPIC]),
    ("User:rita", "Read", ["--topic", ACL_TOPIC]),
    ("User:walt", "Write", ["--topic", ACL_TOPIC]),
    ("User:quinn", "Write", ["--topic", QUOTA_TOPIC]),
    ("User:alice", "All", ["--topic", REPLICATED_TOPIC]),
    ("User:*", "Read", ["--group", "*"]),
]


@dataclass
class Secured:
    cluster: LocalCluster
    cafile: str

    def bootstrap(self, protocol: str) -> str:
        bootstrap = self.cluster.kafka_bootstrap_for(protocol)
        assert bootstrap is not None, protocol
        return bootstrap

    def sasl(self, protocol: str, mechanism: str, user: str, password: str | None = None) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap(protocol), "security.protocol": protocol,
                "sasl.mechanism": mechanism, "sasl.username": user,
                "sasl.password": PASSWORDS[user] if password is None else password,
                **({"ssl.ca.location": self.cafile} if protocol == "SASL_SSL" else {})}

    def https(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.cafile)


def script(name: str, *args: str, env: dict[str, str] | None = None) -> str:
    """An operator's tool: over ZooKeeper with the brokers' identity, or over HTTPS with ``env``'s TLS files."""
    env = dict(os.environ, ODRADEK_ZK_DIGEST=ZK_DIGEST, PYTHONPATH=str(ROOT), **(env or {}))
    proc = subprocess.run([str(ROOT / "scripts" / name), *args], env=env, capture_output=True, text=True,
                          timeout=2 * SLOW_MACHINE_S, check=False)
    assert proc.returncode == 0, f"{name} {' '.join(args)} failed: {proc.stderr}{proc.stdout}"
    return proc.stdout


def https_request(sec: Secured, method: str, path: str, user: str, body: Any = None,
                  headers: dict[str, str] | None = None, broker: int = 1) -> tuple[int, bytes, dict[str, str]]:
    port = int(sec.cluster.broker_url(broker).rsplit(":", 1)[1])
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=30, context=sec.https())
    auth = base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()
    try:
        conn.request(method, path, body=json.dumps(body).encode() if body is not None else None,
                     headers={"Authorization": f"Basic {auth}", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, resp.read(), dict(resp.headers)
    finally:
        conn.close()


def operator_env(cluster: LocalCluster) -> dict[str, str]:
    """The tools' TLS settings as ``User:CN=admin``, a super user."""
    return {f"ODRADEK_{k.upper()}": v for k, v in admin_files(cluster).items()}


def operator_get(sec: Secured, path: str, broker: int) -> bytes:
    """GET ``path`` on ``broker`` as ``User:CN=admin`` (routes that need Cluster Describe); the body of a 200."""
    port = int(sec.cluster.broker_url(broker).rsplit(":", 1)[1])
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=30, context=local_client_context(sec.cluster))
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
        assert resp.status == 200, (path, resp.status, body[:200])
        return body
    finally:
        conn.close()


@pytest.fixture(scope="module")
def secured(zk_ensemble: ZkEnsemble, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    cluster = LocalCluster(tmp_path_factory.mktemp("kafka-security"), brokers=3, base_port=free_port_block(3),
                           session_timeout_ms=6000, chroot=f"/odradek-ksec-{uuid.uuid4().hex[:8]}",
                           ensemble=zk_ensemble, tls=True, zk_digest=ZK_DIGEST,
                           kafka_protocols=("SASL_SSL", "SSL", "SASL_PLAINTEXT"), broker_args=KAFKA_TRANSPORT)
    try:
        cluster.up(timeout=2 * SLOW_MACHINE_S)
        issue_certificate(tls_dir(cluster), "carol")
        zk = ["--zookeeper", cluster.zk_connect]
        for user, password in PASSWORDS.items():
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                out = script("odradek-configs.sh", *zk, "--alter", "--entity-type", "users", "--entity-name", user,
                             "--add-config", f"{mechanism}=[iterations=4096,password={password}]")
                assert "Completed updating config" in out
        for principal, operation, target in ACLS:
            script("odradek-acls.sh", "--authorizer-properties", f"zookeeper.connect={cluster.zk_connect}", "--add",
                   "--allow-principal", principal, "--operation", operation, *target,
                   "--resource-pattern-type", "literal")
        admin = admin_files(cluster)
        as_admin = operator_env(cluster)
        for topic, partitions in ((TOPIC, 3), (ACL_TOPIC, 1), (QUOTA_TOPIC, 1)):
            script("odradek-topics.sh", "--bootstrap-server", cluster.broker_url(1), "--create", "--topic", topic,
                   "--partitions", str(partitions), "--replication-factor", "3" if partitions > 1 else "1",
                   env=as_admin)
        yield Secured(cluster, admin["ssl_cafile"])
    finally:
        cluster.down()


def produce(config: dict[str, Any], topic: str, values: list[bytes]) -> list[Any]:
    """Produce and flush; the delivery reports' errors (None for each success)."""
    outcomes: list[Any] = []
    producer = Producer({**config, "acks": "all", "message.timeout.ms": int(SLOW_MACHINE_S * 1000)})
    for v in values:
        producer.produce(topic, v, on_delivery=lambda err, msg: outcomes.append(err))
    assert producer.flush(SLOW_MACHINE_S) == 0
    return outcomes


def consume(config: dict[str, Any], topic: str, partitions: list[int], wanted: list[bytes]) -> list[bytes]:
    """Everything read from the start of ``partitions`` until every value in ``wanted`` was read."""
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        out: list[bytes] = []
        deadline = time.monotonic() + SLOW_MACHINE_S
        while not set(wanted) <= set(out):
            assert time.monotonic() < deadline, f"consumed {len(set(wanted) & set(out))} of {len(wanted)}"
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                if m.error() is None:
                    out.append(m.value())
                else:
                    assert m.error().code() not in (KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                                    KafkaError._AUTHENTICATION), m.error()
        return out
    finally:
        consumer.close()


def first_error(config: dict[str, Any], wanted: int, *, consumer_of: str | None = None) -> Any:
    """The first client error with code ``wanted``: from the error callback (a producer or consumer that cannot
    authenticate) or, with ``consumer_of``, from the messages a consumer of that topic gets."""
    errors: list[Any] = []
    config = {**config, "error_cb": errors.append}
    deadline = time.monotonic() + SLOW_MACHINE_S
    if consumer_of is None:
        client = Producer(config)
        while not any(e.code() == wanted for e in errors):
            assert time.monotonic() < deadline, f"no error {wanted}; got {errors}"
            client.poll(0.2)
        return next(e for e in errors if e.code() == wanted)
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(consumer_of, 0, OFFSET_BEGINNING)])
        while True:
            assert time.monotonic() < deadline, f"no error {wanted}; got {errors}"
            for m in consumer.consume(num_messages=100, timeout=0.5):
                assert m.error() is not None, f"read {m.value()!r} it may not read"
                if m.error().code() == wanted:
                    return m.error()
    finally:
        consumer.close()


# ------------------------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_producer_and_consumer_over_sasl_ssl(secured: Secured, mechanism: str) -> None:
    config = secured.sasl("SASL_SSL", mechanism, "alice")
    values = [f"{mechanism}-{i}".encode() for i in range(60)]
    assert produce(config, TOPIC, values) == [None] * 60
    consume(config, TOPIC, [0, 1, 2], values)


def test_plain_producer_and_consumer_over_sasl_plaintext(secured: Secured) -> None:
    config = secured.sasl("SASL_PLAINTEXT", "PLAIN", "alice")
    values = [f"plain-{i}".encode() for i in range(30)]
    assert produce(config, TOPIC, values) == [None] * 30
    consume(config, TOPIC, [0, 1, 2], values)


def test_mutual_tls_producer_and_consumer_over_ssl_and_no_certificate_is_anonymous(secured: Secured) -> None:
    d = tls_dir(secured.cluster)
    base = {"bootstrap.servers": secured.bootstrap("SSL"), "security.protocol": "SSL",
            "ssl.ca.location": secured.cafile}
    carol = {**base, "ssl.certificate.location": str(d / "carol.pem"), "ssl.key.location": str(d / "carol.key")}
    values = [f"carol-{i}".encode() for i in range(30)]
    assert produce(carol, TOPIC, values) == [None] * 30  # User:CN=carol, as the HTTP side names her
    consume(carol, TOPIC, [0, 1, 2], values)
    refused = produce(base, TOPIC, [b"anonymous"])  # no certificate: User:ANONYMOUS, who may not write
    assert [e.code() for e in refused] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def kafka_response_bytes(sec: Secured, how: str) -> float:
    """Every broker's Kafka response bytes sent ``how`` (``write`` or ``sendfile``), from /metrics."""
    total = 0.0
    for broker in sec.cluster.slots:
        for line in operator_get(sec, "/metrics", broker).decode().splitlines():
            if line.startswith(f'odradek_kafka_response_bytes_total{{how="{how}"}} '):
                total += float(line.rsplit(" ", 1)[1])
    return total


def test_large_fetches_are_answered_over_tls_in_bytes_and_over_sasl_plaintext_with_sendfile(
        secured: Secured) -> None:
    """Fetch answers of hundreds of KB a partition: over SSL the record sets pass through Python (TLS encrypts
    them; broker/kafka/apis.py asks for no file ranges there) and the client reads exactly what was produced,
    with not one byte sent with sendfile; the same records read over SASL_PLAINTEXT go out with sendfile. Nothing
    else fetches meanwhile with sendfile: the followers replicate over the SASL_SSL listeners."""
    d = tls_dir(secured.cluster)
    carol = {"bootstrap.servers": secured.bootstrap("SSL"), "security.protocol": "SSL",
             "ssl.ca.location": secured.cafile, "ssl.certificate.location": str(d / "carol.pem"),
             "ssl.key.location": str(d / "carol.key")}
    values = [f"large-{i}-".encode() + os.urandom(20_000).hex().encode() for i in range(60)]  # 2.4 MB
    size = sum(len(v) for v in values)
    assert produce(carol, TOPIC, values) == [None] * len(values)
    sendfile, written = kafka_response_bytes(secured, "sendfile"), kafka_response_bytes(secured, "write")
    consume(carol, TOPIC, [0, 1, 2], values)
    assert kafka_response_bytes(secured, "sendfile") == sendfile
    assert kafka_response_bytes(secured, "write") - written >= size
    consume(secured.sasl("SASL_PLAINTEXT", "PLAIN", "alice"), TOPIC, [0, 1, 2], values)
    assert kafka_response_bytes(secured, "sendfile") - sendfile >= 0.9 * size


@pytest.mark.parametrize(("protocol", "mechanism"), [("SASL_SSL", "SCRAM-SHA-256"), ("SASL_SSL", "SCRAM-SHA-512"),
                                                     ("SASL_PLAINTEXT", "PLAIN")])
def test_a_wrong_password_is_an_authentication_error(secured: Secured, protocol: str, mechanism: str) -> None:
    error = first_error(secured.sasl(protocol, mechanism, "alice", "not-alices"), KafkaError._AUTHENTICATION)
    assert "Authentication failed" in error.str(), error.str()


def test_kcat_lists_produces_and_consumes_over_sasl_ssl(secured: Secured) -> None:
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.skip("kcat is not installed")
    login = ["-b", secured.bootstrap("SASL_SSL"), "-X", "security.protocol=SASL_SSL", "-X",
             "sasl.mechanism=SCRAM-SHA-512", "-X", "sasl.username=alice", "-X", f"sasl.password={PASSWORDS['alice']}",
             "-X", f"ssl.ca.location={secured.cafile}"]

    def run(*args: str, stdin: str | None = None) -> str:
        proc = subprocess.run([kcat, *login, *args], input=stdin, capture_output=True, text=True,
                              timeout=SLOW_MACHINE_S, check=False)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    listed = json.loads(run("-L", "-J"))
    assert {b["id"] for b in listed["brokers"]} == set(secured.cluster.slots)
    assert TOPIC in {t["topic"] for t in listed["topics"]}
    marker = uuid.uuid4().hex
    run("-P", "-t", TOPIC, "-p", "2", stdin=f"kcat-{marker}-1\nkcat-{marker}-2\n")
    out = run("-C", "-t", TOPIC, "-p", "2", "-o", "beginning", "-e", "-q")
    assert f"kcat-{marker}-1\nkcat-{marker}-2\n" in out


def test_kafka_python_over_sasl_ssl_with_scram_and_sasl_plaintext_with_plain(secured: Secured) -> None:
    kafka = pytest.importorskip("kafka", reason="pip install kafka-python (the test extra)")
    for protocol, mechanism in (("SASL_SSL", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "PLAIN")):
        options: dict[str, Any] = {
            "bootstrap_servers": secured.bootstrap(protocol).split(","), "security_protocol": protocol,
            "sasl_mechanism": mechanism, "sasl_plain_username": "alice", "sasl_plain_password": PASSWORDS["alice"],
            **({"ssl_cafile": secured.cafile} if protocol == "SASL_SSL" else {})}
        values = [f"kafka-python-{mechanism}-{i}".encode() for i in range(20)]
        # not idempotent: InitProducerId's own authorization (Cluster IdempotentWrite) is not what this tests
        producer = kafka.KafkaProducer(acks="all", enable_idempotence=False, **options)
        try:
            for v in values:
                producer.send(TOPIC, v, partition=0).get(timeout=SLOW_MACHINE_S)
        finally:
            producer.close()
        consumer = kafka.KafkaConsumer(enable_auto_commit=False, consumer_timeout_ms=1000, **options)
        try:
            consumer.assign([kafka.TopicPartition(TOPIC, 0)])
            consumer.seek_to_beginning()
            got: set[bytes] = set()
            deadline = time.monotonic() + SLOW_MACHINE_S
            while not set(values) <= got:
                assert time.monotonic() < deadline, f"kafka-python read {len(set(values) & got)} of 20"
                for records in consumer.poll(timeout_ms=500).values():
                    got.update(r.value for r in records)
        finally:
            consumer.close()


def test_aiokafka_over_sasl_ssl_with_scram(secured: Secured) -> None:
    aiokafka = pytest.importorskip("aiokafka", reason="pip install aiokafka (the test extra)")
    from aiokafka.helpers import create_ssl_context

    values = [f"aiokafka-{i}".encode() for i in range(20)]

    async def main() -> set[bytes]:
        options: dict[str, Any] = {
            "bootstrap_servers": secured.bootstrap("SASL_SSL"), "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "alice",
            "sasl_plain_password": PASSWORDS["alice"], "ssl_context": create_ssl_context(cafile=secured.cafile)}
        producer = aiokafka.AIOKafkaProducer(acks="all", **options)
        await producer.start()
        try:
            for v in values:
                await producer.send_and_wait(TOPIC, v, partition=1)
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(enable_auto_commit=False, auto_offset_reset="earliest", **options)
        await consumer.start()
        got: set[bytes] = set()
        try:
            consumer.assign([aiokafka.TopicPartition(TOPIC, 1)])
            await consumer.seek_to_beginning()
            deadline = time.monotonic() + SLOW_MACHINE_S
            while not set(values) <= got and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got.update(r.value for r in records)
        finally:
            await consumer.stop()
        return got

    assert set(values) <= asyncio.run(main())


def test_a_request_before_authenticating_closes_the_connection(secured: Secured) -> None:
    from kio.schema.metadata.v1.request import MetadataRequest
    from kio.schema.request_header.v1.header import RequestHeader
    from kio.serial import entity_writer

    out = io.BytesIO()
    entity_writer(RequestHeader)(out, RequestHeader(request_api_key=3, request_api_version=1, correlation_id=1,
                                                    client_id="raw"))
    entity_writer(MetadataRequest)(out, MetadataRequest(topics=None))
    frame = struct.pack(">i", len(out.getvalue())) + out.getvalue()
    host, port = secured.bootstrap("SASL_PLAINTEXT").split(",")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=SLOW_MACHINE_S) as sock:
        sock.sendall(frame)
        assert sock.recv(64) == b"", "a Metadata request before SASL was answered"
    host, port = secured.bootstrap("SASL_SSL").split(",")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=SLOW_MACHINE_S) as raw, \
            secured.https().wrap_socket(raw, server_hostname=host) as sock:
        sock.sendall(frame)
        assert sock.recv(64) == b"", "a Metadata request before SASL was answered"


# --------------------------------------------------------------------------------------------- ACLs


def test_write_and_read_acls_decide_as_on_the_http_door(secured: Secured) -> None:
    # rita may read, not write
    rita = secured.sasl("SASL_SSL", "SCRAM-SHA-512", "rita")
    assert [e.code() for e in produce(rita, ACL_TOPIC, [b"r"])] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    status, raw, _ = https_request(secured, "POST", f"/topics/{ACL_TOPIC}/partitions/0", "rita",
                                {"records": [{"value": {"n": 1}}]},
                                {"Content-Type": "application/vnd.kafka.json.v2+json"})
    assert status == 403 and b"TOPIC_AUTHORIZATION_FAILED" in raw, (status, raw[:200])
    # walt may write, not read
    walt = secured.sasl("SASL_SSL", "SCRAM-SHA-256", "walt")
    assert produce(walt, ACL_TOPIC, [b"w1", b"w2"]) == [None, None]
    status, raw, _ = https_request(secured, "POST", f"/topics/{ACL_TOPIC}/partitions/0", "walt",
                                {"records": [{"value": {"n": 2}}]},
                                {"Content-Type": "application/vnd.kafka.json.v2+json"}, broker=2)
    assert status == 200, raw[:200]
    error = first_error(walt, KafkaError.TOPIC_AUTHORIZATION_FAILED, consumer_of=ACL_TOPIC)
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    batches = f"/topics/{ACL_TOPIC}/partitions/0/batches?offset=0&isolation_level=read_uncommitted"
    status, raw, _ = https_request(secured, "GET", batches, "walt",
                                headers={"Accept": "application/vnd.odradek.batches.v2"})
    assert status == 403 and b"TOPIC_AUTHORIZATION_FAILED" in raw, (status, raw[:200])
    # and rita reads what walt wrote, on both doors
    assert consume(rita, ACL_TOPIC, [0], [b"w1", b"w2"])[:2] == [b"w1", b"w2"]
    status, raw, _ = https_request(secured, "GET", batches, "rita",
                                headers={"Accept": "application/vnd.odradek.batches.v2"})
    assert status not in (401, 403), raw[:200]  # allowed (then 200, or 409 from a broker that does not lead)


# -------------------------------------------------------------------------------------------- quotas


def test_a_produce_quota_holds_the_rate_and_the_client_sees_the_throttle(secured: Secured) -> None:
    zk = ["--zookeeper", secured.cluster.zk_connect]
    script("odradek-configs.sh", *zk, "--alter", "--entity-type", "users", "--entity-name", "quinn",
           "--add-config", f"producer_byte_rate={QUOTA}")

    def applied(broker: int) -> bool:  # a quota applied to a request: its answer says how long it throttles
        status, _, headers = https_request(secured, "POST", f"/topics/{QUOTA_TOPIC}/partitions/0", "quinn",
                                           {"records": [{"value": "x"}]},
                                           {"Content-Type": "application/vnd.kafka.json.v2+json"}, broker=broker)
        return status == 200 and "Odradek-Throttle-Time-Ms" in headers

    for broker in secured.cluster.slots:  # the quota is per broker: each applies it from its own cache
        wait_until(lambda b=broker: applied(b), SLOW_MACHINE_S, f"broker {broker} to apply the quota")

    stats: list[dict[str, Any]] = []
    acked: list[tuple[float, int]] = []
    value = os.urandom(1000)
    total = 1600
    producer = Producer({**secured.sasl("SASL_SSL", "SCRAM-SHA-256", "quinn"), "acks": "1", "linger.ms": 5,
                         "batch.size": 32 * 1024, "statistics.interval.ms": 500,
                         "stats_cb": lambda raw: stats.append(json.loads(raw)),
                         "message.timeout.ms": int(4 * SLOW_MACHINE_S * 1000)})

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        acked.append((time.monotonic(), len(msg.value())))

    for _ in range(total):
        while True:
            try:
                producer.produce(QUOTA_TOPIC, value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(4 * SLOW_MACHINE_S) == 0
    producer.poll(1.0)  # one more statistics round
    assert len(acked) == total
    # The rate over the middle of the transfer (20 % to 90 % of the bytes): the start pays off the probe's debt.
    sizes = [n for _, n in acked]
    cumulative = [sum(sizes[: i + 1]) for i in range(len(sizes))]
    everything = cumulative[-1]
    start = next(i for i, c in enumerate(cumulative) if c >= 0.2 * everything)
    end = next(i for i, c in enumerate(cumulative) if c >= 0.9 * everything)
    rate = (cumulative[end] - cumulative[start]) / (acked[end][0] - acked[start][0])
    print(f"measured {rate / 1024:.0f} KB/s against a quota of {QUOTA / 1024:.0f} KB/s")
    assert RATE_FLOOR * QUOTA <= rate <= RATE_CEILING * QUOTA, (
        f"{rate / 1024:.0f} KB/s is not within [{RATE_FLOOR}, {RATE_CEILING}] x {QUOTA / 1024:.0f} KB/s")
    throttled = [b["throttle"]["max"] for s in stats for b in s.get("brokers", {}).values()
                 if b.get("throttle", {}).get("max", 0) > 0]
    assert throttled, "librdkafka's statistics never showed a throttle time"


# --------------------------------------------------------------------------------------- local cluster


def test_cluster_status_reports_the_kafka_listeners(secured: Secured) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "odradek_tools", "cluster", "status", "--json", "--data-dir",
                          str(secured.cluster.data_dir)], env=env, capture_output=True, text=True,
                         timeout=SLOW_MACHINE_S, check=True).stdout
    status = json.loads(out)
    assert status["kafka_security_protocol"] == "SASL_SSL"
    assert status["kafka_bootstrap"] == secured.bootstrap("SASL_SSL")
    assert set(status["kafka_listeners"]) == {"SASL_SSL", "SSL", "SASL_PLAINTEXT"}
    assert status["tls"]["ssl_cafile"] == secured.cafile
    for b in status["brokers"]:
        assert b["kafka_listeners"]["SASL_SSL"] == b["kafka"] and b["registered"]
    wait_until(lambda: all(b["alive"] for b in status["brokers"]), 1, "every broker alive")


# ------------------------------------------------------------------------------------ replication over Kafka


def test_followers_replicate_over_sasl_ssl_as_the_inter_broker_user(secured: Secured) -> None:
    """The fixture's brokers run ``--replica-fetch-transport kafka``: each follower fetches from its leaders'
    SASL_SSL Kafka listeners, logged in as the inter-broker user the local cluster made. An acks=all write
    (min.insync.replicas 2) is answered only once the in-sync followers have it, and every follower ends with
    the leader's log end offset."""
    cluster = secured.cluster
    partitions, requests, per_request = 3, 4, 10

    def session_partitions() -> float:
        """Partitions held by the leaders' incremental fetch sessions (only the followers' fetchers over Kafka
        make sessions while this test runs: no Kafka consumer does)."""
        total = 0.0
        for broker in cluster.slots:
            for line in operator_get(secured, "/metrics", broker).decode().splitlines():
                if line.startswith("odradek_kafka_fetch_session_partitions "):
                    total += float(line.rsplit(" ", 1)[1])
        return total

    held_before = session_partitions()
    script("odradek-topics.sh", "--bootstrap-server", cluster.broker_url(1), "--create", "--topic", REPLICATED_TOPIC,
           "--partitions", str(partitions), "--replication-factor", "3", "--config", "min.insync.replicas=2",
           env=operator_env(cluster))

    def state(broker: int) -> list[dict[str, Any]]:
        status, raw, _ = https_request(secured, "GET", f"/metadata?topics={REPLICATED_TOPIC}", "alice", broker=broker)
        assert status == 200, raw[:200]
        return json.loads(raw)["topics"][0]["partitions"] or []

    for broker in cluster.slots:
        wait_until(lambda b=broker: len(state(b)) == partitions and all(p["leader"] >= 0 for p in state(b)),
                   SLOW_MACHINE_S, f"broker {broker} to know a leader for each partition of {REPLICATED_TOPIC}")
    for p in range(partitions):
        for n in range(requests):  # through every broker in turn: the others forward to the leader
            records = [{"value": {"partition": p, "request": n, "i": i}} for i in range(per_request)]
            status, raw, _ = https_request(secured, "POST",
                                           f"/topics/{REPLICATED_TOPIC}/partitions/{p}?acks=all&timeout_ms=10000",
                                           "alice", {"records": records}, {"Content-Type": JSON_V2},
                                           broker=1 + (p + n) % len(cluster.slots))
            assert status == 200, raw[:300]
            offsets = json.loads(raw)["offsets"]
            assert [o["error_code"] for o in offsets] == [None] * per_request, offsets

    wait_until(lambda: all(len(p["isr"]) == 3 for p in state(1)), SLOW_MACHINE_S,
               f"every partition of {REPLICATED_TOPIC} to have its three replicas in sync")

    def log_end_offsets() -> dict[int, dict[int, int]]:
        """partition -> broker -> that replica's log end offset."""
        out: dict[int, dict[int, int]] = {}
        for broker in cluster.slots:
            dirs = json.loads(operator_get(secured, "/admin/log_dirs", broker))["log_dirs"]
            for r in (r for d in dirs for r in d["replicas"] if r["topic"] == REPLICATED_TOPIC):
                out.setdefault(r["partition"], {})[broker] = r["log_end_offset"]
        return out

    everything = {p: dict.fromkeys(cluster.slots, requests * per_request) for p in range(partitions)}
    wait_until(lambda: log_end_offsets() == everything, SLOW_MACHINE_S,
               f"every replica of {REPLICATED_TOPIC} to hold all {requests * per_request} records of its partition")
    # Each follower's session with the partition's leader took the partition in: two per partition.
    taken_in = session_partitions() - held_before
    assert taken_in >= 2 * partitions, f"the leaders' fetch sessions took in {taken_in} partitions of " \
                                       f"{REPLICATED_TOPIC}: its followers do not fetch over Kafka's protocol"
