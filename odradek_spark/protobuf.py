"""Confluent-framed Protobuf keys and values in the connector: read into typed columns.

Why: Confluent's Protobuf serializer frames a record as a magic byte 0, the 4-byte schema id, the **message
indexes** (which message of the schema's .proto file: its index among the file's messages, then among that one's
nested messages, ...; written as a zig-zag varint count and zig-zag varints, the common ``[0]`` as the single
byte 0), then the message's bytes. ``value.format=protobuf`` (and ``key.format``) reads such a column; the
subject and version are chosen as for Avro (``value.subject``, default ``<topic>-value``;
``value.schema.version``, default the latest; see :mod:`odradek_spark.avro`), the message is the file's first
one or the one ``value.protobuf.message`` names (full name ``pkg.Outer.Inner`` or simple name).

Schema. The driver asks the registry for the version with ``format=serialized`` (the base64 of its
FileDescriptorProto) and for each reference (the files it imports) the same, recursively; well-known imports
(``google/protobuf/*.proto``) come from the protobuf library. Executors build the message class from those
descriptors with a DescriptorPool and the message factory: no protoc at read time.

Reading. Each record's message indexes must name the query's message; its bytes are parsed with the query's
message class (as Confluent's deserializer does when configured with a specific message type: a record written
under another, compatible version of the file parses, unknown fields skipped, missing ones at their defaults).
A record that is not framed, names another message or does not parse fails the task naming its offset
(``mode=FAILFAST``) or reads as null (``PERMISSIVE``).

Types (as Spark's ``from_protobuf``): int32/sint32/sfixed32 -> int; int64/sint64/sfixed64 -> long; uint32/fixed32
-> long and uint64/fixed64 -> decimal(20,0) (so no value wraps; Spark's ``upcast.unsigned.ints``); float, double,
bool, string, bytes (binary); enum -> string (the value's name; an unknown number as its digits); a message ->
struct (every field nullable); repeated -> array; map fields -> map; ``google.protobuf.Timestamp`` -> timestamp,
``Duration`` -> interval day to second, the wrappers (``Int32Value``, ``StringValue``, ...) -> their scalar,
nullable. A scalar without presence (proto3) reads as its value, the default included (Spark's
``emit.default.values=true``); a message field, or a field with presence, that is not set reads as null.
Recursive messages are refused when the query is defined.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
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

from odradek.protocol.message_indexes import decode_message_indexes as read_indexes
from odradek_spark.avro import _HEADER, FAILFAST, MAGIC, PERMISSIVE

if TYPE_CHECKING:
    from odradek_spark.options import ColumnFormat
    from odradek_spark.schema_registry import RegistryClient

__all__ = ["FramedProtobufDecoder", "ProtobufColumn", "ProtobufSchemaError", "message_indexes", "read_indexes",
           "resolve_column", "spark_type"]

FD = FieldDescriptor
Convert = Callable[[Any], Any]
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class ProtobufSchemaError(ValueError):
    """A Protobuf schema (or message) the connector cannot map to Spark types."""


# ------------------------------------------------------------------------------------------ framing


def message_indexes(fdp: descriptor_pb2.FileDescriptorProto, full_name: str) -> tuple[int, ...]:
    """The indexes of the message ``full_name`` in the file ``fdp``."""
    prefix = f"{fdp.package}." if fdp.package else ""

    def find(messages: Sequence[Any], scope: str) -> tuple[int, ...] | None:
        for i, m in enumerate(messages):
            name = f"{scope}{m.name}"
            if name == full_name:
                return (i,)
            inner = find(m.nested_type, f"{name}.")
            if inner is not None:
                return (i, *inner)
        return None

    found = find(fdp.message_type, prefix)
    if found is None:
        raise ProtobufSchemaError(f"no message {full_name!r} in the schema")
    return found


# ------------------------------------------------------------------------------------- descriptor -> Spark


def spark_type(message: Descriptor) -> DataType:
    """The struct Spark's ``from_protobuf`` reads a message as."""
    return _message(message, ())[0]


def _message(m: Descriptor, seen: tuple[str, ...]) -> tuple[DataType, Convert]:
    if m.full_name in seen:
        raise ProtobufSchemaError(f"recursive message {m.full_name!r} (through {' -> '.join(seen)}) cannot be a "
                                  "Spark type")
    special = _WELL_KNOWN.get(m.full_name)
    if special is not None:
        return special
    inner = (*seen, m.full_name)
    fields: list[StructField] = []
    parts: list[tuple[str, bool, Convert | None]] = []
    for fd in m.fields:
        dt, conv = _field(fd, inner)
        fields.append(StructField(fd.name, dt, True))
        presence = fd.has_presence and not fd.is_repeated
        parts.append((fd.name, presence, conv))

    def convert(msg: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, presence, conv in parts:
            if presence and not msg.HasField(name):
                out[name] = None
            else:
                v = getattr(msg, name)
                out[name] = v if conv is None else conv(v)
        return out
    return StructType(fields), convert


def _field(fd: FieldDescriptor, seen: tuple[str, ...]) -> tuple[DataType, Convert | None]:
    if fd.type in (FD.TYPE_MESSAGE, FD.TYPE_GROUP) and fd.message_type.GetOptions().map_entry:
        key_dt, key_conv = _single(fd.message_type.fields_by_name["key"], seen)
        value_dt, value_conv = _single(fd.message_type.fields_by_name["value"], seen)
        if key_conv is None and value_conv is None:
            return MapType(key_dt, value_dt, False), lambda v: list(v.items())
        kc = key_conv or (lambda k: k)
        vc = value_conv or (lambda x: x)
        return MapType(key_dt, value_dt, False), lambda v: [(kc(k), vc(x)) for k, x in v.items()]
    dt, conv = _single(fd, seen)
    if fd.is_repeated:
        if conv is None:
            return ArrayType(dt, False), list
        c = conv
        return ArrayType(dt, False), lambda v: [c(x) for x in v]
    return dt, conv


def _single(fd: FieldDescriptor, seen: tuple[str, ...]) -> tuple[DataType, Convert | None]:
    if fd.type in (FD.TYPE_MESSAGE, FD.TYPE_GROUP):
        return _message(fd.message_type, seen)
    if fd.type == FD.TYPE_ENUM:
        names = {v.number: v.name for v in fd.enum_type.values}
        return StringType(), lambda v: names.get(v, str(v))
    scalar = _SCALARS.get(fd.type)
    if scalar is None:
        raise ProtobufSchemaError(f"field {fd.full_name} has a type with no Spark type here")
    return scalar


def _uint64(v: int) -> decimal.Decimal:
    return decimal.Decimal(v)


_SCALARS: dict[int, tuple[DataType, Convert | None]] = {
    FD.TYPE_DOUBLE: (DoubleType(), None), FD.TYPE_FLOAT: (FloatType(), None), FD.TYPE_BOOL: (BooleanType(), None),
    FD.TYPE_INT32: (IntegerType(), None), FD.TYPE_SINT32: (IntegerType(), None),
    FD.TYPE_SFIXED32: (IntegerType(), None), FD.TYPE_INT64: (LongType(), None), FD.TYPE_SINT64: (LongType(), None),
    FD.TYPE_SFIXED64: (LongType(), None), FD.TYPE_UINT32: (LongType(), None), FD.TYPE_FIXED32: (LongType(), None),
    FD.TYPE_UINT64: (DecimalType(20, 0), _uint64), FD.TYPE_FIXED64: (DecimalType(20, 0), _uint64),
    FD.TYPE_STRING: (StringType(), None), FD.TYPE_BYTES: (BinaryType(), None),
}


def _timestamp(m: Any) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(seconds=m.seconds, microseconds=m.nanos // 1000)


def _duration(m: Any) -> datetime.timedelta:
    return datetime.timedelta(seconds=m.seconds, microseconds=int(m.nanos / 1000))


_WELL_KNOWN: dict[str, tuple[DataType, Convert]] = {
    "google.protobuf.Timestamp": (TimestampType(), _timestamp),
    "google.protobuf.Duration": (DayTimeIntervalType(DayTimeIntervalType.DAY, DayTimeIntervalType.SECOND), _duration),
    **{f"google.protobuf.{name}Value": (dt, (lambda m, c=conv: c(m.value)) if conv else (lambda m: m.value))
       for name, (dt, conv) in {
           "Double": (DoubleType(), None), "Float": (FloatType(), None), "Int64": (LongType(), None),
           "UInt64": (DecimalType(20, 0), _uint64), "Int32": (IntegerType(), None), "UInt32": (LongType(), None),
           "Bool": (BooleanType(), None), "String": (StringType(), None), "Bytes": (BinaryType(), None)}.items()},
}


# ----------------------------------------------------------------------------------------- the column


@dataclass(frozen=True)
class ProtobufColumn:
    """One Protobuf-formatted column of a query, resolved on the driver: ``files`` the serialized
    FileDescriptorProtos (base64) of the schema's imports, each after its own, then of the schema itself;
    ``message`` the full name of the message read, ``indexes`` its message indexes; ``schema_id``, ``subject``
    and ``version`` where the schema came from."""

    column: str  # "key" or "value"
    subject: str
    version: int
    schema_id: int
    files: tuple[str, ...]
    message: str
    indexes: tuple[int, ...]
    mode: str = FAILFAST

    def descriptor(self) -> Descriptor:
        pool = descriptor_pool.DescriptorPool()
        for b64 in self.files:
            pool.AddSerializedFile(base64.standard_b64decode(b64))
        return pool.FindMessageTypeByName(self.message)

    def spark_field(self) -> StructField:
        return StructField(self.column, spark_type(self.descriptor()), True)  # a tombstone reads as null

    def decoder(self, registry: RegistryClient) -> FramedProtobufDecoder:
        return FramedProtobufDecoder(self)


def _file(b64: str, name: str) -> tuple[descriptor_pb2.FileDescriptorProto, str]:
    fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.standard_b64decode(b64))
    fdp.name = name  # the registry answers each file as "default"; an import names it by its reference name
    return fdp, base64.standard_b64encode(fdp.SerializeToString()).decode("ascii")


def _well_known(name: str) -> str | None:
    if not name.startswith(("google/protobuf/", "google/type/")) or not name.endswith(".proto"):
        return None
    try:
        module = importlib.import_module(name.removesuffix(".proto").replace("/", ".") + "_pb2")
    except ImportError:
        return None
    return base64.standard_b64encode(module.DESCRIPTOR.serialized_pb).decode("ascii")


def resolve_column(registry: RegistryClient, f: ColumnFormat) -> ProtobufColumn:
    """On the driver: the subject's version (with its references) as descriptors, and the message read."""
    assert f.subject is not None
    body = registry.version_info(f.subject, f.version or "latest", "serialized")
    kind = body.get("schemaType", "AVRO")
    if kind != "PROTOBUF":
        raise ProtobufSchemaError(f"subject {f.subject!r} version {body['version']} is a {kind} schema, not "
                                  f"PROTOBUF ({f.column}.format=protobuf)")
    files: dict[str, str] = {}

    def add(refs: Sequence[dict[str, Any]], chain: tuple[str, ...]) -> None:
        for r in refs:
            name = r["name"]
            if name in files:
                continue
            if name in chain:
                raise ProtobufSchemaError(f"import cycle through {name!r}")
            ref = registry.version_info(r["subject"], r["version"], "serialized")
            add(ref.get("references") or [], (*chain, name))
            fdp, files[name] = _file(ref["schema"], name)
            imports(fdp)

    def imports(fdp: descriptor_pb2.FileDescriptorProto) -> None:
        for dep in fdp.dependency:
            if dep not in files:
                known = _well_known(dep)
                if known is not None:
                    files[dep] = known
                    imports(descriptor_pb2.FileDescriptorProto.FromString(base64.standard_b64decode(known)))

    add(body.get("references") or [], ())
    main, main_b64 = _file(body["schema"], "default")
    imports(main)
    ordered = _ordered(files)
    message = _message_name(main, f.message)
    column = ProtobufColumn(f.column, f.subject, int(body["version"]), int(body["id"]), (*ordered, main_b64),
                            message, message_indexes(main, message), f.mode)
    column.spark_field()  # refuses what has no Spark type now, when the query is defined
    return column


def _ordered(files: dict[str, str]) -> list[str]:
    """The files each after its imports (a DescriptorPool links a file against those already added)."""
    parsed = {n: descriptor_pb2.FileDescriptorProto.FromString(base64.standard_b64decode(b)) for n, b in files.items()}
    out: list[str] = []
    done: set[str] = set()

    def visit(name: str) -> None:
        if name in done or name not in parsed:
            return
        done.add(name)
        for dep in parsed[name].dependency:
            visit(dep)
        out.append(files[name])

    for name in files:
        visit(name)
    return out


def _message_name(fdp: descriptor_pb2.FileDescriptorProto, wanted: str | None) -> str:
    prefix = f"{fdp.package}." if fdp.package else ""
    if not fdp.message_type:
        raise ProtobufSchemaError("the schema defines no message")
    if wanted is None:
        return prefix + fdp.message_type[0].name
    names: list[str] = []

    def walk(messages: Sequence[Any], scope: str) -> None:
        for m in messages:
            names.append(f"{scope}{m.name}")
            walk(m.nested_type, f"{scope}{m.name}.")

    walk(fdp.message_type, prefix)
    exact = [n for n in names if n == wanted.removeprefix(".")]
    simple = [n for n in names if n.rsplit(".", 1)[-1] == wanted]
    found = exact or simple
    if len(found) != 1:
        raise ProtobufSchemaError(f"protobuf.message {wanted!r} names {'several' if found else 'no'} message of the "
                                  f"schema ({', '.join(names)})")
    return found[0]


class FramedProtobufDecoder:
    """Decodes one column of Arrow batches from Confluent-framed Protobuf into the message's Arrow type."""

    def __init__(self, column: ProtobufColumn) -> None:
        from pyspark.sql.pandas.types import to_arrow_type

        self.column = column
        descriptor = column.descriptor()
        dt, self._convert = _message(descriptor, ())
        self._parse = message_factory.GetMessageClass(descriptor).FromString
        self.arrow_type = to_arrow_type(dt, timezone="UTC")

    def decode(self, data: list[bytes | None], offsets: pa.Array, where: str) -> pa.Array:
        """The column's values (None stays null); raises ValueError naming the offset under FAILFAST."""
        out: list[Any] = []
        c = self.column
        parse, convert, permissive, size, wanted = self._parse, self._convert, c.mode == PERMISSIVE, _HEADER.size, \
            c.indexes
        for i, value in enumerate(data):
            if value is None:
                out.append(None)
                continue
            schema_id = -1
            try:
                if len(value) < size + 1 or value[0] != MAGIC:
                    raise ValueError("not in Confluent's wire format (magic byte 0, a 4-byte schema id, message "
                                     "indexes)")
                schema_id = _HEADER.unpack_from(value)[1]
                indexes, start = read_indexes(value, size)
                if indexes != wanted:
                    raise ValueError(f"its message indexes {list(indexes)} are not those of {c.message} "
                                     f"{list(wanted)}")
                out.append(convert(parse(value[start:])))
            except Exception as e:  # DecodeError, ValueError, ...
                if permissive:
                    out.append(None)
                    continue
                raise ValueError(
                    f"{c.column} at {where} offset {offsets[i].as_py()} (schema id {schema_id}) cannot be read as "
                    f"the query's {c.column} message {c.message} (Protobuf subject {c.subject} version {c.version}, "
                    f"id {c.schema_id}): {e}. mode=PERMISSIVE reads such records as null") from None
        return pa.array(out, type=self.arrow_type)
