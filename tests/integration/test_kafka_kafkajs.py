"""kafkajs (npm, pinned in tests/clients/node/package.json, installed unchanged) against a real 3-broker cluster,
with its default configuration: only clientId and the bootstrap brokers are given (acks -1, its default
partitioner and retries, the consumer's range/round-robin assignors, autoCommit after each batch, 30 s sessions).

The drivers are small scripts in tests/clients/node (kafkajs_produce.js, kafkajs_member.js, kafkajs_admin.js): they
take a JSON spec on argv and print JSON lines that these tests assert on; kafkajs's own log lines go to stderr.
What kafkajs produces and commits is read back by the other door (HTTP: /topics/..., /groups/...) and by
scripts/odradek-consumer-groups.sh, and what HTTP writes is read by kafkajs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from tests.harness.cluster import LocalProcessBackend, shared_cluster
from tests.harness.http import create_topic, metadata, read_all, request, stable_group
from tests.harness.http import produce as http_produce
from tests.harness.wait import SLOW_MACHINE_S, wait_until

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / "tests" / "clients" / "node"
NODE = shutil.which("node")
if NODE is None:
    pytest.skip("node is not installed (scripts/setup.sh installs kafkajs when node and npm are)",
                allow_module_level=True)
if not (NODE_DIR / "node_modules" / "kafkajs" / "package.json").exists():
    pytest.skip("the npm package kafkajs is not installed: run npm install --prefix tests/clients/node "
                "(scripts/setup.sh does when node and npm are present)", allow_module_level=True)

# kafkajs's default producer retries a retriable error 5 times with backoff up to 30 s in all (retry.maxRetryTime):
# an unknown topic is answered after those retries, so a driver that meets one needs more than that.
KAFKAJS_RETRIES_S = 30.0
# A driver run: node's start, kafkajs's connect and metadata, its work; generous for a loaded 2-core machine.
DRIVER_S = SLOW_MACHINE_S + KAFKAJS_RETRIES_S
# A kafkajs member learns of a rebalance from its next heartbeat (every 3 s by default), rejoins, and the
# coordinator completes the join when every member has (or the rebalance timeout, 60 s by default, passes).
REBALANCE_S = SLOW_MACHINE_S * 2


@pytest.fixture(scope="module")
def cluster(zk_ensemble: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessBackend]:
    """One 3-broker cluster for the module, each broker with a REST and a Kafka listener (tests use own topics
    and groups)."""
    backend = shared_cluster(zk_ensemble, tmp_path_factory.mktemp("kafka-kafkajs"), "kafka-kafkajs", 3)
    yield backend
    backend.close()


def new_topic(c: LocalProcessBackend, partitions: int, rf: int = 3) -> str:
    name = f"kjs-{uuid.uuid4().hex[:8]}"
    create_topic(c.broker_url(c.broker_ids()[0]), name, partitions, rf,
                 seen_by=[c.broker_url(b) for b in c.broker_ids()])
    return name


def new_group() -> str:
    return f"kjs-g-{uuid.uuid4().hex[:8]}"


def driver(script: str, spec: dict[str, Any], timeout: float = DRIVER_S) -> list[dict[str, Any]]:
    """Run one of the kafkajs drivers to its end; its JSON lines (it must exit 0 and print {"done": true})."""
    done = subprocess.run([NODE or "node", str(NODE_DIR / script), json.dumps(spec)], cwd=NODE_DIR,
                          capture_output=True, text=True, timeout=timeout)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert done.returncode == 0 and lines and lines[-1] == {"done": True}, (
        f"{script} exited {done.returncode}: {done.stdout[-2000:]} {done.stderr[-3000:]}")
    return lines[:-1]


def kafkajs_produce(c: LocalProcessBackend, sends: list[dict[str, Any]],
                    producer: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    spec: dict[str, Any] = {"brokers": c.kafka_bootstrap, "sends": sends}
    if producer is not None:
        spec["producer"] = producer
    return driver("kafkajs_produce.js", spec)


def produce_numbered(c: LocalProcessBackend, topic: str, prefix: str, count: int,
                     partitions: int) -> dict[tuple[int, int], str]:
    """``count`` values prefix-i on partition i % partitions with kafkajs's producer, in sends of 100; every send
    acknowledged. Where each value was written: {(partition, offset): value}, from the acknowledgements' base
    offsets (a partition's records in one send get consecutive offsets, in order)."""
    written: dict[tuple[int, int], str] = {}
    for line in kafkajs_produce(c, [{"topic": topic, "prefix": prefix, "count": count, "partitions": partitions}]):
        assert line["ok"], line
        base = {r["partition"]: r["baseOffset"] for r in line["results"]}
        assert all(r["errorCode"] == 0 for r in line["results"]), line
        nth: dict[int, int] = {}
        for partition, value in line["sent"]:
            written[(partition, base[partition] + nth.get(partition, 0))] = value
            nth[partition] = nth.get(partition, 0) + 1
    assert len(written) == count
    return written


def end_offsets(url: str, topic: str, partitions: int) -> dict[int, int]:
    out = {}
    for p in range(partitions):
        status, body, _ = request("GET", f"{url}/topics/{topic}/partitions/{p}/offsets")
        assert status == 200, body
        out[p] = int(body["end_offset"])
    return out


def http_offsets(url: str, group: str) -> dict[int, int]:
    status, body, _ = request("GET", f"{url}/groups/{group}/offsets")
    assert status == 200, body
    return {o["partition"]: o["offset"] for o in body["offsets"]}


class Member:
    """A kafkajs consumer in a group (kafkajs_member.js) as a child process: its JSON lines are collected on a
    thread; stop() asks it to disconnect (it commits and leaves the group), close() ends it by pid if still alive."""

    def __init__(self, c: LocalProcessBackend, group: str, topic: str, name: str, log_dir: Path) -> None:
        self.name = name
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.stderr: IO[bytes] = open(log_dir / f"{name}.stderr", "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [NODE or "node", str(NODE_DIR / "kafkajs_member.js"),
             json.dumps({"brokers": c.kafka_bootstrap, "groupId": group, "topic": topic, "name": name})],
            cwd=NODE_DIR, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        self.reader = threading.Thread(target=self._read, name=f"read-{name}", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                event = json.loads(line)
                with self.lock:
                    self.events.append(event)

    def of(self, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.events if e["event"] == kind]

    def records(self) -> list[tuple[int, int, str]]:
        return [(e["partition"], e["offset"], e["value"]) for e in self.of("record")]

    def assigned(self) -> set[int] | None:
        """What the member's latest join gave it (None before its first)."""
        joins = self.of("join")
        return set(joins[-1]["assigned"]) if joins else None

    def check(self) -> None:
        bad = self.of("crash") + self.of("fatal") + self.of("stop-failed")
        assert not bad, f"{self.name}: {bad}"
        assert self.proc.poll() is None or self.of("stopped"), (
            f"{self.name} exited {self.proc.returncode} without stopping: {self.tail()}")

    def tail(self) -> str:
        return (Path(self.stderr.name).read_text(errors="replace"))[-3000:]

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()
        rc = self.proc.wait(SLOW_MACHINE_S)
        self.reader.join(SLOW_MACHINE_S)
        assert rc == 0 and self.of("stopped"), f"{self.name} exited {rc}: {self.events[-3:]} {self.tail()}"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # by pid (Popen's own child)
            self.proc.wait(SLOW_MACHINE_S)
        self.stderr.close()


@pytest.fixture
def members(tmp_path: Path) -> Iterator[tuple[list[Member], Path]]:
    """The test's members; every one still running at the end is ended by its pid."""
    started: list[Member] = []
    yield started, tmp_path
    for m in started:
        m.close()


def start_member(members: tuple[list[Member], Path], c: LocalProcessBackend, group: str, topic: str,
                 name: str) -> Member:
    started, log_dir = members
    m = Member(c, group, topic, name, log_dir)
    started.append(m)
    return m


def wait_for_assignment(live: list[Member], joins_before: dict[str, int], partitions: int, what: str) -> None:
    """Every live member joined again after ``joins_before`` (a new generation), and their latest assignments
    share the partitions: each partition held by exactly one member."""

    def shared() -> bool:
        for m in live:
            m.check()
        if any(len(m.of("join")) <= joins_before.get(m.name, 0) for m in live):
            return False
        held = [p for m in live for p in (m.assigned() or set())]
        return sorted(held) == list(range(partitions))

    wait_until(shared, REBALANCE_S, what)


# ------------------------------------------------------------------------------------------ produce / consume


def test_kafkajs_produces_with_acks_all_and_a_group_consumer_reads_every_record_once(
        cluster: LocalProcessBackend, members: tuple[list[Member], Path]) -> None:
    """kafkajs's producer (acks -1) writes 900 records over 3 partitions with RF 3: every acknowledged offset
    holds its value when read over HTTP, on every replica's leader; records written over HTTP are read by kafkajs
    too; a kafkajs group consumer reads each record exactly once, and the offsets it commits are the log ends."""
    topic, group, partitions = new_topic(cluster, 3), new_group(), 3
    written = produce_numbered(cluster, topic, "v", 900, partitions)
    assert {p for p, _ in written} == set(range(partitions))
    for p in range(partitions):  # offsets from 0, without a gap, 300 per partition (i % 3)
        assert sorted(o for q, o in written if q == p) == list(range(300))
    url = cluster.broker_url(2)
    over_http = {(p, r["offset"]): r["value"] for p in range(partitions) for r in read_all(url, topic, p)}
    assert over_http == written
    # the other way round: records produced over HTTP (the JSON embedded format: a value's bytes are its JSON
    # text), then read by kafkajs
    for p in range(partitions):
        status, body = http_produce(cluster.broker_url(1), topic, p, [f"http-{p}-{i}" for i in range(10)])
        assert status == 200, body
        for i, o in enumerate(body["offsets"]):
            written[(p, o["offset"])] = json.dumps(f"http-{p}-{i}")
    assert len(written) == 930

    consumer = start_member(members, cluster, group, topic, "reader")
    wait_until(lambda: consumer.check() or len(consumer.of("record")) >= len(written), DRIVER_S,
               f"kafkajs to consume {len(written)} records")
    got = consumer.records()
    assert len(got) == len(written), f"{len(got)} records consumed, {len(written)} written"
    assert {(p, o): v for p, o, v in got} == written
    assert consumer.assigned() == set(range(partitions))
    ends = end_offsets(url, topic, partitions)
    assert ends == {p: 310 for p in range(partitions)}
    wait_until(lambda: http_offsets(url, group) == ends, SLOW_MACHINE_S, "kafkajs's commits to reach the log ends")
    consumer.stop()
    commits = [tuple(o) for e in consumer.of("commit") for o in e["offsets"]]
    assert {p: max(o for q, o in commits if q == p) for p in range(partitions)} == ends


# -------------------------------------------------------------------------------------------------- groups


def test_kafkajs_group_rebalances_as_members_join_and_leave_and_commits_are_read_by_http_and_the_tool(
        cluster: LocalProcessBackend, members: tuple[list[Member], Path]) -> None:
    """Three kafkajs consumers join one group one after the other while records keep coming, then leave one
    after the other (disconnect: a final commit and LeaveGroup). After each change every live member rejoins and
    the 6 partitions are shared without overlap; every record is consumed, and none twice (kafkajs commits
    after each batch and before it rejoins, and a partition changes hands at its committed offset). GET
    /groups/G and odradek-consumer-groups.sh --members show the live members with what they hold; at the end
    the committed offsets, read over HTTP and by the tool, are the log ends and the group is Empty."""
    topic, group, partitions = new_topic(cluster, 6), new_group(), 6
    url = cluster.broker_url(3)
    written: dict[tuple[int, int], str] = {}
    batch = 0

    def feed() -> None:
        nonlocal batch
        written.update(produce_numbered(cluster, topic, f"b{batch}", 120, partitions))
        batch += 1

    live: list[Member] = []
    everyone: list[Member] = []

    def consumed() -> list[tuple[int, int, str]]:
        return [r for m in everyone for r in m.records()]

    def all_consumed(what: str) -> None:
        def done() -> bool:
            for m in live:
                m.check()
            return {(p, o) for p, o, _ in consumed()} >= set(written)
        wait_until(done, REBALANCE_S, what)

    feed()
    for name in ("m1", "m2", "m3"):
        before = {m.name: len(m.of("join")) for m in live}
        m = start_member(members, cluster, group, topic, name)
        live.append(m)
        everyone.append(m)
        wait_for_assignment(live, before, partitions, f"the {len(live)} members to share the partitions")
        feed()
        all_consumed(f"every record consumed with {len(live)} members")

    check_live_group(cluster, url, topic, group, live)

    while live:
        leaving = live.pop(0)
        before = {m.name: len(m.of("join")) for m in live}
        leaving.stop()
        if live:
            wait_for_assignment(live, before, partitions,
                                f"{[m.name for m in live]} to share the partitions after {leaving.name} left")
            feed()
            all_consumed(f"every record consumed after {leaving.name} left")

    got = consumed()
    seen: dict[tuple[int, int], int] = {}
    for p, o, v in got:
        assert written[(p, o)] == v, (p, o, v)
        seen[(p, o)] = seen.get((p, o), 0) + 1
    assert set(seen) == set(written)
    twice = sorted(k for k, n in seen.items() if n > 1)
    assert not twice, f"{len(twice)} records consumed more than once, e.g. {twice[:5]}"
    assert all(m.records() for m in everyone), {m.name: len(m.records()) for m in everyone}

    ends = end_offsets(url, topic, partitions)
    assert sum(ends.values()) == len(written) == 120 * 6  # before m1, after each join, after 2 leave
    assert http_offsets(cluster.broker_url(1), group) == ends  # the final commits were made before leaving
    status, body, _ = request("GET", f"{url}/groups/{group}/offsets")
    assert status == 200 and all(o["lag"] == 0 for o in body["offsets"]), body
    status, described, _ = request("GET", f"{url}/groups/{group}")
    assert status == 200 and described["state"] == "Empty" and described["members"] == [], described
    tool = subprocess.run([str(ROOT / "scripts" / "odradek-consumer-groups.sh"), "--bootstrap-server", url,
                           "--describe", "--group", group], capture_output=True, text=True, timeout=90,
                          env={**os.environ})
    assert tool.returncode == 0, tool.stderr
    rows = [line.split() for line in tool.stdout.splitlines() if line.startswith(group)]
    assert {(cells[1], int(cells[2])): int(cells[3]) for cells in rows} == {(topic, p): o for p, o in ends.items()}


def check_live_group(cluster: LocalProcessBackend, url: str, topic: str, group: str, live: list[Member]) -> None:
    """GET /groups/G names the kafkajs members (client ids) with the partitions their assignments hold, decoded
    from the consumer-protocol bytes the kafkajs leader sent; the tool's --members view counts the same."""
    held = {(topic, p): m.name for m in live for p in m.assigned() or set()}

    body = stable_group(url, group, held, "the kafkajs members' assignments in GET /groups/G")
    assert body["kind"] == "classic" and body["protocol_type"] == "consumer"
    leaders = {e["leaderId"] for m in live for e in m.of("join")[-1:]}
    assert leaders == {body["leader"]}, (leaders, body["leader"])
    assert {m["member_id"] for m in body["members"]} == {m.of("join")[-1]["memberId"] for m in live}
    status, listed, _ = request("GET", f"{cluster.broker_url(1)}/groups")
    assert status == 200, listed
    mine = [g for g in listed["groups"] if g["group"] == group]
    assert mine and mine[0]["state"] == "Stable" and mine[0]["members"] == len(live), listed
    tool = subprocess.run([str(ROOT / "scripts" / "odradek-consumer-groups.sh"), "--bootstrap-server", url,
                           "--describe", "--group", group, "--members", "--verbose"], capture_output=True,
                          text=True, timeout=90, env={**os.environ})
    assert tool.returncode == 0, tool.stderr
    rows = [line.split() for line in tool.stdout.splitlines() if line.startswith(group)]
    assert sorted((cells[3], int(cells[4])) for cells in rows) == sorted(
        (m.name, len(m.assigned() or set())) for m in live)


# --------------------------------------------------------------------------------------------------- admin


def test_kafkajs_admin_creates_topics_reads_metadata_and_offsets_across_both_doors(
        cluster: LocalProcessBackend, members: tuple[list[Member], Path]) -> None:
    """kafkajs's admin client: createTopics (4 partitions, RF 3) is seen over HTTP by every broker, a second
    createTopics of the same name answers false (TOPIC_ALREADY_EXISTS), an impossible replication factor is
    INVALID_REPLICATION_FACTOR; fetchTopicMetadata agrees with HTTP's metadata; fetchTopicOffsets with HTTP's
    log ends; fetchOffsets reads what a kafkajs consumer committed; describeGroups and listGroups see the group,
    Empty once it left; an offset reset over HTTP and one set by kafkajs's setOffsets are read by both doors."""
    topic, group, partitions = f"kjs-{uuid.uuid4().hex[:8]}", new_group(), 4
    spec_topic = {"topic": topic, "numPartitions": partitions, "replicationFactor": 3}
    created, again, refused = driver("kafkajs_admin.js", {"brokers": cluster.kafka_bootstrap, "calls": [
        {"method": "createTopics", "args": [{"topics": [spec_topic], "waitForLeaders": True}]},
        {"method": "createTopics", "args": [{"topics": [spec_topic]}]},
        {"method": "createTopics", "args": [{"topics": [
            {"topic": f"{topic}-rf4", "numPartitions": 1, "replicationFactor": 4}]}]},
    ]})
    assert created == {"method": "createTopics", "ok": True, "result": True}, created
    assert again == {"method": "createTopics", "ok": True, "result": False}, again
    assert not refused["ok"] and refused["error"]["name"] == "KafkaJSAggregateError", refused
    [why] = refused["error"]["errors"]
    assert (why["name"], why["type"], why["code"], why["topic"]) == (
        "KafkaJSCreateTopicError", "INVALID_REPLICATION_FACTOR", 38, f"{topic}-rf4"), why

    def seen_over_http(b: int) -> dict[str, Any] | None:
        shown = metadata(cluster.broker_url(b), topic)
        ok = len(shown["partitions"]) == partitions and all(p["leader"] >= 0 for p in shown["partitions"])
        return shown if ok else None

    shown = {b: wait_until(lambda b=b: seen_over_http(b), SLOW_MACHINE_S, f"broker {b} to see {topic} over HTTP")
             for b in cluster.broker_ids()}
    assert metadata(cluster.broker_url(1), f"{topic}-rf4")["error"] == "UNKNOWN_TOPIC"

    written = produce_numbered(cluster, topic, "a", 40, partitions)
    consumer = start_member(members, cluster, group, topic, "admin-reader")
    wait_until(lambda: consumer.check() or len(consumer.of("record")) >= len(written), DRIVER_S,
               "kafkajs to consume the 40 records")
    ends = end_offsets(cluster.broker_url(1), topic, partitions)
    assert ends == {p: 10 for p in range(partitions)}
    wait_until(lambda: http_offsets(cluster.broker_url(1), group) == ends, SLOW_MACHINE_S, "the commits")
    consumer.stop()

    calls = [
        {"method": "fetchTopicMetadata", "args": [{"topics": [topic]}]},
        {"method": "fetchTopicOffsets", "args": [topic]},
        {"method": "fetchOffsets", "args": [{"groupId": group, "topics": [topic]}]},
        {"method": "describeGroups", "args": [[group]]},
        {"method": "listGroups"},
    ]
    results = driver("kafkajs_admin.js", {"brokers": cluster.kafka_bootstrap, "calls": calls})
    assert [r["method"] for r in results] == [c["method"] for c in calls]
    assert all(r["ok"] for r in results), [r for r in results if not r["ok"]]
    meta, topic_offsets, committed, groups, listed = (r["result"] for r in results)

    [t] = meta["topics"]
    assert t["name"] == topic and sorted(p["partitionId"] for p in t["partitions"]) == list(range(partitions))
    over_http = {p["partition"]: p for p in shown[1]["partitions"]}
    for p in t["partitions"]:
        assert p["partitionErrorCode"] == 0
        assert sorted(p["replicas"]) == sorted(cluster.broker_ids()) and sorted(p["isr"]) == sorted(p["replicas"])
        assert p["leader"] == over_http[p["partitionId"]]["leader"], (p, over_http[p["partitionId"]])

    assert {o["partition"]: (int(o["low"]), int(o["high"]), int(o["offset"])) for o in topic_offsets} == {
        p: (0, end, end) for p, end in ends.items()}

    def as_map(fetched: list[dict[str, Any]]) -> dict[int, int]:
        [entry] = fetched
        assert entry["topic"] == topic
        return {o["partition"]: int(o["offset"]) for o in entry["partitions"]}

    assert as_map(committed) == ends  # what the kafkajs consumer committed

    # offsets set through one door are read through the other: HTTP resets partition 1, kafkajs partition 0
    status, body, _ = request("POST", f"{cluster.broker_url(2)}/groups/{group}/offsets/reset",
                              {"offsets": [{"topic": topic, "partition": 1, "offset": 2}]})
    assert status == 200, body
    set_by_kafkajs, fetched = driver("kafkajs_admin.js", {"brokers": cluster.kafka_bootstrap, "calls": [
        {"method": "setOffsets", "args": [{"groupId": group, "topic": topic,
                                            "partitions": [{"partition": 0, "offset": "3"}]}]},
        {"method": "fetchOffsets", "args": [{"groupId": group, "topics": [topic]}]},
    ]})
    assert set_by_kafkajs["ok"] and fetched["ok"], (set_by_kafkajs, fetched)
    assert as_map(fetched["result"]) == {**ends, 0: 3, 1: 2}
    assert http_offsets(cluster.broker_url(3), group) == {**ends, 0: 3, 1: 2}

    [described] = groups["groups"]
    assert (described["groupId"], described["errorCode"], described["state"], described["protocolType"],
            described["members"]) == (group, 0, "Empty", "consumer", [])
    assert {"groupId": group, "protocolType": "consumer"} in listed["groups"], listed


# -------------------------------------------------------------------------------------------------- errors


def test_kafkajs_sees_kafka_errors_for_an_unknown_topic_and_a_record_too_large(cluster: LocalProcessBackend) -> None:
    """With allowAutoTopicCreation false, a send to a topic that does not exist fails, after kafkajs's retries,
    with UNKNOWN_TOPIC_OR_PARTITION (code 3) as the cause, and no topic is created; a 1.1 MB value (over the
    default max.message.bytes, 1048588) is refused at once as KafkaJSProtocolError MESSAGE_TOO_LARGE (code 10,
    not retriable) and nothing is written; the producer's next send succeeds."""
    topic, missing = new_topic(cluster, 1), f"kjs-missing-{uuid.uuid4().hex[:8]}"
    unknown, too_large, fine = kafkajs_produce(cluster, [
        {"topic": missing, "messages": [{"value": "nobody reads this"}]},
        {"topic": topic, "valueBytes": 1_100_000, "partition": 0},
        {"topic": topic, "messages": [{"value": "small", "partition": 0}]},
    ], producer={"allowAutoTopicCreation": False})

    assert not unknown["ok"] and unknown["topic"] == missing, unknown
    error = unknown["error"]
    cause = error if error["name"] == "KafkaJSProtocolError" else error["cause"]
    assert error["name"] in ("KafkaJSNumberOfRetriesExceeded", "KafkaJSProtocolError"), error
    assert (cause["name"], cause["type"], cause["code"]) == (
        "KafkaJSProtocolError", "UNKNOWN_TOPIC_OR_PARTITION", 3), error
    assert metadata(cluster.broker_url(1), missing)["error"] == "UNKNOWN_TOPIC"

    assert not too_large["ok"], too_large
    assert {k: too_large["error"][k] for k in ("name", "type", "code", "retriable")} == {
        "name": "KafkaJSProtocolError", "type": "MESSAGE_TOO_LARGE", "code": 10, "retriable": False}, too_large

    assert fine["ok"] and fine["results"] == [{"partition": 0, "baseOffset": 0, "errorCode": 0}], fine
    assert end_offsets(cluster.broker_url(2), topic, 1) == {0: 1}
    assert [r["value"] for r in read_all(cluster.broker_url(3), topic, 0)] == ["small"]
