"""Confluent-framed (de)serialization of JSON keys and values: what the REST Proxy's embedded formats store.

Why here, as pure functions: the REST Proxy's avro, jsonschema and protobuf formats (broker/api/produce.py, the
v2 consumer instances) must write exactly what Confluent's serializers write and read exactly what they read, so
confluent-kafka's ``AvroDeserializer``/``JSONDeserializer``/``ProtobufDeserializer`` read a REST produce
unchanged and the other way round; the rules are table-tested without a cluster
(tests/unit/schema_registry/test_serde.py, test_protobuf.py).

The wire format (Confluent's "Wire format" documentation): a magic byte 0, the schema id as 4 bytes big-endian,
then the payload: Avro's binary encoding of the datum (no container, no schema), for JSON Schema the value's
UTF-8 JSON text, for Protobuf the message indexes then the message (broker/schema_registry/protobuf.py; the REST
Proxy writes the schema's first message, as kafka-rest does). Invariants:
``decode(parsed, unframe(frame(i, encode(parsed, v)))[1])`` gives ``v`` back in Avro's JSON encoding (unions as
``{"type": value}``, bytes as ISO-8859-1 strings), which is the JSON a REST client sends and what kafka-rest
renders on reads (AvroConverter / AvroSchemaUtils.toJson); for Protobuf the JSON comes back as JsonFormat's
printer renders it (json names, defaults included, int64 as strings).
"""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import fastavro
import jsonschema
import orjson
import referencing
import referencing.exceptions
import referencing.jsonschema

from broker.schema_registry import protobuf
from broker.schema_registry.formats import AVRO, PROTOBUF, ParsedSchema
from odradek.protocol.errors import JsonConversionError, RecordDeserializationError

MAGIC = 0
_HEADER = struct.Struct(">bI")


def frame(schema_id: int, payload: bytes) -> bytes:
    """Confluent's framing: magic byte 0, the 4-byte big-endian schema id, the payload."""
    return _HEADER.pack(MAGIC, schema_id) + payload


def unframe(data: bytes) -> tuple[int, bytes]:
    """(schema id, payload) of a framed key or value; RecordDeserializationError when it is not framed, worded
    as Confluent's deserializers word it."""
    if len(data) < _HEADER.size or data[0] != MAGIC:
        raise RecordDeserializationError("Unknown magic byte! The record was not written in Confluent's wire "
                                         "format (magic byte 0, a 4-byte schema id), so no schema decodes it")
    _, schema_id = _HEADER.unpack_from(data)
    return schema_id, data[_HEADER.size:]


def encode(parsed: ParsedSchema, value: Any) -> bytes:
    """The payload of a JSON value under ``parsed``: Avro's binary encoding of the datum read from Avro's JSON
    encoding, the value's JSON text once it validates, or the message indexes and the message (Protobuf's first
    message). JsonConversionError (42203) when it does not fit."""
    if parsed.schema_type == PROTOBUF:
        return protobuf.encode(parsed.obj, value)
    if parsed.schema_type == AVRO:
        try:
            reader = fastavro.json_reader(io.StringIO(json.dumps(value)), parsed.obj)
            datum = next(iter(reader))
            fastavro.validation.validate(datum, parsed.obj, raise_errors=True)
            out = io.BytesIO()
            fastavro.schemaless_writer(out, parsed.obj, datum)
        except Exception as e:  # fastavro raises ValueError, TypeError, KeyError, ValidationError, ...
            raise JsonConversionError(f"Conversion of JSON to Avro failed: {e or type(e).__name__}") from None
        return out.getvalue()
    try:
        error = jsonschema.exceptions.best_match(_json_validator(parsed).iter_errors(value))
    except referencing.exceptions.Unresolvable as e:  # a $ref to nothing registered under that name
        raise JsonConversionError(f"Conversion of JSON to Object failed: cannot resolve $ref {e.ref!r}") from None
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        raise JsonConversionError(f"Conversion of JSON to Object failed: at {where}: {error.message}")
    return orjson.dumps(value)


def _json_validator(parsed: ParsedSchema) -> Any:
    """The schema's validator, its ``$ref``s to referenced schemas resolved from those schemas (registered under
    their reference names, and their ``$id``s), never fetched from anywhere."""
    schema = parsed.obj
    cls = jsonschema.validators.validator_for(schema if isinstance(schema, dict) else {})
    resources: list[tuple[str, referencing.Resource[Any]]] = []
    for name, document in parsed.named.items():
        resource = referencing.Resource.from_contents(document, default_specification=referencing.jsonschema.DRAFT7)
        resources.append((name, resource))
        if resource.id() and resource.id() != name:
            resources.append((str(resource.id()), resource))
    return cls(schema, registry=referencing.Registry().with_resources(resources))


def decode(parsed: ParsedSchema, payload: bytes) -> Any:
    """A payload back as JSON (Avro's JSON encoding for Avro); RecordDeserializationError when it does not
    decode with its schema."""
    if parsed.schema_type == PROTOBUF:
        return protobuf.decode(parsed.obj, payload)
    try:
        if parsed.schema_type == AVRO:
            datum = fastavro.schemaless_reader(io.BytesIO(payload), parsed.obj, None)
            out = io.StringIO()
            fastavro.json_writer(out, parsed.obj, [datum])
            return json.loads(out.getvalue())
        return orjson.loads(payload)
    except Exception as e:  # a truncated or foreign payload: EOFError, ValueError, orjson.JSONDecodeError, ...
        raise RecordDeserializationError(f"Error deserializing {parsed.schema_type} message: {e}") from None
