"""``odradek leader-election`` (scripts/odradek-leader-election.sh): Kafka's kafka-leader-election.sh.

``--election-type preferred`` asks the controller (``POST /admin/preferred_leader_election``, which writes
``/admin/preferred_replica_election`` as Kafka's ZooKeeper route does) to move leadership back to each
partition's first replica, then watches the metadata until it has: the request itself is asynchronous, and the
tool must report what happened, as Kafka's ElectLeaders answer does. Partitions already led by their preferred
replica are "Valid replica already elected"; a preferred replica that is down or out of the ISR is reported as
PREFERRED_LEADER_NOT_AVAILABLE without asking.

``--election-type unclean`` acts only where a partition has no leader: ``POST /admin/unclean_leader_election``
(forwarded to the controller, as Kafka's ElectLeaders with UNCLEAN, KIP-460) elects a clean leader if one is
alive, else the first live replica, accepting the loss of what only the old ISR had; partitions with a leader
need nothing.

Output lines (stdout) are Kafka's; when any partition failed, the exit code is 1 with one line on stderr.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from odradek.client.admin import AdminClient
from odradek.protocol.errors import OdradekError
from odradek_tools import common
from odradek_tools.common import ToolError

PROG = "odradek-leader-election.sh"
TP = tuple[str, int]


def build_parser() -> argparse.ArgumentParser:
    p = common.parser(PROG, "Elect preferred or (where no leader is left) unclean leaders.")
    common.add_bootstrap(p)
    p.add_argument("--election-type", type=str.upper, metavar="PREFERRED|UNCLEAN",
                   help="preferred: move leadership back to the first replica; unclean: elect where none leads")
    p.add_argument("--topic", help="with --partition: one partition")
    p.add_argument("--partition", type=int, help="with --topic")
    p.add_argument("--all-topic-partitions", action="store_true", help="every partition of every topic")
    p.add_argument("--path-to-json-file", metavar="FILE",
                   help='{"partitions": [{"topic": "t", "partition": 0}, ...]}')
    p.add_argument("--wait-ms", type=int, default=30_000, metavar="MS",
                   help="how long to wait for the new leaders (default 30000)")
    return p


def validate(args: argparse.Namespace) -> None:
    common.check_connection(args)
    if not args.election_type:
        raise ToolError("Missing required option(s): [election-type]")
    if args.election_type not in ("PREFERRED", "UNCLEAN"):
        raise ToolError(f"--election-type must be preferred or unclean, not '{args.election_type.lower()}'")
    given = [bool(args.topic or args.partition is not None), args.all_topic_partitions, bool(args.path_to_json_file)]
    if sum(given) != 1:
        raise ToolError("One and only one of the following options is required: --all-topic-partitions, "
                        "--path-to-json-file, --topic with --partition")
    if (args.topic is None) != (args.partition is None):
        raise ToolError("--topic and --partition must be given together")
    if args.partition is not None and args.partition < 0:
        raise ToolError("--partition must be non-negative")
    if args.wait_ms < 0:
        raise ToolError("--wait-ms must not be negative")


def _name(tp: TP) -> str:
    return f"{tp[0]}-{tp[1]}"


def _join(tps: list[TP]) -> str:
    return ", ".join(_name(tp) for tp in sorted(tps))


def _partitions(client: AdminClient) -> tuple[dict[TP, dict[str, Any]], set[int]]:
    body = client.request_json("GET", "/metadata")
    live = {int(b["id"]) for b in body.get("brokers") or ()}
    parts = {(t["name"], int(p["partition"])): p for t in body.get("topics") or () if not t.get("error")
             for p in t.get("partitions") or ()}
    return parts, live


def classify(kind: str, wanted: list[TP], parts: dict[TP, dict[str, Any]],
             live: set[int]) -> tuple[list[TP], list[TP], dict[TP, str]]:
    """(to elect, already fine, errors by partition) under Kafka's rules for the election type."""
    todo: list[TP] = []
    fine: list[TP] = []
    errors: dict[TP, str] = {}
    for tp in wanted:
        p = parts.get(tp)
        if p is None:
            errors[tp] = "UNKNOWN_TOPIC_OR_PARTITION: This server does not host this topic-partition."
            continue
        leader, replicas, isr = int(p["leader"]), list(p["replicas"]), list(p["isr"])
        if kind == "PREFERRED":
            preferred = replicas[0] if replicas else -1
            if leader == preferred:
                fine.append(tp)
            elif preferred not in live or preferred not in isr:
                errors[tp] = (f"PREFERRED_LEADER_NOT_AVAILABLE: The preferred leader {preferred} is not available "
                              "(down or out of the ISR).")
            else:
                todo.append(tp)
        elif leader >= 0 and leader in live:
            fine.append(tp)
        elif not any(r in live for r in replicas):
            errors[tp] = "ELIGIBLE_LEADERS_NOT_AVAILABLE: No replica of the partition is alive."
        else:
            todo.append(tp)
    return todo, fine, errors


def _request_preferred(client: AdminClient, todo: list[TP], deadline: float) -> None:
    body = {"partitions": [{"topic": t, "partition": p} for t, p in sorted(todo)]}
    while True:
        try:
            client.request_json("POST", "/admin/preferred_leader_election", body)
            return
        except OdradekError as e:
            if e.details.get("status") != 409 or time.monotonic() > deadline:  # 409: one already runs
                raise
        time.sleep(0.2)


def _wait_preferred(client: AdminClient, todo: list[TP], deadline: float) -> list[TP]:
    """Partitions still not led by their preferred replica when the deadline passes."""
    pending = list(todo)
    while pending:
        parts, _ = _partitions(client)
        pending = [tp for tp in pending if tp in parts and int(parts[tp]["leader"]) != parts[tp]["replicas"][0]]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return pending


def _main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    validate(args)
    kind = args.election_type
    if args.path_to_json_file:
        wanted = common.topic_partitions_from_json(common.load_json_file(args.path_to_json_file, "JSON file"),
                                                   args.path_to_json_file)
    elif args.topic:
        wanted = [(args.topic, args.partition)]
    else:
        wanted = []
    with common.admin(args) as client:
        parts, live = _partitions(client)
        if args.all_topic_partitions:
            wanted = sorted(parts)
        todo, fine, errors = classify(kind, wanted, parts, live)
        done: list[TP] = []
        if todo and kind == "PREFERRED":
            deadline = time.monotonic() + args.wait_ms / 1000
            _request_preferred(client, todo, deadline)
            late = _wait_preferred(client, todo, deadline)
            done = [tp for tp in todo if tp not in late]
            errors.update({tp: f"REQUEST_TIMED_OUT: the preferred replica did not take over within {args.wait_ms} ms"
                           for tp in late})
        elif todo:
            answer = client.request_json("POST", "/admin/unclean_leader_election",
                                         {"partitions": [{"topic": t, "partition": p} for t, p in sorted(todo)]})
            for row in answer["partitions"]:
                tp = (row["topic"], row["partition"])
                if row.get("error"):
                    errors[tp] = f"{row['error']}: No replica of the partition is alive."
                else:
                    done.append(tp)
    if done:
        print(f"Successfully completed leader election ({kind}) for partitions {_join(done)}")
    if fine:
        print(f"Valid replica already elected for partitions {_join(fine)}")
    for tp, reason in sorted(errors.items()):
        print(f"Error completing leader election ({kind}) for partition: {_name(tp)}: {reason}")
    if errors:
        raise ToolError(f"{len(errors)} replica(s) could not be elected")
    return 0


def main(argv: list[str]) -> int:
    return common.run(_main, argv)
