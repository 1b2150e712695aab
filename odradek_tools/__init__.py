"""Kafka-style admin tools (``odradek topics|leader-election|consumer-groups|console-producer|console-consumer|
configs``), one module each; ``scripts/odradek-*.sh`` exec them. Each takes Kafka's option names, prints what
Kafka's tool prints, and fails with one line on stderr and a non-zero exit code (see common.py).

Modules are imported only when their tool runs, so ``odradek broker`` does not pay for them.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

# subcommand -> (module, one-line help)
TOOLS: dict[str, tuple[str, str]] = {
    "topics": ("odradek_tools.topics", "create, list, describe, alter and delete topics (kafka-topics)"),
    "leader-election": ("odradek_tools.leader_election",
                        "preferred or unclean leader election (kafka-leader-election)"),
    "consumer-groups": ("odradek_tools.consumer_groups", "list, describe, reset and delete consumer groups"),
    "console-producer": ("odradek_tools.console_producer", "produce lines from stdin (kafka-console-producer)"),
    "console-consumer": ("odradek_tools.console_consumer", "print records to stdout (kafka-console-consumer)"),
    "configs": ("odradek_tools.configs", "describe and alter topic, broker, client and user configs (kafka-configs)"),
    "reassign-partitions": ("odradek_tools.reassign",
                            "move partitions between brokers, with a throttle (kafka-reassign-partitions)"),
    "acls": ("odradek_tools.acls", "add, remove and list ACLs in ZooKeeper (kafka-acls)"),
    "zookeeper-security-migration": ("odradek_tools.zk_security_migration",
                                     "set or clear ZooKeeper ACLs on every znode (zookeeper-security-migration)"),
}


def run_tool(name: str, argv: Sequence[str]) -> int:
    module = importlib.import_module(TOOLS[name][0])
    return int(module.main(list(argv)))
