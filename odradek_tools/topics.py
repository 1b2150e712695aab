"""``odradek topics`` (scripts/odradek-topics.sh): Kafka's kafka-topics.sh over the brokers' HTTP API.

Output follows kafka.admin.TopicCommand of Kafka 2.8 (see kafka-classic.md section 7.1), so scripts written
against Kafka's tool keep working: ``Created topic T.``, one name per line for --list, and for --describe a topic
line ``Topic: T<TAB>TopicId: ..<TAB>PartitionCount: N<TAB>ReplicationFactor: R<TAB>Configs: k=v,..`` (overrides
only) followed by ``<TAB>Topic: T<TAB>Partition: p<TAB>Leader: L|none<TAB>Replicas: 1,2,3<TAB>Isr: 1,2``. With a
partition filter (--under-replicated-partitions and friends) only matching partition lines print. ``--topic``
is a regex matched against whole names, except with --create.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from odradek.client.admin import AdminClient
from odradek.protocol.errors import TopicAlreadyExistsError, UnknownTopicError
from odradek_tools import common
from odradek_tools.common import ToolError

PROG = "odradek-topics.sh"
ACTIONS = ("create", "list", "describe", "alter", "delete")
FILTERS = ("under_replicated_partitions", "unavailable_partitions", "under_min_isr_partitions",
           "at_min_isr_partitions")


@dataclass(frozen=True)
class PartitionView:
    partition: int
    leader: int  # -1: none
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class TopicView:
    name: str
    topic_id: str | None
    partitions: tuple[PartitionView, ...]
    replication_factor: int
    overrides: dict[str, str]
    min_isr: int


def build_parser() -> argparse.ArgumentParser:
    p = common.parser(PROG, "Create, delete, describe, or change a topic.")
    common.add_bootstrap(p)
    for action in ACTIONS:
        p.add_argument(f"--{action}", action="store_true", help=f"{action} topics")
    p.add_argument("--topic", help="the topic (a regular expression, except with --create)")
    p.add_argument("--partitions", type=int, help="partition count (--create, --alter)")
    p.add_argument("--replication-factor", type=int, help="replicas per partition (--create)")
    p.add_argument("--replica-assignment", metavar="B:B,B:B",
                   help="partitions separated by ',', replicas by ':', the preferred leader first")
    p.add_argument("--config", action="append", metavar="K=V", help="a topic config override (repeatable)")
    p.add_argument("--if-not-exists", action="store_true", help="--create: do nothing if the topic exists")
    p.add_argument("--if-exists", action="store_true", help="--alter/--describe/--delete: only if it exists")
    p.add_argument("--under-replicated-partitions", action="store_true", help="--describe: ISR smaller than RF")
    p.add_argument("--unavailable-partitions", action="store_true", help="--describe: no live leader")
    p.add_argument("--under-min-isr-partitions", action="store_true", help="--describe: ISR below min.insync")
    p.add_argument("--at-min-isr-partitions", action="store_true", help="--describe: ISR at min.insync.replicas")
    p.add_argument("--topics-with-overrides", action="store_true", help="--describe: only topics with overrides")
    p.add_argument("--exclude-internal", action="store_true", help="accepted for Kafka compatibility")
    return p


def parse_replica_assignment(text: str) -> dict[int, list[int]]:
    """``1:2:3,2:3:1`` -> {0: [1,2,3], 1: [2,3,1]}, with Kafka's checks (same count, no duplicates)."""
    out: dict[int, list[int]] = {}
    for p, part in enumerate(text.split(",")):
        try:
            brokers = [int(b.strip()) for b in part.split(":")]
        except ValueError:
            raise ToolError(f"Invalid --replica-assignment '{text}': broker ids must be integers") from None
        if any(b < 0 for b in brokers):
            raise ToolError(f"Invalid --replica-assignment '{text}': broker ids must be non-negative")
        if len(set(brokers)) != len(brokers):
            raise ToolError(f"Partition replica lists may not contain duplicate entries: partition {p} has "
                            f"{','.join(map(str, brokers))}")
        if out and len(brokers) != len(out[0]):
            raise ToolError(f"Partition {p} has different replication factor: {','.join(map(str, brokers))}")
        out[p] = brokers
    return out


def validate(args: argparse.Namespace) -> str:
    common.check_connection(args)
    chosen = [a for a in ACTIONS if getattr(args, a)]
    if len(chosen) != 1:
        raise ToolError("Command must include exactly one action: --list, --describe, --create, --alter or --delete")
    action = chosen[0]
    if action in ("create", "alter", "delete") and not args.topic:
        raise ToolError(f"--topic is required with --{action}")
    if action == "create":
        if args.replica_assignment and (args.partitions is not None or args.replication_factor is not None):
            raise ToolError("Option --replica-assignment can't be used with --partitions or --replication-factor")
        if args.partitions is not None and args.partitions < 1:
            raise ToolError("The partitions must be greater than 0")
        if args.replication_factor is not None and not 1 <= args.replication_factor <= 32767:
            raise ToolError("The replication factor must be between 1 and 32767")
    if action == "alter":
        if args.partitions is None:
            raise ToolError("--alter needs --partitions (use odradek-configs.sh to change configs)")
        if args.config:
            raise ToolError("--config with --alter is not supported: use odradek-configs.sh --alter --add-config")
    if args.config and action != "create":
        raise ToolError(f"--config can only be used with --create, not --{action}")
    if args.if_not_exists and action != "create":
        raise ToolError("--if-not-exists can only be used with --create")
    if args.if_exists and action not in ("alter", "describe", "delete"):
        raise ToolError("--if-exists can only be used with --alter, --describe or --delete")
    if any(getattr(args, f) for f in FILTERS) and action != "describe":
        raise ToolError("partition filters (--under-replicated-partitions, ...) can only be used with --describe")
    if sum(bool(getattr(args, f)) for f in FILTERS) > 1:
        raise ToolError("give at most one of --under-replicated-partitions, --unavailable-partitions, "
                        "--under-min-isr-partitions, --at-min-isr-partitions")
    return action


# --------------------------------------------------------------------------------------------- formatting


def topic_line(t: TopicView) -> str:
    configs = ",".join(f"{k}={v}" for k, v in sorted(t.overrides.items()))
    topic_id = f"\tTopicId: {t.topic_id}" if t.topic_id else ""
    return (f"Topic: {t.name}{topic_id}\tPartitionCount: {len(t.partitions)}\t"
            f"ReplicationFactor: {t.replication_factor}\tConfigs: {configs}")


def partition_line(topic: str, p: PartitionView) -> str:
    leader = "none" if p.leader < 0 else str(p.leader)
    return (f"\tTopic: {topic}\tPartition: {p.partition}\tLeader: {leader}\t"
            f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}")


def matches_filter(p: PartitionView, which: str | None, live: set[int], min_isr: int) -> bool:
    """Kafka's describe filters (TopicCommand.PartitionDescription)."""
    if which is None:
        return True
    has_leader = p.leader >= 0 and p.leader in live
    if which == "under_replicated_partitions":
        return len(p.isr) < len(p.replicas)
    if which == "unavailable_partitions":
        return not has_leader
    if which == "under_min_isr_partitions":
        return not has_leader or len(p.isr) < min_isr
    return has_leader and len(p.isr) == min_isr  # at_min_isr_partitions


def describe_lines(topics: list[TopicView], live: set[int], which: str | None,
                   with_overrides_only: bool = False) -> list[str]:
    out: list[str] = []
    for t in topics:
        if with_overrides_only and not t.overrides:
            continue
        parts = [p for p in t.partitions if matches_filter(p, which, live, t.min_isr)]
        if which is None:
            out.append(topic_line(t))
        out += [partition_line(t.name, p) for p in parts]
    return out


# ------------------------------------------------------------------------------------------------ actions


def _select(client: AdminClient, pattern: str | None) -> list[str]:
    names = client.list_topics()
    if pattern is None:
        return names
    regex = common.topic_regex(pattern)
    return [n for n in names if regex.fullmatch(n)]


def _require(selected: list[str], args: argparse.Namespace) -> list[str]:
    if not selected and args.topic and not args.if_exists:
        raise ToolError(f"Topic '{args.topic}' does not exist as expected")
    return selected


def _view(client: AdminClient, name: str, meta: dict[str, Any]) -> TopicView:
    topic = client.request_json("GET", f"/v3/clusters/{{cluster_id}}/topics/{name}")
    configs = client.request_json("GET", f"/v3/clusters/{{cluster_id}}/topics/{name}/configs").get("data") or []
    overrides = {c["name"]: c.get("value") for c in configs if not c.get("is_default")}
    effective = {c["name"]: c.get("value") for c in configs}
    parts = tuple(PartitionView(int(p["partition"]), int(p["leader"]), tuple(p["replicas"]), tuple(p["isr"]))
                  for p in sorted(meta.get("partitions") or (), key=lambda p: int(p["partition"])))
    return TopicView(name, topic.get("topic_id"), parts, int(topic.get("replication_factor") or 0),
                     {k: str(v) for k, v in overrides.items()}, int(effective.get("min.insync.replicas") or 1))


def describe(client: AdminClient, args: argparse.Namespace) -> list[str]:
    names = _require(_select(client, args.topic), args)
    body = client.request_json("GET", "/metadata", query={"topics": ",".join(names)} if names else None)
    live = {int(b["id"]) for b in body.get("brokers") or ()}
    metas = {t["name"]: t for t in body.get("topics") or () if not t.get("error")}
    views: list[TopicView] = []
    for name in names:
        if name not in metas:  # deleted between the list and now
            continue
        try:
            views.append(_view(client, name, metas[name]))
        except UnknownTopicError:
            continue
    which = next((f for f in FILTERS if getattr(args, f)), None)
    return describe_lines(views, live, which, args.topics_with_overrides)


def create(client: AdminClient, args: argparse.Namespace) -> list[str]:
    name = args.topic
    out = []
    if "." in name or "_" in name:
        out.append("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') "
                   "could collide. To avoid issues it is best to use either, but not both.")
    configs = common.parse_properties(args.config, "--config")
    assignment = parse_replica_assignment(args.replica_assignment) if args.replica_assignment else None
    try:
        client.create_topic(name, partitions=args.partitions or 1, replication_factor=args.replication_factor or 1,
                            configs=configs, replica_assignment=assignment)
    except TopicAlreadyExistsError:
        if args.if_not_exists:
            return out
        raise ToolError(f"Topic '{name}' already exists.") from None
    return [*out, f"Created topic {name}."]


def alter(client: AdminClient, args: argparse.Namespace) -> list[str]:
    out = []
    for name in _require(_select(client, args.topic), args):
        client.add_partitions(name, args.partitions)
        out.append("WARNING: If partitions are increased for a topic that has a key, the partition logic or "
                   "ordering of the messages will be affected")
        out.append("Adding partitions succeeded!")
    return out


def delete(client: AdminClient, args: argparse.Namespace) -> list[str]:
    out = []
    for name in _require(_select(client, args.topic), args):
        try:
            client.delete_topic(name)
        except UnknownTopicError:
            if not args.if_exists:
                raise
            continue
        out.append(f"Topic {name} is marked for deletion.")
    return out


def _main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    action = validate(args)
    with common.admin(args) as client:
        if action == "list":
            lines = _select(client, args.topic)
        else:
            lines = {"describe": describe, "create": create, "alter": alter, "delete": delete}[action](client, args)
    for line in lines:
        print(line)
    return 0


def main(argv: list[str]) -> int:
    return common.run(_main, argv, prefix="Error while executing topic command : ")
