"""Issue 24 point 5: Confluent REST Proxy's v1 API, as Confluent's REST Proxy 5.x served it, on a live cluster.

Each operation's test names the kafka-rest 5.x source it was written from (confluentinc/kafka-rest,
``kafka-rest/src/main/java/io/confluent/kafkarest/...``). Then the v1 clients run against the cluster as
published: Confluent's Node client (npm ``kafka-rest``, pinned in tests/clients/node/package.json, installed by
scripts/setup.sh), and the two PyPI clients, which cannot be imported on Python 3 (each test says exactly why);
for those, the requests they send (copied from their sources) are replayed instead.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.cluster import LocalProcessBackend, shared_cluster
from tests.harness.http import create_topic, request
from tests.harness.wait import SLOW_MACHINE_S, wait_until

pytestmark = pytest.mark.cluster

V1 = "application/vnd.kafka.v1+json"
BINARY_V1 = "application/vnd.kafka.binary.v1+json"
JSON_V1 = "application/vnd.kafka.json.v1+json"
AVRO_V1 = "application/vnd.kafka.avro.v1+json"
V2 = "application/vnd.kafka.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
NODE_DIR = Path(__file__).resolve().parents[1] / "clients" / "node"


@pytest.fixture(scope="module")
def v1(zk_ensemble: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessBackend]:
    """Two brokers, so that instance requests reaching the other broker are forwarded to the instance's holder."""
    backend = shared_cluster(zk_ensemble, tmp_path_factory.mktemp("rest-v1"), "v1", 2)
    yield backend
    backend.close()


def _urls(c: LocalProcessBackend) -> list[str]:
    return [c.broker_url(b) for b in c.broker_ids()]


def _topic(c: LocalProcessBackend, partitions: int = 1) -> str:
    name = f"v1-{uuid.uuid4().hex[:8]}"
    create_topic(_urls(c)[0], name, partitions, 1, seen_by=_urls(c))
    return name


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _produce(url: str, topic: str, values: list[str]) -> list[dict[str, Any]]:
    status, body, headers = request("POST", f"{url}/topics/{topic}", {"records": [{"value": _b64(v)} for v in values]},
                                    content_type=BINARY_V1, accept=V1)
    assert status == 200, body
    assert headers["Content-Type"].startswith(V1)
    return body["offsets"]  # type: ignore[no-any-return]


def _error(resp: tuple[int, Any, dict[str, str]], status: int, code: int) -> dict[str, Any]:
    got, body, _ = resp
    assert (got, body["error_code"]) == (status, code), body
    return body  # type: ignore[no-any-return]


def _committed(url: str, group: str, topic: str) -> dict[int, int]:
    status, body, _ = request("GET", f"{url}/groups/{group}/offsets?topic={topic}")
    assert status == 200, body
    return {o["partition"]: o["offset"] for o in body["offsets"]}


def test_produce_answers_v1s_produce_response(v1: LocalProcessBackend) -> None:
    """resources/v1/TopicsResource.java and v1/PartitionsResource.java (produceBinary, produceJson: @Consumes
    KAFKA_V1_JSON_BINARY, KAFKA_V1_JSON, KAFKA_DEFAULT_JSON, JSON, GENERIC_REQUEST / KAFKA_V1_JSON_JSON);
    entities/v1/ProduceResponse.java and v1/PartitionOffset.java (offsets with partition, offset, error_code,
    error; key_schema_id, value_schema_id; 200); entities/v1/BinaryTopicProduceRequest.java (records: key,
    value, partition) and v1/BinaryPartitionProduceRequest.java (records: key, value)."""
    url, other = _urls(v1)
    topic = _topic(v1, partitions=2)
    for content_type in (V1, BINARY_V1):
        status, body, headers = request("POST", f"{other}/topics/{topic}", {"records": [
            {"value": _b64("a"), "key": None, "partition": None}, {"value": _b64("b"), "key": _b64("k"),
                                                                    "partition": 1}]},
            content_type=content_type, accept=f"{V1}, application/vnd.kafka+json; q=0.9, application/json; q=0.8")
        assert status == 200, body
        assert headers["Content-Type"].startswith(V1)
        assert set(body) == {"offsets", "key_schema_id", "value_schema_id"}
        assert body["key_schema_id"] is None and body["value_schema_id"] is None
        assert all(set(o) == {"partition", "offset", "error_code", "error"} for o in body["offsets"]), body
        assert body["offsets"][1]["partition"] == 1 and isinstance(body["offsets"][1]["offset"], int)
        assert all(o["error_code"] is None and o["error"] is None for o in body["offsets"])
    status, body, _ = request("POST", f"{url}/topics/{topic}/partitions/0", {"records": [{"value": {"n": 1}}]},
                              content_type=JSON_V1, accept=V1)
    assert status == 200 and body["offsets"][0]["partition"] == 0, body
    offset = body["offsets"][0]["offset"]
    status, body, _ = request("GET", f"{url}/topics/{topic}/partitions/0/messages?offset={offset}", accept=JSON_V1)
    assert status == 200 and body[0]["value"] == {"n": 1}, body

    # v1 record fields only: partition is not one on the partition path, nor are v2's timestamp and headers.
    _error(request("POST", f"{url}/topics/{topic}/partitions/0", {"records": [{"value": _b64("x"), "partition": 0}]},
                   content_type=BINARY_V1), 422, 422)
    _error(request("POST", f"{url}/topics/{topic}", {"records": [{"value": _b64("x"), "timestamp": 1}]},
                   content_type=V1), 422, 422)
    _error(request("POST", f"{url}/topics/{topic}", {"records": [{"value": "not base64!"}]}, content_type=V1), 422, 422)
    _error(request("POST", f"{url}/topics/nope-{uuid.uuid4().hex[:6]}", {"records": [{"value": _b64("x")}]},
                   content_type=V1), 404, 40401)
    _error(request("GET", f"{url}/topics", accept="text/html"), 406, 406)
    # v1's metadata bodies are v2's (entities/v1/GetTopicResponse.java): a v1 Accept gets them as v1.
    status, body, headers = request("GET", f"{url}/topics/{topic}", accept=V1)
    assert status == 200 and body["name"] == topic and headers["Content-Type"].startswith(V1)

    # v2 on the same paths is unchanged.
    status, body, headers = request("POST", f"{url}/topics/{topic}", {"records": [{"value": {"n": 2}}]},
                                    content_type=JSON_V2)
    assert status == 200 and headers["Content-Type"].startswith(V2), body
    assert body["offsets"][0]["error_code"] is None


def test_avro_needs_a_schema_registry(v1: LocalProcessBackend) -> None:
    """resources/v1/TopicsResource.java produceAvro, PartitionsResource.java consumeAvro and
    v1/ConsumersResource.java readTopicAvro with entities/v1/CreateConsumerInstanceRequest.java (format avro) need
    a Schema Registry; Odradek has none, so they answer what Confluent answers a payload it cannot use:
    422 with 42206 (as v2's avro does, docs/http-api.md), after the topic check."""
    url, _ = _urls(v1)
    topic = _topic(v1)
    schema = json.dumps({"type": "record", "name": "R", "fields": [{"name": "n", "type": "int"}]})
    produce = {"value_schema": schema, "records": [{"value": {"n": 1}}]}
    body = _error(request("POST", f"{url}/topics/{topic}", produce, content_type=AVRO_V1, accept=V1), 422, 42206)
    assert "Schema Registry" in body["message"]
    _error(request("POST", f"{url}/topics/{topic}/partitions/0", produce, content_type=AVRO_V1), 422, 42206)
    _error(request("POST", f"{url}/topics/nope-{uuid.uuid4().hex[:6]}", produce, content_type=AVRO_V1), 404, 40401)
    _error(request("GET", f"{url}/topics/{topic}/partitions/0/messages?offset=0", accept=AVRO_V1), 422, 42206)
    _error(request("POST", f"{url}/consumers/g-avro", {"format": "avro"}, content_type=V1), 422, 42206)
    _error(request("POST", f"{url}/consumers/g-avro", {"format": "xml"}, content_type=V1), 422, 422)


def test_simple_consumer_reads_count_records_from_offset(v1: LocalProcessBackend) -> None:
    """resources/v1/PartitionsResource.java consumeBinary/consumeJson (GET .../partitions/{p}/messages, offset or
    timestamp, count default 1; binary unless KAFKA_V1_JSON_JSON is asked for) and SimpleConsumerManager.java
    consume (up to count records, fewer when the log ends); records as entities/v1/BinaryConsumerRecord.java:
    topic, key, value, partition, offset."""
    url, other = _urls(v1)
    topic = _topic(v1)
    _produce(url, topic, [f"m{i}" for i in range(5)])
    path = f"{other}/topics/{topic}/partitions/0/messages"
    status, body, headers = request("GET", f"{path}?offset=1&count=3")
    assert status == 200 and headers["Content-Type"].startswith(BINARY_V1), body
    assert [r["offset"] for r in body] == [1, 2, 3]
    assert all(set(r) == {"topic", "key", "value", "partition", "offset"} for r in body)
    assert [base64.b64decode(r["value"]).decode() for r in body] == ["m1", "m2", "m3"]
    assert body[0]["topic"] == topic and body[0]["partition"] == 0 and body[0]["key"] is None
    status, body, _ = request("GET", f"{path}?offset=0", accept=f"{V1}, application/vnd.kafka+json; q=0.9")
    assert status == 200 and [r["offset"] for r in body] == [0], body  # count defaults to 1
    status, body, _ = request("GET", f"{path}?offset=3&count=100", accept=BINARY_V1)
    assert status == 200 and [r["offset"] for r in body] == [3, 4], body  # the log ends first
    status, body, _ = request("GET", f"{path}?offset=5&count=2", accept=BINARY_V1)
    assert (status, body) == (200, [])
    status, body, _ = request("GET", f"{path}?timestamp=0&count=2", accept=BINARY_V1)
    assert status == 200 and [r["offset"] for r in body] == [0, 1], body
    status, body, _ = request("GET", f"{path}?timestamp=2999-01-01T00:00:00Z", accept=BINARY_V1)
    assert (status, body) == (200, [])
    _error(request("GET", path), 400, 40001)  # "Either `offset` or `timestamp` query parameters must be set."
    _error(request("GET", f"{path}?offset=0&timestamp=0"), 400, 40001)
    _error(request("GET", f"{path}?offset=99"), 416, 41601)
    _error(request("GET", f"{url}/topics/{topic}/partitions/7/messages?offset=0"), 404, 40402)


def test_consumer_instance_reads_commits_and_is_deleted(v1: LocalProcessBackend) -> None:
    """resources/v1/ConsumersResource.java: createGroup (entities/v1/CreateConsumerInstanceRequest.java: id or
    name, format, auto.offset.reset, auto.commit.enable; CreateConsumerInstanceResponse instance_id, base_uri),
    readTopicBinary (GET .../instances/{i}/topics/{t}?max_bytes=; ConsumerState.getOrCreateTopicState: the first
    read subscribes, another topic is a conflict), commitOffsets (ConsumerState.commitOffsets: the list of
    TopicPartitionOffset, entities/v1/CommitOffsetsResponse.java: topic, partition, consumed, committed),
    deleteGroup (204). ConsumerReadTask.java: a record that would bring the answer to max_bytes is kept for the
    next read, so max_bytes=1 reads nothing and loses nothing."""
    url, other = _urls(v1)
    topic, group = _topic(v1, partitions=2), f"g-{uuid.uuid4().hex[:8]}"
    for p in (0, 1):
        status, body, _ = request("POST", f"{url}/topics/{topic}/partitions/{p}",
                                  {"records": [{"value": _b64(f"p{p}-{i}")} for i in range(3)]}, content_type=V1)
        assert status == 200, body
    status, created, headers = request("POST", f"{url}/consumers/{group}", {
        "id": "c1", "format": "binary", "auto.offset.reset": "smallest", "auto.commit.enable": "false"},
        content_type=V1, accept=V1)
    assert status == 200 and headers["Content-Type"].startswith(V1), created
    assert created == {"instance_id": "c1", "base_uri": f"{url}/consumers/{group}/instances/c1"}
    via_other = f"{other}/consumers/{group}/instances/c1"  # forwarded to the instance's holder

    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + SLOW_MACHINE_S
    while len(got) < 6:
        assert time.monotonic() < deadline, f"read {len(got)} of 6 records"
        status, body, headers = request("GET", f"{via_other}/topics/{topic}", accept=BINARY_V1)
        assert status == 200 and headers["Content-Type"].startswith(BINARY_V1), body
        got.extend(body)
    assert sorted(base64.b64decode(r["value"]).decode() for r in got) == [f"p{p}-{i}" for p in (0, 1)
                                                                            for i in range(3)]
    assert all(set(r) == {"topic", "key", "value", "partition", "offset"} and r["topic"] == topic for r in got)

    _error(request("GET", f"{created['base_uri']}/topics/{topic}", accept=JSON_V1), 406, 40601)
    _error(request("GET", f"{created['base_uri']}/topics/{_topic(v1)}", accept=BINARY_V1), 409, 40903)

    # max_bytes=1: nothing is returned and nothing is skipped (kafka-rest-client's heartbeat reads rely on it).
    request("POST", f"{url}/topics/{topic}/partitions/0", {"records": [{"value": _b64("late")}]}, content_type=V1)
    for _ in range(3):
        status, body, _ = request("GET", f"{created['base_uri']}/topics/{topic}?max_bytes=1", accept=BINARY_V1)
        assert (status, body) == (200, [])
    late = wait_until(lambda: request("GET", f"{created['base_uri']}/topics/{topic}", accept=BINARY_V1)[1],
                      SLOW_MACHINE_S, "the record kept back by max_bytes=1")
    assert [base64.b64decode(r["value"]).decode() for r in late] == ["late"]

    # Commit: what was read, as (last consumed, committed); Kafka's committed offset is the next one to read.
    status, body, headers = request("POST", f"{via_other}/offsets", raw=b"", content_type=V1, accept=V1)
    assert status == 200 and headers["Content-Type"].startswith(V1), body
    assert sorted((o["topic"], o["partition"], o["consumed"], o["committed"]) for o in body) == [
        (topic, 0, 3, 3), (topic, 1, 2, 2)]
    assert _committed(url, group, topic) == {0: 4, 1: 3}

    status, body, _ = request("DELETE", f"{via_other}", accept=V1)
    assert status == 204, body
    _error(request("DELETE", created["base_uri"], accept=V1), 404, 40403)
    _error(request("GET", f"{created['base_uri']}/topics/{topic}", accept=BINARY_V1), 404, 40403)

    # A v2 commit on the same path still answers v2's empty 200.
    status, made, _ = request("POST", f"{url}/consumers/{group}", {"name": "c2"}, content_type=V2, accept=V2)
    assert status == 200, made
    status, body, _ = request("POST", f"{made['base_uri']}/offsets", content_type=V2, accept=V2)
    assert (status, body) == (200, b"")
    assert request("DELETE", made["base_uri"], accept=V2)[0] == 204


def test_node_client_runs_unchanged(v1: LocalProcessBackend) -> None:
    """Confluent's Node client (npm kafka-rest 0.0.5: lib/topics.js produce, lib/partitionMessages.js, lib/
    consumers.js join, subscribe stream, commit, shutdown) run as published by tests/clients/node/v1_roundtrip.js:
    its shutdown waits for the stream's last read to end, then DELETEs the instance."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (scripts/setup.sh installs the Node client when node and npm are)")
    if not (NODE_DIR / "node_modules" / "kafka-rest" / "package.json").exists():
        pytest.skip("the npm package kafka-rest is not installed: run npm install --prefix tests/clients/node "
                    "(scripts/setup.sh does when node and npm are present)")
    url, _ = _urls(v1)
    topic, group, count = _topic(v1), f"node-{uuid.uuid4().hex[:8]}", 5
    deadline_ms = int(SLOW_MACHINE_S * 1000)
    done = subprocess.run([node, str(NODE_DIR / "v1_roundtrip.js"), url, topic, group, str(count), str(deadline_ms)],
                          cwd=NODE_DIR, capture_output=True, text=True, timeout=SLOW_MACHINE_S + 30)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, f"node exited {done.returncode}: {done.stdout} {done.stderr}"
    result = json.loads(lines[-1])
    values = [f"v1-message-{i}" for i in range(count)]
    assert [o["offset"] for o in result["produced"]["offsets"]] == list(range(count)), result
    assert result["simple"] == values
    assert result["consumed"] == values
    assert result["committed"] == [{"topic": topic, "partition": 0, "consumed": count - 1,
                                    "committed": count - 1}], result
    assert result["shutdown"] is True
    assert _committed(url, group, topic) == {0: count}
    _error(request("DELETE", f"{url}/consumers/{group}/instances/{result['instance']}"), 404, 40403)


def test_pypi_kafka_rest_runs_unchanged(v1: LocalProcessBackend) -> None:
    """PyPI kafka-rest 0.0.12 (gamechanger/kafka-rest, kafka_rest/client.py): an Avro-only producer."""
    try:
        from kafka_rest.client import KafkaRESTClient  # type: ignore[import-not-found]
    except Exception as e:  # any failure to import is the reason to skip
        pytest.skip("PyPI kafka-rest 0.0.12 installs but cannot be imported on Python 3, so it is not in the test "
                    "extra: it pins tornado<5 (4.5.3 subclasses collections.MutableMapping, removed in Python 3.10) "
                    "and avro==1.7.7 (Python 2 syntax, `except Exception, e`); it also produces only Avro, which "
                    f"needs a Schema Registry. Here: {type(e).__name__}: {e}")
    url, _ = _urls(v1)
    topic = _topic(v1)
    host, port = url.rsplit(":", 1)
    dropped: list[Any] = []
    client = KafkaRESTClient(host, int(port), flush_length_threshold=1, retry_max_attempts=1)
    client.registrar.register("drop_message", lambda topic, message, reason: dropped.append(reason))
    client.produce(topic, {"n": 1}, {"type": "record", "name": "R", "fields": [{"name": "n", "type": "int"}]})
    wait_until(lambda: dropped, SLOW_MACHINE_S, "the avro record to be refused (no Schema Registry)")
    client.shutdown(block=True)
    assert dropped == ["nonretriable"]  # 422/42206: dropped at once, not retried


def test_pypi_kafka_rest_requests(v1: LocalProcessBackend) -> None:
    """What PyPI kafka-rest 0.0.12 sends (kafka_rest/rest_proxy.py request_for_batch and _encode_payload: POST
    /topics/{t}, Accept application/vnd.kafka.v1+json, Content-Type application/vnd.kafka.avro.v1+json, a JSON
    encoded value_schema) answers a JSON error its producer.py _handle_produce_response reads (error_code,
    message): 422/42206, not retriable there, so the client drops the batch at once rather than retrying."""
    url, _ = _urls(v1)
    topic = _topic(v1)
    schema = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "int"}]}
    body = {"records": [{"value": {"n": 1}, "key": None, "partition": None}], "value_schema": json.dumps(schema)}
    status, answer, headers = request("POST", f"{url}/topics/{topic}", body, content_type=AVRO_V1, accept=V1)
    assert (status, answer["error_code"]) == (422, 42206) and answer["message"], answer
    assert "json" in headers["Content-Type"]


def test_pypi_kafka_rest_client_runs_unchanged(v1: LocalProcessBackend) -> None:
    """PyPI kafka-rest-client 0.8.0 (proofpoint/kafka/KafkaRestConsumer.py)."""
    try:
        from proofpoint.kafka.KafkaRestConsumer import KafkaRestConsumer  # type: ignore[import-not-found]  # noqa: F401
    except Exception as e:  # any failure to import is the reason to skip
        pytest.skip("PyPI kafka-rest-client 0.8.0 installs but cannot be imported on Python 3, so it is not in the "
                    "test extra: proofpoint/kafka/KafkaRestConsumer.py does `from urlparse import urlparse` "
                    "(Python 2's module); it also needs an OAuth2 token endpoint (it fetches a token when "
                    f"constructed). Here: {type(e).__name__}: {e}")
    pytest.skip("kafka-rest-client imported, but it fetches an OAuth2 token from oauth_token_url when constructed "
                "and no token endpoint is part of this test; its requests are replayed by "
                "test_pypi_kafka_rest_client_requests")


def test_pypi_kafka_rest_client_requests(v1: LocalProcessBackend) -> None:
    """What PyPI kafka-rest-client 0.8.0 sends (proofpoint/kafka/KafkaRestConsumer.py __register_consumer,
    __set_urls, poll, HeartbeatThread, commit, close): create with Content-Type application/vnd.kafka.json.v1+json
    and Accept application/json ({name, format, auto.offset.reset, auto.commit.enable: "false"}), read
    with Accept application/vnd.kafka.binary.v1+json and max_bytes (heartbeats with max_bytes=1, "any other value
    will cause messages being lost"), commit and delete with Accept application/vnd.kafka.v1+json,
    application/vnd.kafka+json, application/json and no body; it parses every answer as JSON."""
    url, other = _urls(v1)
    topic, group = _topic(v1), f"pp-{uuid.uuid4().hex[:8]}"
    _produce(url, topic, [json.dumps({"n": i}) for i in range(3)])
    plain_v1 = f"{V1}, application/vnd.kafka+json, application/json"
    # auto.offset.reset is its ``offset`` option (default "largest"); "earliest" here, so no read races the join.
    status, created, headers = request("POST", f"{url}/consumers/{group}", {
        "name": "host-1", "format": "binary", "auto.offset.reset": "earliest", "auto.commit.enable": "false"},
        content_type=JSON_V1, accept="application/json")
    assert status == 200 and headers["Content-Type"].startswith("application/json"), created
    base = f"{other}/consumers/{group}/instances/host-1"  # through a load balancer: any broker
    wait_until(lambda: request("GET", f"{base}/topics/{topic}?max_bytes=1", accept=BINARY_V1)[1] == []
               and _joined(url, group), SLOW_MACHINE_S, "the instance to join its group")
    for _ in range(2):  # heartbeats read nothing and lose nothing
        assert request("GET", f"{base}/topics/{topic}?max_bytes=1", accept=BINARY_V1)[1] == []
    got: list[Any] = []
    deadline = time.monotonic() + SLOW_MACHINE_S
    while len(got) < 3:
        assert time.monotonic() < deadline, got
        status, body, _ = request("GET", f"{base}/topics/{topic}?max_bytes=33554432", accept=BINARY_V1)
        assert status == 200, body
        got.extend(json.loads(base64.b64decode(r["value"])) for r in body)  # what poll() does with each record
    assert got == [{"n": 0}, {"n": 1}, {"n": 2}]
    status, body, _ = request("POST", f"{base}/offsets", accept=plain_v1)
    assert status == 200 and body == [{"topic": topic, "partition": 0, "consumed": 2, "committed": 2}], body
    assert _committed(url, group, topic) == {0: 3}
    status, body, _ = request("DELETE", base, accept=plain_v1)
    assert status == 204, body


def _joined(url: str, group: str) -> bool:
    status, body, _ = request("GET", f"{url}/groups/{group}")
    return status == 200 and body.get("state") == "Stable" and bool(body.get("members"))
