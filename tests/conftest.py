"""Shared fixtures: one real ZooKeeper ensemble per test session, and a fresh chroot per cluster.

ZooKeeper runs with tickTime=500 so that brokers can use short (3 s) sessions and failure tests finish quickly. Tests
that break the ensemble itself (killing ZooKeeper nodes) take an ensemble of their own (``private_ensemble``).
Every process a fixture starts is ended by pid at teardown.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek_local.cluster import PORT_SHARE_ENV, LocalCluster
from odradek_local.zookeeper import ZkEnsemble
from tests.harness.cluster import ClusterBackend, LocalProcessBackend
from tests.harness.ports import free_port_block

TICK_MS = 500
SESSION_TIMEOUT_MS = 3000
"""Brokers' ZooKeeper session in tests. Why not shorter: a broker fences its own leaderships when its event loop
stalls past a third of its session (broker/server.py's pause detector), and a 1.5 s session put that at 0.4 s,
which a loaded 2-core machine reaches; at 3 s it is 0.9 s. Failover tests wait one session per kill."""

MakeCluster = Callable[..., LocalProcessBackend]
MADE_CLUSTERS = pytest.StashKey[list[LocalProcessBackend]]()  # what a test's make_cluster made, for its report


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
def make_cluster(zk_ensemble: ZkEnsemble, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[MakeCluster]:
    """``make_cluster(brokers=3, ensemble=None, start=True)``: brokers in a chroot of their own, each with a REST
    port and a Kafka port of its own."""
    made: list[LocalProcessBackend] = []
    request.node.stash[MADE_CLUSTERS] = made

    def _make(brokers: int = 3, ensemble: ZkEnsemble | None = None, start: bool = True,
              broker_args: list[str] | None = None,
              session_timeout_ms: int = SESSION_TIMEOUT_MS) -> LocalProcessBackend:
        cluster = LocalCluster(
            tmp_path / f"cluster-{len(made)}",
            brokers=brokers,
            base_port=free_port_block(brokers),
            kafka_base_port=free_port_block(brokers),
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


# ------------------------------------------------------------------------------------ backends (local | containers)
#
# Tests marked ``backend`` take their cluster from ``make_backend_cluster`` and so run on either backend: local
# processes (the default) or containers of the images in docker/ through testcontainers. The backend comes from
# ``--backend`` or ODRADEK_TEST_BACKEND. Asking for containers where no Docker engine answers skips those tests
# with the reason in the summary and one loud line at the end: never a silent pass.

BACKENDS = ("local", "containers")
_containers_skipped: list[str] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--backend", choices=BACKENDS, default=os.environ.get("ODRADEK_TEST_BACKEND", "local"),
                     help="cluster backend of the tests marked `backend` (default: $ODRADEK_TEST_BACKEND or local)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "backend: runs on the backend --backend / ODRADEK_TEST_BACKEND picks")
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # pytest-xdist's gw0, gw1, ... (scripts/test.sh runs two)
    if worker:  # each worker's servers, and the processes it starts, pick ports from a slice of their own
        os.environ[PORT_SHARE_ENV] = f"{int(worker.removeprefix('gw'))}/{os.environ['PYTEST_XDIST_WORKER_COUNT']}"


LOG_TAIL_LINES = 40


def _clusters_of(item: pytest.Item) -> list[LocalCluster]:
    """The local clusters a test was handed (directly, or inside a backend or a fixture's bundle)."""
    found: list[LocalCluster] = []
    for value in [*getattr(item, "funcargs", {}).values(), *item.stash.get(MADE_CLUSTERS, [])]:
        cluster = value if isinstance(value, LocalCluster) else getattr(value, "cluster", None)
        if isinstance(cluster, LocalCluster) and cluster not in found:
            found.append(cluster)
    return found


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report carries the tail of each of its brokers' logs: a failure seen only under CI's
    load can then be read from CI's output, after the test's directories are gone."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    for cluster in _clusters_of(item):
        for broker_id, slot in sorted(cluster.slots.items()):
            try:
                lines = slot.log_path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
            except OSError:
                continue
            report.sections.append((f"broker {broker_id} log ({cluster.data_dir.name}, last {len(lines)} lines)",
                                    "\n".join(lines)))


def pytest_report_header(config: pytest.Config) -> str:
    return f"odradek cluster backend: {config.getoption('--backend')}"


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if _containers_skipped:
        terminalreporter.write_line(
            f"######## CONTAINERS BACKEND DID NOT RUN (its tests were skipped): {_containers_skipped[0]} ########",
            red=True, bold=True)


@pytest.fixture(scope="session")
def cluster_backend(request: pytest.FixtureRequest) -> str:
    """The backend's name; skips (loudly) when the containers backend was asked for and cannot run."""
    name = request.config.getoption("--backend")
    if name == "containers":
        _require_docker()
    return name


def _require_docker() -> None:
    from tests.harness.containers import docker_problem

    problem = docker_problem()
    if problem is not None:
        _containers_skipped.append(problem)
        pytest.skip(f"containers backend: {problem}")


@pytest.fixture(scope="session")
def container_ensemble(cluster_backend: str) -> Iterator[Any]:
    """One ZooKeeper ensemble in containers per test session (brokers of each test use a chroot of their own)."""
    from tests.harness.containers import ContainerEnsemble

    ensemble = ContainerEnsemble(size=3, tick_ms=TICK_MS).start()
    yield ensemble
    ensemble.stop()


@pytest.fixture
def make_backend_cluster(cluster_backend: str, request: pytest.FixtureRequest,
                         tmp_path: Path) -> Iterator[Callable[..., ClusterBackend]]:
    """``make_backend_cluster(brokers=3, broker_args=None, session_timeout_ms=SESSION_TIMEOUT_MS)`` on the
    selected backend."""
    made: list[ClusterBackend] = []

    def _make(brokers: int = 3, broker_args: list[str] | None = None,
              session_timeout_ms: int = SESSION_TIMEOUT_MS) -> ClusterBackend:
        chroot = f"/odradek-test-{uuid.uuid4().hex[:10]}"
        backend: Any
        if cluster_backend == "containers":
            from tests.harness.containers import ContainerClusterBackend

            ensemble = request.getfixturevalue("container_ensemble")
            backend = ContainerClusterBackend(ensemble, brokers=brokers, chroot=chroot,
                                              session_timeout_ms=session_timeout_ms, broker_args=broker_args)
        else:
            ensemble = request.getfixturevalue("zk_ensemble")
            backend = LocalProcessBackend(LocalCluster(
                tmp_path / f"cluster-{len(made)}", brokers=brokers, base_port=free_port_block(brokers),
                kafka_base_port=free_port_block(brokers), session_timeout_ms=session_timeout_ms, chroot=chroot,
                ensemble=ensemble, broker_args=broker_args))
        made.append(backend)
        try:
            backend.up()
        except BaseException:
            backend.close()
            made.remove(backend)
            raise
        return backend

    yield _make
    for backend in made:
        backend.close()


@pytest.fixture
def docker_engine() -> None:
    """For tests of the images themselves (marker ``docker``): skip loudly when no engine or image is there."""
    _require_docker()
