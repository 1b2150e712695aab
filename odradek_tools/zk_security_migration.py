"""``odradek zookeeper-security-migration``: Kafka's zookeeper-security-migration.sh for an existing cluster.

``--zookeeper.acl secure`` walks every znode under the cluster's chroot and sets the secure ACLs (the digest
identity from $ODRADEK_ZK_DIGEST may do anything, the world may only read, and the sensitive roots are not
world-readable: zk/acls.py); ``unsecure`` opens them again. Kafka's order applies: restart the brokers with
--zk-digest first, then with --zk-set-acl true, then run this, so every node, old or new, ends up secured.
"""

from __future__ import annotations

import argparse
import os

from odradek_tools import common
from odradek_tools.common import ToolError

PROG = "odradek-zookeeper-security-migration.sh"


def build_parser() -> argparse.ArgumentParser:
    p = common.parser(PROG, "Set (secure) or clear (unsecure) ZooKeeper ACLs on every znode of the cluster.")
    p.add_argument("--zookeeper.acl", dest="acl", required=True, choices=("secure", "unsecure"))
    p.add_argument("--zookeeper.connect", "--zookeeper", dest="connect", required=True,
                   metavar="HOST:PORT[/chroot]")
    p.add_argument("--command-timeout-ms", type=int, default=30_000)
    return p


def _main(argv: list[str]) -> int:
    from zk.acls import digest_auth, migrate

    args = build_parser().parse_args(argv)
    digest = os.environ.get("ODRADEK_ZK_DIGEST")
    if not digest:
        raise ToolError("set ODRADEK_ZK_DIGEST=USER:PASSWORD (the brokers' ZooKeeper identity)")
    _, user, password = digest_auth(digest)
    with common.zk_session(args.connect, args.command_timeout_ms) as zk:
        count = migrate(zk, args.acl, user, password)
    print(f"Set {args.acl} ACLs on {count} znodes under {args.connect}.")
    return 0


def main(argv: list[str]) -> int:
    return common.run(_main, argv)
