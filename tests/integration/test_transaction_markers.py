"""Transaction markers and transactional batches at a real partition leader (3 brokers, RF 3, real ZooKeeper):
a late marker of a transaction that has ended (a retry, a deposed coordinator still writing) is skipped or
fenced, never ending the producer's next transaction; the HTTP batch path verifies transactional batches with
the coordinator under the request's transactional id, as the Kafka door does (KIP-890)."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from odradek import Producer
from odradek.protocol import media
from odradek.protocol.records import encode_batch
from tests.conftest import MakeCluster
from tests.harness.http import create_topic, partition_state, request
from tests.integration.test_transactions import read_json

pytestmark = pytest.mark.cluster

TOPIC = "markers"


def _cluster(make_cluster: MakeCluster) -> tuple[Any, str, str]:
    """(cluster, any broker's URL, partition 0's leader's URL)."""
    cluster = make_cluster(brokers=3)
    urls = [cluster.broker_url(b) for b in cluster.broker_ids()]
    create_topic(urls[0], TOPIC, 1, 3, {"min.insync.replicas": "2"}, seen_by=urls)
    leader = partition_state(urls[0], TOPIC, 0)["leader"]
    return cluster, urls[0], cluster.broker_url(leader)


def _read(url: str, isolation: str) -> list[bytes]:
    return [base64.b64decode(v) for v in read_json(url, TOPIC, 0, isolation)]


def _marker(leader_url: str, state: dict[str, Any], commit: bool, coordinator_epoch: int) -> tuple[int, Any]:
    status, body, _ = request("POST", f"{leader_url}/transactions/markers", {
        "topic": TOPIC, "partition": 0, "producer_id": state["producer_id"],
        "producer_epoch": state["producer_epoch"], "commit": commit, "coordinator_epoch": coordinator_epoch})
    return status, body


def test_a_late_marker_of_an_ended_transaction_never_ends_the_next_one(make_cluster: MakeCluster) -> None:
    _c, url, leader_url = _cluster(make_cluster)
    p = Producer(url, transactional_id="t-late", linger_ms=1)
    p.init_transactions()
    p.begin_transaction()
    p.send(TOPIC, b"first", partition=0).result(30)
    p.commit_transaction()
    _, first, _ = request("GET", f"{url}/transactions/t-late")  # the first transaction's coordinator epoch
    assert first["coordinator_epoch"] >= 1, first
    p.begin_transaction()
    p.send(TOPIC, b"second", partition=0).result(30)  # the next transaction is open on the partition
    # The first transaction's COMMIT marker once more, as a retry or a deposed coordinator would write it late:
    # skipped (offset -1). Written, it would end the open transaction, whose abort then left "second" readable.
    assert _marker(leader_url, first, True, first["coordinator_epoch"]) == (200, {"offset": -1})
    status, body = _marker(leader_url, first, True, first["coordinator_epoch"] - 1)  # an older one still
    assert (status, body["error_code"]) == (409, 40926), body
    assert _read(url, "read_committed") == [b"first"]  # the open transaction holds the LSO
    p.abort_transaction()
    assert _read(url, "read_committed") == [b"first"]
    assert _read(url, "read_uncommitted") == [b"first", b"second"]
    p.begin_transaction()  # and the producer goes on: its next marker has a newer coordinator epoch
    p.send(TOPIC, b"third", partition=0).result(30)
    p.commit_transaction()
    assert _read(url, "read_committed") == [b"first", b"third"]
    p.close()


def _post_batch(leader_url: str, batch: bytes, tid: str | None) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(f"{leader_url}/topics/{TOPIC}/partitions/0/batches?acks=all", data=batch,
                                 method="POST", headers={"Content-Type": media.BATCHES})
    if tid is not None:
        req.add_header(media.TRANSACTIONAL_ID, tid)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_the_batch_path_verifies_transactional_batches_with_the_coordinator(make_cluster: MakeCluster) -> None:
    _c, url, leader_url = _cluster(make_cluster)
    status, ids, _ = request("POST", f"{url}/transactions/t-raw/init", {"transaction_timeout_ms": 60_000})
    assert status == 200, ids
    batch = encode_batch([(None, b"stray", int(time.time() * 1000), ())], producer_id=ids["producer_id"],
                         producer_epoch=ids["producer_epoch"], base_sequence=0, is_transactional=True)
    status, body = _post_batch(leader_url, batch, None)  # no transactional id: Kafka refuses it too
    assert (status, body["error_code"] // 100) == (403, 403), body
    status, body = _post_batch(leader_url, batch, "t-raw")  # the partition was never added to a transaction
    assert status == 409 and "not added to the transaction" in body["message"], body
    status, body, _ = request("POST", f"{url}/transactions/t-raw/partitions", {
        "producer_id": ids["producer_id"], "producer_epoch": ids["producer_epoch"], "partitions": [[TOPIC, 0]]})
    assert status in (200, 204), body
    status, body = _post_batch(leader_url, batch, "t-raw")
    assert status == 200 and body["base_offset"] == 0, body
    assert _read(url, "read_committed") == []  # open: nothing below the LSO yet
