"""Issue 12: the HTTP API answers as Confluent's REST Proxy answers, against a live cluster.

Each test follows one point of the issue and names, in its docstring, the Confluent source or page it was
written from (confluentinc/kafka-rest, confluentinc/rest-utils, docs.confluent.io). A REST-proxy client decides
what to retry and what to show from the status, the error_code and the body shape, so those are asserted here.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.cluster import LocalProcessBackend
from tests.harness.http import create_topic, metadata, request
from tests.harness.wait import SLOW_MACHINE_S

pytestmark = pytest.mark.cluster

JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
KAFKA_V2 = "application/vnd.kafka.v2+json"


@pytest.fixture(scope="module")
def compat(zk_ensemble: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessBackend]:
    """Two brokers (so a replica can be taken away), a 200 kB request limit (so 413 is cheap to reach)."""
    import uuid

    from odradek_local.cluster import LocalCluster
    from tests.conftest import SESSION_TIMEOUT_MS
    from tests.harness.ports import free_port_block

    cluster = LocalCluster(tmp_path_factory.mktemp("rest-compat"), brokers=2, base_port=free_port_block(2),
                           session_timeout_ms=SESSION_TIMEOUT_MS, chroot=f"/compat-{uuid.uuid4().hex[:8]}",
                           ensemble=zk_ensemble, broker_args=["--max-request-bytes", "200000"])
    backend = LocalProcessBackend(cluster).up()
    yield backend
    backend.close()


def _topic(c: LocalProcessBackend, name: str, partitions: int = 1, rf: int = 1, **configs: str) -> str:
    """Create ``name`` and return the URL of its partition 0 leader."""
    urls = [c.broker_url(b) for b in c.broker_ids()]
    create_topic(urls[0], name, partitions, rf, {k.replace("_", "."): v for k, v in configs.items()}, seen_by=urls)
    return c.broker_url(metadata(urls[0], name)["partitions"][0]["leader"])


def _envelope(resp: tuple[int, Any, dict[str, str]], status: int, code: int) -> dict[str, Any]:
    got, body, _ = resp
    assert (got, body["error_code"]) == (status, code), body
    assert isinstance(body["message"], str) and body["message"]
    return body


def test_statuses_are_confluents(compat: LocalProcessBackend) -> None:
    """Issue 12 point 1. rest-utils JsonParseExceptionMapper.java (non-JSON: 400/400);
    ConstraintViolationExceptionMapper.java (@NotEmpty records, unknown fields, wrong types: 422/422);
    kafka-rest ProduceRequestTooLargeException.java (413); resources/v2/PartitionsResource.java
    (``@PathParam("partition") int``: Jersey answers a non-integer as 404/404); WebApplicationExceptionMapper.java
    (406 and unknown routes: the status is the code)."""
    url = _topic(compat, "st")
    post = f"{url}/topics/st"
    body = _envelope(request("POST", post, raw=b"{not json", content_type=JSON_V2), 400, 400)
    assert body["error"] == "MALFORMED_JSON"
    for bad in ({"records": []}, {"rec": [{"value": 1}]}, {"records": [{"value": 1}], "extra": 1},
                {"records": [{"value": 1, "bogus": 2}]}, {"records": "x"},
                {"records": [{"value": 1, "partition": "zero"}]}):
        assert _envelope(request("POST", post, bad, content_type=JSON_V2), 422, 422)["error"] == "CONSTRAINT_VIOLATION"
    big = b'{"records":[{"value":"' + b"q" * 300_000 + b'"}]}'
    assert _envelope(request("POST", post, raw=big, content_type=JSON_V2), 413, 41301)["error"] == "REQUEST_TOO_LARGE"
    _envelope(request("GET", f"{url}/topics/st/partitions/abc"), 404, 404)
    _envelope(request("POST", f"{url}/topics/st/partitions/x1", {"records": [{"value": 1}]}, content_type=JSON_V2),
              404, 404)
    for path in ("/topics", "/brokers", "/topics/st", "/topics/st/partitions", "/topics/st/partitions/0",
                 "/topics/st/partitions/0/offsets", "/metadata"):
        _envelope(request("GET", f"{url}{path}", accept="text/html"), 406, 406)
        assert request("GET", f"{url}{path}", accept=f"text/html, {KAFKA_V2};q=0.5")[0] == 200
    assert request("GET", f"{url}/topics", accept=KAFKA_V2)[2]["Content-Type"].startswith(KAFKA_V2)
    nowhere = _envelope(request("GET", f"{url}/no/such/route"), 404, 404)
    assert "/topics/{topic}" in nowhere["message"] and "/v3/clusters" in nowhere["message"]
    consumers = _envelope(request("GET", f"{url}/consumers/g/not-a-route"), 404, 404)
    assert "/topics/{topic}/partitions/{partition}/records?offset=" in consumers["message"]


def test_per_record_errors_carry_confluents_kafka_error_codes(compat: LocalProcessBackend) -> None:
    """Issue 12 point 2. kafka-rest resources/v2/AbstractProduceAction.java errorCodeFromProducerException and
    Errors.java: a RetriableException is 50003 (KAFKA_RETRIABLE_ERROR), any other KafkaException 50002
    (KAFKA_ERROR); the HTTP status stays 200 and the record's Kafka error name stays in the message."""
    url = _topic(compat, "small", max_message_bytes="2000")
    status, body, _ = request("POST", f"{url}/topics/small", {"records": [{"value": "y" * 5000}, {"value": 1}]},
                              content_type=JSON_V2)
    assert status == 200, body
    failed = [o for o in body["offsets"] if o["offset"] is None]
    assert failed and all(o["error_code"] == 50002 for o in failed)
    assert all("MESSAGE_TOO_LARGE" in o["error"] and o["error_name"] == "MESSAGE_TOO_LARGE" for o in failed)

    # A retriable one: min.insync.replicas=2 with one of the two replicas gone -> NOT_ENOUGH_REPLICAS.
    create_topic(compat.broker_url(1), "isr", 1, 2, {"min.insync.replicas": "2"},
                 seen_by=[compat.broker_url(b) for b in compat.broker_ids()])
    leader = metadata(compat.broker_url(1), "isr")["partitions"][0]["leader"]
    other = next(b for b in compat.broker_ids() if b != leader)
    compat.stop_broker(other)  # controlled shutdown takes it out of the ISR at once
    try:
        deadline = time.monotonic() + SLOW_MACHINE_S
        while True:
            status, body, _ = request("POST", f"{compat.broker_url(leader)}/topics/isr/partitions/0?timeout_ms=2000",
                                      {"records": [{"value": 1}]}, content_type=JSON_V2)
            assert status == 200, body
            offset = body["offsets"][0]
            if offset["error_code"] is not None:
                # Every retriable error is Confluent's 50003: a produce that raced the ISR shrink may first see
                # NOT_LEADER_OR_FOLLOWER (the controller's ISR change bumps the leader epoch) or a timeout.
                assert offset["offset"] is None and offset["error_code"] == 50003, offset
                if offset["error_name"].startswith("NOT_ENOUGH_REPLICAS"):
                    break
            assert time.monotonic() < deadline, f"no NOT_ENOUGH_REPLICAS within {SLOW_MACHINE_S:.0f} s: {offset}"
            time.sleep(0.2)
        assert "NOT_ENOUGH_REPLICAS" in offset["error"]
    finally:
        compat.start_broker(other)


def test_bodies_are_confluents(compat: LocalProcessBackend) -> None:
    """Issue 12 point 3. kafka-rest entities/v2/GetTopicResponse.java (configs from describeConfigs: the
    effective configuration); entities/v2/TopicPartitionOffsetResponse.java (exactly beginning_offset and
    end_offset); exceptions/v3/ErrorResponse.java and api/v3/openapi.yaml (v3 errors are application/json
    {error_code, message}; create_topic_already_exists is 400/40002; unknown topic 40403)."""
    url = _topic(compat, "bodies", retention_ms="1234")
    status, topic, _ = request("GET", f"{url}/topics/bodies")
    assert status == 200
    assert topic["configs"]["retention.ms"] == "1234"  # the override
    assert topic["configs"]["cleanup.policy"] == "delete" and topic["configs"]["segment.bytes"] == "1073741824"
    assert topic["configs"]["min.insync.replicas"] == "1"  # defaults are listed too
    status, offsets, _ = request("GET", f"{url}/topics/bodies/partitions/0/offsets")
    assert status == 200 and set(offsets) == {"beginning_offset", "end_offset"}

    cid = request("GET", f"{url}/v3/clusters")[1]["data"][0]["cluster_id"]
    status, err, headers = request("POST", f"{url}/v3/clusters/{cid}/topics",
                                   {"topic_name": "bodies", "partitions_count": 1})
    assert (status, err["error_code"]) == (400, 40002) and headers["Content-Type"].startswith("application/json")
    assert err["error"] == "TOPIC_ALREADY_EXISTS"
    status, err, headers = request("GET", f"{url}/v3/clusters/{cid}/topics/missing")
    assert (status, err["error_code"]) == (404, 40403) and headers["Content-Type"].startswith("application/json")
    status, err, headers = request("GET", f"{url}/v3/clusters/not-this-one")
    assert (status, err["error_code"]) == (404, 404) and set(err) >= {"error_code", "message"}
    status, err, headers = request("GET", f"{url}/topics/missing")  # v2 keeps its own code and media type
    assert (status, err["error_code"]) == (404, 40401) and headers["Content-Type"].startswith(KAFKA_V2)


def test_content_types_are_confluents(compat: LocalProcessBackend) -> None:
    """Issue 12 point 4. docs.confluent.io/platform/current/kafka-rest/api.html "Content Types" (v2 media
    types; "if the embedded format is omitted, binary is assumed": plain application/json carries base64);
    kafka-rest resources/v2/ProduceToTopicAction.java (avro, jsonschema, protobuf): the three are backed by the
    cluster's own Schema Registry (tests/integration/test_embedded_formats.py,
    test_schema_registry_protobuf.py)."""
    url = _topic(compat, "ctypes")
    records = {"records": [{"value": base64.b64encode(b"hi").decode()}]}
    status, body, _ = request("POST", f"{url}/topics/ctypes/partitions/0", records, content_type="application/json")
    assert status == 200, body
    offset = body["offsets"][0]["offset"]
    status, read, _ = request("GET", f"{url}/topics/ctypes/partitions/0/records?offset={offset}", accept=BINARY_V2)
    assert base64.b64decode(read["records"][0]["value"]) == b"hi"  # the bytes, not the quoted string '"aGk="'
    _envelope(request("POST", f"{url}/topics/ctypes", {"records": [{"value": {"n": 1}}]},
                      content_type="application/json"), 422, 422)
    status, body, _ = request("POST", f"{url}/topics/ctypes", {"records": [{"value": {"n": 1}}]}, content_type=JSON_V2)
    assert status == 200 and body["offsets"][0]["error_code"] is None
    for fmt, schema, value in (("avro", '{"type": "int"}', 1), ("jsonschema", '{"type": "integer"}', 1),
                               ("protobuf", 'syntax = "proto3"; message M { int32 n = 1; }', {"n": 1})):
        ctype = f"application/vnd.kafka.{fmt}.v2+json"
        records = {"value_schema": schema, "records": [{"value": value}]}
        leader = _topic(compat, f"ctypes-{fmt}")  # a topic per format: its subject <topic>-value holds one type
        status, body, _ = request("POST", f"{leader}/topics/ctypes-{fmt}", records, content_type=ctype)
        assert status == 200 and isinstance(body["value_schema_id"], int), body
        assert body["key_schema_id"] is None and body["offsets"][0]["error_code"] is None, body
        _envelope(request("POST", f"{url}/topics/no-such-topic", records, content_type=ctype), 404, 40401)


def test_v3_changes_negotiate_before_acting(compat: LocalProcessBackend) -> None:
    """JAX-RS (and so kafka-rest) matches @Produces before the resource method runs: an Accept the v3 API cannot
    produce is a 406 and the topic is never created (kafka-rest TopicsResource.createTopic, @Produces JSON)."""
    url = compat.broker_url(compat.broker_ids()[0])
    cid = request("GET", f"{url}/v3/clusters")[1]["data"][0]["cluster_id"]
    status, body, _ = request("POST", f"{url}/v3/clusters/{cid}/topics", {"topic_name": "never-made"},
                              accept="text/csv")
    assert (status, body["error_code"]) == (406, 406), body
    assert request("GET", f"{url}/v3/clusters/{cid}/topics/never-made")[0] == 404
    assert "never-made" not in request("GET", f"{url}/topics")[1]
