"""Plain blocking HTTP helpers for tests: real requests over sockets, no client library in between."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from tests.harness.wait import SLOW_MACHINE_S, wait_until

V2 = "application/vnd.kafka.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"


def request(method: str, url: str, body: Any = None, *, content_type: str = "application/json",
            accept: str | None = None, timeout: float = 30.0,
            raw: bytes | None = None) -> tuple[int, Any, dict[str, str]]:
    """(status, parsed JSON body or raw bytes, headers); HTTP errors are returned, not raised."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", content_type)
    if accept:
        req.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, payload, headers = resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as e:
        status, payload, headers = e.code, e.read(), dict(e.headers)
    ctype = headers.get("Content-Type", "")
    if "json" in ctype and payload:
        return status, json.loads(payload), headers
    return status, payload, headers


def create_topic(url: str, name: str, partitions: int = 1, replication_factor: int = 1,
                 configs: dict[str, str] | None = None, *, seen_by: list[str] | None = None,
                 timeout_ms: int | None = None) -> dict[str, Any]:
    """Create a topic and wait until every broker in ``seen_by`` knows a leader for each partition
    (``timeout_ms``: how long the creation itself may take, the broker's default when None)."""
    status, clusters, _ = request("GET", f"{url}/v3/clusters")
    assert status == 200, clusters
    cid = clusters["data"][0]["cluster_id"]
    body = {"topic_name": name, "partitions_count": partitions, "replication_factor": replication_factor,
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}
    wait = "" if timeout_ms is None else f"?timeout_ms={timeout_ms}"
    status, topic, _ = request("POST", f"{url}/v3/clusters/{cid}/topics{wait}", body)
    assert status == 201, topic
    for other in seen_by or []:
        def leaders_known(broker: str = other) -> bool:
            return all(p["leader"] >= 0 for p in metadata(broker, name)["partitions"] or [{"leader": -1}])

        wait_until(leaders_known, SLOW_MACHINE_S, f"{other} to see a leader for each partition of {name}",
                   interval=0.02)
    return topic


def metadata(url: str, topic: str) -> dict[str, Any]:
    status, body, _ = request("GET", f"{url}/metadata?topics={topic}")
    assert status == 200, body
    return body["topics"][0]


def partition_state(url: str, topic: str, partition: int = 0) -> dict[str, Any]:
    return metadata(url, topic)["partitions"][partition]


def produce(url: str, topic: str, partition: int, values: list[Any], *, acks: str = "all", key: Any = None,
            timeout_ms: int = 10000) -> tuple[int, Any]:
    records = [{"key": key, "value": v} for v in values]
    path = f"/topics/{topic}/partitions/{partition}?acks={acks}&timeout_ms={timeout_ms}"
    status, body, _ = request("POST", f"{url}{path}",
                              {"records": records}, content_type=JSON_V2, timeout=timeout_ms / 1000 + 10)
    return status, body


def produce_with_failover(cluster: Any, topic: str, partition: int, value: Any, errors: list[str], *,
                          key: Any = None, deadline_s: float = SLOW_MACHINE_S) -> bool:
    """Produce one record acks=all, trying each live broker in turn (any broker forwards to the leader) until one
    acknowledges it or ``deadline_s`` passes; whether it was acknowledged. Each refusal is appended to ``errors``
    (the caller can tell a retried record by the list growing)."""
    deadline = time.monotonic() + deadline_s
    attempt = 0
    while True:
        live = [b for b in cluster.broker_ids() if cluster.broker_pid(b) is not None]
        url = cluster.broker_url(live[attempt % len(live)])
        attempt += 1
        try:
            status, body = produce(url, topic, partition, [value], key=key, timeout_ms=5000)
        except OSError as e:
            status, body = 0, str(e)
        if status == 200 and body["offsets"][0]["error_code"] is None:
            return True
        errors.append(f"{status} {body}"[:200])
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def read_all(url: str, topic: str, partition: int = 0, *, start: int = 0) -> list[dict[str, Any]]:
    """Every record from ``start`` to the high watermark, through the JSON read path."""
    out: list[dict[str, Any]] = []
    offset = start
    while True:
        status, body, _ = request("GET", f"{url}/topics/{topic}/partitions/{partition}/records?offset={offset}",
                                  accept=JSON_V2)
        assert status == 200, body
        out.extend(body["records"])
        if body["next_offset"] >= body["high_watermark"]:
            return out
        offset = body["next_offset"]


def v2_call(method: str, url: str, body: Any = None, accept: str | None = None,
            timeout: float = SLOW_MACHINE_S) -> tuple[int, Any]:
    """A REST Proxy v2 call (v2 request and answer types unless ``accept`` says): (status, parsed body)."""
    status, payload, _ = request(method, url, body, content_type=V2, accept=accept or V2, timeout=timeout)
    return status, payload


def read_records(base: str, n: int, accept: str = JSON_V2, within_s: float = SLOW_MACHINE_S) -> list[dict[str, Any]]:
    """A consumer instance's records until ``n`` came back: each call a 1 s long-poll, the whole within
    ``within_s``."""
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + within_s
    while len(out) < n:
        assert time.monotonic() < deadline, f"got {len(out)} of {n} records: {out}"
        status, records = v2_call("GET", f"{base}/records?timeout=1000", accept=accept)
        assert status == 200, records
        out.extend(records)
    return out


def stable_group(url: str, group: str, held: dict[tuple[str, int], str], what: str) -> dict[str, Any]:
    """GET /groups/G once the group is Stable and each partition in ``held`` is shown assigned to the member
    whose client id ``held`` names (and no other): the body. Waits up to SLOW_MACHINE_S."""
    def described() -> dict[str, Any] | None:
        status, body, _ = request("GET", f"{url}/groups/{group}")
        assert status == 200, body
        shown = {(t, p): m["client_id"] for m in body["members"] for t, p in m["assignment"]}
        return body if body["state"] == "Stable" and shown == held else None

    body = wait_until(described, SLOW_MACHINE_S, what)
    assert body is not None
    return body
