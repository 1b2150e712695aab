"""Start, stop and inspect a local ZooKeeper ensemble (1, 3 or 5 nodes on 127.0.0.1) from Debian's package.

Debian's `zookeeper` package installs jars but no service, so each node is a `java ... QuorumPeerMain` we
launch ourselves; that way we hold the real JVM pid (no wrapper script in between) and can kill exactly one
node for failure drills. Readiness is judged by the `srvr` four-letter word, never by `ruok`: a node that lost
quorum still answers `imok` while refusing every request.

Layout and process identities are persisted in <base_dir>/ensemble.json so that `odradek cluster status` or
`odradek cluster down`, run later from another process, can re-attach with `ZkEnsemble.load`.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from odradek_local.processes import ManagedProcess, log_tail, terminate_all
from zk.ensemble import four_letter_word

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
ZOOKEEPER_CONF_DIR = Path("/etc/zookeeper/conf")
# Without an slf4j binding ZooKeeper logs nothing at all; these give it log4j with the CONSOLE appender.
LOGGING_JARS = (Path("/usr/share/java/slf4j-log4j12.jar"), Path("/usr/share/java/log4j-1.2.jar"))
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
# ZooKeeper 3.8.0 (Debian's) can lose committed writes when a follower synced by DIFF goes back to an election:
# it applied the leader's transactions in memory but had not logged them, yet it already wrote the new epoch, so
# it wins the next election with its old log and truncates the others (ZOOKEEPER-4643, -4646, -4785; fixed in
# 3.9.2). A snapshot sync is written to disk before the follower takes the new epoch, so we ask for it always.
# ZooKeeper logs "Forcing snapshot sync - should not see this in production" at each sync: that is this flag.
FORCE_SNAPSHOT_SYNC = "-Dzookeeper.forceSnapshotSync=true"
FOUR_LETTER_WORDS = "srvr,mntr,stat,conf,ruok,isro"
STATE_FILE = "ensemble.json"
HOST = "127.0.0.1"

_NOT_SERVING = "not currently serving requests"
_POLL_INTERVAL = 0.1


class ZkEnsembleError(RuntimeError):
    """Base class for ensemble launcher failures."""


class ZooKeeperNotInstalledError(ZkEnsembleError):
    """Java or the ZooKeeper jar is missing; the message says which package to install."""


class PortInUseError(ZkEnsembleError):
    """A port the ensemble needs is already bound by something else."""


class EnsembleNotReadyError(ZkEnsembleError, TimeoutError):
    """Nodes did not reach the wanted state in time, or died while we waited."""


@dataclass(frozen=True)
class ZkNodeStatus:
    """What one node looks like from outside right now."""

    id: int
    client_port: int
    pid: int | None
    mode: str | None  # "leader", "follower", "standalone", ... or None when not serving

    @property
    def serving(self) -> bool:
        return self.mode is not None


@dataclass(frozen=True)
class ZkNode:
    """Where one node lives on disk and on the network."""

    id: int
    client_port: int
    quorum_port: int
    election_port: int
    dir: Path

    @property
    def config_path(self) -> Path:
        return self.dir / "zoo.cfg"

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def log_path(self) -> Path:
        return self.dir / "zookeeper.log"


def parse_mode(srvr_reply: str) -> str | None:
    """Extract `Mode:` from a `srvr` reply; None for a node that is up but not serving (no quorum)."""
    if _NOT_SERVING in srvr_reply:
        return None
    for line in srvr_reply.splitlines():
        if line.startswith("Mode:"):
            return line.partition(":")[2].strip() or None
    return None


def _port_is_free(port: int) -> bool:
    # SO_REUSEADDR mirrors what the JVM does, so TIME_WAIT leftovers of a killed node don't count as "in use".
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


class ZkEnsemble:
    """A ZooKeeper ensemble on 127.0.0.1 whose JVMs we launched and track by pid.

    Node i (1-based) listens for clients on client_port_base + i - 1; its quorum and election ports are
    peer_port_base + 2(i-1) and + 1 (peer_port_base defaults to client_port_base + 100). A size of 1 runs
    standalone. Restarting a killed node reuses its data dir, so it rejoins with its log intact.
    """

    def __init__(
        self,
        base_dir: Path,
        size: int = 3,
        client_port_base: int = 2181,
        tick_ms: int = 2000,
        heap_mb: int = 128,
        *,
        peer_port_base: int | None = None,
        init_limit: int = 10,
        sync_limit: int = 5,
        zookeeper_jar: Path = ZOOKEEPER_JAR,
        java: str = "java",
        force_snapshot_sync: bool = True,
    ) -> None:
        if size < 1:
            raise ValueError(f"ensemble size must be at least 1, got {size}")
        self.base_dir = Path(base_dir).absolute()
        self.size = size
        self.client_port_base = client_port_base
        self.peer_port_base = client_port_base + 100 if peer_port_base is None else peer_port_base
        self.tick_ms = tick_ms
        self.heap_mb = heap_mb
        self.init_limit = init_limit
        self.sync_limit = sync_limit
        self.zookeeper_jar = Path(zookeeper_jar)
        self.java = java
        self.force_snapshot_sync = force_snapshot_sync
        self.nodes: dict[int, ZkNode] = {
            i: ZkNode(
                id=i,
                client_port=client_port_base + i - 1,
                quorum_port=self.peer_port_base + 2 * (i - 1),
                election_port=self.peer_port_base + 2 * (i - 1) + 1,
                dir=self.base_dir / f"zk{i}",
            )
            for i in range(1, size + 1)
        }
        self._procs: dict[int, ManagedProcess] = {}

    # ----- configuration -------------------------------------------------------------------------------

    @property
    def state_path(self) -> Path:
        return self.base_dir / STATE_FILE

    def config_text(self, node_id: int) -> str:
        """zoo.cfg for one node; no server.N lines in a 1-node ensemble makes ZooKeeper run standalone."""
        node = self.nodes[node_id]
        lines = [
            f"tickTime={self.tick_ms}",
            f"initLimit={self.init_limit}",
            f"syncLimit={self.sync_limit}",
            f"dataDir={node.data_dir}",
            f"clientPort={node.client_port}",
            f"clientPortAddress={HOST}",
            "admin.enableServer=false",
            f"4lw.commands.whitelist={FOUR_LETTER_WORDS}",
            "maxClientCnxns=0",
        ]
        if self.size > 1:
            lines += [f"server.{n.id}={HOST}:{n.quorum_port}:{n.election_port}" for n in self.nodes.values()]
        return "\n".join(lines) + "\n"

    def write_config(self, node_id: int) -> None:
        node = self.nodes[node_id]
        node.data_dir.mkdir(parents=True, exist_ok=True)
        (node.data_dir / "myid").write_text(f"{node_id}\n")
        node.config_path.write_text(self.config_text(node_id))

    def check_installation(self) -> str:
        """Return the java executable to use, or explain which package to install."""
        java = shutil.which(self.java)
        if java is None:
            raise ZooKeeperNotInstalledError(
                f"Java is not installed: no {self.java!r} executable on PATH. "
                "Install it with: sudo apt-get install -y default-jre-headless"
            )
        if not self.zookeeper_jar.is_file():
            raise ZooKeeperNotInstalledError(
                f"ZooKeeper is not installed: {self.zookeeper_jar} is missing. "
                "Install it with: sudo apt-get install -y zookeeper"
            )
        return java

    def command(self, node_id: int) -> list[str]:
        """The java command line for one node; only classpath entries that exist are included."""
        java = self.check_installation()
        classpath = [ZOOKEEPER_CONF_DIR, self.zookeeper_jar, *LOGGING_JARS]
        return [
            java,
            f"-Xmx{self.heap_mb}m",
            "-Xms32m",
            "-XX:+UseSerialGC",
            "-Dzookeeper.root.logger=INFO,CONSOLE",
            *([FORCE_SNAPSHOT_SYNC] if self.force_snapshot_sync else []),
            "-cp",
            ":".join(str(p) for p in classpath if p.exists()),
            MAIN_CLASS,
            str(self.nodes[node_id].config_path),
        ]

    def _check_ports_free(self, node_ids: list[int]) -> None:
        for i in node_ids:
            node = self.nodes[i]
            ports = [("client", node.client_port)]
            if self.size > 1:
                ports += [("quorum", node.quorum_port), ("election", node.election_port)]
            for role, port in ports:
                if not _port_is_free(port):
                    raise PortInUseError(
                        f"{role} port {port} of ZooKeeper node {i} on {HOST} is already in use by another "
                        f"process; stop it or choose another client_port_base/peer_port_base"
                    )

    # ----- lifecycle -----------------------------------------------------------------------------------

    def is_running(self, node_id: int) -> bool:
        proc = self._procs.get(node_id)
        return proc is not None and proc.is_alive()

    def start(self, timeout: float = 30.0) -> list[ZkNodeStatus]:
        """Start every node that is not running and wait until all serve.

        All-or-nothing: if the ensemble does not come up, the nodes started by this call are stopped again, so
        a failed start leaves no orphan JVMs behind.
        """
        self.check_installation()
        to_start = [i for i in self.nodes if not self.is_running(i)]
        self._check_ports_free(to_start)
        try:
            for i in to_start:
                self._spawn(i)
            self.save()
            return self.wait_ready(timeout)
        except BaseException:
            terminate_all([self._procs[i] for i in to_start if i in self._procs], timeout=5.0)
            for i in to_start:
                self._procs.pop(i, None)
            self.save()
            raise

    def start_node(self, node_id: int) -> None:
        """(Re)start one node without waiting for it to serve; a no-op if it is already running."""
        if self.is_running(node_id):
            return
        self.check_installation()
        self._check_ports_free([node_id])
        self._spawn(node_id)
        self.save()

    def _spawn(self, node_id: int) -> None:
        self.write_config(node_id)
        node = self.nodes[node_id]
        self._procs[node_id] = ManagedProcess.spawn(
            self.command(node_id), log_path=node.log_path, cwd=node.dir, env=os.environ
        )

    def stop_node(self, node_id: int, timeout: float = 10.0) -> None:
        """Graceful stop (SIGTERM, SIGKILL after `timeout`)."""
        self._end(self._tracked(node_id), timeout, graceful=True)

    def kill_node(self, node_id: int) -> None:
        """Crash a node (SIGKILL), as a failure drill; its data dir is kept for a restart."""
        self._end(self._tracked(node_id), 5.0, graceful=False)

    def pause_node(self, node_id: int) -> bool:
        """Freeze a node (SIGSTOP): it keeps its sockets but stops answering, like a hung JVM."""
        proc = self._procs.get(node_id)
        return proc is not None and proc.stop_signal()

    def resume_node(self, node_id: int) -> bool:
        proc = self._procs.get(node_id)
        return proc is not None and proc.cont()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every node we track, all at once, by pid (never by name)."""
        self._end(self._tracked(*self.nodes), timeout, graceful=True)

    def _tracked(self, *node_ids: int) -> dict[int, ManagedProcess]:
        return {i: self._procs[i] for i in node_ids if i in self._procs}

    def _end(self, procs: dict[int, ManagedProcess], timeout: float, *, graceful: bool) -> None:
        # Whatever survives (only possible if SIGKILL itself fails) stays tracked, so it is never forgotten.
        try:
            if graceful:
                terminate_all(procs.values(), timeout=timeout)
            else:
                for proc in procs.values():
                    proc.kill(timeout)
        finally:
            for i, proc in procs.items():
                if not proc.is_alive():
                    self._procs.pop(i, None)
            self.save()

    # ----- observation ---------------------------------------------------------------------------------

    def node_status(self, node_id: int, timeout: float = 2.0) -> ZkNodeStatus:
        """Status of one node; only our own live process is asked, so a stranger on the port is ignored.

        The srvr timeout is generous because a loaded 2-core machine can delay even a trivial reply, and a
        false "not serving" would make a healthy ensemble look broken.
        """
        node = self.nodes[node_id]
        proc = self._procs.get(node_id)
        if proc is None or not proc.is_alive():
            return ZkNodeStatus(node_id, node.client_port, None, None)
        try:
            mode = parse_mode(four_letter_word(HOST, node.client_port, "srvr", timeout))
        except OSError:
            mode = None
        return ZkNodeStatus(node_id, node.client_port, proc.pid, mode)

    def status(self) -> list[ZkNodeStatus]:
        return [self.node_status(i) for i in self.nodes]

    def leader_id(self) -> int | None:
        """The single node reporting leader (or standalone); None during an election or split."""
        leaders = [s.id for s in self.status() if s.mode in ("leader", "standalone")]
        return leaders[0] if len(leaders) == 1 else None

    def wait_ready(self, timeout: float = 30.0) -> list[ZkNodeStatus]:
        """Wait until every node serves; fail early if one of them is not running at all."""
        return self._wait(timeout, need=self.size, what="all nodes serving")

    def wait_quorum(self, timeout: float = 30.0) -> list[ZkNodeStatus]:
        """Wait until a majority of nodes serves, which is all ZooKeeper needs to accept writes."""
        return self._wait(timeout, need=self.size // 2 + 1, what="a quorum serving")

    def wait_leader(self, timeout: float = 30.0, *, not_id: int | None = None) -> int:
        """Wait for a single leader, optionally a different one from `not_id` (e.g. after killing it)."""
        deadline = time.monotonic() + timeout
        while True:
            leader = self.leader_id()
            if leader is not None and leader != not_id:
                return leader
            if time.monotonic() >= deadline:
                raise EnsembleNotReadyError(f"no new leader within {timeout:.1f}s: {self._describe()}")
            time.sleep(_POLL_INTERVAL)

    def _wait(self, timeout: float, need: int, what: str) -> list[ZkNodeStatus]:
        deadline = time.monotonic() + timeout
        while True:
            statuses = self.status()
            if sum(s.serving for s in statuses) >= need:
                return statuses
            running = [s for s in statuses if s.pid is not None]
            if len(running) < need:
                raise EnsembleNotReadyError(
                    f"cannot reach {what}: only {len(running)} of {self.size} nodes are running\n"
                    + self._describe(statuses)
                )
            if time.monotonic() >= deadline:
                raise EnsembleNotReadyError(f"no {what} within {timeout:.1f}s\n" + self._describe(statuses))
            time.sleep(_POLL_INTERVAL)

    def _describe(self, statuses: list[ZkNodeStatus] | None = None) -> str:
        parts = []
        for s in statuses if statuses is not None else self.status():
            parts.append(f"node {s.id} port {s.client_port} pid {s.pid} mode {s.mode}")
            if not s.serving:
                log_path = self.nodes[s.id].log_path
                parts.append(f"  last lines of {log_path}:\n{log_tail(log_path)}")
        return "\n".join(parts)

    def connect_string(self, chroot: str | None = None) -> str:
        """kazoo/ZooKeeper hosts string for all nodes, e.g. 127.0.0.1:2181,127.0.0.1:2182/odradek."""
        hosts = ",".join(f"{HOST}:{n.client_port}" for n in self.nodes.values())
        if chroot:
            hosts += "/" + chroot.strip("/")
        return hosts

    # ----- persistence ---------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "client_port_base": self.client_port_base,
            "peer_port_base": self.peer_port_base,
            "tick_ms": self.tick_ms,
            "heap_mb": self.heap_mb,
            "init_limit": self.init_limit,
            "sync_limit": self.sync_limit,
            "zookeeper_jar": str(self.zookeeper_jar),
            "java": self.java,
            "force_snapshot_sync": self.force_snapshot_sync,
            "processes": {str(i): p.to_json() for i, p in sorted(self._procs.items())},
        }

    def save(self) -> None:
        """Write ensemble.json atomically, so a concurrent `status` never reads half a file."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        tmp.replace(self.state_path)

    @classmethod
    def load(cls, base_dir: Path) -> ZkEnsemble:
        """Re-attach to an ensemble started by another process, from <base_dir>/ensemble.json."""
        state_path = Path(base_dir) / STATE_FILE
        try:
            data = json.loads(state_path.read_text())
        except FileNotFoundError:
            raise ZkEnsembleError(f"no ZooKeeper ensemble state at {state_path}") from None
        ensemble = cls(
            Path(base_dir),
            size=data["size"],
            client_port_base=data["client_port_base"],
            tick_ms=data["tick_ms"],
            heap_mb=data["heap_mb"],
            peer_port_base=data["peer_port_base"],
            init_limit=data["init_limit"],
            sync_limit=data["sync_limit"],
            zookeeper_jar=Path(data["zookeeper_jar"]),
            java=data["java"],
            force_snapshot_sync=data.get("force_snapshot_sync", True),
        )
        ensemble._procs = {int(i): ManagedProcess.from_json(p) for i, p in data["processes"].items()}
        return ensemble
