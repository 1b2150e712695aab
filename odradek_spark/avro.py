"""Confluent-framed Avro keys and values in the connector: read into typed columns, write with registration.

Why: most records in a Kafka-like cluster are Avro registered in a Schema Registry and framed as Confluent's
serializers frame them (a magic byte 0, the 4-byte schema id, Avro's binary encoding). Spark's own
``from_avro`` reads unframed Avro with a schema the user pastes in; here the option ``value.format=avro`` (and
``key.format``) makes the connector do what a Confluent deserializer does, with every broker's own registry as
the default (``schema.registry.url`` to use another one).

Reading. The column's Spark type is fixed when the query is defined, from the **reader schema**: the subject's
version named by ``value.schema.version`` (default the latest) of ``value.subject`` (default
``<topic>-value``, Confluent's TopicNameStrategy; one topic). Each record's **writer schema** is the one its
id names (fetched once per id per task), and Avro's schema resolution maps it onto the reader schema, so a
record written under a later compatible version (a field added with a default, say) reads in the query's
types; a record whose writer schema the reader schema cannot resolve, or that is not framed, fails the task
naming its offset and both schemas (``mode=FAILFAST``, the default), or reads as null (``PERMISSIVE``). A
running query keeps its types: a schema change between micro-batches is resolved that way, or refused with
that message; restarting the query picks up the new latest version.

Writing. The column (any Spark type; a struct becomes an Avro record) is encoded with the Avro schema Spark's
``to_avro`` derives from its type (record ``topLevelRecord``; a nullable field becomes a union with null),
registered under ``<topic>-value`` on the driver before any task runs (so an incompatible change is refused
there, with the registry's message), and framed with its id.

Types (as Spark's SchemaConverters): boolean, int, long, float, double, string, bytes and fixed (binary), enum
(string), record (struct), array, map (string keys), ``date``, ``timestamp-millis``/``-micros`` (timestamp),
``local-timestamp-*`` (timestamp_ntz), ``decimal`` and ``uuid`` (string); a union of null and one type is that
type, nullable; ``[int, long]`` reads as long and ``[float, double]`` as double. Other unions and recursive
records are refused when the query is defined.
"""

from __future__ import annotations

import io
import json
import struct
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import fastavro
import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

if TYPE_CHECKING:
    from odradek_spark.options import SourceOptions
    from odradek_spark.schema_registry import RegistryClient

__all__ = [
    "AvroColumn",
    "AvroSchemaError",
    "FramedAvroDecoder",
    "FramedAvroEncoder",
    "avro_schema_for",
    "decode_columns",
    "frame",
    "spark_type",
]

MAGIC = 0
_HEADER = struct.Struct(">bI")
FAILFAST, PERMISSIVE = "FAILFAST", "PERMISSIVE"


class AvroSchemaError(ValueError):
    """An Avro schema the connector cannot map to Spark types, or a Spark type it cannot write as Avro."""


def frame(schema_id: int, payload: bytes) -> bytes:
    return _HEADER.pack(MAGIC, schema_id) + payload


# --------------------------------------------------------------------------------------- Avro -> Spark


def spark_type(schema: Any) -> tuple[DataType, bool]:
    """``(Spark type, nullable)`` of a parsed Avro schema (fastavro's ``parse_schema`` form)."""
    return _to_spark(schema, {}, ())


def _to_spark(s: Any, named: dict[str, Any], seen: tuple[str, ...]) -> tuple[DataType, bool]:
    if isinstance(s, str):
        primitive = _PRIMITIVES.get(s)
        if primitive is not None:
            return primitive, False
        if s not in named:
            raise AvroSchemaError(f"unknown Avro type {s!r}")
        if s in seen:
            raise AvroSchemaError(f"recursive Avro record {s!r} cannot be a Spark type")
        return _to_spark(named[s], named, (*seen, s))
    if isinstance(s, list):
        return _union(s, named, seen)
    kind = s["type"]
    logical = s.get("logicalType")
    if kind in ("record", "error"):
        name = s["name"]
        if name in seen:
            raise AvroSchemaError(f"recursive Avro record {name!r} cannot be a Spark type")
        named[name] = s
        fields = []
        for f in s["fields"]:
            dt, nullable = _to_spark(f["type"], named, (*seen, name))
            fields.append(StructField(f["name"], dt, nullable))
        return StructType(fields), False
    if kind == "enum":
        named[s["name"]] = s
        return StringType(), False
    if kind == "fixed":
        named[s["name"]] = s
        if logical == "decimal":
            return DecimalType(s["precision"], s.get("scale", 0)), False
        return BinaryType(), False
    if kind == "array":
        item, nullable = _to_spark(s["items"], named, seen)
        return ArrayType(item, nullable), False
    if kind == "map":
        value, nullable = _to_spark(s["values"], named, seen)
        return MapType(StringType(), value, nullable), False
    if logical == "decimal" and kind == "bytes":
        return DecimalType(s["precision"], s.get("scale", 0)), False
    logical_type = _LOGICAL.get((kind, logical))
    if logical_type is not None:
        return logical_type, False
    return _to_spark(kind, named, seen)


def _union(branches: list[Any], named: dict[str, Any], seen: tuple[str, ...]) -> tuple[DataType, bool]:
    others = [b for b in branches if b != "null"]
    nullable = len(others) < len(branches)
    if len(others) == 1:
        dt, inner_nullable = _to_spark(others[0], named, seen)
        return dt, nullable or inner_nullable
    if sorted(map(str, others)) == ["int", "long"]:
        return LongType(), nullable
    if sorted(map(str, others)) == ["double", "float"]:
        return DoubleType(), nullable
    raise AvroSchemaError(f"an Avro union of {json.dumps(others)} has no Spark type here (only a union of null and "
                          "one type, [int, long] and [float, double] are read)")


_PRIMITIVES: dict[str, DataType] = {
    "boolean": BooleanType(), "int": IntegerType(), "long": LongType(), "float": FloatType(),
    "double": DoubleType(), "bytes": BinaryType(), "string": StringType(),
}
_LOGICAL: dict[tuple[str, str | None], DataType] = {
    ("int", "date"): DateType(),
    ("long", "timestamp-millis"): TimestampType(),
    ("long", "timestamp-micros"): TimestampType(),
    ("long", "local-timestamp-millis"): TimestampNTZType(),
    ("long", "local-timestamp-micros"): TimestampNTZType(),
    ("string", "uuid"): StringType(),
}


# --------------------------------------------------------------------------------------- Spark -> Avro


def avro_schema_for(dt: DataType, nullable: bool = False, name: str = "topLevelRecord",
                    namespace: str = "") -> Any:
    """The Avro schema Spark's ``to_avro`` writes for a column of type ``dt`` (SchemaConverters.toAvroType);
    the sink registers a column's schema as not nullable (a null is a tombstone, not an Avro null)."""
    schema = _to_avro(dt, name, namespace)
    return [schema, "null"] if nullable else schema


# Spark's simple types and what to_avro writes for each (SchemaConverters.toAvroType).
_AVRO_OF: tuple[tuple[type[DataType], Any], ...] = (
    (BooleanType, "boolean"), (ShortType, "int"), (IntegerType, "int"), (LongType, "long"), (FloatType, "float"),
    (DoubleType, "double"), (StringType, "string"), (BinaryType, "bytes"),
    (DateType, {"type": "int", "logicalType": "date"}),
    (TimestampType, {"type": "long", "logicalType": "timestamp-micros"}),
    (TimestampNTZType, {"type": "long", "logicalType": "local-timestamp-micros"}),
)


def _to_avro(dt: DataType, name: str, namespace: str) -> Any:
    for spark, avro in _AVRO_OF:
        if isinstance(dt, spark):
            return dict(avro) if isinstance(avro, dict) else avro  # a copy: callers may extend it
    if isinstance(dt, DecimalType):
        return {"type": "fixed", "name": f"{name}.fixed" if not namespace else f"{namespace}.{name}.fixed",
                "size": _decimal_size(dt.precision), "logicalType": "decimal", "precision": dt.precision,
                "scale": dt.scale}
    if isinstance(dt, ArrayType):
        return {"type": "array", "items": avro_schema_for(dt.elementType, dt.containsNull, name, namespace)}
    if isinstance(dt, MapType):
        if not isinstance(dt.keyType, StringType):
            raise AvroSchemaError(f"an Avro map has string keys, not {dt.keyType.simpleString()}")
        return {"type": "map", "values": avro_schema_for(dt.valueType, dt.valueContainsNull, name, namespace)}
    if isinstance(dt, StructType):
        child_namespace = f"{namespace}.{name}" if namespace else name
        record: dict[str, Any] = {"type": "record", "name": name, "fields": [
            {"name": f.name, "type": avro_schema_for(f.dataType, f.nullable, f.name, child_namespace)}
            for f in dt.fields]}
        if namespace:
            record["namespace"] = namespace
        return record
    raise AvroSchemaError(f"a {dt.simpleString()} column cannot be written as Avro")


def _decimal_size(precision: int) -> int:
    size = 1
    while 10 ** precision >= 2 ** (8 * size - 1):
        size += 1
    return size


# -------------------------------------------------------------------------------------- the column codecs


def _fixer(dt: DataType, schema: Any, named: dict[str, Any]) -> Callable[[Any], Any] | None:
    """What turns fastavro's datum for ``schema`` into what Arrow builds ``dt`` from; None when nothing needs
    changing (the common case, so most columns cost no Python beyond fastavro's own)."""
    if isinstance(schema, list):
        branch = next((b for b in schema if b != "null"), "null")
        inner = _fixer(dt, branch, named) if sum(b != "null" for b in schema) == 1 else None
        return None if inner is None else (lambda v: None if v is None else inner(v))
    if isinstance(schema, str):
        return _fixer(dt, named[schema], named) if schema in named else None
    if schema.get("type") in ("record", "error", "enum", "fixed"):
        named.setdefault(schema["name"], schema)
    if schema.get("logicalType") == "uuid":
        return lambda v: str(v) if isinstance(v, uuid.UUID) else v
    if isinstance(dt, StructType):
        fields = {f["name"]: f["type"] for f in schema["fields"]}
        parts = [(f.name, _fixer(f.dataType, fields[f.name], named)) for f in dt.fields]
        active = [(n, fx) for n, fx in parts if fx is not None]
        if not active:
            return None

        def fix_record(v: dict[str, Any]) -> dict[str, Any]:
            for n, fx in active:
                v[n] = fx(v.get(n))
            return v
        return fix_record
    if isinstance(dt, ArrayType):
        item = _fixer(dt.elementType, schema["items"], named)
        return None if item is None else (lambda v: [item(x) for x in v])
    if isinstance(dt, MapType):
        value = _fixer(dt.valueType, schema["values"], named)
        if value is None:
            return lambda v: list(v.items())
        return lambda v: [(k, value(x)) for k, x in v.items()]
    return None


@dataclass(frozen=True)
class AvroColumn:
    """One Avro-formatted column of a query, resolved on the driver: ``schema`` is the reader (or writer)
    schema's JSON text, ``schema_id`` its registry id, ``subject`` and ``version`` where it came from."""

    column: str  # "key" or "value"
    subject: str
    version: int
    schema_id: int
    schema: str
    mode: str = FAILFAST

    def parsed(self) -> Any:
        return fastavro.parse_schema(json.loads(self.schema), _write_hint=False)

    def spark_field(self) -> StructField:
        dt, _ = spark_type(self.parsed())
        return StructField(self.column, dt, True)  # a null key or value (a tombstone) reads as null

    def decoder(self, registry: RegistryClient) -> FramedAvroDecoder:
        return FramedAvroDecoder(self, registry.schema)

    def encoder(self, dt: DataType) -> FramedAvroEncoder:
        return FramedAvroEncoder(self, dt)


class FramedAvroDecoder:
    """Decodes one column of Arrow batches from Confluent-framed Avro into the reader schema's Arrow type.

    ``writer_schema(id)`` fetches a schema's JSON text by id (each id once per decoder)."""

    def __init__(self, column: AvroColumn, writer_schema: Callable[[int], str]) -> None:
        self.column = column
        self._reader = column.parsed()
        dt = column.spark_field().dataType
        from pyspark.sql.pandas.types import to_arrow_type

        self.arrow_type = to_arrow_type(dt, timezone="UTC")
        self._fix = _fixer(dt, self._reader, {})
        self._fetch = writer_schema
        self._writers: dict[int, Any] = {}

    def _writer(self, schema_id: int) -> Any:
        writer = self._writers.get(schema_id)
        if writer is None:
            writer = self._writers[schema_id] = fastavro.parse_schema(json.loads(self._fetch(schema_id)),
                                                                      _write_hint=False)
        return writer

    def decode(self, data: list[bytes | None], offsets: pa.Array, where: str) -> pa.Array:
        """The column's values (None stays null); raises ValueError naming the offset under FAILFAST."""
        out: list[Any] = []
        reader, fix, permissive = self._reader, self._fix, self.column.mode == PERMISSIVE
        for i, value in enumerate(data):
            if value is None:
                out.append(None)
                continue
            schema_id = -1
            try:
                if len(value) < _HEADER.size or value[0] != MAGIC:
                    raise ValueError("not in Confluent's wire format (magic byte 0, a 4-byte schema id)")
                schema_id = _HEADER.unpack_from(value)[1]
                datum = fastavro.schemaless_reader(io.BytesIO(memoryview(value)[_HEADER.size:]),
                                                   self._writer(schema_id), reader)
                out.append(fix(datum) if fix is not None else datum)
            except Exception as e:  # fastavro raises SchemaResolutionError, EOFError, ValueError, ...
                if permissive:
                    out.append(None)
                    continue
                c = self.column
                raise ValueError(
                    f"{c.column} at {where} offset {offsets[i].as_py()} (schema id {schema_id}) cannot be read with "
                    f"the query's {c.column} schema (subject {c.subject} version {c.version}, id {c.schema_id}): "
                    f"{e}. If the subject's schema changed incompatibly, restart the query to read with the new "
                    "latest version; mode=PERMISSIVE reads such records as null") from None
        return pa.array(out, type=self.arrow_type)


class FramedAvroEncoder:
    """Encodes a column's Python values (Arrow's ``to_pylist``) with the registered schema, framed; a null
    stays a null (a tombstone), as Confluent's serializers leave it."""

    def __init__(self, column: AvroColumn, dt: DataType) -> None:
        self._schema = column.parsed()
        self._header = _HEADER.pack(MAGIC, column.schema_id)
        self._unfix = _unfixer(dt)

    def encode(self, values: list[Any]) -> list[bytes | None]:
        out: list[bytes | None] = []
        schema, header, unfix = self._schema, self._header, self._unfix
        for v in values:
            if v is None:
                out.append(None)
                continue
            buf = io.BytesIO()
            buf.write(header)
            fastavro.schemaless_writer(buf, schema, unfix(v) if unfix is not None else v)
            out.append(buf.getvalue())
        return out


def _unfixer(dt: DataType) -> Callable[[Any], Any] | None:
    """Arrow's ``to_pylist`` gives a map as a list of (key, value) pairs and Avro wants a dict: what converts a
    value of type ``dt``, or None when it holds no map."""
    if isinstance(dt, MapType):
        value = _unfixer(dt.valueType)
        if value is None:
            return lambda v: None if v is None else dict(v)
        return lambda v: None if v is None else {k: value(x) for k, x in v}
    if isinstance(dt, ArrayType):
        item = _unfixer(dt.elementType)
        return None if item is None else (lambda v: None if v is None else [item(x) for x in v])
    if isinstance(dt, StructType):
        active = [(f.name, fx) for f in dt.fields if (fx := _unfixer(f.dataType)) is not None]
        if not active:
            return None

        def unfix_record(v: dict[str, Any] | None) -> dict[str, Any] | None:
            if v is None:
                return None
            for n, fx in active:
                v[n] = fx(v.get(n))
            return v
        return unfix_record
    return None


def decode_columns(batches: Iterator[pa.RecordBatch], options: SourceOptions,
                   where: str) -> Iterator[pa.RecordBatch]:
    """The source's Arrow batches with each typed column (Avro, JSON Schema, Protobuf: ``options.avro`` holds
    them all) decoded (executor side; one registry client a task)."""
    from odradek_spark.schema_registry import RegistryClient

    registry = RegistryClient(options.registry, options.request_timeout_ms, options.security)
    try:
        decoders = [c.decoder(registry) for c in options.avro]
        for batch in batches:
            offsets = batch.column(batch.schema.get_field_index("offset"))
            for decoder in decoders:
                name = decoder.column.column
                i = batch.schema.get_field_index(name)
                values = decoder.decode(batch.column(i).to_pylist(), offsets, where)
                batch = batch.set_column(i, pa.field(name, decoder.arrow_type), values)
            yield batch
    finally:
        registry.close()
