"""Confluent-framed Protobuf keys and values in the connector: read into typed columns, write with registration.

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

Writing (``value.format=protobuf`` on the sink). The column must be a struct (a message). On the driver, before any
task: when the subject (``<topic>-value``, or ``value.subject``) has a Protobuf schema whose message (the first, or
``value.protobuf.message``) the struct fits, that version is used as is (a hand-written schema with enums, nested
messages, wrappers keeps its ids and types); otherwise the struct's own schema (``proto_file_for``: a proto3 file,
the inverse of the read mapping) is registered, as base64 of its FileDescriptorProto as Confluent's serializer
registers it, and the registry's compatibility check may refuse it (with ``value.protobuf.message`` set, a misfit is
refused instead). A running query keeps that schema: another version registered meanwhile does not change what it
writes. The struct *fits* a message when each of its fields names a field of the message (exactly, else ignoring
case) of a type it converts to: integral columns (and decimals of scale 0) to any integer field, float/double to
float/double, string to string or enum (by value name), binary to bytes, boolean to bool, timestamp to
``google.protobuf.Timestamp``, a day-time interval to ``Duration``, a scalar to its wrapper, array to a repeated
field, map to a map field, struct to a message field. Each row is encoded with the message class (no protoc):
null fields stay unset (null under ``optional``/message fields, the default otherwise), a null array or map
writes as empty (and a map's entries read back in no set order: Protobuf keeps none); a null element of an
array, a null map value, an enum name the enum lacks or an integer out of the field's range fails the task
naming the column path (``value.lines[2].qty``) and the problem.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DayTimeIntervalType,
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

from odradek.protocol.message_indexes import decode_message_indexes as read_indexes
from odradek.protocol.message_indexes import encode_message_indexes
from odradek_spark.avro import _HEADER, FAILFAST, MAGIC, PERMISSIVE

if TYPE_CHECKING:
    from odradek_spark.options import ColumnFormat
    from odradek_spark.schema_registry import RegistryClient

__all__ = ["FramedProtobufDecoder", "FramedProtobufEncoder", "ProtobufColumn", "ProtobufSchemaError",
           "message_indexes", "proto_file_for", "read_indexes", "resolve_column", "spark_type", "writer_column"]

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
    """One Protobuf-formatted column of a query (read, or written: :func:`writer_column`), resolved on the driver:
    ``files`` the serialized FileDescriptorProtos (base64) of the schema's imports, each after its own, then of the
    schema itself; ``message`` the full name of the message read or written, ``indexes`` its message indexes;
    ``schema_id``, ``subject`` and ``version`` where the schema came from."""

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

    def encoder(self, dt: DataType) -> FramedProtobufEncoder:
        """The encoder of a column of type ``dt``; ProtobufSchemaError when ``dt`` does not fit the message."""
        return FramedProtobufEncoder(self, dt)


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


# ------------------------------------------------------------------------------------- Spark -> .proto


_WELL_KNOWN_FILES = {"google.protobuf.Timestamp": "google/protobuf/timestamp.proto",
                     "google.protobuf.Duration": "google/protobuf/duration.proto"}
TOP_LEVEL = "TopLevelRecord"  # the generated message's name (Spark's to_avro names its record topLevelRecord)


def proto_file_for(dt: DataType, message: str = TOP_LEVEL) -> descriptor_pb2.FileDescriptorProto:
    """The proto3 file the sink registers for a struct column when its subject has no schema it fits: one
    message, each Spark field a field numbered in order, typed as the reader maps them back (the inverse of
    :func:`spark_type`), so what is written reads back with the same types: boolean -> bool, byte/short/int ->
    int32, long -> int64, float, double, string, binary -> bytes, decimal(20,0) -> uint64, timestamp ->
    ``google.protobuf.Timestamp``, day-time interval -> ``Duration``, array -> repeated, map (string, integral or
    boolean keys) -> map, struct -> a message nested in its parent's (named after the field). A nullable scalar is
    ``optional`` (explicit presence), so a null reads back as null rather than as the type's default.

    Raises:
        ProtobufSchemaError: naming the field whose type has no Protobuf form (a date, another decimal, an
        array of arrays, a map of arrays, a name that is not a Protobuf identifier).
    """
    if not isinstance(dt, StructType):
        raise ProtobufSchemaError(f"a Protobuf message is a struct, not {dt.simpleString()}")
    fdp = descriptor_pb2.FileDescriptorProto(name="default", syntax="proto3")
    imports: set[str] = set()
    fdp.message_type.append(_message_proto(dt, message, f".{message}", message, imports))
    fdp.dependency.extend(sorted(imports))
    return fdp


def _message_proto(dt: StructType, name: str, full: str, where: str,
                   imports: set[str]) -> descriptor_pb2.DescriptorProto:
    m = descriptor_pb2.DescriptorProto(name=name)
    taken = {f.name for f in dt.fields}  # fields and nested types share the message's scope
    for number, f in enumerate(dt.fields, start=1):
        path = f"{where}.{f.name}"
        if not f.name.isidentifier() or not f.name.isascii():
            raise ProtobufSchemaError(f"{path}: {f.name!r} is not a Protobuf field name (letters, digits, _)")
        field = m.field.add(name=f.name, number=number)
        kind = f.dataType
        if isinstance(kind, MapType):
            entry = m.nested_type.add(name=_camel(f.name) + "Entry")  # protoc's name; descriptors check it
            entry.options.map_entry = True
            taken.add(entry.name)
            if isinstance(kind.keyType, StructType | ArrayType | MapType) or _scalar_proto(kind.keyType) in (
                    None, FD.TYPE_FLOAT, FD.TYPE_DOUBLE, FD.TYPE_BYTES):
                raise ProtobufSchemaError(f"{path}: a Protobuf map's keys are strings, integers or booleans, not "
                                          f"{kind.keyType.simpleString()}")
            _typed_field(entry.field.add(name="key", number=1, label=FD.LABEL_OPTIONAL), kind.keyType, m, full,
                         f"{path}.key", f.name, taken, imports)
            if isinstance(kind.valueType, ArrayType | MapType):
                raise ProtobufSchemaError(f"{path}: a Protobuf map's value cannot be repeated or a map "
                                          f"({kind.valueType.simpleString()})")
            _typed_field(entry.field.add(name="value", number=2, label=FD.LABEL_OPTIONAL), kind.valueType, m, full,
                         f"{path}.value", f.name, taken, imports)
            field.label = FD.LABEL_REPEATED
            field.type = FD.TYPE_MESSAGE
            field.type_name = f"{full}.{entry.name}"
        elif isinstance(kind, ArrayType):
            if isinstance(kind.elementType, ArrayType | MapType):
                raise ProtobufSchemaError(f"{path}: repeated fields cannot nest ({kind.simpleString()})")
            field.label = FD.LABEL_REPEATED
            _typed_field(field, kind.elementType, m, full, path, f.name, taken, imports)
        else:
            field.label = FD.LABEL_OPTIONAL
            _typed_field(field, kind, m, full, path, f.name, taken, imports)
            if f.nullable and field.type != FD.TYPE_MESSAGE:
                field.proto3_optional = True  # a synthetic oneof of its own, as protoc makes one
                field.oneof_index = len(m.oneof_decl)
                m.oneof_decl.add(name=_synthetic(f.name, taken))
    return m


def _typed_field(field: descriptor_pb2.FieldDescriptorProto, dt: DataType, parent: descriptor_pb2.DescriptorProto,
                 full: str, path: str, field_name: str, taken: set[str], imports: set[str]) -> None:
    """Set ``field``'s type to ``dt``'s: a scalar, a well-known message, or a message nested in ``parent``."""
    if isinstance(dt, StructType):
        name = _unique(_camel(field_name), taken)
        parent.nested_type.append(_message_proto(dt, name, f"{full}.{name}", path, imports))
        field.type = FD.TYPE_MESSAGE
        field.type_name = f"{full}.{name}"
        return
    well_known = ("google.protobuf.Timestamp" if isinstance(dt, TimestampType | TimestampNTZType)
                  else "google.protobuf.Duration" if isinstance(dt, DayTimeIntervalType) else None)
    if well_known is not None:
        imports.add(_WELL_KNOWN_FILES[well_known])
        field.type = FD.TYPE_MESSAGE
        field.type_name = f".{well_known}"
        return
    scalar = _scalar_proto(dt)
    if scalar is None:
        hint = (" (decimal(20,0) is written as uint64; cast other decimals to bigint, double or string)"
                if isinstance(dt, DecimalType) else "")
        raise ProtobufSchemaError(f"{path}: a {dt.simpleString()} has no Protobuf type here{hint}")
    field.type = scalar


def _scalar_proto(dt: DataType) -> int | None:
    if isinstance(dt, DecimalType):
        return FD.TYPE_UINT64 if (dt.precision, dt.scale) == (20, 0) else None
    for spark, proto in _PROTO_OF:
        if isinstance(dt, spark):
            return proto
    return None


_PROTO_OF: tuple[tuple[type[DataType], int], ...] = (
    (BooleanType, FD.TYPE_BOOL), (ByteType, FD.TYPE_INT32), (ShortType, FD.TYPE_INT32), (IntegerType, FD.TYPE_INT32),
    (LongType, FD.TYPE_INT64), (FloatType, FD.TYPE_FLOAT), (DoubleType, FD.TYPE_DOUBLE), (StringType, FD.TYPE_STRING),
    (BinaryType, FD.TYPE_BYTES),
)


def _camel(name: str) -> str:
    """protoc's CamelCase of a field name (``line_items`` -> ``LineItems``), as it names map entries."""
    out, upper = [], True
    for ch in name:
        if ch == "_":
            upper = True
        elif upper:
            out.append(ch.upper())
            upper = False
        else:
            out.append(ch)
    return "".join(out)


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}{n}"
    taken.add(candidate)
    return candidate


def _synthetic(name: str, taken: set[str]) -> str:
    candidate = f"_{name}"
    while candidate in taken:
        candidate = f"X{candidate}"  # protoc prefixes an X too
    taken.add(candidate)
    return candidate


# ------------------------------------------------------------------------------------- Spark -> message


class _RowError(ValueError):
    """A value that cannot be written: ``where`` the path below the column (``.lines[2].qty``), ``why``."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where}: {why}")
        self.where = where
        self.why = why


Fill = Callable[[Any, Any], None]  # (message, non-null Spark value) -> sets the message's fields from it
_INTEGERS = frozenset({FD.TYPE_INT32, FD.TYPE_SINT32, FD.TYPE_SFIXED32, FD.TYPE_INT64, FD.TYPE_SINT64,
                       FD.TYPE_SFIXED64, FD.TYPE_UINT32, FD.TYPE_FIXED32, FD.TYPE_UINT64, FD.TYPE_FIXED64})
_TYPE_NAMES = {v: k.removeprefix("TYPE_").lower() for k, v in vars(FD).items() if k.startswith("TYPE_")}


def _type_name(fd: FieldDescriptor) -> str:
    if fd.type in (FD.TYPE_MESSAGE, FD.TYPE_GROUP):
        return fd.message_type.full_name
    if fd.type == FD.TYPE_ENUM:
        return f"enum {fd.enum_type.full_name}"
    return _TYPE_NAMES.get(fd.type, str(fd.type))


def _struct_filler(m: Descriptor, dt: StructType, where: str) -> Fill:
    """What fills a message ``m`` from Arrow's ``to_pylist`` dict of ``dt``; ProtobufSchemaError when ``dt``
    does not fit ``m`` (a field it lacks, a type it cannot take), naming the column path."""
    if m.full_name in _WELL_KNOWN:
        raise ProtobufSchemaError(f"{where}: a struct cannot be written to {m.full_name}")
    exact = {fd.name: fd for fd in m.fields}
    folded = {fd.name.lower(): fd for fd in m.fields}
    parts: list[tuple[str, str, Callable[[Any, str, Any], None]]] = []
    for f in dt.fields:
        fd = exact.get(f.name) or folded.get(f.name.lower())
        if fd is None:
            raise ProtobufSchemaError(f"{where}.{f.name}: message {m.full_name} has no field {f.name!r} (it has "
                                      f"{', '.join(exact) or 'none'})")
        parts.append((f.name, fd.name, _field_setter(fd, f.dataType, f"{where}.{f.name}")))

    def fill(msg: Any, v: dict[str, Any]) -> None:
        for key, name, put in parts:
            x = v.get(key)
            if x is None:
                continue  # unset: null under presence, the default otherwise
            try:
                put(msg, name, x)
            except _RowError as e:
                raise _RowError(f".{key}{e.where}", e.why) from None
            except (TypeError, ValueError, OverflowError, decimal.InvalidOperation) as e:
                raise _RowError(f".{key}", f"{e} ({_show(x)})") from None
    return fill


def _field_setter(fd: FieldDescriptor, dt: DataType, where: str) -> Callable[[Any, str, Any], None]:
    """What writes a non-null value of ``dt`` into field ``fd`` of a message (by the field's name)."""
    if fd.type == FD.TYPE_MESSAGE and fd.message_type.GetOptions().map_entry:
        if not isinstance(dt, MapType):
            raise ProtobufSchemaError(f"{where}: a {dt.simpleString()} cannot be written to map field {fd.full_name}")
        key_kind, key = _writable(fd.message_type.fields_by_name["key"], dt.keyType, f"{where}.key")
        value_fd = fd.message_type.fields_by_name["value"]
        kind, value = _writable(value_fd, dt.valueType, f"{where}.value")
        assert key_kind == "scalar"
        return _map_setter(key, kind, value)
    if fd.is_repeated:
        if not isinstance(dt, ArrayType):
            raise ProtobufSchemaError(f"{where}: a {dt.simpleString()} cannot be written to repeated field "
                                      f"{fd.full_name} (an array can)")
        kind, item = _writable(fd, dt.elementType, f"{where}[]")
        return _repeated_setter(kind, item)
    kind, one = _writable(fd, dt, where)
    if kind == "message":
        fill = one

        def put_message(msg: Any, name: str, x: Any) -> None:
            sub = getattr(msg, name)
            sub.SetInParent()  # an all-null struct is still a message, not null
            fill(sub, x)
        return put_message
    if one is None:
        return setattr
    conv = one
    return lambda msg, name, x: setattr(msg, name, conv(x))


def _repeated_setter(kind: str, item: Any) -> Callable[[Any, str, Any], None]:
    def null_at(x: list[Any]) -> _RowError:
        return _RowError(f"[{x.index(None)}]", "null: a repeated field cannot hold null")

    if kind == "message":
        fill: Fill = item

        def put_messages(msg: Any, name: str, x: list[Any]) -> None:
            add = getattr(msg, name).add
            for i, e in enumerate(x):
                if e is None:
                    raise null_at(x)
                try:
                    fill(add(), e)
                except _RowError as err:
                    raise _RowError(f"[{i}]{err.where}", err.why) from None
        return put_messages
    conv: Convert | None = item

    def put_scalars(msg: Any, name: str, x: list[Any]) -> None:
        if None in x:
            raise null_at(x)
        getattr(msg, name).extend(x if conv is None else [conv(e) for e in x])
    return put_scalars


def _map_setter(key: Convert | None, kind: str, value: Any) -> Callable[[Any, str, Any], None]:
    def null_at(k: Any) -> _RowError:
        return _RowError(f"[{_show(k)}]", "null: a map value cannot be null in Protobuf")

    if kind == "message":
        fill: Fill = value

        def put_messages(msg: Any, name: str, x: list[tuple[Any, Any]]) -> None:
            m = getattr(msg, name)
            for k, v in x:
                if v is None:
                    raise null_at(k)
                try:
                    fill(m[k if key is None else key(k)], v)
                except _RowError as err:
                    raise _RowError(f"[{_show(k)}]{err.where}", err.why) from None
        return put_messages
    conv: Convert | None = value

    def put_scalars(msg: Any, name: str, x: list[tuple[Any, Any]]) -> None:
        m = getattr(msg, name)
        for k, v in x:
            if v is None:
                raise null_at(k)
            m[k if key is None else key(k)] = v if conv is None else conv(v)
    return put_scalars


def _writable(fd: FieldDescriptor, dt: DataType, where: str) -> tuple[str, Any]:
    """One value of field ``fd`` (its label aside) from a ``dt``: ``("message", fill)`` or ``("scalar",
    convert or None)``; ProtobufSchemaError when ``dt`` cannot be written there."""
    def refuse() -> ProtobufSchemaError:
        return ProtobufSchemaError(f"{where}: a {dt.simpleString()} cannot be written to {_type_name(fd)} field "
                                   f"{fd.full_name}")

    if fd.type in (FD.TYPE_MESSAGE, FD.TYPE_GROUP):
        name = fd.message_type.full_name
        if name == "google.protobuf.Timestamp":
            if not isinstance(dt, TimestampType | TimestampNTZType):
                raise refuse()
            return "message", _fill_timestamp
        if name == "google.protobuf.Duration":
            if not isinstance(dt, DayTimeIntervalType):
                raise refuse()
            return "message", _fill_duration
        if name in _WELL_KNOWN:  # a wrapper: its scalar in .value
            _, conv = _writable(fd.message_type.fields_by_name["value"], dt, where)
            return "message", _fill_wrapper(conv)
        if not isinstance(dt, StructType):
            raise refuse()
        return "message", _struct_filler(fd.message_type, dt, where)
    if fd.type == FD.TYPE_ENUM:
        if isinstance(dt, ByteType | ShortType | IntegerType):
            return "scalar", None  # the number itself (proto3 enums are open)
        if not isinstance(dt, StringType):
            raise refuse()
        return "scalar", _enum_number(fd)
    if fd.type in _INTEGERS:
        if isinstance(dt, ByteType | ShortType | IntegerType | LongType):
            return "scalar", None  # the message checks the field's range
        if isinstance(dt, DecimalType) and dt.scale == 0:
            return "scalar", int
        raise refuse()
    ok = {FD.TYPE_DOUBLE: (FloatType, DoubleType), FD.TYPE_FLOAT: (FloatType, DoubleType),
          FD.TYPE_BOOL: (BooleanType,), FD.TYPE_STRING: (StringType,), FD.TYPE_BYTES: (BinaryType,)}.get(fd.type)
    if ok is None or not isinstance(dt, ok):
        raise refuse()
    return "scalar", None


def _enum_number(fd: FieldDescriptor) -> Convert:
    numbers = {v.name: v.number for v in fd.enum_type.values}
    names = ", ".join(numbers)

    def number(v: str) -> int:
        try:
            return numbers[v]
        except KeyError:
            raise ValueError(f"{v!r} is not a value of enum {fd.enum_type.full_name} ({names})") from None
    return number


def _fill_timestamp(m: Any, v: datetime.datetime) -> None:
    delta = (v if v.tzinfo is not None else v.replace(tzinfo=datetime.UTC)) - _EPOCH  # naive (NTZ): as UTC
    m.seconds = delta.days * 86400 + delta.seconds
    m.nanos = delta.microseconds * 1000


def _fill_duration(m: Any, v: datetime.timedelta) -> None:
    micros = (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds
    seconds, rest = divmod(abs(micros), 1_000_000)
    sign = -1 if micros < 0 else 1  # a Duration's seconds and nanos share its sign
    m.seconds = sign * seconds
    m.nanos = sign * rest * 1000


def _fill_wrapper(conv: Convert | None) -> Fill:
    if conv is None:
        def fill(m: Any, v: Any) -> None:
            m.value = v
        return fill

    def fill_converted(m: Any, v: Any) -> None:
        m.value = conv(v)
    return fill_converted


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


class FramedProtobufEncoder:
    """Encodes a column's Python values (Arrow's ``to_pylist``) as the column's message, framed with its schema
    id and message indexes; a null stays a null (a tombstone), as Confluent's serializers leave it. Building it
    checks that ``dt`` fits the message (ProtobufSchemaError otherwise)."""

    def __init__(self, column: ProtobufColumn, dt: DataType) -> None:
        descriptor = column.descriptor()
        if not isinstance(dt, StructType):
            raise ProtobufSchemaError(f"{column.column}: a {dt.simpleString()} cannot be written as message "
                                      f"{column.message} (a struct can)")
        self.column = column
        self._fill = _struct_filler(descriptor, dt, column.column)
        self._new = message_factory.GetMessageClass(descriptor)
        self._header = _HEADER.pack(MAGIC, column.schema_id) + encode_message_indexes(column.indexes)

    def encode(self, values: list[Any]) -> list[bytes | None]:
        """The framed messages; ValueError naming the column path and the problem for a value that does not
        go into the message."""
        out: list[bytes | None] = []
        new, fill, header = self._new, self._fill, self._header
        for v in values:
            if v is None:
                out.append(None)
                continue
            msg = new()
            try:
                fill(msg, v)
                out.append(header + msg.SerializeToString())
            except _RowError as e:
                raise self._error(f"{self.column.column}{e.where}: {e.why}") from None
            except Exception as e:  # EncodeError: a proto2 required field left unset
                raise self._error(f"{self.column.column}: {e}") from None
        return out

    def _error(self, why: str) -> ValueError:
        c = self.column
        return ValueError(f"a row's {c.column} cannot be written as {c.message} (Protobuf subject {c.subject} version "
                          f"{c.version}, id {c.schema_id}): {why}")


def writer_column(registry: RegistryClient, f: ColumnFormat, dt: DataType) -> ProtobufColumn:
    """On the driver, before any task: the schema a Protobuf column is written with (see the module docstring):
    the subject's latest version when ``dt`` fits its message, else ``dt``'s own schema registered under the
    subject. ProtobufSchemaError (or the registry's RegistryError) says why neither is possible."""
    from odradek_spark.schema_registry import NOT_FOUND, RegistryError

    assert f.subject is not None
    if not isinstance(dt, StructType):
        raise ProtobufSchemaError(f"the {f.column} column must be a struct (a message), not {dt.simpleString()}")
    misfit: str | None = None
    try:
        latest = resolve_column(registry, replace(f, version=None))
    except RegistryError as e:
        if e.code not in NOT_FOUND:
            raise
        if f.message is not None:
            raise ProtobufSchemaError(f"{f.column}.protobuf.message names a message of the subject's schema, but "
                                      f"subject {f.subject!r} has none") from None
    else:
        try:
            latest.encoder(dt)
            return latest
        except ProtobufSchemaError as e:
            misfit = (f"the DataFrame's {f.column} does not fit message {latest.message} of subject {f.subject!r} "
                      f"version {latest.version}: {e}")
            if f.message is not None:
                raise ProtobufSchemaError(misfit) from None
    text = base64.standard_b64encode(proto_file_for(dt).SerializeToString()).decode("ascii")
    try:
        _, version = registry.register_typed(f.subject, text, "PROTOBUF")
    except RegistryError as e:
        if misfit is None:
            raise
        raise ProtobufSchemaError(f"{misfit}; and registering the DataFrame's own schema as a new version was "
                                  f"refused: {e}") from None
    column = resolve_column(registry, replace(f, version=version))
    column.encoder(dt)  # the registered file is the generated one: it fits
    return column
