"""``odradek acls`` (scripts/odradek-acls.sh): Kafka's kafka-acls.sh in its classic ZooKeeper mode.

Why ZooKeeper and not a broker: as AclCommand with ``--authorizer-properties zookeeper.connect=...``, the tool
writes the ACL znodes itself (zk/acls.py: a conditional write plus a change notification that every broker
watches), so ACLs can be set before any broker runs, and even when a broker's ACLs would refuse the operator.
On a cluster with ZooKeeper ACLs, the tool authenticates with $ODRADEK_ZK_DIGEST (the brokers' identity).

Output is Kafka's: ``Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:``
then one tab-indented ``(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)`` per entry.
"""

from __future__ import annotations

import argparse
import sys

from broker.security.authorizer import CLUSTER_NAME, normalize_operation
from odradek_tools import common
from odradek_tools.common import ToolError

PROG = "odradek-acls.sh"


def build_parser() -> argparse.ArgumentParser:
    p = common.parser(PROG, "Add, remove and list ACLs (Kafka's kafka-acls.sh, ZooKeeper mode).")
    p.add_argument("--zookeeper", metavar="HOST:PORT[/chroot]", help="the cluster's ZooKeeper connect string")
    p.add_argument("--authorizer-properties", metavar="zookeeper.connect=Z", help="as Kafka: zookeeper.connect=...")
    p.add_argument("--command-timeout-ms", type=int, default=30_000)
    action = p.add_mutually_exclusive_group()
    action.add_argument("--add", action="store_true")
    action.add_argument("--remove", action="store_true")
    action.add_argument("--list", action="store_true")
    p.add_argument("--force", action="store_true", help="--remove without asking")
    p.add_argument("--topic", action="append", default=[])
    p.add_argument("--group", action="append", default=[])
    p.add_argument("--transactional-id", action="append", default=[])
    p.add_argument("--cluster", action="store_true")
    p.add_argument("--resource-pattern-type", default="literal", type=str.lower,
                   choices=("literal", "prefixed", "any", "match"))
    p.add_argument("--allow-principal", action="append", default=[])
    p.add_argument("--deny-principal", action="append", default=[])
    p.add_argument("--allow-host", action="append", default=[])
    p.add_argument("--deny-host", action="append", default=[])
    p.add_argument("--principal", help="--list: only this principal's ACLs")
    p.add_argument("--operation", action="append", default=[])
    p.add_argument("--producer", action="store_true", help="Topic Write, Describe, Create")
    p.add_argument("--consumer", action="store_true", help="Topic Read, Describe and Group Read (needs --group)")
    p.add_argument("--idempotent", action="store_true", help="with --producer: Cluster IdempotentWrite")
    return p


def _connect(args: argparse.Namespace) -> str:
    if args.zookeeper:
        return str(args.zookeeper)
    prop = args.authorizer_properties or ""
    key, _, value = prop.partition("=")
    if key.strip() != "zookeeper.connect" or not value:
        raise ToolError("give --zookeeper Z or --authorizer-properties zookeeper.connect=Z")
    return value.strip()


def _resources(args: argparse.Namespace) -> list[tuple[str, str]]:
    out = [("Topic", t) for t in args.topic] + [("Group", g) for g in args.group]
    out += [("TransactionalId", x) for x in args.transactional_id]
    if args.cluster:
        out.append(("Cluster", CLUSTER_NAME))
    return out


def _entries(args: argparse.Namespace, resource_type: str) -> set[tuple[str, str, str, str]]:
    """(principal, permission, operation, host) for one resource type, from the flags."""
    if args.producer or args.consumer:
        ops = {"Topic": (["Write", "Describe", "Create"] if args.producer else [])
               + (["Read", "Describe"] if args.consumer else []),
               "Group": ["Read"] if args.consumer else [],
               "Cluster": ["IdempotentWrite"] if args.producer and args.idempotent else [],
               "TransactionalId": ["Write", "Describe"] if args.producer else []}[resource_type]
    else:
        ops = [normalize_operation(o) for o in args.operation] or ["All"]
    out: set[tuple[str, str, str, str]] = set()
    for permission, principals, hosts in (("Allow", args.allow_principal, args.allow_host),
                                          ("Deny", args.deny_principal, args.deny_host)):
        for principal in principals:
            if ":" not in principal:
                raise ToolError(f"principal {principal!r} must be TYPE:NAME, e.g. User:alice")
            for host in hosts or ["*"]:
                out |= {(principal, permission, op, host) for op in ops}
    return out


def pattern_string(resource_type: str, name: str, pattern: str) -> str:
    rtype = {"TransactionalId": "TRANSACTIONAL_ID"}.get(resource_type, resource_type.upper())
    return f"ResourcePattern(resourceType={rtype}, name={name}, patternType={pattern.upper()})"


def entry_string(e: object) -> str:
    op = "".join("_" + c if c.isupper() and i else c for i, c in enumerate(e.operation)).upper()  # type: ignore
    return (f"\t(principal={e.principal}, host={e.host}, operation={op}, "  # type: ignore[attr-defined]
            f"permissionType={e.permission.upper()})")  # type: ignore[attr-defined]


def _print(header: str, resource_type: str, name: str, pattern: str, entries: object) -> None:
    print(f"{header} `{pattern_string(resource_type, name, pattern)}`:")
    for e in sorted(entries):  # type: ignore[call-overload]
        print(entry_string(e))
    print()


def _main(argv: list[str]) -> int:
    from zk.acls import AclEntry, AclStore

    args = build_parser().parse_args(argv)
    if not (args.add or args.remove or args.list):
        raise ToolError("Command must include exactly one action: --list, --add, --remove")
    if args.consumer and not args.group:
        raise ToolError("--consumer requires --group")
    resources = _resources(args)
    if (args.add or args.remove) and not resources:
        raise ToolError("give a resource: --topic, --group, --transactional-id or --cluster")
    pattern = args.resource_pattern_type.upper()
    if (args.add or args.remove) and pattern not in ("LITERAL", "PREFIXED"):
        raise ToolError("--add and --remove take --resource-pattern-type literal or prefixed")
    with common.zk_session(_connect(args), args.command_timeout_ms) as zk:
        store = AclStore(zk)
        store.ensure_paths()
        if args.list:
            wanted = set(resources)
            for (rtype, name, pat), entries in sorted(store.list_all().items()):
                if wanted and (rtype, name) not in wanted:
                    continue
                if pattern in ("LITERAL", "PREFIXED") and args.resource_pattern_type != "any" and pat != pattern \
                        and resources:
                    continue
                shown = {e for e in entries if args.principal in (None, e.principal)}
                if shown:
                    _print("Current ACLs for resource", rtype, name, pat, shown)
            return 0
        for rtype, name in resources:
            entries = {AclEntry(*e) for e in _entries(args, rtype)}
            if args.add:
                if not entries:
                    continue
                _print("Adding ACLs for resource", rtype, name, pattern, entries)
                now = store.change(rtype, name, pattern, add=entries)
            else:
                if not args.force:
                    sys.stdout.write(f"Are you sure you want to remove ACLs: {pattern_string(rtype, name, pattern)}"
                                     " (y/n)\n")
                    if sys.stdin.readline().strip().lower() != "y":
                        continue
                now = store.change(rtype, name, pattern, remove=entries or None)
            _print("Current ACLs for resource", rtype, name, pattern, now)
    return 0


def main(argv: list[str]) -> int:
    return common.run(_main, argv)
