"""``odradek console-producer`` (scripts/odradek-console-producer.sh): Kafka's kafka-console-producer.sh.

Every stdin line is one record, sent with the Python Producer (binary path, partition leaders directly). As
Kafka 2.8: ``--property parse.key=true`` splits a line at the first ``key.separator`` (default TAB) into key and
value, and a line without it fails ("No key found on line N: ...") unless ``ignore.error=true``; a ``>`` prompt
is printed only when stdin is a terminal (KAFKA-10565); ``--compression-codec`` alone means gzip. Producer
settings come from ``--producer-property k=v`` and ``--producer.config FILE`` (Kafka's names: acks, linger.ms,
batch.size, compression.type, retries, retry.backoff.ms, request.timeout.ms, delivery.timeout.ms,
max.block.ms), with the dedicated options (--request-required-acks, --timeout, ...) taking precedence.

The first failed send ends the tool with one line on stderr and exit code 1, so a pipeline notices.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import Future
from typing import Any, TextIO

from odradek.client.producer import Producer
from odradek.client.types import RecordMetadata
from odradek.protocol.errors import OdradekError
from odradek_tools import common
from odradek_tools.common import ToolError

PROG = "odradek-console-producer.sh"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
# Kafka producer config name -> (Producer keyword, converter)
PRODUCER_PROPERTIES: dict[str, tuple[str, Any]] = {
    "acks": ("acks", str),
    "linger.ms": ("linger_ms", float),
    "batch.size": ("batch_size", int),
    "compression.type": ("compression", str),
    "retries": ("retries", int),
    "retry.backoff.ms": ("retry_backoff_ms", int),
    "request.timeout.ms": ("request_timeout_ms", int),
    "delivery.timeout.ms": ("delivery_timeout_ms", int),
    "max.block.ms": ("max_block_ms", int),
    "max.request.size": ("max_request_size", int),
}
IGNORED_PROPERTIES = ("bootstrap.servers", "client.id", "key.serializer", "value.serializer")


def build_parser() -> argparse.ArgumentParser:
    p = common.parser(PROG, "Read lines from stdin and produce each as a record.")
    common.add_bootstrap(p, required=False)
    p.add_argument("--broker-list", help="deprecated alias of --bootstrap-server")
    p.add_argument("--topic", help="the topic to produce to")
    p.add_argument("--property", action="append", metavar="K=V",
                   help="line reader properties: parse.key, key.separator, ignore.error")
    p.add_argument("--producer-property", action="append", metavar="K=V", help="a producer config (acks=all, ...)")
    p.add_argument("--producer.config", dest="producer_config", metavar="FILE", help="producer configs, k=v lines")
    p.add_argument("--request-required-acks", help="acks: all, -1, 1 or 0 (default 1)")
    p.add_argument("--compression-codec", nargs="?", const="gzip", metavar="|".join(CODECS),
                   help="compress batches (given alone: gzip)")
    p.add_argument("--sync", action="store_true", help="wait for each record to be acknowledged before the next")
    p.add_argument("--batch-size", type=int, help="bytes of records per partition batch")
    p.add_argument("--timeout", type=float, metavar="MS", help="linger: how long a batch waits for more records")
    p.add_argument("--message-send-max-retries", type=int, help="retries")
    p.add_argument("--retry-backoff-ms", type=int)
    p.add_argument("--request-timeout-ms", type=int)
    return p


def read_properties_file(path: str) -> dict[str, str]:
    """Java .properties, the simple way: ``k=v`` lines, ``#``/``!`` comments."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ToolError(f"Cannot read properties file '{path}': {e.strerror or e}") from None
    items = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith(("#", "!"))]
    return common.parse_properties(items, f"line in {path}")


def producer_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Merge --producer.config, --producer-property and the dedicated options into Producer keywords."""
    props = read_properties_file(args.producer_config) if args.producer_config else {}
    props |= common.parse_properties(args.producer_property, "--producer-property")
    props.setdefault("acks", "1")  # Kafka's console producer default (--request-required-acks 1)
    if args.request_required_acks is not None:
        props["acks"] = args.request_required_acks
    if args.compression_codec is not None:
        props["compression.type"] = args.compression_codec
    for opt, key in (("batch_size", "batch.size"), ("timeout", "linger.ms"), ("retry_backoff_ms", "retry.backoff.ms"),
                     ("message_send_max_retries", "retries"), ("request_timeout_ms", "request.timeout.ms")):
        if getattr(args, opt) is not None:
            props[key] = str(getattr(args, opt))
    out: dict[str, Any] = {"max_block_ms": 10_000}
    for key, value in props.items():
        if key in IGNORED_PROPERTIES:
            continue
        if key not in PRODUCER_PROPERTIES:
            raise ToolError(f"Unknown producer property '{key}' (known: {', '.join(PRODUCER_PROPERTIES)})")
        name, convert = PRODUCER_PROPERTIES[key]
        try:
            out[name] = convert(value)
        except ValueError:
            raise ToolError(f"Invalid value '{value}' for producer property {key}") from None
    codec = str(out.get("compression", "none")).lower()
    if codec == "snappy":
        raise ToolError("compression snappy is not supported by Odradek (use gzip, lz4 or zstd)")
    if codec not in CODECS:
        raise ToolError(f"Unknown compression codec '{codec}' (one of {', '.join(CODECS)})")
    out["compression"] = None if codec == "none" else codec
    return out


class LineReader:
    """Kafka's LineMessageReader: a line -> (key, value) bytes under parse.key / key.separator / ignore.error."""

    def __init__(self, properties: dict[str, str]) -> None:
        unknown = set(properties) - {"parse.key", "key.separator", "ignore.error", "parse.headers"}
        if unknown:
            raise ToolError(f"Unknown --property {', '.join(sorted(unknown))} "
                            "(known: parse.key, key.separator, ignore.error)")
        if properties.get("parse.headers", "false").lower() == "true":
            raise ToolError("--property parse.headers=true is not supported yet")
        self.parse_key = properties.get("parse.key", "false").strip().lower() == "true"
        self.separator = properties.get("key.separator", "\t")
        self.ignore_error = properties.get("ignore.error", "false").strip().lower() == "true"
        if self.parse_key and not self.separator:
            raise ToolError("key.separator must not be empty")
        self.line_number = 0

    def parse(self, line: str) -> tuple[bytes | None, bytes]:
        self.line_number += 1
        if not self.parse_key:
            return None, line.encode()
        key, sep, value = line.partition(self.separator)
        if not sep:
            if self.ignore_error:
                return None, line.encode()
            raise ToolError(f"No key found on line {self.line_number}: {line}")
        return key.encode(), value.encode()


def produce_lines(producer: Producer, topic: str, reader: LineReader, stdin: TextIO, *, sync: bool,
                  prompt: bool) -> int:
    """Send every line; raise the first delivery failure as a ToolError. Returns the number of records."""
    pending: list[Future[RecordMetadata]] = []
    count = 0
    while True:
        if prompt:
            print(">", end="", flush=True)
        line = stdin.readline()
        if not line:
            break
        key, value = reader.parse(line.rstrip("\n").removesuffix("\r"))
        fut = producer.send(topic, value, key=key)
        count += 1
        if sync:
            _check(fut, topic)
        else:
            pending.append(fut)
            if fut.done():
                _check(fut, topic)
            if len(pending) >= 1000:
                pending = [f for f in pending if not f.done() or _check(f, topic)]
    producer.flush()
    for fut in pending:
        _check(fut, topic)
    return count


def _check(fut: Future[RecordMetadata], topic: str) -> bool:
    try:
        fut.result()
    except OdradekError as e:
        raise ToolError(f"Error when sending message to topic {topic}: {e.message} ({e.name})") from None
    return False


def _main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.broker_list and not args.bootstrap_server:
        args.bootstrap_server = args.broker_list
    if not args.bootstrap_server:
        raise ToolError("Missing required argument \"[bootstrap-server]\"")
    common.check_connection(args)
    if not args.topic:
        raise ToolError("Missing required argument \"[topic]\"")
    reader = LineReader(common.parse_properties(args.property, "--property"))
    kwargs = producer_kwargs(args)
    try:
        producer = Producer(args.bootstrap_server, **kwargs)
    except (OdradekError, ValueError) as e:
        raise ToolError(str(e)) from None
    try:
        producer.partitions_for(args.topic)  # an unknown topic fails now, with one clear line
        produce_lines(producer, args.topic, reader, sys.stdin, sync=args.sync, prompt=sys.stdin.isatty())
    finally:
        producer.close(timeout=5)
    return 0


def main(argv: list[str]) -> int:
    return common.run(_main, argv)
