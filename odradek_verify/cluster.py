"""The cluster a verify run owns: the local launcher, optionally inside a network lab, with a small disk and
clock files for the nemesis.

Subclasses of ``LocalCluster`` and ``ZkEnsemble`` rather than edits to them: the only differences are a command
prefix (``ip netns exec NS`` and ``env LD_PRELOAD=libclockshift.so ...``, both of which exec the real server, so
the pid we hold stays the server's) and the address each server binds and advertises. Everything else (pids with
start times, state files, registration waits) is the launcher users already run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

from odradek_local.cluster import LocalCluster
from odradek_local.zookeeper import ZkEnsemble, ZkNodeStatus, four_letter_word, parse_mode
from odradek_verify import clockshift
from odradek_verify.netns import NetLab


class LabEnsemble(ZkEnsemble):
    """ZooKeeper node i runs in namespace ``zk<i>`` and binds that host's address."""

    def __init__(self, lab: NetLab, base_dir: Path, size: int, tick_ms: int) -> None:
        super().__init__(base_dir, size=size, client_port_base=2181, tick_ms=tick_ms)
        self.lab = lab

    def host_of(self, node_id: int) -> str:
        return f"zk{node_id}"

    def config_text(self, node_id: int) -> str:
        text = super().config_text(node_id)
        text = re.sub(r"clientPortAddress=\S+", f"clientPortAddress={self.lab.addr(self.host_of(node_id))}", text)
        return re.sub(r"server\.(\d+)=[^:]+:",
                      lambda m: f"server.{m.group(1)}={self.lab.addr(self.host_of(int(m.group(1))))}:", text)

    def command(self, node_id: int) -> list[str]:
        return [*self.lab.exec_prefix(self.host_of(node_id)), *super().command(node_id)]

    def node_status(self, node_id: int, timeout: float = 2.0) -> ZkNodeStatus:
        node = self.nodes[node_id]
        proc = self._procs.get(node_id)
        if proc is None or not proc.is_alive():
            return ZkNodeStatus(node_id, node.client_port, None, None)
        try:
            reply = four_letter_word(self.lab.addr(self.host_of(node_id)), node.client_port, "srvr", timeout)
            mode = parse_mode(reply)
        except OSError:
            mode = None
        return ZkNodeStatus(node_id, node.client_port, proc.pid, mode)

    def connect_string(self, chroot: str | None = None) -> str:
        hosts = ",".join(f"{self.lab.addr(self.host_of(n.id))}:{n.client_port}" for n in self.nodes.values())
        return hosts + ("/" + chroot.strip("/") if chroot else "")


# In a lab every broker has a host (an address) of its own: fixed ports, broker i's Kafka listener on 9191 + i
# beside its HTTP listener on 9091 + i (no port on the machine itself is taken).
LAB_KAFKA_PORT = 9192


class VerifyCluster(LocalCluster):
    """``LocalCluster`` plus a command prefix per broker: its namespace (in a lab) and the clock shim (when
    clock faults are on). Broker ``i`` runs in host ``b<i>`` and listens on, and advertises, that address: its
    HTTP listener and its Kafka listener (PLAINTEXT), so both are reachable from the ``client`` host the
    workload runs in (and cut by the same iptables rules)."""

    def __init__(self, data_dir: Path, *, lab: NetLab | None, brokers: int, zookeepers: int, base_port: int,
                 zk_base_port: int, tick_ms: int, session_timeout_ms: int, broker_args: list[str],
                 clock_lib: Path | None) -> None:
        ensemble = (LabEnsemble(lab, Path(data_dir).absolute() / "zookeeper", zookeepers, tick_ms)
                    if lab is not None else None)
        # Without a lab LocalCluster picks free ports for the Kafka listeners (brokers share 127.0.0.1).
        super().__init__(data_dir, brokers=brokers, base_port=base_port, zookeepers=zookeepers,
                         zk_base_port=zk_base_port, tick_ms=tick_ms, session_timeout_ms=session_timeout_ms,
                         ensemble=ensemble, broker_args=broker_args,
                         kafka_base_port=None if lab is None else LAB_KAFKA_PORT)
        self.owns_ensemble = True
        self.lab = lab
        self.clock_lib = clock_lib  # the built clockshift library, or None: no clock faults

    def host_of(self, broker_id: int) -> str:
        return f"b{broker_id}"

    def broker_url(self, broker_id: int) -> str:
        if self.lab is None:
            return super().broker_url(broker_id)
        return f"http://{self.lab.addr(self.host_of(broker_id))}:{self.slots[broker_id].port}"

    def kafka_address(self, broker_id: int) -> str | None:
        slot = self.slots[broker_id]
        if self.lab is None or slot.kafka_port is None:
            return super().kafka_address(broker_id)
        return f"{self.lab.addr(self.host_of(broker_id))}:{slot.kafka_port}"

    @property
    def kafka_bootstrap(self) -> str | None:
        """``bootstrap.servers`` for Kafka clients (librdkafka): every broker's Kafka listener, as reachable from
        the workload (its lab address in a lab)."""
        addresses = [a for b in sorted(self.slots) if (a := self.kafka_address(b))]
        return ",".join(addresses) or None

    def clock_file(self, broker_id: int) -> Path:
        return self.slots[broker_id].dir / "clock.offset"

    def set_clock_offset(self, broker_id: int, offset_ns: int) -> None:
        """The broker's wall clock is true time + ``offset_ns`` from now on (its monotonic clock is untouched)."""
        clock = self.clock_file(broker_id)
        clockshift.create_file(clock)
        clockshift.write_offset(clock, offset_ns)

    def broker_command(self, broker_id: int) -> list[str]:
        cmd = super().broker_command(broker_id)
        if self.lab is not None:
            i = cmd.index("--listen")
            cmd[i + 1] = f"{self.lab.addr(self.host_of(broker_id))}:{self.slots[broker_id].port}"
            if "--kafka-listeners" in cmd:  # bound (and so advertised) on the host's address, not 127.0.0.1
                i = cmd.index("--kafka-listeners")
                cmd[i + 1] = f"PLAINTEXT://{self.kafka_address(broker_id)}"
        prefix: list[str] = []
        if self.clock_lib is not None:
            clock = self.clock_file(broker_id)
            clockshift.create_file(clock)
            prefix = clockshift.env_prefix(self.clock_lib, clock)
        if self.lab is not None:
            prefix = [*self.lab.exec_prefix(self.host_of(broker_id)), *prefix]
        return [*prefix, *cmd]

    def _serving(self, broker_id: int) -> bool:
        try:
            with urllib.request.urlopen(self.broker_url(broker_id) + "/health", timeout=2) as resp:
                return json.loads(resp.read()).get("status") == "ok"
        except (OSError, ValueError):
            return False

    def serving(self, broker_id: int) -> bool:
        return self._serving(broker_id)

    def bootstrap(self) -> str:
        return ",".join(self.broker_url(b) for b in sorted(self.slots))


class LoopDisk:
    """A small ext4 filesystem on a loop device, mounted as one broker's data dir, so the nemesis can fill it.

    Made before the broker starts and removed at the end (unmount, detach, delete the image), failures
    included. ``fill`` writes a filler file until the filesystem refuses (ENOSPC), ``free`` deletes it.
    """

    def __init__(self, image: Path, mountpoint: Path, size_mb: int = 96) -> None:
        self.image, self.mountpoint, self.size_mb = image, mountpoint, size_mb
        self.device: str | None = None
        self.mounted = False

    @staticmethod
    def supported() -> str | None:
        if os.geteuid() != 0:
            return "a loop-mounted disk needs root"
        if not (shutil.which("losetup") and shutil.which("mkfs.ext4")):
            return "losetup or mkfs.ext4 is missing"
        return None

    def create(self) -> None:
        self.image.parent.mkdir(parents=True, exist_ok=True)
        with open(self.image, "wb") as f:
            f.truncate(self.size_mb * 1024 * 1024)
        subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(self.image)], check=True, capture_output=True,
                       timeout=60)
        self.device = subprocess.run(["losetup", "-f", "--show", str(self.image)], check=True, capture_output=True,
                                     text=True, timeout=30).stdout.strip()
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", self.device, str(self.mountpoint)], check=True, capture_output=True, timeout=30)
        self.mounted = True

    @property
    def filler(self) -> Path:
        return self.mountpoint / "verify-filler.bin"

    def fill(self) -> int:
        """Write until ENOSPC, in 1 MiB then 4 KiB pieces so not even a block is left; return the bytes written."""
        written = 0
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for size in (1 << 20, 4096):
                chunk = b"\0" * size
                while True:
                    try:
                        n = os.write(fd, chunk)
                    except OSError:
                        break
                    written += n
                    if n < size:
                        break
        finally:
            os.close(fd)
        return written

    def free(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.filler.unlink()

    def destroy(self) -> list[str]:
        errors: list[str] = []
        self.free()
        if self.mounted:
            res = subprocess.run(["umount", str(self.mountpoint)], capture_output=True, text=True, timeout=60)
            if res.returncode != 0:
                res = subprocess.run(["umount", "-l", str(self.mountpoint)], capture_output=True, text=True,
                                     timeout=60)
            if res.returncode != 0:
                errors.append(f"umount {self.mountpoint}: {res.stderr.strip()}")
            else:
                self.mounted = False
        if self.device:
            res = subprocess.run(["losetup", "-d", self.device], capture_output=True, text=True, timeout=30)
            if res.returncode != 0:
                errors.append(f"losetup -d {self.device}: {res.stderr.strip()}")
            else:
                self.device = None
        with contextlib.suppress(FileNotFoundError):
            self.image.unlink()
        return errors
