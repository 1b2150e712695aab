"""``odradek cluster up|status|down|broker|zookeeper``: a local cluster on 127.0.0.1 (ZooKeeper JVMs and broker
processes this machine starts), with state in ``<data-dir>/cluster.json`` so later commands re-attach by pid.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

DEFAULT_DATA_DIR = os.environ.get("ODRADEK_DATA_DIR", ".odradek")


def _cluster_up(args: argparse.Namespace) -> int:
    from odradek_local.cluster import LocalCluster

    started = time.monotonic()
    broker_cpus = None
    if args.pin:
        from broker.cpu_affinity import cpu_list, split

        try:
            broker_cpus = {b: cpu_list(cpus) for b, cpus in split(os.sched_getaffinity(0), args.brokers).items()}
        except ValueError as e:
            raise SystemExit(f"odradek cluster up: {e}") from None
    cluster = LocalCluster(
        Path(args.data_dir),
        brokers=args.brokers,
        base_port=args.base_port,
        kafka_base_port=args.kafka_base_port,
        zookeepers=args.zookeepers,
        zk_base_port=args.zk_base_port,
        tick_ms=args.tick_ms,
        session_timeout_ms=args.session_timeout_ms,
        tls=args.tls,
        zk_digest=args.zk_digest or os.environ.get("ODRADEK_ZK_DIGEST"),
        broker_args=["--replica-fetch-transport", args.replica_fetch_transport] if args.replica_fetch_transport
        else None,
        broker_cpus=broker_cpus,
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
    if status.get("kafka_bootstrap"):
        print(f"kafka bootstrap.servers: {status['kafka_bootstrap']} "
              f"(security.protocol {status.get('kafka_security_protocol') or 'PLAINTEXT'})")
    for b in status["brokers"]:
        state = "registered" if b["registered"] else ("running" if b["alive"] else "down")
        kafka = f" kafka {b['kafka']}" if b.get("kafka") else ""
        print(f"  broker {b['id']}: {b['url']}{kafka} pid {b['pid']} {state}")


def _cluster_status(args: argparse.Namespace) -> int:
    from odradek_local.cluster import LocalCluster

    status = LocalCluster.load(Path(args.data_dir)).status()
    if args.json:
        print(json.dumps(status))
    else:
        _print_status(status)
    return 0


def _cluster_down(args: argparse.Namespace) -> int:
    from odradek_local.cluster import LocalCluster

    cluster = LocalCluster.load(Path(args.data_dir))
    cluster.down()
    print(f"Odradek cluster in {cluster.data_dir} is down")
    return 0


def _cluster_broker(args: argparse.Namespace) -> int:
    from odradek_local.cluster import LocalCluster

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
    from odradek_local.cluster import LocalCluster

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


def add_commands(sub: argparse._SubParsersAction) -> None:
    """The ``cluster`` sub-command and its own sub-commands, on the ``odradek`` parser's ``sub``."""
    c = sub.add_parser("cluster", help="a local cluster on 127.0.0.1").add_subparsers(dest="cluster_command",
                                                                                    required=True)
    data_dir = argparse.ArgumentParser(add_help=False)
    data_dir.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="default: $ODRADEK_DATA_DIR or .odradek")

    up = c.add_parser("up", parents=[data_dir], help="start ZooKeeper and brokers in the background")
    up.add_argument("--zookeepers", type=int, default=3, choices=(1, 3, 5))
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--base-port", type=int, default=8082,
                    help="broker N serves its REST API on base-port + N - 1 (Confluent REST Proxy's port)")
    up.add_argument("--kafka-base-port", type=int, default=9092,
                    help="broker N serves Kafka's protocol on kafka-base-port + N - 1 (SASL_SSL with --tls)")
    up.add_argument("--zk-base-port", type=int, default=2181, help="ZooKeeper node N on zk-base-port + N - 1")
    up.add_argument("--tick-ms", type=int, default=2000, help="ZooKeeper tickTime")
    up.add_argument("--session-timeout-ms", type=int, default=6000, help="brokers' ZooKeeper session timeout")
    up.add_argument("--timeout", type=float, default=60.0)
    up.add_argument("--pin", action="store_true",
                    help="give each broker CPUs of its own (--cpu-affinity; needs at least one CPU per broker)")
    up.add_argument("--tls", action="store_true",
                    help="TLS + authentication + ACLs, with a throwaway CA in <data-dir>/tls (docs/security.md)")
    up.add_argument("--zk-digest", default=None,
                    help="USER:PASSWORD: brokers authenticate to ZooKeeper and set ACLs on every znode")
    up.add_argument("--replica-fetch-transport", choices=("auto", "http", "kafka"), default=None,
                    help="the brokers' flag (default: theirs); with --tls, kafka fetches over SASL_SSL as the "
                         "inter-broker user (docs/security.md)")
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
