"""Avro compatibility, table-tested from the Avro specification's "Schema Resolution" section
(https://avro.apache.org/docs/1.11.1/specification/#schema-resolution) and Confluent's compatibility levels
(confluentinc/schema-registry core/.../avro/AvroCompatibilityChecker.java, CompatibilityLevel.java; the docs'
"Schema Evolution and Compatibility" table): a reader resolves a writer when types match or promote (int to
long, float, double; long to float, double; float to double; string and bytes both ways), records match by
(unqualified) name or reader alias, every reader field is in the writer or has a default, enums keep the
writer's symbols (or the reader has a default), fixed sizes are equal, and unions resolve branch by branch.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from broker.schema_registry.formats import AVRO, check, parse, reads
from odradek.protocol.errors import InvalidSchemaError


def rec(*fields: dict[str, Any], name: str = "R", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def f(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


def p(schema: Any) -> Any:
    return parse(AVRO, json.dumps(schema))


LINKED = rec(f("value", "int"), f("next", ["null", "R"], default=None))

# (reader, writer, the error type expected, or None: the reader resolves the writer)
TABLE: list[tuple[str, Any, Any, str | None]] = [
    ("same primitive", "int", "int", None),
    ("int promotes to long", "long", "int", None),
    ("int promotes to float", "float", "int", None),
    ("int promotes to double", "double", "int", None),
    ("long promotes to float", "float", "long", None),
    ("long promotes to double", "double", "long", None),
    ("float promotes to double", "double", "float", None),
    ("string reads bytes", "string", "bytes", None),
    ("bytes reads string", "bytes", "string", None),
    ("long does not narrow to int", "int", "long", "TYPE_MISMATCH"),
    ("double does not narrow to float", "float", "double", "TYPE_MISMATCH"),
    ("boolean is not int", "boolean", "int", "TYPE_MISMATCH"),
    ("null reads null", "null", "null", None),
    ("reader adds a field with a default", rec(f("a", "int"), f("b", "string", default="")), rec(f("a", "int")),
     None),
    ("reader adds a field without a default", rec(f("a", "int"), f("b", "string")), rec(f("a", "int")),
     "READER_FIELD_MISSING_DEFAULT_VALUE"),
    ("reader drops a writer field", rec(f("a", "int")), rec(f("a", "int"), f("b", "string")), None),
    ("field type promoted", rec(f("a", "long")), rec(f("a", "int")), None),
    ("field type narrowed", rec(f("a", "int")), rec(f("a", "long")), "TYPE_MISMATCH"),
    ("field renamed with a reader alias", rec(f("b", "int", aliases=["a"])), rec(f("a", "int")), None),
    ("record renamed", rec(f("a", "int"), name="S"), rec(f("a", "int")), "NAME_MISMATCH"),
    ("record renamed with an alias", rec(f("a", "int"), name="S", aliases=["R"]), rec(f("a", "int")), None),
    ("namespace changed (unqualified names match)", rec(f("a", "int"), namespace="x"),
     rec(f("a", "int"), namespace="y"), None),
    ("enum symbol added", {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]},
     {"type": "enum", "name": "E", "symbols": ["A", "B"]}, None),
    ("enum symbol removed", {"type": "enum", "name": "E", "symbols": ["A"]},
     {"type": "enum", "name": "E", "symbols": ["A", "B"]}, "MISSING_ENUM_SYMBOLS"),
    ("enum symbol removed, reader default", {"type": "enum", "name": "E", "symbols": ["A"], "default": "A"},
     {"type": "enum", "name": "E", "symbols": ["A", "B"]}, None),
    ("fixed of the same size", {"type": "fixed", "name": "F", "size": 4}, {"type": "fixed", "name": "F", "size": 4},
     None),
    ("fixed resized", {"type": "fixed", "name": "F", "size": 8}, {"type": "fixed", "name": "F", "size": 4},
     "FIXED_SIZE_MISMATCH"),
    ("array items promoted", {"type": "array", "items": "long"}, {"type": "array", "items": "int"}, None),
    ("map values changed", {"type": "map", "values": "int"}, {"type": "map", "values": "string"}, "TYPE_MISMATCH"),
    ("array is not map", {"type": "array", "items": "int"}, {"type": "map", "values": "int"}, "TYPE_MISMATCH"),
    ("writer union within reader union", ["null", "int", "string"], ["null", "int"], None),
    ("writer union branch missing in reader", ["null", "int"], ["null", "int", "string"], "MISSING_UNION_BRANCH"),
    ("reader union holds the writer type", ["null", "string"], "string", None),
    ("reader union holds a promotion of it", ["null", "long"], "int", None),
    ("reader union lacks the writer type", ["null", "string"], "int", "MISSING_UNION_BRANCH"),
    ("writer union, every branch promotes", "double", ["int", "long", "float"], None),
    ("writer union, a branch does not resolve", "int", ["null", "int"], "TYPE_MISMATCH"),
    ("recursive types", LINKED, LINKED, None),
    ("recursive type gains a defaulted field", rec(f("value", "int"), f("next", ["null", "R"], default=None),
                                                   f("w", "int", default=0)), LINKED, None),
]


@pytest.mark.parametrize(("reader", "writer", "expected"), [t[1:] for t in TABLE], ids=[t[0] for t in TABLE])
def test_schema_resolution(reader: Any, writer: Any, expected: str | None) -> None:
    messages = reads(p(reader), p(writer))
    if expected is None:
        assert messages == []
    else:
        assert messages and all(expected in m for m in messages[:1]), messages


V1 = rec(f("a", "int"))
V2 = rec(f("a", "int"), f("b", "string", default=""))
V3 = rec(f("a", "int"), f("b", "string"))  # b without a default: reads V2, not V1

LEVELS: list[tuple[str, str, Any, list[Any], bool]] = [
    ("NONE allows anything", "NONE", "string", ["int"], True),
    ("BACKWARD: add a defaulted field", "BACKWARD", V2, [V1], True),
    ("BACKWARD: add a field without default", "BACKWARD", V3, [V1], False),
    ("BACKWARD: checks the latest only", "BACKWARD", V3, [V2, V1], True),
    ("BACKWARD_TRANSITIVE: checks all", "BACKWARD_TRANSITIVE", V3, [V2, V1], False),
    ("FORWARD: add a field (old readers ignore it)", "FORWARD", V3, [V1], True),
    ("FORWARD: remove a field old readers need", "FORWARD", V1, [V3], False),
    ("FORWARD: remove a defaulted field", "FORWARD", V1, [V2], True),
    ("FULL: add a defaulted field", "FULL", V2, [V1], True),
    ("FULL: add a field without default", "FULL", V3, [V1], False),
    ("FULL: checks the latest only", "FULL", V1, [V2, V3], True),
    ("FULL_TRANSITIVE: checks all", "FULL_TRANSITIVE", V1, [V2, V3], False),
    ("FORWARD_TRANSITIVE: checks all", "FORWARD_TRANSITIVE", V1, [V2, V3], False),
]


@pytest.mark.parametrize(("level", "new", "previous", "compatible"), [t[1:] for t in LEVELS],
                         ids=[t[0] for t in LEVELS])
def test_levels(level: str, new: Any, previous: list[Any], compatible: bool) -> None:
    """The caller passes the latest version only for the non-transitive levels, as the service does."""
    olds = [p(o) for o in previous]
    if not level.endswith("_TRANSITIVE"):
        olds = olds[:1]
    assert (check(level, p(new), olds) == []) is compatible


def test_identity_ignores_whitespace_and_normalize_gives_the_parsing_canonical_form() -> None:
    a = parse(AVRO, json.dumps(V1))
    b = parse(AVRO, json.dumps(V1, indent=4))
    assert a.canonical == b.canonical
    normalized = parse(AVRO, json.dumps({**V1, "doc": "ignored by the canonical form"}), normalize=True)
    assert normalized.canonical == '{"name":"R","type":"record","fields":[{"name":"a","type":"int"}]}'


def test_references_define_named_types() -> None:
    address = json.dumps({"type": "record", "name": "Address", "namespace": "ex", "fields": [f("city", "string")]})
    person = json.dumps(rec(f("home", "ex.Address"), name="Person", namespace="ex"))
    assert parse(AVRO, person, [address]).schema_type == AVRO
    with pytest.raises(InvalidSchemaError):
        parse(AVRO, person)


@pytest.mark.parametrize("text", ['{"type": "record"}', "not json", '{"type": "nope"}',
                                  '{"type": "record", "name": "R", "fields": [{"name": "a"}]}'])
def test_invalid_avro_is_42201(text: str) -> None:
    with pytest.raises(InvalidSchemaError) as e:
        parse(AVRO, text)
    assert e.value.error_code == 42201


def test_protobuf_parses_and_an_unknown_type_is_refused_clearly() -> None:
    assert parse("PROTOBUF", 'syntax = "proto3";').schema_type == "PROTOBUF"  # more in test_protobuf.py
    with pytest.raises(InvalidSchemaError, match="XML"):
        parse("XML", "<schema/>")
