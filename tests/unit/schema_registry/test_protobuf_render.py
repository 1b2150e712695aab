"""The .proto text the registry stores and answers for a Protobuf schema, against Confluent's own expectations.

Confluent's ProtobufSchema renders a schema with ProtobufSchemaUtils.toString; for one built from a descriptor
(what confluent-kafka's ProtobufSerializer registers: the base64 of its FileDescriptorProto) the elements come from
ProtobufSchema.toProtoFile. The registry renders from the descriptor too, so the expected strings here are those
Confluent's tests give for that form (``new ProtobufSchema(schema.toDescriptor()).canonicalString()``) or, where a
test has none, for its normalized form where it coincides with the descriptor form. Each case names its source in
confluentinc/schema-registry's protobuf-provider/src/test/java/io/confluent/kafka/schemaregistry/protobuf/
ProtobufSchemaTest.java and says what was adapted: inputs that only Wire's parser reads (``= [ ... ]`` option
lists, options no file declares) are written as protoc reads them, and imports of files this registry does not
ship (confluent/type/decimal.proto) are left out. The other cases are this registry's own, for what Confluent's
tests do not cover (map fields, oneofs, groups, editions, nested-type order).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.schema_registry import formats, protobuf

# ProtobufSchemaTest.testComplexCustomOptions: expectedSchemaString (the descriptor form). Adapted: the input's
# (com.custom.map) options and its import of common/extensions.proto are dropped (Confluent's descriptor form drops
# them too: that file does not resolve there), and the confluent.file_meta lines are one protoc aggregate.
COMPLEX_CUSTOM_OPTIONS = ('''syntax = "proto3";

import "confluent/meta.proto";

package com.custom.example.v0;

option go_package = "example/v0;example";
option java_multiple_files = true;
option (.confluent.file_meta) = {
  doc: "file meta" params: [{ value: "my_value", key: "my_key" }] tags: ["PII", "PRIVATE"]
};
message User {
  string first_name = 1;
  string last_name = 2;
}''', '''syntax = "proto3";
package com.custom.example.v0;

import "confluent/meta.proto";

option java_multiple_files = true;
option go_package = "example/v0;example";
option (confluent.file_meta) = {
  doc: "file meta",
  params: [
    {
      key: "my_key",
      value: "my_value"
    }
  ],
  tags: [
    "PII",
    "PRIVATE"
  ]
};

message User {
  string first_name = 1;
  string last_name = 2;
}
''')

# ProtobufSchemaTest.testComplexCustomOptions2: expectedSchemaString (the descriptor form). Adapted: no import of
# confluent/type/decimal.proto (unused), and my_field6's Wire-only ``tags = ["bar"]`` is protoc's ``tags = "bar"``.
COMPLEX_CUSTOM_OPTIONS_2 = ('''syntax = "proto3";
package com.example.mynamespace;
import "confluent/meta.proto";
option java_package = "io.confluent.kafka.serializers.protobuf.test";
option java_outer_classname = "ComplexProto";
message SampleRecord {
  int32 my_field1 = 1 [
    (confluent.field_meta).tags = "foo"
  ];
  double my_field2 = 2 [(confluent.field_meta) = {
    tags: [
      "bar"
    ]
  }];
  int32 my_field3 = 3 [
    (confluent.field_meta).tags = "foo",
    (confluent.field_meta).tags = "bar"
  ];
  double my_field4 = 4 [(confluent.field_meta) = {
    tags: [
      "foo",
      "bar"
    ]
  }];
  string my_field5 = 5 [
    (confluent.field_meta) = {
      tags: ["foo"]
    },
    (confluent.field_meta).tags = "bar"
  ];
  string my_field6 = 6 [
    (confluent.field_meta).tags = "foo",
    (confluent.field_meta).tags = "bar"
  ];
}''', '''syntax = "proto3";
package com.example.mynamespace;

import "confluent/meta.proto";

option java_package = "io.confluent.kafka.serializers.protobuf.test";
option java_outer_classname = "ComplexProto";

message SampleRecord {
  int32 my_field1 = 1 [(confluent.field_meta) = {
    tags: [
      "foo"
    ]
  }];
  double my_field2 = 2 [(confluent.field_meta) = {
    tags: [
      "bar"
    ]
  }];
  int32 my_field3 = 3 [(confluent.field_meta) = {
    tags: [
      "foo",
      "bar"
    ]
  }];
  double my_field4 = 4 [(confluent.field_meta) = {
    tags: [
      "foo",
      "bar"
    ]
  }];
  string my_field5 = 5 [(confluent.field_meta) = {
    tags: [
      "foo",
      "bar"
    ]
  }];
  string my_field6 = 6 [(confluent.field_meta) = {
    tags: [
      "foo",
      "bar"
    ]
  }];
}
''')

# ProtobufSchemaTest.testNestedCustomOptions: its normalized string, which is the descriptor form here but for two
# things normalize() adds: it sorts imports (the input below lists them sorted) and a message option's keys by name
# (the descriptor form, toOptionMap over getAllFields, keeps field-number order: owner = 1 before description = 2).
NESTED_CUSTOM_OPTIONS = ('''syntax = "proto3";
package acme.events;
import "google/protobuf/descriptor.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

message ValidationSettings {
  bool is_optional = 1;
}
message EventMetadata {
  google.protobuf.StringValue owner = 1;
  google.protobuf.StringValue description = 2;
  RetentionPolicies retention_policy = 4;
}

extend google.protobuf.FieldOptions {
  ValidationSettings validation_settings = 10000;
  EventMetadata event_metadata = 10001;
}

enum RetentionPolicies {
  DEFAULT = 0; // Default value, allows enforcement to implement default strategy
  SEVEN_DAYS = 1;
  THIRTY_DAYS = 2;
  NINETY_DAYS = 3;
  ONE_YEAR = 4;
  TWO_YEARS = 5;
  SEVEN_YEARS = 6;
  ALL_TIME = 7;
}

message EventHeader {
  google.protobuf.StringValue event_source = 1;
  google.protobuf.StringValue event_id = 2;
  google.protobuf.Timestamp event_timestamp = 3;
  google.protobuf.StringValue event_name = 4;
}

message Event {
  EventHeader header = 1;
  oneof only_one_event_limiter {
    SearchEvent requested_search = 2 [
      (event_metadata).description.value = "Fires when a user submits a search request.",
      (event_metadata).owner.value = "DISCO"
    ];
  }
}
message SearchEvent {
  google.protobuf.Int32Value user_id = 1 [(validation_settings).is_optional = true];
}
''', '''syntax = "proto3";
package acme.events;

import "google/protobuf/descriptor.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

message ValidationSettings {
  bool is_optional = 1;
}
message EventMetadata {
  .google.protobuf.StringValue owner = 1;
  .google.protobuf.StringValue description = 2;
  .acme.events.RetentionPolicies retention_policy = 4;
}
message EventHeader {
  .google.protobuf.StringValue event_source = 1;
  .google.protobuf.StringValue event_id = 2;
  .google.protobuf.Timestamp event_timestamp = 3;
  .google.protobuf.StringValue event_name = 4;
}
message Event {
  .acme.events.EventHeader header = 1;

  oneof only_one_event_limiter {
    .acme.events.SearchEvent requested_search = 2 [(acme.events.event_metadata) = {
      owner: {
        value: "DISCO"
      },
      description: {
        value: "Fires when a user submits a search request."
      }
    }];
  }
}
message SearchEvent {
  .google.protobuf.Int32Value user_id = 1 [(acme.events.validation_settings) = {
    is_optional: true
  }];
}
enum RetentionPolicies {
  DEFAULT = 0;
  SEVEN_DAYS = 1;
  THIRTY_DAYS = 2;
  NINETY_DAYS = 3;
  ONE_YEAR = 4;
  TWO_YEARS = 5;
  SEVEN_YEARS = 6;
  ALL_TIME = 7;
}

extend .google.protobuf.FieldOptions {
  .acme.events.ValidationSettings validation_settings = 10000;
  .acme.events.EventMetadata event_metadata = 10001;
}
''')

# ProtobufSchemaTest.testRanges: its normalized string (reserved and extension ranges one a line, a one-number range
# as that number; proto2 without a syntax line, as Confluent writes a proto2 descriptor). The input as given.
RANGES = ('''
message Money {
  reserved 5000 to 6000;
  reserved 10000 to 10001;
  reserved 20000 to 20000;

  optional int64 cents = 1;

  extensions 100 to 200;
  extensions 1000 to 1001;
  extensions 2000 to 2000;

  enum MoneyEnum {
    reserved 100 to 200;
    reserved 1000 to 1001;
    reserved 2000 to 2000;
    NONE = 0;
    CENTS = 1;
    DOLLARS = 2;
  }
}
''', '''
message Money {
  reserved 5000 to 6000;
  reserved 10000 to 10001;
  reserved 20000;

  optional int64 cents = 1;

  extensions 100 to 200;
  extensions 1000 to 1001;
  extensions 2000;

  enum MoneyEnum {
    reserved 100 to 200;
    reserved 1000 to 1001;
    reserved 2000;
    NONE = 0;
    CENTS = 1;
    DOLLARS = 2;
  }
}
''')

# ProtobufSchemaTest.testEnumReserved: its normalized string. Adapted: the input's reserved ranges are listed in
# ascending order (normalize() sorts them; the descriptor keeps the order they are declared in), and its range
# 1 to 3 is 3 to 5 (protoc refuses values in a reserved range; Wire does not check).
ENUM_RESERVED = ('''
import "google/protobuf/descriptor.proto";

message FooOptions {
  optional string name = 1;
  optional FooParameterType type = 2;
}
enum FooParameterType {
  reserved 3 to 5;
  reserved 10;
  reserved 20, 100 to max;
  reserved "BAD", "OLD";
  NUMBER = 1;
  STRING = 2;
}
''', '''
import "google/protobuf/descriptor.proto";

message FooOptions {
  optional string name = 1;
  optional .FooParameterType type = 2;
}
enum FooParameterType {
  reserved 3 to 5;
  reserved 10;
  reserved 20;
  reserved 100 to max;
  reserved "BAD";
  reserved "OLD";
  NUMBER = 1;
  STRING = 2;
}
''')

# ProtobufSchemaTest.testDefaultOmittedInProto3String: the whole expected string.
PROTO3_MINIMAL = ('syntax = "proto3";\nmessage msg1 { string field1 = 1; }\n',
                  'syntax = "proto3";\n\nmessage msg1 {\n  string field1 = 1;\n}\n')

CONFLUENT = {
    "testComplexCustomOptions": COMPLEX_CUSTOM_OPTIONS,
    "testComplexCustomOptions2": COMPLEX_CUSTOM_OPTIONS_2,
    "testNestedCustomOptions": NESTED_CUSTOM_OPTIONS,
    "testRanges": RANGES,
    "testEnumReserved": ENUM_RESERVED,
    "testDefaultOmittedInProto3String": PROTO3_MINIMAL,
}

# This registry's own cases, laid out by the same rules (ProtobufSchemaUtils.toString's sections; toProtoFile's
# fields, labels and option order), where Confluent's tests give no expected string.
OWN = {
    # Fields, then oneofs (a oneof declared first still comes after), then nested messages, then enums; proto3's
    # ``optional`` kept, map fields as map<K, V> (Confluent's descriptor form writes map entry messages, which
    # protoc refuses to read back).
    "sections": ('''syntax = "proto3";
package shop.v1;
message Order {
  enum Status { UNKNOWN = 0; PAID = 1; }
  oneof payment { string card = 8; bytes voucher = 9; }
  int64 id = 1;
  map<string, int32> counts = 4;
  optional string note = 6;
  reserved 20, 30 to 40;
  reserved "old";
  option deprecated = true;
  message Line { string sku = 1; }
  repeated Line lines = 3;
}
''', '''syntax = "proto3";
package shop.v1;

message Order {
  reserved 20;
  reserved 30 to 40;
  reserved "old";

  option deprecated = true;

  int64 id = 1;
  map<string, int32> counts = 4;
  optional string note = 6;
  repeated .shop.v1.Order.Line lines = 3;

  oneof payment {
    string card = 8;
    bytes voucher = 9;
  }

  message Line {
    string sku = 1;
  }
  enum Status {
    UNKNOWN = 0;
    PAID = 1;
  }
}
'''),
    # Several options on a field: one a line; the field's options, then default, then json_name (Confluent's
    # optionsWithSpecialValues); strings escaped as Confluent's escapeChars.
    "field options": ('''syntax = "proto2";
message M {
  optional string s = 1 [json_name = "S", default = "a\\tb", deprecated = true];
  repeated int32 v = 2 [packed = true];
  optional E e = 3 [default = TWO];
  enum E { ONE = 1; TWO = 2 [deprecated = true]; }
}
''', '''
message M {
  optional string s = 1 [
    deprecated = true,
    default = "a\\tb",
    json_name = "S"
  ];
  repeated int32 v = 2 [packed = true];
  optional .M.E e = 3 [default = TWO];

  enum E {
    ONE = 1;
    TWO = 2 [deprecated = true];
  }
}
'''),
    # proto2 groups as Wire keeps them (``label group Name = n { ... }``), each where the field was declared.
    "groups": ('''syntax = "proto2";
package legacy;
message SearchResponse {
  repeated group Result = 1 {
    required string url = 2;
    optional string title = 3;
  }
  optional int32 total = 4;
}
''', '''package legacy;

message SearchResponse {
  repeated group Result = 1 {
    required string url = 2;
    optional string title = 3;
  }

  optional int32 total = 4;
}
'''),
    # A nested message declared before a map field stays before it: protoc adds the map's entry message where it
    # meets the field, and the message indexes count it (Line is [0, 0] for the client and for the registry).
    "nested type order": ('''syntax = "proto3";
message Order {
  message Line { string sku = 1; }
  map<string, int32> counts = 1;
  int32 id = 2;
}
''', '''syntax = "proto3";

message Order {
  message Line {
    string sku = 1;
  }

  map<string, int32> counts = 1;
  int32 id = 2;
}
'''),
    # Editions: the edition, features as options (a message-valued option written by its leaves), no labels but
    # ``repeated``.
    "editions": ('''edition = "2023";
package e;
option features.field_presence = IMPLICIT;
message M {
  string a = 1;
  int32 b = 2 [features.field_presence = EXPLICIT];
  repeated int32 c = 3 [features.repeated_field_encoding = EXPANDED];
  N n = 4 [features.message_encoding = DELIMITED];
  message N { int32 x = 1; }
}
''', '''edition = "2023";
package e;

option features.field_presence = IMPLICIT;

message M {
  string a = 1;
  int32 b = 2 [features.field_presence = EXPLICIT];
  repeated int32 c = 3 [features.repeated_field_encoding = EXPANDED];
  .e.M.N n = 4 [features.message_encoding = DELIMITED];

  message N {
    int32 x = 1;
  }
}
'''),
    # Imports, then public imports; services, an rpc with options closed by ``};`` as Confluent writes it.
    "imports and services": ('''syntax = "proto3";
import public "google/protobuf/empty.proto";
import "google/protobuf/timestamp.proto";
service Clock {
  option deprecated = true;
  rpc Now (google.protobuf.Empty) returns (google.protobuf.Timestamp) { option idempotency_level = NO_SIDE_EFFECTS; }
  rpc Ticks (google.protobuf.Empty) returns (stream google.protobuf.Timestamp);
}
''', '''syntax = "proto3";

import "google/protobuf/timestamp.proto";
import public "google/protobuf/empty.proto";

service Clock {
  option deprecated = true;

  rpc Now (.google.protobuf.Empty) returns (.google.protobuf.Timestamp) {
    option idempotency_level = NO_SIDE_EFFECTS;
  };
  rpc Ticks (.google.protobuf.Empty) returns (stream .google.protobuf.Timestamp);
}
'''),
}

CASES = {**{f"confluent {k}": v for k, v in CONFLUENT.items()}, **{f"own {k}": v for k, v in OWN.items()}}


@pytest.mark.parametrize(("text", "expected"), list(CASES.values()), ids=list(CASES))
def test_rendering_is_confluents(text: str, expected: str) -> None:
    """text -> the stored rendering; and that rendering is a fixed point whose descriptor is the first one, and
    the base64 of the descriptor (what a client registers) renders the same."""
    schema = protobuf.parse(text)
    assert schema.text == expected
    again = protobuf.parse(schema.text)
    assert again.file == schema.file and again.text == expected
    assert protobuf.parse(schema.serialized()).text == expected
    assert formats.parse("PROTOBUF", text).canonical == expected


def test_option_strings_are_escaped_as_confluents_escape_chars() -> None:
    """ProtobufSchemaTest.testOptionEscape (its assertions, on options declared for protoc, which reads only
    declared ones)."""
    values = {"backslash": "backslash\\\\backslash", "doubleQuote": '\\"something\\"', "singleQuote": "\\'something\\'",
              "newline": "newline\\n", "bell": "bell\\a", "backspace": "backspace\\b", "formFeed": "formFeed\\f",
              "carriageReturn": "carriageReturn\\r", "tab": "tab\\t", "verticalTab": "verticalTab\\v"}
    declared = "\n".join(f"  string test_{name} = {50000 + i};" for i, name in enumerate(values))
    options = "\n".join(f'option (test_{name}) = "{value}";' for name, value in values.items())
    text = (f'syntax = "proto3";\nimport "google/protobuf/descriptor.proto";\n'
            f"extend google.protobuf.FileOptions {{\n{declared}\n}}\n{options}\n"
            'message TestOptionEscape { bool test_bool = 1; }\n')
    parsed = protobuf.parse(text).text
    for value in values.values():
        assert f'= "{value}";' in parsed, value
    assert protobuf.parse(parsed).text == parsed


def _well_known_texts() -> list[tuple[str, str]]:
    import grpc_tools

    root = Path(grpc_tools.__file__).parent / "_proto"
    return [(str(p.relative_to(root)), p.read_text()) for p in sorted(root.glob("google/protobuf/**/*.proto"))]


@pytest.mark.parametrize(("name", "text"), _well_known_texts(), ids=[n for n, _ in _well_known_texts()])
def test_the_well_known_files_round_trip(name: str, text: str) -> None:
    """protobuf's own .proto files as a corpus: descriptor.proto (proto2 defaults, extension ranges, repeated
    message options such as edition_defaults, retention and targets), the editions feature files, and the rest:
    each renders to text protoc compiles back to the same descriptor."""
    schema = protobuf.parse(text)
    again = protobuf.parse(schema.text)
    assert again.file == schema.file and again.text == schema.text
    assert protobuf.parse(schema.serialized()).text == schema.text
