"""The clock shim (odradek_verify/clockshift.c), compiled and run under a real Python: the wall clock steps by
exactly the offset written to the clock file, while monotonic time and sleeps stay the kernel's.

This starts processes (the compiler and a Python), unlike most unit tests, because the shim is only meaningful
in a real process; it needs nothing else (no ZooKeeper, no root) and is skipped without a C compiler.
"""

from __future__ import annotations

import json
import os
import random
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek_verify import clockshift

# Each line on stdin: read every clock at one moment, then sleep 0.05 s, answer one JSON line. A wall clock's move
# is measured against the monotonic time between two answers, so every clock is read next to the monotonic one: a
# clock read after the sleep would count the sleep (however long a loaded machine stretches it) as a step.
CHILD = r"""
import ctypes, datetime, json, sys, time

libc = ctypes.CDLL(None)
libc.time.restype = ctypes.c_long

class Timeval(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("usec", ctypes.c_long)]

for _ in sys.stdin:
    tv = Timeval()
    libc.gettimeofday(ctypes.byref(tv), None)
    clocks = {
        "time": time.time(), "monotonic": time.monotonic(), "realtime": time.clock_gettime(time.CLOCK_REALTIME),
        "boottime": time.clock_gettime(time.CLOCK_BOOTTIME), "datetime": datetime.datetime.now().timestamp(),
        "libc_time": libc.time(None), "gettimeofday": tv.sec + tv.usec / 1e6,
    }
    m0, t0 = time.monotonic(), time.perf_counter()
    time.sleep(0.05)
    clocks["slept_monotonic"], clocks["slept_perf"] = time.monotonic() - m0, time.perf_counter() - t0
    print(json.dumps(clocks), flush=True)
"""
# Monotonic time and sleeps follow real time, not the wall clock's steps (an hour or two here): a sleep of 0.05 s
# and the monotonic time between two answers stay below this, which only a step reaches, not a loaded machine's
# stall.
NOT_STEPPED_S = 10.0


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if clockshift.compiler() is None:
        pytest.skip("no C compiler")
    lib, why = clockshift.build(tmp_path_factory.mktemp("clockshift"))
    assert lib is not None, why
    return lib


class Child:
    def __init__(self, lib: Path, clock: Path) -> None:
        env = {**os.environ, "LD_PRELOAD": str(lib), clockshift.ENV_FILE: str(clock)}
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def measure(self, timeout: float = 20.0) -> dict[str, float]:
        """One measurement; a child that does not answer in time (a shim that broke its sleep) fails the test."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        ready = select.poll()  # not select.select: the test process may hold fds numbered past FD_SETSIZE (1024)
        ready.register(self.proc.stdout, select.POLLIN)
        if not ready.poll(timeout * 1000):
            self.proc.kill()
            pytest.fail(f"the child under the shim did not answer in {timeout:.0f} s (a sleep that never ends?)")
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read() if self.proc.stderr else "the child died"
        return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def child(shim: Path, tmp_path: Path) -> Iterator[tuple[Child, Path]]:
    clock = tmp_path / "clock"
    clockshift.create_file(clock)
    c = Child(shim, clock)
    yield c, clock
    c.close()


def _wall_moved(before: dict[str, float], after: dict[str, float], key: str) -> float:
    """How far a wall clock moved beyond the monotonic time that passed between two measurements."""
    return (after[key] - before[key]) - (after["monotonic"] - before["monotonic"])


def test_the_wall_clock_steps_by_the_offset_and_monotonic_time_and_sleep_do_not(child: tuple[Child, Path]) -> None:
    c, clock = child
    base = c.measure()
    for key in ("time", "realtime", "datetime", "gettimeofday"):
        assert abs(_wall_moved(base, base, key)) < 1e-9
    step_s = 3600.25
    clockshift.write_offset(clock, int(step_s * 1e9))
    assert clockshift.read_offset(clock) == int(step_s * 1e9)
    fwd = c.measure()
    for key in ("time", "realtime", "datetime", "gettimeofday"):
        assert abs(_wall_moved(base, fwd, key) - step_s) < 0.2, (key, base, fwd)
    assert abs(_wall_moved(base, fwd, "libc_time") - step_s) < 2  # whole seconds
    # Monotonic and boot time advance as real time does; the sleep sleeps its 0.05 s.
    assert 0 < fwd["monotonic"] - base["monotonic"] < NOT_STEPPED_S
    assert abs((fwd["boottime"] - base["boottime"]) - (fwd["monotonic"] - base["monotonic"])) < 0.2
    for m in (base, fwd):
        assert 0.045 <= m["slept_monotonic"] < NOT_STEPPED_S and 0.045 <= m["slept_perf"] < NOT_STEPPED_S

    clockshift.write_offset(clock, -2 * 3600 * 10**9)  # a step back, below true time
    back = c.measure()
    assert abs(_wall_moved(base, back, "time") + 7200) < 0.2
    assert abs(_wall_moved(base, back, "gettimeofday") + 7200) < 0.2
    assert back["monotonic"] > fwd["monotonic"] and 0.045 <= back["slept_monotonic"] < NOT_STEPPED_S

    clockshift.write_offset(clock, 0)  # healed: true time again
    healed = c.measure()
    assert abs(_wall_moved(base, healed, "time")) < 0.2


def test_without_a_clock_file_the_shim_changes_nothing(shim: Path, tmp_path: Path) -> None:
    import time

    c = Child(shim, tmp_path / "absent")
    try:
        m = c.measure()
        now = time.time()  # before the child's exit, which a loaded machine may take a while over
    finally:
        c.close()
    assert abs(m["time"] - now) < 5 and 0.045 <= m["slept_monotonic"] < NOT_STEPPED_S


def test_the_probe_accepts_the_shim(shim: Path) -> None:
    assert clockshift.probe(shim, sys.executable) is None


def test_a_missing_compiler_is_a_reason_not_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clockshift, "compiler", lambda: None)
    lib, why = clockshift.prepare(tmp_path, sys.executable)
    assert lib is None and why is not None and "compiler" in why


def test_writes_keep_the_seqlock_even(tmp_path: Path) -> None:
    clock = tmp_path / "clock"
    clockshift.create_file(clock)
    for value in (5, -7, 0):
        clockshift.write_offset(clock, value)
        assert clockshift.read_offset(clock) == value
        assert int.from_bytes(clock.read_bytes()[:8], sys.byteorder) % 2 == 0
    assert int.from_bytes(clock.read_bytes()[:8], sys.byteorder) == 6


def test_steps_stay_within_bounds_and_a_tenth_of_retention() -> None:
    assert clockshift.max_step_s(7 * 24 * 3600 * 1000) == clockshift.MAX_STEP_S == 7200
    assert clockshift.max_step_s(600_000) == 60  # retention 10 min: steps up to 1 min
    assert clockshift.max_step_s(-1) == clockshift.max_step_s(None) == 7200
    rng = random.Random(7)
    steps = [clockshift.random_step_ns(rng, 7200) for _ in range(2000)]
    assert all(1e9 <= abs(s) <= 7200e9 for s in steps)
    assert any(s > 0 for s in steps) and any(s < 0 for s in steps)
    assert any(abs(s) < 10e9 for s in steps) and any(abs(s) > 1000e9 for s in steps)  # log-uniform: both ends
    assert all(1e9 <= abs(clockshift.random_step_ns(rng, 60)) <= 60e9 for _ in range(200))
