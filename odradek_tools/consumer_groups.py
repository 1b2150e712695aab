"""``odradek consumer-groups`` (scripts/odradek-consumer-groups.sh): Kafka's kafka-consumer-groups.sh.

Over the group API of docs/consumer-groups.md (any broker forwards to the group's coordinator). Views and
messages are Kafka 2.8's ConsumerGroupCommand: the offsets view ``GROUP TOPIC PARTITION CURRENT-OFFSET
LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID`` (``-`` for a missing value), ``--members`` and ``--state`` views,
and ``--reset-offsets`` printing ``GROUP TOPIC PARTITION NEW-OFFSET``. A reset is a dry run unless ``--execute``
is given, targets are clamped into ``[log start, log end]`` as Kafka does, and it is refused while the group
has live members (Kafka's "Assignments can only be reset if the group 'G' is inactive").
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import datetime
from typing import Any

from odradek.client.admin import AdminClient
from odradek.client.transport import quote_path
from odradek.protocol.errors import GroupIdNotFoundError, OdradekError
from odradek_tools import common
from odradek_tools.common import ToolError

PROG = "odradek-consumer-groups.sh"
ACTIONS = ("list", "describe", "reset_offsets", "delete", "delete_offsets")
SPECS = ("to_earliest", "to_latest", "to_current", "to_offset", "shift_by", "to_datetime", "by_duration", "from_file")
INACTIVE = ("Empty", "Dead")
TP = tuple[str, int]
_DURATION = re.compile(r"^P(?:(\d+(?:\.\d+)?)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def build_parser() -> argparse.ArgumentParser:
    p = common.parser(PROG, "List, describe, reset and delete consumer groups.")
    common.add_bootstrap(p)
    p.add_argument("--list", action="store_true", help="group ids (with --state: and their states)")
    p.add_argument("--describe", action="store_true", help="offsets (default), --members or --state of groups")
    p.add_argument("--reset-offsets", action="store_true", help="move committed offsets (dry run unless --execute)")
    p.add_argument("--delete", action="store_true", help="delete empty groups")
    p.add_argument("--delete-offsets", action="store_true", help="delete a group's offsets of --topic")
    p.add_argument("--group", action="append", help="the group (repeatable for --describe and --delete)")
    p.add_argument("--all-groups", action="store_true", help="every group")
    p.add_argument("--members", action="store_true", help="--describe: one line per member")
    p.add_argument("--verbose", action="store_true", help="--members: with the assignment")
    p.add_argument("--offsets", action="store_true", help="--describe: the offsets view (default)")
    p.add_argument("--state", nargs="?", const="", default=None, metavar="S1,S2",
                   help="--describe: the state view; --list: with states (optionally only these)")
    p.add_argument("--topic", action="append", metavar="T[:P1,P2]", help="--reset-offsets/--delete-offsets scope")
    p.add_argument("--all-topics", action="store_true", help="--reset-offsets: every topic the group committed")
    p.add_argument("--to-earliest", action="store_true")
    p.add_argument("--to-latest", action="store_true")
    p.add_argument("--to-current", action="store_true")
    p.add_argument("--to-offset", type=int, metavar="N")
    p.add_argument("--shift-by", type=int, metavar="±N")
    p.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss[Z|+hh:mm]")
    p.add_argument("--by-duration", metavar="PnDTnHnMnS")
    p.add_argument("--from-file", metavar="CSV", help="lines of topic,partition,offset")
    p.add_argument("--dry-run", action="store_true", help="show the new offsets only (the default)")
    p.add_argument("--execute", action="store_true", help="write the new offsets")
    return p


def validate(args: argparse.Namespace) -> str:
    common.check_connection(args)
    chosen = [a for a in ACTIONS if getattr(args, a)]
    if len(chosen) != 1:
        raise ToolError("Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
                        "--delete-offsets")
    action = chosen[0]
    groups = args.group or []
    if action in ("describe", "reset_offsets", "delete") and not groups and not args.all_groups:
        raise ToolError(f"Option --{action.replace('_', '-')} takes one of these options: --all-groups, --group")
    if groups and args.all_groups:
        raise ToolError("Option --group cannot be used with --all-groups")
    if action in ("reset_offsets", "delete_offsets") and len(groups) > 1:
        raise ToolError(f"--{action.replace('_', '-')} takes one --group")
    views = sum([args.members, args.offsets, args.state is not None and action == "describe"])
    if action == "describe" and views > 1:
        raise ToolError("Option --describe takes at most one of these options: --members, --offsets, --state")
    if (args.members or args.offsets or args.verbose) and action != "describe":
        raise ToolError("--members, --offsets and --verbose can only be used with --describe")
    if args.state is not None and action not in ("describe", "list"):
        raise ToolError("--state can only be used with --describe or --list")
    if action == "reset_offsets":
        specs = [s for s in SPECS if getattr(args, s) not in (None, False)]
        if len(specs) != 1:
            raise ToolError("Option --reset-offsets takes exactly one of these options: --to-datetime, "
                            "--by-duration, --to-earliest, --to-latest, --shift-by, --from-file, --to-current, "
                            "--to-offset")
        if args.dry_run and args.execute:
            raise ToolError("Option --reset-offsets only accepts one of --execute and --dry-run")
        scopes = sum([bool(args.topic), args.all_topics, bool(args.from_file)])
        if scopes != 1:
            raise ToolError("Option --reset-offsets takes exactly one of --topic, --all-topics or --from-file")
        if args.to_offset is not None and args.to_offset < 0:
            raise ToolError("--to-offset must not be negative")
    elif args.dry_run or args.execute or args.all_topics:
        raise ToolError("--dry-run, --execute and --all-topics can only be used with --reset-offsets")
    if action == "delete_offsets":
        if not groups or not args.topic:
            raise ToolError("Option --delete-offsets needs --group and --topic")
    elif action != "reset_offsets" and args.topic:
        raise ToolError("--topic can only be used with --reset-offsets or --delete-offsets")
    return action


# ------------------------------------------------------------------------------------------------ parsing


def parse_topic_scope(items: list[str]) -> list[tuple[str, list[int] | None]]:
    """``t`` or ``t:0,1`` -> (topic, partitions or None for all)."""
    out: list[tuple[str, list[int] | None]] = []
    for item in items:
        topic, sep, parts = item.partition(":")
        if not topic:
            raise ToolError(f"Invalid --topic '{item}'")
        if not sep:
            out.append((topic, None))
            continue
        try:
            out.append((topic, sorted({int(p) for p in parts.split(",") if p.strip()})))
        except ValueError:
            raise ToolError(f"Invalid --topic '{item}': partitions must be integers, as t:0,1") from None
    return out


def parse_datetime(text: str) -> int:
    """Kafka's --to-datetime ('YYYY-MM-DDTHH:mm:SS.sss', zone optional: local time) -> epoch ms."""
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise ToolError(f"Error parsing timestamp '{text}': use YYYY-MM-DDTHH:mm:SS.sss, optionally with a zone "
                        "(Z or +hh:mm)") from None
    return int(dt.timestamp() * 1000)  # a naive datetime is local time, as Kafka's tool takes it


def parse_duration_ms(text: str) -> int:
    """ISO-8601 PnDTnHnMnS -> milliseconds."""
    m = _DURATION.match(text.strip())
    if not m or text.strip() in ("P", "PT") or not any(m.groups()):
        raise ToolError(f"Invalid --by-duration '{text}': use the ISO-8601 form PnDTnHnMnS, e.g. PT1H30M")
    d, h, mins, s = (float(g) if g else 0.0 for g in m.groups())
    return int(((d * 24 + h) * 60 + mins) * 60_000 + s * 1000)


def parse_offsets_csv(text: str, group: str, path: str) -> dict[TP, int]:
    """Kafka's reset file: ``topic,partition,offset`` lines (or ``group,topic,partition,offset``)."""
    out: dict[TP, int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 4:
            if cells[0] != group:
                continue
            cells = cells[1:]
        try:
            if len(cells) != 3:
                raise ValueError
            topic, partition, offset = cells[0], int(cells[1]), int(cells[2])
            if not topic or partition < 0 or offset < 0:
                raise ValueError
        except ValueError:
            raise ToolError(f"'{path}' line {n} is not topic,partition,offset: {line[:100]}") from None
        out[(topic, partition)] = offset
    if not out:
        raise ToolError(f"'{path}' names no partition for group '{group}'")
    return out


# ----------------------------------------------------------------------------------------------- the API


class Groups:
    """The group endpoints, through the AdminClient's broker failover."""

    def __init__(self, client: AdminClient) -> None:
        self.client = client

    def list(self) -> list[dict[str, Any]]:
        return list(self.client.request_json("GET", "/groups").get("groups") or ())

    def describe(self, group: str) -> dict[str, Any]:
        try:
            return dict(self.client.request_json("GET", quote_path("groups", group)))
        except GroupIdNotFoundError:
            raise ToolError(f"Consumer group '{group}' does not exist.") from None

    def offsets(self, group: str) -> dict[TP, dict[str, Any]]:
        body = self.client.request_json("GET", quote_path("groups", group, "offsets"))
        return {(o["topic"], int(o["partition"])): o for o in body.get("offsets") or ()}

    def log_offsets(self, tp: TP, timestamp: int | None = None) -> dict[str, Any]:
        query = {"timestamp": timestamp} if timestamp is not None else None
        return dict(self.client.request_json("GET", quote_path("topics", tp[0], "partitions", tp[1], "offsets"),
                                             query=query))

    def partitions(self, topic: str) -> list[int]:
        body = self.client.request_json("GET", "/metadata", query={"topics": topic})
        for t in body.get("topics") or ():
            if t["name"] == topic and not t.get("error"):
                return sorted(int(p["partition"]) for p in t.get("partitions") or ())
        raise ToolError(f"Topic '{topic}' does not exist")

    def brokers(self) -> dict[int, str]:
        return self.client.brokers()


# ------------------------------------------------------------------------------------------------- views


def _host(url: str | None) -> str:
    return url.split("://", 1)[-1] if url else "-"


def offsets_rows(group: str, desc: dict[str, Any], committed: dict[TP, dict[str, Any]],
                 ends: dict[TP, int | None]) -> list[list[Any]]:
    owners = {(t, int(p)): m for m in desc.get("members") or () for t, p in m.get("assignment") or ()}
    rows = []
    for tp in sorted(set(owners) | set(committed)):
        c = committed.get(tp) or {}
        current = c.get("offset")
        end = c.get("log_end_offset", ends.get(tp)) if c else ends.get(tp)
        lag = None if current is None or end is None else max(0, int(end) - int(current))
        m = owners.get(tp) or {}
        rows.append([group, tp[0], tp[1], current, end, lag, m.get("member_id"), m.get("host"), m.get("client_id")])
    return rows


def members_rows(group: str, desc: dict[str, Any], verbose: bool) -> list[list[Any]]:
    rows = []
    for m in desc.get("members") or ():
        assignment = [(t, int(p)) for t, p in m.get("assignment") or ()]
        row = [group, m.get("member_id"), m.get("host"), m.get("client_id"), len(assignment)]
        if verbose:
            by_topic: dict[str, list[int]] = {}
            for t, p in sorted(assignment):
                by_topic.setdefault(t, []).append(p)
            row.append(",".join(f"{t}({','.join(map(str, ps))})" for t, ps in by_topic.items()) or "-")
        rows.append(row)
    return rows


def clamp(target: int, start: int, end: int) -> int:
    """Kafka clamps a reset target into [log start, log end]."""
    return max(start, min(end, target))


# ----------------------------------------------------------------------------------------------- actions


def do_list(api: Groups, args: argparse.Namespace) -> list[str]:
    groups = sorted(api.list(), key=lambda g: g["group"])
    if args.state is None:
        return [g["group"] for g in groups]
    wanted = {s.strip().lower() for s in args.state.split(",") if s.strip()}
    rows = [[g["group"], g.get("state")] for g in groups if not wanted or str(g.get("state")).lower() in wanted]
    return common.format_table(["GROUP", "STATE"], rows, [15, 0])


def do_describe(api: Groups, args: argparse.Namespace) -> list[str]:
    names = args.group or [g["group"] for g in sorted(api.list(), key=lambda g: g["group"])]
    out: list[str] = []
    for group in names:
        desc = api.describe(group)
        state = desc.get("state")
        if args.state is not None:
            cid = desc.get("coordinator")
            url = api.brokers().get(int(cid)) if cid is not None else None
            rows = [[group, f"{_host(url)} ({cid})", desc.get("assignor") or "-", state,
                     len(desc.get("members") or ())]]
            out += ["", *common.format_table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                                             rows, [15, 25, 20, 15, 0])]
            continue
        if state not in INACTIVE and state != "Stable":
            print(f"Warning: Consumer group '{group}' is rebalancing.", file=sys.stderr)
        elif not desc.get("members"):
            print(f"Consumer group '{group}' has no active members.", file=sys.stderr)
        if args.members:
            if not desc.get("members"):
                continue  # Kafka prints only the note above
            headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"] + (["ASSIGNMENT"] if args.verbose
                                                                                      else [])
            out += ["", *common.format_table(headers, members_rows(group, desc, args.verbose), [15, 15, 15, 15, 12])]
            continue
        committed = api.offsets(group)
        owned = {(t, int(p)) for m in desc.get("members") or () for t, p in m.get("assignment") or ()}
        ends = {tp: _end(api, tp) for tp in sorted(owned - set(committed))}
        headers = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                   "CLIENT-ID"]
        out += ["", *common.format_table(headers, offsets_rows(group, desc, committed, ends),
                                         [15, 15, 10, 15, 15, 15, 15, 15])]
    return out


def _end(api: Groups, tp: TP) -> int | None:
    try:
        return int(api.log_offsets(tp)["end_offset"])
    except (OdradekError, KeyError, ValueError):
        return None


def plan_reset(api: Groups, args: argparse.Namespace, group: str) -> dict[TP, int]:
    """The new offset of every partition in scope, clamped into each log's range."""
    committed = {tp: int(o["offset"]) for tp, o in api.offsets(group).items() if o.get("offset") is not None}
    if args.from_file:
        try:
            with open(args.from_file, encoding="utf-8") as f:
                wanted = parse_offsets_csv(f.read(), group, args.from_file)
        except OSError as e:
            raise ToolError(f"Cannot read '{args.from_file}': {e.strerror or e}") from None
        scope = sorted(wanted)
    elif args.all_topics:
        scope = sorted(committed)
        if not scope:
            raise ToolError(f"Consumer group '{group}' has no committed offsets: name the topics with --topic")
    else:
        scope = []
        for topic, parts in parse_topic_scope(args.topic):
            have = api.partitions(topic)
            missing = [p for p in parts or () if p not in have]
            if missing:
                raise ToolError(f"Topic '{topic}' has no partition {missing[0]}")
            scope += [(topic, p) for p in (parts if parts is not None else have)]
    stamp = None
    if args.to_datetime:
        stamp = parse_datetime(args.to_datetime)
    elif args.by_duration:
        stamp = int(time.time() * 1000) - parse_duration_ms(args.by_duration)
    plan: dict[TP, int] = {}
    for tp in scope:
        logs = api.log_offsets(tp, stamp)
        start, end = int(logs["beginning_offset"]), int(logs["end_offset"])
        current = committed.get(tp)
        if args.to_earliest:
            target = start
        elif args.to_latest:
            target = end
        elif args.to_current:
            target = end if current is None else current
        elif args.to_offset is not None:
            target = args.to_offset
        elif args.shift_by is not None:
            if current is None:
                raise ToolError(f"Cannot shift offset for partition {tp[0]}-{tp[1]} since there is no current "
                                "committed offset")
            target = current + args.shift_by
        elif stamp is not None:
            found = logs.get("offset")
            target = end if found is None else int(found)
        else:
            target = wanted[tp]
        plan[tp] = clamp(target, start, end)
    return plan


def do_reset(api: Groups, args: argparse.Namespace) -> list[str]:
    names = args.group or [g["group"] for g in api.list()]
    out: list[str] = []
    if not args.dry_run and not args.execute:
        print("WARN: No action will be performed as the --execute option is missing. Add --dry-run to keep this "
              "behaviour without the warning, or --execute to reset.", file=sys.stderr)
    for group in names:
        state = api.describe(group).get("state")
        if state not in INACTIVE:
            raise ToolError(f"Assignments can only be reset if the group '{group}' is inactive, but the current "
                            f"state is {state}.")
        plan = plan_reset(api, args, group)
        if args.execute:
            body = {"offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(plan.items())]}
            api.client.request_json("POST", quote_path("groups", group, "offsets", "reset"), body)
        rows = [[group, t, p, o] for (t, p), o in sorted(plan.items())]
        out += ["", *common.format_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows, [30, 30, 10, 0])]
    return out


def do_delete(api: Groups, args: argparse.Namespace) -> list[str]:
    names = args.group or [g["group"] for g in api.list()]
    for group in names:
        try:
            api.client.request_json("DELETE", quote_path("groups", group))
        except GroupIdNotFoundError:
            raise ToolError(f"Group '{group}' could not be deleted due to: GROUP_ID_NOT_FOUND") from None
        except OdradekError as e:
            raise ToolError(f"Group '{group}' could not be deleted due to: {e.name}") from None
    quoted = ", ".join(f"'{g}'" for g in names)
    return [f"Deletion of requested consumer groups ({quoted}) was successful."]


def do_delete_offsets(api: Groups, args: argparse.Namespace) -> list[str]:
    group = args.group[0]
    api.describe(group)
    rows = []
    for topic, parts in parse_topic_scope(args.topic):
        query: dict[str, Any] = {"topic": topic}
        if parts is not None:
            query["partitions"] = ",".join(map(str, parts))
        try:
            api.client.request_json("DELETE", quote_path("groups", group, "offsets"), query=query)
        except OdradekError as e:
            if e.details.get("status") in (404, 405) or e.name == "METHOD_NOT_ALLOWED":
                raise ToolError("the brokers do not support deleting committed offsets yet "
                                "(DELETE /groups/{group}/offsets)") from None
            raise
        rows += [[topic, p, "Successful"] for p in (parts if parts is not None else ["all"])]
    return [f"Request succeed for deleting offsets with topic {', '.join(t for t, _ in parse_topic_scope(args.topic))}"
            f" group {group}", "", *common.format_table(["TOPIC", "PARTITION", "STATUS"], rows, [15, 10, 0])]


def _main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    action = validate(args)
    with common.admin(args) as client:
        api = Groups(client)
        lines = {"list": do_list, "describe": do_describe, "reset_offsets": do_reset, "delete": do_delete,
                 "delete_offsets": do_delete_offsets}[action](api, args)
    for line in lines:
        print(line)
    return 0


def main(argv: list[str]) -> int:
    return common.run(_main, argv)
