"""The Python group consumer against a real cluster: at-least-once through a SIGKILL, pattern subscriptions,
pause/resume, close, committed offsets and lag."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from odradek import AdminClient, ConsumerRecord, GroupConsumer, Producer, TopicPartition
from tests.conftest import MakeCluster
from tests.harness.cluster import LocalProcessBackend, wait_until
from tests.harness.http import request
from tests.harness.wait import SLOW_MACHINE_S

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]


def bootstrap(cluster: LocalProcessBackend) -> str:
    return ",".join(cluster.broker_url(b) for b in cluster.broker_ids())


def name(prefix: str = "g") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def cluster3(make_cluster: MakeCluster) -> LocalProcessBackend:
    return make_cluster(brokers=3)


def create(cluster: LocalProcessBackend, topic: str, partitions: int) -> None:
    with AdminClient(bootstrap(cluster)) as admin:
        admin.create_topic(topic, partitions=partitions, replication_factor=2)
        wait_until(lambda: admin.describe_topic(topic).partition_count == partitions
                   and all(p.leader >= 0 for p in admin.describe_topic(topic).partitions), SLOW_MACHINE_S, "leaders")


def produce(cluster: LocalProcessBackend, topic: str, n: int, partitions: int, start: int = 0) -> None:
    with Producer(bootstrap(cluster), acks="all", linger_ms=5) as p:
        futures = [p.send(topic, str(i).encode(), partition=i % partitions) for i in range(start, start + n)]
        for f in futures:
            f.result()


def poll_until(consumers: list[GroupConsumer], done: Callable[[list[ConsumerRecord]], bool], timeout: float,
               what: str) -> list[ConsumerRecord]:
    """Poll every consumer (so rebalances apply) until ``done(records seen)``; returns the records seen."""
    seen: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout
    while not done(seen):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for c in consumers:
            for recs in c.poll(timeout_ms=100).values():
                seen.extend(recs)
    return seen


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(SLOW_MACHINE_S)


# The workers' session timeout: long enough that a live worker on a loaded machine is not expelled between two
# heartbeats (an expelled worker's written-but-uncommitted batch would be read again, beyond the SIGKILLed one's),
# short enough that the SIGKILLed one is replaced soon.
WORKER_SESSION_MS = 6000
# A worker part-way through the topic: its start (a Python process) and first batches.
PART_WAY_S = SLOW_MACHINE_S * 2
# Every record processed: the SIGKILLed member's session expiring, a rebalance, 1,200 records at 20 per batch.
ALL_PROCESSED_S = SLOW_MACHINE_S * 3


def start_worker(procs: list[subprocess.Popen[str]], cluster: LocalProcessBackend, group: str, topic: str,
                 out: Path, delay_ms: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-m", "tests.group_consumer_worker", bootstrap(cluster), group, topic,
                             str(out), "--batch", "20", "--delay-ms", str(delay_ms), "--session-timeout-ms",
                             str(WORKER_SESSION_MS)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    procs.append(proc)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def read_output(*paths: Path) -> list[tuple[int, int]]:
    out = []
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:  # a line torn by SIGKILL is not a processed record
                out.append((int(parts[0]), int(parts[1])))
    return out


def test_sigkilled_member_is_replaced_without_gaps(cluster3: LocalProcessBackend, tmp_path: Path,
                                                    processes: list[subprocess.Popen[str]]) -> None:
    topic, group, n, parts = name("t"), name(), 1200, 6
    create(cluster3, topic, parts)
    produce(cluster3, topic, n, parts)
    a_out, b_out, c_out = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "c.txt"
    a = start_worker(processes, cluster3, group, topic, a_out, delay_ms=40)
    start_worker(processes, cluster3, group, topic, b_out, delay_ms=40)
    wait_until(lambda: len(read_output(a_out)) >= 100, PART_WAY_S, "member A to be part-way through")
    os.kill(a.pid, signal.SIGKILL)
    a.wait(SLOW_MACHINE_S)
    killed_at = len(read_output(a_out))
    start_worker(processes, cluster3, group, topic, c_out, delay_ms=0)
    expected = {(i % parts, i // parts) for i in range(n)}
    wait_until(lambda: set(read_output(a_out, b_out, c_out)) >= expected, ALL_PROCESSED_S,
               "every record to be processed")
    seen = read_output(a_out, b_out, c_out)
    assert set(seen) == expected  # no gaps, nothing invented
    duplicates = sum(c - 1 for c in Counter(seen).values())
    # At-least-once: only A's written-but-uncommitted window (one batch of at most 20) may come again, and a batch
    # whose commit a rebalance fenced (the workers count those: a loaded machine's joins can overtake a commit).
    fenced = sum(len(Path(f"{out}.fenced").read_text().splitlines()) for out in (a_out, b_out, c_out)
                 if Path(f"{out}.fenced").exists())
    assert duplicates <= 20 * (1 + fenced), (duplicates, killed_at, fenced)


def test_pattern_subscription_picks_up_a_new_topic(cluster3: LocalProcessBackend) -> None:
    prefix = name("pat")
    first, second = f"{prefix}-a", f"{prefix}-b"
    create(cluster3, first, 2)
    produce(cluster3, first, 10, 2)
    c = GroupConsumer(bootstrap(cluster3), group_id=name(), auto_offset_reset="earliest",
                      session_timeout_ms=6000, fetch_max_wait_ms=100)
    try:
        c.subscribe(pattern=f"^{prefix}-.*")
        seen = poll_until([c], lambda seen: len(seen) >= 10, SLOW_MACHINE_S, "the first topic's records")
        assert {r.topic for r in seen} == {first}
        create(cluster3, second, 2)
        produce(cluster3, second, 6, 2)
        poll_until([c], lambda more: sum(r.topic == second for r in more) >= 6, SLOW_MACHINE_S,
                   "the new topic's records")
        assert {TopicPartition(second, 0), TopicPartition(second, 1)} <= c.assignment()
    finally:
        c.close()


def test_pause_resume_commit_committed_and_lag(cluster3: LocalProcessBackend) -> None:
    topic, group = name("t"), name()
    create(cluster3, topic, 2)
    c = GroupConsumer(bootstrap(cluster3), group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                      session_timeout_ms=6000, fetch_max_wait_ms=100)
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    try:
        c.subscribe([topic])
        poll_until([c], lambda _: c.assignment() == {p0, p1}, SLOW_MACHINE_S, "the assignment")
        c.pause(p0)
        produce(cluster3, topic, 20, 2)
        # Until partition 1's ten records are in (however long a loaded machine takes): none of partition 0's may
        # come with or before them.
        got = poll_until([c], lambda got: len(got) >= 10, SLOW_MACHINE_S, "partition 1's records")
        assert {r.partition for r in got} == {1} and len(got) == 10
        assert c.lag() == {p0: 10, p1: 0}
        c.resume(p0)
        got0 = poll_until([c], lambda got0: len(got0) >= 10, SLOW_MACHINE_S, "partition 0 after resume")
        assert {r.partition for r in got0} == {0}
        assert c.committed(p0) is None
        c.commit()
        assert c.committed(p0) == 10 and c.committed(p1) == 10
        c.commit({p0: 4})
        done: list = []
        c.commit_async({p1: 7}, callback=lambda offsets, err: done.append(err)).result(SLOW_MACHINE_S)
        assert done == [None]
        assert c.committed(p0, metadata=True).offset == 4 and c.committed(p1) == 7  # type: ignore[union-attr]
        assert c.metrics()["commits"] >= 3
    finally:
        c.close()
    # A new member of the group starts from the committed offsets.
    d = GroupConsumer(bootstrap(cluster3), group_id=group, auto_offset_reset="latest", session_timeout_ms=6000)
    try:
        d.subscribe([topic])
        seen = poll_until([d], lambda seen: len(seen) >= 9, SLOW_MACHINE_S,
                          "records after the committed offsets")
        assert sorted((r.partition, r.offset) for r in seen) == [(0, o) for o in range(4, 10)] + [(1, 7), (1, 8),
                                                                                               (1, 9)]
    finally:
        d.close()


def test_close_leaves_at_once(cluster3: LocalProcessBackend) -> None:
    topic, group = name("t"), name()
    create(cluster3, topic, 4)
    # The longest session the broker allows (5 min): only an explicit leave can move the partitions within the
    # test's bound, however slow the machine.
    a = GroupConsumer(bootstrap(cluster3), group_id=group, session_timeout_ms=300_000, fetch_max_wait_ms=100)
    b = GroupConsumer(bootstrap(cluster3), group_id=group, session_timeout_ms=300_000, fetch_max_wait_ms=100)
    try:
        a.subscribe([topic])
        b.subscribe([topic])
        poll_until([a, b], lambda _: len(a.assignment()) == 2 and len(b.assignment()) == 2, SLOW_MACHINE_S,
                   "a balanced group")
        a.close()
        started = time.monotonic()
        poll_until([b], lambda _: len(b.assignment()) == 4, SLOW_MACHINE_S, "b to get every partition")
        assert time.monotonic() - started < SLOW_MACHINE_S < 300  # far below the 5 min session: a's leave did it
    finally:
        a.close()
        b.close()


def test_iteration_commits_only_what_was_processed(cluster3: LocalProcessBackend) -> None:
    topic = name("t")
    create(cluster3, topic, 1)
    produce(cluster3, topic, 10, 1)
    c = GroupConsumer(bootstrap(cluster3), group_id=name(), auto_offset_reset="earliest", enable_auto_commit=False,
                      session_timeout_ms=6000, fetch_max_wait_ms=100,
                      # Iteration ends after this long without a record: longer than the join and first fetch
                      # take on a loaded machine, so the loop below always reaches offset 3.
                      consumer_timeout_ms=int(SLOW_MACHINE_S * 1000))
    try:
        c.subscribe([topic])
        for record in c:
            if record.offset == 3:
                c.commit()  # the batch behind it was fetched, but only offsets 0..3 were processed
                break
        assert c.committed(TopicPartition(topic, 0)) == 4
    finally:
        c.close()


def test_a_member_that_misses_its_session_stops_returning_records(cluster3: LocalProcessBackend) -> None:
    """Freeze the group's coordinator (SIGSTOP): heartbeats fail, and within its session the member gives up its
    partitions (on_lost) and hands out nothing until it is assigned again, although the partitions' leaders on
    the other brokers keep serving. After the coordinator moves, the member rejoins and reads everything."""
    topic, group = name("t"), name()
    with AdminClient(bootstrap(cluster3)) as admin:
        admin.create_topic(topic, replica_assignment={0: [1], 1: [2], 2: [3]})
    events: list[tuple[str, float]] = []
    c = GroupConsumer(bootstrap(cluster3), group_id=group, auto_offset_reset="earliest", session_timeout_ms=1000,
                      enable_auto_commit=False,  # so that after rejoining it reads the partition from the start
                      heartbeat_interval_ms=200, max_poll_interval_ms=10_000, fetch_max_wait_ms=100,
                      request_timeout_ms=2000)
    c.subscribe([topic], on_assign=lambda _c, _tps: events.append(("assign", time.monotonic())),
                on_lost=lambda _c, _tps: events.append(("lost", time.monotonic())))
    paused: int | None = None
    try:
        poll_until([c], lambda _: len(c.assignment()) == 3, SLOW_MACHINE_S, "the assignment")
        status, described, _ = request("GET", f"{cluster3.broker_url(1)}/groups/{group}")
        assert status == 200, described
        paused = int(described["coordinator"])
        live = next(p for p in range(3) if p + 1 != paused)
        cluster3.pause_broker(paused)
        paused_at = time.monotonic()
        with Producer(cluster3.broker_url(live + 1), acks="1") as p:
            for i in range(10):
                p.send(topic, str(i).encode(), partition=live)
        polled: list[tuple[float, float, int]] = []  # (poll started, poll returned, records handed out)
        deadline = time.monotonic() + SLOW_MACHINE_S
        while not any(kind == "lost" for kind, _ in events):
            assert time.monotonic() < deadline, ("the member never noticed it missed its session",
                                                 [(round(t - paused_at, 2), n) for _, t, n in polled][-40:],
                                                 [(k, round(t - paused_at, 2)) for k, t in events])
            poll_started = time.monotonic()
            got = c.poll(timeout_ms=50)
            polled.append((poll_started, time.monotonic(), sum(len(r) for r in got.values())))
        lost_at = next(t for kind, t in events if kind == "lost")
        # Within its session, on its own clock: its last heartbeat answered before the freeze, so every poll that
        # starts a session timeout after the freeze must give the partitions up, however late (a loaded machine)
        # the polling itself comes. One such poll may miss it by a hair when the membership thread is giving them
        # up at that instant (it reports the loss to the next poll); a second may not.
        late = [round(start - paused_at, 2) for start, _, _ in polled[:-1] if start >= paused_at + 1.0]
        assert len(late) <= 1, f"polls {late} s after the freeze still had the partitions of a 1 s session"
        assert c.assignment() == set() or any(kind == "assign" and t > lost_at for kind, t in events)
        cluster3.resume_broker(paused)
        paused = None
        seen = poll_until([c], lambda seen: sum(r.partition == live for r in seen) >= 10, SLOW_MACHINE_S,
                          f"the records produced while the coordinator was frozen (events {events}, "
                          f"assignment {c.assignment()})")
        reassigned = min((t for kind, t in events if kind == "assign" and t > lost_at), default=float("inf"))
        # Nothing was handed out between losing the partitions and getting them back.
        assert not [n for _, t, n in polled if lost_at <= t < reassigned and n]
        assert len(seen) >= 10
    finally:
        if paused is not None:
            cluster3.resume_broker(paused)
        c.close()
