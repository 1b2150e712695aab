"""The OpenAPI 3 description of the HTTP API, built from the route table so it cannot miss a route.

``python -m broker.api.openapi > docs/openapi.json`` refreshes the copy kept in the repository; a test checks
that the copy matches.
"""

from __future__ import annotations

import json
import re
from typing import Any

SUMMARIES: dict[tuple[str, str], str] = {
    ("GET", "/health"): "Broker health: id, cluster id, broker epoch, controller",
    ("GET", "/metrics"): "Prometheus metrics",
    ("GET", "/openapi.json"): "This document",
    ("GET", "/metadata"): "Brokers, topics, partition leaders and ISRs (what clients route by)",
    ("GET", "/brokers"): "Broker ids (REST Proxy v2)",
    ("GET", "/topics"): "Topic names (REST Proxy v2)",
    ("GET", "/topics/{topic}"): "A topic with its configs and partitions (v2)",
    ("POST", "/topics/{topic}"): "Produce JSON or base64 records (v2); acks=0|1|all",
    ("GET", "/topics/{topic}/partitions"): "Partitions of a topic (v2)",
    ("GET", "/topics/{topic}/partitions/{partition}"): "One partition (v2)",
    ("POST", "/topics/{topic}/partitions/{partition}"): "Produce to one partition (v2)",
    ("GET", "/topics/{topic}/partitions/{partition}/offsets"): (
        "Beginning and end (high watermark) offsets (v2); ?timestamp= gives the offset for a time"
    ),
    ("GET", "/topics/{topic}/partitions/{partition}/records"): "Read records by offset, long-polling (JSON)",
    ("GET", "/topics/{topic}/partitions/{partition}/batches"): "Fetch whole v2 record batches (binary path)",
    ("POST", "/topics/{topic}/partitions/{partition}/batches"): "Produce whole v2 record batches (binary path)",
    ("GET", "/topics/{topic}/partitions/{partition}/epoch_end_offset"):
        "Where a leader epoch ended on the leader (followers' divergence check)",
    ("POST", "/controller/controlled_shutdown"): "A stopping broker asks the controller to move its leaderships",
    ("POST", "/admin/preferred_leader_election"): "Give leadership back to preferred replicas (all or listed)",
    ("GET", "/v3/clusters"): "The cluster (v3)",
    ("GET", "/v3/clusters/{cluster_id}"): "The cluster (v3)",
    ("GET", "/v3/clusters/{cluster_id}/topics"): "Topics (v3)",
    ("POST", "/v3/clusters/{cluster_id}/topics"): "Create a topic (v3)",
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}"): "A topic (v3)",
    ("DELETE", "/v3/clusters/{cluster_id}/topics/{topic}"): "Delete a topic (v3)",
    ("PATCH", "/v3/clusters/{cluster_id}/topics/{topic}"): "Add partitions: {\"partitions_count\": N}",
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/configs"): "Topic configs (v3)",
    ("POST", "/v3/clusters/{cluster_id}/topics/{topic}/configs:alter"): "Set or delete several configs (v3)",
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/configs/{name}"): "One config (v3)",
    ("PUT", "/v3/clusters/{cluster_id}/topics/{topic}/configs/{name}"): "Set one config (v3)",
    ("DELETE", "/v3/clusters/{cluster_id}/topics/{topic}/configs/{name}"): "Reset one config (v3)",
}

ERROR = {
    "type": "object",
    "required": ["error_code", "message"],
    "properties": {
        "error_code": {"type": "integer"}, "message": {"type": "string"},
        "error": {"type": "string"}, "retriable": {"type": "boolean"},
    },
}


def spec(route_table: list[tuple[str, str]]) -> dict[str, Any]:
    """The document for ``route_table`` ((method, path) pairs): passed in, so this module imports no handler."""
    paths: dict[str, dict[str, Any]] = {}
    for method, path in route_table:
        params = [
            {"name": name, "in": "path", "required": True,
             "schema": {"type": "integer" if name == "partition" else "string"}}
            for name in re.findall(r"{(\w+)}", path)
        ]
        paths.setdefault(path, {})[method.lower()] = {
            "summary": SUMMARIES.get((method, path), ""),
            "parameters": params,
            "responses": {
                "200": {"description": "OK"},
                "default": {"description": "Error", "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
            },
        }
    return {
        "openapi": "3.0.3",
        "info": {"title": "Odradek HTTP API", "version": "1",
                 "description": "Confluent REST Proxy v2/v3 compatible produce, read and admin; see docs/http-api.md"},
        "paths": paths,
        "components": {"schemas": {"Error": ERROR}},
    }


if __name__ == "__main__":
    from broker.api.app import route_table

    print(json.dumps(spec(route_table()), indent=1, sort_keys=True))
