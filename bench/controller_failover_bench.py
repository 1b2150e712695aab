"""Controller failover time for 1,000 partitions: SIGKILL a broker that leads a third of them, and time until every
partition has a live leader again in ZooKeeper (the controller's work, as Kafka's own "controlled/uncontrolled
failover for N partitions" figures measure it).

A local cluster of 3 brokers over 3 ZooKeeper nodes (tickTime 250 ms, 1.5 s broker sessions). 1,000 partitions in
three topics: ``fo-led`` (334 partitions, replication factor 2) is led by the victim broker, its followers split
over the two others; ``fo-b`` and ``fo-c`` (333 partitions each, replication factor 1) live on the two others.
Only the led third needs replicas to fail over to, and one fetcher per follower partition is all the idle load
the cluster carries, so the figure is the controller's and not a saturated CPU's. The victim is never the
controller (that would time a controller election as well; ``--kill-controller`` does that instead).

Figures printed: SIGKILL -> every partition led by a live broker (what a client waits), and the victim's
registration gone -> every partition led (the controller's own work, without the session timeout).

    .venv/bin/python bench/controller_failover_bench.py [--rounds 3] [--session-timeout-ms 1500]

Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from odradek_local.cluster import LocalCluster
from tests.harness.http import request
from tests.harness.ports import free_port_block
from zk.client import ZkClient
from zk.znodes import BrokerIdZNode, TopicPartitionStateZNode

LED, OTHERS = "fo-led", ("fo-b", "fo-c")
LED_COUNT, OTHER_COUNT = 334, 333


def create(url: str, name: str, assignment: dict[int, list[int]]) -> None:
    status, clusters, _ = request("GET", f"{url}/v3/clusters")
    cid = clusters["data"][0]["cluster_id"]
    body: dict[str, Any] = {"topic_name": name, "replicas_assignments": [
        {"partition_id": p, "broker_ids": r} for p, r in sorted(assignment.items())]}
    status, answer, _ = request("POST", f"{url}/v3/clusters/{cid}/topics", body, timeout=120)
    if status != 201:
        raise RuntimeError(f"creating {name}: {status} {answer}")


def read_leaders(zk: ZkClient, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Every partition's leader, read with pipelined asynchronous gets (one round trip's worth of latency)."""
    pending = [(tp, zk.kazoo.get_async(TopicPartitionStateZNode.path(*tp))) for tp in partitions]
    return {tp: TopicPartitionStateZNode.decode(r.get(timeout=30)[0]).leader for tp, r in pending}


def wait_until(what: str, cond: Any, timeout: float = 120.0, poll: float = 0.005) -> float:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(poll)
    return time.monotonic()


def one_round(cluster: LocalCluster, zk: ZkClient, victim: int, all_tps: list[tuple[str, int]]) -> tuple[float, float]:
    survivors = [b for b in cluster.slots if b != victim]
    led_tps = [tp for tp in all_tps if tp[0] == LED]
    wait_until("the victim to lead its third", lambda: all(
        leader == victim for leader in read_leaders(zk, led_tps).values()))
    registration = BrokerIdZNode.path(victim)
    killed = time.monotonic()
    cluster.kill_broker(victim)
    gone = wait_until("the victim's registration to go", lambda: zk.kazoo.exists(registration) is None, poll=0.002)
    remaining = list(all_tps)

    def all_led() -> bool:
        nonlocal remaining
        leaders = read_leaders(zk, remaining)
        remaining = [tp for tp, leader in leaders.items() if leader not in survivors]
        return not remaining

    done = wait_until("every partition to have a live leader", all_led)
    # Put the victim back and give it its leaderships again, for the next round.
    cluster.start_broker(victim, timeout=120)
    url = cluster.broker_url(survivors[0])
    wait_until("the victim back in every ISR", lambda: all(
        len(p["isr"]) == 2 for p in request("GET", f"{url}/metadata?topics={LED}")[1]["topics"][0]["partitions"]))
    request("POST", f"{url}/admin/preferred_leader_election", {})
    return done - killed, done - gone


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally below: end what we started
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--session-timeout-ms", type=int, default=1500)
    ap.add_argument("--tick-ms", type=int, default=250)
    ap.add_argument("--kill-controller", action="store_true", help="kill the controller instead of another broker")
    args = ap.parse_args()
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="odradek-ctl-failover-", dir=root) as d:
        cluster = LocalCluster(Path(d), brokers=3, base_port=free_port_block(3), zookeepers=3,
                               zk_base_port=free_port_block(3, span=106), tick_ms=args.tick_ms,
                               session_timeout_ms=args.session_timeout_ms,
                               broker_args=["--auto-leader-rebalance-enable", "false"])
        zk: ZkClient | None = None
        try:
            cluster.up(timeout=120)
            zk = cluster.zk_client()
            controller = zk.get_controller()
            victim = controller if args.kill_controller else max(b for b in cluster.slots if b != controller)
            a, b = [x for x in cluster.slots if x != victim]
            url = cluster.broker_url(a)
            started = time.monotonic()
            create(url, LED, {p: [victim, (a, b)[p % 2]] for p in range(LED_COUNT)})
            create(url, OTHERS[0], {p: [a] for p in range(OTHER_COUNT)})
            create(url, OTHERS[1], {p: [b] for p in range(OTHER_COUNT)})
            print(f"created 1,000 partitions in {time.monotonic() - started:.1f} s")
            all_tps = [(LED, p) for p in range(LED_COUNT)] + [(t, p) for t in OTHERS for p in range(OTHER_COUNT)]
            wait_until("every replica in its ISR", lambda: all(len(p["isr"]) == 2 for p in request(
                "GET", f"{url}/metadata?topics={LED}")[1]["topics"][0]["partitions"]))
            totals, controller_parts = [], []
            for _ in range(args.rounds):
                total, part = one_round(cluster, zk, victim, all_tps)
                totals.append(total)
                controller_parts.append(part)
                print(f"  round: SIGKILL -> all led {total:.2f} s; registration gone -> all led {part:.2f} s",
                      flush=True)
            what = "the controller" if args.kill_controller else f"broker {victim} (not the controller)"
            print(f"controller failover, 1,000 partitions, SIGKILL of {what} leading {LED_COUNT} of them, "
                  f"session timeout {args.session_timeout_ms} ms, tickTime {args.tick_ms} ms: "
                  f"SIGKILL -> every partition led: median {statistics.median(totals):.2f} s, "
                  f"max {max(totals):.2f} s; registration gone -> every partition led: median "
                  f"{statistics.median(controller_parts):.2f} s, max {max(controller_parts):.2f} s "
                  f"over {len(totals)} rounds")
        finally:
            if zk is not None:
                zk.close()
            cluster.down()


if __name__ == "__main__":
    main()
