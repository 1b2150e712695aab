"""ZkEnsemble's pure parts: its layout, generated config, connect string and install checks (no JVM started).

The tests that start ZooKeeper JVMs live in tests/integration/zk/test_ensemble.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek_local.zookeeper import ZkEnsemble, ZooKeeperNotInstalledError, parse_mode


def test_missing_install_names_the_package_to_install(tmp_path: Path) -> None:
    missing_jar = tmp_path / "zookeeper.jar"
    ens = ZkEnsemble(tmp_path / "a", size=1, zookeeper_jar=missing_jar)
    with pytest.raises(ZooKeeperNotInstalledError) as err:
        ens.start()
    assert str(missing_jar) in str(err.value)
    assert "sudo apt-get install -y zookeeper" in str(err.value)
    assert isinstance(err.value, RuntimeError)

    no_java = ZkEnsemble(tmp_path / "b", size=1, java=str(tmp_path / "no-java"))
    with pytest.raises(ZooKeeperNotInstalledError, match="apt-get install -y default-jre-headless"):
        no_java.start_node(1)
    assert not (tmp_path / "a" / "ensemble.json").exists()


def test_layout_config_and_connect_string(tmp_path: Path) -> None:
    ens = ZkEnsemble(tmp_path, size=3, client_port_base=30181, peer_port_base=30300, tick_ms=500)
    assert [n.client_port for n in ens.nodes.values()] == [30181, 30182, 30183]
    cfg = ens.config_text(2)
    for line in (
        "tickTime=500", "clientPort=30182", "clientPortAddress=127.0.0.1", "admin.enableServer=false",
        "maxClientCnxns=0", f"dataDir={tmp_path / 'zk2' / 'data'}",
        "server.1=127.0.0.1:30300:30301", "server.3=127.0.0.1:30304:30305",
    ):
        assert line in cfg.splitlines()
    assert ens.connect_string() == "127.0.0.1:30181,127.0.0.1:30182,127.0.0.1:30183"
    assert ens.connect_string("/odradek/") == "127.0.0.1:30181,127.0.0.1:30182,127.0.0.1:30183/odradek"


def test_parse_mode() -> None:
    srvr = "Zookeeper version: 3.8.0\nLatency min/avg/max: 0/0.0/0\nMode: follower\nNode count: 5\n"
    assert parse_mode(srvr) == "follower"
    assert parse_mode("This ZooKeeper instance is not currently serving requests\n") is None
    assert parse_mode("") is None
