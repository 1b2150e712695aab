"""The sink's Protobuf columns without a cluster (odradek_spark/protobuf.py): the proto3 file generated from a Spark
struct, the choice between the subject's registered schema and that generated one, Confluent-framed encoding
(message indexes included) that reads back through the connector's own decoder with the same values and through
confluent-kafka's ProtobufDeserializer, and the messages for what cannot be written.

The registry here registers and answers schemas as the cluster's does (broker/schema_registry/protobuf.py parses
the base64 descriptor the sink registers and serializes it back for ``format=serialized``)."""

from __future__ import annotations

import base64
import datetime
import decimal
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import message_factory
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from broker.schema_registry.protobuf import parse, render
from odradek_spark.options import ColumnFormat, OptionError, parse_sink_options
from odradek_spark.protobuf import (
    FramedProtobufDecoder,
    ProtobufColumn,
    ProtobufSchemaError,
    proto_file_for,
    spark_type,
    writer_column,
)
from odradek_spark.schema_registry import RegistryError
from tests.unit.spark.test_protobuf_columns import COMMON, ORDER

ADDRESS = StructType([StructField("city", StringType()), StructField("zip", IntegerType())])
ROW = StructType([
    StructField("id", LongType(), False),
    StructField("name", StringType()),
    StructField("score", DoubleType()),
    StructField("ratio", FloatType()),
    StructField("ok", BooleanType()),
    StructField("blob", BinaryType()),
    StructField("big", DecimalType(20, 0)),
    StructField("at", TimestampType()),
    StructField("wait", DayTimeIntervalType(DayTimeIntervalType.DAY, DayTimeIntervalType.SECOND)),
    StructField("tags", ArrayType(StringType())),
    StructField("counts", MapType(StringType(), IntegerType())),
    StructField("ship", ADDRESS),
    StructField("stops", ArrayType(ADDRESS)),
    StructField("by_zip", MapType(LongType(), ADDRESS)),
])
UTC = datetime.UTC


class FakeRegistry:
    """Registers and answers Protobuf schemas as the cluster's registry does (``format=serialized`` answers the
    base64 of the normalized descriptor); ``refuse`` makes a registration fail as an incompatible one does."""

    def __init__(self, refuse: str | None = None) -> None:
        self.versions: dict[str, list[dict[str, Any]]] = {}
        self.refs: dict[str, str] = {}  # reference name -> .proto text, for schemas registered with imports
        self.refuse = refuse
        self.registered: list[tuple[str, str]] = []
        self.next_id = 10

    def add(self, subject: str, text: str, references: Sequence[tuple[str, str, str]] = ()) -> int:
        """Register ``text`` directly (as a producer would have), importing (name, subject, text) references."""
        for name, ref_subject, ref_text in references:
            if ref_subject not in self.versions:
                self.add(ref_subject, ref_text)
            self.refs[name] = ref_text
        schema = parse(text, [(n, t) for n, _, t in references])
        self.next_id += 1
        self.versions.setdefault(subject, []).append({
            "id": self.next_id, "version": len(self.versions.get(subject, [])) + 1, "schemaType": "PROTOBUF",
            "schema": schema.serialized(),
            "references": [{"name": n, "subject": s, "version": 1} for n, s, _ in references]})
        return self.next_id

    def version_info(self, subject: str, version: Any = "latest", fmt: str | None = None) -> dict[str, Any]:
        assert fmt == "serialized"
        versions = self.versions.get(subject)
        if not versions:
            raise RegistryError(f"subject {subject!r} version {version}: Subject '{subject}' not found.", 40401)
        return dict(versions[-1] if version == "latest" else versions[int(version) - 1])

    def register_typed(self, subject: str, text: str, schema_type: str) -> tuple[int, int]:
        assert schema_type == "PROTOBUF"
        self.registered.append((subject, text))
        if self.refuse is not None:
            raise RegistryError(f"registering under subject {subject!r}: {self.refuse}", 409)
        schema_id = self.add(subject, text)
        return schema_id, len(self.versions[subject])


def arrow_values(dt: DataType, rows: list[Any]) -> list[Any]:
    """The rows as the sink's encoder gets them: Arrow's ``to_pylist`` of a column of ``dt``."""
    return pa.array(rows, type=to_arrow_type(dt, timezone="UTC")).to_pylist()


def sorted_maps(rows: list[Any]) -> list[Any]:
    return [None if r is None else {**r, "counts": sorted(r["counts"]), "by_zip": sorted(r["by_zip"])} for r in rows]


def read_back(column: ProtobufColumn, encoded: list[bytes | None]) -> list[Any]:
    offsets = pa.array(range(len(encoded)), pa.int64())
    return FramedProtobufDecoder(column).decode(encoded, offsets, "out-0").to_pylist()


def test_the_generated_file_types_each_field_as_the_reader_maps_it_back() -> None:
    fdp = proto_file_for(ROW)
    schema = parse(base64.b64encode(fdp.SerializeToString()).decode())  # as the registry parses what is sent
    text = render(schema.file)
    for line in ["int64 id = 1;", "optional string name = 2;", "optional double score = 3;",
                 "optional float ratio = 4;", "optional bool ok = 5;", "optional bytes blob = 6;",
                 "optional uint64 big = 7;", ".google.protobuf.Timestamp at = 8;",
                 ".google.protobuf.Duration wait = 9;",
                 "repeated string tags = 10;", "map<string, int32> counts = 11;",
                 ".TopLevelRecord.Ship ship = 12;", "repeated .TopLevelRecord.Stops stops = 13;",
                 "map<int64, .TopLevelRecord.ByZip> by_zip = 14;"]:
        assert line in text, (line, text)
    assert 'import "google/protobuf/timestamp.proto";' in text and "message Ship {" in text
    back = spark_type(schema.pool.FindMessageTypeByName("TopLevelRecord"))
    # What the reader makes of it: the same types, every field nullable, arrays and maps without nulls.
    assert back.simpleString() == ROW.simpleString()
    assert [f.name for f in back.fields] == ROW.names


@pytest.mark.parametrize(("dt", "why"), [
    (StructType([StructField("d", DateType())]), r"TopLevelRecord\.d: a date has no Protobuf type"),
    (StructType([StructField("p", DecimalType(10, 2))]), r"\.p: a decimal\(10,2\) .*cast other decimals"),
    (StructType([StructField("m", ArrayType(ArrayType(LongType())))]), r"\.m: repeated fields cannot nest"),
    (StructType([StructField("m", MapType(StringType(), ArrayType(LongType())))]), "cannot be repeated or a map"),
    (StructType([StructField("m", MapType(DoubleType(), LongType()))]), "keys are strings, integers or booleans"),
    (StructType([StructField("order id", LongType())]), "'order id' is not a Protobuf field name"),
    (LongType(), "a Protobuf message is a struct, not bigint"),
])
def test_types_without_a_protobuf_form_are_refused_naming_the_field(dt: DataType, why: str) -> None:
    with pytest.raises(ProtobufSchemaError, match=why):
        proto_file_for(dt)


def test_a_struct_is_registered_as_its_own_schema_and_reads_back_with_the_same_values() -> None:
    registry = FakeRegistry()
    column = writer_column(registry, ColumnFormat("value", "out-value", kind="protobuf"), ROW)
    assert [s for s, _ in registry.registered] == ["out-value"]
    assert (column.subject, column.version, column.message, column.indexes) == ("out-value", 1, "TopLevelRecord", (0,))
    rows = arrow_values(ROW, [
        {"id": 1, "name": "a", "score": 0.5, "ratio": 1.5, "ok": True, "blob": b"\x00\x01",
         "big": decimal.Decimal(2**64 - 1), "at": datetime.datetime(2024, 2, 29, 10, 0, 0, 123456, tzinfo=UTC),
         "wait": datetime.timedelta(days=-1, seconds=5, microseconds=7), "tags": ["x", "y"],
         "counts": [("a", 1), ("b", -2)], "ship": {"city": "Oslo", "zip": 150},
         "stops": [{"city": "Bergen", "zip": None}, {"city": None, "zip": 0}],
         "by_zip": [(5000, {"city": "Bergen", "zip": 5000})]},
        # Nulls where the schema has presence read back as null; an all-null struct is still a struct.
        {"id": 0, "name": None, "score": None, "ratio": None, "ok": None, "blob": None, "big": None,
         "at": datetime.datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC), "wait": None, "tags": [],
         "counts": [], "ship": {"city": None, "zip": None}, "stops": [], "by_zip": []},
        None,  # a tombstone
    ])
    encoded = column.encoder(ROW).encode(rows)
    assert encoded[2] is None
    assert encoded[0] is not None and encoded[0][:6] == b"\x00" + column.schema_id.to_bytes(4, "big") + b"\x00"
    assert sorted_maps(read_back(column, encoded)) == sorted_maps(rows)  # Protobuf keeps no map order

    # confluent-kafka's deserializer reads the same bytes with a message class of the registered descriptor.
    cls = message_factory.GetMessageClass(column.descriptor())
    deserialize = ProtobufDeserializer(cls, {"use.deprecated.format": False})
    msg = deserialize(encoded[0], SerializationContext("out", MessageField.VALUE))
    assert (msg.id, msg.name, list(msg.tags), dict(msg.counts), msg.ship.city, msg.big) == \
        (1, "a", ["x", "y"], {"a": 1, "b": -2}, "Oslo", 2**64 - 1)
    assert msg.at.ToDatetime(tzinfo=UTC) == datetime.datetime(2024, 2, 29, 10, 0, 0, 123456, tzinfo=UTC)
    assert msg.wait.ToTimedelta() == datetime.timedelta(days=-1, seconds=5, microseconds=7)
    assert [s.city for s in msg.stops] == ["Bergen", ""] and msg.by_zip[5000].zip == 5000

    # The same struct again: the registered version fits, so nothing new is registered.
    again = writer_column(registry, ColumnFormat("value", "out-value", kind="protobuf"), ROW)
    assert again.schema_id == column.schema_id and len(registry.registered) == 1


ORDER_STRUCT = StructType([
    StructField("id", LongType()), StructField("status", StringType()),
    StructField("lines", ArrayType(StructType([StructField("sku", StringType()), StructField("qty", LongType())]))),
    StructField("total", StructType([StructField("currency", StringType()), StructField("units", LongType())])),
    StructField("note", StringType()), StructField("paid", BooleanType()), StructField("big", DecimalType(20, 0)),
    StructField("AT", TimestampType()),  # names match ignoring case, as Spark's do
])


def order_registry() -> FakeRegistry:
    registry = FakeRegistry()
    registry.add("orders-value", ORDER, [("common.proto", "common", COMMON)])
    return registry


def test_a_struct_that_fits_the_subjects_schema_is_written_with_it() -> None:
    registry = order_registry()
    column = writer_column(registry, ColumnFormat("value", "orders-value", kind="protobuf"), ORDER_STRUCT)
    assert registry.registered == [] and (column.message, column.version) == ("shop.Order", 1)
    rows = arrow_values(ORDER_STRUCT, [{
        "id": 7, "status": "DONE", "lines": [{"sku": "s1", "qty": 3}], "total": {"currency": "EUR", "units": 9},
        "note": "hi", "paid": False, "big": decimal.Decimal(5), "AT": datetime.datetime(2024, 1, 1, tzinfo=UTC)}])
    encoded = column.encoder(ORDER_STRUCT).encode(rows)
    got = read_back(column, encoded)[0]
    assert {k: got[k] for k in ("id", "status", "lines", "total", "note", "paid", "big", "at")} == {
        "id": 7, "status": "DONE", "lines": [{"sku": "s1", "qty": 3}], "total": {"currency": "EUR", "units": 9},
        "note": "hi", "paid": False, "big": decimal.Decimal(5), "at": datetime.datetime(2024, 1, 1, tzinfo=UTC)}
    assert got["item"] == "" and got["counts"] == []  # fields the struct lacks keep their defaults

    # value.protobuf.message picks another message of the file: its message indexes frame the record.
    key_type = StructType([StructField("id", StringType())])
    key = writer_column(registry, ColumnFormat("key", "orders-value", kind="protobuf", message="Key"), key_type)
    framed = key.encoder(key_type).encode([{"id": "k1"}])[0]
    assert framed is not None and framed[5:7] == b"\x02\x02"  # [1]: a count of 1, then 1 (zig-zag varints)
    assert read_back(key, [framed]) == [{"id": "k1"}]


def test_a_struct_that_does_not_fit_registers_its_own_schema_or_is_refused_with_both_reasons() -> None:
    misfit = StructType([StructField("id", StringType()), StructField("extra", LongType())])
    registry = order_registry()
    column = writer_column(registry, ColumnFormat("value", "orders-value", kind="protobuf"), misfit)
    assert column.version == 2 and column.message == "TopLevelRecord"  # the registry accepted it

    refusing = order_registry()
    refusing.refuse = "Schema being registered is incompatible with an earlier schema"
    with pytest.raises(ProtobufSchemaError, match=r"value\.id: a string cannot be written to int64 field "
                                                  r"shop\.Order\.id.*registering the DataFrame's own schema as a "
                                                  r"new version was refused: .*incompatible"):
        writer_column(refusing, ColumnFormat("value", "orders-value", kind="protobuf"), misfit)
    with pytest.raises(ProtobufSchemaError, match=r"value\.extra: message shop\.Order has no field 'extra'"):
        writer_column(order_registry(), ColumnFormat("value", "orders-value", kind="protobuf", message="Order"),
                      StructType([StructField("extra", LongType())]))
    with pytest.raises(ProtobufSchemaError, match=r"value\.lines: a bigint cannot be written to repeated field"):
        writer_column(order_registry(), ColumnFormat("value", "orders-value", kind="protobuf", message="Order"),
                      StructType([StructField("lines", LongType())]))
    with pytest.raises(ProtobufSchemaError, match=r"protobuf\.message names a message .* subject 'new-value' has "
                                                  "none"):
        writer_column(FakeRegistry(), ColumnFormat("value", "new-value", kind="protobuf", message="M"), ROW)
    with pytest.raises(ProtobufSchemaError, match="must be a struct"):
        writer_column(FakeRegistry(), ColumnFormat("value", "new-value", kind="protobuf"), StringType())


@pytest.mark.parametrize(("row", "why"), [
    ({"status": "LOST"}, r"value\.status: 'LOST' is not a value of enum shop\.Order\.Status \(NEW, DONE\)"),
    ({"lines": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": -1}]}, r"value\.lines\[1\]\.qty: Value out of range"),
    ({"lines": [{"sku": "a", "qty": 1}, None]}, r"value\.lines\[1\]: null: a repeated field cannot hold null"),
    ({"big": decimal.Decimal(-1)}, r"value\.big: Value out of range"),
])
def test_a_row_that_cannot_be_encoded_fails_naming_the_column_path(row: dict[str, Any], why: str) -> None:
    column = writer_column(order_registry(), ColumnFormat("value", "orders-value", kind="protobuf"), ORDER_STRUCT)
    encoder = column.encoder(ORDER_STRUCT)
    good = {"id": 1}
    with pytest.raises(ValueError, match=r"a row's value cannot be written as shop\.Order \(Protobuf subject "
                                         rf"orders-value version 1, id {column.schema_id}\): {why}"):
        encoder.encode(arrow_values(ORDER_STRUCT, [good, row]))


def test_a_null_array_element_or_map_value_is_refused_and_a_null_array_writes_empty() -> None:
    dt = StructType([StructField("tags", ArrayType(StringType())), StructField("m", MapType(StringType(), LongType()))])
    column = writer_column(FakeRegistry(), ColumnFormat("value", "t-value", kind="protobuf"), dt)
    with pytest.raises(ValueError, match=r"value\.tags\[1\]: null: a repeated field cannot hold null"):
        column.encoder(dt).encode([{"tags": ["a", None], "m": []}])
    with pytest.raises(ValueError, match=r"value\.m\['k'\]: null: a map value cannot be null"):
        column.encoder(dt).encode([{"tags": None, "m": [("k", None)]}])
    assert read_back(column, column.encoder(dt).encode([{"tags": None, "m": None}])) == [{"tags": [], "m": []}]


def test_the_sink_accepts_protobuf_options_and_maps_a_refusal_to_an_option_error(monkeypatch: Any) -> None:
    from odradek_spark import schema_registry
    from odradek_spark.writer import register_avro, sink_layout

    options = parse_sink_options({"bootstrap.servers": "127.0.0.1:1", "topic": "orders",
                                  "value.format": "protobuf", "value.protobuf.message": "Order"})
    assert [(f.kind, f.subject, f.message) for f in options.formats] == [("protobuf", "orders-value", "Order")]
    registry = order_registry()

    class Client:
        def __init__(self, *_: Any) -> None:
            pass

        def __enter__(self) -> FakeRegistry:
            return registry

        def __exit__(self, *_: object) -> None:
            pass

    monkeypatch.setattr(schema_registry, "RegistryClient", Client)
    frame = StructType([StructField("value", ORDER_STRUCT)])
    sink_layout(frame, options)  # a struct value is fine with value.format=protobuf
    resolved = register_avro(options, frame)
    assert [(c.column, c.message) for c in resolved.avro] == [("value", "shop.Order")]
    with pytest.raises(OptionError, match=r"value\.format=protobuf \(subject orders-value\): .*value\.id: a boolean "
                                          "cannot be written to int64 field"):
        register_avro(options, StructType([StructField("value", StructType([StructField("id", BooleanType())]))]))
