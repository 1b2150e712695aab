"""The ``odradek`` command line: ``odradek broker ...`` runs one broker; ``odradek cluster ...`` runs a local
cluster. Every failure is a non-zero exit code with a one-line reason on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

DEFAULT_DATA_DIR = os.environ.get("ODRADEK_DATA_DIR", ".odradek")

# Request limits (BrokerConfig fields of the same names; docs/http-api.md "Limits"): flag -> help.
LIMIT_FLAGS: dict[str, str] = {
    "queued_max_request_bytes": "request body bytes being read at once over all connections (Kafka's name)",
    "request_header_timeout_ms": "a request's headers must arrive within this (slow requests are closed)",
    "request_body_timeout_ms": "a request's body must arrive within this (408 otherwise)",
    "fetch_max_wait_ms": "cap on a long-poll's wait (read timeout, fetch timeout_ms)",
    "max_records_per_request": "records in one JSON produce request",
    "max_records_per_batch": "records in one record batch",
    "max_decompressed_batch_bytes": "size a compressed batch may inflate to",
    "max_partitions": "partitions in the cluster (KIP-578's name)",
    "max_partitions_per_topic": "partitions in one topic",
    "max_config_value_bytes": "length of one topic config value",
    "inter_broker_max_connections": "connections to other brokers (forwarding, replication)",
    "log_max_bytes": "with --log-file: rotate the log at this size",
    "log_backup_count": "with --log-file: rotated logs kept",
}


def _broker(args: argparse.Namespace) -> int:
    from broker.config import BrokerConfig
    from broker.security.settings import from_args
    from broker.server import run_broker

    try:
        security = from_args(args)
        inter_broker = security.inter_broker()
    except ValueError as e:
        raise SystemExit(f"odradek broker: {e}") from None
    if inter_broker is not None:  # --listeners: the inter-broker listener is the registered address
        host, port = inter_broker.host, inter_broker.port
    elif args.listen:
        host, port = BrokerConfig.parse_listen(args.listen)
    else:
        raise SystemExit("odradek broker: give --listen HOST:PORT or --listeners NAME://HOST:PORT,...")
    config = BrokerConfig(
        broker_id=args.id,
        zk_connect=args.zk,
        host=host,
        port=port,
        data_dir=Path(args.data_dir),
        rack=args.rack,
        advertised_url=args.advertised_url,
        zk_session_timeout_ms=args.zk_session_timeout_ms,
        replica_lag_time_max_ms=args.replica_lag_time_max_ms,
        max_request_bytes=args.max_request_bytes,
        log_retention_check_interval_ms=args.log_retention_check_interval_ms,
        auto_leader_rebalance_enable=args.auto_leader_rebalance_enable == "true",
        leader_imbalance_check_interval_s=args.leader_imbalance_check_interval_seconds,
        leader_imbalance_per_broker_percentage=args.leader_imbalance_per_broker_percentage,
        offsets_retention_minutes=args.offsets_retention_minutes,
        group_initial_rebalance_delay_ms=args.group_initial_rebalance_delay_ms,
        consumer_instance_timeout_ms=args.consumer_instance_timeout_ms,
        **{name: getattr(args, name) for name in LIMIT_FLAGS},
        log_file=Path(args.log_file) if args.log_file else None,
        security=security,
    )
    return run_broker(config)


def _cluster_up(args: argparse.Namespace) -> int:
    from broker.localcluster import LocalCluster

    started = time.monotonic()
    cluster = LocalCluster(
        Path(args.data_dir),
        brokers=args.brokers,
        base_port=args.base_port,
        zookeepers=args.zookeepers,
        zk_base_port=args.zk_base_port,
        tick_ms=args.tick_ms,
        session_timeout_ms=args.session_timeout_ms,
        tls=args.tls,
        zk_digest=args.zk_digest or os.environ.get("ODRADEK_ZK_DIGEST"),
    )
    try:
        cluster.up(timeout=args.timeout)
    except BaseException:
        cluster.down()
        raise
    elapsed = time.monotonic() - started
    print(f"Odradek cluster up in {elapsed:.1f} s (data in {cluster.data_dir})")
    _print_status(cluster.status())
    return 0


def _print_status(status: dict) -> None:
    print(f"zookeeper: {status['zk_connect']}")
    for z in status["zookeepers"]:
        print(f"  zk {z['id']}: 127.0.0.1:{z['client_port']} pid {z['pid']} mode {z['mode']}")
    print(f"controller: broker {status['controller']}")
    if status.get("tls"):
        print(f"tls: CA {status['tls']['ssl_cafile']}, admin certificate {status['tls']['ssl_certfile']}")
    for b in status["brokers"]:
        state = "registered" if b["registered"] else ("running" if b["alive"] else "down")
        print(f"  broker {b['id']}: {b['url']} pid {b['pid']} {state}")


def _cluster_status(args: argparse.Namespace) -> int:
    from broker.localcluster import LocalCluster

    status = LocalCluster.load(Path(args.data_dir)).status()
    if args.json:
        print(json.dumps(status))
    else:
        _print_status(status)
    return 0


def _cluster_down(args: argparse.Namespace) -> int:
    from broker.localcluster import LocalCluster

    cluster = LocalCluster.load(Path(args.data_dir))
    cluster.down()
    print(f"Odradek cluster in {cluster.data_dir} is down")
    return 0


def _cluster_broker(args: argparse.Namespace) -> int:
    from broker.localcluster import LocalCluster

    cluster = LocalCluster.load(Path(args.data_dir))
    if args.action == "start":
        proc = cluster.start_broker(args.node_id, notify=lambda line: print(line, flush=True))
        print(f"broker {args.node_id} started (pid {proc.pid}) at {cluster.broker_url(args.node_id)}")
    elif args.action == "stop":
        cluster.stop_broker(args.node_id)
        print(f"broker {args.node_id} stopped")
    else:
        cluster.kill_broker(args.node_id)
        print(f"broker {args.node_id} killed")
    return 0


def _cluster_zookeeper(args: argparse.Namespace) -> int:
    from broker.localcluster import LocalCluster

    cluster = LocalCluster.load(Path(args.data_dir))
    ensemble = cluster.ensemble
    if args.node_id not in ensemble.nodes:
        raise SystemExit(f"odradek: no ZooKeeper node {args.node_id} (nodes are {sorted(ensemble.nodes)})")
    {"start": ensemble.start_node, "stop": ensemble.stop_node, "kill": ensemble.kill_node}[args.action](
        args.node_id
    )
    ensemble.save()
    print(f"zookeeper {args.node_id}: {args.action} done")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="odradek", description="Odradek: a ZooKeeper-coordinated commit log")
    sub = parser.add_subparsers(dest="command", required=True)
    from broker.tools import TOOLS

    for name, (_module, summary) in TOOLS.items():  # listed for --help; main() hands them over before parsing
        sub.add_parser(name, help=summary, add_help=False)
    sub.add_parser("verify", help="inject faults, read everything back, check (Jepsen-style)", add_help=False)

    b = sub.add_parser("broker", help="run one broker in the foreground")
    b.add_argument("--id", type=int, required=True, help="broker id (a non-negative integer)")
    b.add_argument("--zk", required=True, help="ZooKeeper connect string, e.g. 127.0.0.1:2181,127.0.0.1:2182/odradek")
    b.add_argument("--listen", default=None, help="HTTP listener HOST:PORT, e.g. 127.0.0.1:9092 (or --listeners)")
    b.add_argument("--data-dir", required=True, help="directory for this broker's logs")
    b.add_argument("--rack", default=None)
    b.add_argument("--advertised-url", default=None,
                   help="URL clients and brokers use to reach this one, e.g. http://127.0.0.1:9092 (default: --listen)")
    b.add_argument("--zk-session-timeout-ms", type=int, default=6000)
    b.add_argument("--replica-lag-time-max-ms", type=int, default=10000)
    b.add_argument("--max-request-bytes", type=int, default=64 * 1024 * 1024, help="larger requests get 413")
    b.add_argument("--log-retention-check-interval-ms", type=int, default=300_000)
    b.add_argument("--auto-leader-rebalance-enable", choices=("true", "false"), default="true")
    b.add_argument("--leader-imbalance-check-interval-seconds", type=float, default=300.0)
    b.add_argument("--leader-imbalance-per-broker-percentage", type=int, default=10)
    b.add_argument("--offsets-retention-minutes", type=int, default=10080, help="empty groups' offsets expire")
    b.add_argument("--group-initial-rebalance-delay-ms", type=int, default=300)
    from broker.config import BrokerConfig

    defaults = BrokerConfig(broker_id=0, zk_connect="", host="", port=0, data_dir=Path("."))
    b.add_argument("--log-file", default=None, help="log to this file, rotated (default: stderr)")
    from broker.security.settings import add_flags as add_security_flags

    add_security_flags(b)
    for name, help_ in LIMIT_FLAGS.items():
        b.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name), help=help_)
    b.add_argument("--consumer-instance-timeout-ms", type=int, default=300_000,
                   help="REST v2 consumer instances idle this long are deleted")
    b.set_defaults(func=_broker)

    c = sub.add_parser("cluster", help="a local cluster on 127.0.0.1").add_subparsers(dest="cluster_command",
                                                                                    required=True)
    data_dir = argparse.ArgumentParser(add_help=False)
    data_dir.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="default: $ODRADEK_DATA_DIR or .odradek")

    up = c.add_parser("up", parents=[data_dir], help="start ZooKeeper and brokers in the background")
    up.add_argument("--zookeepers", type=int, default=3, choices=(1, 3, 5))
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--base-port", type=int, default=9092, help="broker N listens on base-port + N - 1")
    up.add_argument("--zk-base-port", type=int, default=2181, help="ZooKeeper node N on zk-base-port + N - 1")
    up.add_argument("--tick-ms", type=int, default=2000, help="ZooKeeper tickTime")
    up.add_argument("--session-timeout-ms", type=int, default=6000, help="brokers' ZooKeeper session timeout")
    up.add_argument("--timeout", type=float, default=60.0)
    up.add_argument("--tls", action="store_true",
                    help="TLS + authentication + ACLs, with a throwaway CA in <data-dir>/tls (docs/security.md)")
    up.add_argument("--zk-digest", default=None,
                    help="USER:PASSWORD: brokers authenticate to ZooKeeper and set ACLs on every znode")
    up.set_defaults(func=_cluster_up)

    st = c.add_parser("status", parents=[data_dir], help="show what runs")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=_cluster_status)

    c.add_parser("down", parents=[data_dir], help="stop everything `up` started").set_defaults(func=_cluster_down)

    for name, func in (("broker", _cluster_broker), ("zookeeper", _cluster_zookeeper)):
        p = c.add_parser(name, parents=[data_dir], help=f"start, stop (SIGTERM) or kill (SIGKILL) one {name}")
        p.add_argument("action", choices=("start", "stop", "kill"))
        p.add_argument("node_id", type=int, metavar="ID")
        p.set_defaults(func=func)
    return parser


def main(argv: list[str] | None = None) -> int:
    from broker.tools import TOOLS, run_tool

    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in TOOLS:  # admin tools parse Kafka's options themselves (broker/tools)
        return run_tool(argv[0], argv[1:])
    if argv and argv[0] == "verify":  # the durability checker has its own parser (broker/verify/cli.py)
        from broker.verify.cli import main as verify_main

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
