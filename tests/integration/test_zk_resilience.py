"""Issue 9's acceptance for the ZooKeeper facade, on real ZooKeeper and real brokers:

* a broker whose ZooKeeper node freezes (SIGSTOP) and then dies (SIGKILL) while the controller moves a partition's
  leadership converges to the new state within 2x the session timeout, on the same session (kazoo reconnects to
  another node; its watches, dropped with the connection, are re-armed by retried re-reads and a resync);
* while the whole ensemble is frozen for less than a session timeout, every HTTP answer is a 2xx or a retriable
  503, never a 500.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest

from odradek_local.zookeeper import HOST, ZkEnsemble
from tests.conftest import MakeCluster
from tests.harness.cluster import LocalProcessBackend
from tests.harness.http import JSON_V2, create_topic, request
from tests.harness.wait import SLOW_MACHINE_S, wait_until
from zk.client import ZkClient

pytestmark = pytest.mark.cluster

SESSION_MS = 8000
"""The victim's ZooKeeper session. kazoo gives up on a silent (frozen) node after two thirds of it and must then
reconnect to another node before the session expires: the last third is that margin (2.7 s here, room for a
loaded machine), and the convergence bound, 2 * SESSION_MS, is the property the test checks."""
HTTP_TIMEOUT_S = 30
"""An HTTP answer from a live broker: generous, since a missed answer would read as a broker that is not there."""


def health(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/health", timeout=HTTP_TIMEOUT_S) as resp:
        return json.loads(resp.read())


def zk_node_of(ensemble: ZkEnsemble, session_id: int) -> int:
    """The ensemble node serving ``session_id``.

    ZooKeeper builds a session id as ``(myid << 56) | ...`` on the server that created it, and a session stays on
    that server until its connection breaks; so for a broker that never reconnected, the top byte names its node.
    (`cons` would list connections too, but the ensemble whitelists only the four-letter words it needs.)
    """
    node_id = session_id >> 56
    assert node_id in ensemble.nodes, f"session 0x{session_id:x} names no node of {sorted(ensemble.nodes)}"
    return node_id


def client_avoiding(ensemble: ZkEnsemble, node_id: int, chroot_connect: str) -> ZkClient:
    chroot = "/" + chroot_connect.split("/", 1)[1]
    hosts = ",".join(f"{HOST}:{n.client_port}" for i, n in ensemble.nodes.items() if i != node_id)
    client = ZkClient(hosts + chroot, session_timeout_s=10.0, connect_timeout_s=10.0)
    client.start()
    return client


def test_broker_losing_its_zookeeper_node_converges_on_the_same_session(
    private_ensemble: ZkEnsemble, make_cluster: MakeCluster
) -> None:
    cluster = make_cluster(brokers=3, ensemble=private_ensemble, session_timeout_ms=SESSION_MS)
    controller = wait_until(lambda: health(cluster.broker_url(1))["controller_id"], SLOW_MACHINE_S,
                            "a controller")
    leader, victim = [b for b in cluster.broker_ids() if b != controller]
    url = cluster.broker_url(controller)
    cid = request("GET", f"{url}/v3/clusters")[1]["data"][0]["cluster_id"]
    assignment = [{"partition_id": 0, "broker_ids": [leader, controller, victim]}]
    status, body, _ = request("POST", f"{url}/v3/clusters/{cid}/topics",
                              {"topic_name": "moved", "replicas_assignments": assignment})
    assert status == 201, body

    def victim_view() -> dict[str, Any]:
        return request("GET", f"{cluster.broker_url(victim)}/metadata?topics=moved")[1]["topics"][0]["partitions"][0]

    wait_until(lambda: victim_view()["leader"] == leader and len(victim_view()["isr"]) == 3, SLOW_MACHINE_S,
               "the ISR to fill")
    before = victim_view()
    victim_health = health(cluster.broker_url(victim))
    session, epoch = victim_health["zk_session_id"], victim_health["broker_epoch"]
    node = zk_node_of(private_ensemble, session)
    watcher = client_avoiding(private_ensemble, node, cluster.zk_connect)
    try:
        private_ensemble.pause_node(node)  # the victim's ZooKeeper node hangs ...
        cluster.stop_broker(leader)  # ... while the controller moves the leadership (controlled shutdown)

        def moved() -> Any:
            got = watcher.get_partition_state("moved", 0)
            return got if got is not None and got[0].leader == controller else None

        state, _ = wait_until(moved, SLOW_MACHINE_S, "the controller to move the leadership")  # type: ignore[misc]
        moved_at = time.monotonic()
        assert state.leader_epoch > before["leader_epoch"]
        private_ensemble.kill_node(node)  # ... and then dies

        wait_until(lambda: victim_view()["leader"] == controller
                   and victim_view()["leader_epoch"] == state.leader_epoch, SLOW_MACHINE_S,
                   "the victim to see the new leader")
        converged_in = time.monotonic() - moved_at
        assert converged_in <= 2 * SESSION_MS / 1000, f"the victim converged only after {converged_in:.1f} s"
        after = health(cluster.broker_url(victim))
        assert after["zk_session_id"] == session and after["broker_epoch"] == epoch, "its session expired"
        assert sorted(victim_view()["isr"]) == sorted([controller, victim])
    finally:
        watcher.close()


def test_http_during_a_short_zookeeper_outage_is_2xx_or_retriable_503(
    private_ensemble: ZkEnsemble, make_cluster: MakeCluster
) -> None:
    cluster: LocalProcessBackend = make_cluster(brokers=2, ensemble=private_ensemble, session_timeout_ms=8000)
    urls = [cluster.broker_url(b) for b in cluster.broker_ids()]
    create_topic(urls[0], "live", 1, 2, seen_by=urls)
    cid = request("GET", f"{urls[0]}/v3/clusters")[1]["data"][0]["cluster_id"]
    sessions = {u: health(u)["zk_session_id"] for u in urls}
    answers: list[tuple[str, int, Any]] = []
    stop = threading.Event()

    def call(what: str, method: str, url: str, body: Any = None, **kw: Any) -> None:
        try:
            status, payload, _ = request(method, url, body, timeout=30, **kw)
        except (urllib.error.URLError, TimeoutError, OSError) as e:
            answers.append((what, -1, str(e)))
            return
        answers.append((what, status, payload))

    def hammer(url: str, kind: str) -> None:
        while not stop.is_set():
            if kind == "health":
                call("health", "GET", f"{url}/health")
            elif kind == "metadata":
                call("metadata", "GET", f"{url}/metadata?topics=live")
            elif kind == "produce":
                call("produce", "POST", f"{url}/topics/live/partitions/0?acks=all&timeout_ms=3000",
                     {"records": [{"value": 1}]}, content_type=JSON_V2)
            elif kind == "read":
                call("read", "GET", f"{url}/topics/live/partitions/0/records?offset=0&timeout=100", accept=JSON_V2)
            elif kind == "create":  # needs ZooKeeper: waits for it, or answers a retriable 503
                call("create", "POST", f"{url}/v3/clusters/{cid}/topics",
                     {"topic_name": f"t-{uuid.uuid4().hex[:8]}", "partitions_count": 1, "replication_factor": 1})
            else:
                call("list", "GET", f"{url}/v3/clusters/{cid}/topics")

    kinds = ("health", "metadata", "produce", "read", "create", "list")
    threads = [threading.Thread(target=hammer, args=(u, k), daemon=True) for u in urls for k in kinds]
    for t in threads:
        t.start()
    paused: list[int] = []
    try:
        wait_until(lambda: len(answers) > 12, SLOW_MACHINE_S, "traffic before the outage")
        for node_id in private_ensemble.nodes:
            if private_ensemble.pause_node(node_id):
                paused.append(node_id)
        outage_start, outage_at = len(answers), time.monotonic()
        # The outage lasts until the brokers have answered a good number of requests without ZooKeeper, and
        # never more than 4 s (half the session timeout, so no session may expire).
        deadline = outage_at + 4.0
        while len(answers) < outage_start + 40 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        for node_id in paused:
            private_ensemble.resume_node(node_id)
    during = len(answers) - outage_start
    wait_until(lambda: all(health(u)["status"] == "ok" for u in urls), SLOW_MACHINE_S,
               "the brokers to be healthy again")
    mark = len(answers)
    wait_until(lambda: len(answers) > mark + 12, SLOW_MACHINE_S, "traffic after the outage")
    stop.set()
    for t in threads:
        t.join(timeout=SLOW_MACHINE_S)  # each finishes the request in flight (30 s timeout)

    bad = [(what, status, payload) for what, status, payload in answers
           if not (200 <= status < 300 or (status == 503 and isinstance(payload, dict) and payload.get("retriable")))]
    assert not bad, f"non-2xx, non-retriable answers: {bad[:5]}"
    assert during > 0 or any(s == 503 for _, s, _ in answers), "no request overlapped the outage"
    assert {u: health(u)["zk_session_id"] for u in urls} == sessions
