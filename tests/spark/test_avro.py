"""Issue 26 point 5: the connector reads Confluent-framed Avro into typed columns and writes it with
registration, against the cluster's own Schema Registry (odradek_spark/avro.py).

What a user does: produce Avro through the REST Proxy (``value_schema``, registered as ``<topic>-value``), read
it in Spark with ``value.format=avro`` as a struct column; write a DataFrame's struct column as Avro, which the
REST Proxy renders back as JSON; and evolve the subject while a streaming query runs: a compatible version is
read in the query's types, an incompatible one stops the query with a message naming the offset and both
schemas.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from tests.harness.cluster import LocalProcessBackend
from tests.harness.http import request
from tests.spark.conftest import bootstrap, new_topic

pytestmark = pytest.mark.spark

AVRO_V2 = "application/vnd.kafka.avro.v2+json"
SR = "application/vnd.schemaregistry.v1+json"
ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "item", "type": "string"},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "lines", "type": {"type": "array", "items": "int"}},
]}
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "channel", "type": "string", "default": "web"}]}
ORDER_BAD = {**ORDER_V1, "fields": [{"name": "id", "type": "string"}, *ORDER_V1["fields"][1:]]}


def produce_avro(c: LocalProcessBackend, topic: str, schema: dict[str, Any], values: list[dict[str, Any]]) -> int:
    """A REST Proxy v2 Avro produce (registers ``schema`` under ``<topic>-value``); the schema id it answered."""
    url = c.broker_url(c.broker_ids()[0])
    status, body, _ = request("POST", f"{url}/topics/{topic}", {
        "value_schema": json.dumps(schema), "records": [{"value": v, "partition": 0} for v in values]},
        content_type=AVRO_V2)
    assert status == 200 and all(o.get("error_code") is None for o in body["offsets"]), body
    return int(body["value_schema_id"])


def orders(first: int, n: int) -> list[dict[str, Any]]:
    return [{"id": i, "item": f"item-{i}", "note": {"string": f"n{i}"} if i % 2 else None, "lines": [i, i + 1]}
            for i in range(first, first + n)]


def as_tuples(rows: list[Any]) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["item"], r["note"], list(r["lines"])) for r in rows)


def test_avro_produced_over_rest_reads_as_a_typed_struct_column(spark: Any, cluster: LocalProcessBackend) -> None:
    topic = new_topic(cluster, partitions=1, rf=3, prefix="avro-read")
    produce_avro(cluster, topic, ORDER_V1, orders(0, 30))
    df = (spark.read.format("odradek").option("bootstrap.servers", bootstrap(cluster)).option("subscribe", topic)
          .option("value.format", "avro").load())
    assert df.schema["value"].dataType.simpleString() == \
        "struct<id:bigint,item:string,note:string,lines:array<int>>"
    assert df.schema["key"].dataType.simpleString() == "binary"  # only the value is Avro here
    rows = [r["value"] for r in df.select("value").collect()]
    assert as_tuples(rows) == sorted((i, f"item-{i}", f"n{i}" if i % 2 else None, [i, i + 1]) for i in range(30))
    assert df.selectExpr("sum(value.id)").first()[0] == sum(range(30))  # the fields are columns Spark computes on


def test_a_struct_column_written_as_avro_is_registered_and_read_by_the_rest_proxy(
        spark: Any, cluster: LocalProcessBackend) -> None:
    topic = new_topic(cluster, partitions=1, rf=3, prefix="avro-write")
    url = cluster.broker_url(cluster.broker_ids()[0])
    df = spark.createDataFrame([(i, f"name-{i}", [f"t{i}"]) for i in range(20)],
                               "id long, name string, tags array<string>")
    (df.selectExpr("struct(id, name, tags) AS value").write.format("odradek")
     .option("bootstrap.servers", bootstrap(cluster)).option("topic", topic).option("value.format", "avro")
     .mode("append").save())

    status, latest, _ = request("GET", f"{url}/subjects/{topic}-value/versions/latest", accept=SR)
    assert status == 200 and latest["version"] == 1, latest
    schema = json.loads(latest["schema"])
    assert schema["type"] == "record" and [f["name"] for f in schema["fields"]] == ["id", "name", "tags"]

    status, read, _ = request("GET", f"{url}/topics/{topic}/partitions/0/records?offset=0", accept=AVRO_V2)
    assert status == 200, read
    # Avro's JSON encoding: Spark's nullable fields are unions with null, so each value is tagged with its branch.
    got = sorted((r["value"]["id"]["long"], r["value"]["name"]["string"], r["value"]["tags"]["array"])
                 for r in read["records"])
    assert got == [(i, f"name-{i}", [{"string": f"t{i}"}]) for i in range(20)]

    back = (spark.read.format("odradek").option("bootstrap.servers", bootstrap(cluster)).option("subscribe", topic)
            .option("value.format", "avro").load().selectExpr("value.id", "value.name", "value.tags").collect())
    assert sorted((r["id"], r["name"], list(r["tags"])) for r in back) == \
        [(i, f"name-{i}", [f"t{i}"]) for i in range(20)]


def test_a_streaming_query_reads_a_compatible_new_version_in_its_types_and_stops_at_an_incompatible_one(
        spark: Any, cluster: LocalProcessBackend) -> None:
    topic = new_topic(cluster, partitions=1, rf=3, prefix="avro-evolve")
    url = cluster.broker_url(cluster.broker_ids()[0])
    produce_avro(cluster, topic, ORDER_V1, orders(0, 10))
    name = f"avro_{uuid.uuid4().hex[:8]}"
    query = (spark.readStream.format("odradek").option("bootstrap.servers", bootstrap(cluster))
             .option("subscribe", topic).option("startingOffsets", "earliest").option("value.format", "avro").load()
             .selectExpr("offset", "value.*").writeStream.format("memory").queryName(name).start())
    try:
        query.processAllAvailable()
        produce_avro(cluster, topic, ORDER_V2, [{**o, "channel": "app"} for o in orders(10, 10)])  # version 2
        query.processAllAvailable()
        rows = spark.sql(f"SELECT * FROM {name}").collect()
        assert spark.table(name).columns == ["offset", "id", "item", "note", "lines"]  # still version 1's
        assert sorted(r["id"] for r in rows) == list(range(20))

        status, body, _ = request("PUT", f"{url}/config/{topic}-value", {"compatibility": "NONE"}, content_type=SR)
        assert status == 200, body
        bad_id = produce_avro(cluster, topic, ORDER_BAD, [{**o, "id": "x"} for o in orders(20, 1)])
        with pytest.raises(Exception, match=rf"offset 20 \(schema id {bad_id}\) cannot be read with the query's "
                                            rf"value schema \(subject {topic}-value version 1"):
            query.processAllAvailable()
    finally:
        query.stop()

    permissive = (spark.read.format("odradek").option("bootstrap.servers", bootstrap(cluster))
                  .option("subscribe", topic).option("value.format", "avro").option("value.schema.version", "1")
                  .option("mode", "PERMISSIVE").load().selectExpr("offset", "value.id").collect())
    assert sorted((r["offset"], r["id"]) for r in permissive) == [*((i, i) for i in range(20)), (20, None)]
