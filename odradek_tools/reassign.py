"""``odradek reassign-partitions`` (scripts/odradek-reassign-partitions.sh): Kafka's kafka-reassign-partitions.sh.

Actions, as in Kafka 2.x (kafka-classic.md 7.2):

* ``--generate --topics-to-move-json-file F --broker-list 1,2,3 [--disable-rack-aware]`` prints the current
  assignment of the topics and a proposal (Kafka's replica assignment, rack-aware when every broker has a rack).
  Nothing is written.
* ``--execute --reassignment-json-file F [--throttle B/s] [--additional]`` prints the current assignment (to
  save for a rollback), sets the replication throttle (the ``leader/follower.replication.throttled.rate`` of
  every broker involved and the topics' ``*.replication.throttled.replicas`` lists) and starts the move.
* ``--verify --reassignment-json-file F [--preserve-throttles]`` prints each partition's status and, once every
  partition is done, clears the throttles.
* ``--cancel --reassignment-json-file F`` reverts running moves to their original replicas; ``--list`` shows
  what runs.

On a terminal, ``--execute`` (and ``--verify``/``--list`` with ``--wait``) follows the moves live with rich's
progress bars, per partition: bytes the new replicas have caught up, rate, ETA; when not a terminal the same
progress prints as plain lines (only with ``--wait`` for ``--execute``, so scripts get Kafka's output).

Two connection modes: ``--bootstrap-server`` (the brokers' HTTP API: broker/api/reassignment.py) or
``--zookeeper`` (the znodes directly, as Kafka's ZooKeeper-era tool). Either way the progress is read from the
brokers' ``/admin/log_dirs``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from odradek_tools import common
from odradek_tools.common import ToolError
from odradek_tools.reassign_cluster import Cluster, HttpCluster, ZkCluster
from odradek_tools.reassign_progress import follow, progress_lines, snapshot

PROG = "odradek-reassign-partitions.sh"
ACTIONS = ("generate", "execute", "verify", "cancel", "list")
TP = tuple[str, int]
LEADER_RATE, FOLLOWER_RATE = "leader.replication.throttled.rate", "follower.replication.throttled.rate"
LEADER_REPLICAS, FOLLOWER_REPLICAS = "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"


def build_parser() -> argparse.ArgumentParser:
    p = common.parser(PROG, "Move partitions between brokers, with a replication throttle.")
    common.add_bootstrap(p, zookeeper=True)
    for action in ACTIONS:
        p.add_argument(f"--{action}", action="store_true", help=f"{action} a reassignment")
    p.add_argument("--topics-to-move-json-file", metavar="FILE", help='--generate: {"topics": [{"topic": "t"}]}')
    p.add_argument("--broker-list", metavar="1,2,3", help="--generate: the brokers to move the topics to")
    p.add_argument("--disable-rack-aware", action="store_true", help="--generate: ignore the brokers' racks")
    p.add_argument("--reassignment-json-file", metavar="FILE",
                   help='{"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2]}]}')
    p.add_argument("--throttle", type=int, default=-1, metavar="BYTES_PER_SEC",
                   help="--execute: replication throttle while the partitions move")
    p.add_argument("--replica-alter-log-dirs-throttle", type=int, default=-1, metavar="BYTES_PER_SEC",
                   help="not supported: Odradek brokers have one log dir")
    p.add_argument("--additional", action="store_true", help="--execute: add to a running reassignment")
    p.add_argument("--preserve-throttles", action="store_true", help="--verify/--cancel: leave the throttles")
    p.add_argument("--wait", action="store_true", help="follow the moves until they complete")
    p.add_argument("--timeout", type=int, default=0, metavar="MS", help="--wait: give up after this long (0: never)")
    return p


def validate(args: argparse.Namespace) -> str:
    common.check_connection(args)
    chosen = [a for a in ACTIONS if getattr(args, a)]
    if len(chosen) != 1:
        raise ToolError("Command must include exactly one action: --generate, --execute, --verify, --cancel or "
                        "--list")
    action = chosen[0]
    if args.replica_alter_log_dirs_throttle >= 0:
        raise ToolError("--replica-alter-log-dirs-throttle is not supported: Odradek brokers have a single log dir, "
                        "so there are no replica moves between log dirs to throttle")
    if action == "generate" and not (args.topics_to_move_json_file and args.broker_list):
        raise ToolError("--generate needs --topics-to-move-json-file and --broker-list")
    if action in ("execute", "verify", "cancel") and not args.reassignment_json_file:
        raise ToolError(f"--{action} needs --reassignment-json-file")
    if args.throttle >= 0 and action != "execute":
        raise ToolError("--throttle can only be used with --execute")
    if args.throttle == 0:
        raise ToolError("--throttle must be a positive number of bytes per second")
    if args.timeout < 0:
        raise ToolError("--timeout must not be negative")
    return action


# --------------------------------------------------------------------------------------------------- files


def parse_broker_list(text: str) -> list[int]:
    try:
        brokers = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise ToolError(f"--broker-list must be broker ids separated by commas, not '{text}'") from None
    if not brokers or any(b < 0 for b in brokers):
        raise ToolError(f"--broker-list must name at least one broker id, not '{text}'")
    dups = sorted({b for b in brokers if brokers.count(b) > 1})
    if dups:
        raise ToolError(f"Broker list contains duplicate entries: {','.join(map(str, dups))}")
    return brokers


def parse_topics_file(data: Any, path: str) -> list[str]:
    if not isinstance(data, dict) or not isinstance(data.get("topics"), list) or not data["topics"]:
        raise ToolError(f"'{path}' must be {{\"version\": 1, \"topics\": [{{\"topic\": \"name\"}}, ...]}}")
    if data.get("version", 1) != 1:
        raise ToolError(f"'{path}': only version 1 is supported, not {data.get('version')}")
    topics = []
    for item in data["topics"]:
        if not isinstance(item, dict) or not isinstance(item.get("topic"), str) or not item["topic"]:
            raise ToolError(f"'{path}': every entry needs a \"topic\" name, not {orjson.dumps(item).decode()[:80]}")
        topics.append(item["topic"])
    dups = sorted({t for t in topics if topics.count(t) > 1})
    if dups:
        raise ToolError(f"List of topics to reassign contains duplicate entries: {','.join(dups)}")
    return topics


def parse_reassignment_file(data: Any, path: str) -> dict[TP, list[int]]:
    """Kafka's reassignment JSON; ``log_dirs`` may be given but only as ``"any"``."""
    if not isinstance(data, dict) or not isinstance(data.get("partitions"), list) or not data["partitions"]:
        raise ToolError(f"'{path}' must be {{\"version\": 1, \"partitions\": [{{\"topic\": \"t\", \"partition\": 0, "
                        "\"replicas\": [1, 2]}, ...]}")
    if data.get("version", 1) != 1:
        raise ToolError(f"'{path}': only version 1 is supported, not {data.get('version')}")
    moves: dict[TP, list[int]] = {}
    for item in data["partitions"]:
        ok = isinstance(item, dict) and isinstance(item.get("topic"), str) and type(item.get("partition")) is int
        replicas = item.get("replicas") if isinstance(item, dict) else None
        if not ok or item["partition"] < 0 or not isinstance(replicas, list) or not replicas or not all(
                type(r) is int and r >= 0 for r in replicas):
            raise ToolError(f"'{path}': every partition needs \"topic\", \"partition\" and a non-empty list of broker "
                            f"ids as \"replicas\", not {orjson.dumps(item).decode()[:100]}")
        tp = (item["topic"], item["partition"])
        if tp in moves:
            raise ToolError(f"Reassignment data contains duplicate partitions: {tp[0]}-{tp[1]}")
        if len(set(replicas)) != len(replicas):
            raise ToolError(f"Partition replica lists may not contain duplicate entries: {tp[0]}-{tp[1]} has "
                            f"{replicas}")
        log_dirs = item.get("log_dirs")
        if log_dirs is not None:
            if not isinstance(log_dirs, list) or len(log_dirs) != len(replicas):
                raise ToolError(f"Size of replicas list {replicas} is different from size of log dirs list "
                                f"{log_dirs} for partition {tp[0]}-{tp[1]}")
            if any(d != "any" for d in log_dirs):
                raise ToolError("log_dirs other than \"any\" are not supported: Odradek brokers have one log dir")
        moves[tp] = list(replicas)
    return moves


def assignment_json(assignment: dict[TP, list[int]]) -> str:
    parts = [{"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
             for (t, p), r in sorted(assignment.items())]
    return orjson.dumps({"version": 1, "partitions": parts}).decode()


def _names(tps: Any) -> str:
    return ",".join(f"{t}-{p}" for t, p in sorted(tps))


# ------------------------------------------------------------------------------------------------- actions


def generate(cluster: Cluster, args: argparse.Namespace) -> list[str]:
    from broker.admin.assignment import assign_replicas

    topics = parse_topics_file(common.load_json_file(args.topics_to_move_json_file, "topics-to-move JSON file"),
                               args.topics_to_move_json_file)
    brokers = parse_broker_list(args.broker_list)
    live = cluster.brokers()
    unknown = sorted(set(brokers) - set(live))
    if unknown:
        raise ToolError(f"Unknown broker id(s) in --broker-list: {','.join(map(str, unknown))}")
    current = cluster.assignment(topics)
    racks = None if args.disable_rack_aware else {b: live[b][1] for b in brokers}
    if racks is not None and not any(racks.values()):
        racks = None
    proposed: dict[TP, list[int]] = {}
    for topic in topics:
        parts = sorted(p for t, p in current if t == topic)
        rf = len(current[(topic, parts[0])])
        try:
            plan = assign_replicas(brokers, len(parts), rf, racks=racks)
        except Exception as e:  # InvalidReplicationFactor, mixed racks: one line
            raise ToolError(f"cannot place topic '{topic}': {getattr(e, 'message', e)}") from None
        proposed.update({(topic, p): plan[p] for p in parts})
    return ["Current partition replica assignment", assignment_json(current), "",
            "Proposed partition reassignment configuration", assignment_json(proposed)]


def throttle_plan(current: dict[TP, list[int]], moves: dict[TP, list[int]]) -> tuple[dict[str, tuple[str, str]],
                                                                                      set[int]]:
    """Kafka's throttle setup: per topic the leader list (``p:source`` for the current replicas) and the follower
    list (``p:dest`` for the new ones), and the brokers involved (sources and destinations)."""
    lists: dict[str, tuple[list[str], list[str]]] = {}
    brokers: set[int] = set()
    for (topic, p), target in sorted(moves.items()):
        old = current[(topic, p)]
        leader, follower = lists.setdefault(topic, ([], []))
        leader.extend(f"{p}:{b}" for b in old)
        follower.extend(f"{p}:{b}" for b in target if b not in old)
        brokers.update(old, target)
    return {t: (",".join(lr), ",".join(fr)) for t, (lr, fr) in lists.items()}, brokers


def execute(cluster: Cluster, args: argparse.Namespace, out: list[str]) -> dict[TP, list[int]]:
    moves = _moves_file(args)
    live = cluster.brokers()
    current = cluster.assignment(sorted({t for t, _ in moves}))
    for tp, target in moves.items():
        if tp not in current:
            raise ToolError(f"Partition {tp[0]}-{tp[1]} does not exist")
        unknown = sorted(set(target) - set(live))
        if unknown:
            raise ToolError(f"Unknown broker id(s) {unknown} in the replicas of {tp[0]}-{tp[1]}")
    if cluster.ongoing() and not args.additional:
        raise ToolError("Cannot execute because there is an existing partition assignment. Use --additional to "
                        "override this and create a new partition assignment in addition to the existing one.")
    out += ["Current partition replica assignment", "", assignment_json({tp: current[tp] for tp in moves}), "",
            "Save this to use as the --reassignment-json-file option during rollback"]
    if args.throttle > 0:
        per_topic, brokers = throttle_plan(current, moves)
        for topic, (leader, follower) in per_topic.items():
            cluster.set_topic_configs(topic, {LEADER_REPLICAS: leader, FOLLOWER_REPLICAS: follower})
        for b in sorted(brokers):
            cluster.set_broker_configs(b, {LEADER_RATE: str(args.throttle), FOLLOWER_RATE: str(args.throttle)})
        out += ["Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
                "throttle is removed.", f"The inter-broker throttle limit was set to {args.throttle} B/s"]
    if not cluster.submit(moves, additional=args.additional):
        raise ToolError("There is an existing assignment running.")
    out.append(f"Successfully started partition reassignment(s) for {_names(moves)}")
    return moves


def status(cluster: Cluster, moves: dict[TP, list[int]]) -> tuple[list[str], bool]:
    """Kafka 2.6's per-partition lines, and whether every partition is done."""
    ongoing = cluster.ongoing()
    current = cluster.assignment(sorted({t for t, _ in moves}))
    lines, all_done = ["Status of partition reassignment:"], True
    for (t, p), target in sorted(moves.items()):
        if (t, p) in ongoing:
            lines.append(f"Reassignment of partition {t}-{p} is still in progress.")
            all_done = False
        elif current.get((t, p)) == target:
            lines.append(f"Reassignment of partition {t}-{p} is complete.")
        else:
            lines.append(f"There is no active reassignment of partition {t}-{p}, but replica set is "
                         f"{current.get((t, p))} rather than {target}.")
            all_done = False
    return lines, all_done


def clear_throttles(cluster: Cluster, topics: set[str]) -> list[str]:
    brokers = sorted(cluster.brokers())
    out = [f"Clearing broker-level throttles on brokers {','.join(map(str, brokers))}"]
    for b in brokers:
        cluster.delete_broker_configs(b, [LEADER_RATE, FOLLOWER_RATE])
    for topic in sorted(topics):
        out.append(f"Clearing topic-level throttles on topic {topic}")
        cluster.delete_topic_configs(topic, [LEADER_REPLICAS, FOLLOWER_REPLICAS])
    return out


def _interactive() -> bool:
    return sys.stdout.isatty()


def _main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    action = validate(args)
    with (ZkCluster.open(args) if args.zookeeper else HttpCluster.open(args)) as cluster:
        out: list[str] = []
        if action == "generate":
            out = generate(cluster, args)
        elif action == "list":
            ongoing = cluster.ongoing()
            out = ["Current partition reassignments:"] + [f"{t}-{p}: replicas: {r}" for (t, p), r in
                                                          sorted(ongoing.items())] if ongoing else [
                "No partition reassignments found."]
            if ongoing and args.wait:
                _print(out)
                out = follow(cluster, ongoing, interactive=_interactive(), timeout_ms=args.timeout)
        elif action == "execute":
            moves = execute(cluster, args, out)
            if args.wait or _interactive():
                _print(out)
                out = follow(cluster, moves, interactive=_interactive(), timeout_ms=args.timeout)
        elif action == "verify":
            moves = _moves_file(args)
            if args.wait:
                _print(follow(cluster, moves, interactive=_interactive(), timeout_ms=args.timeout))
            lines, done = status(cluster, moves)
            out += lines
            if not done:
                out += progress_lines(snapshot(cluster, moves), None)
            elif not args.preserve_throttles:
                out += clear_throttles(cluster, {t for t, _ in moves})
        else:
            moves = _moves_file(args)
            cancelled = cluster.cancel(list(moves))
            out.append(f"Successfully cancelled partition reassignment(s) for {_names(cancelled)}" if cancelled
                       else "None of the partitions had an active reassignment.")
            if not args.preserve_throttles:
                out += clear_throttles(cluster, {t for t, _ in moves})
        _print(out)
    return 0


def _moves_file(args: argparse.Namespace) -> dict[TP, list[int]]:
    path = args.reassignment_json_file
    return parse_reassignment_file(common.load_json_file(path, "reassignment JSON file"), path)


def _print(lines: list[str]) -> None:
    for line in lines:
        print(line, flush=True)


def main(argv: list[str]) -> int:
    return common.run(_main, argv)
