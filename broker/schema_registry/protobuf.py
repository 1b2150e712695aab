"""Protobuf schemas as Confluent Schema Registry holds them: parsing, rendering, identity, compatibility, wire format.

Why a module of its own: a Protobuf schema is a .proto *file* (imports, a package, several messages), not one type,
so everything the registry does with one goes through a ``google.protobuf.FileDescriptorProto``: the .proto text a
client registers is compiled by protoc (grpc_tools, in process, no subprocess), the base64 of a serialized
descriptor (what confluent-kafka's ProtobufSerializer registers) is decoded, and both become the same descriptor.
From the descriptor come the rest, as Confluent's protobuf-provider does them:

* the text the registry stores and answers (``render``): Confluent's rendering of a descriptor
  (ProtobufSchemaUtils.toString over ProtobufSchema.toProtoFile), custom options included; deterministic, so the
  same schema registered as text or as base64 gets the same id (the canonical identity), and protoc compiles it
  back to the same descriptor;
* ``serialized``: the base64 of that descriptor (``?format=serialized``), which clients add to a DescriptorPool;
* compatibility (``differences``): Confluent's SchemaDiff (diff/Difference.java's types, SchemaDiff's set of
  compatible ones) walked over descriptors instead of Wire's elements;
* the wire format's message indexes (which message of the file a record holds), and JSON <-> message conversion
  as kafka-rest does it (JsonFormat's parser; its printer with default values included).

Invariants: ``parse(render(s.file))`` gives ``s.file`` again: ``normalized`` puts a descriptor in the order
``render`` writes (a oneof's fields after the others; nested types never move, as message indexes count them);
proto2, proto3 and editions files, proto2 groups and custom options (extensions of descriptor.proto's *Options,
declared in the file, a reference or confluent/meta.proto) are all rendered back, and an option no imported file
declares is refused rather than dropped; every name a file imports resolves, by that name, to a reference given
with it or to a well-known type (google/protobuf/*.proto, Confluent's confluent/meta.proto shipped in ``proto/``,
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
import math
import os
import re
import struct
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory, text_encoding
from google.protobuf.message import DecodeError, EncodeError, Message

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
            fdp = _descriptor(name, ref_text, refs)
            files[name] = _canonical_options(fdp, files)
            refs[name] = render(files[name], files)
        except InvalidSchemaError as e:
            reason = e.message.removeprefix("Invalid schema: ")
            raise InvalidSchemaError(f"Invalid schema: reference {name!r} does not parse: {reason}") from None
    main = _canonical_options(_descriptor(MAIN, text, refs), files)
    deps = _closure(main, files)
    try:
        _pool([*deps, main])
    except (TypeError, ValueError, KeyError) as e:  # a descriptor that does not link (base64 given)
        raise InvalidSchemaError(f"Invalid schema: {e}") from None
    return ProtoSchema(main, tuple(deps), {n: refs[n] for n in refs if any(d.name == n for d in deps)},
                       render(main, files))


def _descriptor(name: str, text: str, sources: dict[str, str]) -> FDP:
    """One file's normalized descriptor, named ``name``; ``sources`` the .proto text of each file it may import
    by name (the references' renderings)."""
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
        fdp = _compile(text, sources)
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


_BUILTIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "proto")  # Confluent's own .proto files
# Confluent's own imports, resolved as well-known (no reference), as its clients send none for them
_CONFLUENT_IMPORTS = ("confluent/meta.proto", "confluent/type/decimal.proto")


@functools.cache
def _includes() -> tuple[str, ...]:
    """protoc's include path for the well-known types: grpc_tools' google/protobuf/*.proto, Confluent's
    confluent/meta.proto (shipped with this package), and the googleapis-common-protos files (google/type/*.proto)
    when installed."""
    import grpc_tools

    out = [os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"), _BUILTIN]
    with contextlib.suppress(ImportError):
        google_type = importlib.import_module("google.type")  # googleapis-common-protos, optional
        out.append(os.path.dirname(os.path.dirname(os.path.abspath(next(iter(google_type.__path__))))))
    return tuple(out)


_EDITION = re.compile(r"^\s*edition\s*=", re.MULTILINE)
_SYNTAX = re.compile(r"^\s*(syntax|edition)\s*=", re.MULTILINE)


def _explicit_syntax(text: str) -> str:
    """``text`` with proto2's ``syntax`` statement when it has none (protoc's default, which it logs a warning
    for on every compile): on the first line, so protoc's line numbers stay the text's."""
    return text if _SYNTAX.search(text) else f"{_PROTO2}{text}"


_PROTO2 = 'syntax = "proto2"; '


def _compile(text: str, sources: dict[str, str]) -> FDP:
    """protoc's descriptor of .proto ``text``, its imports resolved to ``sources`` (name -> .proto text), then
    to the include path."""
    from grpc_tools import _protoc_compiler

    with tempfile.TemporaryDirectory(prefix="odradek-proto-") as tmp:
        for name, source in sources.items():
            path = os.path.join(tmp, name)
            if os.path.relpath(path, tmp).startswith(".."):
                raise InvalidSchemaError(f"Invalid schema: reference name {name!r} leaves the import tree")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(_explicit_syntax(source))
        with open(os.path.join(tmp, _SCRATCH), "w", encoding="utf-8") as f:
            f.write(_explicit_syntax(text))
        with _protoc_lock:
            try:
                modules = dict(_protoc_compiler.get_protos(_SCRATCH.encode(),
                                                           [tmp.encode(), *(p.encode() for p in _includes())]))
            except _protoc_compiler.ProtocErrors as e:
                shift = len(_PROTO2) if not _SYNTAX.search(text) else 0  # the columns of the text's first line
                messages = "; ".join(_protoc_error(err, shift) for err in e.errors()) or str(e)
                if _EDITION.search(text) and "edition" in messages.lower():
                    messages = f"editions are not supported by this registry's protoc: {messages}"
                raise InvalidSchemaError(f"Invalid schema: {messages}") from None
    source = modules[_SCRATCH.replace(".proto", "_pb2.py").encode()].decode()
    return FDP.FromString(_serialized_literal(source))


def _protoc_error(err: Any, shift: int = 0) -> str:
    message = err.message.decode() if isinstance(err.message, bytes) else str(err.message)
    column = err.column - shift if err.line == 0 and err.column >= shift else err.column
    where = f"{err.line + 1}:{column + 1}" if getattr(err, "line", -1) >= 0 else ""
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
    """The descriptor without what does not change the schema, in the order ``render`` writes it, so that
    ``parse(render(d)) == d`` and a schema given as text or as base64 is one descriptor: no source locations, no
    json_name that is the default one, no ``syntax`` for proto2 (protoc leaves it empty), imports before public
    imports, and in each message the fields outside a oneof before each oneof's fields (``_field_order``; the
    order of fields changes neither the wire format nor JSON, while nested types keep theirs: message indexes
    count them). Refused (42201): another syntax, editions where the protobuf runtime lacks them, and groups
    declared as extensions (their message lands among the enclosing scope's types, which ``render`` cannot
    reproduce)."""
    out = FDP()
    out.CopyFrom(fdp)
    out.ClearField("source_code_info")
    if out.syntax == "proto2":
        out.ClearField("syntax")
    if out.syntax == "editions":
        _check_editions()
    elif out.syntax not in ("", "proto3"):
        raise InvalidSchemaError(f"Invalid schema: syntax {out.syntax!r} is not supported; proto2, proto3 and "
                                 "editions are")
    else:
        out.ClearField("edition")  # EDITION_PROTO2/3, which some tools set: the syntax says it already
    _imports_first(out)
    _drop_empty_options(out)
    scope = f".{out.package}" if out.package else ""
    for full, message in _walk_scoped(scope, out.message_type):
        for f in [*message.field, *message.extension]:
            if f.json_name == _json_name(f.name):
                f.ClearField("json_name")
        order = _field_order(message, full)
        if order != list(range(len(message.field))):
            reordered = [message.field[i] for i in order]
            kept = [FD() for _ in reordered]
            for k, f in zip(kept, reordered, strict=True):
                k.CopyFrom(f)
            del message.field[:]
            message.field.extend(kept)
        if any(f.type == FD.TYPE_GROUP for f in message.extension):
            raise InvalidSchemaError(f"Invalid schema: {full.lstrip('.')}: a group declared in an extend block is "
                                     "not supported")
    for f in out.extension:
        if f.json_name == _json_name(f.name):
            f.ClearField("json_name")
        if f.type == FD.TYPE_GROUP:
            raise InvalidSchemaError("Invalid schema: a group declared in an extend block is not supported")
    return out


def _drop_empty_options(message: Message) -> None:
    """Clears every ``options`` that is set but empty (what protoc leaves where it strips source-retention
    options, such as an extension range's declarations): the text has nothing to say about them."""
    for fd, value in message.ListFields():
        if fd.message_type is None:
            continue
        for item in (value if _repeated(fd) else [value]):
            if fd.name != "options":
                _drop_empty_options(item)
        if fd.name == "options" and not _repeated(fd) and value.ByteSize() == 0:
            message.ClearField("options")


def _imports_first(fdp: FDP) -> None:
    """Reorders ``dependency`` as ``render`` writes it (Confluent's ProtobufSchemaUtils: the imports, then the
    public imports), keeping public_dependency and weak_dependency pointing at the same files."""
    public, weak = set(fdp.public_dependency), set(fdp.weak_dependency)
    order = [i for i in range(len(fdp.dependency)) if i not in public] + sorted(public)
    if order == list(range(len(fdp.dependency))):
        return
    names = [fdp.dependency[i] for i in order]
    del fdp.dependency[:]
    fdp.dependency.extend(names)
    position = {old: new for new, old in enumerate(order)}
    fdp.ClearField("public_dependency")
    fdp.public_dependency.extend(sorted(position[i] for i in public))
    fdp.ClearField("weak_dependency")
    fdp.weak_dependency.extend(sorted(position[i] for i in weak))


@functools.cache
def _editions_supported() -> str | None:
    """None when this protobuf runtime builds descriptors of editions files, else why not."""
    probe = FDP(name="odradek_editions_probe.proto", syntax="editions", edition=descriptor_pb2.EDITION_2023)
    probe.message_type.add(name="Probe").field.add(name="a", number=1, type=FD.TYPE_INT32,
                                                   label=FD.LABEL_OPTIONAL)
    try:
        _pool([probe])
    except Exception as e:  # any failure means: no editions here
        return str(e) or type(e).__name__
    return None


def _check_editions() -> None:
    reason = _editions_supported()
    if reason is not None:
        from google.protobuf import __version__ as version

        raise InvalidSchemaError(f"Invalid schema: editions (edition = \"2023\") are not supported by this "
                                 f"registry's protobuf runtime ({version}: {reason}); proto2 and proto3 are")


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


def _walk_scoped(scope: str, messages: Sequence[descriptor_pb2.DescriptorProto],
                 ) -> Iterator[tuple[str, descriptor_pb2.DescriptorProto]]:
    """Every message with its full name (``.pkg.Outer.Inner``)."""
    for m in messages:
        full = f"{scope}.{m.name}"
        yield full, m
        yield from _walk_scoped(full, m.nested_type)


@functools.cache
def _builtin(name: str) -> bytes | None:
    """The serialized descriptor of a file shipped with this package (confluent/meta.proto), compiled once."""
    from grpc_tools import _protoc_compiler

    if name not in _CONFLUENT_IMPORTS:
        return None
    with _protoc_lock:
        modules = dict(_protoc_compiler.get_protos(name.encode(), [p.encode() for p in _includes()]))
    fdp = FDP.FromString(_serialized_literal(modules[name.replace(".proto", "_pb2.py").encode()].decode()))
    return normalized(fdp).SerializeToString()


def _well_known(name: str) -> FDP | None:
    """A well-known file by its import name: google/protobuf/x.proto (google.protobuf.x_pb2), google/type/x.proto
    when googleapis-common-protos is installed, and confluent/meta.proto (shipped here)."""
    builtin = _builtin(name)
    if builtin is not None:
        return FDP.FromString(builtin)
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


# ------------------------------------------------------------------------------------------- custom options
# protoc leaves an option it interprets through an extension (``[(pii) = "yes"]``, ``(confluent.field_meta)``) as
# an unknown field of descriptor_pb2's FieldOptions: only a pool holding the file that declares the extension
# reads it. Each options message is read through such a pool (the file and its imports) to render it, and its
# bytes are rewritten deterministically once (map entries by key), so that equal schemas are equal descriptors.

_OPTION_KINDS = {"FileOptions", "MessageOptions", "FieldOptions", "OneofOptions", "EnumOptions",
                 "EnumValueOptions", "ServiceOptions", "MethodOptions", "ExtensionRangeOptions"}


class _Options:
    """Reads the options messages of one file through a pool of the file and its imports (built on the first
    options message that needs it: one holding unknown fields)."""

    def __init__(self, fdp: FDP, files: dict[str, FDP]) -> None:
        self._fdp, self._files = fdp, files
        self._deps: list[list[FDP]] = []
        self._built: list[descriptor_pool.DescriptorPool] = []

    def _imports(self) -> list[FDP]:
        if not self._deps:
            self._deps.append(_closure(self._fdp, self._files))
        return self._deps[0]

    def _pool(self) -> descriptor_pool.DescriptorPool:
        if not self._built:
            try:
                self._built.append(_pool([*self._imports(), self._fdp]))
            except (TypeError, ValueError, KeyError) as e:
                raise InvalidSchemaError(f"Invalid schema: {e}") from None
        return self._built[0]

    def read(self, options: Message) -> Message:
        """``options`` with its custom options readable (ListFields lists them); InvalidSchemaError when a field
        in it, or in a message-valued option, is declared by no file the schema imports."""
        from google.protobuf import unknown_fields

        kind = options.DESCRIPTOR.name
        if not len(unknown_fields.UnknownFieldSet(options)):
            return options
        if "google/protobuf/descriptor.proto" not in {d.name for d in self._imports()}:
            raise InvalidSchemaError(f"Invalid schema: custom {kind} without an import of "
                                     "google/protobuf/descriptor.proto")
        cls = message_factory.GetMessageClass(self._pool().FindMessageTypeByName(f"google.protobuf.{kind}"))
        read = cls.FromString(options.SerializeToString())
        _known_fields_only(read, kind)
        return read


def _known_fields_only(message: Message, where: str) -> None:
    from google.protobuf import unknown_fields

    if len(unknown_fields.UnknownFieldSet(message)):
        numbers = sorted({f.field_number for f in unknown_fields.UnknownFieldSet(message)})
        raise InvalidSchemaError(f"Invalid schema: {where} holds field(s) {numbers} that no imported file declares "
                                 "(an option extension the registry does not know, or a newer version of it)")
    for fd, value in message.ListFields():
        if fd.message_type is None:
            continue
        if fd.message_type.GetOptions().map_entry:
            values = list(value.values()) if fd.message_type.fields_by_name["value"].message_type else []
        else:
            values = list(value) if _repeated(fd) else [value]
        for v in values:
            _known_fields_only(v, f"{where} ({fd.full_name})")


def _repeated(fd: Any) -> bool:
    repeated = getattr(fd, "is_repeated", None)
    if repeated is None:  # protobuf < 7: the label
        repeated = fd.label == fd.LABEL_REPEATED
    return bool(repeated)


def _canonical_options(fdp: FDP, files: dict[str, FDP]) -> FDP:
    """``fdp`` with every options message holding custom options re-serialized deterministically through the
    pool that declares them (checks, too, that each is declared)."""
    reader = _Options(fdp, files)
    out = FDP()
    out.CopyFrom(fdp)
    for options in _all_options(out):
        read = reader.read(options)
        if read is not options:
            options.Clear()
            options.MergeFromString(read.SerializeToString(deterministic=True))
    return out


def _all_options(fdp: FDP) -> Iterator[Message]:
    """Every options message set in the file."""

    def fields(fs: Sequence[FD]) -> Iterator[Message]:
        for f in fs:
            if f.HasField("options"):
                yield f.options

    def enums(es: Sequence[descriptor_pb2.EnumDescriptorProto]) -> Iterator[Message]:
        for e in es:
            if e.HasField("options"):
                yield e.options
            for v in e.value:
                if v.HasField("options"):
                    yield v.options

    if fdp.HasField("options"):
        yield fdp.options
    for m in _walk_messages(fdp.message_type):
        if m.HasField("options"):
            yield m.options
        yield from fields(m.field)
        yield from fields(m.extension)
        for o in m.oneof_decl:
            if o.HasField("options"):
                yield o.options
        for r in m.extension_range:
            if r.HasField("options"):
                yield r.options
        yield from enums(m.enum_type)
    yield from enums(fdp.enum_type)
    yield from fields(fdp.extension)
    for s in fdp.service:
        if s.HasField("options"):
            yield s.options
        for method in s.method:
            if method.HasField("options"):
                yield method.options


# ------------------------------------------------------------------------------------------------- rendering
# As Confluent's ProtobufSchemaUtils.toString writes a ProtobufSchema built from a descriptor
# (ProtobufSchema.toProtoFile): sections separated by a blank line (syntax and package; imports, then public
# imports; options; messages then enums; extend blocks; services), and in a message: reserved ranges and names
# one per line, options, fields, oneofs, extension ranges, extend blocks, nested messages then nested enums;
# fully-qualified type names (``.pkg.Msg``); options as ``name = value``, custom ones as ``(full.name) = value``,
# message-valued ones as Confluent's ``{ key: value, ... }`` blocks, several on a field as a ``[ ..., ... ]``
# list one a line, ``default`` and ``json_name`` last. Where Confluent's descriptor form is not .proto that protoc
# reads back (its ``option map_entry = true`` messages, groups as plain message fields), the text form Confluent
# keeps for registered text is written instead: ``map<K, V>`` fields, ``group`` blocks. One more rule keeps the
# message indexes: a nested message is written before a map field or a group whenever it precedes that field's
# own nested type (protoc adds the map entry or the group's message where it meets the field).

_FIRST_OPTIONS = {  # the standard options Confluent renders, in its order; any other follows in number order
    "FileOptions": ("java_package", "java_outer_classname", "java_multiple_files", "java_generate_equals_and_hash",
                    "java_string_check_utf8", "optimize_for", "go_package", "cc_generic_services",
                    "java_generic_services", "py_generic_services", "php_generic_services", "deprecated",
                    "cc_enable_arenas", "objc_class_prefix", "csharp_namespace", "swift_prefix", "php_class_prefix",
                    "php_namespace", "php_metadata_namespace", "ruby_package"),
    "MessageOptions": ("no_standard_descriptor_accessor", "deprecated"),
    "FieldOptions": ("ctype", "packed", "jstype", "deprecated"),
    "EnumOptions": ("allow_alias", "deprecated"),
    "EnumValueOptions": ("deprecated",),
    "ServiceOptions": ("deprecated",),
    "MethodOptions": ("deprecated", "idempotency_level"),
}
_CONFLUENT_META = frozenset({"confluent.file_meta", "confluent.message_meta", "confluent.field_meta",
                             "confluent.enum_meta", "confluent.enum_value_meta"})
_VALUE_FIRST_PARAMS = frozenset({"precision", "scale"})  # Confluent writes these params' value before the key


def render(fdp: FDP, files: dict[str, FDP] | None = None) -> str:
    """The .proto text of a descriptor, as Confluent renders one (the section comment above); ``files`` the
    references by import name, which declare custom options the file may use. Deterministic, and protoc
    compiles it back to ``fdp`` when ``fdp`` is ``normalized``."""
    return _Renderer(fdp, files or {}).file()


def _quote(s: str) -> str:
    """A .proto string literal: Confluent's escapeChars (\\a \\b \\f \\n \\r \\t \\v \\\\ \\' \\"), other control
    characters in octal, everything else (UTF-8 included) as it is."""
    out = ['"']
    for ch in s:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\{ord(ch):03o}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
            "\\": "\\\\", "'": "\\'", '"': '\\"'}


def _float(value: float, single: bool) -> str:
    """A float option value protoc reads back to the same bits: the shortest decimal for a float's 32 bits."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if single:
        bits = struct.pack("<f", value)
        for digits in range(1, 18):
            text = f"{value:.{digits}g}"
            if struct.pack("<f", float(text)) == bits:
                return text if any(c in text for c in ".en") else f"{text}.0"
    return repr(value)


def _scalar(fd: Any, value: Any) -> str:
    """A non-message option value as .proto text (enums by name, strings quoted)."""
    if fd.type == fd.TYPE_ENUM:
        known = fd.enum_type.values_by_number.get(value)
        return str(known.name) if known is not None else str(value)
    if fd.type == fd.TYPE_BOOL:
        return "true" if value else "false"
    if fd.type == fd.TYPE_STRING:
        return _quote(value)
    if fd.type == fd.TYPE_BYTES:
        return f'"{text_encoding.CEscape(value, as_utf8=False)}"'
    if fd.type in (fd.TYPE_FLOAT, fd.TYPE_DOUBLE):
        return _float(value, fd.type == fd.TYPE_FLOAT)
    return str(value)


def _indent(lines: list[str]) -> list[str]:
    return [f"  {line}" if line else line for line in lines]


def _items(items: list[str]) -> list[str]:
    """Comma-separated items, each possibly of several lines, one after another (Confluent's appendIndented of
    ``item + ","``)."""
    out: list[str] = []
    for i, item in enumerate(items):
        lines = item.split("\n")
        if i < len(items) - 1:
            lines[-1] += ","
        out += lines
    return out


def _aggregate(message: Message, meta: bool = False) -> str:
    """A message-valued option as Confluent writes it (formatOptionMap): ``{``, then ``key: value`` a line,
    comma-separated, then ``}``; lists as ``[ ... ]`` one item a line, map fields as lists of {key, value} (by
    key), extensions keyed ``[full.name]``. ``meta``: a confluent.Meta, whose precision and scale params
    Confluent writes value first."""
    entries: list[str] = []
    for fd, value in message.ListFields():
        key = f"[{fd.full_name}]" if fd.is_extension else fd.name
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            kfd, vfd = fd.message_type.fields_by_name["key"], fd.message_type.fields_by_name["value"]
            items = []
            for k in sorted(value):
                v = value[k]
                pair = [f"key: {_scalar(kfd, k)}",
                        f"value: {_aggregate(v) if vfd.message_type is not None else _scalar(vfd, v)}"]
                if meta and k in _VALUE_FIRST_PARAMS:
                    pair.reverse()
                items.append("\n".join(["{", *_indent(_items(pair)), "}"]))
            text = "\n".join(["[", *_indent(_items(items)), "]"])
        elif _repeated(fd):
            items = [_aggregate(v) if fd.message_type is not None else _scalar(fd, v) for v in value]
            text = "\n".join(["[", *_indent(_items(items)), "]"])
        else:
            text = _aggregate(value) if fd.message_type is not None else _scalar(fd, value)
        entries.append(f"{key}: {text}")
    return "\n".join(["{", *_indent(_items(entries)), "}"])


def _dotted(message: Message) -> list[tuple[str, str]] | None:
    """(path, value) for each leaf of a message whose set fields are all singular (features.field_presence =
    EXPLICIT), or None when a repeated field needs the ``{ ... }`` form."""
    out: list[tuple[str, str]] = []
    for fd, value in message.ListFields():
        name = f"({fd.full_name})" if fd.is_extension else fd.name
        if _repeated(fd):
            return None
        if fd.message_type is None:
            out.append((name, _scalar(fd, value)))
            continue
        inner = _dotted(value)
        if inner is None or not inner:
            return None
        out += [(f"{name}.{path}", v) for path, v in inner]
    return out


def _ranges(ranges: Sequence[Any], exclusive: bool, maximum: int) -> list[str]:
    out = []
    for r in ranges:
        end = r.end - 1 if exclusive else r.end
        if end == (maximum - 1 if exclusive else maximum):
            out.append(f"{r.start} to max")
        else:
            out.append(str(r.start) if end == r.start else f"{r.start} to {end}")
    return out


def _field_order(m: descriptor_pb2.DescriptorProto, full: str) -> list[int]:
    """The order ``render`` writes ``m``'s fields in: those outside a oneof, then each oneof's (Confluent's
    fields section, then its oneofs), unless that would move a map field or a group behind another one whose
    nested type comes later (protoc would then reorder the nested types, so the message indexes): then each
    oneof's fields stay where its first one is."""
    links = _links(m, full)
    real = [f.HasField("oneof_index") and not f.proto3_optional for f in m.field]
    plain = [i for i in range(len(m.field)) if not real[i]]
    grouped = [i for k in range(len(m.oneof_decl)) for i in range(len(m.field))
               if real[i] and m.field[i].oneof_index == k]
    candidate = plain + grouped
    if _in_nested_order(candidate, links):
        return candidate
    in_place: list[int] = []
    for i in range(len(m.field)):
        if not real[i]:
            in_place.append(i)
        elif i not in in_place:
            in_place += [j for j in range(len(m.field)) if real[j] and m.field[j].oneof_index == m.field[i].oneof_index]
    return in_place


def _links(m: descriptor_pb2.DescriptorProto, full: str) -> dict[int, int]:
    """field index -> the index of its own nested type, for map fields (their entry) and groups."""
    nested = {f"{full}.{n.name}": i for i, n in enumerate(m.nested_type)}
    out = {}
    for i, f in enumerate(m.field):
        j = nested.get(f.type_name)
        if j is None:
            continue
        if f.type == FD.TYPE_GROUP or (f.label == FD.LABEL_REPEATED and m.nested_type[j].options.map_entry):
            out[i] = j
    return out


def _in_nested_order(order: list[int], links: dict[int, int]) -> bool:
    linked = [links[i] for i in order if i in links]
    return linked == sorted(linked)


class _Renderer:
    """Renders one file; custom options are read through the file's imports (``_Options``)."""

    def __init__(self, fdp: FDP, files: dict[str, FDP]) -> None:
        self.fdp = fdp
        self.options = _Options(fdp, files)
        self.editions = fdp.syntax == "editions"
        self.proto3 = fdp.syntax == "proto3"

    def file(self) -> str:
        fdp = self.fdp
        head = [f'edition = "{_edition_name(fdp.edition)}";'] if self.editions else (
            ['syntax = "proto3";'] if self.proto3 else [])  # proto2: no syntax, as protoc's descriptor says
        if fdp.package:
            head.append(f"package {fdp.package};")
        sections: list[list[str]] = []
        if fdp.dependency:
            public, weak = set(fdp.public_dependency), set(fdp.weak_dependency)
            order = [i for i in range(len(fdp.dependency)) if i not in public] + sorted(public)
            sections.append([f'import {"public " if i in public else "weak " if i in weak else ""}'
                             f"{_quote(fdp.dependency[i])};" for i in order])
        sections.append(self.option_statements(fdp.options))
        scope = f".{fdp.package}" if fdp.package else ""
        types: list[str] = []
        for m in fdp.message_type:
            types += self.message(m, scope)
        for e in fdp.enum_type:
            types += self.enum(e)
        sections += [types, self.extends(fdp.extension), [line for s in fdp.service for line in self.service(s)]]
        body = [line for section in sections if section for line in ("", *section)]
        return "".join(f"{line}\n" for line in [*head, *body])

    # options --------------------------------------------------------------------------------------------------

    def option_entries(self, options: Message, skip: tuple[str, ...] = ()) -> list[str]:
        """``name = value`` for each option set (possibly several lines), in Confluent's order: its standard
        options, the other standard ones, the confluent.*_meta one, the other custom ones (by number); a repeated
        option once per value."""
        read = self.options.read(options)
        first = _FIRST_OPTIONS.get(options.DESCRIPTOR.name, ())
        fields = [(fd, v) for fd, v in read.ListFields() if fd.name not in skip or fd.is_extension]
        standard = [(fd, v) for fd, v in fields if not fd.is_extension]
        standard.sort(key=lambda p: (first.index(p[0].name) if p[0].name in first else len(first), p[0].number))
        custom = [(fd, v) for fd, v in fields if fd.is_extension]
        custom.sort(key=lambda p: (p[0].full_name not in _CONFLUENT_META, p[0].number))
        out: list[str] = []
        for fd, value in [*standard, *custom]:
            for v in (list(value) if _repeated(fd) else [value]):
                out += self.option_entry(fd, v)
        return out

    def option_entry(self, fd: Any, value: Any) -> list[str]:
        if fd.is_extension:
            name = f"({fd.full_name})"
            if fd.message_type is None:
                return [f"{name} = {_scalar(fd, value)}"]
            return [f"{name} = {_aggregate(value, meta=fd.full_name in _CONFLUENT_META)}"]
        if fd.message_type is None:
            return [f"{fd.name} = {_scalar(fd, value)}"]
        dotted = None if _repeated(fd) else _dotted(value)  # protoc sets a repeated message option whole only
        if dotted is None:
            return [f"{fd.name} = {_aggregate(value)}"]
        return [f"{fd.name}.{path} = {v}" for path, v in dotted]

    def option_statements(self, options: Message, skip: tuple[str, ...] = ()) -> list[str]:
        return [line for entry in self.option_entries(options, skip) for line in f"option {entry};".split("\n")]

    @staticmethod
    def bracketed(entries: list[str]) -> str:
        """A declaration's options: ``[one]``, or ``[`` then one a line, comma-separated, then ``]``."""
        if not entries:
            return ""
        if len(entries) == 1:
            return f" [{entries[0]}]"
        return " " + "\n".join(["[", *_indent(_items(entries)), "]"])

    # messages -------------------------------------------------------------------------------------------------

    def message(self, m: descriptor_pb2.DescriptorProto, scope: str) -> list[str]:
        body = self.body(m, f"{scope}.{m.name}")
        if not body:
            return [f"message {m.name} {{}}"]
        return [f"message {m.name} {{", *_indent(body), "}"]

    def body(self, m: descriptor_pb2.DescriptorProto, full: str) -> list[str]:
        """A message's (or a group's) body: its sections, blank-line separated (``_field_order`` for the order
        of fields, oneofs and the nested messages written among them)."""
        blocks: list[tuple[str, list[str]]] = []
        blocks += [("reserved", [f"reserved {r};"]) for r in _ranges(m.reserved_range, True, _FIELD_MAX)]
        blocks += [("reserved", [f"reserved {_quote(n)};"]) for n in m.reserved_name]
        blocks += [("option", self.option_statements(m.options, ("map_entry",)))]
        links = _links(m, full)
        entries = {j for j in links.values() if m.nested_type[j].options.map_entry}
        groups = {i: m.nested_type[j] for i, j in links.items() if j not in entries}
        linked = set(links.values())
        next_nested = 0

        def nested_until(index: int) -> None:
            nonlocal next_nested
            while next_nested < index:
                if next_nested not in linked:
                    blocks.append(("nested", self.message(m.nested_type[next_nested], full)))
                next_nested += 1

        order = _field_order(m, full)
        done_oneofs: set[int] = set()
        for i in order:
            f = m.field[i]
            if f.HasField("oneof_index") and not f.proto3_optional:
                if f.oneof_index in done_oneofs:
                    continue
                done_oneofs.add(f.oneof_index)
                members = [k for k in order if m.field[k].HasField("oneof_index")
                           and not m.field[k].proto3_optional and m.field[k].oneof_index == f.oneof_index]
                for k in members:
                    if k in links:
                        nested_until(links[k])
                        next_nested = max(next_nested, links[k] + 1)
                blocks.append(("oneof", self.oneof(m, members, groups, full)))
                continue
            if i in links:
                nested_until(links[i])
                next_nested = max(next_nested, links[i] + 1)
            if i in groups:
                blocks.append(("group", self.group(f, groups[i], full)))
            else:
                blocks.append(("field", self.field(f, m, full)))
        for r in m.extension_range:
            bounds = _ranges([r], True, _FIELD_MAX)[0]
            blocks.append(("extensions", [f"extensions {bounds}{self.bracketed(self.option_entries(r.options))};"]))
        blocks.append(("extend", self.extends(m.extension)))
        nested_until(len(m.nested_type))
        for e in m.enum_type:
            blocks.append(("nested", self.enum(e)))
        return _join_blocks(blocks)

    def oneof(self, m: descriptor_pb2.DescriptorProto, members: list[int],
              groups: dict[int, descriptor_pb2.DescriptorProto], full: str) -> list[str]:
        oneof = m.oneof_decl[m.field[members[0]].oneof_index]
        fields: list[str] = []
        for k in members:
            fields += (self.group(m.field[k], groups[k], full, in_oneof=True) if k in groups
                       else self.field(m.field[k], m, full, in_oneof=True))
        body = _join([self.option_statements(oneof.options), fields])
        return [f"oneof {oneof.name} {{", *_indent(body), "}"]

    def label(self, f: FD, in_oneof: bool) -> str:
        if f.label == FD.LABEL_REPEATED:
            return "repeated "
        if in_oneof or self.editions or (self.proto3 and not f.proto3_optional):
            return ""
        return "required " if f.label == FD.LABEL_REQUIRED else "optional "

    def field(self, f: FD, m: descriptor_pb2.DescriptorProto | None, full: str, *, in_oneof: bool = False,
              ) -> list[str]:
        entry = None
        if m is not None and f.label == FD.LABEL_REPEATED and f.type == FD.TYPE_MESSAGE:
            entry = next((n for n in m.nested_type if f"{full}.{n.name}" == f.type_name and n.options.map_entry),
                         None)
        if entry is not None:
            key, value = entry.field[0], entry.field[1]
            declared = f"map<{_SCALARS.get(key.type) or key.type_name}, {_SCALARS.get(value.type) or value.type_name}>"
        else:
            declared = f"{self.label(f, in_oneof)}{_SCALARS.get(f.type) or f.type_name}"
        return f"{declared} {f.name} = {f.number}{self.bracketed(self.field_options(f))};".split("\n")

    def field_options(self, f: FD) -> list[str]:
        """The options, then ``default`` and ``json_name`` (Confluent's optionsWithSpecialValues)."""
        entries = self.option_entries(f.options)
        if f.HasField("default_value"):
            if f.type == FD.TYPE_STRING:
                entries.append(f"default = {_quote(f.default_value)}")
            elif f.type == FD.TYPE_BYTES:
                entries.append(f'default = "{f.default_value}"')  # protoc keeps a bytes default C-escaped
            else:
                entries.append(f"default = {f.default_value}")
        if f.HasField("json_name"):
            entries.append(f"json_name = {_quote(f.json_name)}")
        return entries

    def group(self, f: FD, nested: descriptor_pb2.DescriptorProto, full: str, *, in_oneof: bool = False,
              ) -> list[str]:
        """A proto2 group as Confluent writes Wire's GroupElement: ``optional group Name = 1 { ... }`` with the
        group's message as its body."""
        head = f"{self.label(f, in_oneof)}group {nested.name} = {f.number}{self.bracketed(self.field_options(f))}"
        body = self.body(nested, f"{full}.{nested.name}")
        if not body:
            return f"{head} {{}}".split("\n")
        return [*f"{head} {{".split("\n"), *_indent(body), "}"]

    def enum(self, e: descriptor_pb2.EnumDescriptorProto) -> list[str]:
        """Confluent's enum: reserved ranges and names, options, values, in one section."""
        body = [f"reserved {r};" for r in _ranges(e.reserved_range, False, _ENUM_MAX)]
        body += [f"reserved {_quote(n)};" for n in e.reserved_name]
        body += self.option_statements(e.options)
        for v in e.value:
            body += f"{v.name} = {v.number}{self.bracketed(self.option_entries(v.options))};".split("\n")
        if not body:
            return [f"enum {e.name} {{}}"]
        return [f"enum {e.name} {{", *_indent(body), "}"]

    def extends(self, extensions: Sequence[FD]) -> list[str]:
        out: list[str] = []
        extendees: dict[str, list[FD]] = {}
        for f in extensions:
            extendees.setdefault(f.extendee, []).append(f)
        for extendee, fields in extendees.items():
            lines = [line for f in fields for line in self.field(f, None, "")]
            out += [f"extend {extendee} {{", *_indent(lines), "}"]
        return out

    def service(self, s: descriptor_pb2.ServiceDescriptorProto) -> list[str]:
        rpcs: list[str] = []
        for m in s.method:
            inp = f"{'stream ' if m.client_streaming else ''}{m.input_type}"
            out = f"{'stream ' if m.server_streaming else ''}{m.output_type}"
            options = self.option_statements(m.options)
            if options:
                rpcs += [f"rpc {m.name} ({inp}) returns ({out}) {{", *_indent(options), "};"]
            else:
                rpcs.append(f"rpc {m.name} ({inp}) returns ({out});")
        body = _join([self.option_statements(s.options), rpcs])
        if not body:
            return [f"service {s.name} {{}}"]
        return [f"service {s.name} {{", *_indent(body), "}"]


def _edition_name(edition: int) -> str:
    """EDITION_2023 -> 2023 (what ``edition = "...";`` says)."""
    return descriptor_pb2.Edition.Name(edition).removeprefix("EDITION_")


def _join(sections: Sequence[list[str]]) -> list[str]:
    """The non-empty sections, a blank line between two."""
    out: list[str] = []
    for section in sections:
        if section:
            if out:
                out.append("")
            out += section
    return out


def _join_blocks(blocks: Sequence[tuple[str, list[str]]]) -> list[str]:
    """Consecutive blocks of one kind form a section; sections are blank-line separated."""
    sections: list[list[str]] = []
    previous = None
    for kind, lines in blocks:
        if not lines:
            continue
        if kind != previous or not sections:
            sections.append([])
            previous = kind
        sections[-1] += lines
    return _join(sections)

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


def _wire_messages(messages: Sequence[Any], owner: Any | None) -> list[Any]:
    """The messages Wire's parser sees in a .proto text (what Confluent's diff walks): neither map entries nor
    groups' messages (a GroupElement is neither a field nor a nested type), so a message's index among them is
    the one Confluent's MESSAGE_MOVED compares."""
    groups = {f.type_name.rsplit(".", 1)[-1] for f in owner.field if f.type == FD.TYPE_GROUP} if owner else set()
    return [m for m in messages if not m.options.map_entry and m.name not in groups]


def _compare_types(ctx: _Ctx, omsgs: Sequence[Any], oenums: Sequence[Any], umsgs: Sequence[Any],
                   uenums: Sequence[Any], owners: tuple[Any, Any] | None = None) -> None:
    om = {m.name: (i, m) for i, m in enumerate(_wire_messages(omsgs, owners[0] if owners else None))}
    um = {m.name: (i, m) for i, m in enumerate(_wire_messages(umsgs, owners[1] if owners else None))}
    for name in sorted(set(om) | set(um)):
        with ctx.enter(name):
            o, u = om.get(name), um.get(name)
            if u is None:
                ctx.add("MESSAGE_REMOVED")
            elif o is None:
                ctx.add("MESSAGE_ADDED")
            else:
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
    """(top-level fields by number, each real oneof's fields by number), labels as Wire reads them. Groups are
    left out: Wire parses a group as a GroupElement, which Confluent's MessageSchemaDiff does not compare."""
    top: dict[int, _Field] = {}
    oneofs: dict[str, dict[int, _Field]] = {}
    proto3 = ctx.proto3[side]
    for f in m.field:
        if f.type == FD.TYPE_GROUP:
            continue
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
    _compare_types(ctx, original.nested_type, original.enum_type, update.nested_type, update.enum_type,
                   (original, update))


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
    except (json_format.ParseError, EncodeError, TypeError, ValueError, RecursionError) as e:  # EncodeError:
        raise JsonConversionError(f"Conversion of JSON to Protobuf failed: {e}") from None  # a required field unset
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
