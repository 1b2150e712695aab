"""What every admin tool shares: Kafka-style option parsing, one-line failures, the admin client, table printing.

Why one module: a Kafka operator expects every tool to fail the same way (one reason, non-zero exit) and to
take the same connection options, so those rules are written once. Nothing here prints except ``run``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import orjson

from odradek.client.admin import AdminClient
from odradek.client.security import security_from_env
from odradek.protocol.errors import OdradekError


class ToolError(Exception):
    """A failure the user should read: its message is the whole (one-line) report."""


class ToolArgumentParser(argparse.ArgumentParser):
    """argparse that raises ToolError (one line) instead of printing usage and exiting with 2."""

    def error(self, message: str) -> NoReturn:
        raise ToolError(f"{message} (see --help)")


def parser(prog: str, description: str) -> ToolArgumentParser:
    return ToolArgumentParser(prog=prog, description=description, allow_abbrev=False,
                              formatter_class=argparse.RawDescriptionHelpFormatter)


def add_bootstrap(p: argparse.ArgumentParser, *, zookeeper: bool = False, required: bool = True) -> None:
    p.add_argument("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT]",
                   help="any broker's HTTP address (http:// optional)" + (" (or --zookeeper)" if zookeeper else ""))
    if zookeeper:
        p.add_argument("--zookeeper", metavar="HOST:PORT[,..][/chroot]",
                       help="ZooKeeper connect string: write the znodes directly, as Kafka's ZooKeeper-era tool")
    p.add_argument("--command-timeout-ms", type=int, default=30_000, metavar="MS",
                   help="give up on the cluster after this long (default 30000)")
    p.set_defaults(_bootstrap_required=required, _zookeeper_allowed=zookeeper)


def check_connection(args: argparse.Namespace) -> None:
    """Exactly one of --bootstrap-server / --zookeeper (where the tool takes the latter)."""
    zk = getattr(args, "zookeeper", None)
    if args.bootstrap_server and zk:
        raise ToolError("Only one of --bootstrap-server or --zookeeper must be specified")
    if not args.bootstrap_server and not zk and args._bootstrap_required:
        raise ToolError("Missing required argument \"[bootstrap-server]\"" +
                        (" (or --zookeeper)" if args._zookeeper_allowed else ""))
    if args.command_timeout_ms <= 0:
        raise ToolError("--command-timeout-ms must be positive")


def admin(args: argparse.Namespace) -> AdminClient:
    try:
        return AdminClient(args.bootstrap_server, request_timeout_ms=args.command_timeout_ms, **security_from_env())
    except ValueError as e:
        raise ToolError(f"--bootstrap-server: {e}") from None


@contextmanager
def zk_session(connect: str, timeout_ms: int) -> Iterator[Any]:
    """A ZooKeeper session for --zookeeper mode, closed on the way out."""
    from zk.configs import open_admin_session

    zk = open_admin_session(connect, max(1.0, timeout_ms / 1000))
    try:
        yield zk
    finally:
        zk.close()


def run(main: Callable[[list[str]], int], argv: Sequence[str], *, prefix: str = "Error: ") -> int:
    """Run a tool: 0 on success; on any failure one line on stderr and exit code 1 (130 on Ctrl-C)."""
    import logging

    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    try:
        return main(list(argv))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `... | head`: the reader left, which is not our failure
        sys.stderr.close()
        return 0
    except ToolError as e:
        return fail(f"{prefix}{e}")
    except OdradekError as e:
        return fail(f"{prefix}{e.message} ({e.name})")
    except OSError as e:
        return fail(f"{prefix}{e}")


def fail(message: str) -> int:
    line = " ".join(str(message).split())  # one line, whatever the reason contained
    print(line, file=sys.stderr)
    return 1


# ------------------------------------------------------------------------------------------------- parsing


def parse_properties(items: Sequence[str] | None, what: str) -> dict[str, str]:
    """``["k=v", "k2=v2"]`` (repeatable ``--property``/``--config``) -> dict; a bare key is an error."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ToolError(f"Invalid {what} '{item}': expected key=value")
        out[key.strip()] = value
    return out


def parse_config_list(text: str) -> dict[str, str]:
    """Kafka's ``--add-config 'k1=v1,k2=[a,b,c]'``: commas separate entries, brackets group a value's commas."""
    out: dict[str, str] = {}
    for entry in _split_top_level(text):
        if not entry.strip():
            continue
        key, sep, value = entry.partition("=")
        if not sep or not key.strip():
            raise ToolError(f"Invalid entity config: all configs to be added must be in the format \"key=val\": "
                            f"'{entry}'")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[key.strip()] = value
    if not out:
        raise ToolError("--add-config names no config")
    return out


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ToolError(f"Unbalanced ']' in config list '{text}'")
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth:
        raise ToolError(f"Unbalanced '[' in config list '{text}'")
    parts.append("".join(current))
    return parts


def parse_key_list(text: str) -> list[str]:
    keys = [k.strip() for k in text.split(",") if k.strip()]
    if not keys:
        raise ToolError("--delete-config names no config")
    return keys


def load_json_file(path: str, what: str) -> Any:
    """Read a JSON file, failing with one line that names the file and the reason."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ToolError(f"Cannot read {what} '{path}': {e.strerror or e}") from None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise ToolError(f"{what} '{path}' is not valid JSON: {e}") from None


def topic_partitions_from_json(data: Any, path: str) -> list[tuple[str, int]]:
    """``{"partitions": [{"topic": "t", "partition": 0}]}`` (the election tools' file) -> pairs, no duplicates."""
    if not isinstance(data, dict) or not isinstance(data.get("partitions"), list):
        raise ToolError(f"'{path}' must be {{\"partitions\": [{{\"topic\": ..., \"partition\": ...}}]}}")
    out: list[tuple[str, int]] = []
    for item in data["partitions"]:
        if (not isinstance(item, dict) or not isinstance(item.get("topic"), str)
                or not isinstance(item.get("partition"), int) or isinstance(item.get("partition"), bool)
                or item["partition"] < 0):
            raise ToolError(f"'{path}': every partition needs a string \"topic\" and a non-negative "
                            f"integer \"partition\", not {orjson.dumps(item).decode()[:100]}")
        out.append((item["topic"], item["partition"]))
    dups = sorted({f"{t}-{p}" for t, p in out if out.count((t, p)) > 1})
    if dups:
        raise ToolError(f"Replica election data contains duplicate partitions: {', '.join(dups)}")
    return out


def topic_regex(pattern: str) -> re.Pattern[str]:
    """Kafka's ``--topic`` is a (Java) regex matched against the whole name."""
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ToolError(f"--topic '{pattern}' is not a valid regular expression: {e}") from None


# ------------------------------------------------------------------------------------------------ printing


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], min_widths: Sequence[int] = ()) -> list[str]:
    """Left-aligned columns padded to the widest value, one space apart, the last column unpadded (as the
    ConsumerGroupCommand prints); a None cell prints as ``-``."""
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells), min_widths[i] if i < len(min_widths) else 0])
              for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        padded = [v.ljust(widths[i]) for i, v in enumerate(values[:-1])] + [values[-1]]
        return " ".join(padded).rstrip()

    return [line(list(headers)), *(line(r) for r in cells)]
