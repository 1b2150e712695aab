"""What the reassignment tool needs from the cluster, over the brokers' HTTP API or over ZooKeeper directly.

Why two: Kafka's tool took ``--zookeeper`` until 2.5 and ``--bootstrap-server`` after; an operator may use
either. Both give the same answers; config writes reuse the configs tool's verbs (odradek_tools/configs.py), so
the throttle goes through the same validation and change notifications as ``odradek-configs.sh``. Replica sizes
(for progress) always come from the brokers' ``/admin/log_dirs``, as Kafka's DescribeLogDirs.
"""

from __future__ import annotations

import argparse
from typing import Any, Protocol

from odradek.client.admin import AdminClient
from odradek.protocol.errors import OdradekError
from odradek_tools import common, configs
from odradek_tools.common import ToolError

TP = tuple[str, int]


class Cluster(Protocol):
    def __enter__(self) -> Cluster: ...
    def __exit__(self, *exc: object) -> None: ...
    def brokers(self) -> dict[int, tuple[str, str | None]]: ...
    def assignment(self, topics: list[str]) -> dict[TP, list[int]]: ...
    def states(self, topics: list[str]) -> dict[TP, tuple[int, list[int]]]: ...
    def ongoing(self) -> dict[TP, list[int]]: ...
    def submit(self, moves: dict[TP, list[int]], *, additional: bool) -> bool: ...
    def cancel(self, tps: list[TP]) -> list[TP]: ...
    def set_topic_configs(self, topic: str, config: dict[str, str]) -> None: ...
    def delete_topic_configs(self, topic: str, keys: list[str]) -> None: ...
    def set_broker_configs(self, broker: int, config: dict[str, str]) -> None: ...
    def delete_broker_configs(self, broker: int, keys: list[str]) -> None: ...
    def log_sizes(self, broker: int) -> dict[TP, int] | None: ...


class _Base:
    """Shared: log sizes from a broker's ``/admin/log_dirs`` (None when it does not answer)."""

    _timeout_ms: int

    def brokers(self) -> dict[int, tuple[str, str | None]]:
        raise NotImplementedError

    def log_sizes(self, broker: int) -> dict[TP, int] | None:
        url = self.brokers().get(broker, (None, None))[0]
        if url is None:
            return None
        try:
            with AdminClient(url, request_timeout_ms=min(self._timeout_ms, 5000)) as one:
                body = one.request_json("GET", "/admin/log_dirs")
        except OdradekError:
            return None
        return {(r["topic"], int(r["partition"])): int(r["size"]) for d in body.get("log_dirs") or ()
                for r in d.get("replicas") or ()}

    def __enter__(self) -> Any:
        return self


class HttpCluster(_Base):
    def __init__(self, client: AdminClient, timeout_ms: int) -> None:
        self._client = client
        self._timeout_ms = timeout_ms

    @classmethod
    def open(cls, args: argparse.Namespace) -> HttpCluster:
        return cls(common.admin(args), args.command_timeout_ms)

    def __exit__(self, *exc: object) -> None:
        self._client.close()

    def _metadata(self, topics: list[str] | None = None) -> dict[str, Any]:
        query = {"topics": ",".join(topics)} if topics else None
        return dict(self._client.request_json("GET", "/metadata", query=query))

    def brokers(self) -> dict[int, tuple[str, str | None]]:
        return {int(b["id"]): (str(b["url"]), b.get("rack")) for b in self._metadata([]).get("brokers") or ()}

    def _partitions(self, topics: list[str]) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for t in self._metadata(topics).get("topics") or ():
            if t.get("error") or not t.get("partitions"):
                raise ToolError(f"Topic '{t.get('name')}' does not exist")
            out += [(t["name"], p) for p in t["partitions"]]
        return out

    def assignment(self, topics: list[str]) -> dict[TP, list[int]]:
        return {(t, int(p["partition"])): [int(r) for r in p["replicas"]] for t, p in self._partitions(topics)}

    def states(self, topics: list[str]) -> dict[TP, tuple[int, list[int]]]:
        return {(t, int(p["partition"])): (int(p["leader"]), [int(r) for r in p["isr"]])
                for t, p in self._partitions(topics)}

    def ongoing(self) -> dict[TP, list[int]]:
        body = self._client.request_json("GET", "/admin/reassign_partitions")
        return {(p["topic"], int(p["partition"])): list(p["replicas"]) for p in body.get("partitions") or ()}

    def submit(self, moves: dict[TP, list[int]], *, additional: bool) -> bool:
        body = {"version": 1, "additional": additional,
                "partitions": [{"topic": t, "partition": p, "replicas": r} for (t, p), r in sorted(moves.items())]}
        try:
            self._client.request_json("POST", "/admin/reassign_partitions", body)
            return True
        except OdradekError as e:
            if e.details.get("status") == 409 or "existing assignment" in e.message:
                return False
            raise

    def cancel(self, tps: list[TP]) -> list[TP]:
        body = {"partitions": [{"topic": t, "partition": p} for t, p in sorted(tps)]}
        got = self._client.request_json("POST", "/admin/reassign_partitions/cancel", body)
        return [(name.rsplit("-", 1)[0], int(name.rsplit("-", 1)[1])) for name in got.get("cancelled") or ()]

    def _present(self, entity_type: str, name: str, keys: list[str]) -> list[str]:
        have = {e["name"] for e in configs.http_describe_entries(self._client, entity_type, name, False)}
        return [k for k in keys if k in have]

    def set_topic_configs(self, topic: str, config: dict[str, str]) -> None:
        configs.http_alter(self._client, "topics", topic, config, [])

    def delete_topic_configs(self, topic: str, keys: list[str]) -> None:
        present = self._present("topics", topic, keys)
        if present:
            configs.http_alter(self._client, "topics", topic, {}, present)

    def set_broker_configs(self, broker: int, config: dict[str, str]) -> None:
        configs.http_alter(self._client, "brokers", str(broker), config, [])

    def delete_broker_configs(self, broker: int, keys: list[str]) -> None:
        present = self._present("brokers", str(broker), keys)
        if present:
            configs.http_alter(self._client, "brokers", str(broker), {}, present)


class ZkCluster(_Base):
    def __init__(self, zk: Any, timeout_ms: int) -> None:
        self._zk = zk
        self._timeout_ms = timeout_ms

    @classmethod
    def open(cls, args: argparse.Namespace) -> ZkCluster:
        from zk.configs import open_admin_session

        return cls(open_admin_session(args.zookeeper, max(1.0, args.command_timeout_ms / 1000)),
                   args.command_timeout_ms)

    def __exit__(self, *exc: object) -> None:
        self._zk.close()

    def brokers(self) -> dict[int, tuple[str, str | None]]:
        return {b: (info.url, info.rack) for b, info in self._zk.get_brokers().items()}

    def assignment(self, topics: list[str]) -> dict[TP, list[int]]:
        out: dict[TP, list[int]] = {}
        for topic in topics:
            got = self._zk.get_topic_assignment(topic)
            if got is None:
                raise ToolError(f"Topic '{topic}' does not exist")
            out.update({(topic, p): list(r) for p, r in sorted(got.partitions.items())})
        return out

    def states(self, topics: list[str]) -> dict[TP, tuple[int, list[int]]]:
        got = self._zk.get_partition_states(list(self.assignment(topics)))
        return {(tp[0], tp[1]): (s[0].leader, list(s[0].isr)) for tp, s in got.items() if s is not None}

    def ongoing(self) -> dict[TP, list[int]]:
        return {(tp.topic, tp.partition): r for tp, r in (self._zk.get_reassignment() or {}).items()}

    def submit(self, moves: dict[TP, list[int]], *, additional: bool) -> bool:
        from odradek.protocol.model import TopicPartition

        return bool(self._zk.request_reassignment({TopicPartition(*tp): r for tp, r in moves.items()},
                                                  merge=additional))

    def cancel(self, tps: list[TP]) -> list[TP]:
        from odradek.protocol.model import TopicPartition

        ongoing = self.ongoing()
        moves = {}
        for tp in tps:
            assignment = self._zk.get_topic_assignment(tp[0]) if tp in ongoing else None
            if assignment is not None and tp[1] in assignment.partitions:
                adding = assignment.adding_replicas.get(tp[1], [])
                moves[TopicPartition(*tp)] = [r for r in assignment.partitions[tp[1]] if r not in adding]
        if moves:
            self._zk.request_reassignment(moves, merge=True)
        return [(tp.topic, tp.partition) for tp in moves]

    def set_topic_configs(self, topic: str, config: dict[str, str]) -> None:
        configs.zk_alter(self._zk, "topics", topic, config, [])

    def delete_topic_configs(self, topic: str, keys: list[str]) -> None:
        from broker.admin.topics import TopicAdmin

        present = [k for k in keys if k in TopicAdmin(self._zk).describe_configs(topic)[0]]
        if present:
            configs.zk_alter(self._zk, "topics", topic, {}, present)

    def set_broker_configs(self, broker: int, config: dict[str, str]) -> None:
        configs.zk_alter(self._zk, "brokers", str(broker), config, [])

    def delete_broker_configs(self, broker: int, keys: list[str]) -> None:
        from zk.configs import EntityConfigs

        present = [k for k in keys if k in EntityConfigs(self._zk).describe("brokers", str(broker))]
        if present:
            configs.zk_alter(self._zk, "brokers", str(broker), {}, present)
