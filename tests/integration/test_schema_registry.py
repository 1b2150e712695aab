"""Issue 26 points 1-2: Confluent Schema Registry's REST API on every broker of a live 3-broker cluster.

Written from confluentinc/schema-registry: core/src/main/java/io/confluent/kafka/schemaregistry/rest/resources/
SubjectsResource.java, SubjectVersionsResource.java, SchemasResource.java, ConfigResource.java, ModeResource.java
and CompatibilityResource.java (paths, bodies, the soft-then-permanent delete rules), and rest/exceptions/
Errors.java (40401 subject, 40402 version, 40403 schema not found, 40404-40407 soft-delete states, HTTP 409
with 40901 INCOMPATIBLE_SCHEMA_ERROR_CODE, 42201 invalid schema, 42202 invalid version, 42203 invalid level,
42204 invalid mode, 42205 not permitted, 42206 reference exists). Storage is the compacted ``_schemas`` topic
with one primary elected through ZooKeeper; the last test SIGKILLs the primary and checks that ids stay stable
and only grow. Confluent's own client (confluent-kafka's SchemaRegistryClient, AvroSerializer/AvroDeserializer,
JSONSerializer/JSONDeserializer) runs unchanged against the cluster's registry URL and Kafka listener.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from odradek.protocol.records import encode_batch
from tests.harness.cluster import LocalProcessBackend, shared_cluster
from tests.harness.http import metadata, request
from tests.harness.wait import SLOW_MACHINE_S, wait_until
from zk.znodes import SchemaRegistryWriterZNode

pytestmark = pytest.mark.cluster

SR = "application/vnd.schemaregistry.v1+json"


@pytest.fixture(scope="module")
def c(zk_ensemble: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessBackend]:
    """Three brokers, each with its REST port (the registry) and a Kafka listener."""
    backend = shared_cluster(zk_ensemble, tmp_path_factory.mktemp("schema-registry"), "schema-registry", 3)
    yield backend
    backend.close()


def sr(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    status, out, headers = request(method, url, body, content_type=SR)
    if status < 400:
        assert headers.get("Content-Type", "").startswith(SR), headers
    return status, out


def avro_record(name: str, *fields: tuple[str, Any], default: dict[str, Any] | None = None) -> str:
    out = []
    for fname, ftype in fields:
        f: dict[str, Any] = {"name": fname, "type": ftype}
        if default and fname in default:
            f["default"] = default[fname]
        out.append(f)
    return json.dumps({"type": "record", "name": name, "fields": out})


def subject() -> str:
    return f"s-{uuid.uuid4().hex[:8]}-value"


def test_register_lookup_and_the_same_id_from_every_broker(c: LocalProcessBackend) -> None:
    """SubjectVersionsResource.register answers {"id"}; the same schema again (any whitespace) the same id, under
    another subject too; SubjectsResource.lookUpSchemaUnderSubject finds it; every broker serves the id at once
    after a write through any of them (reads-your-writes on every broker), whichever broker is the primary."""
    urls = [c.broker_url(b) for b in c.broker_ids()]
    s = subject()
    schema = avro_record("User", ("name", "string"))
    status, body = sr("POST", f"{urls[0]}/subjects/{s}/versions", {"schema": schema})
    assert status == 200, body
    sid = body["id"]
    assert sr("POST", f"{urls[1]}/subjects/{s}/versions",
              {"schema": json.dumps(json.loads(schema), indent=2)}) == (200, {"id": sid})
    other = subject()
    assert sr("POST", f"{urls[2]}/subjects/{other}/versions", {"schema": schema}) == (200, {"id": sid})
    for url in urls:  # broker 3 wrote `other`: every broker reads it at once (each read syncs its copy first)
        assert sr("GET", f"{url}/subjects/{other}/versions") == (200, [1]), url
        assert sr("GET", f"{url}/schemas/ids/{sid}") == (200, {"schema": json.dumps(json.loads(schema),
                                                                                     separators=(",", ":"))})
        assert sr("GET", f"{url}/subjects/{s}/versions") == (200, [1])
    for i in range(6):  # and again, through each broker in turn, read through the next at once
        fresh, text = subject(), avro_record(f"Fresh{i}", ("n", "int"))
        status, made = sr("POST", f"{urls[i % 3]}/subjects/{fresh}/versions", {"schema": text})
        assert status == 200, made
        assert sr("GET", f"{urls[(i + 1) % 3]}/subjects/{fresh}/versions/latest")[1]["id"] == made["id"]
        assert sr("GET", f"{urls[(i + 2) % 3]}/schemas/ids/{made['id']}")[0] == 200
    status, found = sr("POST", f"{urls[1]}/subjects/{s}", {"schema": schema})
    assert status == 200 and found["id"] == sid and found["version"] == 1 and found["subject"] == s
    assert sr("POST", f"{urls[1]}/subjects/{s}", {"schema": avro_record("Other", ("x", "int"))})[1][
        "error_code"] == 40403
    assert sr("POST", f"{urls[1]}/subjects/nope-{s}", {"schema": schema})[1]["error_code"] == 40401
    status, latest = sr("GET", f"{urls[2]}/subjects/{s}/versions/latest")
    assert status == 200 and latest == {"subject": s, "version": 1, "id": sid, "schema": found["schema"]}
    status, raw, _ = request("GET", f"{urls[2]}/subjects/{s}/versions/1/schema")
    assert status == 200 and raw == json.loads(found["schema"])
    assert sr("GET", f"{urls[0]}/schemas/ids/{sid}/subjects") == (200, sorted([s, other]))
    assert sr("GET", f"{urls[0]}/schemas/ids/{sid}/versions")[1] == sorted(
        [{"subject": s, "version": 1}, {"subject": other, "version": 1}], key=lambda v: v["subject"])
    assert s in sr("GET", f"{urls[0]}/subjects")[1]
    assert sr("GET", f"{urls[0]}/schemas/types") == (200, ["AVRO", "JSON", "PROTOBUF"])
    status, topic, _ = request("GET", f"{urls[0]}/topics/_schemas")  # the record: compacted, on every broker
    assert status == 200 and topic["configs"]["cleanup.policy"] == "compact"
    assert [len(p["replicas"]) for p in topic["partitions"]] == [3]


def test_errors_have_confluents_codes(c: LocalProcessBackend) -> None:
    """Errors.java: 42202 for a version that is neither 1..2^31-1 nor latest, 40403 for an unknown id, 42201 for a
    schema that does not parse (a PROTOBUF one with protoc's reason), 40401 for an unknown subject."""
    url = c.broker_url(1)
    s = subject()
    assert sr("GET", f"{url}/subjects/{s}/versions")[1]["error_code"] == 40401
    assert sr("GET", f"{url}/subjects/{s}/versions/zero")[1]["error_code"] == 42202
    assert sr("GET", f"{url}/schemas/ids/987654")[1]["error_code"] == 40403
    status, body = sr("POST", f"{url}/subjects/{s}/versions", {"schema": '{"type": "record"}'})
    assert (status, body["error_code"]) == (422, 42201)
    status, body = sr("POST", f"{url}/subjects/{s}/versions",
                      {"schema": 'syntax = "proto3"; message M { int32 a = 1 }', "schemaType": "PROTOBUF"})
    assert (status, body["error_code"]) == (422, 42201) and "Expected" in body["message"]
    status, body = sr("POST", f"{url}/subjects/{s}/versions", {"schema": '{"type": 12}', "schemaType": "JSON"})
    assert (status, body["error_code"]) == (422, 42201)


def test_compatibility_levels_and_checks(c: LocalProcessBackend) -> None:
    """ConfigResource: a subject's level (42203 for an unknown one, 40408 when unset without defaultToGlobal);
    the default BACKWARD refuses a new field without a default (409 with the reasons), NONE allows it;
    CompatibilityResource answers is_compatible and, with verbose=true, the messages."""
    url, url2 = c.broker_url(1), c.broker_url(2)
    s = subject()
    v1 = avro_record("Order", ("id", "long"))
    assert sr("POST", f"{url}/subjects/{s}/versions", {"schema": v1})[0] == 200
    assert sr("GET", f"{url}/config")[1] == {"compatibilityLevel": "BACKWARD"}
    assert sr("GET", f"{url}/config/{s}")[1]["error_code"] == 40408
    assert sr("GET", f"{url}/config/{s}?defaultToGlobal=true")[1] == {"compatibilityLevel": "BACKWARD"}
    breaking = avro_record("Order", ("id", "long"), ("amount", "double"))
    status, body = sr("POST", f"{url2}/subjects/{s}/versions", {"schema": breaking})
    assert (status, body["error_code"]) == (409, 40901)
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in body["message"]
    status, body = sr("POST", f"{url}/compatibility/subjects/{s}/versions/latest?verbose=true", {"schema": breaking})
    assert status == 200 and body["is_compatible"] is False and body["messages"]
    fine = avro_record("Order", ("id", "long"), ("amount", "double"), default={"amount": 0.0})
    assert sr("POST", f"{url}/compatibility/subjects/{s}/versions/1", {"schema": fine}) == (
        200, {"is_compatible": True})
    assert sr("PUT", f"{url}/config/{s}", {"compatibility": "SIDEWAYS"})[1]["error_code"] == 42203
    assert sr("PUT", f"{url2}/config/{s}", {"compatibility": "NONE"}) == (200, {"compatibility": "NONE"})
    assert sr("GET", f"{url2}/config/{s}") == (200, {"compatibilityLevel": "NONE"})
    status, body = sr("POST", f"{url2}/subjects/{s}/versions", {"schema": breaking})
    assert status == 200 and body["id"] > 0
    assert sr("GET", f"{url2}/subjects/{s}/versions") == (200, [1, 2])
    assert sr("DELETE", f"{url}/config/{s}") == (200, {"compatibilityLevel": "NONE"})
    assert sr("GET", f"{url}/config/{s}")[1]["error_code"] == 40408
    status, body = sr("POST", f"{url}/subjects/{subject()}/versions", {
        "schemaType": "JSON", "schema": json.dumps({"type": "object", "properties": {"a": {"type": "string"}}})})
    assert status == 200, body


def test_soft_then_permanent_deletes(c: LocalProcessBackend) -> None:
    """SubjectVersionsResource.deleteSchemaVersion and SubjectsResource.deleteSubject: a soft delete hides a
    version (still readable with deleted=true), a permanent delete needs a soft one first (40405/40407), a
    second soft delete is 40404/40406; the id of a deleted schema is never given to another schema."""
    url = c.broker_url(3)
    s = subject()
    ids = [sr("POST", f"{url}/subjects/{s}/versions",
              {"schema": avro_record("D", ("a", "int"), *extra, default={"b": None})})[1]["id"]
           for extra in ([], [("b", ["null", "int"])])]
    assert sr("DELETE", f"{url}/subjects/{s}/versions/1?permanent=true")[1]["error_code"] == 40407
    assert sr("DELETE", f"{url}/subjects/{s}/versions/1") == (200, 1)
    assert sr("DELETE", f"{url}/subjects/{s}/versions/1")[1]["error_code"] == 40406
    assert sr("GET", f"{url}/subjects/{s}/versions/1")[1]["error_code"] == 40402
    assert sr("GET", f"{url}/subjects/{s}/versions/1?deleted=true")[1]["id"] == ids[0]
    assert sr("GET", f"{url}/subjects/{s}/versions") == (200, [2])
    assert sr("DELETE", f"{url}/subjects/{s}/versions/1?permanent=true") == (200, 1)
    assert sr("DELETE", f"{url}/subjects/{s}?permanent=true")[1]["error_code"] == 40405
    assert sr("DELETE", f"{url}/subjects/{s}") == (200, [2])
    assert sr("DELETE", f"{url}/subjects/{s}")[1]["error_code"] == 40404
    assert s not in sr("GET", f"{url}/subjects")[1] and s in sr("GET", f"{url}/subjects?deleted=true")[1]
    assert sr("DELETE", f"{url}/subjects/{s}?permanent=true") == (200, [2])
    assert sr("GET", f"{url}/subjects/{s}/versions")[1]["error_code"] == 40401
    assert sr("GET", f"{url}/schemas/ids/{ids[1]}")[1]["error_code"] == 40403
    fresh = sr("POST", f"{url}/subjects/{s}/versions", {"schema": avro_record("D", ("c", "string"))})[1]["id"]
    assert fresh > max(ids)


def test_modes(c: LocalProcessBackend) -> None:
    """ModeResource: READONLY refuses registration (42205), an unknown mode is 42204, IMPORT takes a given id
    and version on an empty subject, and the subject's mode goes away with DELETE."""
    url = c.broker_url(2)
    s = subject()
    assert sr("GET", f"{url}/mode") == (200, {"mode": "READWRITE"})
    assert sr("GET", f"{url}/mode/{s}")[1]["error_code"] == 40409
    assert sr("PUT", f"{url}/mode/{s}", {"mode": "SOMETIMES"})[1]["error_code"] == 42204
    assert sr("PUT", f"{url}/mode/{s}", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
    status, body = sr("POST", f"{url}/subjects/{s}/versions", {"schema": '"string"'})
    assert (status, body["error_code"]) == (422, 42205)
    assert sr("PUT", f"{url}/mode/{s}", {"mode": "IMPORT"}) == (200, {"mode": "IMPORT"})
    status, body = sr("POST", f"{url}/subjects/{s}/versions", {"schema": '"string"', "id": 500000, "version": 7})
    assert (status, body) == (200, {"id": 500000})
    assert sr("GET", f"{url}/subjects/{s}/versions/7")[1]["id"] == 500000
    assert sr("DELETE", f"{url}/mode/{s}") == (200, {"mode": "IMPORT"})
    assert sr("GET", f"{url}/mode/{s}?defaultToGlobal=true") == (200, {"mode": "READWRITE"})
    status, body = sr("POST", f"{url}/subjects/{subject()}/versions", {"schema": '"bytes"', "id": 500001})
    assert (status, body["error_code"]) == (422, 42205)
    later = sr("POST", f"{url}/subjects/{subject()}/versions", {"schema": '"long"'})[1]["id"]
    assert later > 500000  # ids never collide with imported ones


def test_references(c: LocalProcessBackend) -> None:
    """Schema references: a record using a named type registered under another subject; referencedby lists the
    referencing id, and the referenced version cannot be deleted while referenced (42206)."""
    url = c.broker_url(1)
    address, person = subject(), subject()
    addr = json.dumps({"type": "record", "name": "Address", "namespace": "ex", "fields": [
        {"name": "city", "type": "string"}]})
    assert sr("POST", f"{url}/subjects/{address}/versions", {"schema": addr})[0] == 200
    main = json.dumps({"type": "record", "name": "Person", "namespace": "ex", "fields": [
        {"name": "home", "type": "ex.Address"}]})
    status, body = sr("POST", f"{url}/subjects/{person}/versions", {
        "schema": main, "references": [{"name": "ex.Address", "subject": address, "version": 1}]})
    assert status == 200, body
    assert sr("GET", f"{url}/subjects/{address}/versions/1/referencedby") == (200, [body["id"]])
    status, got = sr("GET", f"{url}/subjects/{person}/versions/1")
    assert got["references"] == [{"name": "ex.Address", "subject": address, "version": 1}]
    assert sr("DELETE", f"{url}/subjects/{address}/versions/1")[1]["error_code"] == 42206
    status, body = sr("POST", f"{url}/subjects/{subject()}/versions", {"schema": main})
    assert (status, body["error_code"]) == (422, 42201)  # the named type is unknown without the reference


def test_confluent_kafka_serializers_unchanged(c: LocalProcessBackend) -> None:
    """confluent-kafka's SchemaRegistryClient with AvroSerializer/AvroDeserializer and JSONSerializer/
    JSONDeserializer: records produced to the Kafka listener in Confluent's wire format (magic 0, schema id)
    and read back through the registry of another broker."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from tests.harness.http import create_topic

    urls = [c.broker_url(b) for b in c.broker_ids()]
    topic = f"sr-{uuid.uuid4().hex[:8]}"
    create_topic(urls[0], topic, 1, 3, seen_by=urls)
    writer_client = SchemaRegistryClient({"url": urls[1]})
    reader_client = SchemaRegistryClient({"url": urls[2]})
    avro = avro_record("Reading", ("sensor", "string"), ("value", "double"))
    jschema = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    serialize = AvroSerializer(writer_client, avro)
    jserialize = JSONSerializer(jschema, writer_client)
    producer = Producer({"bootstrap.servers": c.kafka_bootstrap})
    values = [{"sensor": f"s{i}", "value": i / 2} for i in range(5)]
    for v in values:
        producer.produce(topic, value=serialize(v, SerializationContext(topic, MessageField.VALUE)))
    json_topic = f"{topic}-json"
    create_topic(urls[0], json_topic, 1, 3, seen_by=urls)
    producer.produce(json_topic, value=jserialize({"n": 3}, SerializationContext(json_topic, MessageField.VALUE)))
    assert producer.flush(SLOW_MACHINE_S) == 0
    registered = reader_client.get_latest_version(f"{topic}-value")
    assert registered.schema.schema_type == "AVRO" and registered.version == 1
    deserialize = AvroDeserializer(reader_client)
    jdeserialize = JSONDeserializer(jschema, schema_registry_client=reader_client)
    consumer = Consumer({"bootstrap.servers": c.kafka_bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    try:
        got: list[Any] = []
        consumer.assign([TopicPartition(topic, 0, 0), TopicPartition(json_topic, 0, 0)])
        deadline = time.monotonic() + SLOW_MACHINE_S
        while len(got) < len(values) + 1:
            assert time.monotonic() < deadline, f"read {len(got)} records"
            for m in consumer.consume(num_messages=100, timeout=0.5):
                assert m.error() is None, m.error()
                assert m.value()[0] == 0  # Confluent's magic byte, then the 4-byte schema id
                ctx = SerializationContext(m.topic(), MessageField.VALUE)
                got.append(deserialize(m.value(), ctx) if m.topic() == topic else jdeserialize(m.value(), ctx))
    finally:
        consumer.close()
    assert [g for g in got if "sensor" in g] == values and {"n": 3} in got


def writer(c: LocalProcessBackend) -> tuple[int, int]:
    """The (producer id, epoch) the primary writes _schemas with (zk SchemaRegistryWriterZNode)."""
    found = SchemaRegistryWriterZNode.decode(c.zk_client().kazoo.get(SchemaRegistryWriterZNode.path)[0])
    assert found is not None
    return found


def test_ids_are_stable_across_a_primary_sigkill(c: LocalProcessBackend) -> None:
    """The primary (the first contender of the ZooKeeper election) is SIGKILLed: another broker takes over,
    the ids registered before still resolve on every live broker, and the next registration gets a new, larger
    id (derived from the _schemas records, never reused). The killed broker comes back and serves them too.
    The new primary fenced the old one first: a batch of the old primary's producer (a deposed primary's
    late write) is refused by the _schemas leader, and nothing of it is served."""
    zk = c.zk_client()
    s = subject()
    before = [sr("POST", f"{c.broker_url(1)}/subjects/{s}/versions",
                 {"schema": avro_record("K", ("a", "int"), *extra, default={"b": None})})[1]["id"]
              for extra in ([], [("b", ["null", "int"])])]
    deposed = writer(c)
    primary = wait_until(zk.get_schema_registry_primary, SLOW_MACHINE_S, "a schema registry primary")
    c.kill_broker(primary)
    live = [b for b in c.broker_ids() if b != primary]

    def register_after() -> int:
        status, body = sr("POST", f"{c.broker_url(live[0])}/subjects/{s}/versions",
                          {"schema": avro_record("K", ("a", "int"), ("b", ["null", "int"]), ("c", ["null", "long"]),
                                                      default={"b": None, "c": None})})
        return int(body["id"]) if status == 200 else 0

    after = wait_until(register_after, 3 * SLOW_MACHINE_S, "a registration after the primary's SIGKILL")
    assert after > max(before)
    # the new primary's epoch, claimed in ZooKeeper: larger (more than one more when, on a loaded machine, a
    # primary's session expired right after its election and another broker took over again)
    claimed = writer(c)
    assert claimed[0] == deposed[0] and claimed[1] > deposed[1], (deposed, claimed)
    url = c.broker_url(live[0])
    leader = c.broker_url(metadata(url, "_schemas")["partitions"][0]["leader"])
    rogue = encode_batch([(json.dumps({"keytype": "SCHEMA", "subject": s, "version": 9, "magic": 1}).encode(),
                           json.dumps({"subject": s, "version": 9, "id": 9999, "schema": '"int"'}).encode(),
                           int(time.time() * 1000), ())], producer_id=deposed[0], producer_epoch=deposed[1],
                         base_sequence=1000)
    status, body, _ = request("POST", f"{leader}/topics/_schemas/partitions/0/batches?acks=all", raw=rogue,
                              content_type="application/vnd.odradek.batches.v2")
    assert (status, body.get("error")) == (409, "INVALID_PRODUCER_EPOCH"), body
    assert sr("GET", f"{url}/schemas/ids/9999")[0] == 404
    assert wait_until(zk.get_schema_registry_primary, SLOW_MACHINE_S, "a new primary") != primary
    for b in live:
        for sid in before:
            assert sr("GET", f"{c.broker_url(b)}/schemas/ids/{sid}")[0] == 200
        assert wait_until(lambda b=b: sr("GET", f"{c.broker_url(b)}/subjects/{s}/versions")[1] == [1, 2, 3],
                          SLOW_MACHINE_S, f"broker {b} sees version 3")
    c.start_broker(primary)
    wait_until(lambda: sr("GET", f"{c.broker_url(primary)}/schemas/ids/{after}")[0] == 200, 2 * SLOW_MACHINE_S,
               "the restarted broker serves the new id")
    for sid in before:  # the same schemas under the same ids, on the restarted broker as on the others
        assert sr("GET", f"{c.broker_url(primary)}/schemas/ids/{sid}") == sr("GET", f"{c.broker_url(live[0])}"
                                                                                  f"/schemas/ids/{sid}")
