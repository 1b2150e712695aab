"""The connector's Protobuf columns without a cluster (odradek_spark/protobuf.py): resolving a subject's version
and its references (as a registry answers them with ``format=serialized``) into descriptors, the message -> Spark
type mapping as Spark's ``from_protobuf`` makes it, and decoding Confluent-framed messages (message indexes
included) into Arrow values: FAILFAST naming the offset, PERMISSIVE giving null.

The .proto texts are compiled the way the cluster's registry compiles them (broker/schema_registry/protobuf.py),
so the descriptors are the ones a real registry answers."""

from __future__ import annotations

import datetime
import decimal
from typing import Any

import pyarrow as pa
import pytest
from google.protobuf import message_factory
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
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

from broker.schema_registry.protobuf import parse
from odradek.protocol.message_indexes import encode_message_indexes as encode_indexes
from odradek_spark.avro import frame
from odradek_spark.options import ColumnFormat
from odradek_spark.protobuf import (
    FramedProtobufDecoder,
    ProtobufColumn,
    ProtobufSchemaError,
    read_indexes,
    resolve_column,
)

COMMON = """syntax = "proto3";
package common;
message Money { string currency = 1; int64 units = 2; }
"""
ORDER = """syntax = "proto3";
package shop;
import "common.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
message Order {
  enum Status { NEW = 0; DONE = 1; }
  message Line { string sku = 1; uint32 qty = 2; }
  int64 id = 1;
  string item = 2;
  Status status = 3;
  repeated Line lines = 4;
  map<string, int32> counts = 5;
  common.Money total = 6;
  google.protobuf.Timestamp at = 7;
  google.protobuf.StringValue note = 8;
  optional bool paid = 9;
  uint64 big = 10;
  bytes blob = 11;
  double ratio = 12;
  repeated string tags = 13;
}
message Key { string id = 1; }
"""
RECURSIVE = 'syntax = "proto3"; message Node { string v = 1; Node next = 2; }'


class FakeRegistry:
    """Answers ``version_info`` as the registry's REST API does with ``format=serialized``."""

    def __init__(self) -> None:
        common = parse(COMMON)
        self.subjects = {
            ("common", 1): {"id": 1, "version": 1, "schemaType": "PROTOBUF", "schema": common.serialized()},
            ("orders-value", 1): {"id": 2, "version": 1, "schemaType": "PROTOBUF",
                                  "schema": parse(ORDER, [("common.proto", COMMON)]).serialized(),
                                  "references": [{"name": "common.proto", "subject": "common", "version": 1}]},
            ("nodes-value", 1): {"id": 3, "version": 1, "schemaType": "PROTOBUF",
                                 "schema": parse(RECURSIVE).serialized()},
            ("avro-value", 1): {"id": 4, "version": 1, "schema": '"string"'},
        }
        self.calls: list[tuple[str, Any, str | None]] = []

    def version_info(self, subject: str, version: Any = "latest", fmt: str | None = None) -> dict[str, Any]:
        self.calls.append((subject, version, fmt))
        return dict(self.subjects[(subject, 1 if version == "latest" else version)])


def order_column(message: str | None = None, mode: str = "FAILFAST") -> ProtobufColumn:
    return resolve_column(FakeRegistry(), ColumnFormat("value", "orders-value", None, mode, "protobuf", message))


def test_a_message_maps_to_the_struct_from_protobuf_reads() -> None:
    column = order_column()
    assert column.message == "shop.Order" and column.indexes == (0,) and column.schema_id == 2
    line = StructType([StructField("sku", StringType()), StructField("qty", LongType())])
    money = StructType([StructField("currency", StringType()), StructField("units", LongType())])
    assert column.spark_field() == StructField("value", StructType([
        StructField("id", LongType()), StructField("item", StringType()), StructField("status", StringType()),
        StructField("lines", ArrayType(line, False)),
        StructField("counts", MapType(StringType(), IntegerType(), False)),
        StructField("total", money), StructField("at", TimestampType()), StructField("note", StringType()),
        StructField("paid", BooleanType()), StructField("big", DecimalType(20, 0)),
        StructField("blob", BinaryType()),
        StructField("ratio", DoubleType()), StructField("tags", ArrayType(StringType(), False)),
    ]))
    key = order_column("Key")
    assert key.message == "shop.Key" and key.indexes == (1,)
    assert order_column("shop.Order.Line").indexes == (0, 0)  # a nested message: its index among Order's


def test_messages_without_a_spark_type_or_the_wrong_schema_type_are_refused() -> None:
    with pytest.raises(ProtobufSchemaError, match="recursive message 'Node'"):
        resolve_column(FakeRegistry(), ColumnFormat("value", "nodes-value", None, kind="protobuf"))
    with pytest.raises(ProtobufSchemaError, match="is a AVRO schema, not PROTOBUF"):
        resolve_column(FakeRegistry(), ColumnFormat("value", "avro-value", None, kind="protobuf"))
    with pytest.raises(ProtobufSchemaError, match="names no message"):
        order_column("Missing")


def test_message_indexes_are_read_as_confluent_writes_them() -> None:
    for indexes in [(0,), (1,), (0, 1), (3, 0, 2)]:
        raw = encode_indexes(indexes) + b"rest"
        assert read_indexes(raw, 0) == (indexes, len(raw) - 4)
    assert encode_indexes([0]) == b"\x00" and encode_indexes([1]) == b"\x02\x02"


def order_message(column: ProtobufColumn, **values: Any) -> Any:
    cls = message_factory.GetMessageClass(column.descriptor())
    return cls(**values)


def decode(column: ProtobufColumn, values: list[bytes | None]) -> list[Any]:
    decoder = FramedProtobufDecoder(column)
    return decoder.decode(values, pa.array(range(40, 40 + len(values)), pa.int64()), "orders-0").to_pylist()


def test_framed_messages_decode_into_arrow_values_of_the_struct() -> None:
    column = order_column()
    msg = order_message(column, id=7, item="pen", status=1, counts={"a": 2},
                        big=2**64 - 1, blob=b"\x01", ratio=0.5, tags=["x", "y"])
    msg.lines.add(sku="s1", qty=3)
    msg.total.currency = "EUR"
    msg.at.FromDatetime(datetime.datetime(2024, 2, 29, 10, 0, 0, 123456))
    msg.note.value = "hi"
    payload = frame(2, encode_indexes([0]) + msg.SerializeToString())
    empty = frame(9, b"\x00")  # another schema id, the empty message: defaults and nulls
    got = decode(column, [payload, None, empty])
    assert got[0] == {
        "id": 7, "item": "pen", "status": "DONE", "lines": [{"sku": "s1", "qty": 3}], "counts": [("a", 2)],
        "total": {"currency": "EUR", "units": 0}, "at": datetime.datetime(2024, 2, 29, 10, 0, 0, 123456,
                                                                          tzinfo=datetime.UTC),
        "note": "hi", "paid": None, "big": decimal.Decimal(2**64 - 1), "blob": b"\x01", "ratio": 0.5,
        "tags": ["x", "y"]}
    assert got[1] is None
    assert got[2] == {"id": 0, "item": "", "status": "NEW", "lines": [], "counts": [], "total": None, "at": None,
                      "note": None, "paid": None, "big": decimal.Decimal(0), "blob": b"", "ratio": 0.0, "tags": []}
    key = order_column("Key")
    assert decode(key, [frame(2, encode_indexes([1]) + order_message(key, id="k").SerializeToString())]) == \
        [{"id": "k"}]


@pytest.mark.parametrize(("payload", "why"), [
    (frame(2, encode_indexes([1]) + b"\x0a\x01k"), r"message indexes \[1\] are not those of shop.Order \[0\]"),
    (frame(2, b"\x00\x0a\x05ab"), "Error parsing message|truncated|DecodeError"),
    (b"\x0a\x03pen", "not in Confluent's wire format"),
    (frame(2, b""), "not in Confluent's wire format"),
])
def test_a_record_that_does_not_parse_fails_naming_its_offset_or_reads_as_null(payload: bytes, why: str) -> None:
    good = frame(2, b"\x00\x08\x05")  # id = 5
    with pytest.raises(ValueError, match=rf"value at orders-0 offset 41 .*message shop.Order \(Protobuf subject "
                                         rf"orders-value version 1, id 2\): .*({why})"):
        decode(order_column(), [good, payload])
    got = decode(order_column(mode="PERMISSIVE"), [good, payload])
    assert got[0]["id"] == 5 and got[1] is None
