"""The OpenAPI description of the v3 resources of issue 24 point 7 (broker/api/groups_v3.py, records_v3.py,
acls_v3.py, reassignments_v3.py): summaries, schemas and operations, merged into the document by
broker/api/openapi.py. Shapes follow kafka-rest's api/v3/openapi.yaml (ConsumerGroupData, ConsumerData,
ConsumerAssignmentData, ConsumerLagData, ConsumerGroupLagSummaryData, ProduceRequest, ProduceResponse, AclData,
ReassignmentData); statuses are those the handlers answer (docs/http-api.md).
"""

from __future__ import annotations

from typing import Any

from broker.api.openapi_schemas import JSON, body, errors, ok, query, ref

_C = "/v3/clusters/{cluster_id}"
_G = f"{_C}/consumer-groups/{{group}}"
_M = f"{_G}/consumers/{{consumer}}"
_V3 = (JSON,)


def _s(kind: str = "string", **more: Any) -> dict[str, Any]:
    return {"type": kind, **more}


_LINK = {"type": "object", "required": ["related"], "properties": {"related": _s()}}
_META = {"type": "object", "required": ["self"], "properties": {"self": _s(), "resource_name": _s(nullable=True)}}
_LIST_META = {"type": "object", "required": ["self"], "properties": {"self": _s(), "next": _s(nullable=True)}}


def _resource(kind: str, required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": ["kind", "metadata", *required], "properties": {
        "kind": _s(enum=[kind]), "metadata": _META, **properties}}


def _collection(kind: str, item: str) -> dict[str, Any]:
    return {"type": "object", "required": ["kind", "metadata", "data"], "properties": {
        "kind": _s(enum=[kind]), "metadata": _LIST_META, "data": {"type": "array", "items": ref(item)}}}


_ACL_FIELDS = {"resource_type": _s(), "resource_name": _s(), "pattern_type": _s(), "principal": _s(),
               "host": _s(), "operation": _s(), "permission": _s()}
_DATA = {"type": "object", "nullable": True, "properties": {
    "type": _s(enum=["BINARY", "JSON", "STRING", "AVRO", "JSONSCHEMA", "PROTOBUF"]), "data": {"nullable": True},
    "subject": _s(nullable=True), "subject_name_strategy": _s(nullable=True),
    "schema_id": _s("integer", nullable=True), "schema_version": _s("integer", nullable=True),
    "schema": _s(nullable=True)}}
_REPORT_DATA = {"type": "object", "required": ["size"], "properties": {"type": _s(), "size": _s("integer")}}

V3_SCHEMAS: dict[str, Any] = {
    "KafkaConsumerGroup": _resource("KafkaConsumerGroup", [
        "cluster_id", "consumer_group_id", "is_simple", "partition_assignor", "state", "coordinator", "consumers",
        "lag_summary"], {
        "cluster_id": _s(), "consumer_group_id": _s(), "is_simple": _s("boolean"), "partition_assignor": _s(),
        "state": _s(enum=["UNKNOWN", "PREPARING_REBALANCE", "COMPLETING_REBALANCE", "STABLE", "DEAD", "EMPTY"]),
        "coordinator": _LINK, "consumers": _LINK, "lag_summary": _LINK}),
    "KafkaConsumerGroupList": _collection("KafkaConsumerGroupList", "KafkaConsumerGroup"),
    "KafkaConsumer": _resource("KafkaConsumer", [
        "cluster_id", "consumer_group_id", "consumer_id", "client_id", "assignments"], {
        "cluster_id": _s(), "consumer_group_id": _s(), "consumer_id": _s(), "instance_id": _s(nullable=True),
        "client_id": _s(), "assignments": _LINK}),
    "KafkaConsumerList": _collection("KafkaConsumerList", "KafkaConsumer"),
    "KafkaConsumerAssignment": _resource("KafkaConsumerAssignment", [
        "cluster_id", "consumer_group_id", "consumer_id", "topic_name", "partition_id", "partition", "lag"], {
        "cluster_id": _s(), "consumer_group_id": _s(), "consumer_id": _s(), "topic_name": _s(),
        "partition_id": _s("integer"), "partition": _LINK, "lag": _LINK}),
    "KafkaConsumerAssignmentList": _collection("KafkaConsumerAssignmentList", "KafkaConsumerAssignment"),
    "KafkaConsumerLag": _resource("KafkaConsumerLag", [
        "cluster_id", "consumer_group_id", "topic_name", "partition_id", "current_offset", "log_end_offset", "lag",
        "consumer_id", "client_id"], {
        "cluster_id": _s(), "consumer_group_id": _s(), "topic_name": _s(), "partition_id": _s("integer"),
        "current_offset": _s("integer"), "log_end_offset": _s("integer"), "lag": _s("integer", minimum=0),
        "consumer_id": _s(), "instance_id": _s(nullable=True), "client_id": _s()}),
    "KafkaConsumerLagList": _collection("KafkaConsumerLagList", "KafkaConsumerLag"),
    "KafkaConsumerGroupLagSummary": _resource("KafkaConsumerGroupLagSummary", [
        "cluster_id", "consumer_group_id", "max_lag_consumer_id", "max_lag_client_id", "max_lag_topic_name",
        "max_lag_partition_id", "max_lag", "total_lag", "max_lag_consumer", "max_lag_partition"], {
        "cluster_id": _s(), "consumer_group_id": _s(), "max_lag_consumer_id": _s(),
        "max_lag_instance_id": _s(nullable=True), "max_lag_client_id": _s(), "max_lag_topic_name": _s(),
        "max_lag_partition_id": _s("integer"), "max_lag": _s("integer", minimum=0),
        "total_lag": _s("integer", minimum=0), "max_lag_consumer": _LINK, "max_lag_partition": _LINK}),
    "V3ProduceRequest": {
        "type": "object", "description": "One record; a body is one or more of these, concatenated", "properties": {
            "partition_id": _s("integer", minimum=0, maximum=2147483647, nullable=True),
            "headers": {"type": "array", "items": {"type": "object", "required": ["name"], "properties": {
                "name": _s(), "value": _s(format="byte", nullable=True)}}},
            "key": _DATA, "value": _DATA, "timestamp": _s(format="date-time", nullable=True)}},
    "V3ProduceReport": {
        "type": "object", "required": ["error_code"],
        "description": "A delivery report (error_code 200: cluster_id, topic_name, partition_id, offset, "
                       "timestamp, key, value) or a record's error (error_code, message, error); one per record",
        "properties": {"error_code": _s("integer"), "cluster_id": _s(), "topic_name": _s(),
                       "partition_id": _s("integer"), "offset": _s("integer"), "timestamp": _s(nullable=True),
                       "key": _REPORT_DATA, "value": _REPORT_DATA, "message": _s(nullable=True), "error": _s()}},
    "KafkaAcl": _resource("KafkaAcl", ["cluster_id", *_ACL_FIELDS], {"cluster_id": _s(), **_ACL_FIELDS}),
    "KafkaAclList": _collection("KafkaAclList", "KafkaAcl"),
    "DeletedAcls": {"type": "object", "required": ["data"], "properties": {
        "data": {"type": "array", "items": ref("KafkaAcl")}}},
    "CreateAclRequest": {"type": "object", "required": list(_ACL_FIELDS), "properties": _ACL_FIELDS},
    "CreateAclBatchRequest": {"type": "object", "required": ["data"], "properties": {
        "data": {"type": "array", "items": ref("CreateAclRequest")}}},
    "KafkaReassignment": _resource("KafkaReassignment", [
        "cluster_id", "topic_name", "partition_id", "adding_replicas", "removing_replicas", "replicas"], {
        "cluster_id": _s(), "topic_name": _s(), "partition_id": _s("integer"),
        "adding_replicas": {"type": "array", "items": _s("integer")},
        "removing_replicas": {"type": "array", "items": _s("integer")}, "replicas": _LINK}),
    "KafkaReassignmentList": _collection("KafkaReassignmentList", "KafkaReassignment"),
}

_READ = errors(400, 404, 406, 503, 504, types=_V3)
_ACL_QUERY = [query(name, _s(), description) for name, description in (
    ("resource_type", "TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID or ANY"), ("resource_name", "empty: any"),
    ("pattern_type", "LITERAL, PREFIXED, MATCH or ANY"), ("principal", "TYPE:NAME; empty: any"),
    ("host", "empty: any"), ("operation", "READ, WRITE, ..., ALL or ANY"), ("permission", "ALLOW, DENY or ANY"))]
_CREATED = {"201": {"description": "Created (Location: the ACL's search URL)"}}

V3_OPERATIONS: dict[tuple[str, str], dict[str, Any]] = {
    ("GET", f"{_C}/consumer-groups"): {"responses": {**ok("KafkaConsumerGroupList", types=_V3), **_READ}},
    ("GET", _G): {"responses": {**ok("KafkaConsumerGroup", types=_V3), **_READ}},
    ("GET", f"{_G}/consumers"): {"responses": {**ok("KafkaConsumerList", types=_V3), **_READ}},
    ("GET", _M): {"responses": {**ok("KafkaConsumer", types=_V3), **_READ}},
    ("GET", f"{_M}/assignments"): {"responses": {**ok("KafkaConsumerAssignmentList", types=_V3), **_READ}},
    ("GET", f"{_M}/assignments/{{topic}}/partitions/{{partition}}"): {
        "responses": {**ok("KafkaConsumerAssignment", types=_V3), **_READ}},
    ("GET", f"{_G}/lags"): {"responses": {**ok("KafkaConsumerLagList", types=_V3), **_READ}},
    ("GET", f"{_G}/lags/{{topic}}/partitions/{{partition}}"): {
        "responses": {**ok("KafkaConsumerLag", types=_V3), **_READ}},
    ("GET", f"{_G}/lag-summary"): {"responses": {**ok("KafkaConsumerGroupLagSummary", types=_V3), **_READ}},
    ("POST", f"{_C}/topics/{{topic}}/records"): {
        "requestBody": body("V3ProduceRequest"),
        "responses": {"200": {"description": "One report per record, in order (chunked; one JSON object per line)",
                              "content": {JSON: {"schema": ref("V3ProduceReport")}}},
                      **errors(400, 404, 406, 408, 413, 415, 503, 504, types=_V3)}},
    ("GET", f"{_C}/acls"): {"parameters": _ACL_QUERY,
                            "responses": {**ok("KafkaAclList", types=_V3), **errors(400, 404, 406, 503, types=_V3)}},
    ("POST", f"{_C}/acls"): {"requestBody": body("CreateAclRequest"),
                             "responses": {**_CREATED, **errors(400, 404, 406, 408, 415, 503, types=_V3)}},
    ("POST", f"{_C}/acls:batch"): {"requestBody": body("CreateAclBatchRequest"),
                                   "responses": {**_CREATED, **errors(400, 404, 406, 408, 415, 503, types=_V3)}},
    ("DELETE", f"{_C}/acls"): {"parameters": _ACL_QUERY, "responses": {
        **ok("DeletedAcls", types=_V3), **errors(400, 404, 406, 503, types=_V3)}},
    ("GET", f"{_C}/topics/-/partitions/-/reassignment"): {
        "responses": {**ok("KafkaReassignmentList", types=_V3), **_READ}},
    ("GET", f"{_C}/topics/{{topic}}/partitions/-/reassignment"): {
        "responses": {**ok("KafkaReassignmentList", types=_V3), **_READ}},
    ("GET", f"{_C}/topics/{{topic}}/partitions/{{partition}}/reassignment"): {
        "responses": {**ok("KafkaReassignment", types=_V3), **_READ}},
}

V3_SUMMARIES: dict[tuple[str, str], str] = {
    ("GET", f"{_C}/consumer-groups"): "Consumer groups, as their coordinators describe them (v3)",
    ("GET", _G): "A consumer group: state, assignor, coordinator (v3)",
    ("GET", f"{_G}/consumers"): "The group's consumers (members) (v3)",
    ("GET", _M): "One consumer of the group (v3)",
    ("GET", f"{_M}/assignments"): "The partitions assigned to a consumer (v3)",
    ("GET", f"{_M}/assignments/{{topic}}/partitions/{{partition}}"): "One assigned partition (v3)",
    ("GET", f"{_G}/lags"): "Lag per committed partition: committed offset, log end offset, lag (v3)",
    ("GET", f"{_G}/lags/{{topic}}/partitions/{{partition}}"): "One partition's lag (v3)",
    ("GET", f"{_G}/lag-summary"): "The group's largest and total lag (v3)",
    ("POST", f"{_C}/topics/{{topic}}/records"): (
        "Produce records (v3): concatenated request objects, one delivery report each, streamed in order"),
    ("GET", f"{_C}/acls"): "Search ACLs (v3); needs an authorizer",
    ("POST", f"{_C}/acls"): "Create an ACL (v3)",
    ("POST", f"{_C}/acls:batch"): "Create ACLs (v3)",
    ("DELETE", f"{_C}/acls"): "Delete the ACLs a filter matches (v3)",
    ("GET", f"{_C}/topics/-/partitions/-/reassignment"): "Running partition reassignments (v3)",
    ("GET", f"{_C}/topics/{{topic}}/partitions/-/reassignment"): "A topic's running reassignments (v3)",
    ("GET", f"{_C}/topics/{{topic}}/partitions/{{partition}}/reassignment"): "A partition's running reassignment",
}
