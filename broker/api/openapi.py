"""The OpenAPI 3 description of the HTTP API, built from the route table so it cannot miss a route.

``python -m broker.api.openapi > docs/openapi.json`` refreshes the copy kept in the repository; a test checks
that the copy matches.
"""

from __future__ import annotations

import json
import re
from typing import Any

from broker.api.openapi_schemas import OPERATIONS, SCHEMAS, V2_TYPES, errors, query, ref
from broker.api.schemas_v3 import V3_OPERATIONS, V3_SCHEMAS, V3_SUMMARIES

SUMMARIES: dict[tuple[str, str], str] = {
    ("GET", "/health"): "Broker health: id, cluster id, broker epoch, controller",
    ("GET", "/metrics"): "Prometheus metrics",
    ("GET", "/openapi.json"): "This document",
    ("GET", "/ui"): "The web console's page (docs/console.md)",
    ("GET", "/ui/{asset}"): "The web console's script, style and icon",
    ("GET", "/ui/api/brokers"): "The web console's view of every broker: its health, log dirs and metrics",
    ("GET", "/ui/api/zookeeper"): "The ZooKeeper ensemble: each server's mode, zxid and load (its srvr answer)",
    ("GET", "/metadata"): "Brokers, topics, partition leaders and ISRs (what clients route by)",
    ("GET", "/brokers"): "Broker ids (REST Proxy v2)",
    ("GET", "/topics"): "Topic names (REST Proxy v2)",
    ("GET", "/topics/{topic}"): "A topic with its configs and partitions (v2)",
    ("POST", "/topics/{topic}"): "Produce JSON or base64 records (v2); acks=0|1|all",
    ("GET", "/topics/{topic}/partitions"): "Partitions of a topic (v2)",
    ("GET", "/topics/{topic}/partitions/{partition}"): "One partition (v2)",
    ("POST", "/topics/{topic}/partitions/{partition}"): "Produce to one partition (v2)",
    ("GET", "/topics/{topic}/partitions/{partition}/offsets"): (
        "Beginning and end (high watermark) offsets (v2); ?timestamp= gives the offset for a time; "
        "?isolation=read_committed ends at the last stable offset"
    ),
    ("GET", "/topics/{topic}/partitions/{partition}/records"): "Read records by offset, long-polling (JSON)",
    ("GET", "/topics/{topic}/partitions/{partition}/batches"): "Fetch whole v2 record batches (binary path)",
    ("POST", "/topics/{topic}/partitions/{partition}/batches"): "Produce whole v2 record batches (binary path)",
    ("GET", "/topics/{topic}/partitions/{partition}/epoch_end_offset"):
        "Where a leader epoch ended on the leader (followers' divergence check)",
    ("POST", "/producer_ids"): "InitProducerId: a producer id and epoch for an idempotent producer (any broker)",
    # transactions (docs/transactions.md; any broker forwards to the transactional id's coordinator)
    ("POST", "/transactions/{tid}/init"): (
        "InitProducerId with a transactional id: fences older epochs, ends their open transaction"
    ),
    ("POST", "/transactions/{tid}/partitions"): "AddPartitionsToTxn: before a partition's first batch in it",
    ("POST", "/transactions/{tid}/offsets"): "Add a group's offsets to the transaction (committed with it)",
    ("POST", "/transactions/{tid}/end"): "EndTxn: commit or abort (markers on every partition, then offsets)",
    ("GET", "/transactions/{tid}"): "A transaction's state, producer id and epoch, partitions and coordinator",
    ("POST", "/transactions/markers"): "Broker to broker: a coordinator's COMMIT/ABORT marker for a led partition",
    ("POST", "/controller/controlled_shutdown"): "A stopping broker asks the controller to move its leaderships",
    ("POST", "/admin/preferred_leader_election"): "Give leadership back to preferred replicas (all or listed)",
    ("POST", "/admin/unclean_leader_election"): (
        "Elect leaders for leaderless partitions from any live replica (KIP-460 UNCLEAN; may lose records)"
    ),
    ("GET", "/admin/reassign_partitions"): "Running partition reassignments: target, adding and removing replicas",
    ("POST", "/admin/reassign_partitions"): "Start a partition reassignment (409 while one runs, unless additional)",
    ("POST", "/admin/reassign_partitions/cancel"): "Revert running reassignments to their original replicas",
    ("GET", "/admin/log_dirs"): "This broker's replicas with their sizes (DescribeLogDirs)",
    ("GET", "/v3/clusters"): "The cluster (v3)",
    ("GET", "/v3/clusters/{cluster_id}"): "The cluster (v3)",
    ("GET", "/v3/clusters/{cluster_id}/brokers"): "The registered brokers (v3)",
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/partitions"): "A topic's partitions (v3)",
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/partitions/{partition}"): "One partition, its leader linked (v3)",
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/partitions/{partition}/replicas"): "A partition's replicas (v3)",
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/partitions/{partition}/replicas/{broker_id}"): (
        "One replica: leader, in sync (v3)"),
    ("GET", "/v3/clusters/{cluster_id}/brokers/{broker_id}"): "One registered broker (v3; 404 when not registered)",
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
    # consumer groups (docs/consumer-groups.md)
    ("GET", "/groups"): "Consumer groups: state, member count, coordinator",
    ("GET", "/groups/{group}"): "A group: state, generation, assignor, coordinator, members and assignment",
    ("DELETE", "/groups/{group}"): "Delete an empty group and its offsets",
    ("POST", "/groups/{group}/members"): "Join (long-polls until the rebalance completes): assignment, revoke",
    ("POST", "/groups/{group}/members/{member}/heartbeat"): "Heartbeat of a member for its generation",
    ("DELETE", "/groups/{group}/members/{member}"): "Leave the group at once",
    ("GET", "/groups/{group}/offsets"): "Committed offsets with log end offset and lag",
    ("POST", "/groups/{group}/offsets"): "Commit offsets, fenced by generation and member id",
    ("POST", "/groups/{group}/offsets/reset"): "Set offsets of an empty group",
    ("DELETE", "/groups/{group}/offsets"): (
        "Delete a topic's committed offsets (?topic=, optional ?partitions=0,1); refused while a member subscribes"
    ),
    # REST Proxy v2 consumer instances (broker/api/consumers_v2.py)
    ("POST", "/consumers/{group}"): "Create a consumer instance (v2): name, format, auto.offset.reset, ...",
    ("DELETE", "/consumers/{group}/instances/{instance}"): "Delete a consumer instance (v2); it leaves its group",
    ("POST", "/consumers/{group}/instances/{instance}/subscription"): "Subscribe to topics or a topic_pattern (v2)",
    ("GET", "/consumers/{group}/instances/{instance}/subscription"): "Subscribed topics (v2)",
    ("DELETE", "/consumers/{group}/instances/{instance}/subscription"): "Unsubscribe (v2)",
    ("POST", "/consumers/{group}/instances/{instance}/assignments"): "Assign partitions manually (v2)",
    ("GET", "/consumers/{group}/instances/{instance}/assignments"): "Assigned partitions (v2)",
    ("POST", "/consumers/{group}/instances/{instance}/positions"): "Seek to offsets (v2)",
    ("POST", "/consumers/{group}/instances/{instance}/positions/beginning"): "Seek to the beginning (v2)",
    ("POST", "/consumers/{group}/instances/{instance}/positions/end"): "Seek to the end (v2)",
    ("GET", "/consumers/{group}/instances/{instance}/records"): "Fetch records (v2) in the instance's format",
    ("POST", "/consumers/{group}/instances/{instance}/offsets"): "Commit offsets, or everything returned so far (v2)",
    ("GET", "/consumers/{group}/instances/{instance}/offsets"): "Committed offsets (v2)",
    # REST Proxy v1 (broker/api/v1.py; docs/http-api.md#rest-proxy-v1). The produces, instance creation and the
    # commit share v2's paths: a v1 Content-Type or Accept (application/vnd.kafka[.binary|.json].v1+json) gets v1.
    ("GET", "/topics/{topic}/partitions/{partition}/messages"): (
        "Read count records from offset (v1 simple consumer; ?offset= or ?timestamp=, &count=, default 1)"
    ),
    ("GET", "/consumers/{group}/instances/{instance}/topics/{topic}"): (
        "Read a topic through a consumer instance (v1): the first read subscribes it; ?max_bytes="
    ),
}

# REST Proxy v1's own operations (broker/api/v1.py): records are kafka-rest's v1 ConsumerRecord. Errors are
# answered as v2's (application/vnd.kafka.v2+json envelope).
_V1_READ_TYPES = ("application/vnd.kafka.binary.v1+json", "application/vnd.kafka.v1+json",
                  "application/vnd.kafka+json", "application/json", "application/vnd.kafka.json.v1+json")
V1_SCHEMAS: dict[str, Any] = {
    "V1ConsumerRecord": {
        "type": "object", "required": ["topic", "key", "value", "partition", "offset"],
        "description": "kafka-rest v1 BinaryConsumerRecord / JsonConsumerRecord: base64 (binary) or JSON values",
        "properties": {"topic": {"type": "string"}, "key": {"nullable": True}, "value": {"nullable": True},
                       "partition": {"type": "integer", "minimum": 0}, "offset": {"type": "integer", "minimum": 0}},
    },
    "V1Records": {"type": "array", "items": ref("V1ConsumerRecord")},
}
V1_OPERATIONS: dict[tuple[str, str], dict[str, Any]] = {
    ("GET", "/topics/{topic}/partitions/{partition}/messages"): {
        "parameters": [query("offset", {"type": "integer", "minimum": 0}, "the first offset (or give timestamp)"),
                       query("timestamp", {"type": "string"}, "ISO-8601 instant or ms: start at this time"),
                       query("count", {"type": "integer", "maximum": 1000}, "records to read, default 1")],
        "responses": {"200": {"description": "OK", "content": {t: {"schema": ref("V1Records")}
                                                               for t in _V1_READ_TYPES}},
                      **errors(400, 404, 406, 416, 422, 503)}},
    ("GET", "/consumers/{group}/instances/{instance}/topics/{topic}"): {
        "parameters": [query("max_bytes", {"type": "integer"}, "answer size bound; <= 0: the broker's")],
        "responses": {"200": {"description": "OK", "content": {t: {"schema": ref("V1Records")}
                                                               for t in _V1_READ_TYPES}},
                      **errors(400, 404, 406, 409, 503)}},
}

SUMMARIES.update(V3_SUMMARIES)
# Confluent Schema Registry (broker/api/schema_registry.py, docs/schema-registry.md); its answers are
# application/vnd.schemaregistry.v1+json, its errors Confluent's codes (40401, 40402, 40403, 409, 42201, ...).
_S, _SV, _I = "/subjects/{subject}", "/subjects/{subject}/versions/{version}", "/schemas/ids/{id}"
SUMMARIES.update({
    ("GET", "/subjects"): "Schema Registry: subjects (?deleted=true, ?subjectPrefix=)",
    ("POST", _S): "Schema Registry: look a schema up under a subject (its version and id)",
    ("DELETE", _S): "Schema Registry: delete a subject (soft; ?permanent=true after a soft delete)",
    ("GET", f"{_S}/versions"): "Schema Registry: a subject's versions",
    ("POST", f"{_S}/versions"): "Schema Registry: register a schema (the same schema answers the same id)",
    ("GET", _SV): "Schema Registry: one version (or latest) of a subject",
    ("DELETE", _SV): "Schema Registry: delete a version (soft; ?permanent=true after a soft delete)",
    ("GET", f"{_SV}/schema"): "Schema Registry: a version's schema text",
    ("GET", f"{_SV}/referencedby"): "Schema Registry: ids of schemas referencing this version",
    ("GET", "/schemas/types"): "Schema Registry: the schema types served (AVRO, JSON)",
    ("GET", _I): "Schema Registry: a schema by id",
    ("GET", f"{_I}/schema"): "Schema Registry: a schema's text by id",
    ("GET", f"{_I}/versions"): "Schema Registry: the subject versions holding a schema id",
    ("GET", f"{_I}/subjects"): "Schema Registry: the subjects holding a schema id",
    ("GET", "/config"): "Schema Registry: the global compatibility level",
    ("PUT", "/config"): "Schema Registry: set the global compatibility level",
    ("DELETE", "/config"): "Schema Registry: reset the global compatibility level",
    ("GET", "/config/{subject}"): "Schema Registry: a subject's compatibility level (?defaultToGlobal=true)",
    ("PUT", "/config/{subject}"): "Schema Registry: set a subject's compatibility level",
    ("DELETE", "/config/{subject}"): "Schema Registry: remove a subject's compatibility level",
    ("GET", "/mode"): "Schema Registry: the global mode (READWRITE, READONLY, IMPORT)",
    ("PUT", "/mode"): "Schema Registry: set the global mode",
    ("DELETE", "/mode"): "Schema Registry: reset the global mode",
    ("GET", "/mode/{subject}"): "Schema Registry: a subject's mode (?defaultToGlobal=true)",
    ("PUT", "/mode/{subject}"): "Schema Registry: set a subject's mode",
    ("DELETE", "/mode/{subject}"): "Schema Registry: remove a subject's mode",
    ("POST", "/compatibility/subjects/{subject}/versions"): (
        "Schema Registry: is a schema compatible with the subject's versions (?verbose=true)"),
    ("POST", "/compatibility/subjects/{subject}/versions/{version}"): (
        "Schema Registry: is a schema compatible with one version (or latest; ?verbose=true)"),
    ("POST", "/schema_registry/writes"): "Broker to broker: a Schema Registry write forwarded to the primary",
})  # Confluent v3 groups, produce, ACLs, reassignments (broker/api/schemas_v3.py)

_PARAM = re.compile(r"{(\w+)(?::([^}]*))?}")


def _path_schema(name: str, regex: str | None) -> dict[str, Any]:
    if name == "partition":
        return {"type": "integer"}
    if regex and re.fullmatch(r"[\w|-]+", regex):
        return {"type": "string", "enum": regex.split("|")}
    return {"type": "string", "pattern": f"^{regex}$"} if regex else {"type": "string"}


def openapi_path(path: str) -> str:
    """aiohttp's ``{name:regex}`` as OpenAPI's ``{name}``."""
    return _PARAM.sub(lambda m: "{" + m.group(1) + "}", path)


def _operation(method: str, path: str) -> dict[str, Any]:
    params = [{"name": name, "in": "path", "required": True, "schema": _path_schema(name, regex or None)}
              for name, regex in _PARAM.findall(path)]
    described = (OPERATIONS.get((method, path)) or V1_OPERATIONS.get((method, path))
                 or V3_OPERATIONS.get((method, path)))
    if described is None:  # a route not in the schema table yet: described generically
        return {"summary": SUMMARIES.get((method, path), ""), "parameters": params, "responses": {
            "200": {"description": "OK"},
            "default": {"description": "Error", "content": {
                t: {"schema": {"$ref": "#/components/schemas/Error"}} for t in V2_TYPES}},
        }}
    op: dict[str, Any] = {"summary": SUMMARIES.get((method, path), ""),
                          "parameters": params + list(described.get("parameters", [])),
                          "responses": described["responses"]}
    if "requestBody" in described:
        op["requestBody"] = described["requestBody"]
    return op


def spec(route_table: list[tuple[str, str]]) -> dict[str, Any]:
    """The document for ``route_table`` ((method, path) pairs): passed in, so this module imports no handler."""
    paths: dict[str, dict[str, Any]] = {}
    for method, path in route_table:
        paths.setdefault(openapi_path(path), {})[method.lower()] = _operation(method, path)
    return {
        "openapi": "3.0.3",
        "info": {"title": "Odradek HTTP API", "version": "1",
                 "description": "Confluent REST Proxy v2/v3 compatible produce, read and admin; statuses and error "
                                "codes as Confluent answers them; see docs/http-api.md"},
        "paths": paths,
        "components": {"schemas": {**SCHEMAS, **V1_SCHEMAS, **V3_SCHEMAS}},
    }


if __name__ == "__main__":
    from broker.api.app import route_table

    print(json.dumps(spec(route_table()), indent=1, sort_keys=True))
