"""``odradek cluster up --pin`` (odradek_local): each broker started with CPUs of its own, kept across
``cluster.json``; a host with fewer CPUs than brokers refused before anything starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from broker.cpu_affinity import cpu_list
from odradek_local.cluster import LocalCluster


def flag(command: list[str], name: str) -> str | None:
    return command[command.index(name) + 1] if name in command else None


def test_each_pinned_broker_is_started_on_its_cpus_and_a_reload_keeps_them(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, brokers=3, base_port=18082, kafka_base_port=19092,
                           broker_cpus={1: "0-1", 2: "2-3"})
    assert [flag(cluster.broker_command(b), "--cpu-affinity") for b in (1, 2, 3)] == ["0-1", "2-3", None]
    cluster.ensemble.save()
    cluster.save()
    again = LocalCluster.load(tmp_path)
    assert again.broker_cpus == {1: "0-1", 2: "2-3"}
    assert again.broker_command(2) == cluster.broker_command(2)


def test_more_brokers_than_cpus_is_refused_with_one_line_before_anything_starts(tmp_path: Path) -> None:
    cpus = os.sched_getaffinity(0)
    brokers = len(cpus) + 1
    done = subprocess.run([sys.executable, "-m", "odradek_tools", "cluster", "up", "--pin", "--brokers", str(brokers),
                           "--data-dir", str(tmp_path / "c")], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"odradek cluster up: --pin gives each broker CPUs of its own: {brokers} brokers need at least {brokers} "
        f"CPUs, this host has {len(cpus)} ({cpu_list(cpus)})"]
    assert not (tmp_path / "c").exists()
