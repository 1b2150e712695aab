"""kafka-reassign-partitions.sh's promises, through scripts/odradek-reassign-partitions.sh against real processes:
a move under continuous acks=all produce loses nothing, --verify reports it, the old replica's data goes, and a
throttle holds the replication rate (measured on the receiving broker) to its limit."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest

from odradek import Producer
from tests.conftest import MakeCluster
from tests.harness.cluster import LocalProcessBackend
from tests.harness.http import partition_state, read_all, request
from tests.harness.wait import SLOW_MACHINE_S, wait_until
from tests.integration.test_replication import TOPIC, SequentialProducer, urls

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "odradek-reassign-partitions.sh"
TOPICS_SCRIPT = ROOT / "scripts" / "odradek-topics.sh"
RATE_CEILING = 1.2
"""A throttled replica catches up at most this times the throttle: the property, whatever the machine's load."""
RATE_FLOOR = 0.6
"""...and at least this times it. Looser than the ceiling because a loaded machine can only copy slower; it
still excludes a throttle applied twice (by the leader and again by the follower: half the limit)."""


def run(script: Path, *args: str, timeout: float = 2 * SLOW_MACHINE_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=timeout, check=False)


def reassign(cluster: LocalProcessBackend, *args: str) -> subprocess.CompletedProcess[str]:
    return run(SCRIPT, "--bootstrap-server", cluster.broker_url(1), *args)


def write_moves(path: Path, topic: str, moves: dict[int, list[int]]) -> Path:
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": r} for p, r in moves.items()]}))
    return path


def create(cluster: LocalProcessBackend, topic: str, assignment: str, *configs: str) -> None:
    args = ["--bootstrap-server", cluster.broker_url(1), "--create", "--topic", topic, "--replica-assignment",
            assignment]
    for c in configs:
        args += ["--config", c]
    done = run(TOPICS_SCRIPT, *args)
    assert done.returncode == 0, done.stderr
    wait_until(lambda: all(partition_state(u, topic)["leader"] >= 0 for u in urls(cluster)), SLOW_MACHINE_S,
               "a leader")


def fill(cluster: LocalProcessBackend, topic: str, total: int) -> None:
    """``total`` bytes into partition 0 in ~10 KB records (incompressible enough; no compression anyway)."""
    value = bytes(range(256)) * 39
    with Producer(cluster.broker_url(1), acks="1", batch_size=512 * 1024, linger_ms=20) as p:
        for _ in range(total // len(value)):
            p.send(topic, value, partition=0)


def move_throttled(cluster: LocalProcessBackend, tmp_path: Path, topic: str, limit: int) -> Path:
    """Reassign partition 0 to brokers [1, 2] under an inter-broker throttle of ``limit`` B/s; the moves file."""
    moves = write_moves(tmp_path / "moves.json", topic, {0: [1, 2]})
    executed = reassign(cluster, "--execute", "--reassignment-json-file", str(moves), "--throttle", str(limit))
    assert executed.returncode == 0, executed.stderr
    assert f"The inter-broker throttle limit was set to {limit} B/s" in executed.stdout
    return moves


def size_on(cluster: LocalProcessBackend, broker: int, topic: str, partition: int = 0) -> int:
    """The bytes of ``topic``-``partition`` on ``broker``'s disk, as its log_dirs reports them."""
    _, body, _ = request("GET", f"{cluster.broker_url(broker)}/admin/log_dirs")
    return sum(r["size"] for d in body["log_dirs"] for r in d["replicas"]
               if r["topic"] == topic and r["partition"] == partition)


def copy_rate(samples: list[tuple[float, int]], total: int) -> float:
    """B/s between the first and last (time, size) samples taken from 10 % to 90 % of ``total`` copied."""
    window = [s for s in samples if total * 0.1 <= s[1] <= total * 0.9]
    assert len(window) >= 4, samples
    (t0, b0), (t1, b1) = window[0], window[-1]
    return (b1 - b0) / (t1 - t0)


def test_move_under_acks_all_produce_loses_nothing_and_deletes_the_old_replica(
        make_cluster: MakeCluster, tmp_path: Path) -> None:
    cluster = make_cluster(brokers=3)
    create(cluster, TOPIC, "1:2", "min.insync.replicas=2", "file.delete.delay.ms=0")
    # The produce goes on until the move is verified complete, so it spans the whole move on any machine.
    moved = threading.Event()
    producer = SequentialProducer(cluster, pause_s=0.005, stop=moved)
    producer.start()
    wait_until(lambda: len(producer.acked) >= 50, SLOW_MACHINE_S, "some acknowledged records before the move")

    moves = write_moves(tmp_path / "moves.json", TOPIC, {0: [2, 3]})
    executed = reassign(cluster, "--execute", "--reassignment-json-file", str(moves))
    assert executed.returncode == 0, executed.stderr
    print("--execute output:\n" + executed.stdout)
    assert "Current partition replica assignment" in executed.stdout
    assert '"replicas":[1,2]' in executed.stdout
    assert f"Successfully started partition reassignment(s) for {TOPIC}-0" in executed.stdout

    verified = wait_until(
        lambda: (v := reassign(cluster, "--verify", "--reassignment-json-file", str(moves))).returncode == 0
        and f"Reassignment of partition {TOPIC}-0 is complete." in v.stdout and v, 2 * SLOW_MACHINE_S,
        "--verify to say complete",
        interval=0.5)
    print("--verify output:\n" + verified.stdout)
    moved.set()
    producer.join(2 * SLOW_MACHINE_S)  # the send in flight, retried for at most SLOW_MACHINE_S
    assert not producer.is_alive()
    assert not producer.failed, producer.errors[-5:]

    state = partition_state(cluster.broker_url(2), TOPIC)
    assert sorted(state["replicas"]) == [2, 3] and sorted(state["isr"]) == [2, 3]
    values = [r["value"] for r in read_all(cluster.broker_url(state["leader"]), TOPIC)]
    missing = [v for v in producer.acked if v not in set(values)]
    assert not missing, f"{len(missing)} acknowledged records lost: {missing[:5]}"
    assert [v for v in dict.fromkeys(values) if v in set(producer.acked)] == producer.acked  # in order

    old = cluster.cluster.slots[1].data_dir
    wait_until(lambda: not [p for p in old.iterdir() if p.name.startswith(f"{TOPIC}-0")], SLOW_MACHINE_S,
               "broker 1 to delete its copy of the moved partition")
    assert (cluster.cluster.slots[3].data_dir / f"{TOPIC}-0").is_dir()


def test_a_throttle_holds_the_replication_rate(make_cluster: MakeCluster, tmp_path: Path) -> None:
    """A new replica catches up 20 MB under a 2 MB/s throttle: the rate measured on the receiving broker stays
    at most 20% over the limit (and not far under it), and --verify removes the throttle once the move is done."""
    cluster = make_cluster(brokers=3)
    topic, limit, total = "big", 2_000_000, 20_000_000
    create(cluster, topic, "1")
    fill(cluster, topic, total)
    moves = move_throttled(cluster, tmp_path, topic, limit)

    samples: list[tuple[float, int]] = []
    deadline = time.monotonic() + 2 * SLOW_MACHINE_S  # the copy takes ~10 s at the limit; the rate is the property
    while time.monotonic() < deadline:
        size = size_on(cluster, 2, topic)
        samples.append((time.monotonic(), size))  # timed once the size is known: its request may be slow
        if size >= total * 0.9:
            break
        time.sleep(0.25)
    rate = copy_rate(samples, total)
    print(f"measured replication rate {rate / 1e6:.2f} MB/s under a {limit / 1e6:.1f} MB/s throttle")
    assert RATE_FLOOR * limit <= rate <= RATE_CEILING * limit, rate

    verified = wait_until(
        lambda: (v := reassign(cluster, "--verify", "--reassignment-json-file", str(moves))).returncode == 0
        and "is complete." in v.stdout and v, 2 * SLOW_MACHINE_S, "the move to complete", interval=0.5)
    assert "Clearing broker-level throttles on brokers 1,2,3" in verified.stdout
    assert f"Clearing topic-level throttles on topic {topic}" in verified.stdout
    configs = run(ROOT / "scripts" / "odradek-configs.sh", "--bootstrap-server", cluster.broker_url(1),
                  "--describe", "--entity-type", "brokers", "--entity-name", "1")
    assert "throttled.rate" not in configs.stdout, configs.stdout


def test_generate_proposes_an_assignment_on_the_listed_brokers(make_cluster: MakeCluster, tmp_path: Path) -> None:
    cluster = make_cluster(brokers=3)
    create(cluster, "gen", "1:2,2:3")
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "gen"}]}))
    done = reassign(cluster, "--generate", "--topics-to-move-json-file", str(topics), "--broker-list", "2,3")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment"
    current = json.loads(lines[1])
    assert [p["replicas"] for p in current["partitions"]] == [[1, 2], [2, 3]]
    assert lines[3] == "Proposed partition reassignment configuration"
    proposed = json.loads(lines[4])
    assert all(sorted(p["replicas"]) == [2, 3] for p in proposed["partitions"])


def test_bad_options_and_files_fail_with_one_line(make_cluster: MakeCluster, tmp_path: Path) -> None:
    cluster = make_cluster(brokers=1)
    create(cluster, "t", "1")
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json")
    dup = write_moves(tmp_path / "dup.json", "t", {0: [1, 1]})
    unknown = write_moves(tmp_path / "unknown.json", "nope", {0: [1]})
    no_broker = write_moves(tmp_path / "nobroker.json", "t", {0: [7]})
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "t"}]}))
    cases = [
        ([], "exactly one action"),
        (["--execute"], "--reassignment-json-file"),
        (["--execute", "--reassignment-json-file", str(bad_json)], "is not valid JSON"),
        (["--execute", "--reassignment-json-file", str(tmp_path / "missing.json")], "Cannot read"),
        (["--execute", "--reassignment-json-file", str(dup)], "duplicate entries"),
        (["--execute", "--reassignment-json-file", str(unknown)], "does not exist"),
        (["--execute", "--reassignment-json-file", str(no_broker)], "Unknown broker"),
        (["--verify", "--reassignment-json-file", str(dup), "--throttle", "5"], "--throttle can only be used"),
        (["--execute", "--reassignment-json-file", str(dup), "--replica-alter-log-dirs-throttle", "5"],
         "--replica-alter-log-dirs-throttle is not supported"),
        (["--generate", "--topics-to-move-json-file", str(bad_json), "--broker-list", "1"], "is not valid JSON"),
        (["--generate", "--topics-to-move-json-file", str(topics), "--broker-list", "1,1"], "duplicate entries"),
        (["--generate", "--topics-to-move-json-file", str(topics), "--broker-list", "1,x"], "--broker-list must"),
        (["--bogus"], "unrecognized arguments"),
    ]
    for args, reason in cases:
        done = reassign(cluster, *args)
        assert done.returncode != 0, (args, done.stdout)
        assert len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
        assert reason in done.stderr, (args, done.stderr)
