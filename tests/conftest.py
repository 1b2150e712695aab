"""Shared fixtures: one real ZooKeeper ensemble per test session, and a fresh chroot per cluster.

ZooKeeper runs with tickTime=500 so that brokers can use 1.5 s sessions and failure tests finish quickly. Tests
that break the ensemble itself (killing ZooKeeper nodes) take an ensemble of their own (``private_ensemble``).
Every process a fixture starts is ended by pid at teardown.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.localcluster import LocalCluster
from tests.harness.cluster import LocalProcessBackend
from tests.harness.ports import free_port_block
from zk.ensemble import ZkEnsemble

TICK_MS = 500
SESSION_TIMEOUT_MS = 1500

MakeCluster = Callable[..., LocalProcessBackend]


def _zookeeper_installed() -> bool:
    return Path("/usr/share/java/zookeeper.jar").exists() and shutil.which("java") is not None


def _new_ensemble(base_dir: Path, size: int) -> ZkEnsemble:
    base = free_port_block(size, span=100 + 2 * size)
    return ZkEnsemble(base_dir, size=size, client_port_base=base, peer_port_base=base + 100 - 2 * size,
                      tick_ms=TICK_MS)


@pytest.fixture(scope="session")
def zk_ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZkEnsemble]:
    if not _zookeeper_installed():
        pytest.fail("ZooKeeper is not installed: run `apt-get install -y zookeeper` (see README)")
    ensemble = _new_ensemble(tmp_path_factory.mktemp("zk-session"), 3)
    ensemble.start(timeout=60)
    yield ensemble
    ensemble.stop()


@pytest.fixture
def private_ensemble(tmp_path: Path) -> Iterator[ZkEnsemble]:
    ensemble = _new_ensemble(tmp_path / "zk-private", 3)
    ensemble.start(timeout=60)
    yield ensemble
    ensemble.stop()


@pytest.fixture
def make_cluster(zk_ensemble: ZkEnsemble, tmp_path: Path) -> Iterator[MakeCluster]:
    """``make_cluster(brokers=3, ensemble=None, start=True)``: brokers in a chroot of their own."""
    made: list[LocalProcessBackend] = []

    def _make(brokers: int = 3, ensemble: ZkEnsemble | None = None, start: bool = True,
              broker_args: list[str] | None = None,
              session_timeout_ms: int = SESSION_TIMEOUT_MS) -> LocalProcessBackend:
        cluster = LocalCluster(
            tmp_path / f"cluster-{len(made)}",
            brokers=brokers,
            base_port=free_port_block(brokers),
            session_timeout_ms=session_timeout_ms,
            chroot=f"/odradek-test-{uuid.uuid4().hex[:10]}",
            ensemble=ensemble or zk_ensemble,
            broker_args=broker_args,
        )
        backend = LocalProcessBackend(cluster)
        made.append(backend)
        if start:
            backend.up()
        return backend

    yield _make
    for backend in made:
        backend.close()
