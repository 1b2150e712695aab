"""OS processes we own, tracked by pid plus start time so that only the exact process we started is signalled.

ZooKeeper JVMs and broker processes outlive the command that started them (`odradek cluster up` returns while
the cluster keeps running), so a later command must re-attach to them from a JSON state file. A bare pid is
not enough for that: pids are recycled, and signalling a stranger that inherited the pid would be a serious
bug. Every handle therefore carries the kernel's start time of the process (field 22 of /proc/<pid>/stat,
in clock ticks since boot) plus the boot id, and refuses to signal anything whose identity differs.

Processes are never looked up or killed by name.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_POLL_INTERVAL = 0.02
_BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


class ProcessStillAliveError(RuntimeError):
    """A process survived SIGKILL for longer than allowed (stuck in uninterruptible sleep, typically)."""


@dataclass(frozen=True)
class ProcStat:
    """The two fields of /proc/<pid>/stat that identity and liveness depend on."""

    state: str
    start_time: int


def read_proc_stat(pid: int) -> ProcStat | None:
    """Read /proc/<pid>/stat, or None when no such pid exists.

    The command name (field 2) is parenthesised and may itself contain spaces and parentheses, so the line is
    split at the last ')' rather than on whitespace.
    """
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    after_comm = raw[raw.rindex(")") + 2 :].split()
    # after_comm[0] is field 3 (state); field n is at index n - 3.
    return ProcStat(state=after_comm[0], start_time=int(after_comm[19]))


def current_boot_id() -> str:
    """Identify this boot, since start times are only comparable within one boot."""
    try:
        return _BOOT_ID_PATH.read_text().strip()
    except OSError:
        return ""


class ManagedProcess:
    """A handle on one process we started, either as our child or re-attached from a state file.

    As our child (`spawn`), liveness comes from `Popen.poll()`, which also reaps it: an unreaped child keeps
    its pid reserved, so no identity check is needed. Re-attached (`from_json`), liveness and signalling go
    through the pid + start-time identity, and a zombie counts as dead because its parent (not us) may take a
    while to reap it.
    """

    def __init__(
        self,
        pid: int,
        start_time: int,
        *,
        boot_id: str | None = None,
        argv: Sequence[str] = (),
        log_path: Path | None = None,
        popen: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self.pid = pid
        self.start_time = start_time
        self.boot_id = current_boot_id() if boot_id is None else boot_id
        self.argv = list(argv)
        self.log_path = log_path
        self._popen = popen

    @classmethod
    def spawn(
        cls,
        argv: Sequence[str],
        *,
        log_path: Path,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        append_log: bool = True,
    ) -> ManagedProcess:
        """Start `argv` in its own session with stdout and stderr going to `log_path`.

        A new session keeps a Ctrl-C in the launching terminal from reaching a cluster meant to run in the
        background. The log is appended to by default so a restarted node keeps the history of its crash.
        """
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab" if append_log else "wb") as log:
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=dict(env) if env is not None else None,
                start_new_session=True,
            )
        # Popen returns only after exec succeeded and nothing reaps the child before we do, so /proc/<pid>
        # exists here even if the program already exited.
        stat = read_proc_stat(popen.pid)
        if stat is None:  # pragma: no cover - would mean someone else reaped our child
            raise RuntimeError(f"process {popen.pid} vanished right after spawn: {argv!r}")
        return cls(popen.pid, stat.start_time, argv=argv, log_path=log_path, popen=popen)

    @property
    def is_child(self) -> bool:
        """Whether this handle owns the Popen object, i.e. can reap the process and see its exit code."""
        return self._popen is not None

    @property
    def returncode(self) -> int | None:
        """Exit status (negative signal number when killed by a signal); only known for our own children."""
        return None if self._popen is None else self._popen.poll()

    def is_alive(self) -> bool:
        """True while the very process we started exists and is not a zombie; a stopped process is alive."""
        if self._popen is not None:
            return self._popen.poll() is None
        return self._identity_matches()

    def _identity_matches(self) -> bool:
        if self.boot_id and self.boot_id != current_boot_id():
            return False
        stat = read_proc_stat(self.pid)
        return stat is not None and stat.start_time == self.start_time and stat.state not in ("Z", "X")

    def send_signal(self, sig: int) -> bool:
        """Deliver `sig` only if the process is still ours; returns False when it is gone or not ours.

        For re-attached handles the pid is pinned with a pidfd before the identity check, so the process
        cannot exit and have its pid recycled between the check and the signal.
        """
        if self._popen is not None:
            if self._popen.poll() is not None:
                return False
            self._popen.send_signal(sig)
            return True
        try:
            pidfd = os.pidfd_open(self.pid)
        except ProcessLookupError:
            return False
        except (AttributeError, OSError):  # pragma: no cover - kernels older than 5.3
            return self._check_then_kill(sig)
        try:
            if not self._identity_matches():
                return False
            signal.pidfd_send_signal(pidfd, sig)
            return True
        except ProcessLookupError:
            return False
        finally:
            os.close(pidfd)

    def _check_then_kill(self, sig: int) -> bool:  # pragma: no cover - fallback without pidfd
        if not self._identity_matches():
            return False
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def wait_exit(self, timeout: float | None = None) -> bool:
        """Wait until the process is gone (reaped, or a zombie if not ours); True if it went in time."""
        if self._popen is not None:
            try:
                self._popen.wait(timeout)
            except subprocess.TimeoutExpired:
                return False
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._identity_matches():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_INTERVAL)
        return True

    def terminate(self, timeout: float = 10.0, kill_timeout: float = 5.0) -> None:
        """Ask politely with SIGTERM, then SIGKILL once `timeout` has passed. No-op if already gone."""
        terminate_all([self], timeout=timeout, kill_timeout=kill_timeout)

    def kill(self, timeout: float = 5.0) -> None:
        """SIGKILL and wait until the process is gone; raise if it is somehow still there after `timeout`."""
        self.send_signal(signal.SIGKILL)
        if not self.wait_exit(timeout):
            raise ProcessStillAliveError(f"pid {self.pid} still alive {timeout:.1f}s after SIGKILL")

    def stop_signal(self) -> bool:
        """Freeze the process (SIGSTOP), e.g. to simulate a hung node whose sessions then expire."""
        return self.send_signal(signal.SIGSTOP)

    def cont(self) -> bool:
        """Resume a process frozen by `stop_signal`."""
        return self.send_signal(signal.SIGCONT)

    def to_json(self) -> dict[str, Any]:
        """Everything another process needs to re-attach safely."""
        return {
            "pid": self.pid,
            "start_time": self.start_time,
            "boot_id": self.boot_id,
            "argv": self.argv,
            "log_path": None if self.log_path is None else str(self.log_path),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ManagedProcess:
        """Re-attach to a process described by `to_json`; it may have exited or been replaced meanwhile."""
        log_path = data.get("log_path")
        return cls(
            int(data["pid"]),
            int(data["start_time"]),
            boot_id=str(data.get("boot_id", "")),
            argv=list(data.get("argv", ())),
            log_path=None if log_path is None else Path(log_path),
        )

    def __repr__(self) -> str:
        kind = "child" if self.is_child else "attached"
        return f"ManagedProcess(pid={self.pid}, start_time={self.start_time}, {kind})"


def log_tail(path: Path, lines: int = 15) -> str:
    """The last lines of a process's log, for error messages that say why it died."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def terminate_all(
    processes: Iterable[ManagedProcess], timeout: float = 10.0, kill_timeout: float = 5.0
) -> None:
    """SIGTERM every process at once, then SIGKILL whichever is still running after `timeout`.

    Signalling all first means shutting down N ZooKeeper nodes costs one graceful-exit delay, not N.
    A SIGCONT follows the SIGTERM because a process frozen by SIGSTOP would otherwise never act on it.
    """
    signalled = [p for p in processes if p.send_signal(signal.SIGTERM)]
    for proc in signalled:
        proc.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + timeout
    stubborn = [p for p in signalled if not p.wait_exit(max(0.0, deadline - time.monotonic()))]
    for proc in stubborn:
        proc.send_signal(signal.SIGKILL)
    still_alive = [p.pid for p in stubborn if not p.wait_exit(kill_timeout)]
    if still_alive:
        raise ProcessStillAliveError(f"pids {still_alive} still alive {kill_timeout:.1f}s after SIGKILL")
