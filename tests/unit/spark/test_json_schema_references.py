"""A JSON Schema column whose ``$ref`` names other registered schemas (odradek_spark/json_schema.py): the version's
references fetched from the registry, transitively (odradek_spark/schema_registry.py ``RegistryClient.referenced``),
and each ``$ref`` found as the cluster's registry finds it (broker/schema_registry/json_schema_compat.py): by the
reference's name, or by the referenced schema's ``$id``, exactly or relative to the referring schema's ``$id``;
a ``$ref`` inside a referenced schema points into that schema."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

from odradek_spark.avro import frame
from odradek_spark.json_schema import FramedJsonDecoder, JsonSchemaError, resolve_column, spark_type
from odradek_spark.options import ColumnFormat
from odradek_spark.schema_registry import RegistryClient, RegistryError

COUNTRY = {"$id": "https://example.com/country.json", "type": "object",
           "properties": {"code": {"$ref": "#/definitions/Code"}},
           "definitions": {"Code": {"type": "string"}}}
ADDRESS = {"type": "object", "properties": {
    "city": {"type": "string"},
    "country": {"$ref": "https://example.com/country.json"},  # by $id: its reference is named otherwise
    "zip": {"$ref": "#/definitions/Zip"},  # within the address schema itself, not the order's
}, "definitions": {"Zip": {"type": "integer"}}}
ORDER = {"$id": "https://example.com/order.json", "type": "object", "properties": {
    "id": {"type": "integer"},
    "ship": {"$ref": "address.json"},  # by reference name
    "stops": {"type": "array", "items": {"$ref": "address.json#"}},
    "origin": {"$ref": "country.json#/properties/code"},  # relative to the order's $id: the country's $id
    "zip": {"$ref": "#/definitions/Zip"},
}, "definitions": {"Zip": {"type": "string"}}}

ADDRESS_TYPE = StructType([StructField("city", StringType()),
                           StructField("country", StructType([StructField("code", StringType())])),
                           StructField("zip", LongType())])
ORDER_TYPE = StructType([StructField("id", LongType()), StructField("ship", ADDRESS_TYPE),
                         StructField("stops", ArrayType(ADDRESS_TYPE, True)), StructField("origin", StringType()),
                         StructField("zip", StringType())])


class FakeRegistry(RegistryClient):
    """The real client's reference walk over versions answered from memory (as the REST API answers them)."""

    def __init__(self, versions: dict[tuple[str, int], dict[str, Any]]) -> None:
        self.versions = versions
        self.calls: list[tuple[str, Any]] = []

    def version_info(self, subject: str, version: int | str = "latest", fmt: str | None = None) -> dict[str, Any]:
        self.calls.append((subject, version))
        latest = max(v for s, v in self.versions if s == subject) if version == "latest" else int(version)
        if (subject, latest) not in self.versions:
            raise RegistryError(f"subject {subject!r} version {version}: not found", 40402)
        return dict(self.versions[(subject, latest)])


def version(schema: Any, schema_id: int, refs: Sequence[tuple[str, str, int]] = (), kind: str = "JSON",
            number: int = 1) -> dict[str, Any]:
    return {"id": schema_id, "version": number, "schemaType": kind, "schema": json.dumps(schema),
            "references": [{"name": n, "subject": s, "version": v} for n, s, v in refs]}


def registry() -> FakeRegistry:
    return FakeRegistry({
        ("country", 1): version(COUNTRY, 1),
        ("address", 1): version(ADDRESS, 2, [("country-ref", "country", 1)]),
        ("orders-value", 1): version(ORDER, 3, [("address.json", "address", 1)]),
    })


def test_refs_to_other_registered_schemas_resolve_by_name_and_by_id_transitively() -> None:
    reg = registry()
    column = resolve_column(reg, ColumnFormat("value", "orders-value", None, kind="json_schema"))
    # The address's own reference (the country) is fetched too, before the address.
    assert [name for name, _ in column.references] == ["country-ref", "address.json"]
    assert reg.calls == [("orders-value", "latest"), ("address", 1), ("country", 1)]
    assert column.spark_field() == StructField("value", ORDER_TYPE)


def test_framed_json_under_a_schema_with_references_decodes_into_the_struct() -> None:
    column = resolve_column(registry(), ColumnFormat("value", "orders-value", None, kind="json_schema"))
    record = {"id": 5, "ship": {"city": "Oslo", "country": {"code": "NO"}, "zip": 150},
              "stops": [{"city": "Bergen", "zip": 5003}], "origin": "SE", "zip": "0150"}
    got = FramedJsonDecoder(column).decode([frame(3, json.dumps(record).encode())], pa.array([0], pa.int64()),
                                           "orders-0").to_pylist()
    assert got == [{"id": 5, "ship": {"city": "Oslo", "country": {"code": "NO"}, "zip": 150},
                    "stops": [{"city": "Bergen", "country": None, "zip": 5003}], "origin": "SE", "zip": "0150"}]
    bad = {"id": 5, "ship": {"zip": "not a number"}}
    with pytest.raises(ValueError, match=r"offset 7 \(schema id 3\) does not fit .*\"not a number\" is not a long"):
        FramedJsonDecoder(column).decode([frame(3, json.dumps(bad).encode())], pa.array([7], pa.int64()), "orders-0")


def test_a_ref_naming_no_reference_a_cycle_across_schemas_or_a_non_json_reference_is_refused() -> None:
    with pytest.raises(JsonSchemaError, match=r"\$ref 'address.json' names a schema that is neither this one nor one "
                                              r"of its references \(by name or \$id; references: none\)"):
        spark_type(ORDER)
    a = {"type": "object", "properties": {"b": {"$ref": "b.json"}}}
    b = {"type": "object", "properties": {"a": {"$ref": "a.json"}}}
    with pytest.raises(JsonSchemaError, match=r"recursive \$ref 'b.json'"):
        spark_type(a, [("a.json", a), ("b.json", b)])
    cyclic = FakeRegistry({("a", 1): version(a, 1, [("b.json", "b", 1)]),
                           ("b", 1): version(b, 2, [("a.json", "a", 1)])})
    with pytest.raises(RegistryError, match="refers back to itself"):
        resolve_column(cyclic, ColumnFormat("value", "a", None, kind="json_schema"))
    avro = FakeRegistry({("a", 1): version("string", 1, kind="AVRO")})
    with pytest.raises(JsonSchemaError, match="is a AVRO schema, not JSON"):
        resolve_column(avro, ColumnFormat("value", "a", None, kind="json_schema"))
