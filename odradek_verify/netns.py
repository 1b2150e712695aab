"""Test hosts as Linux network namespaces, made by the run and removed by it, so a nemesis can cut links.

Why namespaces: a network partition between two processes on one loopback cannot be made (every process shares
127.0.0.1), but processes in separate network namespaces talk over veths into one bridge, and iptables inside a
host's namespace can drop exactly the traffic between two hosts, in both directions, without touching the
machine's own network. Nothing is created in the root namespace: the bridge lives in a ``hub`` namespace, each
veth pair is created inside the hub with its peer moved straight into the host's namespace, and every address is
from 198.18.0.0/15 (the benchmarking range) and exists only inside those namespaces.

The verify driver itself joins the ``client`` namespace (``enter``): ``setns`` applies to the calling thread and
to every thread and process it starts afterwards, so the workload, the checks and the processes it spawns all
live on the lab's network, while signals and files work as usual (the PID and mount namespaces are shared).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

NETNS_DIR = Path("/var/run/netns")
SUBNET_PREFIX = "198.18.0."
CLIENT = "client"
_CLONE_NEWNET = 0x40000000


class NetLabError(RuntimeError):
    """The lab could not be made (no root, no ``ip``, no netns support): the run says so in one line."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def netns_supported() -> str | None:
    """None when namespaces can be made here, else the reason (shown as a skip line)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    try:
        probe = f"odvprobe{secrets.token_hex(3)}"
        _ip("netns", "add", probe)
        _ip("netns", "del", probe)
    except (OSError, subprocess.SubprocessError) as e:
        return f"ip netns does not work here: {e}"
    try:
        subprocess.run(["iptables", "-V"], capture_output=True, check=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "iptables is not installed"
    return None


@dataclass
class NetLab:
    """One bridge, one namespace per host (``zk1``.., ``b1``.., ``client``), and the iptables cuts in force."""

    hosts: dict[str, str]  # host name -> address (198.18.0.x)
    run_id: str = field(default_factory=lambda: secrets.token_hex(3))
    cuts: set[frozenset[str]] = field(default_factory=set)
    created: list[str] = field(default_factory=list)  # namespaces that exist, in creation order

    @classmethod
    def for_cluster(cls, zookeepers: int, brokers: int) -> NetLab:
        hosts = {CLIENT: SUBNET_PREFIX + "2"}
        hosts.update({f"zk{i}": f"{SUBNET_PREFIX}{10 + i}" for i in range(1, zookeepers + 1)})
        hosts.update({f"b{i}": f"{SUBNET_PREFIX}{20 + i}" for i in range(1, brokers + 1)})
        return cls(hosts)

    def ns(self, host: str) -> str:
        return f"odv{self.run_id}-{host}"

    @property
    def hub(self) -> str:
        return f"odv{self.run_id}-hub"

    def addr(self, host: str) -> str:
        return self.hosts[host]

    def exec_prefix(self, host: str) -> list[str]:
        """``ip netns exec`` execs the command after joining the namespace, so the pid we hold is the server's."""
        return ["ip", "netns", "exec", self.ns(host)]

    # ------------------------------------------------------------------------------------------ lifecycle

    def create(self) -> None:
        """Make the hub with its bridge and one namespace per host; on any failure undo what was made."""
        try:
            _ip("netns", "add", self.hub)
            self.created.append(self.hub)
            _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.hub, "link", "set", "br0", "up")
            for i, (host, addr) in enumerate(self.hosts.items()):
                ns = self.ns(host)
                _ip("netns", "add", ns)
                self.created.append(ns)
                veth = f"v{i}"
                _ip("-n", self.hub, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
                _ip("-n", self.hub, "link", "set", veth, "master", "br0", "up")
                _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except (OSError, subprocess.SubprocessError) as e:
            self.destroy()
            detail = getattr(e, "stderr", "") or str(e)
            raise NetLabError(f"could not build the network lab: {detail.strip()}") from e

    def destroy(self) -> list[str]:
        """Delete every namespace this lab made (their veths and the bridge go with them); return errors."""
        errors = []
        for ns in reversed(self.created):
            res = _ip("netns", "del", ns, check=False)
            if res.returncode != 0 and (NETNS_DIR / ns).exists():
                errors.append(f"{ns}: {res.stderr.strip()}")
        self.created = [ns for ns in self.created if (NETNS_DIR / ns).exists()]
        return errors

    def enter(self, host: str = CLIENT) -> None:
        """Move this thread (and whatever it starts from now on) into ``host``'s namespace."""
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(NETNS_DIR / self.ns(host), os.O_RDONLY)
        try:
            if libc.setns(fd, _CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise NetLabError(f"setns into {self.ns(host)} failed: {os.strerror(err)}")
        finally:
            os.close(fd)

    # ------------------------------------------------------------------------------------------- faults

    def _iptables(self, host: str, *args: str) -> None:
        subprocess.run([*self.exec_prefix(host), "iptables", "-w", *args], capture_output=True, check=True,
                       timeout=30)

    def cut(self, a: str, b: str) -> None:
        """Drop every packet between hosts ``a`` and ``b`` (rules in ``a``'s namespace cover both ways)."""
        pair = frozenset((a, b))
        if a == b or pair in self.cuts:
            return
        self._iptables(a, "-A", "INPUT", "-s", self.addr(b), "-j", "DROP")
        self._iptables(a, "-A", "OUTPUT", "-d", self.addr(b), "-j", "DROP")
        self.cuts.add(pair)

    def uncut(self, a: str, b: str) -> None:
        """Remove the rules ``cut`` added between ``a`` and ``b`` (whichever side holds them)."""
        pair = frozenset((a, b))
        if pair not in self.cuts:
            return
        for x, y in ((a, b), (b, a)):
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self._iptables(x, "-D", "INPUT", "-s", self.addr(y), "-j", "DROP")
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self._iptables(x, "-D", "OUTPUT", "-d", self.addr(y), "-j", "DROP")
        self.cuts.discard(pair)

    def cut_groups(self, left: list[str], right: list[str]) -> None:
        for a in left:
            for b in right:
                self.cut(a, b)

    def heal(self) -> None:
        """Flush every host's rules: the network is whole again."""
        for host in self.hosts:
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self._iptables(host, "-F")
        self.cuts.clear()

    def to_json(self) -> dict[str, object]:
        return {"run_id": self.run_id, "hosts": self.hosts, "namespaces": self.created}

    def save(self, path: Path) -> None:
        """Written so that a crashed run's leftovers can be found and removed (``odradek verify --cleanup``)."""
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")


def cleanup_leftovers(path: Path) -> list[str]:
    """Remove the namespaces a previous run recorded in ``path`` (its ``netlab.json``)."""
    data = json.loads(path.read_text())
    lab = NetLab(dict(data["hosts"]), run_id=str(data["run_id"]), created=list(data["namespaces"]))
    return lab.destroy()
