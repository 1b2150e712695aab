"""Paths with a trailing slash are the same resource (issue 24, point 3).

Confluent's REST Proxy serves its resources through JAX-RS (Jersey), whose matching ignores one trailing slash
(``@Path("/consumers")`` answers ``/consumers/g`` and ``/consumers/g/`` alike: confluentinc/kafka-rest,
kafka-rest/src/main/java/io/confluent/kafkarest/resources/v2/ConsumersResource.java), so clients written for it
send either form. Each request below went unanswered (404) before; the whole consumer-instance flow now runs
with trailing slashes, answered in place (no redirect a client would have to follow).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from tests.conftest import MakeCluster
from tests.harness.cluster import LocalProcessBackend
from tests.harness.http import JSON_V2, create_topic, produce
from tests.harness.http import v2_call as call
from tests.harness.wait import SLOW_MACHINE_S

pytestmark = pytest.mark.cluster



@pytest.fixture
def cluster(make_cluster: MakeCluster) -> LocalProcessBackend:
    return make_cluster(brokers=1)


def test_the_consumer_instance_flow_with_trailing_slashes(cluster: LocalProcessBackend) -> None:
    url = cluster.broker_url(1)
    topic = f"slash-{uuid.uuid4().hex[:6]}"
    create_topic(url, topic, partitions=1)
    produce(url, topic, 0, [{"n": i} for i in range(5)])
    status, metadata = call("GET", f"{url}/topics/{topic}/")
    assert status == 200 and metadata["name"] == topic, metadata

    status, created = call("POST", f"{url}/consumers/slash-group/", {"name": "c1", "format": "json",
                                                                       "auto.offset.reset": "earliest"})
    assert status == 200, created
    base = created["base_uri"]
    status, body = call("POST", f"{base}/subscription/", {"topics": [topic]})
    assert status == 204, body
    status, body = call("GET", f"{base}/subscription/")
    assert status == 200 and body == {"topics": [topic]}, body
    got: list[Any] = []
    deadline = time.monotonic() + SLOW_MACHINE_S
    while len(got) < 5:
        assert time.monotonic() < deadline, f"read {len(got)} of 5 records"
        status, records = call("GET", f"{base}/records/?timeout=1000", accept=JSON_V2)
        assert status == 200, records
        got.extend(r["value"]["n"] for r in records)
    assert got == list(range(5))
    status, body = call("POST", f"{base}/offsets/", {})
    assert status == 200, body
    status, body = call("DELETE", f"{base}/")
    assert status == 204, body
    status, body = call("GET", f"{base}/subscription")
    assert status == 404 and body["error_code"] == 40403, body  # deleted through the slash form


def test_an_unknown_path_with_a_slash_is_still_404_and_names_canonical_paths(cluster: LocalProcessBackend) -> None:
    status, body = call("GET", f"{cluster.broker_url(1)}/no-such-resource/")
    assert status == 404, body
    listed = body["message"].split("Documented paths: ", 1)[1].split(" (the full contract", 1)[0].split(", ")
    assert "/topics/{topic}" in listed and "/consumers/{group}" in listed, listed
    assert not [p for p in listed if p.endswith("/")] and len(listed) == len(set(listed)), listed
