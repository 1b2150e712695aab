"""Confluent REST Proxy v2 consumer instances on a real cluster: created on one broker, used through another
(forwarding) and through ``base_uri``; json and binary formats; commits; Confluent's error codes; expiry."""

from __future__ import annotations

import base64
import json
import time
import uuid
from typing import Any

import pytest

from tests.conftest import MakeCluster
from tests.harness.cluster import LocalProcessBackend, wait_until
from tests.harness.http import BINARY_V2, JSON_V2, V2, create_topic, produce, read_records, request
from tests.harness.http import v2_call as call
from tests.harness.wait import SLOW_MACHINE_S

pytestmark = pytest.mark.cluster

EXPIRY_MS = 3000


@pytest.fixture
def cluster(make_cluster: MakeCluster) -> LocalProcessBackend:
    return make_cluster(brokers=3, broker_args=["--consumer-instance-timeout-ms", str(EXPIRY_MS)])


def test_instance_lifecycle_across_brokers(cluster: LocalProcessBackend) -> None:
    b1, b2, b3 = (cluster.broker_url(b) for b in cluster.broker_ids())
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(b1, topic, partitions=2, replication_factor=2, seen_by=[b1, b2, b3])
    for p in (0, 1):
        status, body = produce(b1, topic, p, [{"n": p * 100 + i} for i in range(5)])
        assert status == 200, body

    status, created = call("POST", f"{b1}/consumers/{group}", {
        "name": "c1", "format": "json", "auto.offset.reset": "earliest", "auto.commit.enable": "false"})
    assert status == 200, created
    base = created["base_uri"]
    assert created["instance_id"] == "c1" and base == f"{b1}/consumers/{group}/instances/c1"
    status, body = call("POST", f"{b1}/consumers/{group}", {"name": "c1", "format": "json"})
    assert (status, body["error_code"]) == (409, 40902)  # unique per group on a broker, as on one REST proxy
    status, body = call("POST", f"{b1}/consumers/{group}", {"name": "c9", "format": "xml"})
    assert status == 400, body  # avro, jsonschema, protobuf: backed by the cluster's registry (test_embedded_formats)

    # Subscribe through another broker: forwarded to the holder.
    via_b2 = f"{b2}/consumers/{group}/instances/c1"
    status, body = call("POST", f"{via_b2}/subscription", {"topics": [topic]})
    assert status == 204, body
    status, body = call("GET", f"{base}/subscription")
    assert (status, body) == (200, {"topics": [topic]})
    status, body = call("POST", f"{base}/assignments", {"partitions": [{"topic": topic, "partition": 0}]})
    assert (status, body["error_code"]) == (409, 40903)  # subscribe and assign are exclusive

    status, body = call("GET", f"{base}/records", accept=BINARY_V2)
    assert (status, body["error_code"]) == (406, 40601)  # a json instance cannot answer binary
    records = read_records(via_b2, 10, JSON_V2)  # long-polls, through the forwarding broker
    assert sorted(r["value"]["n"] for r in records) == [*range(5), *range(100, 105)]
    assert all(r["topic"] == topic and isinstance(r["offset"], int) for r in records)
    status, body = call("GET", f"{base}/assignments")
    assert status == 200 and sorted(p["partition"] for p in body["partitions"]) == [0, 1]

    # Commit: Confluent's v2 names the last record processed and commits the one after it.
    status, body = call("POST", f"{base}/offsets", {"offsets": [{"topic": topic, "partition": 0, "offset": 2}]})
    assert status == 200, body
    status, body = call("GET", f"{base}/offsets", {"partitions": [{"topic": topic, "partition": 0},
                                                                  {"topic": topic, "partition": 1}]})
    assert status == 200, body
    assert {o["partition"]: o["offset"] for o in body["offsets"]} == {0: 3, 1: -1}
    status, body = call("POST", f"{base}/offsets")  # no body: everything returned so far
    assert status == 200, body
    status, body = call("GET", f"{via_b2}/offsets", {"partitions": [{"topic": topic, "partition": 1}]})
    assert body["offsets"][0]["offset"] == 5

    status, body = call("GET", f"{b3}/consumers/{group}/instances/nobody/records", accept=JSON_V2)
    assert (status, body["error_code"]) == (404, 40403)
    status, body = call("POST", f"{base}/positions", {"offsets": [{"topic": topic, "partition": "x"}]})
    assert status == 400, body

    # Idle instances expire, and leave their group when they do.
    def members() -> list[Any]:
        status, body = call("GET", f"{b3}/groups/{group}")
        assert status == 200, body
        return body["members"]

    assert members()  # the instance is a member of its group while it lives
    wait_until(lambda: members() == [], EXPIRY_MS / 1000 + SLOW_MACHINE_S,
               "the idle instance to expire and leave its group")
    status, body = call("GET", f"{base}/records", accept=JSON_V2)
    assert (status, body["error_code"]) == (404, 40403)


def test_binary_instance_with_manual_assignment_and_seeks(cluster: LocalProcessBackend) -> None:
    b1, b2, b3 = (cluster.broker_url(b) for b in cluster.broker_ids())
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(b1, topic, partitions=1, replication_factor=3, seen_by=[b1, b2, b3])
    status, body = produce(b1, topic, 0, [f"v{i}" for i in range(6)])
    assert status == 200, body
    status, created = call("POST", f"{b3}/consumers/{group}", {"format": "binary"})
    assert status == 200 and created["instance_id"].startswith("rest-consumer-"), created
    base = created["base_uri"]
    tp = {"topic": topic, "partition": 0}
    assert call("POST", f"{base}/assignments", {"partitions": [tp]})[0] == 204
    status, body = call("POST", f"{base}/subscription", {"topics": [topic]})
    assert (status, body["error_code"]) == (409, 40903)
    status, body = call("POST", f"{base}/positions/end", {"partitions": [{"topic": topic, "partition": 7}]})
    assert (status, body["error_code"]) == (409, 40903)  # not assigned
    assert call("POST", f"{base}/positions/beginning", {"partitions": [tp]})[0] == 204
    status, body = call("GET", f"{base}/records", accept=JSON_V2)
    assert (status, body["error_code"]) == (406, 40601)
    records = read_records(base, 6, BINARY_V2)
    values = [json.loads(base64.b64decode(r["value"])) for r in records]
    assert values == [f"v{i}" for i in range(6)] and [r["offset"] for r in records] == list(range(6))
    assert call("POST", f"{base}/positions", {"offsets": [{**tp, "offset": 4}]})[0] == 204
    again = read_records(base, 2, BINARY_V2)
    assert [r["offset"] for r in again] == [4, 5]
    assert call("POST", f"{base}/positions/end", {"partitions": [tp]})[0] == 204
    status, body = call("GET", f"{base}/records?timeout=200", accept=BINARY_V2)
    assert (status, body) == (200, [])
    # A standalone (assign-only) instance commits with no member id, as Kafka's assign() users do.
    assert call("POST", f"{base}/offsets", {"offsets": [{**tp, "offset": 5, "metadata": "m"}]})[0] == 200
    status, body = call("GET", f"{base}/offsets", {"partitions": [tp]})
    assert body["offsets"] == [{**tp, "offset": 6, "metadata": "m"}]
    assert call("DELETE", base)[0] == 204
    status, body = call("DELETE", base)
    assert (status, body["error_code"]) == (404, 40403)


def test_two_instances_on_two_brokers_share_a_group(cluster: LocalProcessBackend) -> None:
    b1, b2, b3 = (cluster.broker_url(b) for b in cluster.broker_ids())
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(b1, topic, partitions=4, replication_factor=2, seen_by=[b1, b2, b3])
    for p in range(4):
        assert produce(b1, topic, p, [{"p": p, "i": i} for i in range(5)])[0] == 200
    bases = []
    for url, name in ((b1, "x"), (b2, "y")):
        status, created = call("POST", f"{url}/consumers/{group}", {"name": name, "format": "json",
                                                                   "auto.offset.reset": "earliest"})
        assert status == 200, created
        bases.append(created["base_uri"])
        assert call("POST", f"{created['base_uri']}/subscription", {"topics": [topic]})[0] == 204

    def assignments() -> list[set[int]]:
        return [{p["partition"] for p in call("GET", f"{b}/assignments")[1]["partitions"]} for b in bases]

    seen: list[tuple[int, int]] = []
    deadline = time.monotonic() + SLOW_MACHINE_S
    while not (len(seen) >= 20 and all(len(a) == 2 for a in assignments())):
        assert time.monotonic() < deadline, (seen, assignments())
        for b in bases:
            status, records = call("GET", f"{b}/records?timeout=300", accept=JSON_V2)
            assert status == 200, records
            seen.extend((r["partition"], r["offset"]) for r in records)
    a, b = assignments()
    assert a | b == {0, 1, 2, 3} and not a & b  # one owner per partition
    assert sorted(set(seen)) == sorted((p, o) for p in range(4) for o in range(5))
    for base in bases:
        assert call("DELETE", base)[0] == 204


def test_no_consumer_request_causes_a_5xx(cluster: LocalProcessBackend) -> None:
    b1, b2 = cluster.broker_url(1), cluster.broker_url(2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    status, created = call("POST", f"{b1}/consumers/{group}", {"name": "fz", "format": "binary"})
    assert status == 200, created
    bodies = [b"", b"null", b"[]", b"{}", b'{"topics": []}', b'{"topics": [1]}', b'{"topic_pattern": "("}',
              b'{"topics": ["a"], "topic_pattern": "a"}', b'{"partitions": [{"topic": "a", "partition": -1}]}',
              b'{"partitions": [null]}', b'{"offsets": [{"topic": "a", "partition": 0, "offset": "x"}]}',
              b'{"offsets": [{"topic": "a", "partition": 0, "offset": 1, "metadata": 5}]}',
              b'{"name": 5}', b'{"name": "a/b"}', b'{"format": 1}', b'{"fetch.min.bytes": []}',
              b'{"auto.commit.enable": 3}', b"\xff\xfe", b"{" * 10000]
    base = f"/consumers/{group}/instances/fz"
    paths = [f"/consumers/{group}", "/consumers/bad%20group", f"{base}/subscription", f"{base}/assignments",
             f"{base}/positions", f"{base}/positions/beginning", f"{base}/positions/end", f"{base}/offsets",
             f"{base}/records?timeout=-5&max_bytes=0", f"{base}/records?timeout=x", f"/consumers/{group}/instances/no"]
    for url in (b1, b2):  # local and forwarded
        for path in paths:
            for body in bodies:
                for method in ("POST", "GET"):
                    status, _, _ = request(method, f"{url}{path}", raw=body, content_type=V2, accept=BINARY_V2)
                    assert status < 500, (method, path, body[:40], status)
    assert call("DELETE", f"{b1}{base}")[0] == 204


def _consumer_requests_seen(url: str) -> float:
    """Requests to consumer-instance routes this broker has answered (its /metrics)."""
    status, payload, _ = request("GET", f"{url}/metrics")
    assert status == 200
    text = payload.decode() if isinstance(payload, bytes) else str(payload)
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("odradek_http_requests_total{") and 'route="/consumers/' in line)


def test_a_request_to_the_wrong_broker_reaches_the_holder_in_one_hop(cluster: LocalProcessBackend) -> None:
    ids = sorted(cluster.broker_ids())
    # The holder is the broker a try-every-broker-in-order forward from the lowest id would ask last.
    via_id, bystander_id, holder_id = ids[0], ids[1], ids[2]
    holder, via, bystander = (cluster.broker_url(b) for b in (holder_id, via_id, bystander_id))
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(holder, topic, partitions=1, replication_factor=3, seen_by=[holder, via, bystander])
    status, body = produce(holder, topic, 0, [{"n": i} for i in range(3)])
    assert status == 200, body

    named = {"name": "one-hop", "format": "json", "auto.offset.reset": "earliest"}
    status, created_named = call("POST", f"{holder}/consumers/{group}", named)
    assert status == 200, created_named
    status, created_generated = call("POST", f"{holder}/consumers/{group}", {"format": "json"})
    assert status == 200 and created_generated["instance_id"].startswith(f"rest-consumer-{holder_id}-")
    # A client may not take a generated id that names another broker.
    status, body = call("POST", f"{holder}/consumers/{group}", {"name": f"rest-consumer-{via_id}-{uuid.uuid4()}"})
    assert status == 400, body

    before = _consumer_requests_seen(bystander)
    for instance in (created_named["instance_id"], created_generated["instance_id"]):
        wrong = f"{via}/consumers/{group}/instances/{instance}"
        status, body, headers = request("POST", f"{wrong}/assignments",
                                        {"partitions": [{"topic": topic, "partition": 0}]}, content_type=V2)
        assert status == 204, body
        assert headers.get("Odradek-Consumer-Broker") == str(holder_id)
        status, records, headers = request("GET", f"{wrong}/records?timeout=1000", accept=JSON_V2)
        assert status == 200, records
        assert headers.get("Odradek-Consumer-Broker") == str(holder_id)
        status, body, headers = request("GET", f"{wrong}/assignments", accept=V2)
        assert (status, body) == (200, {"partitions": [{"topic": topic, "partition": 0}]})
        assert headers.get("Odradek-Consumer-Broker") == str(holder_id)
        # The holder's answer comes back as it is, a typed error included (no commits yet in this group).
        offsets = {"partitions": [{"topic": topic, "partition": 0}]}
        direct = request("GET", f"{holder}/consumers/{group}/instances/{instance}/offsets", offsets,
                         content_type=V2, accept=V2)
        status, body, headers = request("GET", f"{wrong}/offsets", offsets, content_type=V2, accept=V2)
        assert (status, body) == direct[:2]
        assert headers.get("Odradek-Consumer-Broker") == str(holder_id)
    assert _consumer_requests_seen(bystander) == before  # no broker but the holder was asked

    # An instance nobody holds is answered at once by the broker asked, with no hop at all.
    status, body, headers = request("GET", f"{via}/consumers/{group}/instances/nobody/records", accept=JSON_V2)
    assert (status, body["error_code"]) == (404, 40403)
    assert "Odradek-Consumer-Broker" not in headers
    assert _consumer_requests_seen(bystander) == before
