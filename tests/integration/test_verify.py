"""``odradek verify``: a short run under faults must find nothing, and a planted bug must be found.

The runs go through the command line in a subprocess, as a user runs it: the verify driver joins a network
namespace of its own making (``setns``), which must not leak into the pytest process. Each workload is run
twice, a short run under faults that must pass and a planted bug that must fail: the Python client's (the
default) and librdkafka's (``--via kafka``, which also needs confluent-kafka). They need root (network
namespaces, iptables inside them, a loop-mounted disk) and Debian's ZooKeeper; otherwise they are skipped with
the reason. The checker's own tests at the top need nothing: a checker that cannot fail is worth nothing, so each
anomaly is planted in a synthetic history first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from odradek_verify import checker
from odradek_verify.netns import netns_supported
from odradek_verify.workload import History, PollOp, WriteOp
from tests.harness.wait import SLOW_MACHINE_S, wait_until

REPO = Path(__file__).resolve().parents[2]
NETWORK_KINDS = {"part-leader-followers", "part-broker-zk", "part-majority-minority", "part-2013",
                 "part-leader-isolated", "session-expire"}
CLOCK_KINDS = {"clock-jump", "clock-strobe"}


def _write(producer: str, seq: int, partition: int, offset: int | None, ok: bool = True) -> WriteOp:
    return WriteOp(producer, seq, f"{producer}-{seq}", partition, float(seq), float(seq) + 0.01, ok, offset)


def test_checker_finds_each_planted_anomaly() -> None:
    h = History()
    h.writes = [_write("p0", 1, 0, 0), _write("p0", 2, 0, 1), _write("p0", 3, 0, 2), _write("p0", 4, 0, 3),
                _write("p1", 1, 1, 0), _write("p1", 2, 1, 1)]
    reads = {
        0: [(0, "p0-1"), (1, "p0-3"), (2, "p0-2"), (3, "p0-1")],  # p0-2/p0-3 swapped (reordered, misplaced); p0-4 lost
        1: [(0, "p1-1"), (1, "p1-2"), (2, "ghost-1")],  # ghost-1 never sent
    }
    q = checker.check_queue(h, reads)
    assert q["lost"] == 1 and q["lost_examples"][0]["value"] == "p0-4"
    # where: partition 0's offset 3, read up to offset 4 (the ghost-free part of the final read)
    assert q["lost_by_partition"] == {0: {"count": 1, "offsets": [3, 3], "read_up_to": 4}}
    assert q["lost_detail"] == {"lost-write (later offsets read)": 0, "unseen (at the tail)": 1}
    assert q["duplicated"] == 1 and "p0-1" in q["duplicated_examples"]
    assert q["misplaced"] == 2
    assert q["reordered"] == 1
    assert q["unexpected"] == 1
    clean = checker.check_queue(h, {0: [(0, "p0-1"), (1, "p0-2"), (2, "p0-3"), (3, "p0-4")],
                                    1: [(0, "p1-1"), (1, "p1-2")]})
    assert (clean["lost"], clean["duplicated"], clean["misplaced"], clean["reordered"], clean["unexpected"]) == (
        0, 0, 0, 0, 0)


def test_checker_takes_an_acknowledgement_without_offset_as_acknowledged() -> None:
    """librdkafka may deliver a write as persisted with offset -1 (its implicit ack): still acknowledged, so it
    must be read back, in its partition."""
    h = History()
    h.writes = [_write("k0", 1, 0, None), _write("k0", 2, 1, None), _write("k0", 3, 0, None), _write("k0", 4, 0, 1)]
    q = checker.check_queue(h, {0: [(0, "k0-1"), (1, "k0-4")], 1: [], 2: [(0, "k0-2")]})
    assert q["acknowledged"] == 4 and q["acknowledged_without_offset"] == 3
    assert q["lost"] == 1 and q["lost_examples"][0]["value"] == "k0-3"
    assert q["misplaced"] == 1 and q["misplaced_examples"][0]["value"] == "k0-2"  # read in partition 2, not 1


def test_checker_finds_divergent_replicas_and_group_anomalies() -> None:
    replicas = {0: {1: {0: "a", 1: "b", 2: "c"}, 2: {0: "a", 1: "x", 2: "c"}, 3: {0: "a", 1: "b"}}}
    d = checker.check_divergence(replicas, {0: 3}, {0: [1, 2, 3]})
    assert d["divergent"] == 2  # offset 1 differs; offset 2 missing on ISR member 3
    assert checker.check_divergence(replicas, {0: 1}, {0: [1, 2, 3]})["divergent"] == 0
    h = History()
    h.polls = [PollOp("m0", 1, 0, 0, "a", 1.0), PollOp("m0", 1, 0, 2, "c", 2.0), PollOp("m0", 1, 0, 1, "b", 3.0)]
    g = checker.check_group(h, {0: [(0, "a"), (1, "b"), (2, "c")]}, {0: 7})
    assert g["poll_skips"] == 1 and g["nonmonotonic_polls"] == 1 and g["committed_beyond_processed"] == 1


def _skip_reason() -> str | None:
    if not Path("/usr/share/java/zookeeper.jar").exists():
        return "ZooKeeper is not installed (apt-get install zookeeper)"
    return netns_supported()


def _verify(tmp_path: Path, *extra: str, timeout: float = 900) -> tuple[int, dict, str]:
    out = tmp_path / "verify"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "odradek_tools", "verify", "--out", str(out), *extra],
                          cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)
    text = proc.stdout + proc.stderr
    report_path = out / "report.json"
    assert report_path.exists(), f"no report (exit {proc.returncode}):\n{text[-4000:]}"
    return proc.returncode, json.loads(report_path.read_text()), text


def _leftovers(out: Path) -> list[str]:
    """Namespaces of this run (named in its netlab.json) still present, and loop devices on its image."""
    lab = json.loads((out / "netlab.json").read_text())
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    return [n for n in names if n.startswith(f"odv{lab['run_id']}-")] + [
        line for line in loops.splitlines() if str(out) in line]


MIN_FAULTS = 10
MIN_ACK_SHARE = 0.1
"""The share of the workload's paced writes (its --rate, over the seconds it wrote) a run must get acknowledged.
A count would depend on the machine: a slow one runs longer to reach its faults. Faults make writes fail for
seconds at a time (an election waits out a session), and a loaded machine acknowledges later; this still excludes
a run whose writes mostly failed (a workload or a cluster that never recovered), where "nothing lost" says little."""


def assert_enough_acknowledged(report: dict) -> None:
    q = report["queue"]
    paced = report["config"]["rate"] * report["phases_s"]["writes_stopped"]
    assert q["acknowledged"] >= MIN_ACK_SHARE * paced, (q["acknowledged"], paced, q)


@pytest.mark.cluster
@pytest.mark.faults
@pytest.mark.timeout(900)
def test_short_run_under_faults_loses_nothing(tmp_path: Path) -> None:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    # The fault count follows what the run observes, not the machine's speed: past 40 s the run goes on until
    # MIN_FAULTS faults were applied (a slow machine applies fewer a second), within verify's own bound.
    # The transactional workload runs beside the queue in the same run (issue 28): writers, a consume-transform-
    # produce worker and a read_committed reader on two more topics, under the same faults.
    code, report, text = _verify(tmp_path, "--duration", "40", "--min-faults", str(MIN_FAULTS), "--concurrency",
                                 "2", "--quiet", "0.5,1.5", "--seed", "20131", "--scenario", "all",
                                 "--workload", "queue,txn")
    print(text[-3000:])
    faults = [f for f in report["faults"] if not f.get("error")]
    assert len(faults) >= MIN_FAULTS, report["faults_by_kind"]
    assert NETWORK_KINDS & {f["kind"] for f in faults}, report["faults_by_kind"]
    # Clock steps run on brokers under our shim (odradek_verify/clockshift.c); the schedule deals every kind
    # once first, so a short run reaches them. Where the shim cannot be built the run says why.
    assert not CLOCK_KINDS & set(report["skipped_faults"]), report["skipped_faults"]
    clock = [f for f in faults if f["kind"] in CLOCK_KINDS]
    assert clock, report["faults_by_kind"]
    assert all("recovery_s" in f for f in clock), clock  # recorded like every fault's
    q, r = report["queue"], report["replicas"]
    assert_enough_acknowledged(report)
    assert report["idempotent_producer"] is True  # the default --via client: duplicates fail the run
    assert (q["lost"], q["duplicated"], q["misplaced"], q["reordered"], q["unexpected"]) == (0, 0, 0, 0, 0), q
    assert r["divergent"] == 0 and r["offsets_compared"] > 0, r
    _assert_txn_clean(report, text)
    assert (tmp_path / "verify" / "timeline.png").stat().st_size > 10_000
    # A detached loop device goes once its last user (a broker process being reaped) lets go: wait for that.
    wait_until(lambda: not _leftovers(tmp_path / "verify"), SLOW_MACHINE_S, "no namespace or loop device left")
    failed = report["verdict"]
    assert code == (0 if failed == "pass" else 1)


TXN_CHECKS = {"G1a", "torn-transaction", "lost-write", "duplicate", "unexpected", "poll-skip", "nonmonotonic-poll",
              "G0", "G1c", "G2"}


def _assert_txn_clean(report: dict, text: str) -> None:
    """The transactional workload ran (commits, aborts on purpose, consume-transform-produce, read_committed
    polls), every check says it ran, and each failing one is 0 (G0/G1c are reported: Kafka's protocol allows them)."""
    t = report["txn"]
    assert t is not None and "txn" in report["workloads"], report.get("workloads")
    assert t["committed"] > 5 and t["aborted_on_purpose"] > 0 and t["consume_transform_produce"] > 0, t
    assert t["polled"] > 0 and t["final_read"] > 0, t
    assert set(t["checks"]) == TXN_CHECKS and all(c["ran"] for c in t["checks"].values()), t["checks"]
    failing = {k: c["count"] for k, c in t["checks"].items() if c["fails"]}
    # On a failure, what the run's report holds of it (the report's directory goes with tmp_path).
    assert failing == dict.fromkeys(failing, 0), (
        {k: t["checks"][k]["examples"][:5] for k, n in failing.items() if n}, t.get("final_read_notes"),
        report.get("faults"))
    assert not (t.get("final_read_notes") or {}).get("incomplete"), t["final_read_notes"]
    assert not t["checks"]["G0"]["fails"] and not t["checks"]["G1c"]["fails"]
    assert "txn checks: G1a 0  torn-transaction 0  lost-write 0" in text


def _kafka_skip_reason() -> str | None:
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return "confluent-kafka (librdkafka) is not installed"
    return _skip_reason()


@pytest.mark.cluster
@pytest.mark.faults
@pytest.mark.timeout(900)
def test_short_run_through_librdkafka_loses_nothing(tmp_path: Path) -> None:
    """``--via kafka``: idempotent librdkafka producers on the brokers' Kafka listeners (bound on the lab hosts'
    addresses) and librdkafka group members, under leader-directed faults: every write acknowledged by a
    delivery report is read back where that report put it, once, in order."""
    reason = _kafka_skip_reason()
    if reason:
        pytest.skip(reason)
    # With the transactional workload beside it: librdkafka's transactional producers, consume-transform-produce
    # with the consumer's group metadata, and a librdkafka read_committed reader, under the same faults.
    code, report, text = _verify(tmp_path, "--via", "kafka", "--duration", "24", "--min-faults", "4",
                                 "--quiet", "0.5,1.5", "--seed", "9092",
                                 "--faults", "kill-broker,part-leader-isolated,pause-short,part-leader-followers",
                                 "--workload", "queue,txn")
    print(text[-3000:])
    assert report["via"] == "kafka" and report["netns"] is True
    # librdkafka was given the Kafka listeners on the lab's addresses, not 127.0.0.1 inside each namespace
    assert all(a.startswith("198.18.0.") for a in report["kafka_bootstrap"].split(",")), report["kafka_bootstrap"]
    assert len([f for f in report["faults"] if not f.get("error")]) >= 4, report["faults_by_kind"]
    q, r, g = report["queue"], report["replicas"], report["group"]
    assert_enough_acknowledged(report)
    assert report["idempotent_producer"] is True  # enable.idempotence: duplicates fail the run
    assert (q["lost"], q["duplicated"], q["misplaced"], q["reordered"], q["unexpected"]) == (0, 0, 0, 0, 0), q
    assert r["divergent"] == 0 and r["offsets_compared"] > 0, r
    assert g is not None and g["polled"] > 0 and g["commits"] > 0, g  # librdkafka group members consumed
    assert (g["poll_skips"], g["nonmonotonic_polls"], g["committed_beyond_processed"]) == (0, 0, 0), g
    _assert_txn_clean(report, text)
    assert "VERDICT: PASS (0 lost, 0 duplicated" in text
    assert code == 0
    wait_until(lambda: not _leftovers(tmp_path / "verify"), SLOW_MACHINE_S, "no namespace or loop device left")


@pytest.mark.cluster
@pytest.mark.faults
@pytest.mark.timeout(900)
def test_planted_bug_ack_before_isr_is_caught(tmp_path: Path) -> None:
    """Brokers acknowledge acks=all after the leader's own append (verify hands them --unsafe-ack-before-isr):
    leaders cut off from followers and ZooKeeper, or killed, lose acknowledged writes, and the checker must say
    so. Written through librdkafka (one run shows both: the checker is the same for every workload, and this
    workload's delivery reports are what it checks)."""
    reason = _kafka_skip_reason()
    if reason:
        pytest.skip(reason)
    code, report, text = _verify(tmp_path, "--via", "kafka", "--unsafe-ack-before-isr", "--faults",
                                 "part-leader-isolated,kill-broker", "--duration", "24", "--min-faults", "4",
                                 "--seed", "2013", "--group-members", "0", "--workload", "queue,txn",
                                 "--unsafe-read-uncommitted-as-committed", "--unsafe-partial-commit-markers")
    print(text[-3000:])
    assert report["via"] == "kafka" and report["unsafe_ack_before_isr"] is True
    cluster = json.loads((tmp_path / "verify" / "cluster" / "cluster.json").read_text())
    assert "--unsafe-ack-before-isr" in cluster["broker_args"]  # a broker flag, not an environment variable
    assert report["queue"]["acknowledged"] > 0
    assert report["queue"]["lost"] > 0, report["queue"]
    assert code == 1 and "lost" in report["verdict"]
    # The transaction bugs, planted in the same run (they need no faults): brokers serving read_committed reads
    # as read_uncommitted (--unsafe-read-uncommitted-as-committed) and leaving a commit's marker off its last
    # partition (--unsafe-partial-commit-markers): readers see aborted records (G1a), and committed transactions
    # are seen in part (torn) and not whole (lost-write).
    assert {"--unsafe-read-uncommitted-as-committed", "--unsafe-partial-commit-markers"} <= set(
        report["unsafe_broker_flags"])
    assert "--unsafe-partial-commit-markers" in cluster["broker_args"]
    t = report["txn"]
    assert t["committed"] > 0 and t["aborted"] > 0, t
    checks = t["checks"]
    assert checks["G1a"]["count"] > 0, checks["G1a"]
    assert checks["torn-transaction"]["count"] > 0 and checks["lost-write"]["count"] > 0, checks
    assert {"G1a", "torn-transaction", "lost-write"} <= set(report["verdict"])
    wait_until(lambda: not _leftovers(tmp_path / "verify"), SLOW_MACHINE_S, "no namespace or loop device left")


