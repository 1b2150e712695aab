"""Run one ZooKeeper node of an ensemble in the foreground (``python -m odradek_local.zk_serve --id 2 --size 3``).

For containers (docker-compose.yml, testcontainers): the node's config comes from the same ``ZkEnsemble``
layout as local clusters, and the JVM replaces this process (exec), so the container's signals reach it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from odradek_local.zookeeper import ZkEnsemble, ZooKeeperNotInstalledError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m odradek_local.zk_serve")
    ap.add_argument("--id", type=int, required=True)
    ap.add_argument("--size", type=int, default=3)
    ap.add_argument("--client-port-base", type=int, default=2181)
    ap.add_argument("--tick-ms", type=int, default=2000)
    ap.add_argument("--heap-mb", type=int, default=128)
    ap.add_argument("--dir", type=Path, required=True)
    args = ap.parse_args(argv)
    ensemble = ZkEnsemble(args.dir, size=args.size, client_port_base=args.client_port_base,
                          tick_ms=args.tick_ms, heap_mb=args.heap_mb)
    if args.id not in ensemble.nodes:
        print(f"odradek_local.zk_serve: --id must be 1..{args.size}", file=sys.stderr)
        return 2
    try:
        command = ensemble.command(args.id)
    except ZooKeeperNotInstalledError as e:
        print(f"odradek_local.zk_serve: {e}", file=sys.stderr)
        return 2
    ensemble.write_config(args.id)
    os.execv(command[0], command)


if __name__ == "__main__":
    sys.exit(main())
