"""The ``odradek`` command: ``odradek broker`` (broker/cli.py), ``odradek cluster`` (odradek_local/cli.py),
``odradek verify`` (odradek_verify/cli.py) and Kafka's admin tools (``odradek topics|configs|...``, this package).
Every failure is a non-zero exit code with a one-line reason on stderr.
"""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    from broker.cli import add_arguments as add_broker_arguments
    from broker.cli import run as run_broker
    from odradek_local.cli import add_commands as add_cluster_commands
    from odradek_tools import TOOLS

    parser = argparse.ArgumentParser(prog="odradek", description="Odradek: a ZooKeeper-coordinated commit log")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (_module, summary) in TOOLS.items():  # listed for --help; main() hands them over before parsing
        sub.add_parser(name, help=summary, add_help=False)
    sub.add_parser("verify", help="inject faults, read everything back, check (Jepsen-style)", add_help=False)
    b = sub.add_parser("broker", help="run one broker in the foreground")
    add_broker_arguments(b)
    b.set_defaults(func=run_broker)
    add_cluster_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from odradek_tools import TOOLS, run_tool

    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in TOOLS:  # admin tools parse Kafka's options themselves (odradek_tools)
        return run_tool(argv[0], argv[1:])
    if argv and argv[0] == "verify":  # the durability checker has its own parser (odradek_verify/cli.py)
        from odradek_verify.cli import main as verify_main

        return verify_main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command != "broker":
        import logging

        logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # our own one-line reasons say it better
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except SystemExit:
        raise
    except Exception as e:  # one line, not a traceback: the reason is what the user needs
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"odradek: {reason}", file=sys.stderr)
        detail = "\n".join(str(e).splitlines()[1:])
        if detail:
            print(detail, file=sys.stderr)
        return 1
