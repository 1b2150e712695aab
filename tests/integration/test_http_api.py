"""The HTTP API over real sockets against a real cluster: REST Proxy v2/v3 shapes, the binary path,
forwarding, long-polls, and a clear error for every bad input."""

from __future__ import annotations

import base64
import http.client
import json
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from odradek.protocol.partitioner import murmur2, to_positive
from odradek.protocol.records import decode_records, encode_batch
from tests.harness.cluster import LocalProcessBackend
from tests.harness.http import create_topic, metadata, request
from tests.harness.sockets import unread_at_server
from tests.harness.wait import SLOW_MACHINE_S, wait_until

pytestmark = pytest.mark.cluster

JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
BATCHES = "application/vnd.odradek.batches.v2"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture(scope="module")
def shared(zk_ensemble: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessBackend]:
    """One 2-broker cluster for the whole module (tests use topics of their own)."""
    import uuid

    from odradek_local.cluster import LocalCluster
    from tests.conftest import SESSION_TIMEOUT_MS
    from tests.harness.ports import free_port_block

    cluster = LocalCluster(tmp_path_factory.mktemp("http-api"), brokers=2, base_port=free_port_block(2),
                           session_timeout_ms=SESSION_TIMEOUT_MS, chroot=f"/http-{uuid.uuid4().hex[:8]}",
                           ensemble=zk_ensemble, broker_args=["--max-request-bytes", "200000"])
    backend = LocalProcessBackend(cluster).up()
    yield backend
    backend.close()


def urls(c: LocalProcessBackend) -> list[str]:
    return [c.broker_url(b) for b in c.broker_ids()]


def new_topic(c: LocalProcessBackend, name: str, partitions: int = 1, rf: int = 1, **configs: str) -> None:
    create_topic(c.broker_url(1), name, partitions, rf, {k.replace("_", "."): v for k, v in configs.items()},
                 seen_by=urls(c))


def leader_url(c: LocalProcessBackend, topic: str, partition: int = 0) -> str:
    leader = metadata(c.broker_url(1), topic)["partitions"][partition]["leader"]
    return c.broker_url(leader)


def other_url(c: LocalProcessBackend, topic: str, partition: int = 0) -> str:
    leader = metadata(c.broker_url(1), topic)["partitions"][partition]["leader"]
    return c.broker_url(next(b for b in c.broker_ids() if b != leader))


# ------------------------------------------------------------------------------------------ round trips


def test_json_round_trip_with_keys_null_keys_headers_and_timestamps(shared: LocalProcessBackend) -> None:
    new_topic(shared, "rt-json", partitions=2)
    records = [
        {"key": {"user": 1}, "value": {"n": 1, "s": "é"}, "partition": 0, "timestamp": 1700000000123,
         "headers": [{"name": "trace", "value": b64(b"abc")}, {"name": "empty", "value": None}]},
        {"key": None, "value": [1, 2, 3], "partition": 0},
        {"value": None, "key": "tombstone", "partition": 0},
    ]
    status, body, headers = request("POST", f"{shared.broker_url(1)}/topics/rt-json", {"records": records},
                                    content_type=JSON_V2)
    assert status == 200, body
    assert [o["offset"] for o in body["offsets"]] == [0, 1, 2] and all(o["error_code"] is None for o in body["offsets"])
    assert body["key_schema_id"] is None and "Odradek-Leader" in headers

    status, got, _ = request("GET", f"{shared.broker_url(2)}/topics/rt-json/partitions/0/records?offset=0",
                             accept=JSON_V2)
    assert status == 200 and got["high_watermark"] == 3 and got["log_start_offset"] == 0 and got["next_offset"] == 3
    r0, r1, r2 = got["records"]
    assert (r0["key"], r0["value"], r0["timestamp"]) == ({"user": 1}, {"n": 1, "s": "é"}, 1700000000123)
    assert r0["offset"] == 0
    assert r0["headers"] == [{"name": "trace", "value": b64(b"abc")}, {"name": "empty", "value": None}]
    assert (r1["key"], r1["value"]) == (None, [1, 2, 3]) and r1["timestamp"] > 1700000000123
    assert (r2["key"], r2["value"]) == ("tombstone", None)
    assert all(r["topic"] == "rt-json" and r["partition"] == 0 for r in got["records"])


def test_binary_embedded_format_round_trip(shared: LocalProcessBackend) -> None:
    new_topic(shared, "rt-bin")
    raw_values = [b"\x00\xffbinary", b"", b"x" * 1000]
    records = [{"key": b64(b"k%d" % i), "value": b64(v)} for i, v in enumerate(raw_values)]
    status, body, _ = request("POST", f"{shared.broker_url(1)}/topics/rt-bin/partitions/0", {"records": records},
                              content_type=BINARY_V2)
    assert status == 200 and [o["offset"] for o in body["offsets"]] == [0, 1, 2]
    status, got, _ = request("GET", f"{shared.broker_url(1)}/topics/rt-bin/partitions/0/records", accept=BINARY_V2)
    assert status == 200
    assert [base64.b64decode(r["value"]) for r in got["records"]] == raw_values
    assert [base64.b64decode(r["key"]) for r in got["records"]] == [b"k0", b"k1", b"k2"]


def test_binary_batch_path_moves_kafka_v2_batches(shared: LocalProcessBackend) -> None:
    new_topic(shared, "rt-batches")
    url = leader_url(shared, "rt-batches")
    batch = encode_batch([(b"k", b"v1", 1700000000000, [("h", b"1")]), (None, b"v2", 1700000000001, [])])
    status, body, _ = request("POST", f"{url}/topics/rt-batches/partitions/0/batches?acks=all", raw=batch,
                              content_type=BATCHES)
    assert status == 200 and (body["base_offset"], body["last_offset"], body["record_count"]) == (0, 1, 2)
    status, data, headers = request("GET", f"{url}/topics/rt-batches/partitions/0/batches?offset=1")
    assert status == 200 and headers["Content-Type"].startswith(BATCHES)
    assert headers["Odradek-High-Watermark"] == "2" and headers["Odradek-Log-Start-Offset"] == "0"
    got = decode_records(data)
    assert [(r.offset, r.key, r.value, r.headers) for r in got] == [
        (0, b"k", b"v1", (("h", b"1"),)), (1, None, b"v2", ())
    ]


def test_one_key_always_lands_where_kafkas_partitioner_puts_it(shared: LocalProcessBackend) -> None:
    new_topic(shared, "keyed", partitions=6)
    keys = [b"21", b"foobar", b"abc", b"", b"a", b"key1", b"key2"]
    expected = {b"21": 0, b"foobar": 0, b"abc": 3, b"": 3, b"a": 4, b"key1": 2, b"key2": 5}  # Kafka's vectors
    for key in keys:
        assert to_positive(murmur2(key)) % 6 == expected[key]
    for round_ in range(3):
        records = [{"key": b64(k), "value": b64(b"%d" % round_)} for k in keys]
        status, body, _ = request("POST", f"{shared.broker_url(2)}/topics/keyed", {"records": records},
                                  content_type=BINARY_V2)
        assert status == 200
        assert [o["partition"] for o in body["offsets"]] == [expected[k] for k in keys]


def test_keyless_records_spread_over_partitions(shared: LocalProcessBackend) -> None:
    new_topic(shared, "spread", partitions=4)
    status, body, _ = request("POST", f"{shared.broker_url(1)}/topics/spread",
                              {"records": [{"value": i} for i in range(40)]}, content_type=JSON_V2)
    assert status == 200 and {o["partition"] for o in body["offsets"]} == {0, 1, 2, 3}


# ----------------------------------------------------------------------------------- long-poll, forwarding


LONG_POLL_MS = 30_000  # the broker's default cap on a long-poll's wait (fetch_max_wait_ms)


def test_a_long_poll_returns_as_soon_as_data_arrives(shared: LocalProcessBackend) -> None:
    new_topic(shared, "poll")
    url = other_url(shared, "poll")  # through forwarding, too
    parsed = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port, timeout=2 * LONG_POLL_MS / 1000)
    # The longest wait the broker allows (fetch_max_wait_ms): a read that sat out its timeout would answer only
    # after it, so answering within half of it can only be the write waking the read, on any machine.
    conn.request("GET", f"/topics/poll/partitions/0/records?offset=0&timeout={LONG_POLL_MS}",
                 headers={"Accept": JSON_V2})
    client_port = conn.sock.getsockname()[1]
    # The broker has read the request (so the read is parked, here or at the leader) before anything is written.
    wait_until(lambda: unread_at_server(client_port, parsed.port or 80) == 0, SLOW_MACHINE_S,
               "the broker to take the read")
    sent = time.monotonic()
    request("POST", f"{shared.broker_url(1)}/topics/poll", {"records": [{"value": "wake"}]}, content_type=JSON_V2)
    response = conn.getresponse()
    body = json.loads(response.read())
    conn.close()
    answered_in = time.monotonic() - sent
    assert response.status == 200 and [r["value"] for r in body["records"]] == ["wake"]
    assert answered_in < LONG_POLL_MS / 1000 / 2, answered_in  # woken by the write, not by its timeout


def test_a_broker_that_does_not_lead_forwards_and_says_who_led(shared: LocalProcessBackend) -> None:
    new_topic(shared, "fwd")
    leader = metadata(shared.broker_url(1), "fwd")["partitions"][0]["leader"]
    url = other_url(shared, "fwd")
    status, body, headers = request("POST", f"{url}/topics/fwd/partitions/0", {"records": [{"value": "via"}]},
                                    content_type=JSON_V2)
    assert status == 200 and body["offsets"][0]["offset"] == 0 and headers["Odradek-Leader"] == str(leader)
    status, got, headers = request("GET", f"{url}/topics/fwd/partitions/0/records?offset=0", accept=JSON_V2)
    assert status == 200 and got["records"][0]["value"] == "via" and headers["Odradek-Leader"] == str(leader)
    status, offsets, _ = request("GET", f"{url}/topics/fwd/partitions/0/offsets")
    assert status == 200 and offsets["beginning_offset"] == 0 and offsets["end_offset"] == 1
    # the binary path never forwards: it names the leader instead
    status, err, _ = request("POST", f"{url}/topics/fwd/partitions/0/batches", raw=encode_batch([(None, b"x", 1, [])]),
                             content_type=BATCHES)
    assert status == 409 and err["error"] == "NOT_LEADER_OR_FOLLOWER" and err["leader"] == leader
    assert err["leader_url"] == shared.broker_url(leader) and err["retriable"] is True


# ------------------------------------------------------------------------------------------- v2 and v3


def test_rest_proxy_v2_metadata_shapes(shared: LocalProcessBackend) -> None:
    new_topic(shared, "v2meta", partitions=2, rf=2, retention_ms="3600000")
    url = shared.broker_url(2)
    status, brokers, _ = request("GET", f"{url}/brokers")
    assert status == 200 and brokers == {"brokers": [1, 2]}
    status, topics, _ = request("GET", f"{url}/topics")
    assert "v2meta" in topics
    status, topic, _ = request("GET", f"{url}/topics/v2meta")
    assert topic["name"] == "v2meta" and topic["configs"]["retention.ms"] == "3600000"  # effective: defaults too
    assert topic["configs"]["cleanup.policy"] == "delete"
    assert [p["partition"] for p in topic["partitions"]] == [0, 1]
    part = topic["partitions"][0]
    assert sorted(r["broker"] for r in part["replicas"]) == [1, 2]
    assert [r["broker"] for r in part["replicas"] if r["leader"]] == [part["leader"]]
    status, one, _ = request("GET", f"{url}/topics/v2meta/partitions/1")
    assert status == 200 and one["partition"] == 1


def test_topic_lifecycle_over_v3(shared: LocalProcessBackend) -> None:
    url = shared.broker_url(1)
    cid = request("GET", f"{url}/v3/clusters")[1]["data"][0]["cluster_id"]
    base = f"{url}/v3/clusters/{cid}/topics"
    status, topic, _ = request("POST", base, {"topic_name": "life", "partitions_count": 2, "replication_factor": 2,
                                              "configs": [{"name": "cleanup.policy", "value": "compact"}]})
    assert status == 201 and topic["kind"] == "KafkaTopic" and topic["partitions_count"] == 2
    assert topic["replication_factor"] == 2
    status, err, _ = request("POST", base, {"topic_name": "life", "partitions_count": 1})
    assert (status, err["error_code"]) == (400, 40002)  # Confluent's answer for TopicExistsException
    status, listed, _ = request("GET", base)
    assert "life" in [t["topic_name"] for t in listed["data"]]

    status, configs, _ = request("GET", f"{base}/life/configs")
    by_name = {c["name"]: c for c in configs["data"]}
    assert by_name["cleanup.policy"]["value"] == "compact" and by_name["cleanup.policy"]["is_default"] is False
    assert by_name["retention.ms"]["is_default"] is True
    assert request("PUT", f"{base}/life/configs/retention.ms", {"value": "1000"})[0] == 204
    assert request("POST", f"{base}/life/configs:alter", {"data": [
        {"name": "cleanup.policy", "operation": "DELETE"}, {"name": "segment.bytes", "value": "1048576"}]})[0] == 204
    status, one, _ = request("GET", f"{base}/life/configs/retention.ms")
    assert one["value"] == "1000" and one["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert request("GET", f"{base}/life/configs/cleanup.policy")[1]["is_default"] is True

    status, grown, _ = request("PATCH", f"{base}/life", {"partitions_count": 5})
    assert status == 200 and grown["partitions_count"] == 5
    assert len(metadata(shared.broker_url(2), "life")["partitions"]) in (2, 5)
    status, err, _ = request("PATCH", f"{base}/life", {"partitions_count": 3})
    assert status == 400 and err["error"] == "INVALID_PARTITIONS"

    assert request("DELETE", f"{base}/life")[0] == 204
    status, err, _ = request("GET", f"{base}/life")
    assert status == 404 and err["error_code"] == 40403  # v3's code for an unknown topic (Confluent's)
    status, err, _ = request("GET", f"{url}/v3/clusters/not-this-one/topics")
    assert status == 404 and err["error"] == "CLUSTER_NOT_FOUND"


# ------------------------------------------------------------------------------------------- bad input


def test_every_bad_input_gets_its_status_and_code(shared: LocalProcessBackend) -> None:
    new_topic(shared, "bad", partitions=1, max_message_bytes="2000")
    url = leader_url(shared, "bad")
    cid = request("GET", f"{url}/v3/clusters")[1]["data"][0]["cluster_id"]

    def check(resp: tuple[int, Any, dict[str, str]], status: int, code: int, name: str | None = None) -> dict:
        got_status, body, _ = resp
        assert (got_status, body["error_code"]) == (status, code), body
        assert isinstance(body["message"], str) and body["message"]
        if name:
            assert body["error"] == name
        return body

    check(request("POST", f"{url}/topics/bad", raw=b"{not json", content_type=JSON_V2), 400, 400, "MALFORMED_JSON")
    check(request("POST", f"{url}/topics/bad", {"records": [{"value": 1}]}, content_type="text/plain"), 415, 41501)
    check(request("POST", f"{url}/topics/bad", {"rec": []}, content_type=JSON_V2), 422, 422)
    check(request("POST", f"{url}/topics/nope", {"records": [{"value": 1}]}, content_type=JSON_V2), 404, 40401)
    check(request("POST", f"{url}/topics/bad/partitions/7", {"records": [{"value": 1}]}, content_type=JSON_V2),
          404, 40402)
    check(request("GET", f"{url}/topics/bad/partitions/9/records"), 404, 40402)
    body = check(request("GET", f"{url}/topics/bad/partitions/0/records?offset=99"), 416, 41601,
                 "OFFSET_OUT_OF_RANGE")
    assert body["log_start_offset"] == 0 and body["high_watermark"] == 0
    check(request("GET", f"{url}/topics/bad/partitions/0/records?offset=abc"), 400, 40001)
    check(request("POST", f"{url}/topics/bad", {"records": [{"value": "%%%"}]}, content_type=BINARY_V2), 422, 422)
    check(request("POST", f"{url}/topics/bad%2F..%2Fetc/partitions/0", {"records": [{"value": 1}]},
                  content_type=JSON_V2), 400, 40003, "INVALID_TOPIC_EXCEPTION")
    check(request("POST", f"{url}/v3/clusters/{cid}/topics", {"topic_name": "../../etc", "partitions_count": 1}),
          400, 40003)
    check(request("POST", f"{url}/v3/clusters/{cid}/topics", {"topic_name": "x" * 250, "partitions_count": 1}),
          400, 40003)
    check(request("POST", f"{url}/v3/clusters/{cid}/topics", {"topic_name": "cfg", "configs": [
        {"name": "retention.ms", "value": "soon"}]}), 400, 40002, "INVALID_CONFIG")
    check(request("POST", f"{url}/v3/clusters/{cid}/topics", {"topic_name": "rf", "replication_factor": 9}),
          400, 40005)
    # a record over max.message.bytes: the record fails, the request does not
    status, body, _ = request("POST", f"{url}/topics/bad", {"records": [{"value": "y" * 5000}]}, content_type=JSON_V2)
    assert status == 200 and body["offsets"][0]["error_code"] == 50002  # Confluent's KAFKA_ERROR
    check(request("POST", f"{url}/topics/bad/partitions/0/batches", raw=encode_batch([(None, b"z" * 5000, 1, [])]),
                  content_type=BATCHES), 413, 41302, "MESSAGE_TOO_LARGE")
    # a request over the broker's limit (--max-request-bytes 200000)
    check(request("POST", f"{url}/topics/bad", raw=b'{"records":[{"value":"' + b"q" * 300000 + b'"}]}',
                  content_type=JSON_V2), 413, 41301, "REQUEST_TOO_LARGE")
    # corrupt batches are refused and leave the log as it was
    good = bytearray(encode_batch([(None, b"ok", 1, [])]))
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    check(request("POST", f"{url}/topics/bad/partitions/0/batches", raw=bytes(bad_crc), content_type=BATCHES),
          422, 42201, "CORRUPT_MESSAGE")
    check(request("POST", f"{url}/topics/bad/partitions/0/batches", raw=bytes(good[:30]), content_type=BATCHES),
          422, 42201)
    assert request("GET", f"{url}/topics/bad/partitions/0/offsets")[1]["end_offset"] == 0


def test_no_request_causes_a_5xx_or_stops_a_broker(shared: LocalProcessBackend) -> None:
    new_topic(shared, "fuzz")
    url = shared.broker_url(1)
    bodies: list[bytes] = [b"", b"null", b"[]", b"{}", b'{"records": null}', b'{"records": [null]}',
                           b'{"records": [{"partition": -1, "value": 1}]}', b'{"records": [{"partition": "0"}]}',
                           b'{"records": [{"value": 1, "headers": "x"}]}',
                           b'{"records": [{"value": 1, "timestamp": -5}]}',
                           b'{"records": [{"value": 1, "headers": [{"name": 1}]}]}', b"\xff\xfe", b"{" * 10000]
    paths = ["/topics/fuzz", "/topics/fuzz/partitions/0", "/topics/fuzz/partitions/x",
             "/topics/fuzz/partitions/0/batches",
             "/v3/clusters/x/topics", "/topics/fuzz/partitions/0/records?offset=-5&max_bytes=0"]
    for path in paths:
        for body in bodies:
            for ctype in (JSON_V2, BINARY_V2, BATCHES, "application/json"):
                status, _, _ = request("POST", f"{url}{path}", raw=body, content_type=ctype)
                assert status < 500, (path, body[:40], ctype, status)
        assert request("GET", f"{url}{path}")[0] < 500
    assert request("GET", f"{url}/health")[1]["status"] == "ok"
    assert request("GET", f"{url}/topics/fuzz/partitions/0/offsets")[1]["end_offset"] == 0


def test_metrics_and_openapi_are_served(shared: LocalProcessBackend) -> None:
    import json
    from pathlib import Path

    url = shared.broker_url(1)
    status, text, headers = request("GET", f"{url}/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    assert b"odradek_http_requests_total" in text and b"odradek_partition_high_watermark" in text
    status, spec, _ = request("GET", f"{url}/openapi.json")
    assert status == 200 and spec["openapi"].startswith("3.")
    assert "/topics/{topic}/partitions/{partition}/records" in spec["paths"]
    kept = json.loads((Path(__file__).resolve().parents[2] / "docs" / "openapi.json").read_text())
    assert kept == spec, "docs/openapi.json is stale: python -m broker.api.openapi > docs/openapi.json"


def test_offset_for_a_timestamp_comes_from_the_time_index(shared: LocalProcessBackend) -> None:
    new_topic(shared, "times")
    records = [{"value": i, "timestamp": ts} for i, ts in enumerate([1000, 2000, 2000, 3000])]
    assert request("POST", f"{shared.broker_url(1)}/topics/times/partitions/0", {"records": records},
                   content_type=JSON_V2)[0] == 200
    url = other_url(shared, "times")  # forwarded to the leader
    for ts, expected in ((0, 0), (1500, 1), (2000, 1), (2500, 3), (3001, None), (-2, 0)):
        status, body, _ = request("GET", f"{url}/topics/times/partitions/0/offsets?timestamp={ts}")
        assert status == 200 and body["offset"] == expected, (ts, body)
    status, body, _ = request("GET", f"{url}/topics/times/partitions/0/offsets?timestamp=soon")
    assert status == 400 and body["error_code"] == 40001
