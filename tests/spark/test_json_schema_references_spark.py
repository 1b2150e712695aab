"""Issue 26: a JSON Schema whose ``$ref`` names another registered schema reads into typed columns in Spark
(odradek_spark/json_schema.py resolves the version's references through the registry, transitively)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from tests.harness.cluster import LocalProcessBackend
from tests.harness.http import request
from tests.spark.conftest import new_topic
from tests.spark.test_json_schema_protobuf import SR, produce_raw, read

pytestmark = pytest.mark.spark


def register(url: str, subject: str, schema: Any, references: Sequence[dict[str, Any]] = ()) -> int:
    status, body, _ = request("POST", f"{url}/subjects/{subject}/versions",
                              {"schema": json.dumps(schema), "schemaType": "JSON", "references": list(references)},
                              content_type=SR, accept=SR)
    assert status == 200, body
    return int(body["id"])


def test_a_json_schema_referencing_other_subjects_reads_as_a_typed_struct(spark: Any,
                                                                        cluster: LocalProcessBackend) -> None:
    topic = new_topic(cluster, partitions=1, rf=3, prefix="jsonschema-refs")
    url = cluster.broker_url(cluster.broker_ids()[0])
    country = {"$id": f"https://example.com/{topic}/country.json", "type": "object",
               "properties": {"code": {"type": "string"}}}
    address = {"type": "object", "properties": {"city": {"type": "string"},
                                                "country": {"$ref": f"https://example.com/{topic}/country.json"}}}
    order = {"type": "object", "properties": {"id": {"type": "integer"}, "ship": {"$ref": "address.json"}}}
    register(url, f"{topic}-country", country)
    register(url, f"{topic}-address", address, [{"name": "country.json", "subject": f"{topic}-country", "version": 1}])
    schema_id = register(url, f"{topic}-value", order,
                         [{"name": "address.json", "subject": f"{topic}-address", "version": 1}])
    for i in range(5):
        record = {"id": i, "ship": {"city": f"c{i}", "country": {"code": "NO"}}}
        produce_raw(cluster, topic, b"\x00" + schema_id.to_bytes(4, "big") + json.dumps(record).encode())
    df = read(spark, cluster, topic, "json_schema")
    assert df.schema["value"].dataType.simpleString() == \
        "struct<id:bigint,ship:struct<city:string,country:struct<code:string>>>"
    rows = df.selectExpr("value.id", "value.ship.city", "value.ship.country.code").collect()
    assert sorted((r["id"], r["city"], r["code"]) for r in rows) == [(i, f"c{i}", "NO") for i in range(5)]
