"""Issue 26: the connector reads Confluent-framed JSON Schema and Protobuf records into typed columns
(odradek_spark/json_schema.py, odradek_spark/protobuf.py), against the cluster's own Schema Registry.

What a user does: produce through the REST Proxy with a schema (``value_schema``, registered as
``<topic>-value``), read the topic in Spark with ``value.format=json_schema`` or ``protobuf`` as a struct column;
a record that does not fit (written raw, bypassing the REST Proxy's checks) stops a FAILFAST read naming its
offset and reads as null under PERMISSIVE. A struct column written with ``value.format=json_schema`` is
registered as a JSON schema and read back; one written with ``value.format=protobuf`` is registered as the
struct's own proto3 schema (or written with the subject's schema when it fits) and reads back through the
connector, the REST Proxy and confluent-kafka's ProtobufDeserializer with the same values.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from typing import Any

import pytest

from tests.harness.cluster import LocalProcessBackend
from tests.harness.http import request
from tests.spark.conftest import bootstrap, new_topic

pytestmark = pytest.mark.spark

JSONSCHEMA_V2 = "application/vnd.kafka.jsonschema.v2+json"
PROTOBUF_V2 = "application/vnd.kafka.protobuf.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
SR = "application/vnd.schemaregistry.v1+json"

ORDER_JSON = {"type": "object", "properties": {
    "id": {"type": "integer"},
    "item": {"type": "string"},
    "price": {"type": "number"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "ship": {"$ref": "#/definitions/Address"},
    "day": {"type": "string", "format": "date"},
}, "required": ["id"], "definitions": {"Address": {"type": "object", "properties": {"city": {"type": "string"}}}}}

ORDER_PROTO = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  enum Status { NEW = 0; DONE = 1; }
  int64 id = 1;
  string item = 2;
  Status status = 3;
  repeated string tags = 4;
  map<string, int32> counts = 5;
  google.protobuf.Timestamp at = 6;
}
"""


def produce(c: LocalProcessBackend, topic: str, content_type: str, body: dict[str, Any]) -> dict[str, Any]:
    status, answer, _ = request("POST", f"{c.broker_url(c.broker_ids()[0])}/topics/{topic}", body,
                                content_type=content_type)
    assert status == 200 and all(o.get("error_code") is None for o in answer["offsets"]), answer
    return dict(answer)


def produce_raw(c: LocalProcessBackend, topic: str, value: bytes) -> None:
    produce(c, topic, BINARY_V2, {"records": [{"value": base64.b64encode(value).decode(), "partition": 0}]})


def read(spark: Any, c: LocalProcessBackend, topic: str, fmt: str, **options: str) -> Any:
    reader = (spark.read.format("odradek").option("bootstrap.servers", bootstrap(c)).option("subscribe", topic)
              .option("value.format", fmt))
    for k, v in options.items():
        reader = reader.option(k.replace("_", "."), v)
    return reader.load()


def test_json_schema_produced_over_rest_reads_as_a_typed_struct_column(spark: Any,
                                                                       cluster: LocalProcessBackend) -> None:
    topic = new_topic(cluster, partitions=1, rf=3, prefix="jsonschema-read")
    orders = [{"id": i, "item": f"item-{i}", "price": i / 2, "tags": [f"t{i}"], "ship": {"city": f"c{i}"},
               "day": f"2024-01-{i + 1:02d}"} for i in range(20)]
    answer = produce(cluster, topic, JSONSCHEMA_V2, {"value_schema": json.dumps(ORDER_JSON),
                                                     "records": [{"value": o, "partition": 0} for o in orders]})
    df = read(spark, cluster, topic, "json_schema")
    assert df.schema["value"].dataType.simpleString() == \
        "struct<id:bigint,item:string,price:double,tags:array<string>,ship:struct<city:string>,day:date>"
    rows = [r["value"] for r in df.select("value").collect()]
    assert sorted((r["id"], r["item"], r["price"], list(r["tags"]), r["ship"]["city"], r["day"]) for r in rows) == \
        [(i, f"item-{i}", i / 2, [f"t{i}"], f"c{i}", datetime.date(2024, 1, i + 1)) for i in range(20)]
    assert df.selectExpr("sum(value.id)").first()[0] == sum(range(20))

    # A record framed with the schema's id whose JSON does not fit (the REST Proxy would have refused it).
    produce_raw(cluster, topic, b"\x00" + int(answer["value_schema_id"]).to_bytes(4, "big") + b'{"id": "twenty"}')
    with pytest.raises(Exception, match=rf"offset 20 \(schema id {answer['value_schema_id']}\) does not fit the "
                                        rf"query's value type \(JSON Schema subject {topic}-value version 1"):
        read(spark, cluster, topic, "json_schema").select("value.id").collect()
    permissive = read(spark, cluster, topic, "json_schema", mode="PERMISSIVE").selectExpr("offset", "value.id")
    assert sorted((r["offset"], r["id"]) for r in permissive.collect()) == [*((i, i) for i in range(20)), (20, None)]


def test_a_struct_column_written_as_json_schema_is_registered_and_read_back(spark: Any,
                                                                            cluster: LocalProcessBackend) -> None:
    topic = new_topic(cluster, partitions=1, rf=3, prefix="jsonschema-write")
    url = cluster.broker_url(cluster.broker_ids()[0])
    df = spark.createDataFrame([(i, f"name-{i}", [f"t{i}"]) for i in range(10)],
                               "id long, name string, tags array<string>")
    (df.selectExpr("struct(id, name, tags) AS value").write.format("odradek")
     .option("bootstrap.servers", bootstrap(cluster)).option("topic", topic).option("value.format", "json_schema")
     .mode("append").save())
    status, latest, _ = request("GET", f"{url}/subjects/{topic}-value/versions/latest", accept=SR)
    assert status == 200 and latest["schemaType"] == "JSON", latest
    assert list(json.loads(latest["schema"])["properties"]) == ["id", "name", "tags"]
    status, got, _ = request("GET", f"{url}/topics/{topic}/partitions/0/records?offset=0", accept=JSONSCHEMA_V2)
    assert status == 200 and sorted(r["value"]["id"] for r in got["records"]) == list(range(10)), got
    back = read(spark, cluster, topic, "json_schema").selectExpr("value.id", "value.name", "value.tags").collect()
    assert sorted((r["id"], r["name"], list(r["tags"])) for r in back) == \
        [(i, f"name-{i}", [f"t{i}"]) for i in range(10)]


def test_protobuf_produced_over_rest_reads_as_a_typed_struct_column(spark: Any,
                                                                    cluster: LocalProcessBackend) -> None:
    topic = new_topic(cluster, partitions=1, rf=3, prefix="protobuf-read")
    orders = [{"id": i, "item": f"item-{i}", "status": "DONE" if i % 2 else "NEW", "tags": [f"t{i}"],
               "counts": {"a": i}, "at": f"2024-01-01T00:00:{i:02d}Z"} for i in range(20)]
    answer = produce(cluster, topic, PROTOBUF_V2, {"value_schema": ORDER_PROTO,
                                                   "records": [{"value": o, "partition": 0} for o in orders]})
    df = read(spark, cluster, topic, "protobuf")
    assert df.schema["value"].dataType.simpleString() == \
        "struct<id:bigint,item:string,status:string,tags:array<string>,counts:map<string,int>,at:timestamp>"
    rows = df.selectExpr("value.id", "value.item", "value.status", "value.tags", "value.counts['a'] AS a",
                         "unix_timestamp(value.at) AS at").collect()
    base = int(datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC).timestamp())
    assert sorted((r["id"], r["item"], r["status"], list(r["tags"]), r["a"], r["at"]) for r in rows) == \
        [(i, f"item-{i}", "DONE" if i % 2 else "NEW", [f"t{i}"], i, base + i) for i in range(20)]

    # Framed with the schema's id, but the message bytes are cut short.
    schema_id = int(answer["value_schema_id"])
    produce_raw(cluster, topic, b"\x00" + schema_id.to_bytes(4, "big") + b"\x00\x12\x09trunc")
    with pytest.raises(Exception, match=rf"offset 20 \(schema id {schema_id}\) cannot be read as the query's value "
                                        rf"message shop.Order \(Protobuf subject {topic}-value version 1"):
        read(spark, cluster, topic, "protobuf").select("value.id").collect()
    permissive = read(spark, cluster, topic, "protobuf", mode="PERMISSIVE").selectExpr("offset", "value.id")
    assert sorted((r["offset"], r["id"]) for r in permissive.collect()) == [*((i, i) for i in range(20)), (20, None)]


def write(df: Any, c: LocalProcessBackend, topic: str, fmt: str) -> None:
    (df.write.format("odradek").option("bootstrap.servers", bootstrap(c)).option("topic", topic)
     .option("value.format", fmt).mode("append").save())


def message_class(url: str, subject: str) -> Any:
    """The registered version's message class, built as a Confluent client builds it: from the descriptor the
    registry answers with ``format=serialized`` (its imports: well-known types only, here)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

    status, latest, _ = request("GET", f"{url}/subjects/{subject}/versions/latest?format=serialized", accept=SR)
    assert status == 200, latest
    fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(latest["schema"]))
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.AddSerializedFile(fdp.SerializeToString())
    name = f"{fdp.package}.{fdp.message_type[0].name}" if fdp.package else fdp.message_type[0].name
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def test_a_struct_column_written_as_protobuf_is_registered_and_read_back_by_every_reader(
        spark: Any, cluster: LocalProcessBackend) -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = new_topic(cluster, partitions=1, rf=3, prefix="protobuf-write")
    url = cluster.broker_url(cluster.broker_ids()[0])
    at = datetime.datetime(2024, 3, 1, 12, 0, tzinfo=datetime.UTC)
    rows = [(i, f"name-{i}" if i % 3 else None, [f"t{i}", "x"], {"a": i}, at + datetime.timedelta(seconds=i),
             (f"c{i}",), decimal.Decimal(2**64 - 1 - i)) for i in range(10)]
    df = spark.createDataFrame(rows, "id long, name string, tags array<string>, counts map<string, int>, "
                                     "at timestamp, ship struct<city: string>, big decimal(20, 0)")
    write(df.selectExpr("struct(*) AS value"), cluster, topic, "protobuf")

    status, latest, _ = request("GET", f"{url}/subjects/{topic}-value/versions/latest", accept=SR)
    assert status == 200 and latest["schemaType"] == "PROTOBUF" and latest["version"] == 1, latest
    assert "message TopLevelRecord {" in latest["schema"] and "optional string name = 2;" in latest["schema"]

    back = read(spark, cluster, topic, "protobuf")
    assert back.schema["value"].dataType.simpleString() == (
        "struct<id:bigint,name:string,tags:array<string>,counts:map<string,int>,at:timestamp,"
        "ship:struct<city:string>,big:decimal(20,0)>")
    got = [r["value"] for r in back.select("value").collect()]
    assert sorted((v["id"], v["name"], list(v["tags"]), dict(v["counts"]), v["at"].astimezone(datetime.UTC),
                   (v["ship"]["city"],), v["big"]) for v in got) == \
        [(i, n, t, c, a, s, b) for i, n, t, c, a, s, b in rows]

    # The cluster's REST Proxy decodes the records with the registered schema (int64 as JSON strings).
    status, answer, _ = request("GET", f"{url}/topics/{topic}/partitions/0/records?offset=0", accept=PROTOBUF_V2)
    assert status == 200 and sorted(int(r["value"]["id"]) for r in answer["records"]) == list(range(10)), answer

    # confluent-kafka's deserializer, given the message class of the registered descriptor.
    deserialize = ProtobufDeserializer(message_class(url, f"{topic}-value"), {"use.deprecated.format": False})
    raw = spark.read.format("odradek").option("bootstrap.servers", bootstrap(cluster)).option("subscribe", topic) \
        .load().select("value").collect()
    messages = [deserialize(bytes(r["value"]), SerializationContext(topic, MessageField.VALUE)) for r in raw]
    assert sorted((m.id, m.name if m.HasField("name") else None, m.ship.city, m.big) for m in messages) == \
        [(i, n, s[0], b) for i, n, _, _, _, s, b in rows]


def test_a_struct_that_fits_the_subjects_protobuf_schema_is_written_with_it(spark: Any,
                                                                             cluster: LocalProcessBackend) -> None:
    topic = new_topic(cluster, partitions=1, rf=3, prefix="protobuf-fit")
    url = cluster.broker_url(cluster.broker_ids()[0])
    first = {"id": 100, "item": "rest", "status": "NEW", "tags": [], "counts": {}, "at": "2024-01-01T00:00:00Z"}
    produce(cluster, topic, PROTOBUF_V2, {"value_schema": ORDER_PROTO, "records": [{"value": first, "partition": 0}]})
    df = spark.createDataFrame([(i, f"item-{i}", "DONE" if i % 2 else "NEW", {"a": i}) for i in range(6)],
                               "id long, item string, status string, counts map<string, int>")
    write(df.selectExpr("struct(*) AS value"), cluster, topic, "protobuf")
    status, versions, _ = request("GET", f"{url}/subjects/{topic}-value/versions", accept=SR)
    assert status == 200 and versions == [1], versions  # written with the REST producer's schema, enum and all

    rows = read(spark, cluster, topic, "protobuf").selectExpr("value.id", "value.item", "value.status",
                                                             "value.counts['a'] AS a").collect()
    assert sorted((r["id"], r["item"], r["status"], r["a"]) for r in rows) == \
        [*((i, f"item-{i}", "DONE" if i % 2 else "NEW", i) for i in range(6)), (100, "rest", "NEW", None)]

    # A status the enum does not have fails the write, naming the field and the enum's values.
    lost = spark.createDataFrame([(7, "LOST")], "id long, status string")
    with pytest.raises(Exception, match=r"value\.status: 'LOST' is not a value of enum shop\.Order\.Status "
                                        r"\(NEW, DONE\)"):
        write(lost.selectExpr("struct(*) AS value"), cluster, topic, "protobuf")
