"""``odradek verify``: a short run under faults must find nothing, and a planted bug must be found.

The runs go through the command line in a subprocess, as a user runs it: the verify driver joins a network
namespace of its own making (``setns``), which must not leak into the pytest process. Both need root (network
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


@pytest.mark.cluster
@pytest.mark.timeout(900)
def test_short_run_under_faults_loses_nothing(tmp_path: Path) -> None:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    # The fault count follows what the run observes, not the machine's speed: past 50 s the run goes on until
    # MIN_FAULTS faults were applied (a slow machine applies fewer a second), within verify's own bound.
    code, report, text = _verify(tmp_path, "--duration", "50", "--min-faults", str(MIN_FAULTS), "--concurrency",
                                 "2", "--quiet", "0.5,1.5", "--seed", "20131", "--scenario", "all")
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
    assert q["acknowledged"] > 1000
    assert report["idempotent_producer"] is True  # the default --via client: duplicates fail the run
    assert (q["lost"], q["duplicated"], q["misplaced"], q["reordered"], q["unexpected"]) == (0, 0, 0, 0, 0), q
    assert r["divergent"] == 0 and r["offsets_compared"] > 0, r
    assert (tmp_path / "verify" / "timeline.png").stat().st_size > 10_000
    # A detached loop device goes once its last user (a broker process being reaped) lets go: wait for that.
    wait_until(lambda: not _leftovers(tmp_path / "verify"), SLOW_MACHINE_S, "no namespace or loop device left")
    failed = report["verdict"]
    assert code == (0 if failed == "pass" else 1)


@pytest.mark.cluster
@pytest.mark.timeout(900)
def test_planted_bug_ack_before_isr_is_caught(tmp_path: Path) -> None:
    """Brokers acknowledge acks=all after the leader's own append (verify hands them --unsafe-ack-before-isr):
    leaders cut off from followers and ZooKeeper, or killed, lose acknowledged writes, and the checker must say
    so."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    code, report, text = _verify(tmp_path, "--unsafe-ack-before-isr", "--faults",
                                 "part-leader-isolated,kill-broker", "--duration", "40", "--min-faults", "4",
                                 "--seed", "2013",
                                 "--group-members", "0")
    print(text[-3000:])
    assert report["unsafe_ack_before_isr"] is True
    cluster = json.loads((tmp_path / "verify" / "cluster" / "cluster.json").read_text())
    assert "--unsafe-ack-before-isr" in cluster["broker_args"]  # a broker flag, not an environment variable
    assert report["queue"]["lost"] > 0, report["queue"]
    assert code == 1 and "lost" in report["verdict"]
    # A detached loop device goes once its last user (a broker process being reaped) lets go: wait for that.
    wait_until(lambda: not _leftovers(tmp_path / "verify"), SLOW_MACHINE_S, "no namespace or loop device left")
