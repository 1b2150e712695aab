"""The ensemble probe's parsing (zk/ensemble.py): connect strings and ``srvr`` answers, as ZooKeeper 3.x writes
them, including a server that is up but not serving and one that refuses the word."""

from __future__ import annotations

from zk.ensemble import ServerStatus, parse_srvr, servers_of

LEADER = """Zookeeper version: 3.8.4-9316c2a7a97e1666d8f4593f34dd6fc36ecc436c, built on 2024-02-12 22:16 UTC
Latency min/avg/max: 0/0.3548/12
Received: 2418
Sent: 2417
Connections: 4
Outstanding: 0
Zxid: 0x10000012e
Mode: leader
Node count: 161
Proposal sizes last/min/max: 92/32/1180
"""


def test_connect_strings_name_each_server_with_the_default_port() -> None:
    assert servers_of("a:2181,b:2182/odradek/chroot") == [("a", 2181), ("b", 2182)]
    assert servers_of("zk1, zk2:3000") == [("zk1", 2181), ("zk2", 3000)]
    assert servers_of("[::1]:2181") == [("::1", 2181)]


def test_a_srvr_answer_gives_mode_zxid_and_load() -> None:
    assert parse_srvr("a:2181", LEADER) == ServerStatus("a:2181", mode="leader", zxid="0x10000012e", connections=4,
                                                        outstanding=0, latency_ms="0/0.3548/12",
                                                        version="3.8.4-9316c2a7a97e1666d8f4593f34dd6fc36ecc436c")


def test_a_server_not_serving_or_refusing_the_word_is_an_error_not_a_mode() -> None:
    down = parse_srvr("b:2181", "This ZooKeeper instance is not currently serving requests\n")
    assert down.mode is None and down.error == "This ZooKeeper instance is not currently serving requests"
    refused = parse_srvr("c:2181", "srvr is not executed because it is not in the whitelist.\n")
    assert refused.mode is None and refused.error is not None and "whitelist" in refused.error
    assert parse_srvr("d:2181", "").error == "no answer"
