"""Issue 24 point 7: Confluent's v3 consumer groups, produce, ACLs and reassignments, against a live cluster.

Each test names, in its docstring, the kafka-rest sources it was written from (confluentinc/kafka-rest,
``kafka-rest/src/main/java/io/confluent/kafkarest/...`` and ``api/v3/openapi.yaml``), and asserts what a v3 client
reads: the ``kind``, ``metadata.self`` and ``related`` links, the fields, the statuses and error codes, and the
values (lags against the committed and end offsets, produced records read back at the answered offsets).
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.cluster import LocalProcessBackend, shared_cluster
from tests.harness.http import create_topic, metadata, request
from tests.harness.wait import SLOW_MACHINE_S, wait_until

pytestmark = pytest.mark.cluster

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
ROOT = Path(__file__).resolve().parents[2]


def _cluster(zk_ensemble: Any, tmp_path_factory: pytest.TempPathFactory, name: str, brokers: int,
             args: list[str]) -> LocalProcessBackend:
    return shared_cluster(zk_ensemble, tmp_path_factory.mktemp(name), name, brokers, args)


@pytest.fixture(scope="module")
def v3(zk_ensemble: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessBackend]:
    """Two open brokers (no authorizer), so partitions can be moved from one to the other."""
    backend = _cluster(zk_ensemble, tmp_path_factory, "v3-extras", 2, [])
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def guarded(zk_ensemble: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessBackend]:
    """One broker with the ACL authorizer on a plaintext listener, where the anonymous caller is a super user."""
    backend = _cluster(zk_ensemble, tmp_path_factory, "v3-acls", 1,
                       ["--authorizer", "acl", "--super-users", "User:ANONYMOUS"])
    yield backend
    backend.close()


def _cid(url: str) -> str:
    status, body, _ = request("GET", f"{url}/v3/clusters")
    assert status == 200, body
    return str(body["data"][0]["cluster_id"])


def _get(url: str, status: int = 200) -> Any:
    got, body, headers = request("GET", url)
    assert got == status, body
    if status == 200:
        assert headers["Content-Type"].startswith("application/json")
    return body


def _error(resp: tuple[int, Any, dict[str, str]], status: int, code: int) -> dict[str, Any]:
    got, body, headers = resp
    assert (got, body["error_code"]) == (status, code), body
    assert headers["Content-Type"].startswith("application/json")  # v3 errors are application/json
    return dict(body)


def _produce_v2(url: str, topic: str, partition: int, values: list[bytes]) -> list[int]:
    records = [{"value": base64.b64encode(v).decode()} for v in values]
    status, body, _ = request("POST", f"{url}/topics/{topic}/partitions/{partition}", {"records": records},
                              content_type=BINARY_V2)
    assert status == 200, body
    return [o["offset"] for o in body["offsets"]]


def _read(url: str, topic: str, partition: int, offset: int) -> list[dict[str, Any]]:
    status, body, _ = request("GET", f"{url}/topics/{topic}/partitions/{partition}/records?offset={offset}",
                              accept=BINARY_V2)
    assert status == 200, body
    return list(body["records"])


def _join(url: str, group: str, topic: str, client_id: str) -> dict[str, Any]:
    status, body, _ = request("POST", f"{url}/groups/{group}/members", {
        "client_id": client_id, "topics": [topic], "session_timeout_ms": 120_000, "rebalance_timeout_ms": 30_000},
        timeout=SLOW_MACHINE_S)
    assert status == 200, body
    return dict(body)


def test_consumer_groups_consumers_and_assignments(v3: LocalProcessBackend) -> None:
    """resources/v3/ConsumerGroupsResource.java (list and get: KafkaConsumerGroup with coordinator, consumers
    and lag_summary links, metadata.self .../consumer-groups/{g} and resource_name crn:///kafka=c/consumer-group=g),
    ConsumersResource.java (KafkaConsumer: consumer_id, instance_id, client_id, assignments link) and
    ConsumerAssignmentsResource.java (KafkaConsumerAssignment: partition and lag links); entities/v3/
    ConsumerGroupData.java; an unknown group, consumer or assignment is Jersey's NotFoundException (404/404)."""
    url = v3.broker_url(1)
    cid = _cid(url)
    create_topic(url, "cg-topic", 2, 1, seen_by=[v3.broker_url(b) for b in v3.broker_ids()])
    joined = _join(url, "cg-one", "cg-topic", "client-a")
    member = joined["member_id"]
    try:
        base = f"{url}/v3/clusters/{cid}"
        listed = _get(f"{base}/consumer-groups")
        assert listed["kind"] == "KafkaConsumerGroupList"
        assert listed["metadata"]["self"].endswith(f"/v3/clusters/{cid}/consumer-groups")
        ours = [g for g in listed["data"] if g["consumer_group_id"] == "cg-one"]
        assert len(ours) == 1, listed

        group = _get(f"{base}/consumer-groups/cg-one")
        assert ours[0] == group
        assert group["kind"] == "KafkaConsumerGroup"
        assert group["metadata"]["self"] == f"{url}/v3/clusters/{cid}/consumer-groups/cg-one"
        assert group["metadata"]["resource_name"] == f"crn:///kafka={cid}/consumer-group=cg-one"
        assert (group["cluster_id"], group["consumer_group_id"], group["is_simple"], group["state"],
                group["partition_assignor"]) == (cid, "cg-one", False, "STABLE", "range")
        coordinator = int(group["coordinator"]["related"].rsplit("/", 1)[1])
        assert coordinator in v3.broker_ids()
        assert group["coordinator"]["related"] == f"{url}/v3/clusters/{cid}/brokers/{coordinator}"
        assert group["consumers"]["related"] == f"{url}/v3/clusters/{cid}/consumer-groups/cg-one/consumers"
        assert group["lag_summary"]["related"] == f"{url}/v3/clusters/{cid}/consumer-groups/cg-one/lag-summary"
        # any broker answers, whoever coordinates
        assert _get(f"{v3.broker_url(2)}/v3/clusters/{cid}/consumer-groups/cg-one")["state"] == "STABLE"

        consumers = _get(f"{base}/consumer-groups/cg-one/consumers")
        assert consumers["kind"] == "KafkaConsumerList"
        assert consumers["metadata"]["self"] == f"{url}/v3/clusters/{cid}/consumer-groups/cg-one/consumers"
        [consumer] = consumers["data"]
        m_url = f"{url}/v3/clusters/{cid}/consumer-groups/cg-one/consumers/{member}"
        assert consumer == {
            "kind": "KafkaConsumer",
            "metadata": {"self": m_url,
                         "resource_name": f"crn:///kafka={cid}/consumer-group=cg-one/consumer={member}"},
            "cluster_id": cid, "consumer_group_id": "cg-one", "consumer_id": member, "instance_id": None,
            "client_id": "client-a", "assignments": {"related": f"{m_url}/assignments"}}
        assert _get(f"{base}/consumer-groups/cg-one/consumers/{member}") == consumer

        assignments = _get(f"{base}/consumer-groups/cg-one/consumers/{member}/assignments")
        assert assignments["kind"] == "KafkaConsumerAssignmentList"
        assert [(a["topic_name"], a["partition_id"]) for a in assignments["data"]] == [("cg-topic", 0),
                                                                                      ("cg-topic", 1)]
        one = _get(f"{base}/consumer-groups/cg-one/consumers/{member}/assignments/cg-topic/partitions/1")
        assert one == assignments["data"][1]
        assert one["kind"] == "KafkaConsumerAssignment"
        assert one["metadata"]["self"] == f"{m_url}/assignments/cg-topic/partitions/1"
        assert one["partition"]["related"] == f"{url}/v3/clusters/{cid}/topics/cg-topic/partitions/1"
        assert one["lag"]["related"] == f"{url}/v3/clusters/{cid}/consumer-groups/cg-one/lags/cg-topic/partitions/1"
        assert (one["consumer_group_id"], one["consumer_id"]) == ("cg-one", member)

        _error(request("GET", f"{base}/consumer-groups/no-such-group"), 404, 404)
        _error(request("GET", f"{base}/consumer-groups/cg-one/consumers/nobody"), 404, 404)
        _error(request("GET", f"{base}/consumer-groups/cg-one/consumers/{member}/assignments/cg-topic/partitions/7"),
               404, 404)
        _error(request("GET", f"{url}/v3/clusters/not-this-one/consumer-groups"), 404, 404)
    finally:
        request("DELETE", f"{url}/groups/cg-one/members/{member}")


def test_lags_and_lag_summary(v3: LocalProcessBackend) -> None:
    """resources/v3/ListConsumerLagsResource.java (sorted by lag descending, then topic and partition; 404 when
    there are none), GetConsumerLagResource.java, ConsumerGroupLagSummariesResource.java; controllers/
    ConsumerLagManagerImpl.java and ConsumerGroupLagSummaryManagerImpl.java (a row per committed partition:
    current_offset the committed offset, log_end_offset the latest offset, the member assigned the partition;
    the summary's max_lag and total_lag over them)."""
    url = v3.broker_url(1)
    cid = _cid(url)
    create_topic(url, "lagged", 2, 1, seen_by=[v3.broker_url(b) for b in v3.broker_ids()])
    leaders = {p: v3.broker_url(metadata(url, "lagged")["partitions"][p]["leader"]) for p in (0, 1)}
    assert _produce_v2(leaders[0], "lagged", 0, [b"r%d" % i for i in range(10)]) == list(range(10))
    assert _produce_v2(leaders[1], "lagged", 1, [b"s%d" % i for i in range(4)]) == list(range(4))
    joined = _join(url, "laggards", "lagged", "client-l")
    member = joined["member_id"]
    try:
        base = f"{url}/v3/clusters/{cid}/consumer-groups/laggards"
        _error(request("GET", f"{base}/lags"), 404, 404)  # a group with no committed offset has no lags
        status, body, _ = request("POST", f"{url}/groups/laggards/offsets", {
            "member_id": member, "generation": joined["generation"],
            "offsets": [{"topic": "lagged", "partition": 0, "offset": 3},
                        {"topic": "lagged", "partition": 1, "offset": 4}]})
        assert status == 200, body

        lags = _get(f"{base}/lags")
        assert lags["kind"] == "KafkaConsumerLagList"
        assert lags["metadata"]["self"] == f"{url}/v3/clusters/{cid}/consumer-groups/laggards/lags"
        rows = [(r["topic_name"], r["partition_id"], r["current_offset"], r["log_end_offset"], r["lag"],
                 r["consumer_id"], r["client_id"]) for r in lags["data"]]
        assert rows == [("lagged", 0, 3, 10, 7, member, "client-l"), ("lagged", 1, 4, 4, 0, member, "client-l")]
        first = lags["data"][0]
        assert first["kind"] == "KafkaConsumerLag"
        assert first["metadata"] == {
            "self": f"{url}/v3/clusters/{cid}/consumer-groups/laggards/lags/lagged/partitions/0",
            "resource_name": f"crn:///kafka={cid}/consumer-group=laggards/lag=lagged/partition=0"}
        assert (first["cluster_id"], first["consumer_group_id"], first["instance_id"]) == (cid, "laggards", None)
        assert _get(f"{base}/lags/lagged/partitions/1") == lags["data"][1]
        _error(request("GET", f"{base}/lags/lagged/partitions/5"), 404, 404)

        summary = _get(f"{base}/lag-summary")
        assert summary["kind"] == "KafkaConsumerGroupLagSummary"
        assert summary["metadata"]["self"] == f"{url}/v3/clusters/{cid}/consumer-groups/laggards/lag-summary"
        assert (summary["max_lag"], summary["total_lag"], summary["max_lag_topic_name"],
                summary["max_lag_partition_id"], summary["max_lag_consumer_id"], summary["max_lag_client_id"]) == (
            7, 7, "lagged", 0, member, "client-l")
        assert summary["max_lag_partition"]["related"] == f"{url}/v3/clusters/{cid}/topics/lagged/partitions/0"
        assert summary["max_lag_consumer"]["related"] == (
            f"{url}/v3/clusters/{cid}/consumer-groups/laggards/consumers/{member}")

        # More records behind the commit: the lag follows the log end.
        _produce_v2(leaders[1], "lagged", 1, [b"t%d" % i for i in range(9)])
        summary = _get(f"{v3.broker_url(2)}/v3/clusters/{cid}/consumer-groups/laggards/lag-summary")
        assert (summary["max_lag"], summary["total_lag"], summary["max_lag_partition_id"]) == (9, 16, 1)
    finally:
        request("DELETE", f"{url}/groups/laggards/members/{member}")


def _records_url(url: str, cid: str, topic: str) -> str:
    return f"{url}/v3/clusters/{cid}/topics/{topic}/records"


def _produce_v3(url: str, raw: bytes, content_type: str = "application/json") -> tuple[int, Any, dict[str, str]]:
    """(status, the reports (a list) or the error body, headers): the answer is concatenated JSON, one report per
    line, which tests/harness/http.py's request would try to parse as one document."""
    req = urllib.request.Request(url, data=raw, method="POST", headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=SLOW_MACHINE_S) as resp:
            status, payload, headers = resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as e:
        status, payload, headers = e.code, e.read(), dict(e.headers)
    if status != 200:
        return status, json.loads(payload), headers
    return status, [json.loads(line) for line in payload.decode().splitlines()], headers


def test_v3_produce_answers_the_offsets_records_land_at(v3: LocalProcessBackend) -> None:
    """resources/v3/ProduceAction.java and entities/v3/ProduceRequest.java, ProduceResponse.java (error_code 200,
    cluster_id, topic_name, partition_id, offset, timestamp, key/value {type, size}); several request objects in
    one body get one report each, in order; response/StreamingResponse.java: a record that cannot be produced gets
    an error report (error_code, message) and the others go on. An unknown topic is 404/40403 (v3)."""
    url = v3.broker_url(1)
    cid = _cid(url)
    create_topic(url, "v3p", 3, 1, seen_by=[v3.broker_url(b) for b in v3.broker_ids()])
    post = _records_url(v3.broker_url(2), cid, "v3p")  # any broker: it forwards to the leaders
    record = {"partition_id": 1, "timestamp": "2024-03-01T10:20:30.456Z",
              "headers": [{"name": "h1", "value": base64.b64encode(b"hv").decode()}],
              "key": {"type": "STRING", "data": "the-key"}, "value": {"type": "JSON", "data": {"n": [1, 2.5, "x"]}}}
    status, body, headers = _produce_v3(post, json.dumps(record).encode())
    assert status == 200, body
    assert headers.get("Transfer-Encoding") == "chunked"
    [report] = body
    assert report == {"error_code": 200, "cluster_id": cid, "topic_name": "v3p", "partition_id": 1,
                      "offset": report["offset"], "timestamp": "2024-03-01T10:20:30.456Z",
                      "key": {"type": "STRING", "size": 7}, "value": {"type": "JSON", "size": 17}}
    leader1 = v3.broker_url(metadata(url, "v3p")["partitions"][1]["leader"])
    [stored] = _read(leader1, "v3p", 1, report["offset"])
    assert base64.b64decode(stored["key"]) == b"the-key"
    assert json.loads(base64.b64decode(stored["value"])) == {"n": [1, 2.5, "x"]}
    assert stored["timestamp"] == 1709288430456
    assert [(h["name"], base64.b64decode(h["value"])) for h in stored["headers"]] == [("h1", b"hv")]

    values = [f"v{i}".encode() for i in range(6)]
    objects = [{"partition_id": 2, "value": {"type": "BINARY", "data": base64.b64encode(v).decode()}}
               for v in values]
    objects.insert(3, {"partition_id": 2, "value": {"type": "BINARY", "data": "not base64!"}})
    # A schema type with no schema given reads the subject's latest version: none registered here (40401).
    objects.append({"value": {"type": "PROTOBUF", "data": "x"}})
    objects.append({"partition_id": 99, "value": {"type": "STRING", "data": "nowhere"}})
    objects.append({"partition_id": 2, "key": {"type": "BINARY", "data": None}, "value": {"type": "STRING",
                                                                                         "data": "last"}})
    raw = "\n".join(json.dumps(o) for o in objects).encode()
    status, reports, _ = _produce_v3(post, raw)
    assert status == 200, reports
    assert [r["error_code"] for r in reports] == [200, 200, 200, 400, 200, 200, 200, 40401, 40403, 200]
    assert all(isinstance(r["message"], str) and r["message"] for r in reports if r["error_code"] != 200)
    delivered = [r for r in reports if r["error_code"] == 200]
    offsets = [r["offset"] for r in delivered]
    assert offsets == list(range(offsets[0], offsets[0] + 7)), offsets  # one partition: consecutive, in order
    assert delivered[-1]["key"] == {"type": "BINARY", "size": -1}  # null data, as Kafka's RecordMetadata
    assert all(r["value"]["type"] in ("BINARY", "STRING") for r in delivered)
    leader2 = v3.broker_url(metadata(url, "v3p")["partitions"][2]["leader"])
    read = _read(leader2, "v3p", 2, offsets[0])
    assert [base64.b64decode(r["value"]) for r in read] == [*values, b"last"]
    assert [r["offset"] for r in read] == offsets
    assert read[-1]["key"] is None

    one = json.dumps(record).encode()
    _error(_produce_v3(_records_url(url, cid, "no-such-topic"), one), 404, 40403)
    _error(_produce_v3(_records_url(url, "other-cluster", "v3p"), one), 404, 404)
    _error(_produce_v3(post, b"{}", content_type="text/plain"), 415, 41501)
    status, reports, _ = _produce_v3(post, b'{"value": {"type": "STRING", "data": "ok"}} {"broken": ')
    assert status == 200
    assert [r["error_code"] for r in reports] == [200, 400]  # the body stops being JSON: the stream ends


def test_v3_produce_streams_one_report_per_record_in_order(v3: LocalProcessBackend) -> None:
    """Confluent's streaming mode (ProduceAction.java, response/StreamingResponse.java; api/v3/openapi.yaml: "This
    API can be used in streaming mode by setting Transfer-Encoding: chunked ... For each record sent to the server,
    the server will asynchronously send back a delivery report, in the same order"): a chunked request whose
    request objects are cut across chunks gets a chunked answer with one report per record, in order, and every
    record is where its report says."""
    url = v3.broker_url(1)
    cid = _cid(url)
    create_topic(url, "streamed", 2, 1, seen_by=[v3.broker_url(b) for b in v3.broker_ids()])
    count = 200
    objects = [{"partition_id": i % 2, "value": {"type": "STRING", "data": f"s{i}"}} for i in range(count)]
    text = "".join(json.dumps(o) for o in objects).encode()  # concatenated, no separator at all

    def chunks() -> Iterator[bytes]:
        step = 37  # cuts through objects, strings and numbers
        for i in range(0, len(text), step):
            yield text[i:i + step]

    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=SLOW_MACHINE_S)
    try:
        conn.request("POST", f"/v3/clusters/{cid}/topics/streamed/records", body=chunks(),
                     headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
                     encode_chunked=True)
        resp = conn.getresponse()
        assert resp.status == 200
        assert resp.getheader("Transfer-Encoding") == "chunked"
        assert resp.getheader("Content-Type", "").startswith("application/json")
        lines = resp.read().decode().splitlines()
    finally:
        conn.close()
    reports = [json.loads(line) for line in lines]
    assert len(reports) == count
    assert all(r["error_code"] == 200 for r in reports), [r for r in reports if r["error_code"] != 200][:3]
    assert [r["partition_id"] for r in reports] == [i % 2 for i in range(count)]
    for p in (0, 1):
        mine = [r["offset"] for r in reports if r["partition_id"] == p]
        assert mine == list(range(mine[0], mine[0] + count // 2))
        leader = v3.broker_url(metadata(url, "streamed")["partitions"][p]["leader"])
        stored = _read(leader, "streamed", p, mine[0])
        assert [base64.b64decode(r["value"]).decode() for r in stored] == [f"s{i}" for i in range(p, count, 2)]


def _chunked_line(reader: Any) -> bytes:
    """One newline-ended line of a chunked HTTP body, read chunk by chunk (a report may span chunks)."""
    line = b""
    while not line.endswith(b"\n"):
        size = int(reader.readline().strip(), 16)
        assert size > 0, f"the answer ended before a report came: {line!r}"
        line += reader.read(size)
        assert reader.readline() == b"\r\n"
    return line


def test_v3_produce_is_interactive_each_report_before_the_next_record(v3: LocalProcessBackend) -> None:
    """Interactive streaming (api/v3/openapi.yaml: "the server will asynchronously send back a delivery report"
    for each record sent): a client that sends one record, waits for its report, and only then sends the next,
    gets every report while its request is still open. A broker that read the whole body before answering would
    leave this client waiting forever (here: the socket timeout fails the test)."""
    url = v3.broker_url(1)
    cid = _cid(url)
    create_topic(url, "interactive", 1, 1, seen_by=[v3.broker_url(b) for b in v3.broker_ids()])
    parts = urllib.parse.urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    offsets = []
    with socket.create_connection((parts.hostname, parts.port), timeout=SLOW_MACHINE_S) as sock, \
            sock.makefile("rb") as reader:
        sock.sendall(f"POST /v3/clusters/{cid}/topics/interactive/records HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                     "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
        for i in range(5):
            record = json.dumps({"value": {"type": "STRING", "data": f"i{i}"}}).encode()
            sock.sendall(b"%x\r\n%s\r\n" % (len(record), record))
            if i == 0:  # the answer's head may come with its first chunk
                assert reader.readline().split()[1] == b"200"
                head = {}
                while (line := reader.readline()) != b"\r\n":
                    name, _, value = line.decode().partition(":")
                    head[name.strip().lower()] = value.strip()
                assert head["transfer-encoding"] == "chunked"
            report = json.loads(_chunked_line(reader))
            assert report["error_code"] == 200, report
            offsets.append(report["offset"])
        sock.sendall(b"0\r\n\r\n")
        assert reader.readline() == b"0\r\n"  # no report is left once the body ended
    assert offsets == list(range(offsets[0], offsets[0] + 5))
    leader = v3.broker_url(metadata(url, "interactive")["partitions"][0]["leader"])
    stored = _read(leader, "interactive", 0, offsets[0])
    assert [base64.b64decode(r["value"]).decode() for r in stored] == [f"i{i}" for i in range(5)]


def test_acls_create_list_delete_round_trip(guarded: LocalProcessBackend, v3: LocalProcessBackend) -> None:
    """resources/v3/AclsResource.java (search with every filter optional, KafkaAclList sorted by type, name,
    pattern, principal, host, operation, permission; create 201 with a Location; delete answers the removed ACLs
    as {"data": [KafkaAcl]}), CreateAclBatchAction.java (acls:batch); entities/v3/AclData.java (metadata.self is
    the search that finds exactly the ACL). Without an authorizer the broker refuses, as Kafka's SECURITY_DISABLED."""
    url = guarded.broker_url(1)
    cid = _cid(url)
    acls = f"{url}/v3/clusters/{cid}/acls"
    alice = {"resource_type": "TOPIC", "resource_name": "orders", "pattern_type": "LITERAL",
             "principal": "User:alice", "host": "*", "operation": "READ", "permission": "ALLOW"}
    status, body, headers = request("POST", acls, alice)
    assert status == 201, body
    assert headers["Location"] == f"{acls}?" + urllib.parse.urlencode(alice)
    status, body, _ = request("POST", f"{acls}:batch", {"data": [
        {**alice, "resource_name": "logs-", "pattern_type": "PREFIXED", "operation": "WRITE"},
        {"resource_type": "GROUP", "resource_name": "g1", "pattern_type": "LITERAL", "principal": "User:alice",
         "host": "*", "operation": "DESCRIBE", "permission": "DENY"}]})
    assert status == 201, body

    found = _get(f"{acls}?principal=User:alice")
    assert found["kind"] == "KafkaAclList"
    assert found["metadata"]["self"].startswith(f"{acls}?")
    assert [(a["resource_type"], a["resource_name"], a["pattern_type"], a["operation"], a["permission"])
            for a in found["data"]] == [("TOPIC", "logs-", "PREFIXED", "WRITE", "ALLOW"),
                                        ("TOPIC", "orders", "LITERAL", "READ", "ALLOW"),
                                        ("GROUP", "g1", "LITERAL", "DESCRIBE", "DENY")]
    orders = found["data"][1]
    assert orders == {"kind": "KafkaAcl", "metadata": {"self": f"{acls}?" + urllib.parse.urlencode(alice)},
                      "cluster_id": cid, **alice}
    assert _get(orders["metadata"]["self"])["data"] == [orders]  # the self link finds exactly it
    matched = _get(f"{acls}?resource_type=topic&resource_name=logs-app&pattern_type=match")
    assert [a["resource_name"] for a in matched["data"]] == ["logs-"]

    _error(request("POST", acls, {**alice, "resource_type": "ANY"}), 400, 40001)
    _error(request("POST", acls, {**alice, "pattern_type": "MATCH"}), 400, 40001)
    _error(request("DELETE", f"{acls}?resource_type=TOPIC"), 400, 40001)  # the rest of the filter is required

    status, deleted, _ = request("DELETE", f"{acls}?resource_type=TOPIC&pattern_type=ANY&operation=ANY"
                                           "&permission=ALLOW&principal=User:alice")
    assert status == 200, deleted
    assert [a["resource_name"] for a in deleted["data"]] == ["logs-", "orders"]
    assert all(a["kind"] == "KafkaAcl" for a in deleted["data"])
    assert [a["resource_type"] for a in _get(f"{acls}?principal=User:alice")["data"]] == ["GROUP"]
    request("DELETE", f"{acls}?resource_type=ANY&pattern_type=ANY&operation=ANY&permission=ANY")
    assert _get(acls)["data"] == []

    open_url = v3.broker_url(1)
    body = _error(request("GET", f"{open_url}/v3/clusters/{_cid(open_url)}/acls"), 400, 40014)
    assert body["error"] == "SECURITY_DISABLED"


def test_reassignments_show_while_a_move_runs(v3: LocalProcessBackend, tmp_path: Path) -> None:
    """resources/v3/ListAllReassignmentsAction.java, SearchReassignmentsByTopicAction.java,
    GetReassignmentAction.java, controllers/ReassignmentManagerImpl.java and entities/v3/ReassignmentData.java:
    KafkaReassignmentList of KafkaReassignment {topic_name, partition_id, adding_replicas, removing_replicas,
    replicas link}; a topic that does not exist is 404/40403, a partition with no move 404. A move held back by a
    replication throttle shows with the replica being added until it is cancelled."""
    url = v3.broker_url(1)
    cid = _cid(url)
    base = f"{url}/v3/clusters/{cid}/topics"
    every = _get(f"{base}/-/partitions/-/reassignment")
    assert every == {"kind": "KafkaReassignmentList", "metadata": {
        "self": f"{url}/v3/clusters/{cid}/topics/-/partitions/-/reassignment", "next": None}, "data": []}
    status, body, _ = request("POST", base, {"topic_name": "moving", "replicas_assignments": [
        {"partition_id": 0, "broker_ids": [1]}]})
    assert status == 201, body
    wait_until(lambda: metadata(url, "moving")["partitions"][0]["leader"] == 1, SLOW_MACHINE_S, "a leader")
    assert _get(f"{base}/moving/partitions/-/reassignment")["data"] == []
    _error(request("GET", f"{base}/no-such-topic/partitions/-/reassignment"), 404, 40403)
    _error(request("GET", f"{base}/moving/partitions/0/reassignment"), 404, 404)

    value = b"x" * 50_000
    for _ in range(20):  # 2 MB to copy at 20 kB/s: the move runs for most of a minute unless cancelled
        _produce_v2(url, "moving", 0, [value] * 2)
    moves = tmp_path / "moves.json"
    moves.write_text(json.dumps({"version": 1, "partitions": [{"topic": "moving", "partition": 0,
                                                                "replicas": [1, 2]}]}))
    done = subprocess.run([str(ROOT / "scripts" / "odradek-reassign-partitions.sh"), "--bootstrap-server", url,
                           "--execute", "--reassignment-json-file", str(moves), "--throttle", "20000"],
                          capture_output=True, text=True, timeout=2 * SLOW_MACHINE_S, check=False)
    assert done.returncode == 0, done.stderr
    try:
        def shown() -> dict[str, Any] | None:
            status, body, _ = request("GET", f"{base}/moving/partitions/0/reassignment")
            return body if status == 200 and body["adding_replicas"] == [2] else None

        one = wait_until(shown, SLOW_MACHINE_S, "the move with its adding replica")
        assert one == {
            "kind": "KafkaReassignment",
            "metadata": {"self": f"{url}/v3/clusters/{cid}/topics/moving/partitions/0/reassignment",
                         "resource_name": f"crn:///kafka={cid}/topic=moving/partition=0/reassignment"},
            "cluster_id": cid, "topic_name": "moving", "partition_id": 0, "adding_replicas": [2],
            "removing_replicas": [], "replicas": {
                "related": f"{url}/v3/clusters/{cid}/topics/moving/partitions/0/replicas"}}
        assert _get(f"{base}/moving/partitions/-/reassignment")["data"] == [one]
        assert _get(f"{base}/-/partitions/-/reassignment")["data"] == [one]
    finally:
        status, body, _ = request("POST", f"{url}/admin/reassign_partitions/cancel", {})
        assert status == 200, body
    wait_until(lambda: _get(f"{base}/-/partitions/-/reassignment")["data"] == [], SLOW_MACHINE_S,
               "the cancelled move gone")


def test_every_related_link_of_the_cluster_topic_and_broker_objects_answers(guarded: LocalProcessBackend) -> None:
    """Confluent's ClusterData (resources/v3/ClustersResource.java) links the controller, acls, brokers,
    broker_configs, consumer_groups, topics and partition_reassignments; TopicData (TopicsResource.java) its
    partitions, configs and partition_reassignments; BrokerData (BrokersResource.java) its configs. A client
    navigates by these links, so each must answer 200 (with the authorizer on, where /acls is served)."""
    url = guarded.broker_url(1)
    cid = _cid(url)
    create_topic(url, "linked", partitions=1)
    cluster = _get(f"{url}/v3/clusters/{cid}")
    for name in ("controller", "acls", "brokers", "broker_configs", "consumer_groups", "topics",
                 "partition_reassignments"):
        assert cluster.get(name), (name, cluster)
    topic = _get(f"{url}/v3/clusters/{cid}/topics/linked")
    brokers = _get(f"{url}/v3/clusters/{cid}/brokers")
    assert brokers["kind"] == "KafkaBrokerList" and [b["broker_id"] for b in brokers["data"]] == [1], brokers
    broker = brokers["data"][0]
    assert broker["kind"] == "KafkaBroker" and broker["port"] > 0 and broker["metadata"]["self"].endswith(
        f"/v3/clusters/{cid}/brokers/1"), broker
    links = [v["related"] for obj in (cluster, topic, broker) for v in obj.values()
             if isinstance(v, dict) and "related" in v]
    assert len(links) == 11, links
    for link in links:
        _get(link)  # 200, application/json
    assert _get(broker["metadata"]["self"]) == broker
    # Down the topic: its partitions, each leader a link to its replica, each replica a link to its broker.
    (partition,) = _get(topic["partitions"]["related"])["data"]
    assert (partition["kind"], partition["partition_id"]) == ("KafkaPartition", 0), partition
    leader = _get(partition["leader"]["related"])
    assert (leader["kind"], leader["broker_id"], leader["is_leader"], leader["is_in_sync"]) == (
        "KafkaReplica", 1, True, True), leader
    assert [r["broker_id"] for r in _get(partition["replicas"]["related"])["data"]] == [1]
    assert _get(leader["broker"]["related"]) == broker
    _error(request("GET", partition["reassignment"]["related"]), 404, 404)  # no move under way
    _error(request("GET", f"{url}/v3/clusters/{cid}/topics/linked/partitions/7"), 404, 40403)
    _error(request("GET", f"{url}/v3/clusters/{cid}/brokers/999"), 404, 404)
    _error(request("GET", f"{url}/v3/clusters/{cid}/brokers/x"), 404, 404)
