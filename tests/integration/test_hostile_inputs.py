"""Issue 10: every hostile request of the security review, replayed against a real 3-broker cluster, with the safe
outcome asserted (no acknowledged record lost, no fencing, no stuck deletion, a 4xx, bounded memory).

The cluster runs with small limits (broker_args below) so that each limit is reached by a small request; the last
test reads each broker's peak resident set (VmHWM in /proc/<pid>/status) after everything before it ran.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import http.client
import json
import socket
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.protocol.records import GZIP, encode_batch
from tests.harness.cluster import LocalProcessBackend
from tests.harness.http import create_topic, metadata, request
from tests.harness.sockets import ESTABLISHED, socket_inodes, tcp_sockets
from tests.harness.wait import SLOW_MACHINE_S, wait_until
from tests.unit.api.hostile_batches import craft_batch, gzip_bomb, records_block

pytestmark = pytest.mark.cluster

JSON_V2 = "application/vnd.kafka.json.v2+json"
BATCHES = "application/vnd.odradek.batches.v2"
LIMITS = ["--max-partitions-per-topic", "20", "--max-partitions", "200", "--request-header-timeout-ms", "1000",
          "--request-body-timeout-ms", "1500", "--fetch-max-wait-ms", "1500", "--max-records-per-request", "1000",
          "--max-decompressed-batch-bytes", str(4 << 20), "--max-config-value-bytes", "1024",
          "--inter-broker-max-connections", "8"]
RSS_LIMIT_KB = 500 * 1024
# Attempts at stopping two followers and checking the high watermark before their sessions expire (~1.5 s): one
# suffices on a healthy machine; a round lost to a slow machine is repeated, not counted.
ROUNDS = 10
# Upper bounds on answers that the broker's own limits make quick: the long-poll cap (--fetch-max-wait-ms 1.5 s)
# and the header/body read timeouts (1 s / 1.5 s) end them after about 1.5 s, and a broken limit would let them run
# for the 11 days asked for or until the client gives up. 30 s is 20x the limit, so a loaded machine stays under it.
CAPPED_S = 30.0


@pytest.fixture(scope="module")
def c(zk_ensemble: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessBackend]:
    from odradek_local.cluster import LocalCluster
    from tests.conftest import SESSION_TIMEOUT_MS
    from tests.harness.ports import free_port_block

    cluster = LocalCluster(tmp_path_factory.mktemp("hostile"), brokers=3, base_port=free_port_block(3),
                           session_timeout_ms=SESSION_TIMEOUT_MS, chroot=f"/hostile-{uuid.uuid4().hex[:8]}",
                           ensemble=zk_ensemble, broker_args=LIMITS)
    backend = LocalProcessBackend(cluster).up()
    yield backend
    backend.close()


def url(c: LocalProcessBackend, broker: int = 1) -> str:
    return c.broker_url(broker)


def cid(c: LocalProcessBackend) -> str:
    return str(request("GET", f"{url(c)}/v3/clusters")[1]["data"][0]["cluster_id"])


def new_topic(c: LocalProcessBackend, partitions: int = 1, rf: int = 1, **configs: str) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(url(c), name, partitions, rf, {k.replace("_", "."): v for k, v in configs.items()},
                 seen_by=[url(c, b) for b in c.broker_ids()])
    return name


def leader(c: LocalProcessBackend, topic: str, partition: int = 0) -> int:
    return int(metadata(url(c), topic)["partitions"][partition]["leader"])


def offsets(c: LocalProcessBackend, topic: str, partition: int = 0, broker: int = 1) -> dict[str, Any]:
    status, body, _ = request("GET", f"{url(c, broker)}/topics/{topic}/partitions/{partition}/offsets")
    assert status == 200, body
    return body


def raw_get(base: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
    """A GET whose path is sent byte for byte (no client-side quoting or normalisation)."""
    parsed = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read(), dict(resp.getheaders())
    finally:
        conn.close()


def send_raw(base: str, method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    parsed = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def broker_epoch(c: LocalProcessBackend, broker: int) -> int:
    info = c.zk_client().get_broker(broker)
    assert info is not None
    return info.epoch


# ------------------------------------------------------------------------------------- 1. replication requests


def test_hand_sent_follower_fetches_cannot_acknowledge_records(c: LocalProcessBackend) -> None:
    """min.insync.replicas=3, both followers stopped: fetches sent by hand with a huge offset must not raise the
    high watermark, so acks=all is never answered and no acknowledged record can be lost.

    The stopped followers' ZooKeeper sessions expire after SESSION_TIMEOUT_MS, and then the controller rightly takes
    them out of the ISR and the high watermark moves. So the check counts only while ZooKeeper still lists them in
    the ISR, read after the high watermark (the leader's ISR only shrinks after ZooKeeper's does), and a round in
    which they left first is repeated with the followers resumed, up to ROUNDS times."""
    topic = new_topic(c, 1, 3, min_insync_replicas="3")
    lead = leader(c, topic)
    followers = [b for b in c.broker_ids() if b != lead]
    base = f"{url(c, lead)}/topics/{topic}/partitions/0"
    zk = c.zk_client()
    checked = []
    for _ in range(ROUNDS):
        wait_until(lambda: len(zk.get_partition_state(topic, 0)[0].isr) == 3, SLOW_MACHINE_S,  # type: ignore[index]
                   "the followers back in the ISR")
        epochs = {b: broker_epoch(c, b) for b in followers}
        committed = offsets(c, topic, broker=lead)["end_offset"]
        for b in followers:
            c.pause_broker(b)
        try:
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                pending = pool.submit(request, "POST", f"{base}?acks=all&timeout_ms=4000",
                                      {"records": [{"value": i} for i in range(5)]}, content_type=JSON_V2)

                def appended(committed: int = committed) -> bool:
                    headers = raw_get(url(c, lead), f"/topics/{topic}/partitions/0/batches?timeout_ms=0")[2]
                    return int(headers.get("Odradek-Log-End-Offset", "0")) >= committed + 5

                wait_until(appended, SLOW_MACHINE_S, "the records to reach the leader")
                for b in followers:
                    for query in (f"replica_id={b}&offset={10**18}",  # no broker epoch
                                  f"replica_id={b}&offset={10**18}&replica_epoch={epochs[b]}",
                                  f"replica_id={b}&offset=1000000000000000000&replica_epoch={epochs[b] + 1}"):
                        status, body, _ = request("GET", f"{base}/batches?{query}")
                        assert 400 <= status < 500, (query, status, body)
                high_watermark = offsets(c, topic, broker=lead)["end_offset"]
                isr = zk.get_partition_state(topic, 0)[0].isr  # type: ignore[index]
                status, body, _ = pending.result()
                assert status >= 400 or all(o.get("error_code") for o in body["offsets"]), body  # never acknowledged
        finally:
            for b in followers:
                c.resume_broker(b)
        wait_until(lambda committed=committed: offsets(c, topic, broker=lead)["end_offset"] >= committed + 5,
                   SLOW_MACHINE_S, "the followers to catch up")
        all_registered(c)
        if set(followers) <= set(isr):  # still in the ISR after the read: the hand-sent fetches alone were seen
            checked.append(high_watermark)
            break
    assert checked, f"in each of {ROUNDS} rounds the stopped followers left the ISR before the check"
    assert checked[0] == committed  # the high watermark did not move


def all_registered(c: LocalProcessBackend) -> None:
    """Every broker serving, under the registration ZooKeeper holds now (a resumed broker re-registers)."""
    zk = c.zk_client()

    def current(b: int) -> bool:
        health = request("GET", f"{url(c, b)}/health")[1]
        info = zk.get_broker(b)
        return health.get("status") == "ok" and info is not None and info.epoch == health.get("broker_epoch")

    wait_until(lambda: all(current(b) for b in c.broker_ids()), SLOW_MACHINE_S, "every broker to be registered again")


def test_a_fetch_from_a_stranger_with_a_newer_epoch_does_not_fence_the_leader(c: LocalProcessBackend) -> None:
    topic = new_topic(c, 1, 3)
    lead = leader(c, topic)
    state = metadata(url(c), topic)["partitions"][0]
    epoch = int(state.get("leader_epoch", 0))
    base = f"{url(c, lead)}/topics/{topic}/partitions/0"
    follower = next(b for b in c.broker_ids() if b != lead)
    for query in (f"replica_id=99&leader_epoch={epoch + 1}&offset=0",
                  f"replica_id={follower}&leader_epoch={epoch + 1}&offset=0&replica_epoch={broker_epoch(c, follower)}",
                  f"replica_id={lead}&leader_epoch={epoch + 1}&offset=0"):
        status, body, _ = request("GET", f"{base}/batches?{query}")
        assert 400 <= status < 500, (query, status, body)
    status, body, _ = request("POST", f"{base}?acks=all&timeout_ms=5000", {"records": [{"value": 1}]},
                              content_type=JSON_V2)
    assert status == 200 and body["offsets"][0]["offset"] == 0, body
    assert leader(c, topic) == lead
    status, body, _ = request("GET", f"{base}/records?offset=0", accept=JSON_V2)
    assert status == 200 and len(body["records"]) == 1


def test_controlled_shutdown_needs_a_live_broker_and_its_epoch(c: LocalProcessBackend) -> None:
    for body in ({"broker_id": 2, "broker_epoch": 1}, {"broker_id": 99, "broker_epoch": 1},
                 {"broker_id": "\u0662", "broker_epoch": 1}, {"broker_id": True, "broker_epoch": 1}, []):
        for b in c.broker_ids():
            status, answer, _ = request("POST", f"{url(c, b)}/controller/controlled_shutdown", body)
            assert 400 <= status < 500 or status == 503, (body, status, answer)
    assert all(request("GET", f"{url(c, b)}/health")[1]["status"] == "ok" for b in c.broker_ids())
    status, answer, _ = request("POST", f"{url(c)}/admin/preferred_leader_election",
                                {"partitions": [{"topic": "../x", "partition": 0}]})
    assert status == 400, answer


# ------------------------------------------------------------------------------------ 2. names and numbers


def test_topic_names_in_v3_config_and_partition_paths_cannot_reach_zookeeper(c: LocalProcessBackend) -> None:
    topic = new_topic(c)
    cluster = cid(c)
    zk = c.zk_client()
    for name in (f"{topic}%2Fpartitions%2F0%2Fstate", f"{topic}%252Fx", ".", "..", "..%2Fx", "%2E%2E", "a%00b"):
        for method, suffix, body in (("PUT", "/configs/retention.ms", {"value": "1000"}), ("GET", "/configs", None),
                                     ("DELETE", "/configs/retention.ms", None), ("DELETE", "", None),
                                     ("GET", "/partitions", None), ("POST", "/configs:alter", {"data": []})):
            path = f"/v3/clusters/{cluster}/topics/{name}{suffix}"
            status, answer = send_raw(url(c), method, path, json.dumps(body).encode() if body else b"",
                                      {"Content-Type": "application/json"})
            assert 400 <= status < 500, (method, path, status, answer)
    assert zk.get_topic_config(topic) == {}
    assert not zk._kazoo.get_children(f"/config/topics/{topic}") if zk._kazoo.exists(f"/config/topics/{topic}") \
        else True
    status, _, _ = request("DELETE", f"{url(c)}/v3/clusters/{cluster}/topics/{topic}")
    assert status == 204
    wait_until(lambda: request("GET", f"{url(c)}/topics/{topic}")[0] == 404, SLOW_MACHINE_S, "the topic to be deleted")


@pytest.mark.parametrize("partition", ["%C2%B2", "%D9%A1", "1" * 30, "-1", "0x1", "%2B1"])
def test_partitions_that_are_not_ascii_integers_are_404(c: LocalProcessBackend, partition: str) -> None:
    topic = new_topic(c) if partition == "%C2%B2" else "p"
    for suffix in ("", "/records?offset=0", "/offsets", "/batches"):
        status, body, _ = raw_get(url(c), f"/topics/{topic}/partitions/{partition}{suffix}")
        assert status == 404, (partition, suffix, status, body)


def test_numbers_out_of_range_are_400_and_a_refused_produce_writes_nothing(c: LocalProcessBackend) -> None:
    topic = new_topic(c)
    base = f"/topics/{topic}/partitions/0"
    for query in (f"records?offset=0&timeout={10**400}", f"records?offset={2**64}", "records?offset=0&max_bytes=%C2%B2",
                  f"offsets?timestamp={2**64}", f"batches?timeout_ms={10**400}", "records?offset=%D9%A1"):
        status, body, _ = raw_get(url(c), f"{base}/{query}")
        assert status == 400, (query, status, body)
    status, body, _ = request("POST", f"{url(c)}{base}?timeout_ms={10**400}", {"records": [{"value": 1}]},
                              content_type=JSON_V2)
    assert status == 400, body
    assert offsets(c, topic)["end_offset"] == 0


def test_bad_json_bodies_are_4xx(c: LocalProcessBackend) -> None:
    topic = new_topic(c)
    target = f"{url(c)}/topics/{topic}/partitions/0"
    for depth in (300, 1000, 5000):
        nested = "[" * depth + "]" * depth
        for ctype in (JSON_V2, "application/vnd.kafka.binary.v2+json"):
            status, body, _ = request("POST", target, raw=f'{{"records": [{{"value": {nested}}}]}}'.encode(),
                                      content_type=ctype)
            assert 400 <= status < 500, (depth, ctype, status, body)
        status, body, _ = request("POST", f"{url(c)}/v3/clusters/{cid(c)}/topics",
                                  raw=f'{{"topic_name": "x", "configs": {nested}}}'.encode())
        assert 400 <= status < 500, (depth, status, body)
    status, body, _ = request("POST", target, {"records": [{"value": "aGk=\u00e9"}]},
                              content_type="application/vnd.kafka.binary.v2+json")
    assert status == 422, body
    assert offsets(c, topic)["end_offset"] == 0


# ------------------------------------------------------------------------------------------------ 3. limits


def test_a_million_tiny_json_records_are_refused_quickly(c: LocalProcessBackend) -> None:
    topic = new_topic(c)
    body = b'{"records": [' + b",".join([b'{"value":1}'] * 1_000_000) + b"]}"
    started = time.monotonic()
    status, answer, _ = request("POST", f"{url(c)}/topics/{topic}/partitions/0", raw=body, content_type=JSON_V2,
                                timeout=2 * CAPPED_S)
    assert status == 400 and answer["error"] == "POLICY_VIOLATION", answer
    # Refused on the record count after one parse of the 12 MB body (a second or so on a healthy machine), not
    # after handling a million records; CAPPED_S leaves a loaded machine a wide margin.
    assert time.monotonic() - started < CAPPED_S
    assert offsets(c, topic)["end_offset"] == 0
    assert request("GET", f"{url(c)}/health")[1]["status"] == "ok"


def test_a_gzip_bomb_is_refused_on_append(c: LocalProcessBackend) -> None:
    topic = new_topic(c)
    bomb = craft_batch(gzip_bomb(256 << 20), attributes=GZIP)
    assert len(bomb) < 1 << 20
    lead = url(c, leader(c, topic))
    status, body, _ = request("POST", f"{lead}/topics/{topic}/partitions/0/batches", raw=bomb, content_type=BATCHES)
    assert status == 413, body
    assert offsets(c, topic)["end_offset"] == 0


def test_partition_counts_are_capped(c: LocalProcessBackend) -> None:
    cluster = cid(c)
    for count in (21, 100_000, 2**31 - 1):
        status, body, _ = request("POST", f"{url(c)}/v3/clusters/{cluster}/topics",
                                  {"topic_name": f"big-{count}", "partitions_count": count, "replication_factor": 1})
        assert status == 400, body
    for count in (2**31, -1, "5", 1.5):
        status, body, _ = request("POST", f"{url(c)}/v3/clusters/{cluster}/topics",
                                  {"topic_name": "big", "partitions_count": count})
        assert status == 400, (count, body)
    topic = new_topic(c)
    status, body, _ = request("PATCH", f"{url(c)}/v3/clusters/{cluster}/topics/{topic}", {"partitions_count": 21})
    assert status == 400, body
    assert len(metadata(url(c), topic)["partitions"]) == 1


def test_config_names_and_value_sizes_are_checked(c: LocalProcessBackend) -> None:
    topic = new_topic(c)
    base = f"{url(c)}/v3/clusters/{cid(c)}/topics/{topic}/configs"
    status, body, _ = request("PUT", f"{base}/retention.ms", {"value": "1" * 2000})
    assert status == 400, body
    status, body, _ = request("PUT", f"{base}/no.such.config", {"value": "1"})
    assert status == 400, body
    status, body, _ = request("POST", f"{base}:alter", {"data": [{"name": "retention.ms", "value": "x" * 5000}]})
    assert status == 400, body
    assert c.zk_client().get_topic_config(topic) == {}


def test_config_change_notifications_are_purged(c: LocalProcessBackend) -> None:
    topic = new_topic(c)
    status, _, _ = request("PUT", f"{url(c)}/v3/clusters/{cid(c)}/topics/{topic}/configs/retention.ms",
                           {"value": "100000"})
    assert status == 204
    zk = c.zk_client()
    assert zk.get_config_changes()
    assert zk.purge_config_changes() == 0  # younger than 15 minutes: kept
    assert zk.purge_config_changes(max_age_ms=0, now_ms=int(time.time() * 1000) + 60_000) > 0
    assert zk.get_config_changes() == []


def test_long_polls_are_capped(c: LocalProcessBackend) -> None:
    topic = new_topic(c)
    started = time.monotonic()
    status, body, _ = request("GET", f"{url(c)}/topics/{topic}/partitions/0/records?offset=0&timeout=1000000000",
                              accept=JSON_V2, timeout=2 * CAPPED_S)
    assert status == 200 and body["records"] == []
    assert time.monotonic() - started < CAPPED_S  # the cap is 1.5 s in this cluster; 11 days were asked for


def test_slow_partial_requests_are_cut_off(c: LocalProcessBackend) -> None:
    host, port = urllib.parse.urlsplit(url(c)).hostname, urllib.parse.urlsplit(url(c)).port
    with socket.create_connection((host, port), timeout=2 * CAPPED_S) as s:  # half a request head, then nothing
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        started = time.monotonic()
        assert s.recv(1024) == b""
        assert time.monotonic() - started < CAPPED_S  # the header timeout is 1 s
    with socket.create_connection((host, port), timeout=2 * CAPPED_S) as s:  # a head, then half a body
        s.sendall(b"POST /topics/x HTTP/1.1\r\nHost: x\r\nContent-Type: application/vnd.kafka.json.v2+json\r\n"
                  b"Content-Length: 1000\r\n\r\n{\"records\": [")
        started = time.monotonic()
        answer = s.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert time.monotonic() - started < CAPPED_S  # the body timeout is 1.5 s


def test_forwarded_long_polls_share_a_bounded_pool(c: LocalProcessBackend) -> None:
    topic = new_topic(c)
    lead = leader(c, topic)
    other = next(b for b in c.broker_ids() if b != lead)
    target = f"{url(c, other)}/topics/{topic}/partitions/0/records?offset=0&timeout=1500"
    other_pid, lead_port = c.broker_pid(other), urllib.parse.urlsplit(url(c, lead)).port
    assert other_pid is not None

    def to_leader() -> int:  # connections the forwarding broker holds open to the leader
        mine = socket_inodes(other_pid)
        return sum(1 for t in tcp_sockets() if t.inode in mine and t.remote_port == lead_port
                   and t.state == ESTABLISHED)

    peak = 0
    with concurrent.futures.ThreadPoolExecutor(40) as pool:
        futures = [pool.submit(lambda: request("GET", target, accept=JSON_V2)[0]) for _ in range(40)]
        while not all(f.done() for f in futures):
            peak = max(peak, to_leader())
            time.sleep(0.01)  # sample, without spinning a core the brokers need
        results = [f.result() for f in futures]
    assert all(s == 200 for s in results), results
    # 8 pooled forwarding connections, plus the replica fetchers' own (a few): never one per long-poll
    assert peak < 25, peak


# ----------------------------------------------------------------------------------------- 4. binary path


@pytest.mark.parametrize("name, batch", [
    pytest.param("garbage records", craft_batch(b"\xff" * 40), id="garbage records"),
    pytest.param("codec 5", craft_batch(records_block(), attributes=5), id="codec 5"),
    pytest.param("fake gzip data", craft_batch(b"\x1f\x8b\x08 not gzip", attributes=GZIP), id="fake gzip data"),
    pytest.param("2^31-1 records", craft_batch(records_block(), count=2**31 - 1), id="2^31-1 records"),
    pytest.param("control batch", craft_batch(records_block(), attributes=0x20), id="control batch"),
    pytest.param("transactional batch", craft_batch(records_block(), attributes=0x10), id="transactional batch"),
    pytest.param("old timestamp", craft_batch(records_block(ts=1000), first_ts=1000), id="old timestamp"),
])
def test_poison_batches_are_refused_and_reads_keep_working(c: LocalProcessBackend, name: str, batch: bytes) -> None:
    topic = new_topic(c, message_timestamp_difference_max_ms="3600000")
    lead = url(c, leader(c, topic))
    base = f"{lead}/topics/{topic}/partitions/0"
    status, body, _ = request("POST", f"{base}/batches", raw=batch, content_type=BATCHES)
    assert 400 <= status < 500, (name, status, body)
    good = encode_batch([(None, b'{"ok": 1}', int(time.time() * 1000), ())])
    status, body, _ = request("POST", f"{base}/batches", raw=good, content_type=BATCHES)
    assert status == 200 and body["base_offset"] == 0, body
    for accept in (JSON_V2, "application/vnd.kafka.binary.v2+json"):
        status, body, _ = request("GET", f"{base}/records?offset=0", accept=accept)
        assert status == 200 and len(body["records"]) == 1, body


def test_json_timestamps_outside_the_allowed_difference_are_refused(c: LocalProcessBackend) -> None:
    topic = new_topic(c, message_timestamp_difference_max_ms="3600000")
    status, body, _ = request("POST", f"{url(c)}/topics/{topic}/partitions/0",
                              {"records": [{"value": 1}, {"value": 2, "timestamp": 1000}]}, content_type=JSON_V2)
    assert status == 422 and body["error"] == "INVALID_TIMESTAMP", body
    assert offsets(c, topic)["end_offset"] == 0


# -------------------------------------------------------------------------------- 5. data as sent, v3 admin


def test_json_values_are_stored_as_sent(c: LocalProcessBackend) -> None:
    topic = new_topic(c)
    value = '{"n": 123456789012345678901234567890, "a": 1, "a": 2, "f": 1.10}'
    status, body = send_raw(url(c), "POST", f"/topics/{topic}/partitions/0",
                            f'{{"records": [{{"key": [1, 2], "value": {value}}}]}}'.encode(),
                            {"Content-Type": JSON_V2})
    assert status == 200, body
    status, raw, _ = raw_get(url(c), f"/topics/{topic}/partitions/0/records?offset=0", {"Accept": JSON_V2})
    assert status == 200
    assert b'"value":{"n":123456789012345678901234567890,"a":1,"a":2,"f":1.10}' in raw, raw
    status, raw, _ = raw_get(url(c), f"/topics/{topic}/partitions/0/records?offset=0",
                             {"Accept": "application/vnd.kafka.binary.v2+json"})
    stored = json.loads(raw)["records"][0]["value"]
    assert base64.b64decode(stored) == b'{"n":123456789012345678901234567890,"a":1,"a":2,"f":1.10}'


def test_v3_admin_takes_only_json(c: LocalProcessBackend) -> None:
    name = f"plain-{uuid.uuid4().hex[:6]}"
    body = json.dumps({"topic_name": name, "partitions_count": 1}).encode()
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        status, answer = send_raw(url(c), "POST", f"/v3/clusters/{cid(c)}/topics", body, {"Content-Type": ctype})
        assert status == 415, (ctype, answer)
    assert request("GET", f"{url(c)}/topics/{name}")[0] == 404


def test_405_names_the_allowed_methods(c: LocalProcessBackend) -> None:
    status, _, headers = request("PUT", f"{url(c)}/topics", {"x": 1})
    assert status == 405 and "GET" in headers.get("Allow", ""), headers


def test_links_use_the_advertised_url_not_the_host_header(c: LocalProcessBackend) -> None:
    status, raw, _ = raw_get(url(c), "/v3/clusters", {"Host": "evil.example:666"})
    assert status == 200 and b"evil.example" not in raw
    assert url(c).encode() in raw


GARBAGE_ROUNDS = 10  # each kind of garbage this many times (a connection each): what one costs, repeated


def test_malformed_requests_write_no_tracebacks(c: LocalProcessBackend) -> None:
    """Garbage on the wire and requests that fail parsing cost at most a short line each in the broker's log."""
    log_path = c.cluster.slots[1].log_path
    before = log_path.stat().st_size
    host, port = urllib.parse.urlsplit(url(c)).hostname, urllib.parse.urlsplit(url(c)).port
    kinds = (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" * 10, b"GET / HTTP/9.9\r\n\r\n",
             b"POST /topics/x HTTP/1.1\r\nContent-Length: -5\r\n\r\n", b"GET /topics/%ZZ HTTP/1.1\r\nHost: x\r\n\r\n")
    for garbage in kinds * GARBAGE_ROUNDS:
        with socket.create_connection((host, port), timeout=10) as s:
            s.sendall(garbage)
            s.settimeout(10)
            with contextlib.suppress(OSError):
                s.recv(4096)
    grown = log_path.read_bytes()[before:]
    assert b"Traceback" not in grown, grown[:2000]
    assert len(grown) < len(kinds) * GARBAGE_ROUNDS * 300, len(grown)  # a short line each at most


# ------------------------------------------------------------------------------------------------- memory


def test_zz_broker_memory_stayed_bounded(c: LocalProcessBackend) -> None:
    """After every hostile request above: each broker's peak resident set (VmHWM) is under 500 MB."""
    for b in c.broker_ids():
        pid = c.broker_pid(b)
        assert pid is not None, f"broker {b} died"
        text = Path(f"/proc/{pid}/status").read_text()
        status = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        peak_kb = int(status["VmHWM"].split()[0])
        print(f"broker {b}: peak RSS {peak_kb // 1024} MB")
        assert peak_kb < RSS_LIMIT_KB, f"broker {b} peaked at {peak_kb // 1024} MB"


def test_admin_changes_not_confirmed_in_time_answer_202(c: LocalProcessBackend) -> None:
    """Create, PATCH and DELETE whose wait expires answer 202 with where to check, never a success."""
    cluster = cid(c)
    name = f"pending-{uuid.uuid4().hex[:6]}"
    status, body, headers = request("POST", f"{url(c)}/v3/clusters/{cluster}/topics?timeout_ms=0",
                                    {"topic_name": name, "partitions_count": 2, "replication_factor": 1})
    assert status == 202 and body["status"] == "PENDING", body
    assert headers["Location"].startswith(url(c)) and headers["Location"].endswith(f"/topics/{name}")
    wait_until(lambda: request("GET", headers["Location"])[0] == 200, SLOW_MACHINE_S, "the topic to exist")
    wait_until(lambda: all(p["leader"] >= 0 for p in metadata(url(c), name)["partitions"]), SLOW_MACHINE_S, "leaders")
    status, body, _ = request("PATCH", f"{url(c)}/v3/clusters/{cluster}/topics/{name}?timeout_ms=0",
                              {"partitions_count": 4})
    assert status == 202, body
    status, body, _ = request("DELETE", f"{url(c)}/v3/clusters/{cluster}/topics/{name}?timeout_ms=0")
    assert status in (202, 204), body  # 204 only if the controller was faster than the check
    wait_until(lambda: request("GET", f"{url(c)}/topics/{name}")[0] == 404, SLOW_MACHINE_S, "the topic to be deleted")
