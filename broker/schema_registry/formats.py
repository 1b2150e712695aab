"""Schema formats: parsing, identity, and the compatibility rules of each format, as pure functions.

Why pure: the rules are the registry's contract and are table-tested from the specifications (the Avro spec's
"Schema Resolution", Confluent's JSON Schema compatibility rules, Confluent's Protobuf SchemaDiff) without a
cluster. Protobuf's parsing, rendering and diff live in ``protobuf`` (a schema there is a whole .proto file).

Compatibility is always asked as "can a reader with schema R read data written with schema W": BACKWARD checks
R = the new schema against W = an earlier one, FORWARD the other way round, FULL both. Each check answers a list
of messages (empty: compatible), worded like Confluent's so clients' verbose output reads the same.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import fastavro
import jsonschema
from fastavro.schema import to_parsing_canonical_form

from broker.schema_registry import protobuf
from broker.schema_registry.json_schema_compat import json_reads
from odradek.protocol.errors import InvalidSchemaError

AVRO, JSON, PROTOBUF = "AVRO", "JSON", "PROTOBUF"
SCHEMA_TYPES = (AVRO, JSON, PROTOBUF)  # what GET /schemas/types lists: the formats this registry parses

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")


@dataclass(frozen=True, slots=True)
class ParsedSchema:
    """A schema that parsed. ``canonical`` is its identity in the registry (the same text registered twice gets
    the same id, whatever its whitespace); ``obj`` is the parsed form the compatibility rules read, with
    ``named`` the Avro named types it and its references define (for JSON Schema: the schemas it references, by
    reference name, parsed). For Protobuf, ``obj`` is a
    :class:`~broker.schema_registry.protobuf.ProtoSchema` and ``canonical`` its rendered .proto text, the same
    whether the schema came as text or as base64 of a descriptor."""

    schema_type: str
    canonical: str
    obj: Any
    named: dict[str, Any] = field(default_factory=dict)


Reference = str | tuple[str, str]  # a referenced schema's text, or (its reference name, its text)


def parse(schema_type: str, text: str, references: Sequence[Reference] | None = None, *,
          normalize: bool = False) -> ParsedSchema:
    """Parse ``text`` as ``schema_type``; ``references`` are the referenced schemas' texts (or (name, text)
    pairs), parsed first so their named types resolve (Avro), or the files a Protobuf schema imports, by their
    reference names (each one's own references before it). Raises InvalidSchemaError (42201) with the parser's
    reason."""
    schema_type = (schema_type or AVRO).upper()
    if schema_type not in SCHEMA_TYPES:
        raise InvalidSchemaError(f"Invalid schema type {schema_type}; supported: {', '.join(SCHEMA_TYPES)}")
    if schema_type == PROTOBUF:
        named_refs = [r for r in references or [] if not isinstance(r, str)]
        if len(named_refs) != len(references or []):
            raise InvalidSchemaError("Invalid schema: a Protobuf reference needs its name (the file it is imported as)")
        schema = protobuf.parse(text, named_refs)
        return ParsedSchema(PROTOBUF, schema.text, schema)
    texts = [r if isinstance(r, str) else r[1] for r in references or []]
    try:
        obj = json.loads(text)
    except (TypeError, ValueError, RecursionError) as e:
        raise InvalidSchemaError(f"Invalid schema {text!r}: not JSON ({e})") from None
    if schema_type == AVRO:
        named: dict[str, Any] = {}
        try:
            for ref in texts:
                fastavro.parse_schema(json.loads(ref), named_schemas=named, _write_hint=False)
            parsed = fastavro.parse_schema(obj, named_schemas=named, _write_hint=False)
            canonical = to_parsing_canonical_form(parsed) if normalize else _compact(obj)
        except Exception as e:  # fastavro raises several types (SchemaParseException, UnknownType, ...)
            raise InvalidSchemaError(f"Invalid schema {text}: {e}") from None
        return ParsedSchema(AVRO, canonical, parsed, named)
    if not isinstance(obj, dict | bool):
        raise InvalidSchemaError(f"Invalid schema {text}: a JSON Schema is an object or a boolean")
    referenced: dict[str, Any] = {}
    for ref in references or []:
        if not isinstance(ref, str):  # (reference name, text): what a $ref may name, for the compatibility checks
            try:
                referenced[ref[0]] = json.loads(ref[1])
            except (TypeError, ValueError, RecursionError) as e:
                raise InvalidSchemaError(f"Invalid schema: reference {ref[0]!r} is not JSON ({e})") from None
    try:
        jsonschema.validators.validator_for(obj if isinstance(obj, dict) else {}).check_schema(obj)
    except jsonschema.SchemaError as e:
        raise InvalidSchemaError(f"Invalid schema {text}: {e.message}") from None
    except (RecursionError, TypeError, ValueError) as e:
        raise InvalidSchemaError(f"Invalid schema {text}: {e}") from None
    return ParsedSchema(JSON, _compact(obj), obj, referenced)


def _compact(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), sort_keys=False)


def record_name(schema: ParsedSchema) -> str | None:
    """The schema's name as Confluent's ``ParsedSchema.name()`` gives it: what the record-name subject
    strategies (RecordNameStrategy, TopicRecordNameStrategy) register under. Why here: the name is a fact of
    each format, read from the parsed schema, so the REST Proxy's subject follows the same parse the registry
    stored. Avro (AvroSchema.name): a record's (or error's) full name, else None. JSON Schema (JsonSchema.name,
    ``getString("title")``): the top-level ``title``, else None (a boolean schema has none; a title that is
    not a string never gets here, as ``parse`` refuses it against the metaschema). Protobuf
    (ProtobufSchema.name): the first message's full name (``package.Name``), else the first enum's; a file
    with neither raises InvalidSchemaError, as Confluent's IllegalArgumentException. None means "not a record":
    the caller refuses it as the strategy does."""
    if schema.schema_type == PROTOBUF:
        file = schema.obj.file
        types = list(file.message_type) or list(file.enum_type)
        if not types:
            raise InvalidSchemaError("Protobuf schema definition contains no type definitions")
        return f"{file.package}.{types[0].name}" if file.package else str(types[0].name)
    if schema.schema_type == AVRO:
        obj = _avro_type(schema.obj, schema.named)  # a bare name of a referenced record is that record
        if isinstance(obj, dict) and obj.get("type") in ("record", "error"):
            return str(obj["name"])  # fastavro's parse leaves the full name (namespace applied) here
        return None
    title = schema.obj.get("title") if isinstance(schema.obj, dict) else None
    return title if isinstance(title, str) else None  # parse's metaschema check keeps a title a string


def check(level: str, new: ParsedSchema, previous: list[ParsedSchema]) -> list[str]:
    """Messages for each way ``new`` breaks ``level`` against ``previous`` (newest first; the caller passes
    only the latest for the non-transitive levels); empty when compatible."""
    level = level.upper()
    if level == "NONE":
        return []
    out: list[str] = []
    for old in previous:
        if old.schema_type != new.schema_type:
            out.append(f"Incompatible schema type: {new.schema_type} against {old.schema_type}")
            continue
        if level.startswith(("BACKWARD", "FULL")):
            out += [f"{m} (BACKWARD: the new schema reads data written with an earlier one)"
                    for m in reads(new, old)]
        if level.startswith(("FORWARD", "FULL")):
            out += [f"{m} (FORWARD: an earlier schema reads data written with the new one)"
                    for m in reads(old, new)]
    return out


def reads(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    """Whether ``reader`` can read what ``writer`` wrote: the reasons it cannot (empty: it can)."""
    if reader.schema_type == AVRO:
        return avro_reads(reader.obj, writer.obj, reader.named, writer.named)
    if reader.schema_type == PROTOBUF:
        return protobuf.incompatibilities(reader.obj, writer.obj)
    return json_reads(reader.obj, writer.obj, reader.named, writer.named)


# ------------------------------------------------------------------------------------------------------ Avro
# The Avro specification, "Schema Resolution": the reader's schema resolves the writer's when the types match
# (with the listed promotions), records match by name with every reader field either in the writer or
# defaulted, enums keep every writer symbol (or the reader has a default), unions resolve branch by branch.

_PROMOTIONS = {"int": {"long", "float", "double"}, "long": {"float", "double"}, "float": {"double"},
               "string": {"bytes"}, "bytes": {"string"}}
_NAMED = ("record", "enum", "fixed", "error")


def _avro_type(s: Any, named: dict[str, Any]) -> Any:
    """A schema with a named reference (a string naming a defined type) replaced by its definition."""
    if isinstance(s, str) and s in named:
        return named[s]
    return s


def _kind(s: Any) -> str:
    if isinstance(s, list):
        return "union"
    if isinstance(s, dict):
        t = s.get("type")
        return t if isinstance(t, str) else _kind(t)
    return str(s)


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def avro_reads(reader: Any, writer: Any, rnamed: dict[str, Any] | None = None,
               wnamed: dict[str, Any] | None = None, path: str = "/",
               seen: set[tuple[str, str]] | None = None) -> list[str]:
    """The Avro spec's schema resolution of ``writer`` by ``reader`` (parsed by fastavro), as messages."""
    rnamed, wnamed, seen = rnamed or {}, wnamed or {}, seen if seen is not None else set()
    r, w = _avro_type(reader, rnamed), _avro_type(writer, wnamed)
    rk, wk = _kind(r), _kind(w)
    if wk == "union":
        out: list[str] = []
        for i, branch in enumerate(w):
            out += avro_reads(r, branch, rnamed, wnamed, f"{path}{i}/", seen)
        return out
    if rk == "union":
        if any(not avro_reads(branch, w, rnamed, wnamed, path, set(seen)) for branch in r):
            return []
        return [f"{{errorType:'MISSING_UNION_BRANCH', description:'The new schema is missing a type inside a union "
                f"field at path '{path}' in the old schema', additionalInfo:'reader union lacking writer type: "
                f"{wk.upper()}'}}"]
    if isinstance(r, dict) and isinstance(r.get("type"), dict | list) and rk not in _NAMED:
        return avro_reads(r["type"], w, rnamed, wnamed, path, seen)
    if isinstance(w, dict) and isinstance(w.get("type"), dict | list) and wk not in _NAMED:
        return avro_reads(r, w["type"], rnamed, wnamed, path, seen)
    if rk != wk:
        if rk in _PROMOTIONS.get(wk, set()):
            return []
        return [f"{{errorType:'TYPE_MISMATCH', description:'The type (path '{path}') of a field in the new schema "
                f"does not match with the old schema', additionalInfo:'reader type: {rk.upper()} not compatible "
                f"with writer type: {wk.upper()}'}}"]
    if rk in _NAMED:
        rname, wname = r.get("name", ""), w.get("name", "")
        aliases = {_short(a) for a in r.get("aliases", [])}
        if _short(rname) != _short(wname) and _short(wname) not in aliases:
            return [f"{{errorType:'NAME_MISMATCH', description:'The name of the schema has changed (path "
                    f"'{path}name')', additionalInfo:'expected: {wname}'}}"]
        if (rname, wname) in seen:  # a recursive type: this pair is being resolved further up
            return []
        seen.add((rname, wname))
    if rk in ("record", "error"):
        return _avro_record(r, w, rnamed, wnamed, path, seen)
    if rk == "enum":
        missing = [s for s in w.get("symbols", []) if s not in r.get("symbols", [])]
        if missing and "default" not in r:
            return [f"{{errorType:'MISSING_ENUM_SYMBOLS', description:'The new schema is missing enum symbols "
                    f"'{missing}' at path '{path}symbols' in the old schema', additionalInfo:'{missing}'}}"]
        return []
    if rk == "fixed":
        if r.get("size") != w.get("size"):
            return [f"{{errorType:'FIXED_SIZE_MISMATCH', description:'The size of FIXED type field at path "
                    f"'{path}size' in the new schema does not match with the old schema', additionalInfo:'expected: "
                    f"{w.get('size')}, found: {r.get('size')}'}}"]
        return []
    if rk == "array":
        return avro_reads(r["items"], w["items"], rnamed, wnamed, f"{path}items/", seen)
    if rk == "map":
        return avro_reads(r["values"], w["values"], rnamed, wnamed, f"{path}values/", seen)
    return []


def _avro_record(r: dict[str, Any], w: dict[str, Any], rnamed: dict[str, Any], wnamed: dict[str, Any], path: str,
                 seen: set[tuple[str, str]]) -> list[str]:
    out: list[str] = []
    wfields = {f["name"]: f for f in w.get("fields", [])}
    for i, rf in enumerate(r.get("fields", [])):
        names = [rf["name"], *rf.get("aliases", [])]
        wf = next((wfields[n] for n in names if n in wfields), None)
        if wf is None:
            if "default" not in rf:
                out.append(f"{{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE', description:'The field "
                           f"'{rf['name']}' at path '{path}fields/{i}' in the new schema has no default value and is "
                           f"missing in the old schema', additionalInfo:'{rf['name']}'}}")
            continue
        out += avro_reads(rf["type"], wf["type"], rnamed, wnamed, f"{path}fields/{i}/type/", seen)
    return out
