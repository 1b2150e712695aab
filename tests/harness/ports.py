"""Port blocks for tests: every server binds 127.0.0.1 on ports nobody else uses in this run.

The allocator is the local launcher's (``odradek_local.cluster.free_port_block``): one table of ports handed out
per process, shared with clusters that pick their own Kafka ports, so a test's REST, Kafka and ZooKeeper ports
never collide with another cluster's. Ports come from below the kernel's ephemeral range.
"""

from __future__ import annotations

from odradek_local.cluster import free_port_block

__all__ = ["free_port_block"]
