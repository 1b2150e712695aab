"""The cluster the tests drive, behind one interface, so backends can stand side by side.

``ClusterBackend`` is what a test may do to a cluster: start, stop (SIGTERM), kill (SIGKILL), pause (SIGSTOP) and
resume brokers and ZooKeeper nodes, and learn their addresses. ``LocalProcessBackend`` runs real processes on
127.0.0.1 through ``odradek_local.cluster.LocalCluster`` (the same code ``odradek cluster`` uses); a
testcontainers backend implements the same protocol with containers on the host network.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from odradek_local.cluster import LocalCluster
from odradek_local.zookeeper import ZkEnsemble
from tests.harness.wait import SLOW_MACHINE_S
from tests.harness.wait import wait_until as wait_until  # re-exported: older tests import it from here
from zk.client import ZkClient


class ClusterBackend(Protocol):
    zk_connect: str

    def broker_ids(self) -> list[int]: ...
    def broker_url(self, broker_id: int) -> str: ...
    def kafka_address(self, broker_id: int) -> str: ...
    @property
    def kafka_bootstrap(self) -> str: ...
    def broker_pid(self, broker_id: int) -> int | None: ...
    def start_broker(self, broker_id: int) -> None: ...
    def stop_broker(self, broker_id: int) -> None: ...
    def kill_broker(self, broker_id: int) -> None: ...
    def pause_broker(self, broker_id: int) -> None: ...
    def resume_broker(self, broker_id: int) -> None: ...
    def zookeeper_ids(self) -> list[int]: ...
    def kill_zookeeper(self, node_id: int) -> None: ...
    def start_zookeeper(self, node_id: int) -> None: ...
    def zookeeper_leader(self) -> int | None: ...
    def zk_client(self) -> ZkClient: ...
    def close(self) -> None: ...


class LocalProcessBackend:
    """Brokers as local processes over a (shared or own) local ZooKeeper ensemble, in a chroot of their own."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.zk_connect = cluster.zk_connect
        self._clients: list[ZkClient] = []

    def up(self, timeout: float = 60.0) -> LocalProcessBackend:
        self.cluster.up(timeout=timeout)
        return self

    def broker_ids(self) -> list[int]:
        return sorted(self.cluster.slots)

    def broker_url(self, broker_id: int) -> str:
        return self.cluster.broker_url(broker_id)

    def kafka_address(self, broker_id: int) -> str:
        """The broker's Kafka listener, ``127.0.0.1:PORT`` (every local test cluster has one)."""
        address = self.cluster.kafka_address(broker_id)
        assert address is not None, f"broker {broker_id} has no Kafka listener"
        return address

    @property
    def kafka_bootstrap(self) -> str:
        """``bootstrap.servers`` for Kafka clients (confluent-kafka, kcat)."""
        bootstrap = self.cluster.kafka_bootstrap
        assert bootstrap is not None, "this cluster has no Kafka listener"
        return bootstrap

    def broker_pid(self, broker_id: int) -> int | None:
        return self.cluster.broker_pid(broker_id)

    def start_broker(self, broker_id: int) -> None:
        self.cluster.start_broker(broker_id, timeout=SLOW_MACHINE_S)

    def stop_broker(self, broker_id: int) -> None:
        self.cluster.stop_broker(broker_id)

    def kill_broker(self, broker_id: int) -> None:
        self.cluster.kill_broker(broker_id)

    def pause_broker(self, broker_id: int) -> None:
        self.cluster.pause_broker(broker_id)

    def resume_broker(self, broker_id: int) -> None:
        self.cluster.resume_broker(broker_id)

    @property
    def ensemble(self) -> ZkEnsemble:
        return self.cluster.ensemble

    def zookeeper_ids(self) -> list[int]:
        return sorted(self.cluster.ensemble.nodes)

    def kill_zookeeper(self, node_id: int) -> None:
        self.cluster.ensemble.kill_node(node_id)

    def start_zookeeper(self, node_id: int) -> None:
        self.cluster.ensemble.start_node(node_id)

    def zookeeper_leader(self) -> int | None:
        return self.cluster.ensemble.leader_id()

    def zk_client(self) -> ZkClient:
        """A ZooKeeper session in the cluster's chroot, closed at teardown."""
        client = self.cluster.zk_client()
        self._clients.append(client)
        return client

    def close(self) -> None:
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.close()
        for broker_id in self.broker_ids():
            self.resume_broker_quietly(broker_id)
        self.cluster.down()

    def resume_broker_quietly(self, broker_id: int) -> None:
        with contextlib.suppress(Exception):
            self.cluster.resume_broker(broker_id)


def shared_cluster(ensemble: ZkEnsemble, workdir: Path, name: str, brokers: int,
                   broker_args: Sequence[str] = ()) -> LocalProcessBackend:
    """A running cluster of ``brokers`` on the suite's ZooKeeper ensemble, under a chroot of its own, for a module-
    or session-scoped fixture to share (the fixture closes it)."""
    from tests.conftest import SESSION_TIMEOUT_MS
    from tests.harness.ports import free_port_block

    cluster = LocalCluster(workdir, brokers=brokers, base_port=free_port_block(brokers),
                           session_timeout_ms=SESSION_TIMEOUT_MS, chroot=f"/{name}-{uuid.uuid4().hex[:8]}",
                           ensemble=ensemble, broker_args=list(broker_args))
    return LocalProcessBackend(cluster).up()
