"""Zero-copy fetches against real brokers: the binary fetch answer (now sent with sendfile from the segment
file) is byte for byte the segment's bytes, with the same headers, for consumers and for followers."""

from __future__ import annotations

import http.client
import itertools
import urllib.parse
from pathlib import Path

import pytest

from odradek.protocol.records import encode_batch, iter_batch_headers
from tests.conftest import MakeCluster
from tests.harness.cluster import LocalProcessBackend
from tests.harness.http import create_topic, partition_state, request
from tests.harness.wait import SLOW_MACHINE_S, wait_until

pytestmark = pytest.mark.cluster

BATCHES = "application/vnd.odradek.batches.v2"
TOPIC = "zc"


def _segments(cluster: LocalProcessBackend, broker: int) -> list[bytes]:
    d = cluster.cluster.slots[broker].data_dir / f"{TOPIC}-0"
    return [p.read_bytes() for p in sorted(Path(d).glob("*.log"))]


def _produce(url: str, n: int) -> None:
    """Batches from a few hundred bytes to ~180 KB: answers both below and above SENDFILE_MIN_BYTES (128 KiB),
    i.e. both copied and sendfile'd."""
    for i in range(n):
        size = 200 if i % 3 == 0 else 9_000 * (1 + i % 10)
        batch = encode_batch([(b"k%d" % j, bytes([i % 251]) * size, 1_700_000_000_000 + i, []) for j in range(2)])
        status, body, _ = request("POST", f"{url}/topics/{TOPIC}/partitions/0/batches?acks=all", raw=batch,
                                  content_type=BATCHES)
        assert status == 200, body


def test_fetch_answers_are_the_segment_bytes(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=2)
    urls = [cluster.broker_url(b) for b in cluster.broker_ids()]
    create_topic(urls[0], TOPIC, 1, 2, {"segment.bytes": "400000", "min.insync.replicas": "2"}, seen_by=urls)
    leader = int(partition_state(urls[0], TOPIC)["leader"])
    follower = next(b for b in cluster.broker_ids() if b != leader)
    url = cluster.broker_url(leader)
    wait_until(lambda: len(partition_state(url, TOPIC)["isr"]) == 2, SLOW_MACHINE_S, "both replicas in the ISR")
    _produce(url, 40)
    segments = _segments(cluster, leader)
    assert len(segments) > 2
    everything = b"".join(segments)
    starts = {h.base_offset: pos for pos, h in iter_batch_headers(everything)}
    ends = {h.base_offset: pos + h.size for pos, h in iter_batch_headers(everything)}
    edges = [sum(map(len, segments[:i])) for i in range(len(segments) + 1)]
    bounds = list(itertools.pairwise(edges))

    # A consumer's whole-log walk: every answer is one contiguous stretch of one segment, with the old headers.
    offset, got = 0, b""
    while True:
        status, data, headers = request("GET", f"{url}/topics/{TOPIC}/partitions/0/batches?offset={offset}"
                                               "&max_bytes=150000")
        assert status == 200 and headers["Content-Type"].startswith(BATCHES)
        assert int(headers["Content-Length"]) == len(data)
        assert headers["Odradek-Leader"] == str(leader) and headers["Odradek-Log-Start-Offset"] == "0"
        assert headers["Odradek-High-Watermark"] == headers["Odradek-Log-End-Offset"]
        if not data:
            break
        pos = starts[offset]
        assert data == everything[pos:pos + len(data)]
        assert any(lo <= pos and pos + len(data) <= hi for lo, hi in bounds), "an answer spans one segment"
        got += data
        offset = max(h.next_offset for _, h in iter_batch_headers(data))
    assert got == everything
    assert offset == int(headers["Odradek-High-Watermark"])

    # An offset inside a batch answers from that batch's start; max_bytes smaller than a batch still gives one.
    status, data, _ = request("GET", f"{url}/topics/{TOPIC}/partitions/0/batches?offset=2&max_bytes=1")
    first = max(b for b in starts if b <= 2)
    assert status == 200 and data == everything[starts[first]:ends[first]]

    # Several answers on one keep-alive connection: the sendfile'd bodies do not bleed into each other.
    parsed = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)  # generous: not a property
    try:
        for off in (0, 5, 30, 0, 41):
            conn.request("GET", f"/topics/{TOPIC}/partitions/0/batches?offset={off}&max_bytes=100000")
            resp = conn.getresponse()
            body = resp.read()
            base = max(b for b in starts if b <= off)
            assert resp.status == 200 and body and everything[starts[base]:].startswith(body)
    finally:
        conn.close()

    # The follower copied the leader's log through the same path: byte-identical segments.
    wait_until(lambda: b"".join(_segments(cluster, follower)) == everything, SLOW_MACHINE_S,
               "the follower to hold the log")
