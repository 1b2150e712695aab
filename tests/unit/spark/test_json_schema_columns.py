"""The connector's JSON Schema columns without a cluster (odradek_spark/json_schema.py): JSON Schema -> Spark types,
decoding Confluent-framed JSON into Arrow values of those types (FAILFAST naming the offset, PERMISSIVE giving
null), the JSON Schema the sink registers for a Spark type and its framed encoding, and the options."""

from __future__ import annotations

import datetime
import json
from typing import Any

import orjson
import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DateType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from odradek_spark.avro import frame
from odradek_spark.json_schema import (
    FramedJsonDecoder,
    JsonSchemaColumn,
    JsonSchemaError,
    json_schema_for,
    spark_type,
)
from odradek_spark.options import OptionError, parse_sink_options, parse_source_options

ORDER = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "item": {"type": "string"},
        "price": {"type": "number"},
        "paid": {"type": "boolean"},
        "note": {"type": ["string", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "qty": {"type": "object", "additionalProperties": {"type": "integer"}},
        "day": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "date-time"},
        "ship": {"$ref": "#/definitions/Address"},
        "amount": {"oneOf": [{"type": "integer"}, {"type": "number"}]},
        "any": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        "status": {"enum": ["NEW", "DONE"]},
    },
    "required": ["id", "item"],
    "definitions": {"Address": {"type": "object", "properties": {"city": {"type": "string"},
                                                                  "zip": {"type": ["integer", "null"]}}}},
}

ORDER_TYPE = StructType([
    StructField("id", LongType()), StructField("item", StringType()), StructField("price", DoubleType()),
    StructField("paid", BooleanType()), StructField("note", StringType()),
    StructField("tags", ArrayType(StringType())), StructField("qty", MapType(StringType(), LongType())),
    StructField("day", DateType()), StructField("at", TimestampType()),
    StructField("ship", StructType([StructField("city", StringType()), StructField("zip", LongType())])),
    StructField("amount", DoubleType()), StructField("any", StringType()), StructField("status", StringType()),
])


def test_json_schema_maps_to_spark_types_as_from_json_reads_them() -> None:
    dt, nullable = spark_type(ORDER)
    assert dt == ORDER_TYPE and not nullable
    assert all(f.nullable for f in dt.fields)  # required is not checked: every field may be null, as from_json
    assert spark_type({"type": ["integer", "null"]}) == (LongType(), True)
    assert spark_type({"oneOf": [{"type": "null"}, {"type": "string"}]}) == (StringType(), True)
    # A union of objects is one struct of all their properties.
    merged, _ = spark_type({"oneOf": [{"type": "object", "properties": {"a": {"type": "integer"}}},
                                      {"type": "object", "properties": {"b": {"type": "string"}}}]})
    assert merged == StructType([StructField("a", LongType()), StructField("b", StringType())])
    assert spark_type({"type": "array", "items": {"$ref": "#/$defs/n"}, "$defs": {"n": {"type": "number"}}}) == \
        (ArrayType(DoubleType()), False)


@pytest.mark.parametrize(("schema", "why"), [
    ({}, "accepts any value"),
    ({"type": "object"}, "without properties"),
    ({"type": "array", "items": [{"type": "string"}]}, "tuples"),
    ({"allOf": [{"type": "string"}]}, "allOf"),
    ({"$ref": "other.json#/x"}, "neither this one nor one of its references"),
    ({"$ref": "#/definitions/missing"}, "names nothing"),
    ({"type": "object", "properties": {"next": {"$ref": "#"}}}, "recursive"),
    ({"type": "null"}, "no Spark type"),
])
def test_schemas_without_a_spark_type_are_refused(schema: dict[str, Any], why: str) -> None:
    with pytest.raises(JsonSchemaError, match=why):
        spark_type(schema)


def column(mode: str = "FAILFAST", schema: Any = ORDER) -> JsonSchemaColumn:
    return JsonSchemaColumn("value", "orders-value", 1, 7, json.dumps(schema), mode)


GOOD = {"id": 1, "item": "pen", "price": 2, "paid": True, "note": None, "tags": ["a", "b"], "qty": {"x": 3},
        "day": "2024-02-29", "at": "2024-02-29T10:00:00Z", "ship": {"city": "Oslo"}, "amount": 5,
        "any": {"k": [1]}, "status": "NEW", "extra": "ignored"}


def decode(mode: str, values: list[bytes | None], schema: Any = ORDER) -> pa.Array:
    decoder = FramedJsonDecoder(column(mode, schema))
    return decoder.decode(values, pa.array(range(40, 40 + len(values)), pa.int64()), "orders-0")


def test_framed_json_decodes_into_arrow_values_of_the_reader_type() -> None:
    later = frame(9, b'{"id": 2, "at": "2024-02-29t10:00:00.5+01:00"}')  # RFC 3339 allows lower case
    got = decode("FAILFAST", [frame(7, orjson.dumps(GOOD)), None, later]).to_pylist()
    first = got[0]
    assert first["id"] == 1 and first["item"] == "pen" and first["price"] == 2.0 and first["paid"] is True
    assert first["note"] is None and first["tags"] == ["a", "b"] and first["qty"] == [("x", 3)]
    assert first["day"] == datetime.date(2024, 2, 29)
    assert first["at"] == datetime.datetime(2024, 2, 29, 10, tzinfo=datetime.UTC)
    assert first["ship"] == {"city": "Oslo", "zip": None}  # a missing property reads as null
    assert first["amount"] == 5.0 and first["any"] == '{"k":[1]}' and first["status"] == "NEW"
    assert got[1] is None  # a tombstone
    assert got[2]["id"] == 2 and got[2]["item"] is None  # another schema id: read if it fits
    assert got[2]["at"] == datetime.datetime(2024, 2, 29, 9, 0, 0, 500000, tzinfo=datetime.UTC)


@pytest.mark.parametrize(("payload", "why"), [
    (frame(7, b'{"id": "one"}'), r'"one" is not a long'),
    (frame(7, b'{"id": 1, "tags": "a"}'), "is not an array"),
    (frame(7, b'{"ship": {"zip": 1.5}}'), "1.5 is not a long"),
    (frame(7, b'{"day": "29/02/2024"}'), "is not a date"),
    (frame(7, b'{"id": 1'), "unexpected|EOF|Input"),
    (b'{"id": 1}', "not in Confluent's wire format"),
    (frame(7, b'[1, 2]'), "is not an object"),
])
def test_a_record_that_does_not_fit_fails_naming_its_offset_or_reads_as_null(payload: bytes, why: str) -> None:
    good = frame(7, orjson.dumps({"id": 3}))
    with pytest.raises(ValueError, match=rf"value at orders-0 offset 41 .*subject orders-value version 1.*({why})"):
        decode("FAILFAST", [good, payload])
    got = decode("PERMISSIVE", [good, payload]).to_pylist()
    assert got[0]["id"] == 3 and got[1] is None


def test_the_sink_registers_the_json_schema_of_the_column_type_and_writes_framed_json() -> None:
    dt = StructType([StructField("id", LongType(), False), StructField("name", StringType()),
                     StructField("tags", ArrayType(StringType(), False)),
                     StructField("m", MapType(StringType(), DoubleType()))])
    schema = json_schema_for(dt)
    assert schema == {"type": "object", "properties": {
        "id": {"type": "integer"},
        "name": {"oneOf": [{"type": "null"}, {"type": "string"}]},
        "tags": {"oneOf": [{"type": "null"}, {"type": "array", "items": {"type": "string"}}]},
        "m": {"oneOf": [{"type": "null"}, {"type": "object", "additionalProperties": {
            "oneOf": [{"type": "null"}, {"type": "number"}]}}]}}}
    assert spark_type(schema)[0].simpleString() == dt.simpleString()  # reads back as the written type
    col = JsonSchemaColumn("value", "out-value", 1, 12, json.dumps(schema))
    encoded = col.encoder(dt).encode([{"id": 1, "name": None, "tags": ["t"], "m": [("a", 1.5)]}, None])
    assert encoded[1] is None
    assert encoded[0] is not None and encoded[0][:5] == b"\x00\x00\x00\x00\x0c"
    assert orjson.loads(encoded[0][5:]) == {"id": 1, "name": None, "tags": ["t"], "m": {"a": 1.5}}
    back = FramedJsonDecoder(col).decode(encoded, pa.array([0, 1], pa.int64()), "out-0").to_pylist()
    assert back[0] == {"id": 1, "name": None, "tags": ["t"], "m": [("a", 1.5)]}


def test_json_schema_and_protobuf_options() -> None:
    base = {"bootstrap.servers": "127.0.0.1:1"}
    src = parse_source_options({**base, "subscribe": "t", "value.format": "json_schema", "key.format": "protobuf",
                                "key.protobuf.message": "shop.Key"}, streaming=False)
    assert [(f.column, f.kind, f.subject, f.message) for f in src.formats] == [
        ("key", "protobuf", "t-key", "shop.Key"), ("value", "json_schema", "t-value", None)]
    with pytest.raises(OptionError, match=r"'value\.protobuf\.message'"):
        parse_source_options({**base, "subscribe": "t", "value.format": "avro", "value.protobuf.message": "M"},
                             streaming=False)
    sink = parse_sink_options({**base, "topic": "out", "value.format": "json_schema"})
    assert [(f.kind, f.subject) for f in sink.formats] == [("json_schema", "out-value")]
    sink = parse_sink_options({**base, "topic": "out", "value.format": "protobuf", "value.protobuf.message": "M"})
    assert [(f.kind, f.subject, f.message) for f in sink.formats] == [("protobuf", "out-value", "M")]
