"""``odradek console-consumer`` (scripts/odradek-console-consumer.sh): Kafka's kafka-console-consumer.sh.

Without ``--group`` it reads every partition of the topic (or ``--partition P`` from ``--offset``) with the
plain Consumer and commits nothing, as Kafka 2.x's console consumer turns auto-commit off for its random group.
With ``--group`` it is a member of that group (the GroupConsumer) and commits what it printed. The start is the
end of the log unless ``--from-beginning`` (which, with a group, only applies where it has no committed offset).

Records print as Kafka's DefaultMessageFormatter does: ``CreateTime:<ts>``, ``Partition:<p>``, ``Offset:<o>``,
headers (``k:v,k2:v2`` or ``NO_HEADERS``), key, value, each when its ``print.*`` property is true, separated by
``key.separator`` and ended by ``line.separator``; a null key or value prints as ``null.literal``. Bytes are
written as they are. It stops after ``--max-messages`` or when ``--timeout-ms`` pass without a record, and then
prints ``Processed a total of N messages`` on stderr.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from typing import Any, BinaryIO

from odradek.client.admin import AdminClient
from odradek.client.consumer import Consumer
from odradek.client.types import ConsumerRecord, TopicPartition
from odradek_tools import common
from odradek_tools.common import ToolError

PROG = "odradek-console-consumer.sh"
FORMATTER_PROPERTIES = ("print.timestamp", "print.key", "print.offset", "print.partition", "print.headers",
                        "print.value", "key.separator", "line.separator", "headers.separator", "null.literal",
                        "key.deserializer", "value.deserializer", "headers.deserializer")
CONSUMER_PROPERTIES: dict[str, tuple[str, Any]] = {
    "fetch.max.bytes": ("fetch_max_bytes", int),
    "max.partition.fetch.bytes": ("fetch_max_bytes", int),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", int),
    "request.timeout.ms": ("request_timeout_ms", int),
    "retry.backoff.ms": ("retry_backoff_ms", int),
    "session.timeout.ms": ("session_timeout_ms", int),
    "heartbeat.interval.ms": ("heartbeat_interval_ms", int),
    "client.id": ("client_id", str),
    "partition.assignment.strategy": ("partition_assignment_strategy", str),
}
IGNORED_PROPERTIES = ("bootstrap.servers", "group.id", "auto.offset.reset", "enable.auto.commit",
                      "key.deserializer", "value.deserializer", "isolation.level")
GROUP_ONLY = ("session_timeout_ms", "heartbeat_interval_ms", "client_id", "partition_assignment_strategy")


def build_parser() -> argparse.ArgumentParser:
    p = common.parser(PROG, "Read records and print them to stdout.")
    common.add_bootstrap(p)
    p.add_argument("--topic", help="the topic to read")
    p.add_argument("--whitelist", "--include", dest="whitelist", metavar="REGEX", help="every topic matching")
    p.add_argument("--partition", type=int, help="read only this partition")
    p.add_argument("--offset", default=None, metavar="earliest|latest|N", help="with --partition: where to start")
    p.add_argument("--from-beginning", action="store_true", help="start at the log start (no committed offset)")
    p.add_argument("--max-messages", type=int, help="stop after this many records")
    p.add_argument("--timeout-ms", type=int, help="stop after this long without a record")
    p.add_argument("--group", help="consume as a member of this consumer group")
    p.add_argument("--property", action="append", metavar="K=V", help="formatter: print.key=true, ...")
    p.add_argument("--consumer-property", action="append", metavar="K=V", help="a consumer config")
    p.add_argument("--consumer.config", dest="consumer_config", metavar="FILE", help="consumer configs, k=v lines")
    p.add_argument("--isolation-level", default="read_uncommitted", help="accepted; there are no transactions")
    p.add_argument("--skip-message-on-error", action="store_true", help="accepted for Kafka compatibility")
    return p


def validate(args: argparse.Namespace) -> None:
    common.check_connection(args)
    if bool(args.topic) == bool(args.whitelist):
        raise ToolError("Exactly one of --topic or --whitelist (--include) is required")
    if args.group and args.partition is not None:
        raise ToolError("Options group and partition cannot be specified together.")
    if args.offset is not None and args.partition is None:
        raise ToolError("The partition is required when offset is specified.")
    if args.offset is not None and args.from_beginning:
        raise ToolError("Options from-beginning and offset cannot be specified together.")
    if args.partition is not None and (args.partition < 0 or args.whitelist):
        raise ToolError("--partition must be non-negative and needs --topic")
    if args.offset is not None and args.offset not in ("earliest", "latest") and not args.offset.isdigit():
        raise ToolError(f"The provided offset value '{args.offset}' is incorrect. Valid values are 'earliest', "
                        "'latest', or a non-negative long.")
    if args.max_messages is not None and args.max_messages < 1:
        raise ToolError("--max-messages must be positive")
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise ToolError("--timeout-ms must not be negative")
    if args.whitelist:
        try:
            re.compile(args.whitelist)
        except re.error as e:
            raise ToolError(f"--whitelist is not a valid regular expression: {e}") from None


class Formatter:
    """Kafka's DefaultMessageFormatter."""

    def __init__(self, props: dict[str, str]) -> None:
        unknown = sorted(set(props) - set(FORMATTER_PROPERTIES))
        if unknown:
            raise ToolError(f"Unknown --property {', '.join(unknown)} (known: {', '.join(FORMATTER_PROPERTIES)})")

        def flag(name: str, default: bool = False) -> bool:
            value = props.get(name)
            if value is None:
                return default
            if value.strip().lower() not in ("true", "false"):
                raise ToolError(f"--property {name} must be true or false, not '{value}'")
            return value.strip().lower() == "true"

        self.timestamp, self.key, self.offset = flag("print.timestamp"), flag("print.key"), flag("print.offset")
        self.partition, self.headers, self.value = flag("print.partition"), flag("print.headers"), flag(
            "print.value", True)
        self.key_sep = _unescape(props.get("key.separator", "\t")).encode()
        self.line_sep = _unescape(props.get("line.separator", "\n")).encode()
        self.headers_sep = _unescape(props.get("headers.separator", ",")).encode()
        self.null = props.get("null.literal", "null").encode()

    def format(self, r: ConsumerRecord) -> bytes:
        fields: list[bytes] = []
        if self.timestamp:
            fields.append(b"NO_TIMESTAMP" if r.timestamp < 0 else f"CreateTime:{r.timestamp}".encode())
        if self.partition:
            fields.append(f"Partition:{r.partition}".encode())
        if self.offset:
            fields.append(f"Offset:{r.offset}".encode())
        if self.headers:
            fields.append(self.headers_sep.join(k.encode() + b":" + (self.null if v is None else v)
                                                for k, v in r.headers) if r.headers else b"NO_HEADERS")
        if self.key:
            fields.append(self.null if r.key is None else r.key)
        if self.value:
            fields.append(self.null if r.value is None else r.value)
        return self.key_sep.join(fields) + self.line_sep


def _unescape(text: str) -> str:
    """Kafka reads separators from the shell as-is; accept ``\\t`` and ``\\n`` spelled out as well."""
    return text.replace("\\t", "\t").replace("\\n", "\n").replace("\\r", "\r")


def consumer_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    from odradek_tools.console_producer import read_properties_file

    props = read_properties_file(args.consumer_config) if args.consumer_config else {}
    props |= common.parse_properties(args.consumer_property, "--consumer-property")
    out: dict[str, Any] = {}
    for key, value in props.items():
        if key in IGNORED_PROPERTIES:
            continue
        if key not in CONSUMER_PROPERTIES:
            raise ToolError(f"Unknown consumer property '{key}' (known: {', '.join(CONSUMER_PROPERTIES)})")
        name, convert = CONSUMER_PROPERTIES[key]
        try:
            out[name] = convert(value)
        except ValueError:
            raise ToolError(f"Invalid value '{value}' for consumer property {key}") from None
    if not args.group:
        extra = [k for k in GROUP_ONLY if k in out]
        if extra:
            raise ToolError(f"{', '.join(extra)} only apply with --group")
    return out


def _topics(admin: AdminClient, args: argparse.Namespace) -> dict[str, int]:
    """Topic -> partition count of what to read; an unknown topic or partition fails here."""
    body = admin.request_json("GET", "/metadata")
    counts = {t["name"]: len(t.get("partitions") or ()) for t in body.get("topics") or () if not t.get("error")}
    if args.topic:
        if args.topic not in counts:
            raise ToolError(f"Topic '{args.topic}' does not exist")
        if args.partition is not None and args.partition >= counts[args.topic]:
            raise ToolError(f"Topic '{args.topic}' has no partition {args.partition} "
                            f"(it has {counts[args.topic]})")
        return {args.topic: counts[args.topic]}
    regex = re.compile(args.whitelist)
    return {t: n for t, n in counts.items() if regex.fullmatch(t)}


def _open_consumer(args: argparse.Namespace, topics: dict[str, int], kwargs: dict[str, Any]) -> Consumer:
    reset = "earliest" if args.from_beginning else "latest"
    if args.group:
        from odradek.client.group_consumer import GroupConsumer

        group = GroupConsumer(args.bootstrap_server, group_id=args.group, enable_auto_commit=False,
                              auto_offset_reset=reset, **kwargs)
        if args.topic:
            group.subscribe([args.topic])
        else:
            group.subscribe(pattern=args.whitelist)
        return group
    consumer = Consumer(args.bootstrap_server, auto_offset_reset=reset, **kwargs)
    if args.partition is not None:
        tp = TopicPartition(args.topic, args.partition)
        consumer.assign([tp])
        if args.offset == "earliest":
            consumer.seek_to_beginning(tp)
        elif args.offset is not None and args.offset != "latest":
            consumer.seek(tp, int(args.offset))
        elif args.offset == "latest":
            consumer.seek_to_end(tp)
    else:
        consumer.assign([TopicPartition(t, p) for t, n in sorted(topics.items()) for p in range(n)])
    return consumer


def consume(consumer: Consumer, formatter: Formatter, out: BinaryIO, *, max_messages: int | None,
            timeout_ms: int | None, group: bool) -> int:
    """Print records until max_messages or timeout_ms idle; commit printed positions when in a group."""
    count = 0
    idle_since = time.monotonic()
    done: dict[TopicPartition, int] = {}
    while max_messages is None or count < max_messages:
        remaining = None if max_messages is None else max_messages - count
        batch = consumer.poll(timeout_ms=200, max_records=remaining)
        for tp, records in batch.items():
            for r in records:
                if max_messages is not None and count >= max_messages:
                    break
                out.write(formatter.format(r))
                count += 1
                done[tp] = r.offset + 1
        if batch:
            out.flush()
            idle_since = time.monotonic()
        elif timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= timeout_ms:
            break
    out.flush()
    if group and done:
        consumer.commit(dict(done))  # type: ignore[attr-defined]
    return count


def _main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    validate(args)
    formatter = Formatter(common.parse_properties(args.property, "--property"))
    kwargs = consumer_kwargs(args)
    with common.admin(args) as admin:
        topics = _topics(admin, args)
    consumer = _open_consumer(args, topics, kwargs)
    count = 0
    try:
        count = consume(consumer, formatter, sys.stdout.buffer, max_messages=args.max_messages,
                        timeout_ms=args.timeout_ms, group=bool(args.group))
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    return common.run(_main, argv)
