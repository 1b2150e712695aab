"""``--cpu-affinity`` (broker/cpu_affinity.py): the kernel's cpulist format, and a CPU the broker may not use
refused at start with a one-line reason."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from broker.cpu_affinity import apply, cpu_list, parse_cpu_list, split


@pytest.mark.parametrize(("text", "cpus"), [
    ("0", {0}), ("1", {1}), ("0,2-3", {0, 2, 3}), ("2-2", {2}), (" 1 , 4-6", {1, 4, 5, 6}), ("3,3", {3}),
])
def test_a_cpu_list_names_its_cpus(text: str, cpus: set[int]) -> None:
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize("text", ["", "a", "-1", "1-", "3-1", "1,,2", "0x1", "1.5", "1-2-3"])
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--cpu-affinity"):
        parse_cpu_list(text)


def test_lists_are_written_back_in_the_kernels_form() -> None:
    assert cpu_list({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    assert cpu_list({3}) == "3"


def test_a_cpu_this_process_may_not_use_is_refused_and_nothing_changes() -> None:
    before = os.sched_getaffinity(0)
    with pytest.raises(ValueError, match=rf"CPU {max(before) + 1} is not available here"):
        apply(frozenset({min(before), max(before) + 1}))
    assert os.sched_getaffinity(0) == before


def test_the_broker_refuses_an_unavailable_cpu_at_start_with_one_line(tmp_path: Path) -> None:
    cpu = max(os.sched_getaffinity(0)) + 1
    done = subprocess.run([sys.executable, "-m", "broker", "--id", "1", "--zk", "127.0.0.1:1", "--listen",
                           "127.0.0.1:1", "--data-dir", str(tmp_path / "data"), "--cpu-affinity", str(cpu)],
                          capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [f"odradek broker: --cpu-affinity: CPU {cpu} is not available here "
                                                 f"(available: {cpu_list(os.sched_getaffinity(0))})"]
    assert not (tmp_path / "data").exists()  # refused before the broker touched anything


def test_brokers_get_cpus_of_their_own_shared_out_in_order() -> None:
    assert split({0, 1}, 2) == {1: {0}, 2: {1}}
    assert split({0, 1, 2, 3, 4, 5, 6}, 3) == {1: {0, 1}, 2: {2, 3}, 3: {4, 5}}  # CPU 6 left over
    assert split({4, 9}, 1) == {1: {4, 9}}
    for b, cpus in split(set(range(16)), 5).items():
        assert parse_cpu_list(cpu_list(cpus)) == cpus and len(cpus) == 3, b
    with pytest.raises(ValueError, match="3 brokers need at least 3 CPUs, this host has 2 \\(0-1\\)"):
        split({0, 1}, 3)
