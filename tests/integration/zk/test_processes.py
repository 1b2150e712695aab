"""ManagedProcess against real OS processes: identity, re-attaching from another process, zombies."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from odradek_local.processes import ManagedProcess, read_proc_stat
from tests.harness.wait import SLOW_MACHINE_S, wait_until

REPO_ROOT = Path(__file__).resolve().parents[3]
# How long the idle children live unless signalled: far beyond any wait below, so a slow machine never sees one
# exit by itself where the test expects it alive or killed by a signal.
IDLE_S = str(int(10 * SLOW_MACHINE_S))
Spawn = Callable[..., ManagedProcess]


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """Spawn helper whose processes are all SIGKILLed by pid (identity checked) at teardown."""
    procs: list[ManagedProcess] = []

    def _spawn(*argv: str) -> ManagedProcess:
        proc = ManagedProcess.spawn(list(argv), log_path=tmp_path / f"proc{len(procs)}.log", cwd=tmp_path)
        procs.append(proc)
        return proc

    yield _spawn
    for proc in procs:
        proc.kill()


def proc_state(pid: int) -> str | None:
    stat = read_proc_stat(pid)
    return None if stat is None else stat.state


def test_spawn_logs_output_in_its_own_session(spawn: Spawn, tmp_path: Path) -> None:
    proc = spawn("sh", "-c", f"echo to-stdout; echo to-stderr >&2; exec sleep {IDLE_S}")
    assert proc.is_child
    assert os.getsid(proc.pid) == proc.pid  # a Ctrl-C to our terminal does not reach it
    stat = read_proc_stat(proc.pid)
    assert stat is not None and stat.start_time == proc.start_time
    wait_until(lambda: "to-stderr" in (tmp_path / "proc0.log").read_text(), SLOW_MACHINE_S, "stderr in the log")
    assert "to-stdout" in (tmp_path / "proc0.log").read_text()
    assert proc.is_alive()


def test_identity_survives_json_and_another_process_can_terminate(spawn: Spawn, tmp_path: Path) -> None:
    proc = spawn("sleep", IDLE_S)
    state = tmp_path / "state.json"
    state.write_text(json.dumps(proc.to_json()))

    again = ManagedProcess.from_json(json.loads(state.read_text()))
    assert (again.pid, again.start_time, again.boot_id) == (proc.pid, proc.start_time, proc.boot_id)
    assert again.is_alive() and not again.is_child

    code = (
        "import json, sys\n"
        "from odradek_local.processes import ManagedProcess\n"
        "p = ManagedProcess.from_json(json.load(open(sys.argv[1])))\n"
        "print(p.is_alive()); p.terminate(timeout=float(sys.argv[2])); print(p.is_alive())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(state), str(SLOW_MACHINE_S)], env=env, capture_output=True, text=True,
        timeout=3 * SLOW_MACHINE_S,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False"]
    assert proc.wait_exit(SLOW_MACHINE_S)
    assert proc.returncode == -signal.SIGTERM
    assert not again.is_alive()


def test_zombie_and_vanished_pids_are_dead() -> None:
    raw = subprocess.Popen(["true"])  # deliberately not reaped until the end, so it lingers as a zombie
    try:
        wait_until(lambda: proc_state(raw.pid) == "Z", SLOW_MACHINE_S, "the unreaped child to be a zombie")
        stat = read_proc_stat(raw.pid)
        assert stat is not None
        handle = ManagedProcess(raw.pid, stat.start_time)
        assert not handle.is_alive()
        assert not handle.send_signal(signal.SIGTERM)
        assert handle.wait_exit(0.1)
    finally:
        raw.kill()
        raw.wait()
    assert read_proc_stat(raw.pid) is None
    assert not handle.is_alive()
    handle.terminate(timeout=0.1)  # nothing to do, must not raise


def test_a_different_start_time_is_never_signalled(spawn: Spawn) -> None:
    proc = spawn("sleep", IDLE_S)
    impostors = [
        ManagedProcess.from_json({**proc.to_json(), "start_time": proc.start_time - 1}),
        ManagedProcess.from_json({**proc.to_json(), "boot_id": "another-boot"}),
    ]
    for impostor in impostors:
        assert not impostor.is_alive()
        assert not impostor.stop_signal()
        assert not impostor.send_signal(signal.SIGKILL)
        impostor.terminate(timeout=0.1)
        impostor.kill(timeout=0.1)
    assert proc.is_alive()
    assert proc_state(proc.pid) not in ("T", "Z", None)


def test_stop_cont_and_terminate_of_a_frozen_process(spawn: Spawn) -> None:
    proc = spawn("sleep", IDLE_S)
    assert proc.stop_signal()
    wait_until(lambda: proc_state(proc.pid) == "T", SLOW_MACHINE_S, "the process to be stopped")
    assert proc.is_alive()
    assert proc.cont()
    wait_until(lambda: proc_state(proc.pid) != "T", SLOW_MACHINE_S, "the process to run again")

    proc.stop_signal()
    wait_until(lambda: proc_state(proc.pid) == "T", SLOW_MACHINE_S, "the process to be stopped")
    # SIGCONT after SIGTERM lets a frozen process act on it at once: it ends by SIGTERM, well before the timeout
    # after which terminate would escalate to SIGKILL (a frozen process never acts on a SIGTERM by itself).
    started = time.monotonic()
    proc.terminate(timeout=SLOW_MACHINE_S)
    assert time.monotonic() - started < SLOW_MACHINE_S
    assert proc.returncode == -signal.SIGTERM


def test_terminate_escalates_to_sigkill(spawn: Spawn, tmp_path: Path) -> None:
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
    proc = spawn(sys.executable, "-c", code + f"time.sleep({IDLE_S})")
    wait_until(lambda: "ready" in (tmp_path / "proc0.log").read_text(), SLOW_MACHINE_S,
               "the child to install its handler")
    proc.terminate(timeout=0.3, kill_timeout=SLOW_MACHINE_S)  # SIGTERM is ignored: escalation is the point
    assert proc.returncode == -signal.SIGKILL
    assert not proc.is_alive()


def test_proc_stat_parsing_survives_parentheses_in_the_command_name(spawn: Spawn, tmp_path: Path) -> None:
    odd = tmp_path / "odd) (name"
    sleep = shutil.which("sleep")
    assert sleep is not None
    shutil.copy(sleep, odd)
    proc = spawn(str(odd), IDLE_S)
    stat = read_proc_stat(proc.pid)
    assert stat is not None and stat.state in ("R", "S")
    assert stat.start_time == proc.start_time
