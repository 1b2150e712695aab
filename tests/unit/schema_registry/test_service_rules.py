"""The registry's write rules, checked on the primary's plan (what it would append to _schemas) without a
cluster: the same schema answers the same id, ids are never reused (even after a hard delete whose records
compaction removed), Confluent's soft-then-permanent delete rules (confluentinc/schema-registry
core/.../rest/resources/SubjectsResource.java deleteSubject, SubjectVersionsResource.java deleteSchemaVersion),
modes (ModeResource.java) and compatibility levels (ConfigResource.java)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from broker.schema_registry.service import SchemaRegistryService, parse_version
from broker.schema_registry.store import RegistryState
from odradek.protocol import errors as E
from tests.unit.schema_registry.in_memory import planning_service, run


def service() -> SchemaRegistryService:
    return planning_service()


def avro(*fields: str, defaults: bool = False) -> str:
    return json.dumps({"type": "record", "name": "R", "fields": [
        {"name": f, "type": "int", **({"default": 0} if defaults else {})} for f in fields]})


def reg(subject: str, schema: str, **extra: Any) -> dict[str, Any]:
    return {"op": "register", "subject": subject, "schema": schema, **extra}


def test_same_schema_same_id_and_new_ids_only_grow() -> None:
    s = service()
    first = run(s, reg("a", avro("x")))["id"]
    assert s._plan(reg("a", json.dumps(json.loads(avro("x")), indent=2)))[0] == []  # nothing to write
    assert run(s, reg("b", avro("x")))["id"] == first  # the same schema under another subject
    second = run(s, reg("a", avro("x", "y", defaults=True)))["id"]
    assert second == first + 1
    for v in (2, 1):
        run(s, {"op": "delete_version", "subject": "a", "version": str(v)})
        run(s, {"op": "delete_version", "subject": "a", "version": str(v), "permanent": True})
    # compaction would leave only the id high-water record of the deleted schemas: replay what survives
    survivors = RegistryState()
    survivors.apply(b'{"keytype": "ID_HIGH_WATER", "magic": 0}', json.dumps({"id": second}).encode())
    s.state = survivors
    assert run(s, reg("c", avro("z")))["id"] == second + 1


def test_incompatible_is_409_with_the_reasons() -> None:
    s = service()
    run(s, reg("a", avro("x")))
    with pytest.raises(E.IncompatibleSchemaError) as e:
        run(s, reg("a", avro("x", "y")))
    assert e.value.http_status == 409 and "READER_FIELD_MISSING_DEFAULT_VALUE" in e.value.message
    run(s, {"op": "set_config", "subject": "a", "compatibility": "none"})
    assert run(s, reg("a", avro("x", "y")))["id"] == 2


def test_soft_then_permanent() -> None:
    s = service()
    run(s, reg("a", avro("x")))
    with pytest.raises(E.SubjectNotSoftDeletedError):
        run(s, {"op": "delete_subject", "subject": "a", "permanent": True})
    assert run(s, {"op": "delete_subject", "subject": "a"}) == [1]
    with pytest.raises(E.SubjectSoftDeletedError):
        run(s, {"op": "delete_subject", "subject": "a"})
    assert run(s, {"op": "delete_subject", "subject": "a", "permanent": True}) == [1]
    with pytest.raises(E.SubjectNotFoundError):
        run(s, {"op": "delete_subject", "subject": "a"})


def test_modes() -> None:
    s = service()
    run(s, {"op": "set_mode", "subject": "a", "mode": "READONLY"})
    with pytest.raises(E.SchemaOperationNotPermittedError):
        run(s, reg("a", avro("x")))
    with pytest.raises(E.InvalidModeError):
        run(s, {"op": "set_mode", "subject": None, "mode": "nope"})
    with pytest.raises(E.SchemaOperationNotPermittedError):
        run(s, reg("b", avro("x"), id=7))  # an id only in IMPORT mode
    run(s, {"op": "set_mode", "subject": "b", "mode": "IMPORT"})
    assert run(s, reg("b", avro("x"), id=7, version=3)) == {"id": 7}
    assert s.version("b", "3").id == 7
    with pytest.raises(E.SchemaOperationNotPermittedError, match="Overwrite"):
        run(s, reg("b", avro("y"), id=7, version=4))  # an imported id names one schema only
    with pytest.raises(E.SchemaOperationNotPermittedError):
        run(s, reg("b", avro("y"), id=8, version=3))  # an existing version is never overwritten
    with pytest.raises(E.SchemaOperationNotPermittedError):
        run(s, reg("c", avro("y"), version=5))  # outside IMPORT, versions are appended in order
    assert run(s, reg("c", avro("y"), version=1)) == {"id": 8}


@pytest.mark.parametrize("op", [{"op": "nope"}, {"op": "register"}, {"op": "register", "subject": 3},
                                {"op": "register", "subject": "a", "schema": "\"int\"", "id": "x"}])
def test_malformed_writes_are_400(op: dict[str, Any]) -> None:
    with pytest.raises(E.InvalidRequestError):
        service()._plan(op)


@pytest.mark.parametrize(("raw", "expected"), [("latest", None), ("-1", None), ("1", 1), ("2147483647", 2**31 - 1)])
def test_versions(raw: str, expected: int | None) -> None:
    assert parse_version(raw) == expected


@pytest.mark.parametrize("raw", ["0", "-2", "2147483648", "one", ""])
def test_invalid_versions_are_42202(raw: str) -> None:
    with pytest.raises(E.InvalidSchemaVersionError):
        parse_version(raw)


def test_json_schema_references_are_checked_and_validated_through_what_they_name() -> None:
    """A JSON Schema referencing another subject's schema: its compatibility is judged through the referenced
    version it names, and records are validated with the reference resolved (never fetched)."""
    from broker.schema_registry import serde

    s = service()
    address = {"type": "object", "properties": {"zip": {"type": "integer"}}, "required": ["zip"]}
    run(s, reg("address", json.dumps(address), schemaType="JSON"))
    run(s, {"op": "set_config", "subject": "address", "compatibility": "none"})
    run(s, reg("address", json.dumps({**address, "properties": {"zip": {"type": "string"}}}), schemaType="JSON"))
    person = json.dumps({"type": "object", "properties": {"home": {"$ref": "address.json"}}})
    ref = {"name": "address.json", "subject": "address"}
    run(s, reg("person", person, schemaType="JSON", references=[{**ref, "version": 1}]))
    with pytest.raises(E.IncompatibleSchemaError) as e:  # the same text, but home.zip is now a string
        run(s, reg("person", person, schemaType="JSON", references=[{**ref, "version": 2}]))
    assert "TYPE_CHANGED" in e.value.message and "#/properties/home/properties/zip" in e.value.message

    parsed, _ = s.parse_request({"schema": person, "schemaType": "JSON", "references": [{**ref, "version": 1}]})
    assert serde.encode(parsed, {"home": {"zip": 12345}}).endswith(b'{"home":{"zip":12345}}')
    with pytest.raises(E.JsonConversionError, match="zip"):
        serde.encode(parsed, {"home": {"zip": "12345"}})
    with pytest.raises(E.JsonConversionError, match="cannot resolve"):
        serde.encode(s.parse_request({"schema": json.dumps({"$ref": "missing.json"}), "schemaType": "JSON"})[0], 1)


def test_a_protobuf_schema_stored_in_an_earlier_rendering_keeps_its_id_and_version() -> None:
    """The registry stores a Protobuf schema as its renderer writes it; text an earlier renderer stored (here: a
    proto2 ``syntax`` line and other spacing, as the registry wrote them before it followed Confluent's rendering)
    is the same schema, so registering or looking it up again finds that version instead of adding one."""
    from broker.schema_registry.store import schema_key

    text = 'syntax = "proto2";\npackage p;\n\nmessage M {\n  optional int32 a = 1;\n}\n'
    s = service()
    s.state.apply(schema_key("m-value", 1), json.dumps({
        "subject": "m-value", "version": 1, "id": 7, "schema": text, "schemaType": "PROTOBUF", "deleted": False,
    }).encode())
    s.state.apply(b'{"keytype": "ID_HIGH_WATER", "magic": 0}', json.dumps({"id": 7}).encode())
    assert s.parsed(s.version("m-value", "1")).canonical != text  # stored as an earlier renderer wrote it
    assert s._plan(reg("m-value", text, schemaType="PROTOBUF")) == ([], {"id": 7})
    assert run(s, reg("other-value", text, schemaType="PROTOBUF"))["id"] == 7  # the same id under another subject
    assert s.lookup("m-value", {"schema": text, "schemaType": "PROTOBUF"}).version == 1
