"""Consumer-group rebalance figures on a local 3-broker cluster (3 ZooKeeper nodes, tickTime 250 ms):

* rebalance time after a join: a 9th member starts next to 8 settled members until every one of 24 partitions
  is owned by exactly one member again, the newcomer included;
* rebalance time after a member crash: a member stops without leaving until the 7 others own all 24 partitions
  (this includes the session timeout that detects the crash);

each as the median of N rounds, for eager (range: every member revokes everything before joining) and
cooperative (cooperative-sticky: members keep unmoved partitions). Members are HTTP threads
(tests/harness/group_member.py) talking to any broker.

    .venv/bin/python bench/groups_bench.py [--rounds 10] [--session-timeout-ms 2000]

Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from odradek_local.cluster import LocalCluster
from tests.harness.group_member import GroupMember
from tests.harness.http import create_topic
from tests.harness.ports import free_port_block

PARTITIONS = 24
MEMBERS = 8


def settled(members: list[GroupMember], topic: str) -> bool:
    owned = sorted(tp for m in members for tp in m.snapshot())
    return owned == [(topic, p) for p in range(PARTITIONS)]


def wait_settled(members: list[GroupMember], topic: str, timeout: float = 60.0) -> float:
    started = time.monotonic()
    while not settled(members, topic):
        if time.monotonic() - started > timeout:
            raise TimeoutError("the group did not settle")
        time.sleep(0.005)
    return time.monotonic() - started


def rounds(urls: list[str], topic: str, assignor: str, n: int, session_ms: int) -> tuple[list[float], list[float]]:
    joins: list[float] = []
    crashes: list[float] = []
    for r in range(n):
        group = f"{assignor}-{r}"

        def member(i: int, g: str = group) -> GroupMember:
            return GroupMember(urls, g, [topic], assignor=assignor, client_id=f"m{i}",
                               session_timeout_ms=session_ms, rebalance_timeout_ms=10_000, heartbeat_s=0.1)

        members = [member(i).start() for i in range(MEMBERS)]
        wait_settled(members, topic)
        time.sleep(0.5)  # let the heartbeats of the last generation go round once
        newcomer = member(MEMBERS)
        members.append(newcomer.start())
        started = time.monotonic()
        while not (settled(members, topic) and newcomer.snapshot()):
            time.sleep(0.005)
        joins.append(time.monotonic() - started)
        time.sleep(0.5)
        victim = members.pop(0)
        victim.crash()
        crashes.append(wait_settled(members, topic))
        for m in members:
            m.leave()
    return joins, crashes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--session-timeout-ms", type=int, default=2000, help="members' session timeout")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        cluster = LocalCluster(Path(d), brokers=3, base_port=free_port_block(3), zookeepers=3,
                               zk_base_port=free_port_block(3, span=106), tick_ms=250, session_timeout_ms=1500)
        try:
            cluster.up()
            urls = [cluster.broker_url(b) for b in cluster.slots]
            create_topic(urls[0], "bench", PARTITIONS, 1, seen_by=urls)
            print(f"{MEMBERS} members, {PARTITIONS} partitions, member session {args.session_timeout_ms} ms, "
                  f"median of {args.rounds}")
            for assignor, label in (("range", "eager (range)"), ("cooperative-sticky", "cooperative-sticky")):
                joins, crashes = rounds(urls, "bench", assignor, args.rounds, args.session_timeout_ms)
                print(f"{label:>20}: after a join {statistics.median(joins) * 1000:7.0f} ms "
                      f"(max {max(joins) * 1000:.0f}); after a crash {statistics.median(crashes) * 1000:7.0f} ms "
                      f"(max {max(crashes) * 1000:.0f})", flush=True)
        finally:
            cluster.down()


if __name__ == "__main__":
    main()
