"""Every route the broker serves declares what it needs, and the table names no route that does not exist."""

from __future__ import annotations

from broker.api.app import route_table
from broker.security import acl_table


def test_every_route_has_a_rule() -> None:
    missing = [(m, p) for m, p in route_table() if acl_table.lookup(m, p) is None]
    assert not missing, f"routes without an authorization rule in broker/security/acl_table.py: {missing}"


def test_no_rule_for_a_route_that_does_not_exist() -> None:
    served = {(m, acl_table.canonical(p)) for m, p in route_table()}
    stale = [key for key in acl_table.TABLE if (key[0], acl_table.canonical(key[1])) not in served]
    assert not stale, f"rules for routes the broker does not serve: {stale}"


def test_inter_broker_routes_need_cluster_action() -> None:
    for method, path in [("POST", "/controller/controlled_shutdown"), ("POST", "/admin/preferred_leader_election"),
                         ("GET", "/topics/{topic}/partitions/{partition}/epoch_end_offset")]:
        rule = acl_table.lookup(method, path)
        assert rule is not None and [(n.operation, n.resource_type) for n in rule.needs] == [
            ("ClusterAction", "Cluster")]


def _batch_head(producer_id: int, attributes: int = 0) -> bytes:
    head = bytearray(61)
    head[16] = 2  # magic
    head[21:23] = attributes.to_bytes(2, "big")
    head[43:51] = producer_id.to_bytes(8, "big", signed=True)
    return bytes(head)


def test_idempotent_batches_need_idempotent_write() -> None:
    rule = acl_table.lookup("POST", "/topics/{topic}/partitions/{partition}/batches")
    assert rule is not None
    need = next(n for n in rule.needs if n.operation == "IdempotentWrite")
    names = [need.names(None, acl_table.Body(raw)) for raw in  # type: ignore[arg-type]
             (_batch_head(-1), _batch_head(7), _batch_head(7, attributes=0x10), b"short")]
    assert names == [[], ["kafka-cluster"], [], []]
