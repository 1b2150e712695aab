"""``odradek cluster`` end to end, as a user runs it: up, status --json, drills, down leaves no process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from odradek_local.processes import read_proc_stat
from tests.harness.ports import free_port_block

pytestmark = pytest.mark.cluster


def odradek(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "odradek_tools", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ})


def alive(pid: int) -> bool:
    stat = read_proc_stat(pid)
    return stat is not None and stat.state != "Z"


def test_cluster_up_status_drills_down_leaves_nothing(tmp_path: Path) -> None:
    data = str(tmp_path / "c")
    zk_base = free_port_block(3, span=106)
    base = free_port_block(3)
    kafka_base = free_port_block(3)  # not Kafka's default 9092-9094: runs side by side never clash
    up = odradek("cluster", "up", "--data-dir", data, "--zookeepers", "3", "--brokers", "3",
                 "--base-port", str(base), "--kafka-base-port", str(kafka_base), "--zk-base-port", str(zk_base),
                 "--tick-ms", "500", "--session-timeout-ms", "3000")  # fmt: skip
    pids: list[int] = []
    try:
        assert up.returncode == 0, up.stderr
        assert "Odradek cluster up in" in up.stdout and f"http://127.0.0.1:{base}" in up.stdout

        st = odradek("cluster", "status", "--data-dir", data, "--json")
        assert st.returncode == 0, st.stderr
        status = json.loads(st.stdout)
        assert set(status) >= {"zk_connect", "controller", "zookeepers", "brokers"}
        assert status["zk_connect"] == ",".join(f"127.0.0.1:{zk_base + i}" for i in range(3))
        assert status["controller"] in (1, 2, 3)
        assert sorted(z["mode"] for z in status["zookeepers"]) == ["follower", "follower", "leader"]
        assert [(b["id"], b["url"], b["alive"]) for b in status["brokers"]] == [
            (i, f"http://127.0.0.1:{base + i - 1}", True) for i in (1, 2, 3)
        ]
        assert [b["kafka"] for b in status["brokers"]] == [f"127.0.0.1:{kafka_base + i}" for i in range(3)]
        pids = [z["pid"] for z in status["zookeepers"]] + [b["pid"] for b in status["brokers"]]
        assert all(alive(p) for p in pids)

        # drills: stop and start a broker, kill a ZooKeeper follower and bring it back
        assert odradek("cluster", "broker", "stop", "2", "--data-dir", data).returncode == 0
        after = json.loads(odradek("cluster", "status", "--data-dir", data, "--json").stdout)
        assert [b["alive"] for b in after["brokers"]] == [True, False, True]
        started = odradek("cluster", "broker", "start", "2", "--data-dir", data)
        assert started.returncode == 0, started.stderr
        follower = next(z["id"] for z in status["zookeepers"] if z["mode"] == "follower")
        assert odradek("cluster", "zookeeper", "kill", str(follower), "--data-dir", data).returncode == 0
        assert odradek("cluster", "zookeeper", "start", str(follower), "--data-dir", data).returncode == 0
        final = json.loads(odradek("cluster", "status", "--data-dir", data, "--json").stdout)
        pids += [z["pid"] for z in final["zookeepers"] if z["pid"]] + [b["pid"] for b in final["brokers"] if b["pid"]]

        bad = odradek("cluster", "broker", "kill", "9", "--data-dir", data)
        assert bad.returncode == 1 and bad.stderr.startswith("odradek: no broker 9")
    finally:
        down = odradek("cluster", "down", "--data-dir", data)
    assert down.returncode == 0, down.stderr
    assert pids and not [p for p in pids if alive(p)]


def test_status_without_a_cluster_is_a_one_line_error(tmp_path: Path) -> None:
    st = odradek("cluster", "status", "--data-dir", str(tmp_path / "none"))
    assert st.returncode == 1
    assert st.stderr.strip().startswith("odradek: no cluster in") and st.stderr.count("\n") == 1


def test_broker_start_right_after_kill_waits_for_the_old_session(tmp_path: Path) -> None:
    """Issue 9, 7b: `broker start N` right after `broker kill N` waits (and says so) for the killed process's
    ZooKeeper session to expire, instead of failing with "already registered by live ZooKeeper session"."""
    data = str(tmp_path / "c")
    up = odradek("cluster", "up", "--data-dir", data, "--zookeepers", "1", "--brokers", "1",
                 "--base-port", str(free_port_block(1)), "--kafka-base-port", str(free_port_block(1)),
                 "--zk-base-port", str(free_port_block(1, span=106)), "--tick-ms", "500",
                 "--session-timeout-ms", "4000")  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr
        assert odradek("cluster", "broker", "kill", "1", "--data-dir", data).returncode == 0
        started = odradek("cluster", "broker", "start", "1", "--data-dir", data)
        assert started.returncode == 0, started.stderr
        assert "waiting for that session to expire" in started.stdout, started.stdout
        assert "broker 1 started" in started.stdout
        status = json.loads(odradek("cluster", "status", "--data-dir", data, "--json").stdout)
        assert [(b["alive"], b["registered"]) for b in status["brokers"]] == [(True, True)]
    finally:
        down = odradek("cluster", "down", "--data-dir", data)
    assert down.returncode == 0, down.stderr


def test_a_broker_that_cannot_start_leaves_no_other_process_behind(zk_ensemble: object, tmp_path: Path) -> None:
    """`up` fails as a whole: when one broker cannot bind its port, the brokers it did start are ended by pid
    (a Spark fixture once left two brokers running after a port clash)."""
    import socket
    import uuid

    from odradek_local.cluster import ClusterError, LocalCluster

    base = free_port_block(3)
    cluster = LocalCluster(tmp_path / "c", brokers=3, base_port=base, session_timeout_ms=1500,
                           chroot=f"/partial-{uuid.uuid4().hex[:8]}", ensemble=zk_ensemble)  # type: ignore[arg-type]
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", base + 1))  # broker 2's port
        squatter.listen()
        with pytest.raises(ClusterError, match="broker 2"):
            cluster.up(timeout=30)
    started = [proc.pid for proc in cluster._procs.values()]
    assert len(started) == 3 and not any(alive(p) for p in started), started
