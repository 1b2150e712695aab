"""The foundation against real ZooKeeper and real broker processes: registration, controller election and
fencing, duplicate ids, ZooKeeper node loss, session expiry."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from typing import Any

import pytest

from odradek.protocol.errors import ControllerMovedError
from odradek.protocol.model import LeaderAndIsr
from odradek_local.zookeeper import ZkEnsemble
from tests.conftest import SESSION_TIMEOUT_MS, MakeCluster
from tests.harness.cluster import LocalProcessBackend
from tests.harness.ports import free_port_block
from tests.harness.wait import SLOW_MACHINE_S, wait_until
from zk.client import ControllerClaim

pytestmark = pytest.mark.cluster

# A crashed broker's session ends within the timeout plus a tick or two of ZooKeeper's expiry check on a healthy
# machine; the waits below allow SLOW_MACHINE_S, since what they check is that it ends, not how soon.
# An HTTP answer from a live broker: generous, since a missed answer would read as a broker that is not there.
HTTP_TIMEOUT_S = 30


def health(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/health", timeout=HTTP_TIMEOUT_S) as resp:
        return json.loads(resp.read())


def controllers_by_health(cluster: LocalProcessBackend) -> list[int]:
    out = []
    for b in cluster.broker_ids():
        if cluster.broker_pid(b) is None:
            continue
        try:
            if health(cluster.broker_url(b))["is_controller"]:
                out.append(b)
        except OSError:
            pass
    return out


def test_registration_appears_and_goes_after_sigkill(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=2)
    zk = cluster.zk_client()
    assert zk.get_broker_ids() == [1, 2]
    info = zk.get_broker(2)
    assert info is not None and info.url == cluster.broker_url(2) and info.epoch > 0
    assert health(cluster.broker_url(2))["broker_epoch"] == info.epoch

    killed_at = time.monotonic()
    cluster.kill_broker(2)
    wait_until(lambda: zk.get_broker_ids() == [1], SLOW_MACHINE_S, "broker 2's registration to expire")
    assert time.monotonic() - killed_at >= SESSION_TIMEOUT_MS / 1000 * 0.5  # it went by expiry, not at once

    cluster.stop_broker(1)  # SIGTERM deregisters at once
    assert zk.get_broker_ids() == []


def test_one_controller_and_fenced_failover(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=3)
    zk = cluster.zk_client()
    controller = wait_until(zk.get_controller, SLOW_MACHINE_S, "a controller")
    wait_until(lambda: controllers_by_health(cluster) == [controller], SLOW_MACHINE_S,
               "health to agree on the controller")
    for b in cluster.broker_ids():
        assert health(cluster.broker_url(b))["controller_id"] == controller

    epoch_before, version_before = zk.get_controller_epoch()
    deposed = ControllerClaim(int(controller), epoch_before, version_before)
    cluster.kill_broker(int(controller))

    new_controller = wait_until(
        lambda: (c := zk.get_controller()) is not None and c != controller and c, SLOW_MACHINE_S, "a new controller"
    )
    epoch_after, _ = zk.get_controller_epoch()
    assert epoch_after == epoch_before + 1
    wait_until(lambda: controllers_by_health(cluster) == [new_controller], SLOW_MACHINE_S,
               "exactly one live controller")

    # The deposed controller's claim no longer fences anything in: its writes fail.
    with pytest.raises(ControllerMovedError):
        zk.create_partition_states(deposed, "fenced-topic", {0: LeaderAndIsr(1, 0, [1], epoch_before)})
    assert zk.get_partition_state("fenced-topic", 0) is None

    # A clean shutdown hands over at once, with exactly one more epoch.
    cluster.stop_broker(int(new_controller))
    third = wait_until(
        lambda: (c := zk.get_controller()) not in (None, controller, new_controller) and c, SLOW_MACHINE_S,
        "a third controller"
    )
    assert zk.get_controller_epoch()[0] == epoch_before + 2
    wait_until(lambda: controllers_by_health(cluster) == [third], SLOW_MACHINE_S, "health to name the third controller")


def test_duplicate_broker_id_is_refused(make_cluster: MakeCluster, tmp_path: Any) -> None:
    cluster = make_cluster(brokers=1)
    port = free_port_block(1)
    proc = subprocess.run(
        [sys.executable, "-m", "odradek_tools", "broker", "--id", "1", "--zk", cluster.zk_connect,
         "--listen", f"127.0.0.1:{port}", "--data-dir", str(tmp_path / "dup")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "broker id 1 is already registered by live ZooKeeper session" in proc.stdout
    assert cluster.broker_url(1) in proc.stdout
    # the original broker is untouched
    assert health(cluster.broker_url(1))["broker_epoch"] == cluster.zk_client().get_broker(1).epoch  # type: ignore[union-attr]


def test_losing_zookeeper_nodes_including_the_leader_keeps_the_cluster_working(
    private_ensemble: ZkEnsemble, make_cluster: MakeCluster  # this order: the ensemble outlives the brokers
) -> None:
    cluster = make_cluster(brokers=2, ensemble=private_ensemble)
    zk = cluster.zk_client()
    wait_until(zk.get_controller, SLOW_MACHINE_S, "a controller")

    leader = private_ensemble.leader_id()
    assert leader is not None
    cluster.kill_zookeeper(leader)
    private_ensemble.wait_leader(timeout=SLOW_MACHINE_S, not_id=leader)

    # the cluster still works: a controller is known and a new broker can register
    assert wait_until(zk.get_controller, SLOW_MACHINE_S, "a controller after losing the ZooKeeper leader")
    cluster.cluster.add_broker(3, free_port_block(1))
    cluster.start_broker(3)
    assert 3 in zk.get_broker_ids()
    assert health(cluster.broker_url(3))["controller_id"] == zk.get_controller()
    # both original brokers kept their sessions through the ZooKeeper failover
    assert all(health(cluster.broker_url(b))["status"] == "ok" for b in (1, 2))

    cluster.start_zookeeper(leader)
    private_ensemble.wait_ready(timeout=SLOW_MACHINE_S)


def test_expired_session_reregisters_and_gives_up_controller(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=2)
    zk = cluster.zk_client()
    controller = int(wait_until(zk.get_controller, SLOW_MACHINE_S, "a controller"))  # type: ignore[arg-type]
    other = 1 if controller == 2 else 2
    old_epoch = zk.get_broker(controller).epoch  # type: ignore[union-attr]
    old_controller_epoch = zk.get_controller_epoch()[0]

    cluster.pause_broker(controller)  # SIGSTOP: its session expires while it cannot heartbeat
    try:
        wait_until(lambda: zk.get_controller() == other, SLOW_MACHINE_S, "the other broker to take over")
    finally:
        cluster.resume_broker(controller)

    def reregistered() -> bool:
        info = zk.get_broker(controller)
        return info is not None and info.epoch != old_epoch

    wait_until(reregistered, SLOW_MACHINE_S, "the expired broker to register again with a new session")
    h = wait_until(lambda: (h := health(cluster.broker_url(controller)))["broker_epoch"] != old_epoch and h,
                   SLOW_MACHINE_S, "the broker to report its new session")
    assert h["is_controller"] is False and h["controller_id"] == other  # type: ignore[index]
    assert zk.get_controller() == other
    assert zk.get_controller_epoch()[0] == old_controller_epoch + 1
    assert controllers_by_health(cluster) == [other]
