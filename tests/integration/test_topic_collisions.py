"""Topics whose names differ only in '.' and '_' (issue 24, point 6): of two such creations racing through
different brokers, exactly one succeeds and the other is INVALID_TOPIC_EXCEPTION naming the winner.

Why this test: Kafka refuses ``a_b`` beside ``a.b`` because their metric names collide ("Topic 'a_b' collides
with existing topics: a.b"). Odradek used to check the existing names and then create, so two creations sent to
two brokers at the same moment both passed the check and both were created (9 tries in 10). The claim znode
keyed by the name with '.' made '_' (zk/znodes.py ``TopicNameClaimZNode``), created in the same multi as the
topic, makes the check ZooKeeper's: the second multi fails on the claim. Deletion drops the claim in the
controller's multi, so the other name can then be created, and a topic from before the claims existed (no claim
znode) still blocks its colliders and is still deleted cleanly.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.conftest import MakeCluster
from tests.harness.cluster import LocalProcessBackend
from tests.harness.http import request
from tests.harness.wait import SLOW_MACHINE_S
from zk.znodes import TopicNameClaimZNode

confluent_kafka = pytest.importorskip("confluent_kafka", reason="pip install confluent-kafka (the test extra)")
from confluent_kafka import KafkaError, KafkaException  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = pytest.mark.cluster

ROUNDS = 10
INVALID_TOPIC = (400, 40003)  # InvalidTopicError over REST, as Confluent's REST Proxy answers a 400 for it
KAFKA_INVALID_TOPIC = 17  # INVALID_TOPIC_EXCEPTION


def _cluster_id(url: str) -> str:
    status, clusters, _ = request("GET", f"{url}/v3/clusters")
    assert status == 200, clusters
    return str(clusters["data"][0]["cluster_id"])


def _create(url: str, cluster_id: str, name: str) -> tuple[int, Any]:
    body = {"topic_name": name, "partitions_count": 1, "replication_factor": 2}
    status, answer, _ = request("POST", f"{url}/v3/clusters/{cluster_id}/topics", body, timeout=2 * SLOW_MACHINE_S)
    return status, answer


def _delete(url: str, cluster_id: str, name: str) -> None:
    status, answer, _ = request("DELETE", f"{url}/v3/clusters/{cluster_id}/topics/{name}", timeout=2 * SLOW_MACHINE_S)
    assert status == 204, (name, status, answer)


def _race(calls: list[Any]) -> list[Any]:
    """Run ``calls`` in threads released together, so that every request is in flight at the same time."""
    start = threading.Barrier(len(calls))

    def run(call: Any) -> Any:
        start.wait()
        return call()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(run, calls))


def _collision(answer: Any, name: str, winner: str) -> bool:
    return isinstance(answer, dict) and answer.get("error_code") == INVALID_TOPIC[1] and \
        answer.get("message") == f"Topic '{name}' collides with existing topics: {winner}"


def _kafka_error(future: Any) -> int:
    """0 if the creation succeeded, else its Kafka error code."""
    try:
        future.result(timeout=SLOW_MACHINE_S)
    except KafkaException as e:
        return int(e.args[0].code())
    return 0


def test_racing_colliding_creations_through_two_brokers_create_exactly_one(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=3)
    brokers = cluster.broker_ids()
    cluster_id = _cluster_id(cluster.broker_url(brokers[0]))
    zk = cluster.zk_client()

    winners: dict[int, tuple[str, str, str]] = {}  # round -> (winner, loser, the broker the loser went to)
    for n in range(ROUNDS):
        names = [f"race.{n}", f"race_{n}"] if n % 2 == 0 else [f"race_{n}", f"race.{n}"]
        urls = [cluster.broker_url(brokers[n % 3]), cluster.broker_url(brokers[(n + 1) % 3])]
        results = _race([lambda u=u, t=t: _create(u, cluster_id, t) for u, t in zip(urls, names, strict=True)])
        statuses = sorted(status for status, _ in results)
        assert statuses == [201, INVALID_TOPIC[0]], (n, names, results)
        won = 0 if results[0][0] == 201 else 1
        winner, loser = names[won], names[1 - won]
        assert _collision(results[1 - won][1], loser, winner), (n, results)
        winners[n] = (winner, loser, urls[1 - won])

    topics = set(zk.get_topics())
    for n, (winner, loser, _) in winners.items():
        assert winner in topics and loser not in topics, (n, winner, loser, sorted(topics))

    # Over Kafka's protocol too: CreateTopics for a name colliding with an existing topic is error 17.
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    winner, loser, _ = winners[0]
    assert _kafka_error(admin.create_topics([NewTopic(loser, 1, 1)])[loser]) == KAFKA_INVALID_TOPIC
    assert KafkaError.TOPIC_EXCEPTION == KAFKA_INVALID_TOPIC

    # Deleting the winner releases the name: the other one can then be created, and it claims the name in turn.
    for n, (winner, loser, loser_url) in winners.items():
        _delete(cluster.broker_url(brokers[(n + 2) % 3]), cluster_id, winner)
        status, answer = _create(loser_url, cluster_id, loser)
        assert status == 201, (n, loser, status, answer)
        status, answer = _create(cluster.broker_url(brokers[n % 3]), cluster_id, winner)
        assert (status, answer.get("error_code")) == INVALID_TOPIC and _collision(answer, winner, loser), answer
    topics = set(zk.get_topics())
    assert all(loser in topics and winner not in topics for winner, loser, _ in winners.values()), sorted(topics)


def test_racing_colliding_create_topics_over_kafka_create_exactly_one(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=3)
    brokers = cluster.broker_ids()
    admins = [AdminClient({"bootstrap.servers": cluster.kafka_address(b)}) for b in brokers[:2]]
    for n in range(3):
        names = [f"krace.{n}", f"krace_{n}"]
        futures = _race([lambda a=a, t=t: a.create_topics([NewTopic(t, 1, 2)])[t]
                         for a, t in zip(admins, names, strict=True)])
        codes = [_kafka_error(f) for f in futures]
        assert sorted(codes) == [0, KAFKA_INVALID_TOPIC], (n, codes)


def test_a_topic_without_a_claim_still_blocks_its_colliders_and_is_deleted(make_cluster: MakeCluster) -> None:
    """A cluster from before the claims: its topics have no claim znode (removed here by hand)."""
    cluster: LocalProcessBackend = make_cluster(brokers=3)
    url = cluster.broker_url(cluster.broker_ids()[0])
    cluster_id = _cluster_id(url)
    zk = cluster.zk_client()

    def holder(claim: str) -> str | None:
        stat = zk.retrying(zk.kazoo.exists, claim)
        return None if stat is None else TopicNameClaimZNode.decode(zk.retrying(zk.kazoo.get, claim)[0])

    assert _create(url, cluster_id, "old.topic")[0] == 201
    claim = TopicNameClaimZNode.path("old.topic")
    assert holder(claim) == "old.topic"
    zk.retrying(zk.kazoo.delete, claim)

    status, answer = _create(cluster.broker_url(cluster.broker_ids()[1]), cluster_id, "old_topic")
    assert (status, answer.get("error_code")) == INVALID_TOPIC and _collision(answer, "old_topic", "old.topic")
    assert holder(claim) is None  # the refused creation left nothing behind

    _delete(url, cluster_id, "old.topic")
    assert _create(url, cluster_id, "old_topic")[0] == 201
    assert holder(claim) == "old_topic"

    # A claim whose topic is gone (left by hand or by an older broker) does not block the name forever.
    stale = TopicNameClaimZNode.path("gone.topic")
    zk.retrying(zk.kazoo.create, stale, TopicNameClaimZNode.encode("gone.topic"))
    assert _create(url, cluster_id, "gone_topic")[0] == 201
    assert holder(stale) == "gone_topic"
