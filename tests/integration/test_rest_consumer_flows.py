"""Confluent REST Proxy v2 consumer-instance flows as third-party clients run them (issue 24, points 1 and 2), on a
real 3-broker cluster: a manual assignment in a group that never existed reads from ``auto.offset.reset`` (and
commits into the group id), and the read that starts a subscription's join returns the records within its own
timeout as soon as the assignment arrives."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.conftest import MakeCluster
from tests.harness.cluster import LocalProcessBackend
from tests.harness.http import JSON_V2, create_topic, produce, read_records
from tests.harness.http import v2_call as call
from tests.harness.wait import SLOW_MACHINE_S

pytestmark = pytest.mark.cluster

# A read that must answer with records as soon as they are there: a timeout (and a broker long-poll cap, which
# also bounds a forwarded read) so long that a slow join and fetch on a loaded machine never runs it out. The
# read returning only once its timeout ran out is what ANSWERED_WITHIN_S excludes: half the timeout.
READ_TIMEOUT_MS = 2 * int(SLOW_MACHINE_S * 1000)
ANSWERED_WITHIN_S = READ_TIMEOUT_MS / 1000 / 2
READ_CALL_TIMEOUT_S = READ_TIMEOUT_MS / 1000 + SLOW_MACHINE_S  # the HTTP call outlives the read's own timeout


@pytest.fixture
def cluster(make_cluster: MakeCluster) -> LocalProcessBackend:
    return make_cluster(brokers=3, broker_args=["--fetch-max-wait-ms", str(READ_TIMEOUT_MS)])


def new_instance(url: str, group: str, **config: str) -> str:
    status, created = call("POST", f"{url}/consumers/{group}", {"format": "json", **config})
    assert status == 200, created
    return str(created["base_uri"])


def test_manual_assignment_in_a_group_that_never_existed(cluster: LocalProcessBackend) -> None:
    """An assign-mode instance needs no group: its position is the group's committed offset when there is one,
    else ``auto.offset.reset`` ("no such group" and "nothing committed" alike); with ``none`` the read fails with
    the no-offset error; a commit stores the offsets under the group id, where the next instance finds them.

    Confluent: kafka-rest ``v2/KafkaConsumerState.java`` (``assign`` is ``consumer.assign``, ``commitOffsets`` is
    ``consumer.commitSync`` with the instance's ``group.id``, the read is ``consumer.poll``, which looks the
    committed offsets up and falls back to ``auto.offset.reset``), ``v2/KafkaConsumerManager.java``
    (``createConsumer`` sets ``group.id`` and ``auto.offset.reset`` on the consumer; ``readRecords``)."""
    b1, b2, b3 = (cluster.broker_url(b) for b in cluster.broker_ids())
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(b1, topic, partitions=2, replication_factor=3, seen_by=[b1, b2, b3])
    for p in (0, 1):
        status, body = produce(b1, topic, p, [{"p": p, "i": i} for i in range(4)])
        assert status == 200, body
    tps = [{"topic": topic, "partition": p} for p in (0, 1)]

    # auto.offset.reset=none and nothing committed (no group at all): the no-offset error, not GROUP_ID_NOT_FOUND.
    strict = new_instance(b2, group, **{"auto.offset.reset": "none", "auto.commit.enable": "false"})
    assert call("POST", f"{strict}/assignments", {"partitions": tps})[0] == 204
    status, body = call("GET", f"{strict}/records?timeout=1000", accept=JSON_V2)
    assert (status, body.get("error_code")) == (416, 41601), (status, body)
    assert "no reset policy" in body["message"], body
    via = strict.replace(b2, b1)  # through another broker: forwarded to the holder, the same answer
    status, body = call("GET", f"{via}/records?timeout=1000", accept=JSON_V2)
    assert (status, body.get("error_code")) == (416, 41601), (status, body)

    # earliest: every record, from the first read on (the group still does not exist).
    reader = new_instance(b3, group, **{"auto.offset.reset": "earliest", "auto.commit.enable": "false"})
    assert call("POST", f"{reader}/assignments", {"partitions": tps})[0] == 204
    status, first = call("GET", f"{reader}/records?timeout={READ_TIMEOUT_MS}", accept=JSON_V2,
                         timeout=READ_CALL_TIMEOUT_S)
    assert status == 200 and first, (status, first)
    records = first + read_records(reader, 8 - len(first))
    assert sorted((r["partition"], r["offset"]) for r in records) == [(p, o) for p in (0, 1) for o in range(4)]
    assert sorted((r["value"]["p"], r["value"]["i"]) for r in records) == [(p, i) for p in (0, 1) for i in range(4)]

    # latest (the default): the end, then what comes after it.
    tail = new_instance(b1, group, **{"auto.commit.enable": "false"})
    assert call("POST", f"{tail}/assignments", {"partitions": tps[:1]})[0] == 204
    status, body = call("GET", f"{tail}/records?timeout=500", accept=JSON_V2)
    assert (status, body) == (200, [])

    # A commit in assign mode (no body: what was returned so far) is stored under the group id...
    status, body = call("POST", f"{reader}/offsets")
    assert status == 200, body
    status, body = call("GET", f"{reader}/offsets", {"partitions": tps})
    assert status == 200 and {o["partition"]: o["offset"] for o in body["offsets"]} == {0: 4, 1: 4}, body

    # ...where an instance with auto.offset.reset=none now finds its position.
    assert produce(b1, topic, 0, [{"p": 0, "i": 4}])[0] == 200
    records = read_records(strict, 1)
    assert [(r["partition"], r["offset"]) for r in records] == [(0, 4)]
    assert [(r["partition"], r["offset"]) for r in read_records(tail, 1)] == [(0, 4)]
    for base in (strict, reader, tail):
        assert call("DELETE", base)[0] == 204


def test_the_read_that_starts_the_join_returns_the_records(cluster: LocalProcessBackend) -> None:
    """One read right after subscribing: the join and the fetch share the read's timeout, so the records come back
    in that very call, as soon as the assignment arrives (not after the whole timeout, not in the next call).

    Confluent: kafka-rest ``v2/KafkaConsumerReadTask.java`` (``doPartialRead`` polls again and again until the
    request's timeout, and the group join happens inside those polls, ``v2/KafkaConsumerState.java``
    ``getOrCreateConsumerRecords``, ``consumer.poll``), ``v2/KafkaConsumerManager.java`` (``readRecords``
    re-schedules the read task until it is done). ``fetch.min.bytes`` 1: answer as soon as a record is there."""
    b1, b2, b3 = (cluster.broker_url(b) for b in cluster.broker_ids())
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(b1, topic, partitions=2, replication_factor=3, seen_by=[b1, b2, b3])
    for p in (0, 1):
        status, body = produce(b1, topic, p, [{"p": p, "i": i} for i in range(5)])
        assert status == 200, body
    base = new_instance(b2, group, **{"auto.offset.reset": "earliest", "fetch.min.bytes": "1"})
    assert call("POST", f"{base}/subscription", {"topics": [topic]})[0] == 204

    started = time.monotonic()
    status, records = call("GET", f"{base}/records?timeout={READ_TIMEOUT_MS}", accept=JSON_V2,
                           timeout=READ_CALL_TIMEOUT_S)
    elapsed = time.monotonic() - started
    assert status == 200, records
    assert records, f"the first read answered [] after {elapsed:.1f} s"
    # The property: the call returned once the records were there, not when its timeout ran out.
    assert elapsed < ANSWERED_WITHIN_S, f"the first read took {elapsed:.1f} s of its {READ_TIMEOUT_MS} ms"
    assert all(r["topic"] == topic for r in records)
    rest = read_records(base, 10 - len(records))
    assert sorted((r["partition"], r["offset"]) for r in records + rest) == [(p, o) for p in (0, 1)
                                                                              for o in range(5)]
    assert call("DELETE", base)[0] == 204
