"""Protobuf in the Schema Registry without a cluster: parsing, rendering, identity, compatibility, wire format, JSON.

Written from confluentinc/schema-registry's protobuf-provider: ProtobufSchema.java (text or a serialized
FileDescriptorProto, ``formattedString("serialized")``, imports resolved by reference name, well-known types
built in), diff/Difference.java and diff/SchemaDiff.java (the Difference types and which of them are compatible,
MessageSchemaDiff/FieldSchemaDiff/OneOfDiff/EnumSchemaDiff for when each is found), and Confluent's wire format
(message indexes as zig-zag varints, [0] as the single byte 0) as confluent-kafka's Python serdes read and write
it; the JSON rendering is kafka-rest's (ProtobufSchemaUtils.toJson: JsonFormat's printer with default values).
confluent-kafka's own code (its index-array helpers, its ProtobufSerializer with its mock registry) is the
counterpart wherever it can be called.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import itertools
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from broker.schema_registry import formats, protobuf, serde
from broker.schema_registry.service import SchemaRegistryService
from odradek.protocol.errors import InvalidSchemaError, JsonConversionError, RecordDeserializationError
from tests.unit.schema_registry.in_memory import in_memory_service

ORDER = '''syntax = "proto3";
package shop.v1;

import "google/protobuf/timestamp.proto";

// An order, with most of proto3 in it.
message Order {
  int64 id = 1;
  string customer_name = 2;
  repeated Line lines = 3;
  map<string, int32> counts = 4;
  google.protobuf.Timestamp placed = 5;
  optional string note = 6;
  Status status = 7;
  oneof payment {
    string card = 8;
    bytes voucher = 9;
  }
  reserved 20, 30 to 40;
  reserved "old";

  message Line {
    string sku = 1;
    uint32 quantity = 2;
  }
}

enum Status {
  STATUS_UNKNOWN = 0;
  STATUS_PAID = 1;
}
'''

PROTO2 = '''syntax = "proto2";
package legacy;

message Thing {
  required string name = 1;
  optional int32 size = 2 [default = 7];
  optional string label = 3 [default = "a \\"quoted\\" one"];
  repeated int32 values = 4 [packed = true];
  optional Kind kind = 5 [default = BIG];
  extensions 100 to 199;
  enum Kind {
    SMALL = 0;
    BIG = 1;
  }
}

extend Thing {
  optional string extra = 100;
}

service Things {
  rpc Get (Thing) returns (Thing);
  rpc Watch (stream Thing) returns (stream Thing);
}
'''

_counter = itertools.count()


def parse(text: str, refs: list[tuple[str, str]] | None = None) -> protobuf.ProtoSchema:
    return protobuf.parse(text, refs or [])


def generated_module(tmp_path: Path, body: str) -> Any:
    """A message module protoc's Python generator writes, imported: what an application serializes with. Each
    gets its own file and package name (the default descriptor pool is process-wide)."""
    from grpc_tools import protoc

    n = next(_counter)
    name = f"gen_{n}_{abs(hash(str(tmp_path))) % 10**8}"
    (tmp_path / f"{name}.proto").write_text(f'syntax = "proto3";\npackage {name};\n{body}')
    include = str(Path(protoc.__file__).parent / "_proto")
    assert protoc.main(["protoc", f"-I{tmp_path}", f"-I{include}", f"--python_out={tmp_path}",
                        f"{tmp_path / name}.proto"]) == 0
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module(f"{name}_pb2")
    finally:
        sys.path.remove(str(tmp_path))


# ------------------------------------------------------------------------------------------------------ parsing


def test_text_parses_to_protocs_descriptor() -> None:
    s = parse(ORDER)
    assert s.file.name == "default" and s.file.package == "shop.v1" and s.file.syntax == "proto3"
    assert [m.name for m in s.file.message_type] == ["Order"] and [e.name for e in s.file.enum_type] == ["Status"]
    assert list(s.file.dependency) == ["google/protobuf/timestamp.proto"]  # a well-known type: no reference
    assert [d.name for d in s.deps] == ["google/protobuf/timestamp.proto"]
    order = s.file.message_type[0]
    assert [f.name for f in order.field] == ["id", "customer_name", "lines", "counts", "placed", "note", "status",
                                             "card", "voucher"]
    assert not s.file.HasField("source_code_info")  # comments and locations are not part of the schema


def test_base64_of_a_generated_descriptor_is_the_same_schema_as_its_text(tmp_path: Path) -> None:
    """confluent-kafka's ProtobufSerializer registers base64(message.DESCRIPTOR.file.serialized_pb)."""
    body = 'message Ping {\n  int64 at = 1;\n  string who = 2;\n  repeated Ping replies = 3;\n}\n'
    module = generated_module(tmp_path, body)
    b64 = base64.standard_b64encode(module.DESCRIPTOR.serialized_pb).decode()
    package = module.DESCRIPTOR.package
    from_text = parse(f'syntax = "proto3";\npackage {package};\n{body}')
    from_b64 = parse(b64)
    assert from_b64.text == from_text.text
    assert from_b64.file == from_text.file
    assert formats.parse("PROTOBUF", b64).canonical == formats.parse("PROTOBUF", from_text.text).canonical


def test_references_resolve_by_their_import_names_transitively() -> None:
    money = 'syntax = "proto3";\npackage common;\nmessage Money { int64 cents = 1; string currency = 2; }\n'
    price = ('syntax = "proto3";\npackage common;\nimport "common/money.proto";\n'
             'message Price { common.Money amount = 1; }\n')
    item = 'syntax = "proto3";\nimport "common/price.proto";\nmessage Item { common.Price price = 1; }\n'
    refs = [("common/money.proto", money), ("common/price.proto", price)]
    s = parse(item, refs)
    assert list(s.file.dependency) == ["common/price.proto"]
    assert [d.name for d in s.deps] == ["common/money.proto", "common/price.proto"]
    assert s.pool.FindMessageTypeByName("common.Money").fields_by_name["cents"].number == 1
    b64_ref = [("common/money.proto", parse(money).serialized()), refs[1]]  # a reference may be base64 too
    assert parse(item, b64_ref).text == s.text
    with pytest.raises(InvalidSchemaError, match=re.escape("common/price.proto")):
        parse(item)  # the import is neither a reference nor a well-known type


@pytest.mark.parametrize("wkt", ["any", "duration", "empty", "struct", "timestamp", "wrappers", "field_mask"])
def test_well_known_types_resolve_without_references(wkt: str) -> None:
    s = parse(f'syntax = "proto3";\nimport "google/protobuf/{wkt}.proto";\nmessage M {{ int32 a = 1; }}\n')
    assert [d.name for d in s.deps] == [f"google/protobuf/{wkt}.proto"]
    assert parse(s.serialized()).text == s.text  # and the base64 form links against them too


@pytest.mark.parametrize("text", [
    'syntax = "proto3"; message M { int32 a = 1 }',  # a missing ';'
    'syntax = "proto3"; message M { Unknown a = 1; }',  # an unknown type
    'syntax = "proto3"; message M { int32 a = 1; int32 b = 1; }',  # a number used twice
    'syntax = "proto3"; message M { required int32 a = 1; }',  # required is proto2 only
    'syntax = "proto4";',
    "not a schema at all",
    "   ",
    base64.standard_b64encode(b"\xff\xff\xff\xff").decode(),  # base64, but not a FileDescriptorProto
    base64.standard_b64encode(b'\n\x01x"\x0b\n\x01M\x12\x06\n\x01a\x18\x01').decode(),  # a field with no type
])
def test_invalid_schemas_are_42201(text: str) -> None:
    with pytest.raises(InvalidSchemaError) as e:
        formats.parse("PROTOBUF", text)
    assert e.value.error_code == 42201 and e.value.message.startswith("Invalid schema")


def test_protocs_reason_names_the_line_and_column() -> None:
    with pytest.raises(InvalidSchemaError, match=r"2:\d+ .*Expected"):
        parse('syntax = "proto3";\nmessage M { int32 a = 1 }')


# ---------------------------------------------------------------------------------------------------- rendering


@pytest.mark.parametrize("text", [
    ORDER,
    PROTO2,
    'syntax = "proto3";\nmessage Empty {}\n',
    'syntax = "proto3";\nmessage A { message B { message C { repeated string s = 1 [json_name = "S"]; } } '
    'B.C c = 1; }\nmessage Z { A.B b = 1; map<int64, A> as = 2; }\n',
    'syntax = "proto3";\noption java_package = "com.example";\noption java_multiple_files = true;\n'
    'enum E { option allow_alias = true; ZERO = 0; NONE = 0; ONE = 1 [deprecated = true]; reserved 5 to 9; '
    'reserved "TWO"; }\n',
])
def test_render_round_trips(text: str) -> None:
    """text -> descriptor -> text -> the same descriptor, and the rendering is a fixed point."""
    s = parse(text)
    again = parse(s.text)
    assert again.file == s.file
    assert again.text == s.text


def test_rendering_is_independent_of_layout_and_comments() -> None:
    compact = ORDER.replace("\n\n", "\n").replace("// An order, with most of proto3 in it.\n", "")
    assert parse(compact).text == parse(ORDER).text
    assert parse(ORDER).text != parse(ORDER.replace("uint32 quantity", "uint64 quantity")).text


# Custom options: extensions of google/protobuf/descriptor.proto's *Options declared in the schema, in a reference,
# or in Confluent's confluent/meta.proto (built in, as in Confluent's registry), at every level they apply to.
CUSTOM = '''syntax = "proto3";
package acme.v1;

import "google/protobuf/descriptor.proto";
import "confluent/meta.proto";

extend google.protobuf.FieldOptions { optional string pii = 50001; repeated string labels = 50002; }
extend google.protobuf.MessageOptions { Owner owner = 50003; }
extend google.protobuf.FileOptions { string team = 50004; }
extend google.protobuf.EnumOptions { bool closed = 50005; }
extend google.protobuf.EnumValueOptions { double weight = 50006; }

option (team) = "payments";
option (confluent.file_meta) = { doc: "the file" };

message Owner { string name = 1; repeated int32 ids = 2; map<string, string> attrs = 3; }

message User {
  option (owner) = { name: "ada" ids: [1, 2] attrs: [{key: "b" value: "2"}, {key: "a" value: "1"}] };
  option (confluent.message_meta) = { doc: "a user" tags: ["PII"] };
  string email = 1 [(pii) = "yes", (labels) = "x", (labels) = "y"];
  string name = 2 [(confluent.field_meta) = {
    doc: "the name" params: [{key: "scale" value: "2"}, {key: "a" value: "b"}]
  }];
  Kind kind = 3;
}

enum Kind {
  option (closed) = true;
  option (confluent.enum_meta) = { doc: "kinds" };
  KIND_UNKNOWN = 0 [(weight) = 0.5];
  KIND_ADMIN = 1 [(confluent.enum_value_meta) = { tags: ["internal"] }];
}
'''


def test_custom_options_register_and_render_back() -> None:
    s = parse(CUSTOM)
    text = s.text
    assert 'option (acme.v1.team) = "payments";' in text
    assert "option (confluent.file_meta) = {\n  doc: \"the file\"\n};" in text
    assert ('string email = 1 [\n    (acme.v1.pii) = "yes",\n    (acme.v1.labels) = "x",\n'
            '    (acme.v1.labels) = "y"\n  ];') in text
    assert "option (acme.v1.owner) = {\n    name: \"ada\",\n    ids: [\n      1,\n      2\n    ],\n" in text
    assert 'key: "a",\n        value: "1"\n      },\n      {\n        key: "b"' in text  # map entries by key
    # Confluent writes a confluent.Meta's precision and scale params value first (ProtobufSchema.toOption)
    assert '{\n        value: "2",\n        key: "scale"\n      }' in text
    assert "option (confluent.message_meta) = {\n    doc: \"a user\",\n    tags: [\n      \"PII\"\n    ]\n  };" in text
    assert "option (acme.v1.closed) = true;" in text and "KIND_UNKNOWN = 0 [(acme.v1.weight) = 0.5];" in text
    assert "KIND_ADMIN = 1 [(confluent.enum_value_meta) = {\n    tags: [\n      \"internal\"\n    ]\n  }];" in text
    assert [d.name for d in s.deps] == ["google/protobuf/descriptor.proto", "confluent/meta.proto"]
    again = parse(text)
    assert again.file == s.file and again.text == text  # parse(render(x)) == x
    b64 = parse(s.serialized())
    assert b64.file == s.file and b64.text == text  # the base64 of the descriptor: the same schema
    email = s.pool.FindMessageTypeByName("acme.v1.User").fields_by_name["email"]
    assert email.GetOptions().SerializeToString()  # the options reach the descriptor pool


def test_custom_options_keep_one_id_as_text_or_as_a_generated_descriptor(tmp_path: Path) -> None:
    """What an application's protoc-generated module registers (its descriptor, base64) is the same schema, so the
    same id, as the .proto text it was generated from."""
    body = ('import "google/protobuf/descriptor.proto";\n'
            "extend google.protobuf.FieldOptions { string pii = 50001; }\n"
            "extend google.protobuf.MessageOptions { repeated int32 shards = 50002; }\n"
            "message Signup {\n  option (shards) = 1;\n  option (shards) = 2;\n"
            '  string email = 1 [(pii) = "yes"];\n}\n')
    module = generated_module(tmp_path, body)
    b64 = base64.standard_b64encode(module.DESCRIPTOR.serialized_pb).decode()
    text = f'syntax = "proto3";\npackage {module.DESCRIPTOR.package};\n{body}'
    assert parse(b64).text == parse(text).text
    s = service()
    first = register(s, "signup-value", text)
    assert register(s, "signup-value", b64) == first and s.versions("signup-value") == [1]
    assert register(s, "signup-value", parse(text).text) == first  # the stored text itself, registered again


def test_custom_options_declared_in_a_reference() -> None:
    options = ('syntax = "proto3";\npackage opts;\nimport "google/protobuf/descriptor.proto";\n'
               "extend google.protobuf.FieldOptions { string sensitivity = 50010; }\n")
    user = ('syntax = "proto3";\nimport "opts/options.proto";\n'
            'message U { string ssn = 1 [(opts.sensitivity) = "high"]; }\n')
    refs = [("opts/options.proto", options)]
    s = parse(user, refs)
    assert 'string ssn = 1 [(opts.sensitivity) = "high"];' in s.text
    assert parse(s.text, refs).file == s.file
    assert parse(s.serialized(), [("opts/options.proto", parse(options).serialized())]).text == s.text


def test_an_option_no_imported_file_declares_is_refused() -> None:
    """A descriptor (base64) may carry option fields that nothing it imports declares: they could not be rendered,
    so they are refused rather than dropped (42201)."""
    s = parse('syntax = "proto3";\nmessage M { int32 a = 1; }\n')
    fdp = protobuf.FDP()
    fdp.CopyFrom(s.file)
    fdp.message_type[0].field[0].options.MergeFromString(b"\x88\xb5\x18\x01")  # field 50001, varint 1
    with pytest.raises(InvalidSchemaError, match=re.escape("without an import of google/protobuf/descriptor.proto")):
        parse(base64.standard_b64encode(fdp.SerializeToString()).decode())
    fdp.dependency.append("google/protobuf/descriptor.proto")
    with pytest.raises(InvalidSchemaError, match=r"holds field\(s\) \[50001\] that no imported file declares"):
        formats.parse("PROTOBUF", base64.standard_b64encode(fdp.SerializeToString()).decode())


@pytest.mark.parametrize(("name", "module"), [
    ("confluent/meta.proto", "confluent_kafka.schema_registry.confluent.meta_pb2"),
    ("confluent/type/decimal.proto", "confluent_kafka.schema_registry.confluent.type.decimal_pb2"),
])
def test_confluents_own_imports_resolve_as_its_client_ships_them(name: str, module: str) -> None:
    """confluent/meta.proto and confluent/type/decimal.proto need no reference (ProtobufSchema.KNOWN_DEPENDENCIES),
    and are Confluent's files: the messages, fields and extensions of the descriptors confluent-kafka's own
    serializers carry (file options such as java_package or go_package aside)."""
    import importlib

    from google.protobuf import descriptor_pb2

    schema = parse(f'syntax = "proto3";\npackage t;\nimport "{name}";\nmessage T {{ int32 x = 1; }}\n')
    ours = next(d for d in schema.deps if d.name == name)
    theirs = descriptor_pb2.FileDescriptorProto()
    importlib.import_module(module).DESCRIPTOR.CopyToProto(theirs)
    for fdp in (ours, theirs):
        fdp.ClearField("options")
        fdp.ClearField("source_code_info")
    assert ours == theirs
    if name == "confluent/meta.proto":
        assert [(e.name, e.number, e.extendee) for e in ours.extension] == [
            ("file_meta", 1088, ".google.protobuf.FileOptions"),
            ("message_meta", 1088, ".google.protobuf.MessageOptions"),
            ("field_meta", 1088, ".google.protobuf.FieldOptions"), ("enum_meta", 1088, ".google.protobuf.EnumOptions"),
            ("enum_value_meta", 1088, ".google.protobuf.EnumValueOptions")]


# ------------------------------------------------------------------------------------------------- proto2 groups

GROUPS = '''syntax = "proto2";
package legacy;
message SearchResponse {
  message Before { optional int32 q = 1; }
  repeated group Result = 1 {
    required string url = 2;
    optional string title = 3 [default = "none"];
  }
  optional int32 total = 4;
  oneof extra { group Debug = 5 { optional string trace = 1; } string note = 6; }
  map<string, Before> befores = 7;
  message After { optional int32 q = 1; }
}
'''


def test_groups_render_back_as_groups_and_round_trip() -> None:
    s = parse(GROUPS)
    assert "  repeated group Result = 1 {\n    required string url = 2;\n" in s.text
    assert "    group Debug = 5 {\n      optional string trace = 1;\n    }\n" in s.text  # in its oneof, no label
    assert "message Result" not in s.text and ".legacy.SearchResponse.Result result" not in s.text
    again = parse(s.text)
    assert again.file == s.file and again.text == s.text
    assert parse(s.serialized()).text == s.text
    response = s.file.message_type[0]
    # nested types keep protoc's order (message indexes count them): Before, Result, Debug, the map entry, After
    assert [n.name for n in response.nested_type] == ["Before", "Result", "Debug", "BeforesEntry", "After"]


def test_groups_encode_and_decode_as_json() -> None:
    s = parse(GROUPS)
    value = {"result": [{"url": "https://a", "title": "A"}], "total": 2, "debug": {"trace": "t"},
             "befores": {"k": {"q": 1}}}
    out = protobuf.decode(s, protobuf.encode(s, value))
    assert out["result"] == [{"url": "https://a", "title": "A"}] and out["debug"] == {"trace": "t"}
    assert out["total"] == 2 and out["befores"] == {"k": {"q": 1}}
    with pytest.raises(JsonConversionError):
        protobuf.encode(s, {"result": [{"title": "no url"}]})  # url is required


def test_groups_are_compared_as_confluent_compares_them() -> None:
    """Confluent diffs Wire's elements, where a group is a GroupElement: neither a field nor a nested type of the
    message, so MessageSchemaDiff does not see it. Changing a group is no Difference there, nor here; and the
    messages after a group keep the index Wire gives them (groups and map entries are not counted)."""
    old = parse(GROUPS)
    changed = parse(GROUPS.replace("required string url = 2;", "required int64 url = 2;"))
    assert protobuf.differences(old, changed) == []
    removed = parse(GROUPS.replace("  repeated group Result = 1 {\n    required string url = 2;\n"
                                   '    optional string title = 3 [default = "none"];\n  }\n', ""))
    assert protobuf.differences(old, removed) == []
    assert not formats.check("BACKWARD", formats.parse("PROTOBUF", removed.text),
                             [formats.parse("PROTOBUF", old.text)])
    before = parse('syntax = "proto3";\nmessage M {\n  message A { int32 x = 1; }\n  int32 a = 1;\n}\n')
    with_map = parse('syntax = "proto3";\nmessage M {\n  map<string, int32> m = 2;\n  message A { int32 x = 1; }\n'
                     "  int32 a = 1;\n}\n")  # the map's entry becomes nested type 0, A nested type 1
    assert protobuf.differences(before, with_map) == [("FIELD_ADDED", "#/M/2")]  # A has not moved for Wire


# ---------------------------------------------------------------------------------------------------- editions

EDITIONS = '''edition = "2023";
package ed;
option features.field_presence = IMPLICIT;
message Reading {
  string sensor = 1;
  int32 value = 2 [features.field_presence = EXPLICIT];
  repeated int32 samples = 3 [features.repeated_field_encoding = EXPANDED];
  Detail detail = 4 [features.message_encoding = DELIMITED];
  message Detail { bool ok = 1; }
  enum Unit { option features.enum_type = CLOSED; UNIT_C = 0; UNIT_F = 1; }
  Unit unit = 5 [features.field_presence = EXPLICIT];
}
'''


def test_editions_register_render_back_and_round_trip() -> None:
    """protobuf and grpcio-tools as installed read editions (edition 2023): the file renders back with its edition
    and features, and encodes as its features say."""
    s = parse(EDITIONS)
    assert s.file.syntax == "editions" and s.text.startswith('edition = "2023";\npackage ed;\n\n'
                                                            "option features.field_presence = IMPLICIT;\n")
    assert "int32 value = 2 [features.field_presence = EXPLICIT];" in s.text
    assert "option features.enum_type = CLOSED;" in s.text
    again = parse(s.text)
    assert again.file == s.file and again.text == s.text and parse(s.serialized()).text == s.text
    value = {"sensor": "t1", "value": 0, "samples": [1, 2], "detail": {"ok": True}, "unit": "UNIT_F"}
    assert protobuf.decode(s, protobuf.encode(s, value)) == value  # explicit presence keeps value 0
    s_id = register(service(), "ed-value", EDITIONS)
    assert s_id > 0


@pytest.mark.parametrize("text", [CUSTOM, GROUPS, EDITIONS], ids=["custom options", "groups", "editions"])
def test_custom_options_groups_and_editions_round_trip(text: str) -> None:
    """parse(render(x)) == x, the rendering a fixed point, the base64 of x the same schema."""
    s = parse(text)
    again = parse(s.text)
    assert again.file == s.file and again.text == s.text
    assert parse(s.serialized()).file == s.file


def test_editions_are_42201_with_a_clear_reason_where_the_runtime_lacks_them(monkeypatch: pytest.MonkeyPatch,
                                                                            ) -> None:
    monkeypatch.setattr(protobuf, "_editions_supported", lambda: "no editions in this build")
    with pytest.raises(InvalidSchemaError) as e:
        formats.parse("PROTOBUF", EDITIONS.replace("package ed;", "package ed_unsupported;"))
    assert e.value.error_code == 42201
    assert "editions" in e.value.message and "not supported" in e.value.message


# ------------------------------------------------------------------------------------------------ compatibility
# One row per Confluent Difference type: the schema before, the schema after, and whether Confluent's
# SchemaDiff.COMPATIBLE_CHANGES holds the type (then BACKWARD accepts the change).

BASE = '''syntax = "proto3";
package p;
message M {
  int32 a = 1;
  string s = 2;
  Inner inner = 3;
  map<string, int32> m = 4;
  optional int32 o = 5;
  oneof choice {
    string c1 = 6;
    int64 c2 = 7;
  }
  E e = 8;
  message Inner { int32 x = 1; }
}
message Other { int32 y = 1; }
enum E { E0 = 0; E1 = 1; }
'''


def change(old: str, new: str) -> str:
    assert old in BASE, old
    return BASE.replace(old, new)


DIFFERENCES: list[tuple[str, str, bool]] = [
    ("PACKAGE_CHANGED", change("package p;", "package q;"), False),
    ("MESSAGE_ADDED", BASE + "message Added { int32 z = 1; }\n", True),
    ("MESSAGE_REMOVED", change("message Other { int32 y = 1; }\n", ""), False),
    ("MESSAGE_MOVED", change("message M {", "message Before { int32 b = 1; }\nmessage M {"), True),
    ("ENUM_ADDED", BASE + "enum F { F0 = 0; }\n", True),
    ("ENUM_REMOVED", change("E e = 8;", "").replace("enum E { E0 = 0; E1 = 1; }\n", ""), True),
    ("ENUM_CONST_ADDED", change("E1 = 1;", "E1 = 1; E2 = 2;"), True),
    ("ENUM_CONST_CHANGED", change("E1 = 1;", "E_ONE = 1;"), True),
    ("ENUM_CONST_REMOVED", change(" E1 = 1;", ""), True),
    ("FIELD_ADDED", change("E e = 8;", "E e = 8;\n  double d = 9;"), True),
    ("FIELD_REMOVED", change("string s = 2;", ""), True),
    ("FIELD_NAME_CHANGED", change("int32 a = 1;", "int32 renamed = 1;"), True),
    ("FIELD_KIND_CHANGED", change("int32 a = 1;", "Other a = 1;"), False),
    ("FIELD_KIND_CHANGED", change("map<string, int32> m = 4;", "Other m = 4;"), False),
    ("FIELD_SCALAR_KIND_CHANGED", change("int32 a = 1;", "sint32 a = 1;"), False),
    ("FIELD_SCALAR_KIND_CHANGED", change("string s = 2;", "int32 s = 2;"), False),
    ("FIELD_SCALAR_KIND_CHANGED", change("map<string, int32> m = 4;", "map<string, double> m = 4;"), False),
    ("FIELD_NAMED_TYPE_CHANGED", change("Inner inner = 3;", "Other inner = 3;"), False),
    ("FIELD_NUMERIC_LABEL_CHANGED", change("optional int32 o = 5;", "repeated int32 o = 5;"), False),
    ("ONEOF_ADDED", change("E e = 8;", "oneof extra { E e = 8; }"), True),
    ("ONEOF_REMOVED", change("oneof choice {\n    string c1 = 6;\n    int64 c2 = 7;\n  }",
                             "string c1 = 6;\n  int64 c2 = 7;"), True),
    ("ONEOF_FIELD_ADDED", change("int64 c2 = 7;", "int64 c2 = 7;\n    bool c3 = 9;"), True),
    ("ONEOF_FIELD_REMOVED", change("int64 c2 = 7;", ""), False),
    ("MULTIPLE_FIELDS_MOVED_TO_ONEOF", change("int32 a = 1;\n  string s = 2;",
                                              "oneof both {\n    int32 a = 1;\n    string s = 2;\n  }"), False),
    ("FIELD_MOVED_TO_EXISTING_ONEOF", change("int32 a = 1;\n", "").replace("int64 c2 = 7;",
                                                                         "int64 c2 = 7;\n    int32 a = 1;"), False),
]


@pytest.mark.parametrize(("kind", "new", "compatible"), DIFFERENCES, ids=[f"{d[0]}-{i}" for i, d in
                                                                           enumerate(DIFFERENCES)])
def test_each_difference_is_found_and_classified_as_confluent_does(kind: str, new: str, compatible: bool) -> None:
    old_schema, new_schema = parse(BASE), parse(new)
    found = [k for k, _ in protobuf.differences(old_schema, new_schema)]
    assert kind in found, found
    assert (kind in protobuf.COMPATIBLE) == compatible and (kind in protobuf.INCOMPATIBLE) != compatible
    old, updated = formats.parse("PROTOBUF", BASE), formats.parse("PROTOBUF", new)
    backward = formats.check("BACKWARD", updated, [old])
    assert (not backward) == (all(k in protobuf.COMPATIBLE for k in found)), backward
    if not compatible:
        assert any(f"type={kind}" in m for m in backward), backward


def test_the_difference_list_is_confluents() -> None:
    assert len(protobuf.COMPATIBLE) == 14 and len(protobuf.INCOMPATIBLE) == 11
    assert not protobuf.COMPATIBLE & protobuf.INCOMPATIBLE


def test_paths_and_messages_are_worded_as_confluents_difference() -> None:
    new = change("int32 a = 1;", "Other a = 1;")
    assert protobuf.differences(parse(BASE), parse(new)) == [("FIELD_KIND_CHANGED", "#/M/1")]
    [message] = protobuf.incompatibilities(parse(new), parse(BASE))
    assert message == "Difference{fullPath='#/M/1', type=FIELD_KIND_CHANGED}"
    nested = change("message Inner { int32 x = 1; }", "message Inner { string x = 1; }")
    assert ("FIELD_SCALAR_KIND_CHANGED", "#/M/Inner/1") in protobuf.differences(parse(BASE), parse(nested))


def test_compatible_label_and_scalar_changes() -> None:
    """Confluent groups scalars (int32/int64/uint32/uint64/bool, sint32/sint64, string/bytes, fixed32/sfixed32,
    fixed64/sfixed64): a change inside a group is no difference; an enum is a GENERAL_NUMBER."""
    for old, new in (("int32 a = 1;", "uint64 a = 1;"), ("int32 a = 1;", "bool a = 1;"),
                     ("string s = 2;", "bytes s = 2;"), ("int32 a = 1;", "E a = 1;"),
                     ("optional int32 o = 5;", "int32 o = 5;")):
        assert protobuf.differences(parse(BASE), parse(change(old, new))) == [], (old, new)
    repeated_string = change("string s = 2;", "optional string s = 2;").replace("optional string s", "string s")
    assert protobuf.differences(parse(BASE), parse(repeated_string)) == []


def test_required_fields_in_proto2() -> None:
    old = 'syntax = "proto2";\nmessage R { optional int32 a = 1; }\n'
    added = 'syntax = "proto2";\nmessage R { optional int32 a = 1; required string b = 2; }\n'
    assert [k for k, _ in protobuf.differences(parse(old), parse(added))] == ["REQUIRED_FIELD_ADDED"]
    assert [k for k, _ in protobuf.differences(parse(added), parse(old))] == ["REQUIRED_FIELD_REMOVED"]


def test_a_referenced_type_is_compared_when_its_reference_changes() -> None:
    v1 = 'syntax = "proto3";\npackage c;\nmessage Money { int64 cents = 1; }\n'
    v2 = 'syntax = "proto3";\npackage c;\nmessage Money { string cents = 1; }\n'
    user = 'syntax = "proto3";\nimport "c/money.proto";\nmessage Pay { c.Money amount = 1; }\n'
    old, new = parse(user, [("c/money.proto", v1)]), parse(user, [("c/money.proto", v2)])
    found = protobuf.differences(old, new)
    assert ("FIELD_SCALAR_KIND_CHANGED", "#/Money/1") in found and ("FIELD_NAMED_TYPE_CHANGED", "#/Pay/1") in found
    assert protobuf.differences(old, parse(user, [("c/money.proto", v1)])) == []


@pytest.mark.parametrize(("level", "accepted"), [
    ("NONE", True), ("BACKWARD", True), ("BACKWARD_TRANSITIVE", False), ("FORWARD", False),
    ("FORWARD_TRANSITIVE", False), ("FULL", False), ("FULL_TRANSITIVE", False),
])
def test_levels_and_transitivity(level: str, accepted: bool) -> None:
    """v1 -> v2 removes field 2, v2 -> v3 adds field 2 back as a number: each step is BACKWARD compatible, v3
    against v1 is not (FIELD_SCALAR_KIND_CHANGED); FORWARD also fails (v2 cannot read v3's Extra message)."""
    v1 = formats.parse("PROTOBUF", 'syntax = "proto3";\nmessage M { int32 a = 1; string b = 2; }\n')
    v2 = formats.parse("PROTOBUF", 'syntax = "proto3";\nmessage M { int32 a = 1; }\n')
    v3 = formats.parse("PROTOBUF", 'syntax = "proto3";\nmessage M { int32 a = 1; double b = 2; }\n'
                                   "message Extra { int32 x = 1; }\n")
    previous = [v2, v1] if level.endswith("_TRANSITIVE") else [v2]
    assert (not formats.check(level, v3, previous)) == accepted
    assert formats.check("BACKWARD", v2, [v1]) == []


# --------------------------------------------------------------------------------------------------- wire format


@pytest.mark.parametrize(("indexes", "wire"), [
    ([0], b"\x00"), ([1], b"\x02\x02"), ([0, 0], b"\x04\x00\x00"), ([2, 1], b"\x04\x04\x02"),
    ([0, 3, 1], b"\x06\x00\x06\x02"), ([64], b"\x02\x80\x01"),
])
def test_message_indexes_are_confluents(indexes: list[int], wire: bytes) -> None:
    import io

    from confluent_kafka.schema_registry.common.serde import SchemaId

    assert protobuf.encode_indexes(indexes) == wire
    assert protobuf.decode_indexes(wire + b"rest") == (indexes, len(wire))
    theirs = io.BytesIO()
    SchemaId._encode_varints(theirs, indexes, zigzag=True)
    assert theirs.getvalue() == wire
    assert SchemaId._read_index_array(io.BytesIO(wire), zigzag=True) == indexes


def test_message_indexes_of_nested_messages_match_confluent_kafkas(tmp_path: Path) -> None:
    from confluent_kafka.schema_registry.common.protobuf import _create_index_array

    body = ("message A { message B { int32 x = 1; } message C { message D { int32 y = 1; } } }\n"
            "message E { int32 z = 1; }\n")
    module = generated_module(tmp_path, body)
    schema = parse(base64.standard_b64encode(module.DESCRIPTOR.serialized_pb).decode())
    package = module.DESCRIPTOR.package
    for name in ("A", "A.B", "A.C", "A.C.D", "E"):
        descriptor = module.DESCRIPTOR.message_types_by_name[name.split(".")[0]]
        for part in name.split(".")[1:]:
            descriptor = descriptor.nested_types_by_name[part]
        assert protobuf.message_indexes(schema, f"{package}.{name}") == _create_index_array(descriptor)
        assert protobuf.message_name(schema, _create_index_array(descriptor)) == f"{package}.{name}"


def test_truncated_or_invalid_indexes_are_deserialization_errors() -> None:
    s = parse(ORDER)
    for payload in (b"", b"\x80", b"\x02", b"\x02\x02", b"\x04\x00\x7e"):
        with pytest.raises(RecordDeserializationError):
            protobuf.decode(s, payload)


# ---------------------------------------------------------------------------------------------------------- JSON


def test_json_round_trips_as_kafka_rest_renders_it() -> None:
    s = parse(ORDER)
    value = {"id": "12", "customerName": "Ada", "lines": [{"sku": "x", "quantity": 2}], "counts": {"a": 1},
             "placed": "2024-01-02T03:04:05Z", "status": "STATUS_PAID", "card": "4242"}
    payload = protobuf.encode(s, value)
    assert payload[:1] == b"\x00"  # the first message, [0]: one byte
    out = protobuf.decode(s, payload)
    assert out == value  # json names, int64 as a string, enums by name, well-known types as their JSON
    snake = protobuf.encode(s, {"id": 12, "customer_name": "Ada"})  # field names and int64 numbers parse too
    assert protobuf.decode(s, snake) == {"id": "12", "customerName": "Ada", "lines": [], "counts": {},
                                         "status": "STATUS_UNKNOWN"}  # defaults included, as includingDefaults


@pytest.mark.parametrize("value", [
    {"nope": 1}, {"id": "twelve"}, {"lines": {"sku": "x"}}, {"status": "NOT_A_STATUS"}, [1, 2], "text", None,
    {"card": "a", "voucher": "YQ=="},  # two members of one oneof
])
def test_values_that_do_not_fit_are_42203(value: Any) -> None:
    with pytest.raises(JsonConversionError) as e:
        protobuf.encode(parse(ORDER), value)
    assert e.value.error_code == 42203


def test_a_payload_that_is_not_the_message_is_a_deserialization_error() -> None:
    s = parse(ORDER)
    with pytest.raises(RecordDeserializationError):
        protobuf.decode(s, b"\x00\x0a\xff")  # field 1 as a length-delimited value running past the end


def test_serde_frames_what_confluent_kafkas_protobuf_serializer_writes(tmp_path: Path) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    module = generated_module(tmp_path, "message Other { int32 q = 1; }\n"
                                        "message Reading { string sensor = 1; double value = 2; int64 at = 3; "
                                        "message Detail { bool ok = 1; } }\n")
    client = SchemaRegistryClient.new_client({"url": "mock://protobuf-serde-test"})
    serializer = ProtobufSerializer(module.Reading, client, {"use.deprecated.format": False})
    theirs = serializer(module.Reading(sensor="t1", value=2.5, at=9),
                        SerializationContext("readings", MessageField.VALUE))
    schema_id, payload = serde.unframe(theirs)
    parsed = formats.parse("PROTOBUF", base64.standard_b64encode(module.DESCRIPTOR.serialized_pb).decode())
    name = f"{module.DESCRIPTOR.package}.Reading"
    ours = protobuf.encode(parsed.obj, {"sensor": "t1", "value": 2.5, "at": "9"},
                           protobuf.message_indexes(parsed.obj, name))
    assert theirs == serde.frame(schema_id, ours)
    assert payload[:2] == b"\x02\x02"  # [1]: the second message
    assert serde.decode(parsed, payload) == {"sensor": "t1", "value": 2.5, "at": "9"}


# ------------------------------------------------------------------------------------- the registry service


def service() -> SchemaRegistryService:
    return in_memory_service()


def register(s: SchemaRegistryService, subject: str, schema: str, refs: list[dict[str, Any]] | None = None) -> int:
    return int(asyncio.run(s.write({"op": "register", "subject": subject, "schema": schema, "schemaType": "PROTOBUF",
                                    "references": refs or [], "normalize": False, "id": None, "version": None}))["id"])


def test_the_service_stores_the_text_and_answers_serialized_on_request() -> None:
    s = service()
    money = 'syntax = "proto3";\npackage m;\nmessage Money { int64 cents = 1; }\n'
    money_id = register(s, "money", money)
    user = 'syntax = "proto3";\nimport "m/money.proto";\nmessage Pay { m.Money amount = 1; }\n'
    refs = [{"name": "m/money.proto", "subject": "money", "version": 1}]
    pay_id = register(s, "pay-value", user, refs)
    assert pay_id != money_id
    stored = s.schema_by_id(pay_id)
    assert stored.schema == parse(user, [("m/money.proto", money)]).text
    b64 = s.schema_text(stored, "serialized")
    assert parse(b64, [("m/money.proto", money)]).file == parse(user, [("m/money.proto", money)]).file
    assert s.schema_text(stored, None) == stored.schema and s.schema_text(stored, "unknown") == stored.schema
    assert register(s, "pay-value", b64, refs) == pay_id  # the same schema as base64: the same id, no new version
    assert s.versions("pay-value") == [1]


def test_the_service_refuses_an_incompatible_protobuf_change_with_409() -> None:
    from odradek.protocol.errors import IncompatibleSchemaError

    s = service()
    register(s, "t-value", 'syntax = "proto3";\nmessage M { int32 a = 1; }\n')
    with pytest.raises(IncompatibleSchemaError) as e:
        register(s, "t-value", 'syntax = "proto3";\nmessage M { string a = 1; }\n')
    assert e.value.error_code == 40901 and "FIELD_SCALAR_KIND_CHANGED" in e.value.message  # HTTP 409
    assert register(s, "t-value", 'syntax = "proto3";\nmessage M { int32 a = 1; string b = 2; }\n') > 0


def test_embedded_protobuf_encodes_the_first_message_and_decodes_back() -> None:
    s = service()
    schema = 'syntax = "proto3";\nmessage First { string name = 1; int32 n = 2; }\nmessage Second { int32 x = 1; }\n'
    key_id, value_id, keys, values = asyncio.run(s.encode_embedded(
        "t", "PROTOBUF", {"value_schema": schema}, [None], [{"name": "a", "n": 3}]))
    assert key_id is None and keys == [None] and isinstance(value_id, int)
    framed = values[0]
    assert framed is not None and framed[5:6] == b"\x00"
    assert s.decode_framed(framed, "PROTOBUF") == {"name": "a", "n": 3}
    with pytest.raises(JsonConversionError):
        asyncio.run(s.encode_embedded("t", "PROTOBUF", {"value_schema_id": value_id}, [None], [{"x": 1}]))
    report = asyncio.run(s.encode_v3("t", "value", {"type": "PROTOBUF", "schema_id": value_id,
                                                    "data": {"name": "b"}}))[1]
    assert report["type"] == "PROTOBUF" and report["schema_id"] == value_id


def test_recursive_types_are_compared_once() -> None:
    """google.protobuf.Struct/Value/ListValue refer to each other (no reference: compared every time, as
    Confluent does for well-known types), and a message may hold itself: the diff terminates."""
    text = ('syntax = "proto3";\nimport "google/protobuf/struct.proto";\n'
            "message Tree { google.protobuf.Struct attrs = 1; google.protobuf.Value v = 2; repeated Tree kids = 3; }\n")
    assert protobuf.differences(parse(text), parse(text)) == []
    changed = parse(text.replace("google.protobuf.Value v", "google.protobuf.ListValue v"))
    assert protobuf.differences(parse(text), changed) == [("FIELD_NAMED_TYPE_CHANGED", "#/Tree/2")]
