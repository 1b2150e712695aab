"""Protobuf schemas as Confluent Schema Registry holds them: parsing, rendering, identity, compatibility, wire format.

Why a module of its own: a Protobuf schema is a .proto *file* (imports, a package, several messages), not one type,
so everything the registry does with one goes through a ``google.protobuf.FileDescriptorProto``: the .proto text a
client registers is compiled by protoc (grpc_tools, in process, no subprocess), the base64 of a serialized
descriptor (what confluent-kafka's ProtobufSerializer registers) is decoded, and both become the same descriptor.
From the descriptor come the rest, as Confluent's protobuf-provider does them:

* the text the registry stores and answers (``render``): deterministic, so the same schema registered as text or
  as base64 gets the same id (the canonical identity), and protoc compiles it back to the same descriptor;
* ``serialized``: the base64 of that descriptor (``?format=serialized``), which clients add to a DescriptorPool;
* compatibility (``differences``): Confluent's SchemaDiff (diff/Difference.java's types, SchemaDiff's set of
  compatible ones) walked over descriptors instead of Wire's elements;
* the wire format's message indexes (which message of the file a record holds), and JSON <-> message conversion
  as kafka-rest does it (JsonFormat's parser; its printer with default values included).

Invariants: ``parse(render(s.file))`` gives ``s.file`` again (field and type order kept); every name a file
imports resolves, by that name, to a reference given with it or to a well-known type (google/protobuf/*.proto,
and google/type/*.proto when googleapis-common-protos is installed), and a schema importing anything else is
refused; the only I/O is a temporary directory protoc reads the files from. Parses are cached by (text,
references), as the registry re-parses stored versions for every check and every record it decodes.
"""

from __future__ import annotations

import ast
import base64
import binascii
import contextlib
import functools
import importlib
import os
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory, text_encoding
from google.protobuf.message import DecodeError, Message

from odradek.protocol.errors import InvalidSchemaError, JsonConversionError, RecordDeserializationError
from odradek.protocol.message_indexes import decode_message_indexes
from odradek.protocol.message_indexes import encode_message_indexes as encode_indexes

FDP = descriptor_pb2.FileDescriptorProto
FD = descriptor_pb2.FieldDescriptorProto
MAIN = "default"  # the file name of a registered schema itself (Confluent's ProtobufSchema.DEFAULT_NAME)
_SCRATCH = "odradek_schema_main.proto"  # what protoc compiles; not a name a reference is likely to have

_SCALARS = {FD.TYPE_DOUBLE: "double", FD.TYPE_FLOAT: "float", FD.TYPE_INT64: "int64", FD.TYPE_UINT64: "uint64",
            FD.TYPE_INT32: "int32", FD.TYPE_FIXED64: "fixed64", FD.TYPE_FIXED32: "fixed32", FD.TYPE_BOOL: "bool",
            FD.TYPE_STRING: "string", FD.TYPE_BYTES: "bytes", FD.TYPE_UINT32: "uint32",
            FD.TYPE_SFIXED32: "sfixed32", FD.TYPE_SFIXED64: "sfixed64", FD.TYPE_SINT32: "sint32",
            FD.TYPE_SINT64: "sint64"}
_FIELD_MAX, _ENUM_MAX = 536870912, 2147483647  # exclusive end of message ranges, inclusive end of enum ranges
_protoc_lock = threading.Lock()


@dataclass(eq=False)
class ProtoSchema:
    """A parsed schema: ``file`` (named ``default``), ``deps`` every file it imports, transitively, each after
    its own imports (references under their names, well-known types under theirs), ``refs`` each reference's
    name with its rendered text (its identity, for the diff), and ``text`` the file's rendering (the registry's
    canonical form)."""

    file: FDP
    deps: tuple[FDP, ...]
    refs: dict[str, str]
    text: str
    _pool: list[descriptor_pool.DescriptorPool] = field(default_factory=list, repr=False)

    @property
    def pool(self) -> descriptor_pool.DescriptorPool:
        """A DescriptorPool holding the file and its dependencies (built once)."""
        if not self._pool:
            self._pool.append(_pool([*self.deps, self.file]))
        return self._pool[0]

    def serialized(self) -> str:
        """``?format=serialized``: the base64 of the serialized FileDescriptorProto."""
        return base64.standard_b64encode(self.file.SerializeToString()).decode("ascii")


# --------------------------------------------------------------------------------------------------- parsing


def parse(text: str, references: Sequence[tuple[str, str]] = ()) -> ProtoSchema:
    """``text`` (.proto text, or base64 of a serialized FileDescriptorProto) with ``references`` the (name,
    text) of every file it imports, transitively, each one's own imports before it. InvalidSchemaError (42201)
    with protoc's or the descriptor pool's reason when it does not compile."""
    return _parse_cached(text, tuple(references))


@functools.lru_cache(maxsize=512)
def _parse_cached(text: str, references: tuple[tuple[str, str], ...]) -> ProtoSchema:
    files: dict[str, FDP] = {}
    refs: dict[str, str] = {}
    for name, ref_text in references:
        if name in files:
            continue
        try:
            files[name] = _descriptor(name, ref_text, files)
        except InvalidSchemaError as e:
            reason = e.message.removeprefix("Invalid schema: ")
            raise InvalidSchemaError(f"Invalid schema: reference {name!r} does not parse: {reason}") from None
        refs[name] = render(files[name])
    main = _descriptor(MAIN, text, files)
    deps = _closure(main, files)
    try:
        _pool([*deps, main])
    except (TypeError, ValueError, KeyError) as e:  # a descriptor that does not link (base64 given)
        raise InvalidSchemaError(f"Invalid schema: {e}") from None
    return ProtoSchema(main, tuple(deps), {n: refs[n] for n in refs if any(d.name == n for d in deps)},
                       render(main))


def _descriptor(name: str, text: str, known: dict[str, FDP]) -> FDP:
    """One file's normalized descriptor, named ``name``."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidSchemaError("Invalid schema: empty")
    raw = _base64(text)
    if raw is not None:
        try:
            fdp = FDP.FromString(raw)
        except DecodeError as e:
            raise InvalidSchemaError(f"Invalid schema: the base64 is not a serialized FileDescriptorProto ({e})"
                                     ) from None
    else:
        fdp = _compile(text, known)
    fdp.name = name
    return normalized(fdp)


def _base64(text: str) -> bytes | None:
    """The bytes of ``text`` when it is base64 (a .proto text never is: it holds spaces, quotes or ';')."""
    stripped = text.strip()
    if not stripped.isascii() or len(stripped) % 4:
        return None
    try:
        return base64.b64decode(stripped, validate=True)
    except (binascii.Error, ValueError):
        return None


@functools.cache
def _includes() -> tuple[str, ...]:
    """protoc's include path for the well-known types: grpc_tools' google/protobuf/*.proto, and the
    googleapis-common-protos files (google/type/*.proto) when installed."""
    import grpc_tools

    out = [os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")]
    with contextlib.suppress(ImportError):
        google_type = importlib.import_module("google.type")  # googleapis-common-protos, optional
        out.append(os.path.dirname(os.path.dirname(os.path.abspath(next(iter(google_type.__path__))))))
    return tuple(out)


def _compile(text: str, known: dict[str, FDP]) -> FDP:
    """protoc's descriptor of .proto ``text``, its imports resolved to ``known`` (written out as rendered)."""
    from grpc_tools import _protoc_compiler

    with tempfile.TemporaryDirectory(prefix="odradek-proto-") as tmp:
        for name, fdp in known.items():
            path = os.path.join(tmp, name)
            if os.path.relpath(path, tmp).startswith(".."):
                raise InvalidSchemaError(f"Invalid schema: reference name {name!r} leaves the import tree")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(render(fdp))
        with open(os.path.join(tmp, _SCRATCH), "w", encoding="utf-8") as f:
            f.write(text)
        with _protoc_lock:
            try:
                modules = dict(_protoc_compiler.get_protos(_SCRATCH.encode(),
                                                           [tmp.encode(), *(p.encode() for p in _includes())]))
            except _protoc_compiler.ProtocErrors as e:
                messages = "; ".join(_protoc_error(err) for err in e.errors())
                raise InvalidSchemaError(f"Invalid schema: {messages or e}") from None
    source = modules[_SCRATCH.replace(".proto", "_pb2.py").encode()].decode()
    return FDP.FromString(_serialized_literal(source))


def _protoc_error(err: Any) -> str:
    message = err.message.decode() if isinstance(err.message, bytes) else str(err.message)
    where = f"{err.line + 1}:{err.column + 1}" if getattr(err, "line", -1) >= 0 else ""
    return f"{where} {message}".strip()


def _serialized_literal(source: str) -> bytes:
    """The serialized descriptor protoc's Python generator embeds (``AddSerializedFile(b'...')``)."""
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "AddSerializedFile" and node.args):
            value = ast.literal_eval(node.args[0])
            if isinstance(value, bytes):
                return value
    raise InvalidSchemaError("Invalid schema: protoc produced no descriptor")


def normalized(fdp: FDP) -> FDP:
    """The descriptor without what does not change the schema: source locations, a json_name that is the
    default one, proto2's ``syntax`` field (protoc leaves it empty for proto2). Editions and groups are refused
    (they are not rendered back as text)."""
    out = FDP()
    out.CopyFrom(fdp)
    out.ClearField("source_code_info")
    if out.syntax == "proto2":
        out.ClearField("syntax")
    if out.syntax not in ("", "proto3"):
        raise InvalidSchemaError(f"Invalid schema: syntax {out.syntax!r} is not supported; proto2 and proto3 are")
    for message in _walk_messages(out.message_type):
        for f in [*message.field, *message.extension]:
            if f.json_name == _json_name(f.name):
                f.ClearField("json_name")
            if f.type == FD.TYPE_GROUP:
                raise InvalidSchemaError(f"Invalid schema: group {f.name!r}: groups are not supported")
    for f in out.extension:
        if f.json_name == _json_name(f.name):
            f.ClearField("json_name")
    return out


def _json_name(name: str) -> str:
    """protoc's default json_name: lowerCamelCase of the field name."""
    out, upper = [], False
    for ch in name:
        if ch == "_":
            upper = True
        elif upper:
            out.append(ch.upper())
            upper = False
        else:
            out.append(ch)
    return "".join(out)


def _walk_messages(messages: Sequence[descriptor_pb2.DescriptorProto]) -> Iterator[descriptor_pb2.DescriptorProto]:
    for m in messages:
        yield m
        yield from _walk_messages(m.nested_type)


def _well_known(name: str) -> FDP | None:
    """A well-known type's file by its import name (google/protobuf/x.proto -> google.protobuf.x_pb2)."""
    if not name.startswith(("google/protobuf/", "google/type/")) or not name.endswith(".proto"):
        return None
    try:
        module = importlib.import_module(name.removesuffix(".proto").replace("/", ".") + "_pb2")
    except ImportError:
        return None
    return FDP.FromString(module.DESCRIPTOR.serialized_pb)


def _closure(main: FDP, files: dict[str, FDP]) -> list[FDP]:
    """Every file ``main`` imports, transitively, each after its own imports."""
    out: list[FDP] = []
    seen: set[str] = set()

    def visit(fdp: FDP, chain: tuple[str, ...]) -> None:
        for dep in fdp.dependency:
            if dep in chain:
                raise InvalidSchemaError(f"Invalid schema: import cycle through {dep!r}")
            if dep in seen:
                continue
            found = files.get(dep) or _well_known(dep)
            if found is None:
                raise InvalidSchemaError(f"Invalid schema: import {dep!r} is neither a reference given with the "
                                         "schema nor a well-known type")
            visit(found, (*chain, dep))
            seen.add(dep)
            out.append(found)

    visit(main, (main.name,))
    return out


def _pool(files: Sequence[FDP]) -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    for fdp in files:
        pool.AddSerializedFile(fdp.SerializeToString())
    return pool


# ------------------------------------------------------------------------------------------------- rendering


def render(fdp: FDP) -> str:
    """The .proto text of a descriptor: deterministic, fully-qualified type names (``.pkg.Msg``), messages,
    fields and oneofs in the descriptor's order, so protoc compiles it back to the same descriptor."""
    proto3 = fdp.syntax == "proto3"
    lines = [f'syntax = "{"proto3" if proto3 else "proto2"}";']
    if fdp.package:
        lines.append(f"package {fdp.package};")
    if fdp.dependency:
        lines.append("")
        public, weak = set(fdp.public_dependency), set(fdp.weak_dependency)
        for i, dep in enumerate(fdp.dependency):
            kind = "public " if i in public else "weak " if i in weak else ""
            lines.append(f'import {kind}"{_escape(dep)}";')
    options = _options(fdp.options, "FileOptions")
    if options:
        lines.append("")
        lines += [f"option {o};" for o in options]
    body: list[str] = []
    scope = f".{fdp.package}" if fdp.package else ""
    for m in fdp.message_type:
        body += _message(m, proto3, scope)
    for e in fdp.enum_type:
        body += _enum(e)
    body += _extends(fdp.extension, proto3)
    for s in fdp.service:
        body += _service(s)
    if body:
        lines.append("")
        lines += body
    return "\n".join(lines) + "\n"


def _escape(s: str) -> str:
    return text_encoding.CEscape(s, as_utf8=True)


def _value(fd: Any, value: Any) -> str:
    """An option's value as .proto text (enums by name, strings quoted)."""
    if fd.type == fd.TYPE_ENUM:
        return str(fd.enum_type.values_by_number[value].name)
    if fd.type == fd.TYPE_BOOL:
        return "true" if value else "false"
    if fd.type == fd.TYPE_STRING:
        return f'"{_escape(value)}"'
    if fd.type == fd.TYPE_BYTES:
        return f'"{text_encoding.CEscape(value, as_utf8=False)}"'
    return repr(value) if isinstance(value, float) else str(value)


def _options(options: Message, kind: str, skip: tuple[str, ...] = ()) -> list[str]:
    """``name = value`` for each option set; custom options (extensions protoc kept as unknown fields) and
    message-valued ones are refused, as they cannot be rendered back faithfully here."""
    from google.protobuf import unknown_fields

    if len(unknown_fields.UnknownFieldSet(options)):
        raise InvalidSchemaError(f"Invalid schema: custom {kind} (extensions of google.protobuf.{kind}) are not "
                                 "supported")
    out = []
    for fd, value in options.ListFields():
        if fd.name in skip:
            continue
        repeated = getattr(fd, "is_repeated", None)
        if repeated is None:  # protobuf < 7: the label
            repeated = fd.label == fd.LABEL_REPEATED
        if fd.type == fd.TYPE_MESSAGE or repeated or fd.is_extension:
            raise InvalidSchemaError(f"Invalid schema: option {fd.name} of {kind} is not supported")
        out.append(f"{fd.name} = {_value(fd, value)}")
    return out


def _indent(lines: list[str]) -> list[str]:
    return [f"  {line}" if line else line for line in lines]


def _ranges(ranges: Sequence[Any], exclusive: bool, maximum: int) -> list[str]:
    out = []
    for r in ranges:
        end = r.end - 1 if exclusive else r.end
        if end == (maximum - 1 if exclusive else maximum):
            out.append(f"{r.start} to max")
        else:
            out.append(str(r.start) if end == r.start else f"{r.start} to {end}")
    return out


def _message(m: descriptor_pb2.DescriptorProto, proto3: bool, scope: str) -> list[str]:
    full = f"{scope}.{m.name}"
    entries = {f"{full}.{n.name}": n for n in m.nested_type if n.options.map_entry}
    body: list[str] = [f"option {o};" for o in _options(m.options, "MessageOptions", ("map_entry",))]
    if m.reserved_range:
        body.append(f"reserved {', '.join(_ranges(m.reserved_range, True, _FIELD_MAX))};")
    if m.reserved_name:
        body.append(f"reserved {', '.join(chr(34) + _escape(n) + chr(34) for n in m.reserved_name)};")
    if m.extension_range:
        body.append(f"extensions {', '.join(_ranges(m.extension_range, True, _FIELD_MAX))};")
    done: set[int] = set()
    for f in m.field:
        real_oneof = f.HasField("oneof_index") and not f.proto3_optional
        if not real_oneof:
            body.append(_field(f, proto3, entries))
            continue
        if f.oneof_index in done:
            continue
        done.add(f.oneof_index)
        oneof = m.oneof_decl[f.oneof_index]
        inner = [f"option {o};" for o in _options(oneof.options, "OneofOptions")]
        inner += [_field(g, proto3, entries, in_oneof=True) for g in m.field
                  if g.HasField("oneof_index") and g.oneof_index == f.oneof_index]
        body += [f"oneof {oneof.name} {{", *_indent(inner), "}"]
    for n in m.nested_type:
        if not n.options.map_entry:
            body += _message(n, proto3, full)
    for e in m.enum_type:
        body += _enum(e)
    body += _extends(m.extension, proto3)
    return [f"message {m.name} {{", *_indent(body), "}"]


def _type(f: FD, entries: dict[str, descriptor_pb2.DescriptorProto]) -> str:
    if f.type in _SCALARS:
        return _SCALARS[f.type]
    entry = entries.get(f.type_name) if f.label == FD.LABEL_REPEATED else None
    if entry is not None:
        key, value = entry.field[0], entry.field[1]
        return f"map<{_type(key, {})}, {_type(value, {})}>"
    return f.type_name


def _field(f: FD, proto3: bool, entries: dict[str, descriptor_pb2.DescriptorProto], *, in_oneof: bool = False,
           ) -> str:
    kind = _type(f, entries)
    if kind.startswith("map<"):
        label = ""
    elif f.label == FD.LABEL_REPEATED:
        label = "repeated "
    elif f.label == FD.LABEL_REQUIRED:
        label = "required "
    elif in_oneof or (proto3 and not f.proto3_optional):
        label = ""
    else:
        label = "optional "
    opts: list[str] = []
    if f.HasField("default_value"):
        if f.type == FD.TYPE_STRING:
            opts.append(f'default = "{_escape(f.default_value)}"')
        elif f.type == FD.TYPE_BYTES:
            opts.append(f'default = "{f.default_value}"')  # protoc keeps bytes defaults C-escaped
        else:
            opts.append(f"default = {f.default_value}")
    if f.HasField("json_name"):
        opts.append(f'json_name = "{_escape(f.json_name)}"')
    opts += _options(f.options, "FieldOptions")
    suffix = f" [{', '.join(opts)}]" if opts else ""
    return f"{label}{kind} {f.name} = {f.number}{suffix};"


def _enum(e: descriptor_pb2.EnumDescriptorProto) -> list[str]:
    body = [f"option {o};" for o in _options(e.options, "EnumOptions")]
    if e.reserved_range:
        body.append(f"reserved {', '.join(_ranges(e.reserved_range, False, _ENUM_MAX))};")
    if e.reserved_name:
        body.append(f"reserved {', '.join(chr(34) + _escape(n) + chr(34) for n in e.reserved_name)};")
    for v in e.value:
        opts = _options(v.options, "EnumValueOptions")
        body.append(f"{v.name} = {v.number}{' [' + ', '.join(opts) + ']' if opts else ''};")
    return [f"enum {e.name} {{", *_indent(body), "}"]


def _extends(extensions: Sequence[FD], proto3: bool) -> list[str]:
    out: list[str] = []
    extendees: dict[str, list[FD]] = {}
    for f in extensions:
        extendees.setdefault(f.extendee, []).append(f)
    for extendee, fields in extendees.items():
        out += [f"extend {extendee} {{", *_indent([_field(f, proto3, {}) for f in fields]), "}"]
    return out


def _service(s: descriptor_pb2.ServiceDescriptorProto) -> list[str]:
    body = [f"option {o};" for o in _options(s.options, "ServiceOptions")]
    for m in s.method:
        inp = f"{'stream ' if m.client_streaming else ''}{m.input_type}"
        out = f"{'stream ' if m.server_streaming else ''}{m.output_type}"
        opts = _options(m.options, "MethodOptions")
        tail = f" {{ {' '.join(f'option {o};' for o in opts)} }}" if opts else ";"
        body.append(f"rpc {m.name} ({inp}) returns ({out}){tail}")
    return [f"service {s.name} {{", *_indent(body), "}"]


# --------------------------------------------------------------------------------------------- compatibility
# Confluent's protobuf-provider diff (SchemaDiff, MessageSchemaDiff, FieldSchemaDiff, OneOfDiff, EnumSchemaDiff)
# over descriptors: every Difference it finds, each with Confluent's path ("#/Message/tag"); the compatible
# ones are SchemaDiff.COMPATIBLE_CHANGES, every other one breaks compatibility.

COMPATIBLE = frozenset({
    "MESSAGE_ADDED", "MESSAGE_MOVED", "ENUM_ADDED", "ENUM_REMOVED", "ENUM_CONST_ADDED", "ENUM_CONST_CHANGED",
    "ENUM_CONST_REMOVED", "FIELD_ADDED", "FIELD_REMOVED", "FIELD_NAME_CHANGED", "FIELD_STRING_OR_BYTES_LABEL_CHANGED",
    "ONEOF_ADDED", "ONEOF_REMOVED", "ONEOF_FIELD_ADDED",
})
INCOMPATIBLE = frozenset({
    "PACKAGE_CHANGED", "MESSAGE_REMOVED", "FIELD_KIND_CHANGED", "FIELD_SCALAR_KIND_CHANGED",
    "FIELD_NAMED_TYPE_CHANGED", "FIELD_NUMERIC_LABEL_CHANGED", "REQUIRED_FIELD_ADDED", "REQUIRED_FIELD_REMOVED",
    "ONEOF_FIELD_REMOVED", "MULTIPLE_FIELDS_MOVED_TO_ONEOF", "FIELD_MOVED_TO_EXISTING_ONEOF",
})

_SCALAR_KIND = {"int32": "GENERAL_NUMBER", "int64": "GENERAL_NUMBER", "uint32": "GENERAL_NUMBER",
                "uint64": "GENERAL_NUMBER", "bool": "GENERAL_NUMBER", "sint32": "SIGNED_NUMBER",
                "sint64": "SIGNED_NUMBER", "string": "STRING_OR_BYTES", "bytes": "STRING_OR_BYTES",
                "fixed32": "FIXED32", "sfixed32": "FIXED32", "fixed64": "FIXED64", "sfixed64": "FIXED64",
                "float": "FLOAT", "double": "DOUBLE"}


@dataclass(frozen=True)
class _TypeInfo:
    package: str
    ref: tuple[str, str] | None  # ("", "") for the schema's own types, (name, content) for a reference's
    proto: Any  # DescriptorProto or EnumDescriptorProto
    is_enum: bool
    proto3: bool

    @property
    def is_map(self) -> bool:
        return not self.is_enum and bool(self.proto.options.map_entry)


@dataclass(frozen=True)
class _Field:
    """A field as Wire's FieldElement sees it: its label (None for proto3's implicit presence, a oneof's
    member or a map) and its type (a scalar's name, or a type's full name without the leading dot)."""

    name: str
    number: int
    label: str | None
    type: str
    proto3: bool


class _Ctx:
    """Confluent's diff Context: both sides' types by full name, the current path, the message pairs being
    compared (a recursive type is compared once), and the differences found."""

    def __init__(self, original: ProtoSchema, update: ProtoSchema) -> None:
        self.types: tuple[dict[str, _TypeInfo], dict[str, _TypeInfo]] = (_collect(original), _collect(update))
        self.proto3 = [original.file.syntax == "proto3", update.file.syntax == "proto3"]
        self.path: list[str] = []
        self.in_progress: set[tuple[int, int]] = set()
        self.diffs: list[tuple[str, str]] = []

    def add(self, kind: str) -> None:
        self.diffs.append((kind, "#/" + "/".join(self.path)))

    @contextlib.contextmanager
    def enter(self, part: str) -> Iterator[None]:
        self.path.append(part)
        try:
            yield
        finally:
            self.path.pop()


def _collect(schema: ProtoSchema) -> dict[str, _TypeInfo]:
    out: dict[str, _TypeInfo] = {}

    def walk(prefix: str, fdp: FDP, ref: tuple[str, str] | None, messages: Sequence[Any],
             enums: Sequence[Any]) -> None:
        proto3 = fdp.syntax == "proto3"
        for m in messages:
            out[f"{prefix}{m.name}"] = _TypeInfo(fdp.package, ref, m, False, proto3)
            walk(f"{prefix}{m.name}.", fdp, ref, m.nested_type, m.enum_type)
        for e in enums:
            out[f"{prefix}{e.name}"] = _TypeInfo(fdp.package, ref, e, True, proto3)

    for fdp in [*schema.deps, schema.file]:
        if fdp is schema.file:
            ref: tuple[str, str] | None = ("", "")
        elif fdp.name in schema.refs:
            ref = (fdp.name, schema.refs[fdp.name])
        else:
            ref = None  # a well-known type: no reference (Confluent compares its messages every time)
        walk(f"{fdp.package}." if fdp.package else "", fdp, ref, fdp.message_type, fdp.enum_type)
    return out


def differences(original: ProtoSchema, update: ProtoSchema) -> list[tuple[str, str]]:
    """Every (Difference type, path) from ``original`` to ``update`` (Confluent's SchemaDiff.compare)."""
    ctx = _Ctx(original, update)
    if original.file.package != update.file.package:
        ctx.add("PACKAGE_CHANGED")
    _compare_types(ctx, original.file.message_type, original.file.enum_type, update.file.message_type,
                   update.file.enum_type)
    return ctx.diffs


def incompatibilities(reader: ProtoSchema, writer: ProtoSchema) -> list[str]:
    """Whether ``reader`` reads what ``writer`` wrote, as Confluent's isBackwardCompatible(previous=writer)
    answers it: each incompatible Difference, worded as its toString."""
    return [f"Difference{{fullPath='{path}', type={kind}}}" for kind, path in differences(writer, reader)
            if kind not in COMPATIBLE]


def _compare_types(ctx: _Ctx, omsgs: Sequence[Any], oenums: Sequence[Any], umsgs: Sequence[Any],
                   uenums: Sequence[Any]) -> None:
    om = {m.name: (i, m) for i, m in enumerate(omsgs)}
    um = {m.name: (i, m) for i, m in enumerate(umsgs)}
    for name in sorted(set(om) | set(um)):
        with ctx.enter(name):
            o, u = om.get(name), um.get(name)
            if u is None:
                assert o is not None
                if not o[1].options.map_entry:
                    ctx.add("MESSAGE_REMOVED")
            elif o is None:
                if not u[1].options.map_entry:
                    ctx.add("MESSAGE_ADDED")
            elif not (o[1].options.map_entry or u[1].options.map_entry):
                _compare_message(ctx, o[1], u[1])
                if o[0] != u[0]:
                    ctx.add("MESSAGE_MOVED")
    oe = {e.name: e for e in oenums}
    ue = {e.name: e for e in uenums}
    for name in sorted(set(oe) | set(ue)):
        with ctx.enter(name):
            if name not in ue:
                ctx.add("ENUM_REMOVED")
            elif name not in oe:
                ctx.add("ENUM_ADDED")
            else:
                _compare_enum(ctx, oe[name], ue[name])


def _compare_enum(ctx: _Ctx, original: Any, update: Any) -> None:
    ov = {v.number: v.name for v in original.value}
    uv = {v.number: v.name for v in update.value}
    for number in sorted(set(ov) | set(uv)):
        with ctx.enter(str(number)):
            if number not in uv:
                ctx.add("ENUM_CONST_REMOVED")
            elif number not in ov:
                ctx.add("ENUM_CONST_ADDED")
            elif ov[number] != uv[number]:
                ctx.add("ENUM_CONST_CHANGED")


def _fields(ctx: _Ctx, side: int, m: Any) -> tuple[dict[int, _Field], dict[str, dict[int, _Field]]]:
    """(top-level fields by number, each real oneof's fields by number), labels as Wire reads them."""
    top: dict[int, _Field] = {}
    oneofs: dict[str, dict[int, _Field]] = {}
    proto3 = ctx.proto3[side]
    for f in m.field:
        in_oneof = f.HasField("oneof_index") and not f.proto3_optional
        info = ctx.types[side].get(f.type_name.lstrip(".")) if f.type == FD.TYPE_MESSAGE else None
        is_map = info is not None and info.is_map and f.label == FD.LABEL_REPEATED
        if is_map or in_oneof:
            label = None
        elif f.label == FD.LABEL_REPEATED:
            label = "REPEATED"
        elif f.label == FD.LABEL_REQUIRED:
            label = "REQUIRED"
        elif proto3 and not f.proto3_optional:
            label = None
        else:
            label = "OPTIONAL"
        kind = _SCALARS.get(f.type) or f.type_name.lstrip(".")
        entry = _Field(f.name, f.number, label, kind, proto3)
        if in_oneof:
            oneofs.setdefault(m.oneof_decl[f.oneof_index].name, {})[f.number] = entry
        else:
            top[f.number] = entry
    return top, oneofs


def _compare_message(ctx: _Ctx, original: Any, update: Any) -> None:
    key = (id(original), id(update))
    if key not in ctx.in_progress:
        ctx.in_progress.add(key)
        try:
            _compare_message_fields(ctx, original, update)
        finally:
            ctx.in_progress.discard(key)
    _compare_types(ctx, original.nested_type, original.enum_type, update.nested_type, update.enum_type)


def _compare_message_fields(ctx: _Ctx, original: Any, update: Any) -> None:
    o_top, o_oneofs = _fields(ctx, 0, original)
    u_top, u_oneofs = _fields(ctx, 1, update)
    o_all = {**o_top, **{n: f for fs in o_oneofs.values() for n, f in fs.items()}}
    u_all = {**u_top, **{n: f for fs in u_oneofs.values() for n, f in fs.items()}}
    o_member = {n: name for name, fs in o_oneofs.items() for n in fs}
    u_member = {n: name for name, fs in u_oneofs.items() for n in fs}
    remaining = dict(o_top)
    for name, fs in u_oneofs.items():
        with ctx.enter(name):
            moved = existing = 0
            for number in fs:
                if remaining.pop(number, None) is not None:
                    moved += 1
                elif number in o_member:
                    existing += 1
            if moved > 1:
                ctx.add("MULTIPLE_FIELDS_MOVED_TO_ONEOF")
            elif moved == 1 and existing > 0:
                ctx.add("FIELD_MOVED_TO_EXISTING_ONEOF")
    for name in sorted(set(o_oneofs) | set(u_oneofs)):
        with ctx.enter(name):
            if name not in u_oneofs:
                ctx.add("ONEOF_REMOVED")
            elif name not in o_oneofs:
                ctx.add("ONEOF_ADDED")
            else:
                of, uf = o_oneofs[name], u_oneofs[name]
                for number in sorted(set(of) | set(uf)):
                    with ctx.enter(str(number)):
                        if number not in uf:
                            if number not in u_all:
                                ctx.add("ONEOF_FIELD_REMOVED")
                        elif number not in of:
                            ctx.add("ONEOF_FIELD_ADDED")
                        else:
                            _compare_field(ctx, of[number], uf[number])
    for number in sorted(set(remaining) | set(u_top)):
        with ctx.enter(str(number)):
            o, u = remaining.get(number), u_top.get(number)
            if u is None:
                assert o is not None
                ctx.add("REQUIRED_FIELD_REMOVED" if o.label == "REQUIRED" else "FIELD_REMOVED")
            elif o is None:
                ctx.add("REQUIRED_FIELD_ADDED" if u.label == "REQUIRED" else "FIELD_ADDED")
            else:
                _compare_field(ctx, o, u)
    for number in sorted(set(o_all) & set(u_all)):
        om, um = o_member.get(number), u_member.get(number)
        if (om is None and um is None) or (om is not None and om == um):
            continue
        with ctx.enter(str(number)):
            _compare_field(ctx, o_all[number], u_all[number])


def _compare_field(ctx: _Ctx, original: _Field, update: _Field) -> None:
    if original.name != update.name:
        ctx.add("FIELD_NAME_CHANGED")
    _compare_labels_and_types(ctx, original.label, update.label, original.type, update.type)


def _info(ctx: _Ctx, side: int, kind: str) -> _TypeInfo | None:
    return None if kind in _SCALAR_KIND else ctx.types[side].get(kind)


def _kind(ctx: _Ctx, side: int, kind: str) -> str:
    if kind in _SCALAR_KIND:
        return "SCALAR"
    info = _info(ctx, side, kind)
    if info is not None and info.is_enum:
        return "SCALAR"
    if info is not None and info.is_map:
        return "MAP"
    return "MESSAGE"


def _scalar_kind(ctx: _Ctx, side: int, kind: str) -> str:
    info = _info(ctx, side, kind)
    return "GENERAL_NUMBER" if info is not None and info.is_enum else _SCALAR_KIND[kind]


def _compare_labels_and_types(ctx: _Ctx, olabel: str | None, ulabel: str | None, otype: str, utype: str) -> None:
    okind, ukind = _kind(ctx, 0, otype), _kind(ctx, 1, utype)
    if okind != ukind:
        ctx.add("FIELD_KIND_CHANGED")
    elif okind == "SCALAR":
        osk, usk = _scalar_kind(ctx, 0, otype), _scalar_kind(ctx, 1, utype)
        if osk != usk:
            ctx.add("FIELD_SCALAR_KIND_CHANGED")
        elif olabel is not None and ulabel is not None and olabel != ulabel:
            ctx.add("FIELD_STRING_OR_BYTES_LABEL_CHANGED" if osk == "STRING_OR_BYTES"
                    else "FIELD_NUMERIC_LABEL_CHANGED")
    elif okind == "MAP":
        oe, ue = ctx.types[0][otype].proto, ctx.types[1][utype].proto
        for i in (0, 1):  # key, then value
            ofield = _SCALARS.get(oe.field[i].type) or oe.field[i].type_name.lstrip(".")
            ufield = _SCALARS.get(ue.field[i].type) or ue.field[i].type_name.lstrip(".")
            _compare_labels_and_types(ctx, None, None, ofield, ufield)
    else:
        _compare_message_types(ctx, otype, utype)


def _compare_message_types(ctx: _Ctx, otype: str, utype: str) -> None:
    oinfo, uinfo = ctx.types[0].get(otype), ctx.types[1].get(utype)
    if oinfo is None or uinfo is None:
        if otype != utype:
            ctx.add("FIELD_NAMED_TYPE_CHANGED")
        return
    olocal = otype.removeprefix(f"{oinfo.package}.") if oinfo.package else otype
    ulocal = utype.removeprefix(f"{uinfo.package}.") if uinfo.package else utype
    if olocal != ulocal:
        ctx.add("FIELD_NAMED_TYPE_CHANGED")
        return
    if oinfo.ref is not None and uinfo.ref is not None and oinfo.ref == uinfo.ref:
        return  # both the schema's own types (compared where they are declared), or the same reference
    saved_path, saved_proto3 = ctx.path, ctx.proto3
    before = len(ctx.diffs)
    ctx.path, ctx.proto3 = olocal.split("."), [oinfo.proto3, uinfo.proto3]
    try:
        _compare_message(ctx, oinfo.proto, uinfo.proto)
    finally:
        ctx.path = saved_path
        ctx.proto3 = saved_proto3
    if any(kind not in COMPATIBLE for kind, _ in ctx.diffs[before:]):
        ctx.add("FIELD_NAMED_TYPE_CHANGED")


# ------------------------------------------------------------------------------------ wire format and JSON
# Confluent's framing for Protobuf: after the magic byte and the schema id, the message indexes
# (odradek/protocol/message_indexes.py), then the message's bytes.


def decode_indexes(data: bytes) -> tuple[list[int], int]:
    """(message indexes, position of the message's bytes) of a payload after the schema id."""
    try:
        indexes, pos = decode_message_indexes(data)
    except ValueError as e:
        raise RecordDeserializationError(f"Error deserializing Protobuf message: {e}") from None
    return list(indexes), pos


def message_indexes(schema: ProtoSchema, name: str) -> list[int]:
    """The indexes of the message ``name`` (full, or relative to the package) in the schema's file."""
    parts = name.removeprefix(f"{schema.file.package}.").split(".") if schema.file.package else name.split(".")
    out: list[int] = []
    messages: Sequence[Any] = schema.file.message_type
    for part in parts:
        for i, m in enumerate(messages):
            if m.name == part:
                out.append(i)
                messages = m.nested_type
                break
        else:
            raise JsonConversionError(f"Conversion of JSON to Protobuf failed: no message {name!r} in the schema")
    return out


def message_name(schema: ProtoSchema, indexes: Sequence[int]) -> str:
    """The full name of the message at ``indexes`` (RecordDeserializationError when there is none)."""
    messages: Sequence[Any] = schema.file.message_type
    names = []
    for i in indexes:
        if not 0 <= i < len(messages):
            raise RecordDeserializationError(f"Error deserializing Protobuf message: invalid message indexes "
                                             f"{list(indexes)}")
        names.append(messages[i].name)
        messages = messages[i].nested_type
    if not names:
        raise RecordDeserializationError("Error deserializing Protobuf message: no message indexes")
    return ".".join([schema.file.package, *names] if schema.file.package else names)


def _message_class(schema: ProtoSchema, full_name: str) -> type[Message]:
    return message_factory.GetMessageClass(schema.pool.FindMessageTypeByName(full_name))


def first_message(schema: ProtoSchema) -> list[int]:
    """What the REST Proxy writes with (kafka-rest: the schema's first message, ProtobufSchema.name())."""
    if not schema.file.message_type:
        raise JsonConversionError("Conversion of JSON to Protobuf failed: the schema defines no message")
    return [0]


def encode(schema: ProtoSchema, value: Any, indexes: Sequence[int] | None = None) -> bytes:
    """The payload after the schema id: the message indexes, then the message ``value`` (JSON, as
    JsonFormat.parser reads it: json names or field names, int64 as numbers or strings) encodes to.
    JsonConversionError (42203) when it does not fit the message."""
    idx = list(indexes) if indexes is not None else first_message(schema)
    try:
        cls = _message_class(schema, message_name(schema, idx))
    except RecordDeserializationError as e:
        raise JsonConversionError(f"Conversion of JSON to Protobuf failed: {e.message}") from None
    if not isinstance(value, dict):
        raise JsonConversionError(f"Conversion of JSON to Protobuf failed: a {cls.DESCRIPTOR.full_name} is a JSON "
                                  f"object, not {type(value).__name__}")
    try:
        message = json_format.ParseDict(value, cls())
        data = message.SerializeToString()
    except (json_format.ParseError, TypeError, ValueError, RecursionError) as e:
        raise JsonConversionError(f"Conversion of JSON to Protobuf failed: {e}") from None
    return encode_indexes(idx) + data


def decode(schema: ProtoSchema, payload: bytes) -> Any:
    """A payload (message indexes, message) back as JSON, as kafka-rest renders it (JsonFormat's printer with
    default values included: json names, int64 as strings, enums by name)."""
    indexes, pos = decode_indexes(payload)
    cls = _message_class(schema, message_name(schema, indexes))
    try:
        message = cls.FromString(payload[pos:])
    except DecodeError as e:
        raise RecordDeserializationError(f"Error deserializing Protobuf message: {e}") from None
    return json_format.MessageToDict(message, always_print_fields_with_no_presence=True)
