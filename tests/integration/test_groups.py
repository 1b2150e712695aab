"""Consumer groups against real ZooKeeper and real brokers, driven over the HTTP group API.

Members are ``tests.harness.group_member.GroupMember`` threads that talk to any broker (so requests are forwarded
to the coordinator). Ownership is checked twice: what the members believe they consume, and the owners znodes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.conftest import MakeCluster
from tests.harness.cluster import LocalProcessBackend, wait_until
from tests.harness.group_member import TP, GroupMember
from tests.harness.http import create_topic, request
from tests.harness.wait import SLOW_MACHINE_S
from zk.groups import GroupStore

pytestmark = pytest.mark.cluster

# A group settling: a rebalance or two (plus a 6 s session timeout where a member is left to expire) on a healthy
# machine.
SETTLE_S = SLOW_MACHINE_S + 6.0


def urls(cluster: LocalProcessBackend) -> list[str]:
    return [cluster.broker_url(b) for b in cluster.broker_ids() if cluster.broker_pid(b) is not None]


def all_partitions(topic: str, n: int) -> set[TP]:
    return {(topic, p) for p in range(n)}


def settled(members: list[GroupMember], expected: set[TP]) -> bool:
    """Every partition owned by exactly one member and every member idle between heartbeats (not joining)."""
    seen: list[TP] = [tp for m in members for tp in m.snapshot()]
    return sorted(seen) == sorted(expected)


def describe(url: str, group: str) -> dict:
    status, body, _ = request("GET", f"{url}/groups/{group}")
    assert status == 200, body
    return body


class OwnershipChecker(threading.Thread):
    """Samples members' beliefs and the owners znodes; records any partition owned twice at one moment."""

    def __init__(self, members: list[GroupMember], store: GroupStore, group: str) -> None:
        super().__init__(daemon=True)
        self.members = members
        self.store = store
        self.group = group
        self.violations: list[str] = []
        self.samples = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            owners: dict[TP, str] = {}
            for m in list(self.members):
                for tp in m.snapshot():
                    if tp in owners:
                        self.violations.append(f"{tp} owned by {owners[tp]} and {m.member_id} at once")
                    owners[tp] = m.member_id or "?"
            try:
                zk_owners = self.store.get_owners(self.group)
            except Exception:  # ZooKeeper hiccup: the member-side check still ran
                zk_owners = {}
            live = {m.member_id for m in self.members}
            for tp, member in owners.items():
                holder = zk_owners.get(tp)
                if holder is not None and holder != member and holder in live:
                    # The znode names another live member while this one consumes: two owners.
                    self.violations.append(f"{tp}: {member} consumes it but the owners znode names {holder}")
            self.samples += 1
            self._halt.wait(0.02)

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


@contextmanager
def running(members: list[GroupMember]) -> Iterator[list[GroupMember]]:
    for m in members:
        m.start()
    try:
        yield members
    finally:
        for m in members:
            if not m._stop.is_set():
                m.leave()


def test_n_members_below_at_and_above_the_partition_count(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=3)
    u = urls(cluster)
    create_topic(u[0], "t4", partitions=4, replication_factor=2, seen_by=u)
    for n in (2, 4, 6):
        group = f"g{n}"
        members = [GroupMember(u, group, ["t4"], client_id=f"c{i}") for i in range(n)]
        with running(members):
            # Settled as the members see it *and* as the coordinator does: with members still joining, the
            # first ones may already own every partition once (and, for 6, show the expected counts).
            wait_until(lambda ms=members, g=group, k=n: settled(ms, all_partitions("t4", 4))
                       and (info := describe(u[-1], g))["state"] == "Stable" and len(info["members"]) == k,
                       SETTLE_S, f"{n} members settle")
            counts = sorted(len(m.snapshot()) for m in members)
            assert counts == {2: [2, 2], 4: [1, 1, 1, 1], 6: [0, 0, 1, 1, 1, 1]}[n]
            owners = GroupStore(cluster.zk_client()).get_owners(group)
            assert set(owners) == all_partitions("t4", 4)
            assert {owners[tp] for m in members for tp in m.snapshot()} <= {m.member_id for m in members}
        wait_until(lambda g=group: describe(u[0], g)["state"] == "Empty", SETTLE_S, "the group empties")


def _join(url: str, group: str, body: dict, out: list | None = None) -> dict:
    base = {"client_id": "raw", "topics": ["t2"], "assignor": "range", "session_timeout_ms": 10000,
            "rebalance_timeout_ms": 10000}
    status, reply, _ = request("POST", f"{url}/groups/{group}/members", {**base, **body}, timeout=SLOW_MACHINE_S)
    assert status == 200, reply
    if out is not None:
        out.append(reply)
    return reply


def test_two_groups_are_independent_and_a_stale_generation_cannot_commit(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=2)
    u = urls(cluster)
    create_topic(u[0], "t2", partitions=2, replication_factor=1, seen_by=u)
    a = _join(u[0], "ga", {})
    assert a["generation"] == 1 and sorted(map(tuple, a["assignment"])) == [("t2", 0), ("t2", 1)]
    b = _join(u[1], "gb", {})  # another group on the same topic gets every partition too
    assert sorted(map(tuple, b["assignment"])) == [("t2", 0), ("t2", 1)]

    def commit(url: str, group: str, member: str, generation: int, offset: int) -> tuple[int, dict]:
        body = {"member_id": member, "generation": generation,
                "offsets": [{"topic": "t2", "partition": 0, "offset": offset, "metadata": "m"}]}
        status, reply, _ = request("POST", f"{url}/groups/{group}/offsets", body)
        return status, reply

    assert commit(u[1], "ga", a["member_id"], 1, 5)[0] == 200
    assert commit(u[0], "gb", b["member_id"], 1, 9)[0] == 200
    # A second member joins ga; the first rejoins: generation 2. Its generation-1 commit is refused.
    joined: list = []
    t = threading.Thread(target=_join, args=(u[1], "ga", {"client_id": "second"}, joined))
    t.start()
    wait_until(lambda: request("POST", f"{u[0]}/groups/ga/members/{a['member_id']}/heartbeat",
                               {"generation": 1})[0] == 409, SLOW_MACHINE_S, "the rebalance starts")
    a2 = _join(u[0], "ga", {"member_id": a["member_id"], "owned": a["assignment"]})
    t.join(SLOW_MACHINE_S)
    assert a2["generation"] == 2 and joined and joined[0]["generation"] == 2
    status, reply = commit(u[1], "ga", a["member_id"], 1, 1)
    assert status == 409 and reply["error"] == "ILLEGAL_GENERATION", reply
    status, reply = commit(u[1], "ga", "nobody", 2, 1)
    assert status == 404 and reply["error"] == "UNKNOWN_MEMBER_ID", reply
    status, offsets, _ = request("GET", f"{u[1]}/groups/ga/offsets")
    assert [(o["partition"], o["offset"], o["metadata"]) for o in offsets["offsets"]] == [(0, 5, "m")]
    assert offsets["offsets"][0]["log_end_offset"] == 0 and offsets["offsets"][0]["lag"] == 0
    assert commit(u[0], "ga", a["member_id"], 2, 7)[0] == 200
    status, offsets, _ = request("GET", f"{u[0]}/groups/gb/offsets")
    assert [o["offset"] for o in offsets["offsets"]] == [9]
    # Admin: describe names the coordinator; delete and reset only when empty.
    info = describe(u[1], "ga")
    assert info["generation"] == 2 and len(info["members"]) == 2 and info["coordinator"] in cluster.broker_ids()
    status, reply, _ = request("DELETE", f"{u[0]}/groups/ga")
    assert status == 409 and reply["error"] == "NON_EMPTY_GROUP"
    status, reply, _ = request("POST", f"{u[0]}/groups/ga/offsets/reset",
                               {"offsets": [{"topic": "t2", "partition": 0, "offset": 0}]})
    assert status == 409 and reply["error"] == "NON_EMPTY_GROUP"
    for m in (a["member_id"], joined[0]["member_id"]):
        assert request("DELETE", f"{u[1]}/groups/ga/members/{m}")[0] == 200
    wait_until(lambda: describe(u[0], "ga")["state"] == "Empty", SETTLE_S, "ga empties")
    status, reply, _ = request("POST", f"{u[0]}/groups/ga/offsets/reset",
                               {"offsets": [{"topic": "t2", "partition": 0, "offset": 1}]})
    assert status == 200, reply
    # Kafka's OffsetDelete (--delete-offsets): refused while a member subscribes to the topic; works when none does.
    status, reply, _ = request("DELETE", f"{u[1]}/groups/gb/offsets?topic=t2")
    assert status == 409 and reply["error"] == "GROUP_SUBSCRIBED_TO_TOPIC", reply
    assert [o["offset"] for o in request("GET", f"{u[0]}/groups/gb/offsets")[1]["offsets"]] == [9]
    assert request("DELETE", f"{u[1]}/groups/ga/offsets?topic=t2&partitions=x")[0] == 400
    status, reply, _ = request("DELETE", f"{u[1]}/groups/ga/offsets?topic=t2&partitions=0")
    assert status == 200, reply
    assert request("GET", f"{u[0]}/groups/ga/offsets")[1]["offsets"] == []
    status, reply, _ = request("GET", f"{u[0]}/groups")
    assert {g["group"] for g in reply["groups"]} >= {"ga", "gb"}
    assert request("DELETE", f"{u[1]}/groups/ga")[0] == 200
    assert request("GET", f"{u[0]}/groups/ga")[0] == 404


@pytest.mark.parametrize("path, body", [
    ("/groups/bad%20name/members", {"topics": ["t"]}),
    ("/groups/" + "x" * 250 + "/members", {"topics": ["t"]}),
    ("/groups/g/members", {"topics": "t"}),
    ("/groups/g/members", {"topics": ["t"], "session_timeout_ms": 10}),
    ("/groups/g/members", {"topics": ["t"], "assignor": "nope"}),
    ("/groups/g/members", {"pattern": "("}),
    ("/groups/g/members", {"topics": ["t"], "owned": [["t", -1]]}),
    ("/groups/g/members/m/heartbeat", {"generation": "1"}),
    ("/groups/g/offsets", {"member_id": "m", "generation": 1, "offsets": [{"topic": "t", "partition": 0}]}),
    ("/groups/g/offsets", {"generation": 2**40, "offsets": []}),
])
def test_invalid_group_requests_are_4xx(make_cluster: MakeCluster, path: str, body: dict) -> None:
    cluster = make_cluster(brokers=1)  # validation happens before any coordination
    status, reply, _ = request("POST", urls(cluster)[0] + path, body)
    assert 400 <= status < 500, (status, reply)


def test_cooperative_sticky_moves_only_what_it_must(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=2)
    u = urls(cluster)
    create_topic(u[0], "t6", partitions=6, replication_factor=1, seen_by=u)
    members = [GroupMember(u, "gs", ["t6"], assignor="cooperative-sticky", client_id=f"c{i}") for i in range(3)]
    with running(members):
        wait_until(lambda: settled(members, all_partitions("t6", 6))
                   and all(len(m.snapshot()) == 2 for m in members), SETTLE_S, "3 members settle")
        before = {m.client_id: m.snapshot() for m in members}
        mark = time.monotonic()
        newcomer = GroupMember(u, "gs", ["t6"], assignor="cooperative-sticky", client_id="c3")
        members.append(newcomer.start())
        wait_until(lambda: settled(members, all_partitions("t6", 6)) and len(newcomer.snapshot()) == 1,
                   SETTLE_S, "4 members settle")
        after = {m.client_id: m.snapshot() for m in members}
        moved = {tp for c, tps in after.items() for tp in tps if tp not in before.get(c, set())}
        assert moved == after["c3"]  # only the newcomer's partition moved
        for m in members[:3]:
            assert after[m.client_id] <= before[m.client_id]
            lost = set().union(*[tps for when, tps in m.lost if when >= mark]) if m.lost else set()
            assert lost <= moved, (m.client_id, lost, moved)  # the others never paused


def test_never_two_owners_through_joins_leaves_timeouts_and_a_coordinator_kill(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=3)
    u = urls(cluster)
    create_topic(u[0], "tc", partitions=6, replication_factor=2, seen_by=u)
    expected = all_partitions("tc", 6)

    def member(i: int, assignor: str) -> GroupMember:
        return GroupMember(u, "gc", ["tc"], assignor=assignor, client_id=f"c{i}", session_timeout_ms=6000,
                           rebalance_timeout_ms=10000)

    members = [member(i, "cooperative-sticky") for i in range(3)]
    checker = OwnershipChecker(members, GroupStore(cluster.zk_client()), "gc")
    checker.start()
    with running(members):
        wait_until(lambda: settled(members, expected), SETTLE_S, "3 members settle")
        for i in (3, 4):  # joins
            members.append(member(i, "cooperative-sticky").start())
        wait_until(lambda: settled(members, expected) and all(m.snapshot() for m in members), SETTLE_S, "5 settle")
        members[0].leave()  # a leave
        live = members[1:]
        wait_until(lambda: settled(live, expected), SETTLE_S, "after a leave")
        members[1].crash()  # a member crash: it times out
        live = members[2:]
        wait_until(lambda: settled(live, expected) and describe(u[0], "gc")["state"] == "Stable"
                   and len(describe(u[0], "gc")["members"]) == 3, SETTLE_S, "after a member timeout")
        info = describe(u[0], "gc")
        generation, coordinator = info["generation"], info["coordinator"]
        cluster.kill_broker(coordinator)  # SIGKILL the coordinator: the group is rebuilt from ZooKeeper
        for m in live:
            m.urls = [x for x in u if x != cluster.broker_url(coordinator)]
        survivors = [x for x in u if x != cluster.broker_url(coordinator)]

        def rebuilt() -> bool:
            status, body, _ = request("GET", f"{survivors[0]}/groups/gc")
            return (status == 200 and body["coordinator"] != coordinator and body["state"] == "Stable"
                    and body["generation"] > generation and settled(live, expected))

        wait_until(rebuilt, SETTLE_S, "a new coordinator rebuilt the group")
        assert {m["member_id"] for m in describe(survivors[0], "gc")["members"]} == {m.member_id for m in live}
    checker.stop()
    assert checker.samples > 100
    assert not checker.violations, checker.violations[:5]
