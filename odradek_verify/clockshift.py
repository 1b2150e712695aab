"""Wall-clock steps for the run's brokers: our own LD_PRELOAD shim (``clockshift.c``), built at run time.

Why our own: Debian's libfaketime 0.9.10 makes Python's ``time.sleep`` fail with EINVAL (its ``clock_nanosleep``
wrapper) even at offset +0 and with ``FAKETIME_DONT_FAKE_MONOTONIC=1``, so it tested libfaketime rather than us.
The shim interposes only the wall clock (``clock_gettime`` for the realtime clocks, ``gettimeofday``, ``time``)
and leaves monotonic time and every sleep to the kernel, as an NTP step does.

One clock file per broker (16 bytes: a seqlock word and the offset in ns, see ``clockshift.c``), named by
``ODRADEK_CLOCK_FILE`` and mapped by the shim, so ``write_offset`` moves a running broker's wall clock at once.
The library is compiled with the system C compiler (``cc``) into the run's directory, then probed: a Python
started under it must see the step in ``time.time()`` and none in ``time.monotonic()`` or ``time.sleep``.
Anything missing (no compiler, a failed compile, a failed probe) means clock faults are skipped with that reason.
"""

from __future__ import annotations

import math
import os
import random
import shutil
import struct
import subprocess
import tempfile
import threading
from pathlib import Path

SOURCE = Path(__file__).with_name("clockshift.c")
ENV_FILE = "ODRADEK_CLOCK_FILE"
FILE_SIZE = 16
MAX_STEP_S = 2 * 3600.0  # the largest step: 2 h
MIN_STEP_S = 1.0
RETENTION_FRACTION = 10  # and never more than retention.ms / 10, so retention never deletes what we check

_write_lock = threading.Lock()


def compiler() -> str | None:
    return next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None)


def build(work_dir: Path) -> tuple[Path | None, str | None]:
    """Compile the shim into ``work_dir``: (the library, None) or (None, why clock faults are skipped)."""
    cc = compiler()
    if cc is None:
        return None, "no C compiler (cc) to build the clock shim odradek_verify/clockshift.c"
    if not SOURCE.exists():
        return None, f"{SOURCE} is missing from this installation"
    work_dir.mkdir(parents=True, exist_ok=True)
    lib = work_dir.absolute() / "libclockshift.so"
    if any(c in str(lib) for c in " :"):
        return None, f"the shim's path {lib} has a space or colon, which LD_PRELOAD cannot carry"
    try:
        res = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(lib), str(SOURCE), "-ldl"],
                             capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{cc} could not build the clock shim: {e}"
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"{cc} could not build the clock shim: {last}"
    return lib, None


def create_file(path: Path) -> None:
    """A clock file at offset 0 (left as it is when it exists: a restarted broker keeps its host's clock)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.stat().st_size < FILE_SIZE:
        path.write_bytes(b"\0" * FILE_SIZE)


def write_offset(path: Path, offset_ns: int) -> None:
    """Step the wall clock of every process mapping ``path`` to true time + ``offset_ns`` (the seqlock write)."""
    with _write_lock:
        fd = os.open(path, os.O_RDWR)
        try:
            seq = struct.unpack("=Q", os.pread(fd, 8, 0))[0]
            seq += 1 if seq % 2 == 0 else 2  # odd: writing (an interrupted writer's odd value is skipped)
            os.pwrite(fd, struct.pack("=Q", seq), 0)
            os.pwrite(fd, struct.pack("=q", offset_ns), 8)
            os.pwrite(fd, struct.pack("=Q", seq + 1), 0)
        finally:
            os.close(fd)


def read_offset(path: Path) -> int:
    return int(struct.unpack("=q", path.read_bytes()[8:16])[0])


def env_prefix(lib: Path, clock_file: Path) -> list[str]:
    """The command prefix that runs a program under the shim (``env`` execs it: the pid stays the program's)."""
    preload = ":".join(p for p in (str(lib), os.environ.get("LD_PRELOAD", "")) if p)
    return ["env", f"LD_PRELOAD={preload}", f"{ENV_FILE}={clock_file}"]


PROBE = """
import time
w0, m0 = time.time(), time.monotonic()
print(w0, m0, flush=True)
input()
w1, m1 = time.time(), time.monotonic()
time.sleep(0.05)
print(w1, m1, time.monotonic() - m1, flush=True)
"""


def probe(lib: Path, python: str, step_s: float = 3600.0) -> str | None:
    """None when a Python under the shim sees a step of ``step_s`` in time.time() only; else what went wrong."""
    with tempfile.TemporaryDirectory(prefix="clockshift-") as tmp:
        clock = Path(tmp) / "clock"
        create_file(clock)
        env = {**os.environ, "LD_PRELOAD": str(lib), ENV_FILE: str(clock)}
        try:
            proc = subprocess.Popen([python, "-c", PROBE], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        except OSError as e:
            return f"the clock shim's probe did not start: {e}"
        try:
            first = proc.stdout.readline() if proc.stdout else ""
            write_offset(clock, int(step_s * 1e9))
            out, err = proc.communicate(input="\n", timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return "the clock shim's probe hung"
        if proc.returncode != 0 or not first.strip() or not out.strip():
            last = (err.strip().splitlines() or ["?"])[-1]
            return f"a Python under the clock shim failed ({last})"
        w0, m0 = map(float, first.split())
        w1, m1, slept = map(float, out.split())
        wall_step = (w1 - w0) - (m1 - m0)
        if abs(wall_step - step_s) > 5 or not 0.04 <= slept < 5 or m1 < m0:
            return (f"the clock shim misbehaved here (wall clock moved {wall_step:.1f} s for a {step_s:.0f} s "
                    f"step, a 0.05 s sleep took {slept:.3f} s)")
    return None


def prepare(work_dir: Path, python: str) -> tuple[Path | None, str | None]:
    """Build and probe: (the library, None), or (None, the one-line reason clock faults are skipped)."""
    lib, why = build(work_dir)
    if lib is None:
        return None, why
    why = probe(lib, python)
    return (lib, None) if why is None else (None, why)


def max_step_s(retention_ms: int | None) -> float:
    """The largest step for a topic with ``retention.ms`` (None or < 0: unlimited retention)."""
    if retention_ms is None or retention_ms < 0:
        return MAX_STEP_S
    return max(MIN_STEP_S, min(MAX_STEP_S, retention_ms / 1000 / RETENTION_FRACTION))


def random_step_ns(rng: random.Random, largest_s: float) -> int:
    """A step forward or back, log-uniform between 1 s and ``largest_s``: small and large steps equally likely
    per decade (a second's step touches timeouts, an hour's step touches anything measured against the clock)."""
    largest_s = max(MIN_STEP_S, largest_s)
    seconds = math.exp(rng.uniform(0.0, math.log(largest_s / MIN_STEP_S))) * MIN_STEP_S
    return rng.choice((-1, 1)) * int(seconds * 1e9)
