"""Issue 26 point 4: the REST Proxy embedded formats' Confluent framing and encodings (broker/schema_registry/serde.py).

Written from Confluent's "Wire format" documentation (magic byte 0, the 4-byte big-endian schema id, the payload),
kafka-rest's SchemaRecordSerializerImpl / AvroConverter (a v2 avro record's JSON is Avro's JSON encoding: unions
as ``{"branch": value}``, bytes as ISO-8859-1 strings; a record that does not fit is Errors.java's 42203
"Conversion of JSON to Avro failed"), and confluent-kafka's serializers, whose bytes must be what we write.
"""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest

from broker.schema_registry import formats, serde
from odradek.protocol.errors import JsonConversionError, RecordDeserializationError

USER = formats.parse(formats.AVRO, json.dumps({
    "type": "record", "name": "User", "fields": [
        {"name": "name", "type": "string"}, {"name": "age", "type": ["null", "int"]},
        {"name": "raw", "type": "bytes", "default": ""},
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []}]}))
COUNT = formats.parse(formats.JSON, json.dumps({
    "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}))


def test_frame_is_magic_zero_then_the_big_endian_id() -> None:
    """Confluent's wire format, byte for byte; unframe inverts it."""
    framed = serde.frame(0x01020304, b"payload")
    assert framed == b"\x00\x01\x02\x03\x04payload"
    assert serde.unframe(framed) == (0x01020304, b"payload")


@pytest.mark.parametrize("data", [b"", b"\x00\x01", b"\x01\x00\x00\x00\x01x", b'{"n": 1}'])
def test_unframed_data_is_refused_as_confluents_deserializer_refuses_it(data: bytes) -> None:
    """Too short or another magic byte: "Unknown magic byte!" (AbstractKafkaSchemaSerDe.getByteBuffer)."""
    with pytest.raises(RecordDeserializationError, match="Unknown magic byte"):
        serde.unframe(data)


@pytest.mark.parametrize("value", [
    {"name": "ann", "age": None, "raw": "", "tags": []},
    {"name": "bob", "age": {"int": 42}, "raw": "\u00ff\u0000", "tags": ["a", "b"]},
])
def test_avro_round_trips_in_avros_json_encoding(value: dict[str, Any]) -> None:
    """A record's JSON (Avro's JSON encoding) encodes to Avro's binary encoding, which fastavro's own reader
    reads as the datum, and decodes back to the same JSON."""
    payload = serde.encode(USER, value)
    datum = fastavro.schemaless_reader(io.BytesIO(payload), USER.obj, None)
    assert datum["name"] == value["name"]
    assert serde.decode(USER, payload) == value


@pytest.mark.parametrize("value", [
    {"name": 1, "age": None},  # a wrong type
    {"name": "x", "age": 3},  # a union value without its branch name
    {"age": None},  # a missing field without a default
    "just a string",
])
def test_avro_value_that_does_not_fit_is_42203(value: Any) -> None:
    with pytest.raises(JsonConversionError, match="Conversion of JSON to Avro failed") as raised:
        serde.encode(USER, value)
    assert raised.value.error_code == 42203 and raised.value.http_status == 422


def test_json_schema_validates_and_stores_utf8_json() -> None:
    """Confluent's JSON Schema serializer: the value's JSON text after the framing header."""
    assert json.loads(serde.encode(COUNT, {"n": 3, "note": "é"})) == {"n": 3, "note": "é"}
    assert serde.decode(COUNT, serde.encode(COUNT, {"n": 3})) == {"n": 3}
    with pytest.raises(JsonConversionError, match="at n: 'x' is not of type 'integer'"):
        serde.encode(COUNT, {"n": "x"})
    with pytest.raises(JsonConversionError, match="'n' is a required property"):
        serde.encode(COUNT, {})


def test_a_payload_that_does_not_decode_is_a_deserialization_error() -> None:
    with pytest.raises(RecordDeserializationError):
        serde.decode(USER, b"\x02")  # a string of length 1 with no byte after it
    with pytest.raises(RecordDeserializationError):
        serde.decode(COUNT, b"{not json")


def test_confluent_kafka_serializers_write_the_same_bytes() -> None:
    """confluent-kafka's AvroSerializer (with confluent-kafka's mock registry) writes exactly ``frame(id,
    encode(...))`` for the same datum, so a REST produce and a Kafka client produce are interchangeable."""
    pytest.importorskip("confluent_kafka")
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    schema = json.dumps({"type": "record", "name": "P", "fields": [{"name": "n", "type": "long"}]})
    client = SchemaRegistryClient.new_client({"url": "mock://serde-test"})  # its MockSchemaRegistryClient
    serializer = AvroSerializer(client, schema)
    theirs = serializer({"n": 5}, SerializationContext("t", MessageField.VALUE))
    schema_id, _ = serde.unframe(theirs)
    assert theirs == serde.frame(schema_id, serde.encode(formats.parse(formats.AVRO, schema), {"n": 5}))
