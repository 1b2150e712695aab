"""Confluent-framed JSON Schema keys and values in the connector: read into typed columns, write with registration.

Why: Confluent's JSON Schema serializers frame a record as its Avro ones do (a magic byte 0, the 4-byte schema id)
followed by the UTF-8 JSON text; ``value.format=json_schema`` (and ``key.format``) reads such a column with the
subject's schema version chosen as for Avro (``value.subject``, default ``<topic>-value``;
``value.schema.version``, default the latest; see :mod:`odradek_spark.avro`).

Reading. The column's Spark type comes from that **reader schema** when the query is defined; each record's JSON
is parsed (orjson) and converted to it. A record that does not fit the type (a string where a number is, a
malformed JSON text, no framing) fails the task naming its offset (``mode=FAILFAST``) or reads as null
(``PERMISSIVE``). The record is not validated against its writer schema (Confluent's deserializer validates only
when configured to): only the fit to the query's types is checked, so a record written under a later version
reads as long as its values fit (new properties are ignored, missing ones read as null).

Types: ``object`` with ``properties`` -> struct (the properties in order, every field nullable as Spark's
``from_json`` makes them: ``required`` is not checked); ``object`` with an ``additionalProperties`` schema and no
properties -> map<string, T>; ``array`` with an ``items`` schema -> array; ``string`` -> string, with ``format``
``date`` -> date and ``date-time`` -> timestamp (RFC 3339 text; one without an offset is UTC); ``integer`` ->
long; ``number`` -> double; ``boolean`` -> boolean; an ``enum`` or ``const`` of strings -> string; a type list
or ``oneOf``/``anyOf`` with ``null`` -> that type, nullable; of ``integer`` and ``number`` -> double; of objects
-> one struct of all their properties; of other mixtures -> string (a string value as is, any other value as
its JSON text, as ``from_json`` reads JSON into a string field); ``$ref`` to a part of the same schema
(``#/definitions/...``, ``#/$defs/...``) is followed, and so is one to another registered schema: the version's
``references`` (name, subject, version), fetched on the driver with their own references, transitively, are
found as the registry finds them, by the reference's name or by the referenced schema's ``$id`` (``other.json``,
``other.json#/definitions/X``; a ``$ref`` inside a referenced schema is relative to that schema). Anything else
(a schema accepting any value, ``allOf``, tuples, recursive references, a ``$ref`` naming no reference) is
refused when the query is defined. A JSON null reads as null wherever it is.

Writing. A column (struct, array, map with string keys, string, integer types, float/double, decimal, boolean,
date, timestamp) is written as JSON text under the JSON Schema ``json_schema_for`` derives from its type
(a nullable field may be null), registered as ``JSON`` under ``<topic>-value`` on the driver, framed with its id.
"""

from __future__ import annotations

import datetime
import decimal
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

import orjson
import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    ByteType,
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

from odradek_spark.avro import _HEADER, FAILFAST, MAGIC, PERMISSIVE

if TYPE_CHECKING:
    from odradek_spark.options import ColumnFormat
    from odradek_spark.schema_registry import RegistryClient

__all__ = ["FramedJsonDecoder", "FramedJsonEncoder", "JsonSchemaColumn", "JsonSchemaError", "json_schema_for",
           "resolve_column", "spark_type"]

Convert = Callable[[Any], Any]  # a non-null JSON value -> what Arrow builds the Spark type from; raises _Mismatch


class JsonSchemaError(ValueError):
    """A JSON Schema the connector cannot map to Spark types, or a Spark type it cannot write as JSON."""


class _Mismatch(ValueError):
    pass


# --------------------------------------------------------------------------------------- JSON Schema -> Spark


def spark_type(schema: Any, references: Sequence[tuple[str, Any]] = ()) -> tuple[DataType, bool]:
    """``(Spark type, nullable)`` of a JSON Schema (a parsed JSON document); ``references`` the registered schemas
    its ``$ref`` may name, as (reference name, parsed document)."""
    dt, nullable, _ = _map(schema, _Family(schema, references).main, ())
    return dt, nullable


def _converter(schema: Any, references: Sequence[tuple[str, Any]] = ()) -> tuple[DataType, Convert]:
    dt, _, conv = _map(schema, _Family(schema, references).main, ())
    return dt, conv


class _Doc:
    """One schema document a ``$ref`` may point into: ``key`` "" for the schema itself, else its reference name;
    ``base`` its ``$id`` without a fragment (a ``$ref`` naming it is a reference to itself)."""

    def __init__(self, key: str, document: Any, family: _Family) -> None:
        self.key = key
        self.document = document
        self.family = family
        sid = document.get("$id", document.get("id")) if isinstance(document, dict) else None
        self.base = sid.split("#", 1)[0] if isinstance(sid, str) and sid.split("#", 1)[0] else None


class _Family:
    """A schema and the registered schemas it references (transitively): where each ``$ref`` goes, as the
    registry resolves it (broker/schema_registry/json_schema_compat.py): the part before ``#`` names a
    reference by its name or by its ``$id``, exactly or resolved against the referring document's ``$id``."""

    def __init__(self, schema: Any, references: Sequence[tuple[str, Any]]) -> None:
        self.main = _Doc("", schema, self)
        self.named = {name: _Doc(name, doc, self) for name, doc in references}

    def find(self, name: str, base: str | None) -> _Doc | None:
        wanted = [name] if base is None else [name, urljoin(base, name)]
        for w in wanted:
            if w in self.named:
                return self.named[w]
        for w in wanted:
            for doc in (self.main, *self.named.values()):
                if doc.base is not None and doc.base == w:
                    return doc
        return None


def _resolve(ref: str, root: _Doc) -> tuple[Any, _Doc, str]:
    """``(the schema ref names, the document it is in, a key naming that place across documents)``."""
    target, _, fragment = ref.partition("#")
    doc = root
    if target and target != root.base:
        found = root.family.find(target, root.base)
        if found is None:
            names = ", ".join(root.family.named) or "none"
            raise JsonSchemaError(f"$ref {ref!r} names a schema that is neither this one nor one of its references "
                                  f"(by name or $id; references: {names})")
        doc = found
    if fragment and not fragment.startswith("/"):
        raise JsonSchemaError(f"$ref {ref!r}: only JSON pointers (#/...) are read, not anchors")
    node = doc.document
    for raw in [p for p in fragment.split("/") if p]:
        part = raw.replace("~1", "/").replace("~0", "~")
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError, TypeError):
            raise JsonSchemaError(f"$ref {ref!r} names nothing in the schema") from None
    return node, doc, f"{doc.key}#{fragment}"


def _map(s: Any, root: _Doc, seen: tuple[str, ...]) -> tuple[DataType, bool, Convert]:
    if not isinstance(s, dict) or not s:
        raise JsonSchemaError(f"the JSON Schema {json.dumps(s)} accepts any value: it has no Spark type")
    if "$ref" in s:
        ref = s["$ref"]
        node, doc, key = _resolve(ref, root)
        if key in seen:
            raise JsonSchemaError(f"recursive $ref {ref!r} cannot be a Spark type")
        return _map(node, doc, (*seen, key))
    for key in ("oneOf", "anyOf"):
        if key in s:
            return _branches([_branch(b, root, seen) for b in s[key]], key)
    if "allOf" in s:
        raise JsonSchemaError("allOf has no Spark type here")
    kind = s.get("type")
    if kind is None:
        if "properties" in s or "additionalProperties" in s:
            kind = "object"
        elif "items" in s:
            kind = "array"
        else:
            values = s.get("enum", [s["const"]] if "const" in s else None)
            if values and all(isinstance(v, str) or v is None for v in values):
                return StringType(), None in values, _string
            raise JsonSchemaError(f"the JSON Schema {json.dumps(s)} has no type the connector maps to Spark")
    if isinstance(kind, list):
        return _branches([_branch({**s, "type": k}, root, seen) if k != "null" else None for k in kind], "type")
    return _typed(kind, s, root, seen)


def _branch(s: Any, root: _Doc, seen: tuple[str, ...]) -> tuple[DataType, bool, Convert] | None:
    """A union's branch; None for ``null``."""
    if isinstance(s, dict) and s.get("type") == "null":
        return None
    return _map(s, root, seen)


def _branches(branches: list[tuple[DataType, bool, Convert] | None], key: str) -> tuple[DataType, bool, Convert]:
    others = [b for b in branches if b is not None]
    nullable = len(others) < len(branches) or any(b[1] for b in others)
    if not others:
        raise JsonSchemaError(f"a {key} of only null has no Spark type")
    if len(others) == 1 or all(b[0] == others[0][0] for b in others[1:]):
        if len(others) == 1:
            return others[0][0], nullable, others[0][2]
        convs = [b[2] for b in others]
        return others[0][0], nullable, _first_fit(convs)
    types = {type(b[0]) for b in others}
    if types == {LongType, DoubleType}:
        return DoubleType(), nullable, _double
    if types == {StructType}:
        fields: dict[str, StructField] = {}
        convs: dict[str, Convert] = {}
        for dt, _, conv in others:
            assert isinstance(dt, StructType)
            for f in dt.fields:
                if f.name in fields and fields[f.name].dataType != f.dataType:
                    raise JsonSchemaError(f"the {key} branches give property {f.name!r} different types "
                                          f"({fields[f.name].dataType.simpleString()}, {f.dataType.simpleString()})")
                fields[f.name] = f
            convs.update(getattr(conv, "fields", {}))
        struct = StructType(list(fields.values()))
        return struct, nullable, _object(list(convs.items()))
    return StringType(), nullable, _json_text


def _first_fit(convs: list[Convert]) -> Convert:
    def conv(v: Any) -> Any:
        for c in convs[:-1]:
            try:
                return c(v)
            except _Mismatch:
                pass
        return convs[-1](v)
    return conv


def _typed(kind: Any, s: dict[str, Any], root: _Doc, seen: tuple[str, ...]) -> tuple[DataType, bool, Convert]:
    if kind == "object":
        props = s.get("properties")
        extra = s.get("additionalProperties")
        if props:
            fields, convs = [], []
            for name, sub in props.items():
                dt, _, conv = _map(sub, root, seen)
                fields.append(StructField(name, dt, True))
                convs.append((name, conv))
            return StructType(fields), False, _object(convs)
        if isinstance(extra, dict) and extra:
            dt, _, conv = _map(extra, root, seen)
            return MapType(StringType(), dt, True), False, _map_of(conv)
        raise JsonSchemaError("an object without properties or an additionalProperties schema has no Spark type")
    if kind == "array":
        items = s.get("items")
        if not isinstance(items, dict):
            raise JsonSchemaError("an array needs one items schema (tuples have no Spark type here)")
        dt, _, conv = _map(items, root, seen)
        return ArrayType(dt, True), False, _array(conv)
    if kind == "string":
        fmt = s.get("format")
        if fmt == "date":
            return DateType(), False, _date
        if fmt == "date-time":
            return TimestampType(), False, _timestamp
        return StringType(), False, _string
    simple = _SIMPLE.get(kind)
    if simple is None:
        raise JsonSchemaError(f"JSON Schema type {kind!r} has no Spark type here")
    return simple[0], False, simple[1]


# ----------------------------------------------------------------------------------- JSON values -> Arrow


def _long(v: Any) -> int:
    if type(v) is int and -(1 << 63) <= v < (1 << 63):
        return v
    if type(v) is float and v.is_integer() and -(2.0 ** 63) <= v < 2.0 ** 63:
        return int(v)
    raise _Mismatch(f"{_show(v)} is not a long")


def _double(v: Any) -> float:
    if type(v) is float or type(v) is int:
        return float(v)
    raise _Mismatch(f"{_show(v)} is not a number")


def _boolean(v: Any) -> bool:
    if type(v) is bool:
        return v
    raise _Mismatch(f"{_show(v)} is not a boolean")


def _string(v: Any) -> str:
    if type(v) is str:
        return v
    raise _Mismatch(f"{_show(v)} is not a string")


def _json_text(v: Any) -> str:
    return v if type(v) is str else orjson.dumps(v).decode()


def _date(v: Any) -> datetime.date:
    try:
        return datetime.date.fromisoformat(_string(v))
    except ValueError:
        raise _Mismatch(f"{_show(v)} is not a date (YYYY-MM-DD)") from None


def _timestamp(v: Any) -> datetime.datetime:
    try:
        ts = datetime.datetime.fromisoformat(_string(v).upper())  # RFC 3339 allows a lower-case t and z
    except ValueError:
        raise _Mismatch(f"{_show(v)} is not an RFC 3339 date-time") from None
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=datetime.UTC)


_SIMPLE: dict[str, tuple[DataType, Convert]] = {
    "integer": (LongType(), _long), "number": (DoubleType(), _double), "boolean": (BooleanType(), _boolean),
}


def _object(convs: list[tuple[str, Convert]]) -> Convert:
    def conv(v: Any) -> dict[str, Any]:
        if type(v) is not dict:
            raise _Mismatch(f"{_show(v)} is not an object")
        return {name: None if (x := v.get(name)) is None else c(x) for name, c in convs}
    conv.fields = dict(convs)  # type: ignore[attr-defined]  # merged by a union of objects
    return conv


def _array(item: Convert) -> Convert:
    def conv(v: Any) -> list[Any]:
        if type(v) is not list:
            raise _Mismatch(f"{_show(v)} is not an array")
        return [None if x is None else item(x) for x in v]
    return conv


def _map_of(value: Convert) -> Convert:
    def conv(v: Any) -> list[tuple[str, Any]]:
        if type(v) is not dict:
            raise _Mismatch(f"{_show(v)} is not an object")
        return [(k, None if x is None else value(x)) for k, x in v.items()]
    return conv


def _show(v: Any) -> str:
    text = orjson.dumps(v).decode() if not isinstance(v, datetime.date) else str(v)
    return text if len(text) <= 60 else text[:57] + "..."


# --------------------------------------------------------------------------------------- Spark -> JSON Schema


def json_schema_for(dt: DataType) -> dict[str, Any]:
    """The JSON Schema the sink registers for a column of type ``dt`` (a nullable part may also be null)."""
    if isinstance(dt, BooleanType):
        return {"type": "boolean"}
    if isinstance(dt, ByteType | ShortType | IntegerType | LongType):
        return {"type": "integer"}
    if isinstance(dt, FloatType | DoubleType | DecimalType):
        return {"type": "number"}
    if isinstance(dt, StringType):
        return {"type": "string"}
    if isinstance(dt, DateType):
        return {"type": "string", "format": "date"}
    if isinstance(dt, TimestampType | TimestampNTZType):
        return {"type": "string", "format": "date-time"}
    if isinstance(dt, ArrayType):
        return {"type": "array", "items": _nullable(json_schema_for(dt.elementType), dt.containsNull)}
    if isinstance(dt, MapType):
        if not isinstance(dt.keyType, StringType):
            raise JsonSchemaError(f"a JSON object has string keys, not {dt.keyType.simpleString()}")
        return {"type": "object",
                "additionalProperties": _nullable(json_schema_for(dt.valueType), dt.valueContainsNull)}
    if isinstance(dt, StructType):
        return {"type": "object", "properties": {
            f.name: _nullable(json_schema_for(f.dataType), f.nullable) for f in dt.fields}}
    raise JsonSchemaError(f"a {dt.simpleString()} column cannot be written as JSON")


def _nullable(schema: dict[str, Any], nullable: bool) -> dict[str, Any]:
    return {"oneOf": [{"type": "null"}, schema]} if nullable else schema


def _to_json(dt: DataType) -> Callable[[Any], Any] | None:
    """What turns Arrow's ``to_pylist`` value of ``dt`` into what orjson writes as the schema's JSON (maps are
    lists of pairs there, decimals Decimal, naive timestamps UTC); None when nothing needs changing."""
    if isinstance(dt, MapType):
        value = _to_json(dt.valueType)
        if value is None:
            return dict
        return lambda v: {k: None if x is None else value(x) for k, x in v}
    if isinstance(dt, ArrayType):
        item = _to_json(dt.elementType)
        return None if item is None else (lambda v: [None if x is None else item(x) for x in v])
    if isinstance(dt, StructType):
        active = [(f.name, fx) for f in dt.fields if (fx := _to_json(f.dataType)) is not None]
        if not active:
            return None

        def record(v: dict[str, Any]) -> dict[str, Any]:
            for n, fx in active:
                if v.get(n) is not None:
                    v[n] = fx(v[n])
            return v
        return record
    if isinstance(dt, DecimalType):
        return float
    if isinstance(dt, TimestampType | TimestampNTZType):
        return lambda v: v if v.tzinfo is not None else v.replace(tzinfo=datetime.UTC)
    return None


# -------------------------------------------------------------------------------------- the column codecs


@dataclass(frozen=True)
class JsonSchemaColumn:
    """One JSON-Schema-formatted column of a query, resolved on the driver: ``schema`` the reader (or writer)
    schema's text, ``schema_id`` its id, ``subject`` and ``version`` where it came from."""

    column: str  # "key" or "value"
    subject: str
    version: int
    schema_id: int
    schema: str
    mode: str = FAILFAST
    # The registered schemas its $ref may name, transitively, as (reference name, schema text).
    references: tuple[tuple[str, str], ...] = ()

    def parsed_references(self) -> list[tuple[str, Any]]:
        return [(name, json.loads(text)) for name, text in self.references]

    def spark_field(self) -> StructField:
        dt, _ = spark_type(json.loads(self.schema), self.parsed_references())
        return StructField(self.column, dt, True)  # a null key or value (a tombstone) reads as null

    def decoder(self, registry: RegistryClient) -> FramedJsonDecoder:
        return FramedJsonDecoder(self)

    def encoder(self, dt: DataType) -> FramedJsonEncoder:
        return FramedJsonEncoder(self, dt)


def resolve_column(registry: RegistryClient, f: ColumnFormat) -> JsonSchemaColumn:
    """On the driver: the subject's version with the schemas it references (fetched recursively), checked to
    have a Spark type now, when the query is defined (JsonSchemaError otherwise)."""
    assert f.subject is not None
    body = registry.version_info(f.subject, f.version or "latest")
    kind = body.get("schemaType", "AVRO")
    if kind != "JSON":
        raise JsonSchemaError(f"subject {f.subject!r} version {body['version']} is a {kind} schema, not JSON")
    refs = tuple((name, str(ref["schema"])) for name, ref in registry.referenced(body.get("references") or []))
    column = JsonSchemaColumn(f.column, f.subject, int(body["version"]), int(body["id"]), str(body["schema"]),
                              f.mode, refs)
    try:
        column.spark_field()
    except ValueError as e:  # JsonSchemaError, or a referenced schema that is not JSON
        raise JsonSchemaError(f"subject {f.subject} version {column.version}: {e}") from None
    return column


class FramedJsonDecoder:
    """Decodes one column of Arrow batches from Confluent-framed JSON into the reader schema's Arrow type."""

    def __init__(self, column: JsonSchemaColumn) -> None:
        from pyspark.sql.pandas.types import to_arrow_type

        self.column = column
        dt, self._convert = _converter(json.loads(column.schema), column.parsed_references())
        self.arrow_type = to_arrow_type(dt, timezone="UTC")

    def decode(self, data: list[bytes | None], offsets: pa.Array, where: str) -> pa.Array:
        """The column's values (None stays null); raises ValueError naming the offset under FAILFAST."""
        out: list[Any] = []
        convert, permissive, size = self._convert, self.column.mode == PERMISSIVE, _HEADER.size
        for i, value in enumerate(data):
            if value is None:
                out.append(None)
                continue
            schema_id = -1
            try:
                if len(value) < size or value[0] != MAGIC:
                    raise ValueError("not in Confluent's wire format (magic byte 0, a 4-byte schema id)")
                schema_id = _HEADER.unpack_from(value)[1]
                parsed = orjson.loads(memoryview(value)[size:])
                out.append(None if parsed is None else convert(parsed))
            except (ValueError, orjson.JSONDecodeError) as e:  # _Mismatch is a ValueError
                if permissive:
                    out.append(None)
                    continue
                c = self.column
                raise ValueError(
                    f"{c.column} at {where} offset {offsets[i].as_py()} (schema id {schema_id}) does not fit the "
                    f"query's {c.column} type (JSON Schema subject {c.subject} version {c.version}, id "
                    f"{c.schema_id}): {e}. mode=PERMISSIVE reads such records as null") from None
        return pa.array(out, type=self.arrow_type)


class FramedJsonEncoder:
    """Encodes a column's Python values (Arrow's ``to_pylist``) as framed JSON; a null stays a null (a
    tombstone), as Confluent's serializers leave it."""

    def __init__(self, column: JsonSchemaColumn, dt: DataType) -> None:
        self._header = _HEADER.pack(MAGIC, column.schema_id)
        self._fix = _to_json(dt)

    def encode(self, values: list[Any]) -> list[bytes | None]:
        header, fix = self._header, self._fix
        return [None if v is None else header + orjson.dumps(fix(v) if fix is not None else v,
                                                             default=_default) for v in values]


def _default(v: Any) -> Any:
    if isinstance(v, decimal.Decimal):
        return float(v)
    raise TypeError(f"{type(v).__name__} is not JSON")
