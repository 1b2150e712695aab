"""The v3 produce's ``subject_name_strategy`` (the registry service's ``encode_v3``), strategies x branches,
without a cluster.

Every expected subject, version and error is cited to the public source it was read from (a path, the commit of
the stored copy read, and the line):

* kafka-rest ``kafka-rest/src/main/java/io/confluent/kafkarest/controllers/SchemaManagerImpl.java`` @040e2a9a
  (``SMI``): the schema_id branch derives the subject from the fetched schema (:103-107), asks the registry for
  its version under it (:109, getSchemaVersion :116) and reports that subject (:111); the schema_version branch
  (:133) and the latest branch (:255) derive it without a schema (getSchemaSubjectUnsafe: ``subjectName(topic,
  isKey, null)`` :312, null is "Cannot use schema_subject_strategy=... without schema_id or schema." :321); the
  raw schema branch parses, derives (:220-224), registers under it (:233) and reports it (:244-246).
* kafka-rest ``.../resources/v3/ProduceAction.java`` @013bf163 (``PA``): getSchema turns an
  IllegalArgumentException into BadRequestException (400); ``.../entities/v3/ProduceRequest.java`` @1f597563
  (``PR``): ProduceRequestData.Builder.build's checkState "Only one of 'subject_name_strategy' or 'subject' can
  be used.", and EnumSubjectNameStrategy's TOPIC_NAME, RECORD_NAME, TOPIC_RECORD_NAME delegating to
  TopicNameStrategy, RecordNameStrategy, TopicRecordNameStrategy.
* schema-registry ``schema-serializer/.../subject/RecordNameStrategy.java`` @08e6ae23 (``RNS``): null schema is
  a null subject (:48), the subject is ``schema.name()`` (:59), a null name a SerializationException naming
  ``<key|value>.subject.name.strategy`` and the strategy's class (:66); ``TopicRecordNameStrategy.java``
  @056f1314 (``TRNS``): null for a null schema (:40), ``topic + "-" + name`` (:43). kafka-rest's
  ``response/StreamingResponse.java`` @0c4027d9 maps that exception with rest-utils' ``KafkaExceptionMapper``
  @015d8dd1: a KafkaException that is not retriable is 500, error code 50002.
* schema-registry's ``ParsedSchema.name()``: ``AvroSchema.java`` @0041f297 (a RECORD's full name, else null),
  ``JsonSchema.java`` @005598b8 (``getString("title")``: the top-level title's text), ``ProtobufSchema.java``
  @007c5065 (the first message, else the first enum, ``package.Name``; neither is IllegalArgumentException).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from broker.api.records_v3 import error_report
from broker.schema_registry import formats
from broker.schema_registry.service import SchemaRegistryService
from odradek.protocol import errors as E
from tests.unit.schema_registry.in_memory import in_memory_service

TOPIC = "orders"
AVRO = json.dumps({"type": "record", "name": "User", "namespace": "com.acme",
                   "fields": [{"name": "name", "type": "string"}]})
JSON = json.dumps({"title": "Person", "type": "object", "properties": {"name": {"type": "string"}}})
PROTO = 'syntax = "proto3";\npackage acme.v1;\nmessage Order { string name = 1; }\nmessage Line { int32 n = 1; }\n'
DATA = {"name": "a"}

# (v3 type, schema text, the record name Confluent's ParsedSchema.name() gives it)
FORMATS = [("AVRO", AVRO, "com.acme.User"), ("JSONSCHEMA", JSON, "Person"), ("PROTOBUF", PROTO, "acme.v1.Order")]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def expected_subject(strategy: str | None, part: str, name: str) -> str:
    """What each strategy names (PR's EnumSubjectNameStrategy delegates): TopicNameStrategy ``<topic>-<part>``,
    RNS:59 the name, TRNS:43 ``<topic>-<name>``; no strategy is kafka-rest's default, TopicNameStrategy."""
    return {None: f"{TOPIC}-{part}", "TOPIC_NAME": f"{TOPIC}-{part}", "RECORD_NAME": name,
            "TOPIC_RECORD_NAME": f"{TOPIC}-{name}"}[strategy]


def produce(s: SchemaRegistryService, part: str, spec: dict[str, Any]) -> dict[str, Any]:
    return run(s.encode_v3(TOPIC, part, {**spec, "data": DATA}))[1]


def strategy_field(strategy: str | None) -> dict[str, Any]:
    return {} if strategy is None else {"subject_name_strategy": strategy}


STRATEGIES = [None, "TOPIC_NAME", "RECORD_NAME", "TOPIC_RECORD_NAME"]


@pytest.mark.parametrize("part", ["key", "value"])
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize(("kind", "text", "name"), FORMATS)
def test_a_raw_schema_registers_under_the_strategys_subject(kind: str, text: str, name: str, strategy: str | None,
                                                           part: str) -> None:
    """SMI:220-224 derives the subject from the parsed schema, :233 registers there, :244-246 reports it with
    the version there; only that subject is written."""
    s = in_memory_service()
    report = produce(s, part, {"type": kind, "schema": text, **strategy_field(strategy)})
    subject = expected_subject(strategy, part, name)
    assert report["subject"] == subject and report["schema_version"] == 1, "SMI:224,233,246"
    assert s.subjects() == [subject], "SMI:233: registered under the derived subject only"
    assert s.version(subject, "1").id == report["schema_id"]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize(("kind", "text", "name"), FORMATS)
def test_a_schema_id_is_looked_up_under_the_subject_its_schema_names(kind: str, text: str, name: str,
                                                                     strategy: str | None) -> None:
    """SMI:103-107 derives the subject from the schema fetched by id, :109/:116 asks its version there, :111
    reports that subject. Registered under the derived subject: found, with the version it has there."""
    s = in_memory_service()
    subject = expected_subject(strategy, "value", name)
    first = produce(s, "value", {"type": kind, "schema": text, **strategy_field(strategy)})
    report = produce(s, "value", {"schema_id": first["schema_id"], **strategy_field(strategy)})
    assert (report["subject"], report["schema_id"], report["schema_version"]) == (
        subject, first["schema_id"], 1), "SMI:107,109,111"


@pytest.mark.parametrize(("strategy", "error", "message"), [
    # SMI:116 getVersion(subject, schema): the registry's lookup of that subject; the record name's subject
    # does not exist (40401), the topic's subject exists without the schema (40403)
    ("RECORD_NAME", E.SubjectNotFoundError, "Subject 'com.acme.User' not found."),
    ("TOPIC_RECORD_NAME", E.SubjectNotFoundError, f"Subject '{TOPIC}-com.acme.User' not found."),
    ("TOPIC_NAME", E.SchemaNotFoundError, "Schema not found"),
])
def test_a_schema_id_not_under_the_derived_subject_is_the_registrys_lookup_error(
        strategy: str, error: type[E.OdradekError], message: str) -> None:
    s = in_memory_service()
    other = json.dumps({"type": "record", "name": "Other", "fields": []})
    produce(s, "value", {"type": "AVRO", "schema": other})  # orders-value exists, without User
    schema_id = produce(s, "key", {"type": "AVRO", "schema": AVRO})["schema_id"]  # User only under orders-key
    with pytest.raises(error) as e:
        produce(s, "value", {"schema_id": schema_id, "subject_name_strategy": strategy})
    assert e.value.message == message, "SMI:109,116"


@pytest.mark.parametrize("branch", ["schema_version", "latest"])
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("part", ["key", "value"])
def test_schema_version_and_latest_derive_the_subject_without_a_schema(branch: str, strategy: str | None,
                                                                      part: str) -> None:
    """SMI:133 (schema_version) and :255 (latest) call getSchemaSubjectUnsafe (``subjectName(topic, isKey,
    null)``, :312). TopicNameStrategy needs no schema: ``<topic>-<part>``, reported with the version asked
    (:180) or the latest (:291). RNS:48/TRNS:40 answer null without one: :321's IllegalArgumentException,
    PA.getSchema's BadRequestException, 400 for that record."""
    s = in_memory_service()
    first = produce(s, part, {"type": "AVRO", "schema": AVRO, **strategy_field(strategy)})
    spec = {**strategy_field(strategy), **({"schema_version": 1} if branch == "schema_version" else {})}
    if strategy in (None, "TOPIC_NAME"):
        report = produce(s, part, spec)
        assert (report["subject"], report["schema_id"], report["schema_version"]) == (
            f"{TOPIC}-{part}", first["schema_id"], 1), "SMI:133/255, 180/291"
        return
    with pytest.raises(E.InvalidRequestError) as e:
        produce(s, part, spec)
    assert e.value.message == f"Cannot use schema_subject_strategy={strategy} without schema_id or schema.", \
        "SMI:312,321"
    assert error_report(e.value)["error_code"] == 400, "PA.getSchema: BadRequestException"


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_subject_with_a_strategy_is_refused_and_alone_wins(strategy: str | None) -> None:
    """PR: ProduceRequestData.Builder.build's checkState refuses both (a Jackson mapping error: 400 for that
    record, nothing registered); alone, SMI:220's ``subject.orElse(...)`` makes it the subject."""
    s = in_memory_service()
    spec = {"type": "AVRO", "schema": AVRO, "subject": "mine", **strategy_field(strategy)}
    if strategy is None:
        assert produce(s, "value", spec)["subject"] == "mine" and s.subjects() == ["mine"], "SMI:220"
        return
    with pytest.raises(E.InvalidRequestError) as e:
        produce(s, "value", spec)
    assert e.value.message == "Only one of 'subject_name_strategy' or 'subject' can be used.", "PR build()"
    assert error_report(e.value)["error_code"] == 400 and s.subjects() == []


@pytest.mark.parametrize(("strategy", "part", "java_class"), [
    ("RECORD_NAME", "value", "RecordNameStrategy"),
    ("TOPIC_RECORD_NAME", "key", "TopicRecordNameStrategy"),
])
@pytest.mark.parametrize(("kind", "text"), [
    ("AVRO", json.dumps({"type": "string"})),  # AvroSchema.name: not a RECORD, null
    ("AVRO", json.dumps({"type": "enum", "name": "E", "symbols": ["A"]})),
    ("JSONSCHEMA", json.dumps({"type": "object"})),  # JsonSchema.name: no title, null
])
def test_a_schema_with_no_record_name_is_rns_serialization_exception(kind: str, text: str, strategy: str,
                                                                    part: str, java_class: str) -> None:
    """RNS:59-66: a null name throws SerializationException naming the ``<part>.subject.name.strategy`` setting
    and the delegate's class (getClass() of the strategy EnumSubjectNameStrategy wraps); the v3 stream answers
    it 50002 (KafkaExceptionMapper). SMI:224 derives before :233 registers, so nothing is written."""
    s = in_memory_service()
    with pytest.raises(E.UnknownServerError) as e:
        produce(s, part, {"type": kind, "schema": text, "subject_name_strategy": strategy})
    assert e.value.message == (f"In configuration {part}.subject.name.strategy = io.confluent.kafka.serializers."
                               f"subject.{java_class}, the message {part} must only be a record schema"), "RNS:66"
    assert error_report(e.value)["error_code"] == 50002, "KafkaExceptionMapper: KafkaException -> 50002"
    assert s.subjects() == [], "SMI:224 before :233"


def test_a_schema_id_with_no_record_name_is_refused_the_same_way() -> None:
    """SMI:107 derives from the schema fetched by id: RNS:66 again, before any version lookup (:109)."""
    s = in_memory_service()
    plain = run(s.encode_v3(TOPIC, "value", {"type": "AVRO", "schema": json.dumps({"type": "string"}),
                                             "data": "x"}))[1]["schema_id"]  # under orders-value
    with pytest.raises(E.UnknownServerError, match="RecordNameStrategy, the message value must only be a record"):
        run(s.encode_v3(TOPIC, "value", {"schema_id": plain, "subject_name_strategy": "RECORD_NAME", "data": "x"}))


def test_a_protobuf_schema_with_no_type_is_400() -> None:
    """ProtobufSchema.name: no message and no enum is IllegalArgumentException, which PA.getSchema answers 400."""
    s = in_memory_service()
    with pytest.raises(E.InvalidRequestError) as e:
        produce(s, "value", {"type": "PROTOBUF", "schema": 'syntax = "proto3";\n',
                             "subject_name_strategy": "RECORD_NAME"})
    assert e.value.message == "Protobuf schema definition contains no type definitions"
    assert s.subjects() == []


@pytest.mark.parametrize("strategy", ["FOO", "", 1, ["RECORD_NAME"]])
def test_an_unknown_strategy_is_400(strategy: Any) -> None:
    """PR: the field is EnumSubjectNameStrategy; anything else fails Jackson's mapping, 400 for that record."""
    with pytest.raises(E.InvalidRequestError, match="TOPIC_NAME, RECORD_NAME, TOPIC_RECORD_NAME") as e:
        produce(in_memory_service(), "value", {"type": "AVRO", "schema": AVRO, "subject_name_strategy": strategy})
    assert error_report(e.value)["error_code"] == 400


@pytest.mark.parametrize(("kind", "schema", "name"), [
    # AvroSchema.name(): schemaObj.getType() == RECORD ? getFullName() : null (an Avro error is a RECORD too)
    ("AVRO", {"type": "record", "name": "User", "namespace": "com.acme", "fields": []}, "com.acme.User"),
    ("AVRO", {"type": "record", "name": "a.b.User", "namespace": "com.acme", "fields": []}, "a.b.User"),
    ("AVRO", {"type": "record", "name": "User", "fields": []}, "User"),
    ("AVRO", {"type": "error", "name": "Oops", "namespace": "x", "fields": []}, "x.Oops"),
    ("AVRO", {"type": "enum", "name": "E", "symbols": ["A"]}, None),
    ("AVRO", {"type": "fixed", "name": "F", "size": 2}, None),
    ("AVRO", ["null", {"type": "record", "name": "R", "fields": []}], None),
    ("AVRO", "string", None),
    # JsonSchema.name(): getString("title"), jsonNode.get(key).asText() when present, else null
    ("JSON", {"title": "Person"}, "Person"),
    ("JSON", {"type": "object"}, None),
    ("JSON", {"title": ""}, ""),  # present: "" is a name (not null), as Java's getString answers it
    ("JSON", {"properties": {"x": {"title": "Inner"}}}, None),  # only the top level's title
    ("JSON", True, None),
    # ProtobufSchema.name(): first message, else first enum; package-qualified when there is a package
    ("PROTOBUF", 'syntax = "proto3";\npackage a.b;\nenum E { X = 0; }\nmessage M { message N {} }\n'
                 "message Z {}\n", "a.b.M"),
    ("PROTOBUF", 'syntax = "proto3";\nenum E { X = 0; }\n', "E"),
    ("PROTOBUF", 'syntax = "proto3";\nmessage M {}\n', "M"),
])
def test_record_name_is_confluents_parsed_schema_name(kind: str, schema: Any, name: str | None) -> None:
    text = schema if kind == "PROTOBUF" else json.dumps(schema)
    assert formats.record_name(formats.parse(kind, text)) == name


def test_record_name_of_a_bare_reference_is_the_referenced_record() -> None:
    """An Avro schema that is the name of a referenced record is that record (AvroSchema's schemaObj)."""
    ref = json.dumps({"type": "record", "name": "User", "namespace": "com.acme", "fields": []})
    assert formats.record_name(formats.parse("AVRO", '"com.acme.User"', [ref])) == "com.acme.User"


def test_record_name_of_a_protobuf_with_no_type_raises() -> None:
    with pytest.raises(E.InvalidSchemaError, match="contains no type definitions"):
        formats.record_name(formats.parse("PROTOBUF", 'syntax = "proto3";\n'))


@pytest.mark.parametrize("registered", [False, True])
def test_a_schema_version_the_subject_does_not_have_is_400_naming_both(registered: bool) -> None:
    """SMI:137-145: getByVersion's failure (no such subject, or no such version of it) is a BadRequestException,
    "Schema does not exist for subject: %s, version: %s" (ProduceAction answers it 400 for the record)."""
    s = in_memory_service()
    if registered:
        produce(s, "value", {"type": "AVRO", "schema": AVRO})  # orders-value has version 1 only
    with pytest.raises(E.InvalidRequestError) as e:
        produce(s, "value", {"schema_version": 7})
    assert e.value.message == f"Schema does not exist for subject: {TOPIC}-value, version: 7", "SMI:141-144"
    assert e.value.http_status == 400
