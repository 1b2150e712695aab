"""The connector's Avro columns without a cluster (odradek_spark/avro.py): Avro -> Spark types as Spark's
SchemaConverters map them, Spark types -> the Avro Spark's ``to_avro`` writes, Confluent framing both ways, and
schema resolution of a record written under another version of the subject."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import uuid

import fastavro
import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from odradek_spark.avro import (
    AvroColumn,
    AvroSchemaError,
    FramedAvroDecoder,
    FramedAvroEncoder,
    avro_schema_for,
    frame,
    spark_type,
)
from odradek_spark.options import OptionError, parse_sink_options, parse_source_options

USER_V1 = {"type": "record", "name": "User", "namespace": "com.example", "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "email", "type": ["null", "string"], "default": None},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "scores", "type": {"type": "map", "values": "double"}},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
    {"name": "born", "type": {"type": "int", "logicalType": "date"}},
    {"name": "seen", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "balance", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "n", "type": ["int", "long"]},
]}
# v2 adds a field with a default (BACKWARD compatible): v1 readers skip it, v2 readers of v1 data take the default.
USER_V2 = {**USER_V1, "fields": [*USER_V1["fields"], {"name": "country", "type": "string", "default": "NL"}]}


def parsed(schema: object) -> object:
    return fastavro.parse_schema(schema, _write_hint=False)


def column(schema: object, schema_id: int = 1, mode: str = "FAILFAST") -> AvroColumn:
    return AvroColumn("value", "users-value", 1, schema_id, json.dumps(schema), mode)


def encoded(schema: object, schema_id: int, datum: dict[str, object]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed(schema), datum)
    return frame(schema_id, out.getvalue())


def user(i: int, **extra: object) -> dict[str, object]:
    return {"id": i, "name": f"u{i}", "email": None if i % 2 else f"u{i}@x", "tags": ["a", "b"][: i % 3],
            "scores": {"m": 1.5 * i}, "kind": "AB"[i % 2], "born": datetime.date(2000, 1, 1 + i),
            "seen": datetime.datetime(2026, 1, 1, 0, 0, i, tzinfo=datetime.UTC),
            "balance": decimal.Decimal(f"{i}.25"), "ref": uuid.UUID(int=i), "n": i, **extra}


def test_avro_types_map_to_spark_types_as_spark_maps_them() -> None:
    dt, nullable = spark_type(parsed(USER_V1))
    assert not nullable
    assert dt == StructType([
        StructField("id", LongType(), False), StructField("name", StringType(), False),
        StructField("email", StringType(), True), StructField("tags", ArrayType(StringType(), False), False),
        StructField("scores", MapType(StringType(), DoubleType(), False), False),
        StructField("kind", StringType(), False), StructField("born", DateType(), False),
        StructField("seen", TimestampType(), False), StructField("balance", DecimalType(9, 2), False),
        StructField("ref", StringType(), False), StructField("n", LongType(), False),
    ])


@pytest.mark.parametrize("schema, why", [
    ({"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}, "recursive"),
    (["string", "long"], "union"),
])
def test_avro_without_a_spark_type_is_refused_with_its_reason(schema: object, why: str) -> None:
    with pytest.raises(AvroSchemaError, match=why):
        spark_type(parsed(schema))


def test_decoding_gives_arrow_values_of_the_reader_type_and_resolves_a_later_writer_version() -> None:
    decoder = FramedAvroDecoder(column(USER_V1, 1), {1: json.dumps(USER_V1), 2: json.dumps(USER_V2)}.__getitem__)
    values = [encoded(USER_V1, 1, user(1)), None, encoded(USER_V2, 2, user(2, country="DE"))]
    got = decoder.decode(values, pa.array([10, 11, 12]), "users-0")
    assert got.type == decoder.arrow_type
    rows = got.to_pylist()
    assert rows[1] is None
    assert rows[0]["ref"] == str(uuid.UUID(int=1)) and rows[0]["email"] is None
    assert dict(rows[0]["scores"]) == {"m": 1.5} and rows[0]["balance"] == decimal.Decimal("1.25")
    assert rows[2]["name"] == "u2" and "country" not in rows[2]  # the v1 reader drops v2's new field
    assert rows[2]["seen"] == datetime.datetime(2026, 1, 1, 0, 0, 2, tzinfo=datetime.UTC)


def test_a_record_the_reader_cannot_resolve_fails_naming_its_offset_or_reads_as_null_when_permissive() -> None:
    other = {"type": "record", "name": "Other", "fields": [{"name": "x", "type": "int"}]}
    schemas = {1: json.dumps(USER_V1), 7: json.dumps(other)}
    bad = [encoded(other, 7, {"x": 1}), b"not framed"]
    for value in bad:
        with pytest.raises(ValueError, match=r"users-0 offset 42 .*subject users-value version 1"):
            FramedAvroDecoder(column(USER_V1), schemas.__getitem__).decode([value], pa.array([42]), "users-0")
    permissive = FramedAvroDecoder(column(USER_V1, mode="PERMISSIVE"), schemas.__getitem__)
    assert permissive.decode(bad, pa.array([1, 2]), "users-0").to_pylist() == [None, None]


def test_spark_types_are_written_as_spark_to_avro_writes_them_and_read_back() -> None:
    dt = StructType([StructField("id", LongType(), False), StructField("name", StringType(), True),
                     StructField("tags", ArrayType(StringType(), True), True),
                     StructField("attrs", MapType(StringType(), IntegerType(), True), True),
                     StructField("amount", DecimalType(10, 2), True), StructField("raw", BinaryType(), True)])
    schema = avro_schema_for(dt)
    assert schema["type"] == "record" and schema["name"] == "topLevelRecord"
    assert schema["fields"][1] == {"name": "name", "type": ["string", "null"]}
    col = column(schema, 5)
    rows = [{"id": 1, "name": None, "tags": ["x", None], "attrs": [("a", 1)], "amount": decimal.Decimal("3.10"),
             "raw": b"\x00"}, None]
    framed = FramedAvroEncoder(col, dt).encode(rows)
    assert framed[1] is None  # a null value is a tombstone, not an Avro null
    assert framed[0] is not None and framed[0][:5] == b"\x00\x00\x00\x00\x05"
    back = FramedAvroDecoder(col, {5: json.dumps(schema)}.__getitem__).decode(framed, pa.array([0, 1]), "t-0")
    first = back.to_pylist()[0]
    assert first["tags"] == ["x", None] and dict(first["attrs"]) == {"a": 1}
    assert first["amount"] == decimal.Decimal("3.10")


def test_format_options_are_checked_where_the_query_is_defined() -> None:
    base = {"bootstrap.servers": "http://127.0.0.1:1"}
    src = parse_source_options({**base, "subscribe": "users", "value.format": "avro"}, streaming=True)
    assert [(f.column, f.subject, f.version) for f in src.formats] == [("value", "users-value", None)]
    assert src.registry == ("http://127.0.0.1:1",)  # the cluster's own registry
    pinned = parse_source_options({**base, "subscribe": "a,b", "value.format": "avro", "value.subject": "s",
                                   "value.schema.version": "3", "schema.registry.url": "http://sr:8081/"},
                                  streaming=False)
    assert pinned.formats[0].subject == "s" and pinned.formats[0].version == 3 and pinned.registry == ("http://sr:8081",)
    with pytest.raises(OptionError, match="several topics"):
        parse_source_options({**base, "subscribe": "a,b", "value.format": "avro"}, streaming=True)
    with pytest.raises(OptionError, match="binary or avro"):
        parse_source_options({**base, "subscribe": "a", "value.format": "thrift"}, streaming=True)
    with pytest.raises(OptionError, match=r"needs value\.format=avro"):
        parse_source_options({**base, "subscribe": "a", "value.subject": "s"}, streaming=True)
    with pytest.raises(OptionError, match=r"'value\.schema\.version' must be an integer"):
        parse_source_options({**base, "subscribe": "a", "value.format": "avro", "value.schema.version": "x"},
                             streaming=True)
    with pytest.raises(OptionError, match="FAILFAST or PERMISSIVE"):
        parse_source_options({**base, "subscribe": "a", "value.format": "avro", "mode": "drop"}, streaming=True)
    sink = parse_sink_options({**base, "topic": "out", "value.format": "avro", "key.format": "avro"})
    assert [(f.column, f.subject) for f in sink.formats] == [("key", "out-key"), ("value", "out-value")]
    with pytest.raises(OptionError, match="is for reading"):
        parse_sink_options({**base, "topic": "out", "value.format": "avro", "value.schema.version": "1"})
    with pytest.raises(OptionError, match="no topic option"):
        parse_sink_options({**base, "value.format": "avro"})
