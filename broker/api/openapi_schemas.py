"""Request and response schemas of the OpenAPI document, per operation, with every status it can answer.

Kept apart from broker/api/openapi.py (which owns the route walk and the summaries) so that new routes can be
added there without touching this table; an operation missing here is described generically (200 and a
default error). Each entry says what the server answers: the statuses and error codes of docs/http-api.md,
which follow Confluent's REST Proxy (kafka-rest ``Errors.java``, rest-utils' exception mappers).
"""

from __future__ import annotations

from typing import Any

V2 = "application/vnd.kafka.v2+json"
JSON = "application/json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
V2_TYPES = (V2, "application/vnd.kafka+json", JSON)


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(kind: str) -> dict[str, Any]:
    return {"type": kind, "nullable": True}


_REPLICA = {"type": "object", "required": ["broker", "leader", "in_sync"], "properties": {
    "broker": {"type": "integer"}, "leader": {"type": "boolean"}, "in_sync": {"type": "boolean"}}}
_LINK = {"type": "object", "properties": {"related": {"type": "string"}}}

SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object", "required": ["error_code", "message"],
        "description": "Confluent's envelope; `error` (Odradek's stable name) and `retriable` are extra fields",
        "properties": {"error_code": {"type": "integer"}, "message": _nullable("string"),
                       "error": {"type": "string"}, "retriable": {"type": "boolean"}},
    },
    "ProduceRecord": {
        "type": "object", "additionalProperties": False, "properties": {
            "key": {"nullable": True}, "value": {"nullable": True},
            "partition": {"type": "integer", "minimum": 0, "maximum": 2147483647, "nullable": True},
            "timestamp": {"type": "integer", "minimum": 0, "nullable": True},
            "headers": {"type": "array", "items": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string"}, "value": {"type": "string", "format": "byte", "nullable": True}}}},
        },
    },
    "ProduceRequest": {
        "type": "object", "required": ["records"], "additionalProperties": False, "properties": {
            "records": {"type": "array", "minItems": 1, "items": ref("ProduceRecord")},
            "key_schema": _nullable("string"), "key_schema_id": _nullable("integer"),
            "value_schema": _nullable("string"), "value_schema_id": _nullable("integer"),
        },
    },
    "PartitionOffset": {
        "type": "object", "required": ["partition", "offset", "error_code", "error"],
        "description": "Confluent's PartitionOffset; a failed record has error_code 50002 (Kafka error) or 50003 "
                       "(retriable), its Odradek name in `error` and in the extra `error_name`",
        "properties": {"partition": _nullable("integer"), "offset": _nullable("integer"),
                       "error_code": {"type": "integer", "nullable": True, "enum": [50002, 50003, None]},
                       "error": _nullable("string"), "error_name": {"type": "string"}},
    },
    "ProduceResponse": {
        "type": "object", "required": ["key_schema_id", "value_schema_id", "offsets"], "properties": {
            "key_schema_id": _nullable("integer"), "value_schema_id": _nullable("integer"),
            "offsets": {"type": "array", "items": ref("PartitionOffset")}},
    },
    "BrokerList": {"type": "object", "required": ["brokers"],
                   "properties": {"brokers": {"type": "array", "items": {"type": "integer"}}}},
    "TopicNames": {"type": "array", "items": {"type": "string"}},
    "Partition": {"type": "object", "required": ["partition", "leader", "replicas"], "properties": {
        "partition": {"type": "integer"}, "leader": {"type": "integer"},
        "replicas": {"type": "array", "items": _REPLICA}}},
    "PartitionList": {"type": "array", "items": ref("Partition")},
    "Topic": {"type": "object", "required": ["name", "configs", "partitions"], "properties": {
        "name": {"type": "string"}, "configs": {"type": "object", "additionalProperties": {"type": "string"}},
        "partitions": {"type": "array", "items": ref("Partition")}}},
    "PartitionOffsets": {
        "type": "object", "required": ["beginning_offset", "end_offset"], "additionalProperties": False,
        "description": "Confluent's TopicPartitionOffsetResponse; `timestamp` and `offset` only with ?timestamp=",
        "properties": {"beginning_offset": {"type": "integer"}, "end_offset": {"type": "integer"},
                       "timestamp": {"type": "integer"}, "offset": _nullable("integer")}},
    "Metadata": {"type": "object", "required": ["cluster_id", "brokers", "topics"], "properties": {
        "cluster_id": {"type": "string"}, "controller_id": _nullable("integer"),
        "brokers": {"type": "array", "items": {"type": "object"}},
        "topics": {"type": "array", "items": {"type": "object", "required": ["name", "partitions"]}}}},
    "Records": {"type": "object", "required": ["topic", "partition", "high_watermark", "next_offset", "records"],
                "properties": {"topic": {"type": "string"}, "partition": {"type": "integer"},
                               "high_watermark": {"type": "integer"}, "log_start_offset": {"type": "integer"},
                               "next_offset": {"type": "integer"},
                               "records": {"type": "array", "items": {"type": "object"}}}},
    "Health": {"type": "object"},
    "OpenAPI": {"type": "object", "required": ["openapi", "paths"]},
    "Cluster": {"type": "object", "required": ["kind", "cluster_id"], "properties": {
        "kind": {"type": "string", "enum": ["KafkaCluster"]}, "cluster_id": {"type": "string"},
        "metadata": {"type": "object"}, "controller": {**_LINK, "nullable": True}, "brokers": _LINK,
        "topics": _LINK}},
    "ClusterList": {"type": "object", "required": ["kind", "data"], "properties": {
        "kind": {"type": "string", "enum": ["KafkaClusterList"]}, "data": {"type": "array", "items": ref("Cluster")}}},
    "KafkaTopic": {"type": "object", "required": ["kind", "cluster_id", "topic_name", "partitions_count"],
                   "properties": {"kind": {"type": "string", "enum": ["KafkaTopic"]},
                                  "cluster_id": {"type": "string"}, "topic_name": {"type": "string"},
                                  "is_internal": {"type": "boolean"}, "replication_factor": {"type": "integer"},
                                  "partitions_count": {"type": "integer"}}},
    "KafkaTopicList": {"type": "object", "required": ["kind", "data"], "properties": {
        "kind": {"type": "string", "enum": ["KafkaTopicList"]}, "data": {"type": "array", "items": ref("KafkaTopic")}}},
    "TopicConfig": {"type": "object", "required": ["kind", "name", "value", "is_default", "source"], "properties": {
        "kind": {"type": "string", "enum": ["KafkaTopicConfig"]}, "name": {"type": "string"},
        "value": _nullable("string"), "is_default": {"type": "boolean"}, "is_read_only": {"type": "boolean"},
        "is_sensitive": {"type": "boolean"}, "source": {"type": "string"}}},
    "TopicConfigList": {"type": "object", "required": ["kind", "data"], "properties": {
        "kind": {"type": "string", "enum": ["KafkaTopicConfigList"]},
        "data": {"type": "array", "items": ref("TopicConfig")}}},
    "CreateTopicRequest": {"type": "object", "required": ["topic_name"], "properties": {
        "topic_name": {"type": "string"}, "partitions_count": {"type": "integer"},
        "replication_factor": {"type": "integer"},
        "configs": {"type": "array", "items": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"}, "value": _nullable("string")}}},
        "replicas_assignments": {"type": "array", "items": {"type": "object", "properties": {
            "partition_id": {"type": "integer"}, "broker_ids": {"type": "array", "items": {"type": "integer"}}}}}}},
    "PendingOperation": {"type": "object", "required": ["kind", "status", "message", "check"], "properties": {
        "kind": {"type": "string"}, "status": {"type": "string", "enum": ["PENDING"]},
        "message": {"type": "string"}, "check": {"type": "string"}}},
    "ElectionAnswer": {"type": "object", "required": ["accepted", "message"], "properties": {
        "accepted": {"type": "boolean"}, "message": _nullable("string")}},
    "UpdateTopicRequest": {"type": "object", "required": ["partitions_count"],
                           "properties": {"partitions_count": {"type": "integer", "minimum": 1}}},
    "UpdateConfigRequest": {"type": "object", "required": ["value"], "properties": {"value": _nullable("string")}},
    "AlterConfigsRequest": {"type": "object", "required": ["data"], "properties": {"data": {
        "type": "array", "items": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"}, "value": _nullable("string"),
            "operation": {"type": "string", "enum": ["SET", "DELETE"]}}}}}},
}

# Error statuses (and their error_codes, for the description) that each family of operations can answer.
_ERRORS = {
    400: "bad query parameter (40001), invalid topic name (40003), body that is not JSON (400), Kafka bad request "
         "(40002: topic already exists, invalid config), invalid partitions (40004) or replication factor (40005), "
         "a broker limit (40010 POLICY_VIOLATION: records per request, partitions, config value size)",
    408: "the request body did not arrive within the broker's body read timeout (40801)",
    404: "unknown topic (v2 40401, v3 40403), unknown partition (40402), unknown cluster (404), unknown route or a "
         "path parameter that is not an integer (404)",
    406: "no acceptable media type (406)",
    409: "not leader (40903) on the binary path",
    413: "request body over the broker's limit (41301), batch over max.message.bytes (41302)",
    415: "unsupported Content-Type (41501); v3 requests take only application/json",
    416: "offset out of range (41601)",
    422: "valid JSON but not a valid request (422), an avro/jsonschema/protobuf produce "
         "without its key or value schema (42201, 42202), with a record that does not fit it (42203) or a schema "
         "that does not parse (42205), a corrupt batch (42201), a record timestamp outside "
         "message.timestamp.difference.max.ms (42211)",
    500: "internal error (50001)",
    503: "retriable: no leader, not enough replicas, ZooKeeper unavailable (503xx)",
    504: "retriable: request timed out (50801)",
}


def errors(*statuses: int, types: tuple[str, ...] = V2_TYPES) -> dict[str, Any]:
    return {str(s): {"description": _ERRORS[s], "content": {t: {"schema": ref("Error")} for t in types}}
            for s in statuses}


def pending() -> dict[str, Any]:
    """202: an admin change written to ZooKeeper that the controller did not confirm within the wait."""
    return {"202": {"description": "Accepted, not confirmed yet: GET the Location to check",
                    "content": {JSON: {"schema": ref("PendingOperation")}}}}


def ok(schema: str, status: int = 200, types: tuple[str, ...] = V2_TYPES) -> dict[str, Any]:
    return {str(status): {"description": "OK", "content": {t: {"schema": ref(schema)} for t in types}}}


def query(name: str, schema: dict[str, Any], description: str = "") -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


def body(schema: str, types: tuple[str, ...] = (JSON,)) -> dict[str, Any]:
    return {"required": True, "content": {t: {"schema": ref(schema)} for t in types}}


_T, _P, _C = "/topics/{topic}", "/topics/{topic}/partitions/{partition}", "/v3/clusters/{cluster_id}"
_ACKS = query("acks", {"type": "string", "enum": ["0", "1", "all", "-1"]}, "default all")
_TIMEOUT = query("timeout_ms", {"type": "integer", "minimum": 0, "maximum": 30000}, "default 30000")
_ADMIN_WAIT = query("timeout_ms", {"type": "integer", "minimum": 0, "maximum": 15000},
                    "how long to wait for the controller (default 15000); 202 when it did not confirm in time")
_PRODUCE_ERRORS = errors(400, 404, 408, 413, 415, 422, 503, 504)
_V3 = (JSON,)
_V3_ERRORS = errors(400, 404, 406, types=_V3)

OPERATIONS: dict[tuple[str, str], dict[str, Any]] = {
    ("GET", "/health"): {"responses": ok("Health", types=(JSON,))},
    ("GET", "/metrics"): {"responses": {"200": {"description": "Prometheus text format",
                                                "content": {"text/plain": {"schema": {"type": "string"}}}}}},
    ("GET", "/openapi.json"): {"responses": ok("OpenAPI", types=(JSON,))},
    ("GET", "/metadata"): {"parameters": [query("topics", {"type": "string"}, "comma-separated topic names")],
                           "responses": {**ok("Metadata"), **errors(406)}},
    ("GET", "/brokers"): {"responses": {**ok("BrokerList"), **errors(406)}},
    ("GET", "/topics"): {"responses": {**ok("TopicNames"), **errors(406)}},
    ("GET", _T): {"responses": {**ok("Topic"), **errors(400, 404, 406)}},
    ("POST", _T): {"parameters": [_ACKS, _TIMEOUT], "requestBody": body("ProduceRequest", (JSON_V2, BINARY_V2, JSON)),
                   "responses": {**ok("ProduceResponse"), **_PRODUCE_ERRORS}},
    ("GET", f"{_T}/partitions"): {"responses": {**ok("PartitionList"), **errors(400, 404, 406)}},
    ("GET", _P): {"responses": {**ok("Partition"), **errors(400, 404, 406)}},
    ("POST", _P): {"parameters": [_ACKS, _TIMEOUT], "requestBody": body("ProduceRequest", (JSON_V2, BINARY_V2, JSON)),
                   "responses": {**ok("ProduceResponse"), **_PRODUCE_ERRORS}},
    ("GET", f"{_P}/offsets"): {
        "parameters": [query("timestamp", {"type": "integer", "minimum": -2}, "ms; -2 earliest, -1 latest")],
        "responses": {**ok("PartitionOffsets"), **errors(400, 404, 406, 503)}},
    ("GET", f"{_P}/records"): {
        "parameters": [query("offset", {"type": "integer", "minimum": 0}),
                       query("max_bytes", {"type": "integer", "minimum": 1, "maximum": 1048576}),
                       query("timeout", {"type": "integer", "minimum": 0, "maximum": 1000}, "long-poll ms")],
        "responses": {**ok("Records", types=(JSON_V2, BINARY_V2, JSON)), **errors(400, 404, 406, 416, 503)}},
    ("POST", "/admin/preferred_leader_election"): {"responses": {
        "202": {"description": "Election requested", "content": {JSON: {"schema": ref("ElectionAnswer")}}},
        "409": {"description": "An election is already in progress",
                "content": {JSON: {"schema": ref("ElectionAnswer")}}},
        **errors(400, 404, 408, 503)}},
    ("GET", "/v3/clusters"): {"responses": {**ok("ClusterList", types=_V3), **errors(406, types=_V3)}},
    ("GET", _C): {"responses": {**ok("Cluster", types=_V3), **_V3_ERRORS}},
    ("GET", f"{_C}/topics"): {"responses": {**ok("KafkaTopicList", types=_V3), **_V3_ERRORS}},
    ("POST", f"{_C}/topics"): {"requestBody": body("CreateTopicRequest"), "parameters": [_ADMIN_WAIT],
                               "responses": {**ok("KafkaTopic", 201, _V3), **pending(),
                                             **errors(400, 404, 406, 408, 415, 503, types=_V3)}},
    ("GET", f"{_C}/topics/{{topic}}"): {"responses": {**ok("KafkaTopic", types=_V3), **_V3_ERRORS}},
    ("DELETE", f"{_C}/topics/{{topic}}"): {"parameters": [_ADMIN_WAIT], "responses": {
        "204": {"description": "Deleted"}, **pending(), **errors(400, 404, 503, types=_V3)}},
    ("PATCH", f"{_C}/topics/{{topic}}"): {"requestBody": body("UpdateTopicRequest"), "parameters": [_ADMIN_WAIT],
                                          "responses": {**ok("KafkaTopic", types=_V3), **pending(),
                                                        **errors(400, 404, 406, 408, 415, 503, types=_V3)}},
    ("GET", f"{_C}/topics/{{topic}}/configs"): {"responses": {**ok("TopicConfigList", types=_V3), **_V3_ERRORS}},
    ("POST", f"{_C}/topics/{{topic}}/configs:alter"): {"requestBody": body("AlterConfigsRequest"), "responses": {
        "204": {"description": "Altered"}, **errors(400, 404, 408, 415, 503, types=_V3)}},
    ("GET", f"{_C}/topics/{{topic}}/configs/{{name}}"): {"responses": {**ok("TopicConfig", types=_V3),
                                                                       **_V3_ERRORS}},
    ("PUT", f"{_C}/topics/{{topic}}/configs/{{name}}"): {"requestBody": body("UpdateConfigRequest"), "responses": {
        "204": {"description": "Set"}, **errors(400, 404, 408, 415, 503, types=_V3)}},
    ("DELETE", f"{_C}/topics/{{topic}}/configs/{{name}}"): {"responses": {
        "204": {"description": "Reset to the default"}, **errors(400, 404, 503, types=_V3)}},
}
