"""The registry service's REST Proxy path (encode_embedded, encode_v3, decode_framed) without a cluster.

Written from confluentinc/kafka-rest: controllers/SchemaManagerImpl.java (a given schema is registered under the
topic-name strategy's subject, an id is looked up; v3's getSchema: schema_id, else schema_version, else the raw
schema, else the subject's latest), controllers/SchemaRecordSerializerImpl.java (a null key or value stays null,
one without its schema is Errors.keySchemaMissingException 42201 / valueSchemaMissingException 42202) and
Errors.java (42203 conversion failed, 42205 invalid schema). Writes run the primary's plan on the local state.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from broker.api.embedded import parse_schema_body, read_format
from broker.api.records_v3 import needs_registry
from broker.schema_registry import serde
from broker.schema_registry.service import READ_WAIT_MS, SchemaRegistryService
from odradek.protocol import errors as E
from tests.harness.wait import SLOW_MACHINE_S
from tests.unit.schema_registry.in_memory import in_memory_service

USER = json.dumps({"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]})


def service() -> SchemaRegistryService:
    return in_memory_service()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_value_schema_registers_under_the_topic_value_subject_and_frames_each_value() -> None:
    s = service()
    key_id, value_id, keys, values = run(s.encode_embedded("orders", "AVRO", {"value_schema": USER}, [None, None],
                                                           [{"name": "a"}, None]))
    assert key_id is None and keys == [None, None]
    assert s.version("orders-value", "latest").id == value_id
    assert values[1] is None  # a null value is stored as null, as SchemaRecordSerializerImpl does
    assert serde.unframe(values[0])[0] == value_id
    assert s.decode_framed(values[0], "AVRO") == {"name": "a"}
    again = run(s.encode_embedded("orders", "AVRO", {"value_schema_id": value_id}, [None], [{"name": "b"}]))
    assert again[1] == value_id


@pytest.mark.parametrize(("body", "keys", "values", "error"), [
    ({"value_schema": USER}, ["k"], [{"name": "a"}], E.KeySchemaMissingError),
    ({}, [None], [{"name": "a"}], E.ValueSchemaMissingError),
    ({"value_schema": USER}, [None], [{"name": 1}], E.JsonConversionError),
    ({"value_schema": '{"type": "recrd"}'}, [None], [1], E.EmbeddedSchemaInvalidError),
    ({"value_schema": 5}, [None], [1], E.EmbeddedSchemaInvalidError),
    ({"value_schema_id": 99}, [None], [1], E.SchemaNotFoundError),
])
def test_errors_are_kafka_rests(body: dict[str, Any], keys: list[Any], values: list[Any],
                                error: type[E.OdradekError]) -> None:
    with pytest.raises(error):
        run(service().encode_embedded("t", "AVRO", body, keys, values))


def test_a_schema_id_of_the_other_format_is_an_invalid_schema() -> None:
    s = service()
    value_id = run(s.encode_embedded("t", "AVRO", {"value_schema": USER}, [None], [{"name": "a"}]))[1]
    with pytest.raises(E.EmbeddedSchemaInvalidError, match="is AVRO, not JSON"):
        run(s.encode_embedded("t", "JSON", {"value_schema_id": value_id}, [None], [{"n": 1}]))
    framed = run(s.encode_embedded("t", "AVRO", {"value_schema_id": value_id}, [None], [{"name": "a"}]))[3][0]
    with pytest.raises(E.RecordDeserializationError):
        s.decode_framed(framed, "JSON")  # a jsonschema reader meeting an avro record
    with pytest.raises(E.RecordDeserializationError, match="Unknown magic byte"):
        s.decode_framed(b'{"name": "a"}', "AVRO")
    with pytest.raises(E.RecordDeserializationError, match="not found"):
        s.decode_framed(serde.frame(12345, b""), "AVRO")


def test_v3_finds_the_schema_as_schema_manager_impl_does() -> None:
    s = service()
    data, report = run(s.encode_v3("t", "value", {"type": "AVRO", "schema": USER, "data": {"name": "a"}}))
    assert report == {"type": "AVRO", "subject": "t-value", "schema_id": report["schema_id"], "schema_version": 1,
                      "size": len(data)}
    for spec in ({"schema_id": report["schema_id"]}, {"schema_version": 1}, {}, {"type": "avro"}):
        again, same = run(s.encode_v3("t", "value", {**spec, "data": {"name": "a"}}))
        assert (again, same) == (data, report), spec
    assert run(s.encode_v3("t", "value", {"data": None}))[0] is None
    with pytest.raises(E.SubjectNotFoundError):
        run(s.encode_v3("t", "key", {"data": "k"}))  # nothing registered under t-key
    with pytest.raises(E.InvalidRequestError):
        run(s.encode_v3("t", "value", {"subject_name_strategy": "RECORD_NAME", "data": {"name": "a"}}))
    with pytest.raises(E.EmbeddedSchemaInvalidError):
        run(s.encode_v3("t", "value", {"type": "JSONSCHEMA", "schema_id": report["schema_id"], "data": 1}))


def test_parsing_and_negotiation_of_the_schema_formats() -> None:
    doc, keys, values, named = parse_schema_body(
        b'{"value_schema_id": 1, "records": [{"value": {"a": 1}}, {"key": "k", "value": null, "partition": 2}]}',
        100)
    assert (doc["value_schema_id"], keys, values, named) == (1, [None, "k"], [{"a": 1}, None], [None, 2])
    with pytest.raises(E.ConstraintViolationError):
        parse_schema_body(b'{"records": [{"value": 1, "timestamp": 5}]}', 100)
    assert read_format("application/vnd.kafka.avro.v2+json") == ("avro", "application/vnd.kafka.avro.v2+json")
    assert read_format("application/vnd.kafka.jsonschema.v2+json")[0] == "jsonschema"
    assert needs_registry({"type": "AVRO", "data": 1}) and needs_registry({"data": 1})
    assert needs_registry({"type": "PROTOBUF", "data": 1}) and not needs_registry({"type": "JSON", "data": 1})
    assert read_format("application/vnd.kafka.protobuf.v2+json")[0] == "protobuf"


def test_a_read_waits_briefly_for_an_id_the_local_copy_has_not_applied_yet() -> None:
    """await_ids returns at once for known ids and unframed data, and gives up (leaving the refusal to
    decode_framed) after its bound for an id that never arrives."""
    s = service()
    value_id = run(s.encode_embedded("t", "AVRO", {"value_schema": USER}, [None], [{"name": "a"}]))[1]

    give_up_s = 0.2

    async def check() -> float:
        loop = asyncio.get_running_loop()
        start = loop.time()
        # "At once": far sooner than the bound it was given, which a wait for the ids would run out.
        await s.await_ids([serde.frame(value_id, b""), b"not framed", None], timeout_s=SLOW_MACHINE_S)
        assert loop.time() - start < SLOW_MACHINE_S / 2
        start = loop.time()
        await s.await_ids([serde.frame(value_id + 100, b"")], timeout_s=give_up_s)
        return loop.time() - start

    # At its own bound, not at the default one (READ_WAIT_MS) nor never.
    assert give_up_s <= run(check()) < READ_WAIT_MS / 1000
