"""Issue 26 point 4: the REST Proxy's avro and jsonschema embedded formats, backed by the cluster's own registry.

Written from confluentinc/kafka-rest: resources/v2/ProduceToTopicAction.java and ProduceToPartitionAction.java
(a SchemaTopicProduceRequest: ``value_schema`` or ``value_schema_id``, ``key_schema``/``key_schema_id``; the
answer's ``key_schema_id``/``value_schema_id``), controllers/SchemaManagerImpl.java (a given schema is registered
under the topic-name strategy, ``<topic>-value``/``<topic>-key``), controllers/SchemaRecordSerializerImpl.java
(a null key or value is stored as null; a non-null one without its schema is Errors.keySchemaMissingException
42201 / valueSchemaMissingException 42202; the framed bytes are AbstractKafkaAvroSerializer's and
AbstractKafkaJsonSchemaSerializer's) and Errors.java (42203 "Conversion of JSON to Avro failed", 42205 "Invalid
schema"); the v2 API reference's avro and jsonschema consumers render the records back as JSON. An unknown
schema id is the registry's 40403. confluent-kafka's AvroDeserializer and JSONDeserializer read what the REST
Proxy wrote, unchanged, through the broker's registry URL and its Kafka listener.
"""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.cluster import LocalProcessBackend, shared_cluster
from tests.harness.http import create_topic, read_records, request
from tests.harness.kafka_client import kafka_values
from tests.harness.wait import SLOW_MACHINE_S

pytestmark = pytest.mark.cluster

AVRO_V2 = "application/vnd.kafka.avro.v2+json"
JSONSCHEMA_V2 = "application/vnd.kafka.jsonschema.v2+json"
V2 = "application/vnd.kafka.v2+json"

USER = json.dumps({"type": "record", "name": "User", "fields": [
    {"name": "name", "type": "string"}, {"name": "age", "type": ["null", "int"], "default": None}]})
COUNT = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})


@pytest.fixture(scope="module")
def c(zk_ensemble: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessBackend]:
    """Two brokers (so a registration may be forwarded to the registry's primary), each with a Kafka listener."""
    backend = shared_cluster(zk_ensemble, tmp_path_factory.mktemp("embedded-formats"), "embedded-formats", 2)
    yield backend
    backend.close()


def _topic(c: LocalProcessBackend, partitions: int = 1) -> tuple[list[str], str]:
    urls = [c.broker_url(b) for b in c.broker_ids()]
    topic = f"ef-{uuid.uuid4().hex[:8]}"
    create_topic(urls[0], topic, partitions, 2, seen_by=urls)
    return urls, topic


def _error(answer: tuple[int, Any, dict[str, str]], status: int, code: int) -> dict[str, Any]:
    got, body, _ = answer
    assert (got, body.get("error_code")) == (status, code), body
    return body  # type: ignore[no-any-return]


def _rest_consumer(url: str, topic: str, fmt: str) -> str:
    group = f"g-{uuid.uuid4().hex[:6]}"
    status, created, _ = request("POST", f"{url}/consumers/{group}", {"format": fmt, "auto.offset.reset": "earliest"},
                                 content_type=V2)
    assert status == 200, created
    base = created["base_uri"]
    status, body, _ = request("POST", f"{base}/subscription", {"topics": [topic]}, content_type=V2)
    assert status == 204, body
    return str(base)


def _kafka_values(c: LocalProcessBackend, registry_url: str, topic: str, n: int, fmt: str) -> list[Any]:
    """``n`` values read with confluent-kafka's Consumer and Confluent's own deserializer, unchanged."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry_url})
    deserialize = AvroDeserializer(client) if fmt == "avro" else JSONDeserializer(COUNT, schema_registry_client=client)
    return kafka_values(c, topic, n, lambda v: deserialize(v, SerializationContext(topic, MessageField.VALUE)))


def test_avro_produce_read_back_by_a_rest_consumer_and_by_confluent_kafka(c: LocalProcessBackend) -> None:
    """ProduceToTopicAction with ``value_schema`` registers it as ``<topic>-value`` and answers its id; a second
    produce names ``value_schema_id`` (ProduceToPartitionAction); a v2 consumer instance with ``"format":
    "avro"`` reads the same JSON (unions in Avro's JSON encoding), and confluent-kafka's AvroDeserializer reads
    the same records through the other broker's registry."""
    urls, topic = _topic(c)
    first = [{"value": {"name": "ann", "age": None}}, {"value": {"name": "bob", "age": {"int": 42}}}]
    status, body, _ = request("POST", f"{urls[0]}/topics/{topic}", {"value_schema": USER, "records": first},
                              content_type=AVRO_V2)
    assert status == 200, body
    value_id = body["value_schema_id"]
    assert isinstance(value_id, int) and body["key_schema_id"] is None
    assert [o["error_code"] for o in body["offsets"]] == [None, None]
    status, registered, _ = request("GET", f"{urls[1]}/subjects/{topic}-value/versions/latest")
    assert status == 200 and registered["id"] == value_id, registered
    second = [{"value": {"name": "cy", "age": {"int": 7}}}]
    status, body, _ = request("POST", f"{urls[1]}/topics/{topic}/partitions/0",
                              {"value_schema_id": value_id, "records": second}, content_type=AVRO_V2)
    assert status == 200 and body["value_schema_id"] == value_id, body

    expected = [r["value"] for r in first + second]
    base = _rest_consumer(urls[1], topic, "avro")
    records = read_records(base, 3, AVRO_V2)
    assert [r["value"] for r in records] == expected and all(r["key"] is None for r in records)
    status, read, headers = request("GET", f"{urls[0]}/topics/{topic}/partitions/0/records?offset=0", accept=AVRO_V2)
    assert status == 200 and headers["Content-Type"].startswith(AVRO_V2), read
    assert [r["value"] for r in read["records"]] == expected  # the stateless read renders them the same way

    # Confluent's deserializer gives Python values: unions unwrapped.
    assert _kafka_values(c, urls[1], topic, 3, "avro") == [
        {"name": "ann", "age": None}, {"name": "bob", "age": 42}, {"name": "cy", "age": 7}]


def test_avro_keys_register_under_the_key_subject(c: LocalProcessBackend) -> None:
    """``key_schema`` registers ``<topic>-key``; the answer names both ids and the consumer renders both."""
    urls, topic = _topic(c)
    status, body, _ = request("POST", f"{urls[0]}/topics/{topic}", {
        "key_schema": '{"type": "string"}', "value_schema": USER,
        "records": [{"key": "k1", "value": {"name": "ann", "age": None}}]}, content_type=AVRO_V2)
    assert status == 200 and isinstance(body["key_schema_id"], int), body
    assert request("GET", f"{urls[0]}/subjects/{topic}-key/versions/latest")[1]["id"] == body["key_schema_id"]
    records = read_records(_rest_consumer(urls[0], topic, "avro"), 1, AVRO_V2)
    assert (records[0]["key"], records[0]["value"]) == ("k1", {"name": "ann", "age": None})


def test_jsonschema_produce_read_back_by_a_rest_consumer_and_by_confluent_kafka(c: LocalProcessBackend) -> None:
    """The jsonschema format: validated against the schema, stored as Confluent's JSON Schema serializer stores
    it, read back as the same JSON by a ``"format": "jsonschema"`` instance and by JSONDeserializer."""
    urls, topic = _topic(c)
    values = [{"n": 1}, {"n": 2, "extra": "kept"}]
    status, body, _ = request("POST", f"{urls[1]}/topics/{topic}",
                              {"value_schema": COUNT, "records": [{"value": v} for v in values]},
                              content_type=JSONSCHEMA_V2)
    assert status == 200 and isinstance(body["value_schema_id"], int), body
    records = read_records(_rest_consumer(urls[0], topic, "jsonschema"), 2, JSONSCHEMA_V2)
    assert [r["value"] for r in records] == values
    assert _kafka_values(c, urls[0], topic, 2, "jsonschema") == values


def test_errors_are_confluents(c: LocalProcessBackend) -> None:
    """Errors.java: 42205 a schema that does not parse, 42203 a record that does not fit (nothing is written),
    42202 a value without a value schema, 42201 a key without a key schema; an unknown schema id is the
    registry's 40403; an unknown topic is 404/40401 whatever the format (protobuf: test_schema_registry_protobuf.py)."""
    urls, topic = _topic(c)
    url = f"{urls[0]}/topics/{topic}"
    body = _error(request("POST", url, {"value_schema": '{"type": "recrd"}', "records": [{"value": 1}]},
                          content_type=AVRO_V2), 422, 42205)
    assert body["message"].startswith("Invalid schema")
    _error(request("POST", url, {"value_schema": '{"type": "nope"}', "records": [{"value": 1}]},
                   content_type=JSONSCHEMA_V2), 422, 42205)
    body = _error(request("POST", url, {"value_schema": USER, "records": [
        {"value": {"name": "ok", "age": None}}, {"value": {"name": 5}}]}, content_type=AVRO_V2), 422, 42203)
    assert "Conversion of JSON to Avro failed" in body["message"]
    _, json_topic = _topic(c)  # its own subject: the avro one above was registered before its record failed
    _error(request("POST", f"{urls[0]}/topics/{json_topic}",
                   {"value_schema": COUNT, "records": [{"value": {"n": "x"}}]}, content_type=JSONSCHEMA_V2), 422, 42203)
    _error(request("POST", url, {"records": [{"value": {"name": "a"}}]}, content_type=AVRO_V2), 422, 42202)
    _error(request("POST", url, {"value_schema": USER, "records": [{"key": "k", "value": {"name": "a", "age": None}}]},
                   content_type=AVRO_V2), 422, 42201)
    _error(request("POST", url, {"value_schema_id": 987654, "records": [{"value": 1}]}, content_type=AVRO_V2),
           404, 40403)
    _error(request("POST", f"{urls[0]}/topics/no-such-{topic}", {"value_schema": USER, "records": [{"value": 1}]},
                   content_type=AVRO_V2), 404, 40401)
    status, read, _ = request("GET", f"{urls[0]}/topics/{topic}/partitions/0/records?offset=0", accept=AVRO_V2)
    assert status == 200 and read["records"] == [], read  # the refused produces wrote nothing


def test_a_record_that_is_not_framed_fails_the_avro_read(c: LocalProcessBackend) -> None:
    """A plain JSON record read by an avro consumer: Confluent's deserializer fails ("Unknown magic byte!"),
    answered as kafka-rest answers a Kafka error (500/50002), on the stateless read and on an instance."""
    urls, topic = _topic(c)
    status, body, _ = request("POST", f"{urls[0]}/topics/{topic}", {"records": [{"value": {"n": 1}}]},
                              content_type="application/vnd.kafka.json.v2+json")
    assert status == 200, body
    body = _error(request("GET", f"{urls[0]}/topics/{topic}/partitions/0/records?offset=0", accept=AVRO_V2),
                  500, 50002)
    assert "Unknown magic byte" in body["message"]
    base = _rest_consumer(urls[0], topic, "avro")
    deadline = time.monotonic() + SLOW_MACHINE_S
    while True:
        status, body, _ = request("GET", f"{base}/records?timeout=1000", accept=AVRO_V2)
        if status != 200 or body:
            break
        assert time.monotonic() < deadline, "the avro instance never reached the record"
    assert (status, body["error_code"]) == (500, 50002) and "Unknown magic byte" in body["message"], body


def test_v3_produce_with_schemas(c: LocalProcessBackend) -> None:
    """kafka-rest's v3 ProduceAction with SchemaManagerImpl.getSchema: ``schema`` (with ``type``) registers under
    ``<topic>-value``; ``schema_id``, ``schema_version``, or nothing (the subject's latest) find it; the report
    names ``subject``, ``schema_id`` and ``schema_version``; a record that does not fit is 400 for that record
    (SchemaRecordSerializerImpl's BadRequestException), an unknown id 40403; the records read back as Avro."""
    urls, topic = _topic(c)
    cid = request("GET", f"{urls[0]}/v3/clusters")[1]["data"][0]["cluster_id"]
    objects = [{"value": {"type": "AVRO", "schema": USER, "data": {"name": "v3a", "age": None}}},
               {"value": {"schema_version": 1, "data": {"name": "v3b", "age": {"int": 1}}}},
               {"value": {"data": {"name": "v3c", "age": None}}},
               {"value": {"type": "AVRO", "data": {"name": 1}}},
               {"value": {"schema_id": 987654, "data": 1}}]
    raw = "\n".join(json.dumps(o) for o in objects).encode()
    req = urllib.request.Request(f"{urls[1]}/v3/clusters/{cid}/topics/{topic}/records", data=raw, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=SLOW_MACHINE_S) as resp:  # one JSON report per line
        reports = [json.loads(line) for line in resp.read().decode().splitlines()]
    assert [r["error_code"] for r in reports] == [200, 200, 200, 400, 40403], reports
    schema_id = reports[0]["value"]["schema_id"]
    assert reports[0]["value"] == {"type": "AVRO", "subject": f"{topic}-value", "schema_id": schema_id,
                                   "schema_version": 1, "size": reports[0]["value"]["size"]}
    assert all(r["value"]["schema_id"] == schema_id for r in reports[:3])
    status, read, _ = request("GET", f"{urls[0]}/topics/{topic}/partitions/0/records?offset=0", accept=AVRO_V2)
    assert status == 200 and [r["value"]["name"] for r in read["records"]] == ["v3a", "v3b", "v3c"], read


def _v3_produce(url: str, cluster_id: str, topic: str, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A v3 produce of ``objects`` (one request object per line) and its per-record reports, in order."""
    raw = "\n".join(json.dumps(o) for o in objects).encode()
    req = urllib.request.Request(f"{url}/v3/clusters/{cluster_id}/topics/{topic}/records", data=raw, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=SLOW_MACHINE_S) as resp:  # one JSON report per line
        return [json.loads(line) for line in resp.read().decode().splitlines()]


def test_v3_produce_with_record_name_strategies(c: LocalProcessBackend) -> None:
    """kafka-rest's v3 ``subject_name_strategy`` (ProduceRequest's EnumSubjectNameStrategy, SchemaManagerImpl):
    RECORD_NAME registers the value's schema under its record's full name, TOPIC_RECORD_NAME the key's under
    ``<topic>-<full name>``, nothing under ``<topic>-value``; the reports name those subjects; a schema id is
    found under the name its schema gives; ``schema_version`` with a record-name strategy is 400
    (getSchemaSubjectUnsafe), a schema with no record name 50002 (RecordNameStrategy's SerializationException);
    the records read back."""
    urls, topic = _topic(c)
    cid = request("GET", f"{urls[0]}/v3/clusters")[1]["data"][0]["cluster_id"]
    ns = f"ef.n{uuid.uuid4().hex[:8]}"  # record-name subjects are global: a namespace of this run's own
    event = json.dumps({"type": "record", "name": "Event", "namespace": ns,
                        "fields": [{"name": "name", "type": "string"}]})
    key = json.dumps({"type": "record", "name": "Key", "namespace": ns, "fields": [{"name": "id", "type": "string"}]})
    first = _v3_produce(urls[1], cid, topic, [{
        "key": {"type": "AVRO", "schema": key, "subject_name_strategy": "TOPIC_RECORD_NAME", "data": {"id": "k1"}},
        "value": {"type": "AVRO", "schema": event, "subject_name_strategy": "RECORD_NAME", "data": {"name": "e1"}}}])
    assert [r["error_code"] for r in first] == [200], first
    value_id, key_id = first[0]["value"]["schema_id"], first[0]["key"]["schema_id"]
    assert first[0]["value"] == {"type": "AVRO", "subject": f"{ns}.Event", "schema_id": value_id, "schema_version": 1,
                                 "size": first[0]["value"]["size"]}
    assert (first[0]["key"]["subject"], first[0]["key"]["schema_version"]) == (f"{topic}-{ns}.Key", 1), first
    assert request("GET", f"{urls[0]}/subjects/{ns}.Event/versions/latest")[1]["id"] == value_id
    assert request("GET", f"{urls[0]}/subjects/{topic}-{ns}.Key/versions/latest")[1]["id"] == key_id
    _error(request("GET", f"{urls[0]}/subjects/{topic}-value/versions/latest"), 404, 40401)
    reports = _v3_produce(urls[0], cid, topic, [
        {"value": {"schema_id": value_id, "subject_name_strategy": "RECORD_NAME", "data": {"name": "e2"}}},
        {"value": {"schema_version": 1, "subject_name_strategy": "RECORD_NAME", "data": {"name": "e3"}}},
        {"value": {"type": "AVRO", "schema": '{"type": "string"}', "subject_name_strategy": "RECORD_NAME",
                   "data": "s"}}])
    assert [r["error_code"] for r in reports] == [200, 400, 50002], reports
    assert (reports[0]["value"]["subject"], reports[0]["value"]["schema_id"]) == (f"{ns}.Event", value_id)
    assert reports[1]["message"] == "Cannot use schema_subject_strategy=RECORD_NAME without schema_id or schema."
    assert reports[2]["message"] == ("In configuration value.subject.name.strategy = io.confluent.kafka.serializers."
                                     "subject.RecordNameStrategy, the message value must only be a record schema")
    status, read, _ = request("GET", f"{urls[0]}/topics/{topic}/partitions/0/records?offset=0", accept=AVRO_V2)
    assert status == 200, read
    assert [(r["key"], r["value"]) for r in read["records"]] == [({"id": "k1"}, {"name": "e1"}),
                                                                  (None, {"name": "e2"})], read
