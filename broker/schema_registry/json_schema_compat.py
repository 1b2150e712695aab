"""JSON Schema compatibility: a port of Confluent's JSON Schema diff (``json-schema-provider``'s
``io.confluent.kafka.schemaregistry.json.diff``: SchemaDiff, Difference.Type, Context, and the String, Number,
Enum, Const, Combined, Not, Object and Array diffs).

Why a port, and why its own module: the registry's contract is to answer compatibility questions the way
Confluent's registry does, so a client that passes there passes here. Confluent does not compare JSON texts; it
loads both schemas into everit-json-schema's model (StringSchema, NumberSchema, ObjectSchema, CombinedSchema, ...)
and walks the two models side by side. Both halves are here: ``_Loader`` builds the same model from the JSON
(including everit's synthetic ``allOf`` when one schema object mixes kinds, e.g. ``type`` with ``enum``), and
``_Differ`` walks it.

Invariants:

* Direction. The walk compares ``original`` (the older schema, what the data was written with) with ``update``
  (the newer one, what reads it) and collects Difference types; the change is compatible iff every difference
  is in ``COMPATIBLE_CHANGES``. ``json_reads(reader, writer)`` is that walk with original = writer and
  update = reader, so BACKWARD (reader = new) and FORWARD (reader = old) are both Confluent's
  ``isBackwardCompatible`` in the corresponding direction.
* Paths are Confluent's: ``#/`` for the root, then the keywords entered (``#/properties/a/items/0``); a ``$ref``
  adds nothing to the path, as Confluent normalises a reference to the schema it refers to before comparing.
* Termination. A ``$ref`` is resolved lazily and each JSON location yields one model node, so recursive schemas
  are finite graphs. A pair (original node, update node) met again while it is still being compared is a cycle
  and counts as compatible there (Confluent's Context does the same); finished pairs are memoised, which keeps
  the cross products of ``oneOf``/``anyOf``/``allOf`` over recursive definitions polynomial.
* Depth and work are bounded, and exceeding a bound is *incompatible*, never an exception: a schema nested more
  than ``MAX_DEPTH`` levels (or a comparison needing more than ``MAX_STEPS`` node pairs) answers one
  ``MAX_DEPTH_EXCEEDED`` message. Why incompatible rather than InvalidSchemaError: the checker also runs against
  schemas already registered (they parsed, so they are not invalid), it must answer every pair rather than fail
  the request, and a change it could not verify must not be accepted. RecursionError never leaves this module.

Where this deliberately differs from the Confluent version read (each is a crash or an accident there):

* ``multipleOf`` is compared exactly and by value (Confluent truncates both values to int, so 0.5 divides by
  zero and 2.5 -> 5 reads as "changed", and its BigDecimal equality makes 10 -> 10.0 "expanded");
  ``exclusiveMaximum`` decreased is detected against the update's
  ``exclusiveMaximum`` (Confluent reads the update's ``maximum`` there, a NullPointerException when absent).
* A chain of ``$ref`` to ``$ref`` is followed to its end (Confluent unwraps one level).
* ``$ref`` to another registered schema: resolved by its reference name (the ``name`` of the registration's
  reference, as Confluent registers each referenced schema under it) or by that schema's ``$id``, with a JSON
  pointer after ``#`` if any; a ref this checker cannot follow (an unknown document, an anchor) stays unresolved
  and is compared by its text: the same ref is no difference, another one (or another kind of schema) is
  TYPE_CHANGED.
* Draft 2019-09/2020-12 keywords are read as their draft-7 equivalents, as Confluent's 2020-12 examples expect:
  ``prefixItems`` is the tuple and ``items`` then the additional items, ``dependentRequired`` and
  ``dependentSchemas`` are ``dependencies``, ``$defs`` is a place ``$ref`` may point to.

Keywords Confluent's walk does not compare, and neither does this one: ``format`` (it only makes a string
schema), ``propertyNames``, ``contains``, ``if``/``then``/``else``, ``readOnly``/``writeOnly``,
``contentEncoding``/``contentMediaType`` and unknown keywords; draft-4's boolean ``exclusiveMinimum``/
``exclusiveMaximum``; ``patternProperties`` themselves (they matter only for a property added or removed).
Difference has types for ``unevaluatedProperties``/``unevaluatedItems`` and ``minContains``/``maxContains`` that
no walk in the version read emits; they are not emitted here either.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import unquote

MAX_DEPTH = 100  # nested schema levels (loading or comparing) before the answer is MAX_DEPTH_EXCEEDED
MAX_STEPS = 200_000  # node pairs compared in one check before the answer is MAX_DEPTH_EXCEEDED

# SchemaDiff.COMPATIBLE_CHANGES: every other Difference type makes the change incompatible.
COMPATIBLE_CHANGES = frozenset({
    "ID_CHANGED", "DESCRIPTION_CHANGED", "TITLE_CHANGED", "DEFAULT_CHANGED", "SCHEMA_REMOVED", "TYPE_EXTENDED",
    "MAX_LENGTH_INCREASED", "MAX_LENGTH_REMOVED", "MIN_LENGTH_DECREASED", "MIN_LENGTH_REMOVED", "PATTERN_REMOVED",
    "MAXIMUM_INCREASED", "MAXIMUM_REMOVED", "MINIMUM_DECREASED", "MINIMUM_REMOVED",
    "EXCLUSIVE_MAXIMUM_INCREASED", "EXCLUSIVE_MAXIMUM_REMOVED", "EXCLUSIVE_MINIMUM_DECREASED",
    "EXCLUSIVE_MINIMUM_REMOVED", "MULTIPLE_OF_REDUCED", "MULTIPLE_OF_REMOVED",
    "REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED", "REQUIRED_ATTRIBUTE_REMOVED", "DEPENDENCY_ARRAY_NARROWED",
    "DEPENDENCY_ARRAY_REMOVED", "DEPENDENCY_SCHEMA_REMOVED", "MAX_PROPERTIES_INCREASED", "MAX_PROPERTIES_REMOVED",
    "MIN_PROPERTIES_DECREASED", "MIN_PROPERTIES_REMOVED", "ADDITIONAL_PROPERTIES_ADDED",
    "ADDITIONAL_PROPERTIES_EXTENDED", "PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL",
    "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL", "OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL",
    "PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL", "PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL",
    "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
    "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
    "MAX_ITEMS_INCREASED", "MAX_ITEMS_REMOVED", "MIN_ITEMS_DECREASED", "MIN_ITEMS_REMOVED", "UNIQUE_ITEMS_REMOVED",
    "ADDITIONAL_ITEMS_ADDED", "ADDITIONAL_ITEMS_EXTENDED", "ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL",
    "ITEM_ADDED_TO_CLOSED_CONTENT_MODEL", "ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL",
    "ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL", "ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
    "ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
    "ENUM_ARRAY_EXTENDED", "COMBINED_TYPE_EXTENDED", "PRODUCT_TYPE_NARROWED", "SUM_TYPE_EXTENDED", "NOT_TYPE_NARROWED",
})

Path = tuple[str, ...]
Diff = tuple[str, Path]  # (Difference type, path segments below the pair being compared)

_ABSENT = object()

# everit's keyword sets (draft 7): which keywords make which kind of schema when no "type" claims them.
_ARRAY_KW = ("items", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains", "prefixItems")
_OBJECT_KW = ("properties", "required", "minProperties", "maxProperties", "dependencies", "patternProperties",
              "additionalProperties", "propertyNames", "dependentRequired", "dependentSchemas")
_NUMBER_KW = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_STRING_KW = ("minLength", "maxLength", "pattern", "format")
_TYPE_KW = {"array": _ARRAY_KW, "object": _OBJECT_KW, "number": _NUMBER_KW, "integer": _NUMBER_KW,
            "string": _STRING_KW, "boolean": (), "null": ()}
_CRITERIA = ("allOf", "anyOf", "oneOf")


class _TooDeep(Exception):
    """Raised inside the loader or the walk when a bound is exceeded; ``json_reads`` turns it into a message."""


# ------------------------------------------------------------------------------------------------- the model
# everit-json-schema's classes, as far as the diff reads them. Class identity matters: Confluent's first test is
# "same class?", so integer and number are both _Number, and true is an _Empty (TrueSchema extends EmptySchema).


@dataclass(eq=False, slots=True, kw_only=True)
class _Schema:
    raw: Any = None  # the JSON it came from: a combined schema's subschemas are de-duplicated by it
    part: str = ""  # for one kind of a schema object that mixes kinds (a synthetic allOf's part): which kind
    id: Any = None
    title: Any = None
    description: Any = None
    default: Any = _ABSENT


@dataclass(eq=False, slots=True, kw_only=True)
class _Empty(_Schema):
    pass


@dataclass(eq=False, slots=True, kw_only=True)
class _True(_Empty):
    pass


@dataclass(eq=False, slots=True, kw_only=True)
class _False(_Schema):
    pass


@dataclass(eq=False, slots=True, kw_only=True)
class _String(_Schema):
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None


@dataclass(eq=False, slots=True, kw_only=True)
class _Number(_Schema):
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    exclusive_maximum: float | None = None
    multiple_of: Decimal | None = None
    integer: bool = False


@dataclass(eq=False, slots=True, kw_only=True)
class _Boolean(_Schema):
    pass


@dataclass(eq=False, slots=True, kw_only=True)
class _Null(_Schema):
    pass


@dataclass(eq=False, slots=True, kw_only=True)
class _Enum(_Schema):
    values: frozenset[str] = frozenset()  # canonical JSON texts: 1 and 1.0, true and 1 stay apart, as in Java


@dataclass(eq=False, slots=True, kw_only=True)
class _Const(_Schema):
    value: str = ""


@dataclass(eq=False, slots=True, kw_only=True)
class _Combined(_Schema):
    criterion: str = "allOf"
    subschemas: list[_Schema] = field(default_factory=list)


@dataclass(eq=False, slots=True, kw_only=True)
class _Not(_Schema):
    must_not_match: _Schema | None = None


@dataclass(eq=False, slots=True, kw_only=True)
class _Object(_Schema):
    properties: dict[str, _Schema] = field(default_factory=dict)
    required: list[str] = field(default_factory=list)
    permits_additional: bool = True
    additional: _Schema | None = None
    pattern_properties: list[tuple[str, _Schema]] = field(default_factory=list)
    property_dependencies: dict[str, frozenset[str]] = field(default_factory=dict)
    schema_dependencies: dict[str, _Schema] = field(default_factory=dict)
    min_properties: int | None = None
    max_properties: int | None = None


@dataclass(eq=False, slots=True, kw_only=True)
class _Array(_Schema):
    all_items: _Schema | None = None
    item_schemas: list[_Schema] | None = None
    permits_additional: bool = True
    additional: _Schema | None = None
    min_items: int | None = None
    max_items: int | None = None
    unique: bool = False


@dataclass(eq=False, slots=True, kw_only=True)
class _Conditional(_Schema):
    pass  # if/then/else: Confluent compares only the common attributes


@dataclass(eq=False, slots=True, kw_only=True)
class _Ref(_Schema):
    ref: str = ""
    loader: _Loader | None = None


@dataclass(eq=False, slots=True, kw_only=True)
class _Unresolved(_Schema):
    ref: str = ""  # a $ref this checker cannot follow (another registered schema, an anchor, a URL)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value: Any) -> float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


# ------------------------------------------------------------------------------------------------ the loader


class _Loader:
    """One schema document's JSON as everit's model. Each JSON location is loaded once, so a ``$ref`` back to
    an enclosing schema yields the very node being compared, which is what lets the walk see the cycle."""

    def __init__(self, document: Any, references: dict[str, Any] | None = None,
                 family: dict[str, _Loader] | None = None) -> None:
        self.document = document
        self.nodes: dict[str, _Schema] = {}
        base = document.get("$id", document.get("id")) if isinstance(document, dict) else None
        self.base = base.split("#", 1)[0] if isinstance(base, str) else None
        # The registered schemas this one references, by reference name (as Confluent registers each under its
        # name), and one loader per referenced document, shared by every document of the family, so a ref from
        # anywhere to the same place is the same node.
        self.references = references or {}
        self.family = family if family is not None else {}

    def root(self) -> _Schema:
        return self._at("")

    def resolve(self, ref: str) -> _Schema:
        """The node a ``$ref`` names: a JSON pointer into this document or into a referenced schema (by its
        reference name or its ``$id``), or an unresolved marker."""
        document, _, fragment = ref.partition("#")
        loader: _Loader | None = self
        if document and document != self.base:
            loader = self._referenced(document)
        pointer = fragment
        if loader is None or (pointer and not pointer.startswith("/")):
            return self._unresolved(ref)
        return loader._at(pointer) if loader._lookup(pointer) is not _ABSENT else self._unresolved(ref)

    def _referenced(self, name: str) -> _Loader | None:
        if name not in self.family:
            document = self.references.get(name)
            if document is None:
                document = next((d for d in self.references.values() if isinstance(d, dict)
                                 and str(d.get("$id", d.get("id", ""))).split("#", 1)[0] == name), None)
            if document is None:
                return None
            self.family[name] = _Loader(document, self.references, self.family)
        return self.family[name]

    def _unresolved(self, ref: str) -> _Schema:
        key = f"$ref:{ref}"  # one node per ref text, so the walk's memo sees the same node every time
        if key not in self.nodes:
            self.nodes[key] = _Unresolved(ref=ref, raw={"$ref": ref})
        return self.nodes[key]

    def _lookup(self, pointer: str) -> Any:
        node = self.document
        for raw in pointer.split("/")[1:] if pointer else []:
            part = unquote(raw).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return _ABSENT
        return node

    def _at(self, pointer: str) -> _Schema:
        if pointer not in self.nodes:
            self.nodes[pointer] = self.load(self._lookup(pointer), 0)
        return self.nodes[pointer]

    def load(self, raw: Any, depth: int) -> _Schema:
        if depth > MAX_DEPTH:
            raise _TooDeep
        if raw is True:
            return _True(raw=True)
        if raw is False:
            return _False(raw=False)
        if not isinstance(raw, dict):
            return _Empty(raw=raw)  # not a schema; parse() refuses these before they get here
        node = self._kinds(raw, depth + 1)
        node.raw = raw
        sid = raw.get("$id", raw.get("id"))
        node.id = sid if isinstance(sid, str) else None
        node.title = raw.get("title")
        node.description = raw.get("description")
        node.default = _canonical(raw["default"]) if "default" in raw else _ABSENT
        return node

    def _kinds(self, o: dict[str, Any], depth: int) -> _Schema:
        """everit's SchemaLoader: ``$ref`` alone decides; otherwise each extractor (enum, combined, not, const,
        type, then the keyword sniffers) may contribute a schema, and more than one make a synthetic allOf."""
        if isinstance(o.get("$ref"), str):
            return _Ref(ref=o["$ref"], loader=self)
        parts: list[_Schema] = []
        if isinstance(o.get("enum"), list):
            parts.append(_Enum(values=frozenset(_canonical(v) for v in o["enum"]), raw=o, part="enum"))
        for criterion in _CRITERIA:
            if isinstance(o.get(criterion), list):
                subs = [self.load(s, depth) for s in o[criterion]]
                parts.append(_Combined(criterion=criterion, subschemas=subs, raw=o, part=criterion))
        if "not" in o:
            parts.append(_Not(must_not_match=self.load(o["not"], depth), raw=o, part="not"))
        if "const" in o:
            parts.append(_Const(value=_canonical(o["const"]), raw=o, part="const"))
        claimed: set[str] = set()
        types = o.get("type")
        if isinstance(types, str) and types in _TYPE_KW:
            parts.append(self._typed(types, o, depth, "type"))
            claimed.update(_TYPE_KW[types])
        elif isinstance(types, list):
            subs = [self._typed(t, o, depth, f"type/{t}") for t in types if isinstance(t, str) and t in _TYPE_KW]
            claimed.update(kw for t in types if isinstance(t, str) for kw in _TYPE_KW.get(t, ()))
            parts.append(_Combined(criterion="anyOf", subschemas=subs, raw=o, part="type"))
        for kind, keywords in (("array", _ARRAY_KW), ("object", _OBJECT_KW), ("number", _NUMBER_KW),
                               ("string", _STRING_KW)):
            if any(k in o and k not in claimed for k in keywords):
                parts.append(self._typed(kind, o, depth, kind))
        if any(k in o for k in ("if", "then", "else")):
            parts.append(_Conditional(raw=o, part="if"))
        if not parts:
            return _Empty()
        if len(parts) == 1:
            parts[0].part = ""  # the schema object is this one kind: it is identified by its JSON alone
            return parts[0]
        return _Combined(criterion="allOf", subschemas=parts)

    def _typed(self, kind: str, o: dict[str, Any], depth: int, part: str) -> _Schema:
        key: dict[str, Any] = {"raw": o, "part": part}
        if kind == "string":
            pattern = o.get("pattern")
            return _String(min_length=_int(o.get("minLength")), max_length=_int(o.get("maxLength")),
                           pattern=pattern if isinstance(pattern, str) else None, **key)
        if kind in ("number", "integer"):
            multiple = _num(o.get("multipleOf"))
            try:
                multiple_of = Decimal(str(multiple)) if multiple is not None else None
            except InvalidOperation:
                multiple_of = None
            return _Number(minimum=_num(o.get("minimum")), maximum=_num(o.get("maximum")),
                           exclusive_minimum=_num(o.get("exclusiveMinimum")),
                           exclusive_maximum=_num(o.get("exclusiveMaximum")),
                           multiple_of=multiple_of, integer=kind == "integer", **key)
        if kind == "boolean":
            return _Boolean(**key)
        if kind == "null":
            return _Null(**key)
        if kind == "object":
            return self._object(o, depth, part)
        return self._array(o, depth, part)

    def _object(self, o: dict[str, Any], depth: int, part: str) -> _Object:
        out = _Object(raw=o, part=part, min_properties=_int(o.get("minProperties")),
                      max_properties=_int(o.get("maxProperties")))
        if isinstance(o.get("properties"), dict):
            out.properties = {name: self.load(s, depth) for name, s in o["properties"].items()}
        if isinstance(o.get("required"), list):
            out.required = [r for r in o["required"] if isinstance(r, str)]
        extra = o.get("additionalProperties", True)
        if isinstance(extra, bool):
            out.permits_additional = extra
        else:
            out.additional = self.load(extra, depth)
        if isinstance(o.get("patternProperties"), dict):
            out.pattern_properties = [(p, self.load(s, depth)) for p, s in o["patternProperties"].items()]
        for keyword in ("dependencies", "dependentRequired", "dependentSchemas"):
            for name, dep in (o.get(keyword) or {}).items() if isinstance(o.get(keyword), dict) else ():
                if isinstance(dep, list):
                    out.property_dependencies[name] = frozenset(d for d in dep if isinstance(d, str))
                else:
                    out.schema_dependencies[name] = self.load(dep, depth)
        return out

    def _array(self, o: dict[str, Any], depth: int, part: str) -> _Array:
        out = _Array(raw=o, part=part, min_items=_int(o.get("minItems")), max_items=_int(o.get("maxItems")),
                     unique=o.get("uniqueItems") is True)
        items, extra = o.get("items", _ABSENT), o.get("additionalItems", _ABSENT)
        if isinstance(o.get("prefixItems"), list):  # 2020-12: prefixItems is the tuple, items what follows it
            out.item_schemas = [self.load(s, depth) for s in o["prefixItems"]]
            items, extra = _ABSENT, items
        if isinstance(items, list):
            out.item_schemas = [self.load(s, depth) for s in items]
        elif items is not _ABSENT:
            out.all_items = self.load(items, depth)
        if isinstance(extra, bool):
            out.permits_additional = extra
        elif extra is not _ABSENT:
            out.additional = self.load(extra, depth)
        return out


# ------------------------------------------------------------------------------------------------- the walk


def compatible(diffs: list[Diff]) -> bool:
    return all(t in COMPATIBLE_CHANGES for t, _ in diffs)


def _under(prefix: Path, diffs: list[Diff]) -> list[Diff]:
    return [(t, prefix + p) for t, p in diffs]


def _max_matching(edges: dict[int, list[int]]) -> dict[int, int]:
    """A maximum bipartite matching (left index -> right index) by augmenting paths."""
    right_of: dict[int, int] = {}

    def augment(left: int, seen: set[int]) -> bool:
        for right in edges.get(left, []):
            if right not in seen:
                seen.add(right)
                if right not in right_of or augment(right_of[right], seen):
                    right_of[right] = left
                    return True
        return False

    for left in edges:
        augment(left, set())
    return {left: right for right, left in right_of.items()}


class _Differ:
    """SchemaDiff.compare and the per-kind diffs. Each compare answers the differences below the pair it was
    given; callers put them under their own path (Confluent's subcontexts, without shared mutable paths)."""

    def __init__(self) -> None:
        # values keep the pair alive, so an id() in a key is never reused by another node while it is memoised
        self.memo: dict[tuple[int, int], tuple[_Schema, _Schema, list[Diff]]] = {}
        self.in_progress: set[tuple[int, int]] = set()
        self.depth = 0
        self.steps = 0

    def compare(self, original: _Schema | None, update: _Schema | None) -> list[Diff]:
        if original is None and update is None:
            return []
        if original is None:
            return [("SCHEMA_ADDED", ())]
        if update is None:
            return [("SCHEMA_REMOVED", ())]
        original, update = _normalize(original), _normalize(update)
        self.steps += 1
        if self.steps > MAX_STEPS or self.depth >= MAX_DEPTH:
            raise _TooDeep
        self.depth += 1
        try:
            return self._compare(original, update)
        finally:
            self.depth -= 1

    def _compare(self, original: _Schema, update: _Schema) -> list[Diff]:
        if not isinstance(original, _Combined) and isinstance(update, _Combined):
            if len(update.subschemas) == 1:
                sub = self.compare(original, update.subschemas[0])
                if compatible(sub):
                    return sub
            elif update.criterion in ("anyOf", "oneOf"):
                for subschema in update.subschemas:
                    sub = self.compare(original, subschema)
                    if compatible(sub):
                        return [*sub, ("SUM_TYPE_EXTENDED", ())]
        elif isinstance(original, _Combined) and not isinstance(update, _Combined):
            if len(original.subschemas) == 1:
                sub = self.compare(original.subschemas[0], update)
                if compatible(sub):
                    return sub
            elif original.criterion == "allOf":
                for subschema in original.subschemas:
                    sub = self.compare(subschema, update)
                    if compatible(sub):
                        return [*sub, ("PRODUCT_TYPE_NARROWED", ())]
        if type(original) is not type(update):
            if isinstance(original, _False) or isinstance(update, _Empty):
                return []
            return [("TYPE_CHANGED", ())]
        pair = (id(original), id(update))
        if pair in self.memo:
            return self.memo[pair][2]
        if pair in self.in_progress:
            return []  # a recursive cycle: compatible here, and not memoised (it is only true within the cycle)
        self.in_progress.add(pair)
        try:
            out = self._same_kind(original, update)
        finally:
            self.in_progress.discard(pair)
        self.memo[pair] = (original, update, out)
        return out

    def _same_kind(self, original: _Schema, update: _Schema) -> list[Diff]:
        out: list[Diff] = []
        for attr, kind in (("id", "ID_CHANGED"), ("title", "TITLE_CHANGED"), ("description", "DESCRIPTION_CHANGED"),
                           ("default", "DEFAULT_CHANGED")):
            if getattr(original, attr) != getattr(update, attr):
                out.append((kind, ()))
        if isinstance(original, _String) and isinstance(update, _String):
            out += _string(original, update)
        elif isinstance(original, _Number) and isinstance(update, _Number):
            out += _number(original, update)
        elif isinstance(original, _Const) and isinstance(update, _Const):
            if original.value != update.value:
                out.append(("ENUM_ARRAY_CHANGED", ("const",)))
        elif isinstance(original, _Enum) and isinstance(update, _Enum):
            out += _enum(original, update)
        elif isinstance(original, _Combined) and isinstance(update, _Combined):
            out += self._combined(original, update)
        elif isinstance(original, _Not) and isinstance(update, _Not):
            reversed_ = self.compare(update.must_not_match, original.must_not_match)  # the wrapped schemas swap roles
            out.append(("NOT_TYPE_NARROWED" if compatible(reversed_) else "NOT_TYPE_EXTENDED", ("not",)))
        elif isinstance(original, _Object) and isinstance(update, _Object):
            out += self._object(original, update)
        elif isinstance(original, _Array) and isinstance(update, _Array):
            out += self._array(original, update)
        elif isinstance(original, _Unresolved) and isinstance(update, _Unresolved) and original.ref != update.ref:
            out.append(("TYPE_CHANGED", ()))
        return out

    # CombinedSchemaDiff
    def _combined(self, original: _Combined, update: _Combined) -> list[Diff]:
        out: list[Diff] = []
        if original.criterion != update.criterion:
            o_single, u_single = len(original.subschemas) == 1, len(update.subschemas) == 1
            if (update.criterion == "anyOf" or (o_single and u_single)
                    or (o_single and update.criterion == "oneOf")
                    or (u_single and original.criterion == "allOf")):
                out.append(("COMBINED_TYPE_EXTENDED", ()))
            else:
                return [("COMBINED_TYPE_CHANGED", ())]
        originals, updates = _distinct(original.subschemas), _distinct(update.subschemas)
        if len(originals) < len(updates):
            out.append(("PRODUCT_TYPE_EXTENDED" if update.criterion == "allOf" else "SUM_TYPE_EXTENDED", ()))
        elif len(originals) > len(updates):
            out.append(("SUM_TYPE_NARROWED" if original.criterion in ("anyOf", "oneOf") else "PRODUCT_TYPE_NARROWED",
                        ()))
        edges: dict[int, list[int]] = {}
        found: dict[tuple[int, int], list[Diff]] = {}
        for i, o in enumerate(originals):
            for j, u in enumerate(updates):
                sub = self.compare(o, u)
                if compatible(sub):
                    edges.setdefault(i, []).append(j)
                    found[i, j] = _under((f"{original.criterion}/{i}",), sub)
        matching = _max_matching(edges)
        for i, j in sorted(matching.items()):
            out += found[i, j]
        if len(matching) < min(len(originals), len(updates)):
            out.append(("COMBINED_TYPE_SUBSCHEMAS_CHANGED", ()))
        return out

    # ObjectSchemaDiff
    def _object(self, original: _Object, update: _Object) -> list[Diff]:
        out: list[Diff] = []
        for name in original.properties:
            if name in update.properties:
                was, now = name in original.required, name in update.required
                if was and not now:
                    out.append(("REQUIRED_ATTRIBUTE_REMOVED", ("required", name)))
                elif now and not was:
                    kind = ("REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED" if update.properties[name].default is not _ABSENT
                            else "REQUIRED_ATTRIBUTE_ADDED")
                    out.append((kind, ("required", name)))
        for name in sorted(original.properties.keys() | update.properties.keys()):
            out += _under(("properties", name), self._property(original, update, name))
        for name in sorted(original.property_dependencies.keys() | update.property_dependencies.keys()):
            was_deps, now_deps = original.property_dependencies.get(name), update.property_dependencies.get(name)
            if now_deps is None:
                out.append(("DEPENDENCY_ARRAY_REMOVED", ("dependencies", name)))
            elif was_deps is None:
                out.append(("DEPENDENCY_ARRAY_ADDED", ("dependencies", name)))
            elif was_deps != now_deps:
                kind = ("DEPENDENCY_ARRAY_EXTENDED" if now_deps >= was_deps
                        else "DEPENDENCY_ARRAY_NARROWED" if was_deps >= now_deps else "DEPENDENCY_ARRAY_CHANGED")
                out.append((kind, ("dependencies", name)))
        for name in sorted(original.schema_dependencies.keys() | update.schema_dependencies.keys()):
            was_schema, now_schema = original.schema_dependencies.get(name), update.schema_dependencies.get(name)
            if now_schema is None:
                out.append(("DEPENDENCY_SCHEMA_REMOVED", ("dependencies", name)))
            elif was_schema is None:
                out.append(("DEPENDENCY_SCHEMA_ADDED", ("dependencies", name)))
            else:
                out += _under(("dependencies", name), self.compare(was_schema, now_schema))
        where = ("additionalProperties",)
        if original.permits_additional != update.permits_additional:
            out.append(("ADDITIONAL_PROPERTIES_ADDED" if update.permits_additional else "ADDITIONAL_PROPERTIES_REMOVED",
                        where))
        elif original.additional is None and update.additional is not None:
            out.append(("ADDITIONAL_PROPERTIES_NARROWED", where))
        elif update.additional is None and original.additional is not None:
            out.append(("ADDITIONAL_PROPERTIES_EXTENDED", where))
        else:
            out += _under(where, self.compare(original.additional, update.additional))
        out += _bound("maxProperties", "MAX_PROPERTIES", original.max_properties, update.max_properties)
        out += _bound("minProperties", "MIN_PROPERTIES", original.min_properties, update.min_properties)
        return out

    def _property(self, original: _Object, update: _Object, name: str) -> list[Diff]:
        was, now = original.properties.get(name), update.properties.get(name)
        if was is not None and now is not None:
            return self.compare(was, now)
        if now is None:
            assert was is not None
            if _open(update):  # only the update's content model decides whether a property may go
                return [("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL", ())]
            partial = _partial(update, name)
            if partial is not None:
                sub = self.compare(was, partial)
                return [*sub, ("PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if compatible(sub)
                               else "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", ())]
            if isinstance(was, _False):
                return [("PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL", ())]
            return [("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", ())]
        if _open(original):  # only the original's content model decides whether a property may come
            if isinstance(now, _Empty):
                return [("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL", ())]
            return [("PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", ())]
        out: list[Diff] = []
        partial = _partial(original, name)
        if partial is not None:
            sub = self.compare(partial, now)
            out += [*sub, ("PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if compatible(sub)
                           else "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", ())]
        if name in update.required:
            out.append(("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL" if now.default is not _ABSENT
                        else "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", ()))
        else:
            out.append(("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", ()))
        return out

    # ArraySchemaDiff
    def _array(self, original: _Array, update: _Array) -> list[Diff]:
        out = _under(("items",), self.compare(original.all_items, update.all_items))
        was_items, now_items = original.item_schemas or [], update.item_schemas or []
        for i in range(max(len(was_items), len(now_items))):
            out += _under((f"items/{i}",), self._item(original, update, i))
        where = ("additionalItems",)
        if original.permits_additional != update.permits_additional:
            out.append(("ADDITIONAL_ITEMS_REMOVED" if original.permits_additional else "ADDITIONAL_ITEMS_ADDED", where))
        elif original.additional is None and update.additional is not None:
            out.append(("ADDITIONAL_ITEMS_NARROWED", where))
        elif update.additional is None and original.additional is not None:
            out.append(("ADDITIONAL_ITEMS_EXTENDED", where))
        else:
            out += _under(where, self.compare(original.additional, update.additional))
        out += _bound("maxItems", "MAX_ITEMS", original.max_items, update.max_items)
        out += _bound("minItems", "MIN_ITEMS", original.min_items, update.min_items)
        if original.unique != update.unique:
            out.append(("UNIQUE_ITEMS_REMOVED" if original.unique else "UNIQUE_ITEMS_ADDED", ("uniqueItems",)))
        return out

    def _item(self, original: _Array, update: _Array, i: int) -> list[Diff]:
        was_items, now_items = original.item_schemas or [], update.item_schemas or []
        if i < len(was_items) and i < len(now_items):
            return self.compare(was_items[i], now_items[i])
        if i < len(was_items):
            was = was_items[i]
            if _open(update):
                return [("ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL", ())]
            if update.additional is not None:
                sub = self.compare(was, update.additional)
                return [*sub, ("ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if compatible(sub)
                               else "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", ())]
            if isinstance(was, _False):
                return [("ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL", ())]
            return [("ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL", ())]
        now = now_items[i]
        if _open(original):
            if isinstance(now, _Empty):
                return [("ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL", ())]
            return [("ITEM_ADDED_TO_OPEN_CONTENT_MODEL", ())]
        if original.additional is not None:
            sub = self.compare(original.additional, now)
            return [*sub, ("ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if compatible(sub)
                           else "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", ())]
        return [("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL", ())]


def _normalize(schema: _Schema) -> _Schema:
    """A ``$ref`` replaced by what it refers to, following chains; a chain that loops is left unresolved."""
    seen: set[int] = set()
    while isinstance(schema, _Ref):
        if id(schema) in seen or schema.loader is None:
            return _Unresolved(ref=schema.ref, raw={"$ref": schema.ref})
        seen.add(id(schema))
        schema = schema.loader.resolve(schema.ref)
    return schema


def _distinct(schemas: list[_Schema]) -> list[_Schema]:
    """A combined schema's subschemas with duplicates collapsed, first occurrence kept (Confluent's LinkedHashSet)."""
    seen: dict[tuple[str, str], _Schema] = {}
    for s in schemas:
        seen.setdefault((s.part, _canonical(s.raw)), s)
    return list(seen.values())


def _open(schema: _Object | _Array) -> bool:
    if isinstance(schema, _Object) and schema.pattern_properties:
        return False
    return schema.additional is None and schema.permits_additional


def _partial(schema: _Object, name: str) -> _Schema | None:
    """The schema a partially open content model gives an unlisted property: the first matching
    patternProperties entry (a regex search, as Java's find), else additionalProperties' schema."""
    for pattern, subschema in schema.pattern_properties:
        try:
            if re.search(pattern, name):
                return subschema
        except re.error:
            continue
    return schema.additional


def _bound(keyword: str, kind: str, was: float | None, now: float | None) -> list[Diff]:
    """A bound keyword: added, removed, increased or decreased (which of those is compatible is the set's call)."""
    if was == now:
        return []
    if was is None:
        return [(f"{kind}_ADDED", (keyword,))]
    if now is None:
        return [(f"{kind}_REMOVED", (keyword,))]
    if was < now:
        return [(f"{kind}_INCREASED", (keyword,))]
    return [(f"{kind}_DECREASED", (keyword,))]


def _string(original: _String, update: _String) -> list[Diff]:
    out = _bound("maxLength", "MAX_LENGTH", original.max_length, update.max_length)
    out += _bound("minLength", "MIN_LENGTH", original.min_length, update.min_length)
    if original.pattern is None and update.pattern is not None:
        out.append(("PATTERN_ADDED", ("pattern",)))
    elif original.pattern is not None and update.pattern is None:
        out.append(("PATTERN_REMOVED", ("pattern",)))
    elif original.pattern != update.pattern:
        out.append(("PATTERN_CHANGED", ("pattern",)))
    return out


def _number(original: _Number, update: _Number) -> list[Diff]:
    out = _bound("maximum", "MAXIMUM", original.maximum, update.maximum)
    out += _bound("minimum", "MINIMUM", original.minimum, update.minimum)
    out += _bound("exclusiveMaximum", "EXCLUSIVE_MAXIMUM", original.exclusive_maximum, update.exclusive_maximum)
    out += _bound("exclusiveMinimum", "EXCLUSIVE_MINIMUM", original.exclusive_minimum, update.exclusive_minimum)
    was, now = original.multiple_of, update.multiple_of
    if was != now:
        if was is None:
            kind = "MULTIPLE_OF_ADDED"
        elif now is None:
            kind = "MULTIPLE_OF_REMOVED"
        elif was and now % was == 0:
            kind = "MULTIPLE_OF_EXPANDED"  # every multiple of the update's is one of the original's: fewer values
        elif now and was % now == 0:
            kind = "MULTIPLE_OF_REDUCED"
        else:
            kind = "MULTIPLE_OF_CHANGED"
        out.append((kind, ("multipleOf",)))
    if original.integer != update.integer:
        out.append(("TYPE_EXTENDED" if original.integer else "TYPE_NARROWED", ()))
    return out


def _enum(original: _Enum, update: _Enum) -> list[Diff]:
    if original.values == update.values:
        return []
    if update.values >= original.values:
        return [("ENUM_ARRAY_EXTENDED", ("enum",))]
    if original.values >= update.values:
        return [("ENUM_ARRAY_NARROWED", ("enum",))]
    return [("ENUM_ARRAY_CHANGED", ("enum",))]


# ---------------------------------------------------------------------------------------------- entry points


def path_text(path: Path) -> str:
    return "#/" + "/".join(path)


def differences(original: Any, update: Any, original_refs: dict[str, Any] | None = None,
                update_refs: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """Confluent's ``SchemaDiff.compare(original, update)`` on two JSON Schemas (parsed JSON), each with the
    schemas it references by reference name: every difference as (Difference type, path), compatible ones
    included. Raises _TooDeep past the bounds."""
    differ = _Differ()
    try:
        diffs = differ.compare(_Loader(original, original_refs).root(), _Loader(update, update_refs).root())
    except RecursionError:  # the bounds are set well inside Python's stack; this is the belt to their braces
        raise _TooDeep from None
    return [(t, path_text(p)) for t, p in diffs]


def _msg(kind: str, path: str) -> str:
    return f"{{errorType:'{kind}', description:'Found incompatible change: {kind} at path '{path or '#/'}''}}"


def json_reads(reader: Any, writer: Any, reader_refs: dict[str, Any] | None = None,
               writer_refs: dict[str, Any] | None = None) -> list[str]:
    """Whether a consumer with JSON Schema ``reader`` accepts what a producer with ``writer`` wrote, as
    Confluent's messages for each incompatible difference (empty: compatible). original = writer,
    update = reader; ``*_refs``: the registered schemas each references, by reference name."""
    try:
        found = differences(writer, reader, writer_refs, reader_refs)
    except _TooDeep:
        return [f"{{errorType:'MAX_DEPTH_EXCEEDED', description:'The schemas nest more than {MAX_DEPTH} levels "
                f"(or need more than {MAX_STEPS} comparisons); the change is treated as incompatible'}}"]
    return [_msg(kind, path) for kind, path in found if kind not in COMPATIBLE_CHANGES]

