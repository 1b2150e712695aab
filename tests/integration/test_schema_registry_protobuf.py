"""Protobuf in the cluster's Schema Registry and the REST Proxy's ``protobuf`` embedded format, on a live cluster.

Written from confluentinc/schema-registry's protobuf-provider (ProtobufSchema.java: a schema as .proto text or
base64 of a FileDescriptorProto, ``?format=serialized``, references by import name; diff/SchemaDiff.java for
what is compatible) and confluentinc/kafka-rest (a v2 produce with ``application/vnd.kafka.protobuf.v2+json``
registers ``value_schema`` under ``<topic>-value`` and writes the schema's first message; the protobuf consumers
render records with JsonFormat's printer, default values included). confluent-kafka's SchemaRegistryClient,
ProtobufSerializer and ProtobufDeserializer run unchanged against the registry URL and the Kafka listener, with a
message class protoc generates at test time.
"""

from __future__ import annotations

import base64
import importlib
import json
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.cluster import LocalProcessBackend, shared_cluster
from tests.harness.http import create_topic, read_records, request
from tests.harness.kafka_client import kafka_values
from tests.harness.wait import SLOW_MACHINE_S

pytestmark = pytest.mark.cluster

SR = "application/vnd.schemaregistry.v1+json"
PROTOBUF_V2 = "application/vnd.kafka.protobuf.v2+json"
V2 = "application/vnd.kafka.v2+json"

READING = '''syntax = "proto3";
package {package};

import "google/protobuf/timestamp.proto";

message Reading {{
  string sensor = 1;
  double value = 2;
  int64 seq = 3;
  google.protobuf.Timestamp at = 4;
  Unit unit = 5;
  map<string, string> tags = 6;
}}

enum Unit {{
  UNIT_UNKNOWN = 0;
  CELSIUS = 1;
}}
'''


@pytest.fixture(scope="module")
def c(zk_ensemble: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessBackend]:
    """Two brokers (a registration may be forwarded to the registry's primary), each with a Kafka listener."""
    backend = shared_cluster(zk_ensemble, tmp_path_factory.mktemp("schema-registry-protobuf"),
                             "schema-registry-protobuf", 2)
    yield backend
    backend.close()


def sr(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    status, out, _ = request(method, url, body, content_type=SR)
    return status, out


def _topic(c: LocalProcessBackend) -> tuple[list[str], str]:
    urls = [c.broker_url(b) for b in c.broker_ids()]
    topic = f"pb-{uuid.uuid4().hex[:8]}"
    create_topic(urls[0], topic, 1, 2, seen_by=urls)
    return urls, topic


def _generated(tmp_path: Path, text: str, name: str) -> Any:
    """The module protoc's Python generator writes for ``text`` (compiled at test time), imported."""
    from grpc_tools import protoc

    (tmp_path / f"{name}.proto").write_text(text)
    include = str(Path(protoc.__file__).parent / "_proto")
    assert protoc.main(["protoc", f"-I{tmp_path}", f"-I{include}", f"--python_out={tmp_path}",
                        str(tmp_path / f"{name}.proto")]) == 0
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module(f"{name}_pb2")
    finally:
        sys.path.remove(str(tmp_path))


def _consume(c: LocalProcessBackend, topic: str, n: int) -> list[bytes]:
    """``n`` raw values of partition 0, read with confluent-kafka's Consumer from the Kafka listener."""
    return kafka_values(c, topic, n)


def _rest_consumer(url: str, topic: str) -> str:
    group = f"g-{uuid.uuid4().hex[:6]}"
    status, created, _ = request("POST", f"{url}/consumers/{group}",
                                 {"format": "protobuf", "auto.offset.reset": "earliest"}, content_type=V2)
    assert status == 200, created
    base = str(created["base_uri"])
    status, body, _ = request("POST", f"{base}/subscription", {"topics": [topic]}, content_type=V2)
    assert status == 204, body
    return base


def test_confluent_kafka_protobuf_serdes_unchanged(c: LocalProcessBackend, tmp_path: Path) -> None:
    """ProtobufSerializer registers base64(serialized_pb) with its well-known import unreferenced; the registry
    stores it as .proto text; records go through the Kafka listener with message indexes [0]; ProtobufDeserializer
    fetches the writer schema with ``format=serialized`` from the other broker and reads the same messages; a
    REST consumer instance renders them as kafka-rest does."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    urls, topic = _topic(c)
    package = f"odr{uuid.uuid4().hex[:8]}"
    module = _generated(tmp_path, READING.format(package=package), f"reading_{package}")
    serialize = ProtobufSerializer(module.Reading, SchemaRegistryClient({"url": urls[0]}),
                                   {"use.deprecated.format": False})
    producer = Producer({"bootstrap.servers": c.kafka_bootstrap})
    sent = [module.Reading(sensor=f"s{i}", value=i / 2, seq=2**40 + i, unit=module.CELSIUS, tags={"k": str(i)})
            for i in range(3)]
    sent[0].at.FromSeconds(1_700_000_000)
    for m in sent:
        producer.produce(topic, value=serialize(m, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(SLOW_MACHINE_S) == 0

    status, latest = sr("GET", f"{urls[1]}/subjects/{topic}-value/versions/latest")
    assert status == 200 and latest["schemaType"] == "PROTOBUF", latest
    assert latest["schema"].startswith('syntax = "proto3";') and "message Reading" in latest["schema"]
    assert "references" not in latest  # google/protobuf/timestamp.proto resolves without one

    raw = _consume(c, topic, 3)
    assert all(v[0] == 0 and int.from_bytes(v[1:5], "big") == latest["id"] and v[5] == 0 for v in raw)
    deserialize = ProtobufDeserializer(module.Reading, {"use.deprecated.format": False},
                                       schema_registry_client=SchemaRegistryClient({"url": urls[1]}))
    got = [deserialize(v, SerializationContext(topic, MessageField.VALUE)) for v in raw]
    assert got == sent

    records = read_records(_rest_consumer(urls[1], topic), 3, PROTOBUF_V2)
    assert records[0]["value"] == {"sensor": "s0", "value": 0.0, "seq": str(2**40), "at": "2023-11-14T22:13:20Z",
                                   "unit": "CELSIUS", "tags": {"k": "0"}}
    assert [r["value"]["seq"] for r in records] == [str(2**40 + i) for i in range(3)]


def test_rest_protobuf_produce_read_by_rest_and_by_confluent_kafka(c: LocalProcessBackend, tmp_path: Path) -> None:
    """A v2 produce with ``value_schema`` (.proto text) registers ``<topic>-value`` and writes the first message;
    a second produce names ``value_schema_id``; keys take ``key_schema``. A protobuf consumer instance and the
    stateless read render the JSON back; ProtobufDeserializer reads the same bytes."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    urls, topic = _topic(c)
    package = f"odr{uuid.uuid4().hex[:8]}"
    text = READING.format(package=package)
    key_schema = f'syntax = "proto3";\npackage {package}.k;\nmessage Key {{ string id = 1; }}\n'
    first = [{"key": {"id": "a"}, "value": {"sensor": "s1", "value": 1.5, "seq": 7}},
             {"key": {"id": "b"}, "value": {"sensor": "s2", "unit": "CELSIUS", "tags": {"x": "y"}}}]
    status, body, _ = request("POST", f"{urls[0]}/topics/{topic}",
                              {"key_schema": key_schema, "value_schema": text, "records": first},
                              content_type=PROTOBUF_V2)
    assert status == 200, body
    key_id, value_id = body["key_schema_id"], body["value_schema_id"]
    assert isinstance(key_id, int) and isinstance(value_id, int) and key_id != value_id
    assert [o["error_code"] for o in body["offsets"]] == [None, None]
    status, body, _ = request("POST", f"{urls[1]}/topics/{topic}/partitions/0",
                              {"value_schema_id": value_id, "records": [{"value": {"sensor": "s3", "seq": "9"}}]},
                              content_type=PROTOBUF_V2)
    assert status == 200 and body["value_schema_id"] == value_id, body

    defaults = {"sensor": "", "value": 0.0, "seq": "0", "unit": "UNIT_UNKNOWN", "tags": {}}
    expected = [{**defaults, "sensor": "s1", "value": 1.5, "seq": "7"},
                {**defaults, "sensor": "s2", "unit": "CELSIUS", "tags": {"x": "y"}},
                {**defaults, "sensor": "s3", "seq": "9"}]
    records = read_records(_rest_consumer(urls[1], topic), 3, PROTOBUF_V2)
    assert [r["value"] for r in records] == expected
    assert [r["key"] for r in records] == [{"id": "a"}, {"id": "b"}, None]
    status, read, headers = request("GET", f"{urls[0]}/topics/{topic}/partitions/0/records?offset=0",
                                    accept=PROTOBUF_V2)
    assert status == 200 and headers["Content-Type"].startswith(PROTOBUF_V2), read
    assert [r["value"] for r in read["records"]] == expected

    module = _generated(tmp_path, text, f"rest_{package}")
    deserialize = ProtobufDeserializer(module.Reading, {"use.deprecated.format": False},
                                       schema_registry_client=SchemaRegistryClient({"url": urls[1]}))
    raw = _consume(c, topic, 3)
    got = [deserialize(v, SerializationContext(topic, MessageField.VALUE)) for v in raw]
    assert [(m.sensor, m.seq, m.unit) for m in got] == [("s1", 7, 0), ("s2", 0, module.CELSIUS), ("s3", 9, 0)]


def test_rest_protobuf_errors_are_kafka_rests(c: LocalProcessBackend) -> None:
    """42205 a schema that does not compile, 42203 a value that does not fit the first message (nothing
    written), v3's PROTOBUF type encoding with the registry's schema."""
    urls, topic = _topic(c)
    url = f"{urls[0]}/topics/{topic}"
    status, body, _ = request("POST", url, {"value_schema": 'syntax = "proto3"; message M { int32 a = 1 }',
                                            "records": [{"value": {"a": 1}}]}, content_type=PROTOBUF_V2)
    assert (status, body["error_code"]) == (422, 42205) and body["message"].startswith("Invalid schema"), body
    schema = 'syntax = "proto3";\nmessage M { int32 a = 1; }\n'
    status, body, _ = request("POST", url, {"value_schema": schema, "records": [{"value": {"a": 1}},
                                                                                {"value": {"b": 2}}]},
                              content_type=PROTOBUF_V2)
    assert (status, body["error_code"]) == (422, 42203) and "Protobuf" in body["message"], body
    status, read, _ = request("GET", f"{url}/partitions/0/records?offset=0", accept=PROTOBUF_V2)
    assert status == 200 and read["records"] == [], read

    cluster = request("GET", f"{urls[0]}/v3/clusters")[1]["data"][0]["cluster_id"]
    objects = [{"value": {"type": "PROTOBUF", "schema": schema, "data": {"a": 5}}},
               {"value": {"type": "PROTOBUF", "data": {"nope": 1}}}]
    req = urllib.request.Request(f"{urls[1]}/v3/clusters/{cluster}/topics/{topic}/records", method="POST",
                                 data="\n".join(json.dumps(o) for o in objects).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=SLOW_MACHINE_S) as resp:  # one JSON report per line
        report, refused = [json.loads(line) for line in resp.read().decode().splitlines()]
    assert (report["error_code"], refused["error_code"]) == (200, 400), (report, refused)
    assert report["value"]["type"] == "PROTOBUF" and report["value"]["subject"] == f"{topic}-value", report
    status, read, _ = request("GET", f"{url}/partitions/0/records?offset=0", accept=PROTOBUF_V2)
    assert status == 200 and [r["value"] for r in read["records"]] == [{"a": 5}], read


def test_incompatible_change_is_409_and_serialized_is_the_same_descriptor(c: LocalProcessBackend) -> None:
    """The default BACKWARD level refuses a field whose scalar kind changes (Confluent's
    FIELD_SCALAR_KIND_CHANGED) with 409/40901; adding a field is accepted. ``format=serialized`` answers base64
    that parses as the FileDescriptorProto of the stored text; the same schema registered as that base64 gets
    the same id. References resolve by name; /schemas/types lists PROTOBUF."""
    from google.protobuf import descriptor_pb2

    urls = [c.broker_url(b) for b in c.broker_ids()]
    subject = f"pb-{uuid.uuid4().hex[:8]}-value"
    v1 = 'syntax = "proto3";\npackage inc;\nmessage M {\n  int32 a = 1;\n  string b = 2;\n}\n'
    status, body = sr("POST", f"{urls[0]}/subjects/{subject}/versions", {"schema": v1, "schemaType": "PROTOBUF"})
    assert status == 200, body
    first_id = body["id"]
    status, body = sr("POST", f"{urls[1]}/subjects/{subject}/versions",
                      {"schema": v1.replace("string b", "int64 b"), "schemaType": "PROTOBUF"})
    assert (status, body["error_code"]) == (409, 40901) and "FIELD_SCALAR_KIND_CHANGED" in body["message"], body
    status, body = sr("POST", f"{urls[1]}/compatibility/subjects/{subject}/versions/latest?verbose=true",
                      {"schema": v1.replace("string b", "int64 b"), "schemaType": "PROTOBUF"})
    assert status == 200 and body["is_compatible"] is False and body["messages"], body
    status, body = sr("POST", f"{urls[1]}/subjects/{subject}/versions",
                      {"schema": v1.replace("}\n", "  bool c = 3;\n}\n"), "schemaType": "PROTOBUF"})
    assert status == 200 and body["id"] != first_id, body

    status, stored = sr("GET", f"{urls[1]}/schemas/ids/{first_id}")
    assert status == 200 and stored["schemaType"] == "PROTOBUF", stored
    status, serialized = sr("GET", f"{urls[1]}/schemas/ids/{first_id}?format=serialized")
    assert status == 200, serialized
    fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized["schema"]))
    assert fdp.package == "inc" and [f.name for f in fdp.message_type[0].field] == ["a", "b"]
    status, version = sr("GET", f"{urls[0]}/subjects/{subject}/versions/1?format=serialized")
    assert status == 200 and version["schema"] == serialized["schema"], version
    with urllib.request.urlopen(f"{urls[0]}/subjects/{subject}/versions/1/schema?format=serialized",
                                timeout=SLOW_MACHINE_S) as resp:  # the schema itself: base64, not JSON
        assert resp.read().decode() == serialized["schema"]
    other = f"pb-{uuid.uuid4().hex[:8]}-value"  # the base64 form is the same schema: the same id
    assert sr("POST", f"{urls[0]}/subjects/{other}/versions",
              {"schema": serialized["schema"], "schemaType": "PROTOBUF"}) == (200, {"id": first_id})

    dep = f"pb-{uuid.uuid4().hex[:8]}"
    money = 'syntax = "proto3";\npackage money;\nmessage Money { int64 cents = 1; }\n'
    assert sr("POST", f"{urls[0]}/subjects/{dep}/versions", {"schema": money, "schemaType": "PROTOBUF"})[0] == 200
    user = 'syntax = "proto3";\nimport "money.proto";\nmessage Pay { money.Money amount = 1; }\n'
    refs = [{"name": "money.proto", "subject": dep, "version": 1}]
    status, body = sr("POST", f"{urls[1]}/subjects/{dep}-pay/versions",
                      {"schema": user, "schemaType": "PROTOBUF", "references": refs})
    assert status == 200, body
    status, body = sr("POST", f"{urls[1]}/subjects/{dep}-pay2/versions", {"schema": user, "schemaType": "PROTOBUF"})
    assert (status, body["error_code"]) == (422, 42201) and "money.proto" in body["message"], body
    assert sr("GET", f"{urls[0]}/schemas/types") == (200, ["AVRO", "JSON", "PROTOBUF"])
