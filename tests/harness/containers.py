"""The testcontainers backend: the same ``ClusterBackend`` as ``LocalProcessBackend``, with ZooKeeper and brokers
as containers of the images in docker/ (``odradek/zookeeper``, ``odradek/broker``).

Every container uses the host's network and binds 127.0.0.1 on ports picked like the local backend's, because
our engine runs with ``--bridge=none --iptables=false`` (no container may get a private-range address); it also
keeps the addresses the brokers register the same for the tests as for each other. testcontainers needs
``TESTCONTAINERS_RYUK_DISABLED=true`` (its reaper image cannot be pulled here, and we remove every container we
start ourselves, by id) and ``TESTCONTAINERS_CONNECTION_MODE=docker_host`` (these machines look like containers
to it); ``configure_testcontainers`` sets both unless the caller did.

Mapping of the drills: stop = ``docker stop`` (SIGTERM to the broker, which is PID 1), kill = ``docker kill``
(SIGKILL), pause/resume = ``docker pause``/``unpause`` (the cgroup freezer: the same frozen process as SIGSTOP),
start after stop or kill = ``docker start`` of the same container, so its log directory survives as a process's
data directory does.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from tests.harness.ports import free_port_block
from tests.harness.wait import wait_until
from zk.client import ZkClient

HOST = "127.0.0.1"
LABEL = "odradek.test"


def image_tag() -> str:
    return os.environ.get("ODRADEK_IMAGE_TAG", "dev")


def broker_image() -> str:
    return os.environ.get("ODRADEK_BROKER_IMAGE", f"odradek/broker:{image_tag()}")


def zookeeper_image() -> str:
    return os.environ.get("ODRADEK_ZOOKEEPER_IMAGE", f"odradek/zookeeper:{image_tag()}")


def configure_testcontainers() -> None:
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")


def docker_problem() -> str | None:
    """Why the containers backend cannot run here (no engine, or an image is missing), or None if it can."""
    try:
        import docker
    except ImportError as e:
        return f"the docker package is missing ({e}); install the project's test extra"
    try:
        client = docker.from_env(timeout=5)
        client.ping()
    except Exception as e:
        return f"no Docker engine answers at {os.environ.get('DOCKER_HOST', 'the default socket')} ({e})"
    try:
        missing = []
        for image in (broker_image(), zookeeper_image()):
            try:
                client.images.get(image)
            except docker.errors.ImageNotFound:
                missing.append(image)
        if missing:
            return f"images {missing} are not built: run `bash scripts/ci-docker.sh build`"
    finally:
        client.close()
    return None


def _start(image: str, env: dict[str, str], name: str, command: list[str] | None = None) -> Any:
    """One container on the host network, through testcontainers; returns the DockerContainer."""
    configure_testcontainers()
    from testcontainers.core.container import DockerContainer

    container = DockerContainer(image).with_name(name).with_kwargs(network_mode="host", labels={LABEL: "1"})
    for key, value in env.items():
        container.with_env(key, value)
    if command:
        container.with_command(command)
    return container.start()


def _remove(container: Any) -> None:
    """Remove a container and its anonymous volumes, by id; never by name or filter."""
    with contextlib.suppress(Exception):
        container.stop(force=True, delete_volume=True)


def four_letter_word(port: int, word: str = "srvr", timeout: float = 1.0) -> str:
    with socket.create_connection((HOST, port), timeout=timeout) as s:
        s.sendall(word.encode())
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def _mode(port: int) -> str | None:
    try:
        for line in four_letter_word(port).splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


@dataclass
class ContainerEnsemble:
    """A ZooKeeper ensemble of ``size`` containers on 127.0.0.1 (client ports base..base+size-1)."""

    size: int = 3
    tick_ms: int = 500
    run_id: str = field(default_factory=lambda: f"{os.getpid()}-{time.monotonic_ns() % 10**8}")
    containers: dict[int, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        base = free_port_block(self.size, span=100 + 2 * self.size)
        self.client_port_base = base
        peer = base + 100 - 2 * self.size
        self.servers = " ".join(
            f"server.{i}=127.0.0.1:{peer + 2 * (i - 1)}:{peer + 2 * (i - 1) + 1}" for i in range(1, self.size + 1)
        ) if self.size > 1 else ""

    def client_port(self, node_id: int) -> int:
        return self.client_port_base + node_id - 1

    def connect_string(self, chroot: str | None = None) -> str:
        hosts = ",".join(f"{HOST}:{self.client_port(i)}" for i in range(1, self.size + 1))
        return hosts + (chroot or "")

    def start_node(self, node_id: int) -> None:
        old = self.containers.get(node_id)
        if old is not None:
            old.get_wrapped_container().start()  # same container: its data directory survives
            return
        env = {"ZOO_MY_ID": str(node_id), "ZOO_CLIENT_PORT": str(self.client_port(node_id)),
               "ZOO_CLIENT_ADDRESS": HOST, "ZOO_TICK_TIME": str(self.tick_ms), "ZOO_SERVERS": self.servers}
        self.containers[node_id] = _start(zookeeper_image(), env, f"odradek-test-zk{node_id}-{self.run_id}")

    def start(self, timeout: float = 90.0) -> ContainerEnsemble:
        try:
            for i in range(1, self.size + 1):
                self.start_node(i)
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        wanted = {"standalone"} if self.size == 1 else {"leader", "follower"}
        wait_until(lambda: all(_mode(self.client_port(i)) in wanted for i in self.containers), timeout,
                   "every ZooKeeper container to serve")

    def kill_node(self, node_id: int) -> None:
        self.containers[node_id].get_wrapped_container().kill()

    def leader_id(self) -> int | None:
        return next((i for i in self.containers if _mode(self.client_port(i)) == "leader"), None)

    def stop(self) -> None:
        for container in self.containers.values():
            _remove(container)
        self.containers.clear()


class ContainerClusterBackend:
    """Brokers 1..N as containers over a ``ContainerEnsemble``, in a ZooKeeper chroot of their own."""

    def __init__(self, ensemble: ContainerEnsemble, *, brokers: int = 3, chroot: str,
                 session_timeout_ms: int = 3000, broker_args: list[str] | None = None) -> None:
        self.ensemble = ensemble
        self.chroot = chroot
        self.zk_connect = ensemble.connect_string(chroot)
        self.session_timeout_ms = session_timeout_ms
        self.broker_args = list(broker_args or [])
        base = free_port_block(brokers)
        self.ports = {i: base + i - 1 for i in range(1, brokers + 1)}
        kafka_base = free_port_block(brokers)
        self.kafka_ports = {i: kafka_base + i - 1 for i in range(1, brokers + 1)}
        self.containers: dict[int, Any] = {}
        self._clients: list[ZkClient] = []

    def up(self, timeout: float = 90.0) -> ContainerClusterBackend:
        for b in self.ports:
            self._create_broker(b)
        self.wait_serving(list(self.ports), timeout)
        return self

    def _create_broker(self, broker_id: int) -> None:
        env = {
            "ODRADEK_BROKER_ID": str(broker_id),
            "ODRADEK_ZK_CONNECT": self.zk_connect,
            "ODRADEK_LISTEN": f"{HOST}:{self.ports[broker_id]}",
            "ODRADEK_KAFKA_LISTENERS": f"PLAINTEXT://{HOST}:{self.kafka_ports[broker_id]}",
            "ODRADEK_ZK_SESSION_TIMEOUT_MS": str(self.session_timeout_ms),
        }
        name = f"odradek-test-broker{broker_id}-{self.ensemble.run_id}-{self.chroot.strip('/')[-10:]}"
        self.containers[broker_id] = _start(broker_image(), env, name, self.broker_args or None)

    def _wrapped(self, broker_id: int) -> Any:
        container = self.containers[broker_id].get_wrapped_container()
        container.reload()
        return container

    def wait_serving(self, broker_ids: list[int], timeout: float = 60.0) -> None:
        from tests.harness.http import request

        def serving() -> bool:
            for b in broker_ids:
                if self._wrapped(b).status != "running":
                    logs = self._wrapped(b).logs(tail=20).decode(errors="replace")
                    raise AssertionError(f"broker container {b} exited:\n{logs}")
                try:
                    status, body, _ = request("GET", self.broker_url(b) + "/health", timeout=2)
                except OSError:
                    return False
                if status != 200 or body.get("status") != "ok":
                    return False
            return True

        deadline = time.monotonic() + timeout
        while not serving():
            if time.monotonic() >= deadline:
                raise AssertionError(f"broker containers {broker_ids} did not serve within {timeout:.0f} s")
            time.sleep(0.1)

    # ------------------------------------------------------------------------------------ ClusterBackend

    def broker_ids(self) -> list[int]:
        return sorted(self.ports)

    def broker_url(self, broker_id: int) -> str:
        return f"http://{HOST}:{self.ports[broker_id]}"

    def kafka_address(self, broker_id: int) -> str:
        return f"{HOST}:{self.kafka_ports[broker_id]}"

    @property
    def kafka_bootstrap(self) -> str:
        return ",".join(self.kafka_address(b) for b in self.broker_ids())

    def broker_pid(self, broker_id: int) -> int | None:
        """The broker's pid on the host while its container runs (paused counts as running, as SIGSTOP does)."""
        if broker_id not in self.containers:
            return None
        state = self._wrapped(broker_id).attrs["State"]
        return int(state["Pid"]) if state.get("Running") and state.get("Pid") else None

    def start_broker(self, broker_id: int) -> None:
        if broker_id not in self.containers:
            self._create_broker(broker_id)
        else:
            self._wrapped(broker_id).start()
        self.wait_serving([broker_id], timeout=60)

    def stop_broker(self, broker_id: int) -> None:
        self._wrapped(broker_id).stop(timeout=30)

    def kill_broker(self, broker_id: int) -> None:
        self._wrapped(broker_id).kill()
        wait_until(lambda: self._wrapped(broker_id).status != "running", 10, f"broker container {broker_id} to die")

    def pause_broker(self, broker_id: int) -> None:
        self._wrapped(broker_id).pause()

    def resume_broker(self, broker_id: int) -> None:
        self._wrapped(broker_id).unpause()

    def zookeeper_ids(self) -> list[int]:
        return sorted(self.ensemble.containers)

    def kill_zookeeper(self, node_id: int) -> None:
        self.ensemble.kill_node(node_id)

    def start_zookeeper(self, node_id: int) -> None:
        self.ensemble.start_node(node_id)

    def zookeeper_leader(self) -> int | None:
        return self.ensemble.leader_id()

    def zk_client(self) -> ZkClient:
        client = ZkClient(self.zk_connect, session_timeout_s=10.0, connect_timeout_s=10.0)
        client.start()
        self._clients.append(client)
        return client

    def broker_logs(self, broker_id: int, tail: int = 50) -> str:
        return self._wrapped(broker_id).logs(tail=tail).decode(errors="replace")

    def close(self) -> None:
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.close()
        for container in self.containers.values():
            with contextlib.suppress(Exception):
                wrapped = container.get_wrapped_container()
                wrapped.reload()
                if wrapped.status == "paused":
                    wrapped.unpause()
            _remove(container)
        self.containers.clear()
