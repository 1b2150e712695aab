"""The pure parts of the v3 resources of issue 24 point 7: links and resource names, group, consumer, lag and
lag-summary rendering, ACL names and filters, reassignment rendering, and the v3 produce's record parsing,
reports and concatenated-JSON stream (kafka-rest's entities/v3/*.java and api/v3/openapi.yaml shapes)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from broker.admin.acls import AclBinding
from broker.admin.reassignment import OngoingReassignment
from broker.api.acls_v3 import acl_binding, acl_data, acl_filter, sort_key
from broker.api.app import create_app
from broker.api.groups_v3 import consumer_data, group_data, lag_rows, lag_summary_data
from broker.api.links_v3 import V3
from broker.api.reassignments_v3 import reassignment_data
from broker.api.records_v3 import ObjectStream, delivery_report, error_report, iso_ms, parse_record, parse_timestamp
from broker.config import BrokerConfig
from broker.coordinator_routing import Routed
from broker.fetch.offsets import ListOffsetsRequest, PartitionOffsets
from broker.produce.service import PartitionResult
from odradek.protocol.errors import (
    GroupIdNotFoundError,
    InvalidPayloadError,
    InvalidRequestError,
    MalformedJsonError,
    NotEnoughReplicasError,
    RecordTooLargeError,
    UnknownPartitionError,
    UnknownTopicError,
)
from odradek.protocol.model import TopicPartition
from tests.unit.fakes.metrics import null_metrics

LINKS = V3("http://b1:8082/v3", "c1")


def test_links_encode_segments_and_build_crns() -> None:
    assert LINKS.url("consumer-groups", "g 1/x") == "http://b1:8082/v3/clusters/c1/consumer-groups/g%201%2Fx"
    assert LINKS.url("acls", query={"principal": "User:a", "host": "*"}) == (
        "http://b1:8082/v3/clusters/c1/acls?principal=User%3Aa&host=%2A")
    assert LINKS.crn(("consumer-group", "g"), ("lag", "t"), ("partition", 0)) == (
        "crn:///kafka=c1/consumer-group=g/lag=t/partition=0")
    assert LINKS.crn(("topic", "t"), tail="reassignment") == "crn:///kafka=c1/topic=t/reassignment"
    assert LINKS.collection("KafkaXList", [], "x") == {
        "kind": "KafkaXList", "metadata": {"self": "http://b1:8082/v3/clusters/c1/x", "next": None}, "data": []}


def _described(kind: str = "server", **more: object) -> dict[str, object]:
    return {"group": "g", "state": "Stable", "generation": 3, "assignor": "range", "coordinator": 2, "kind": kind,
            "members": [{"member_id": "m-2", "client_id": "c2", "host": "h",
                         "assignment": [["t", 1]]},
                        {"member_id": "m-1", "client_id": "c1", "host": "h", "group_instance_id": "i1",
                         "assignment": [["t", 0], ["u", 0]]}], **more}


def test_a_group_renders_as_confluents_consumer_group() -> None:
    g = group_data(LINKS, _described(), 2)
    assert g == {
        "kind": "KafkaConsumerGroup",
        "metadata": {"self": "http://b1:8082/v3/clusters/c1/consumer-groups/g",
                     "resource_name": "crn:///kafka=c1/consumer-group=g"},
        "cluster_id": "c1", "consumer_group_id": "g", "is_simple": False, "partition_assignor": "range",
        "state": "STABLE", "coordinator": {"related": "http://b1:8082/v3/clusters/c1/brokers/2"},
        "consumers": {"related": "http://b1:8082/v3/clusters/c1/consumer-groups/g/consumers"},
        "lag_summary": {"related": "http://b1:8082/v3/clusters/c1/consumer-groups/g/lag-summary"}}
    # a group that only ever stored offsets is simple; Kafka-protocol groups say their protocol type
    empty = group_data(LINKS, {"group": "g", "state": "Empty", "generation": 0, "assignor": None, "members": []}, 1)
    assert (empty["is_simple"], empty["state"], empty["partition_assignor"]) == (True, "EMPTY", "")
    assert group_data(LINKS, _described("classic", protocol_type=""), 1)["is_simple"] is True
    assert group_data(LINKS, _described("classic", protocol_type="consumer"), 1)["is_simple"] is False
    assert group_data(LINKS, _described(state="Odd"), 1)["state"] == "UNKNOWN"


def test_a_consumer_names_its_instance_and_assignments() -> None:
    c = consumer_data(LINKS, "g", _described()["members"][1])  # type: ignore[index]
    assert c["consumer_id"] == "m-1" and c["instance_id"] == "i1" and c["client_id"] == "c1"
    assert c["assignments"] == {"related": "http://b1:8082/v3/clusters/c1/consumer-groups/g/consumers/m-1/assignments"}
    assert c["metadata"]["resource_name"] == "crn:///kafka=c1/consumer-group=g/consumer=m-1"


def test_lags_are_per_committed_partition_sorted_by_lag_and_summed() -> None:
    members = _described()["members"]
    committed = {("t", 0): 5, ("t", 1): 2, ("u", 0): 9, ("gone", 0): 1, ("v", 0): 4}
    ends = {("t", 0): 8, ("t", 1): 9, ("u", 0): 9, ("v", 0): 12}  # ("gone", 0): its topic was deleted
    rows = lag_rows(committed, ends, members)  # type: ignore[arg-type]
    assert [(r["topic_name"], r["partition_id"], r["lag"], r["consumer_id"], r["client_id"]) for r in rows] == [
        ("v", 0, 8, "", ""), ("t", 1, 7, "m-2", "c2"), ("t", 0, 3, "m-1", "c1"), ("u", 0, 0, "m-1", "c1")]
    assert lag_rows({("t", 0): 10}, {("t", 0): 8}, [])[0]["lag"] == 0  # never negative
    summary = lag_summary_data(LINKS, "g", rows)
    assert (summary["max_lag"], summary["total_lag"], summary["max_lag_topic_name"],
            summary["max_lag_partition_id"], summary["max_lag_consumer_id"]) == (8, 18, "v", 0, "")
    assert summary["metadata"] == {"self": "http://b1:8082/v3/clusters/c1/consumer-groups/g/lag-summary",
                                   "resource_name": "crn:///kafka=c1/consumer-group=g/lag-summary"}
    assert summary["max_lag_partition"] == {"related": "http://b1:8082/v3/clusters/c1/topics/v/partitions/0"}
    tie = lag_rows({("a", 1): 0, ("a", 0): 0}, {("a", 1): 3, ("a", 0): 3}, [])
    assert lag_summary_data(LINKS, "g", tie)["max_lag_partition_id"] == 0  # the first in Confluent's order


ALICE = {"resource_type": "topic", "resource_name": "orders", "pattern_type": "literal", "principal": "User:alice",
         "host": "*", "operation": "describe_configs", "permission": "allow"}


def test_acl_names_map_both_ways_and_self_is_the_exact_search() -> None:
    b = acl_binding(ALICE)
    assert b == AclBinding("Topic", "orders", "LITERAL", "User:alice", "*", "DescribeConfigs", "Allow")
    data = acl_data(LINKS, b)
    assert data["metadata"]["self"] == (
        "http://b1:8082/v3/clusters/c1/acls?resource_type=TOPIC&resource_name=orders&pattern_type=LITERAL"
        "&principal=User%3Aalice&host=%2A&operation=DESCRIBE_CONFIGS&permission=ALLOW")
    assert (data["kind"], data["resource_type"], data["operation"], data["permission"]) == (
        "KafkaAcl", "TOPIC", "DESCRIBE_CONFIGS", "ALLOW")
    for field, bad in (("resource_type", "ANY"), ("resource_type", "UNKNOWN"), ("pattern_type", "MATCH"),
                       ("pattern_type", "ANY"), ("operation", "ANY"), ("permission", "ANY"),
                       ("resource_type", "DELEGATION_TOKEN")):
        with pytest.raises(InvalidRequestError):
            acl_binding({**ALICE, field: bad})
    with pytest.raises(InvalidRequestError):
        acl_binding({k: v for k, v in ALICE.items() if k != "host"})


def test_acl_filters_default_to_any_and_delete_requires_its_fields() -> None:
    f = acl_filter({})
    assert (f.resource_type, f.name, f.pattern, f.principal, f.operation, f.permission) == (
        None, None, "ANY", None, None, None)
    f = acl_filter({"resource_type": "GROUP", "resource_name": "g", "pattern_type": "match", "operation": "READ"})
    assert (f.resource_type, f.name, f.pattern, f.operation) == ("Group", "g", "MATCH", "Read")
    with pytest.raises(InvalidRequestError):
        acl_filter({"resource_type": "TOPIC"}, required=("resource_type", "pattern_type"))
    with pytest.raises(InvalidRequestError):
        acl_filter({"operation": "UNKNOWN"})


def test_acls_sort_in_kafkas_enum_order() -> None:
    acls = [AclBinding("Group", "a", "LITERAL", "User:x", "*", "Read", "Allow"),
            AclBinding("Topic", "b", "PREFIXED", "User:x", "*", "Read", "Allow"),
            AclBinding("Topic", "b", "LITERAL", "User:x", "*", "Write", "Allow"),
            AclBinding("Topic", "b", "LITERAL", "User:x", "*", "All", "Deny")]
    assert [(a.resource_type, a.pattern, a.operation) for a in sorted(acls, key=sort_key)] == [
        ("Topic", "LITERAL", "All"), ("Topic", "LITERAL", "Write"), ("Topic", "PREFIXED", "Read"),
        ("Group", "LITERAL", "Read")]


def test_a_reassignment_renders_as_confluents() -> None:
    move = OngoingReassignment(TopicPartition("t", 3), [1, 2], [2], [3])
    assert reassignment_data(LINKS, move) == {
        "kind": "KafkaReassignment",
        "metadata": {"self": "http://b1:8082/v3/clusters/c1/topics/t/partitions/3/reassignment",
                     "resource_name": "crn:///kafka=c1/topic=t/partition=3/reassignment"},
        "cluster_id": "c1", "topic_name": "t", "partition_id": 3, "adding_replicas": [2], "removing_replicas": [3],
        "replicas": {"related": "http://b1:8082/v3/clusters/c1/topics/t/partitions/3/replicas"}}


def test_a_produce_request_object_becomes_a_record_and_a_report() -> None:
    r = parse_record({"partition_id": 2, "timestamp": "2021-02-05T19:14:42Z",
                      "headers": [{"name": "h", "value": "aGk="}, {"name": "n", "value": None}],
                      "key": {"type": "binary", "data": base64.b64encode(b"\x00\x01").decode()},
                      "value": {"type": "JSON", "data": {"a": [1, "é"]}}}, now_ms=7)
    assert r.row == (b"\x00\x01", '{"a":[1,"é"]}'.encode(), 1612552482000, [("h", b"hi"), ("n", None)])
    assert (r.partition, r.key, r.value) == (2, {"type": "BINARY", "size": 2}, {"type": "JSON", "size": 14})
    assert delivery_report("c1", "t", 2, 41, r) == {
        "error_code": 200, "cluster_id": "c1", "topic_name": "t", "partition_id": 2, "offset": 41,
        "timestamp": "2021-02-05T19:14:42Z", "key": {"type": "BINARY", "size": 2},
        "value": {"type": "JSON", "size": 14}}
    bare = parse_record({}, now_ms=1612552482123)
    assert bare.row == (None, None, 1612552482123, []) and bare.key is None and bare.value is None
    assert "key" not in delivery_report("c1", "t", 0, 0, bare)
    nulls = parse_record({"key": {"type": "STRING", "data": None}}, now_ms=1)
    assert nulls.key == {"type": "STRING", "size": -1}


@pytest.mark.parametrize("obj, error", [
    ([1], InvalidRequestError), ({"records": []}, InvalidRequestError), ({"partition_id": "1"}, InvalidRequestError),
    ({"partition_id": True}, InvalidRequestError), ({"value": "raw"}, InvalidRequestError),
    ({"value": {"type": "BINARY", "data": "%%%"}}, InvalidRequestError),
    ({"value": {"type": "STRING", "data": 5}}, InvalidRequestError),
    ({"value": {"type": "XML", "data": "<a/>"}}, InvalidRequestError),
    ({"value": {"type": "BINARY", "data": "", "extra": 1}}, InvalidRequestError),
    ({"value": {"data": 1}}, InvalidPayloadError), ({"value": {"type": "AVRO", "data": 1}}, InvalidPayloadError),
    ({"value": {"type": "JSON", "schema_id": 3, "data": 1}}, InvalidPayloadError),
    ({"timestamp": 1612552482000}, InvalidRequestError), ({"timestamp": "yesterday"}, InvalidRequestError),
    ({"headers": [{"name": "h", "value": "not base64"}]}, InvalidRequestError),
])
def test_what_is_not_a_record_is_refused_for_that_record(obj: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        parse_record(obj, now_ms=1)


def test_error_reports_use_confluents_codes() -> None:
    assert error_report(InvalidRequestError("x")) == {"error_code": 400, "message": "x", "error": "INVALID_REQUEST"}
    assert error_report(MalformedJsonError("x"))["error_code"] == 400
    assert error_report(InvalidPayloadError("x"))["error_code"] == 42206
    assert error_report(UnknownPartitionError("x"))["error_code"] == 40403
    assert error_report(NotEnoughReplicasError("x"))["error_code"] == 50003  # retriable Kafka error
    assert error_report(RecordTooLargeError("x"))["error_code"] == 41302


def test_timestamps_read_and_print_as_instants() -> None:
    assert parse_timestamp("2021-02-05T21:14:42.5+02:00") == 1612552482500
    assert iso_ms(1612552482500) == "2021-02-05T19:14:42.500Z"
    assert iso_ms(0) == "1970-01-01T00:00:00Z"
    with pytest.raises(InvalidRequestError):
        parse_timestamp("1969-12-31T23:59:59Z")


def test_the_object_stream_splits_concatenated_json_fed_in_pieces() -> None:
    text = '{"a": "x}y"}\n{"b": [1, 2]}{"c": "é"}  7 '.encode()
    s = ObjectStream(1 << 20)
    got: list[object] = []
    for i in range(len(text)):  # one byte at a time: objects, strings and a UTF-8 character cut everywhere
        got += s.feed(text[i:i + 1])
    got += s.feed(b"", final=True)
    assert got == [{"a": "x}y"}, {"b": [1, 2]}, {"c": "é"}, 7]
    broken = ObjectStream(1 << 20)
    out = broken.feed(b'{"a": 1} {"b": ') + broken.feed(b"", final=True)
    assert out[0] == {"a": 1} and isinstance(out[1], MalformedJsonError) and broken.failed
    assert broken.feed(b'{"c": 1}') == []  # nothing after the break
    for bad in (b'{"a": NaN}', b"[" * 100_000 + b"]" * 100_000, b"\xff{}"):
        first = ObjectStream(1 << 30).feed(bad, final=True)
        assert len(first) == 1 and isinstance(first[0], MalformedJsonError), bad[:20]
    big = ObjectStream(10)
    assert type(big.feed(b'{"a": "' + b"x" * 20)[0]).__name__ == "RequestTooLargeError"


# ------------------------------------------------------------------------ the handlers, over service doubles


class _FakeProduce:
    """Two partitions of topic ``t``: each produce appends the rows of a partition after its log end."""

    def __init__(self) -> None:
        self.logs: dict[int, list[Any]] = {0: [], 1: []}

    async def await_topic(self, topic: str, deadline: float) -> None:
        if topic != "t":
            raise UnknownTopicError(f"topic '{topic}' does not exist")

    def check_timestamps(self, topic: str, rows: list[Any]) -> None:
        return None

    def choose_partitions(self, topic: str, rows: list[Any], named: list[int | None], fixed: int | None,
                          seed: str | None = None) -> list[int]:
        for p in named:
            if p is not None and p >= 2:
                raise UnknownPartitionError(f"partition {p} of topic '{topic}' does not exist")
        return [0 if p is None else p for p in named]

    async def produce(self, topic: str, rows: list[Any], partitions: list[int], acks: int, timeout_ms: int,
                      deadline: float | None = None) -> dict[int, PartitionResult]:
        results = {}
        for p in dict.fromkeys(partitions):
            results[p] = PartitionResult(p, len(self.logs[p]), 1)
            self.logs[p] += [r for r, q in zip(rows, partitions, strict=True) if q == p]
        return results


def _app(**services: Any) -> web.Application:
    broker = SimpleNamespace(metrics=null_metrics(), cluster_id="c1",
                             info=lambda: SimpleNamespace(url="http://b1:8082"), **services)
    config = BrokerConfig(1, "zk:2181", "127.0.0.1", 8082, Path("."))
    return create_app(broker, config=config, security=None, quotas=None)  # type: ignore[arg-type]


def test_the_v3_produce_answers_a_chunked_stream_with_one_report_per_record() -> None:
    produce = _FakeProduce()
    objects = [{"partition_id": i % 2, "value": {"type": "STRING", "data": f"v{i}"}} for i in range(5)]
    objects.insert(2, {"partition_id": 7, "value": {"type": "STRING", "data": "nowhere"}})
    body = "".join(json.dumps(o) for o in objects).encode()

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(body), 11):
            yield body[i:i + 11]

    async def call() -> tuple[int, dict[str, str], bytes, int, bytes]:
        async with TestClient(TestServer(_app(produce=produce))) as client:
            resp = await client.post("/v3/clusters/c1/topics/t/records", data=chunks(),
                                     headers={"Content-Type": "application/json"})
            missing = await client.post("/v3/clusters/c1/topics/nope/records", data=b"{}",
                                        headers={"Content-Type": "application/json"})
            return resp.status, dict(resp.headers), await resp.read(), missing.status, await missing.read()

    status, headers, raw, missing_status, missing_body = asyncio.run(call())
    assert status == 200 and headers["Transfer-Encoding"] == "chunked"
    assert headers["Content-Type"].startswith("application/json")
    reports = [json.loads(line) for line in raw.decode().splitlines()]
    assert [(r["error_code"], r.get("partition_id"), r.get("offset")) for r in reports] == [
        (200, 0, 0), (200, 1, 0), (40403, None, None), (200, 0, 1), (200, 1, 1), (200, 0, 2)]
    assert all(r["cluster_id"] == "c1" and r["topic_name"] == "t" for r in reports if r["error_code"] == 200)
    assert [row[1] for row in produce.logs[0]] == [b"v0", b"v2", b"v4"]
    assert (missing_status, orjson.loads(missing_body)["error_code"]) == (404, 40403)


class _FakeRouter:
    def __init__(self, described: dict[str, Any], committed: dict[tuple[str, int], tuple[int, str, int]]) -> None:
        self.described, self.committed = described, committed

    async def describe(self, group: str) -> Routed[Any]:
        if group != "g":
            raise GroupIdNotFoundError(f"group {group!r} does not exist")
        return Routed(self.described, 2)

    async def committed_offsets(self, group: str) -> dict[tuple[str, int], tuple[int, str, int]]:
        return self.committed


class _FakeOffsets:
    async def list_offsets(self, request: ListOffsetsRequest) -> PartitionOffsets:
        assert request.isolation_level == "read_committed"  # Confluent's IsolationLevel.READ_COMMITTED
        if request.topic == "gone":
            raise UnknownTopicError("deleted")
        return PartitionOffsets(0, {("t", 0): 8, ("t", 1): 9, ("u", 0): 9}[(request.topic, request.partition)])


def test_the_lag_routes_render_the_coordinators_view_and_the_leaders_offsets() -> None:
    committed = {("t", 0): (5, "", 0), ("t", 1): (2, "", 0), ("u", 0): (9, "", 0), ("gone", 0): (1, "", 0)}
    app = _app(group_router=_FakeRouter(_described(), committed), offsets=_FakeOffsets())

    async def call() -> list[tuple[int, Any]]:
        out = []
        async with TestClient(TestServer(app)) as client:
            for path in ("g/lags", "g/lags/t/partitions/1", "g/lag-summary", "g/consumers/m-1", "nobody/lags",
                         "g/lags/t/partitions/9"):
                resp = await client.get(f"/v3/clusters/c1/consumer-groups/{path}")
                out.append((resp.status, orjson.loads(await resp.read())))
        return out

    lags, one, summary, consumer, unknown, no_lag = asyncio.run(call())
    assert lags[0] == 200 and [(r["topic_name"], r["partition_id"], r["lag"]) for r in lags[1]["data"]] == [
        ("t", 1, 7), ("t", 0, 3), ("u", 0, 0)]
    assert one == (200, lags[1]["data"][0])
    assert summary[0] == 200 and (summary[1]["max_lag"], summary[1]["total_lag"]) == (7, 10)
    assert consumer[0] == 200 and consumer[1]["consumer_id"] == "m-1"
    assert unknown[0] == 404 and unknown[1]["error_code"] == 404  # v3: Confluent's NotFoundException
    assert no_lag[0] == 404
