"""A REST produce right after a v3 topic creation succeeds: 100 topics created and produced to at once.

Why this test: a new user's first script creates a topic and produces to it at once, through whichever broker
the load balancer picks. Brokers learn of the topic, of its leaders and of their own leaderships a few
milliseconds apart, and each of those windows used to fail the produce per record (40404 "has no leader right
now", 40903 "broker 2 is not the leader of t3-0; broker 2 is", or a 404 for the whole request). Produce and
read now wait for the leader within the request's timeout, as Confluent REST Proxy's embedded producer does.
Running the 100 create-then-produce sequences concurrently, each through random brokers, makes those windows
overlap with real load instead of relying on luck; the test asserts not one per-record error.
"""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.conftest import MakeCluster
from tests.harness.cluster import LocalProcessBackend
from tests.harness.http import JSON_V2, request
from tests.harness.wait import SLOW_MACHINE_S

pytestmark = pytest.mark.cluster

TOPICS = 100
PARTITIONS = 2
# The read-back's long-poll: it also waits for the partition's leader, which with 100 creations at once on a loaded
# machine may take seconds, so the broker's cap on a long-poll (fetch_max_wait_ms's default).
READ_WAIT_MS = 30_000


def _create_then_produce(cluster: LocalProcessBackend, cluster_id: str, n: int) -> dict[str, Any]:
    """Create topic ``t{n}`` through one random broker, then at once produce to it and read it through others."""
    rng = random.Random(n)
    brokers = cluster.broker_ids()
    name = f"t{n}"
    body = {"topic_name": name, "partitions_count": PARTITIONS, "replication_factor": 2}
    creator = cluster.broker_url(rng.choice(brokers))
    status, created, _ = request("POST", f"{creator}/v3/clusters/{cluster_id}/topics", body, timeout=2 * SLOW_MACHINE_S)
    assert status == 201, (name, status, created)

    producer = cluster.broker_url(rng.choice(brokers))
    records = [{"key": f"k{i}", "value": {"n": n, "i": i}} for i in range(4)] + [{"value": "keyless"}]
    # The produce waits for the leader within its timeout: a few ms when healthy, longer with 100 of these at once
    # on a loaded machine.
    status, produced, _ = request("POST", f"{producer}/topics/{name}?timeout_ms={int(SLOW_MACHINE_S * 1000)}",
                                  {"records": records}, content_type=JSON_V2, timeout=2 * SLOW_MACHINE_S)
    result: dict[str, Any] = {"topic": name, "status": status, "body": produced, "via": (creator, producer)}
    if status != 200:
        return result
    result["errors"] = [o for o in produced["offsets"] if o["error_code"] is not None]

    # Read partition 0 back right away through yet another random broker (a long-poll bounds its wait).
    reader = cluster.broker_url(rng.choice(brokers))
    status, read, _ = request("GET", f"{reader}/topics/{name}/partitions/0/records?offset=0&timeout={READ_WAIT_MS}",
                              accept=JSON_V2, timeout=READ_WAIT_MS / 1000 + SLOW_MACHINE_S)
    result["read_status"] = status
    result["read_error"] = None if status == 200 else read
    return result


def test_100_topics_created_over_v3_and_produced_to_at_once_have_no_per_record_error(
    make_cluster: MakeCluster,
) -> None:
    cluster = make_cluster(brokers=3)
    status, clusters, _ = request("GET", f"{cluster.broker_url(1)}/v3/clusters")
    assert status == 200, clusters
    cluster_id = clusters["data"][0]["cluster_id"]

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=TOPICS) as pool:
        results = list(pool.map(lambda n: _create_then_produce(cluster, cluster_id, n), range(TOPICS)))
    elapsed = time.monotonic() - started

    failed_requests = [r for r in results if r["status"] != 200]
    record_errors = [(r["topic"], e) for r in results for e in r.get("errors", [])]
    failed_reads = [(r["topic"], r["read_error"]) for r in results if r.get("read_status", 200) != 200]
    print(f"{TOPICS} topics created and produced to in {elapsed:.1f} s")
    assert not failed_requests, failed_requests[:5]
    assert not record_errors, f"{len(record_errors)} per-record errors, e.g. {record_errors[:5]}"
    assert not failed_reads, failed_reads[:5]
    offsets = [o for r in results for o in r["body"]["offsets"]]
    assert len(offsets) == TOPICS * 5 and all(o["offset"] is not None for o in offsets)
