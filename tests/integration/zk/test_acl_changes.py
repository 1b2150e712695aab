"""ACL change notifications are purged once old (Kafka removes them after 15 minutes), on a real ensemble."""

from __future__ import annotations

import time

from odradek_local.zookeeper import ZkEnsemble
from zk.acls import AclEntry, AclStore
from zk.client import ZkClient


def test_old_acl_change_notifications_are_purged_and_new_ones_kept(zk_ensemble: ZkEnsemble) -> None:
    zk = ZkClient(zk_ensemble.connect_string(f"/acl-purge-{time.time_ns()}"))
    zk.start()
    try:
        store = AclStore(zk)
        alice = AclEntry("User:alice", "Allow", "Read", "*")
        for name in ("a", "b", "c"):
            store.change("Topic", name, "LITERAL", add=[alice])
        store.change("Topic", "p-", "PREFIXED", add=[alice])
        assert len(store.changes()) == 4
        assert store.purge_changes() == 0  # all younger than 15 minutes: kept for brokers still reading them
        assert len(store.changes()) == 4
        later = time.time_ns() // 1_000_000 + 16 * 60 * 1000
        assert store.purge_changes(now_ms=later) == 4
        assert store.changes() == []
        assert store.get("Topic", "a") == {alice}  # the ACLs themselves stay
    finally:
        zk.close()
