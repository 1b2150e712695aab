"""``odradek broker``: one broker in the foreground, its flags and their mapping onto BrokerConfig.

``python -m broker --id 1 --zk ... --listen ...`` runs the same. The ``odradek`` command (odradek_tools/cli.py)
mounts these flags as its ``broker`` sub-command; the broker image's entry point reads them from here too. Every
failure is a non-zero exit code with a one-line reason on stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.config import BrokerConfig

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


def run(args: argparse.Namespace) -> int:
    """Run the broker the parsed flags describe, until it stops."""
    from broker.config import BrokerConfig
    from broker.security.settings import from_args
    from broker.server import run_broker

    try:
        security = from_args(args)
        inter_broker = security.inter_broker()
    except ValueError as e:
        raise SystemExit(f"odradek broker: {e}") from None
    if args.producer_id_expiration_ms < 1:
        raise SystemExit("odradek broker: --producer-id-expiration-ms must be at least 1")
    cpu_affinity = None
    if args.cpu_affinity is not None:
        from broker.cpu_affinity import parse_cpu_list

        try:
            cpu_affinity = parse_cpu_list(args.cpu_affinity)  # applied by run_broker, before any thread starts
        except ValueError as e:
            raise SystemExit(f"odradek broker: {e}") from None
    from broker.kafka.listeners import advertised, check_tls, parse_kafka_listeners, parse_protocol_map
    from broker.security.sasl import parse_mechanisms

    try:  # Kafka's wire protocol: a one-line reason (e.g. a protocol not served) refuses to start
        protocols = parse_protocol_map(args.kafka_listener_security_protocol_map)
        kafka_listeners = parse_kafka_listeners(args.kafka_listeners, protocol_map=protocols) \
            if args.kafka_listeners else ()
        check_tls(kafka_listeners, security)
        kafka_advertised = advertised(kafka_listeners, args.kafka_advertised_listeners)
        kafka_sasl_mechanisms = parse_mechanisms(args.kafka_sasl_enabled_mechanisms)
    except ValueError as e:
        raise SystemExit(f"odradek broker: {e}") from None
    if args.num_replica_fetchers < 1:
        raise SystemExit("odradek broker: --num-replica-fetchers must be at least 1")
    if args.socket_request_max_bytes < 1 or args.connections_max_idle_ms < 1:
        raise SystemExit("odradek broker: --socket-request-max-bytes and --connections-max-idle-ms must be positive")
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
        producer_id_expiration_ms=args.producer_id_expiration_ms,
        unsafe_ack_before_isr=args.unsafe_ack_before_isr,
        unsafe_read_uncommitted_as_committed=args.unsafe_read_uncommitted_as_committed,
        unsafe_partial_commit_markers=args.unsafe_partial_commit_markers,
        **{name: getattr(args, name) for name in LIMIT_FLAGS},
        http_hot_routes=args.http_hot_routes,
        cpu_affinity=cpu_affinity,
        log_file=Path(args.log_file) if args.log_file else None,
        security=security,
        kafka_listeners=kafka_listeners,
        kafka_advertised_listeners=kafka_advertised,
        socket_request_max_bytes=args.socket_request_max_bytes,
        connections_max_idle_ms=args.connections_max_idle_ms,
        max_incremental_fetch_session_cache_slots=args.max_incremental_fetch_session_cache_slots,
        min_incremental_fetch_session_eviction_ms=args.min_incremental_fetch_session_eviction_ms,
        kafka_sasl_mechanisms=kafka_sasl_mechanisms,
        replica_fetch_transport=args.replica_fetch_transport,
        num_replica_fetchers=args.num_replica_fetchers,
        kafka_inter_broker_listener_name=(args.kafka_inter_broker_listener_name or "").upper() or None,
        sasl_mechanism_inter_broker_protocol=args.sasl_mechanism_inter_broker_protocol,
    )
    try:
        check_replica_fetch_transport(config)
    except ValueError as e:
        raise SystemExit(f"odradek broker: {e}") from None
    if config.unsafe_ack_before_isr:
        print("odradek broker: WARNING: --unsafe-ack-before-isr is on: acks=all is acknowledged before the ISR "
              "has the write, and acknowledged writes can be lost (a planted bug for testing odradek verify only)",
              file=sys.stderr, flush=True)
    for on, flag in ((config.unsafe_read_uncommitted_as_committed, "--unsafe-read-uncommitted-as-committed"),
                     (config.unsafe_partial_commit_markers, "--unsafe-partial-commit-markers")):
        if on:
            print(f"odradek broker: WARNING: {flag} is on: a planted transaction bug for testing odradek verify "
                  "only; read_committed readers will see what they must not", file=sys.stderr, flush=True)
    return run_broker(config)


def check_replica_fetch_transport(config: BrokerConfig) -> None:
    """Followers fetching over Kafka's protocol need a Kafka listener to fetch through (by name in every leader's
    registration), and, on a SASL one, this broker's own user to log in as; ValueError with a one-line reason."""
    if config.replica_fetch_transport != "kafka":
        return
    listener = config.kafka_inter_broker_listener()
    if listener is None:
        raise ValueError("--replica-fetch-transport kafka needs --kafka-listeners (followers fetch through the "
                         "inter-broker Kafka listener)")
    if listener.sasl and not (config.security.inter_broker_user and config.security.inter_broker_password):
        raise ValueError(f"--replica-fetch-transport kafka through the SASL listener {listener} needs "
                         "--inter-broker-user and $ODRADEK_INTER_BROKER_PASSWORD")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Every ``odradek broker`` flag, on ``p``."""
    p.add_argument("--id", type=int, required=True, help="broker id (a non-negative integer)")
    p.add_argument("--zk", required=True, help="ZooKeeper connect string, e.g. 127.0.0.1:2181,127.0.0.1:2182/odradek")
    p.add_argument("--listen", default=None, help="HTTP listener HOST:PORT, e.g. 127.0.0.1:9092 (or --listeners)")
    p.add_argument("--data-dir", required=True, help="directory for this broker's logs")
    p.add_argument("--rack", default=None)
    p.add_argument("--advertised-url", default=None,
                   help="URL clients and brokers use to reach this one, e.g. http://127.0.0.1:9092 (default: --listen)")
    p.add_argument("--zk-session-timeout-ms", type=int, default=6000)
    p.add_argument("--replica-lag-time-max-ms", type=int, default=10000)
    p.add_argument("--max-request-bytes", type=int, default=64 * 1024 * 1024, help="larger requests get 413")
    p.add_argument("--log-retention-check-interval-ms", type=int, default=300_000)
    p.add_argument("--auto-leader-rebalance-enable", choices=("true", "false"), default="true")
    p.add_argument("--leader-imbalance-check-interval-seconds", type=float, default=300.0)
    p.add_argument("--leader-imbalance-per-broker-percentage", type=int, default=10)
    p.add_argument("--offsets-retention-minutes", type=int, default=10080, help="empty groups' offsets expire")
    p.add_argument("--group-initial-rebalance-delay-ms", type=int, default=300)
    from broker.config import BrokerConfig

    defaults = BrokerConfig(broker_id=0, zk_connect="", host="", port=0, data_dir=Path("."))
    p.add_argument("--log-file", default=None, help="log to this file, rotated (default: stderr)")
    from broker.security.settings import add_flags as add_security_flags

    add_security_flags(p)
    for name, help_ in LIMIT_FLAGS.items():
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name), help=help_)
    p.add_argument("--no-http-hot-routes", dest="http_hot_routes", action="store_false",
                   help="serve the hot routes (produce, the binary path, REST reads) by aiohttp's request cycle too "
                        "(default: by the broker's own connections, behind the same security and client quotas)")
    p.add_argument("--cpu-affinity", default=None, metavar="CPUS",
                   help="run every thread of the broker on these CPUs, a list such as 1 or 0,2-3 (as Redis's "
                        "server_cpulist; default: wherever the OS schedules them)")
    p.add_argument("--consumer-instance-timeout-ms", type=int, default=300_000,
                   help="REST v2 consumer instances idle this long are deleted")
    p.add_argument("--producer-id-expiration-ms", type=int, default=defaults.producer_id_expiration_ms,
                   help="an idle idempotent producer's state is forgotten after this (Kafka's name)")
    g = p.add_argument_group("Kafka protocol (Kafka clients: librdkafka, the Java client, kcat)")
    g.add_argument("--kafka-listeners", default=None,
                   help="Kafka's listeners, e.g. PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9093 (PLAINTEXT, "
                        "SSL, SASL_PLAINTEXT, SASL_SSL; TLS from --ssl-certfile/--ssl-keyfile; default: none)")
    g.add_argument("--kafka-listener-security-protocol-map", default=None,
                   help="NAME:PROTOCOL,... for listener names that are not protocol names, e.g. INTERNAL:SASL_SSL")
    g.add_argument("--kafka-sasl-enabled-mechanisms", default=",".join(defaults.kafka_sasl_mechanisms),
                   help="SASL mechanisms of the SASL_* Kafka listeners (Kafka's sasl.enabled.mechanisms), against "
                        "the SCRAM credentials in /config/users")
    g.add_argument("--kafka-advertised-listeners", default=None,
                   help="what clients are told to connect to, e.g. PLAINTEXT://host.example:9092 "
                        "(default: --kafka-listeners)")
    g.add_argument("--socket-request-max-bytes", type=int, default=defaults.socket_request_max_bytes,
                   help="a larger Kafka request closes its connection (Kafka's name)")
    g.add_argument("--connections-max-idle-ms", type=int, default=defaults.connections_max_idle_ms,
                   help="idle Kafka connections are closed after this (Kafka's name)")
    g.add_argument("--max-incremental-fetch-session-cache-slots", type=int,
                   default=defaults.max_incremental_fetch_session_cache_slots,
                   help="incremental fetch sessions (KIP-227) this broker keeps; 0: none (Kafka's name)")
    g.add_argument("--min-incremental-fetch-session-eviction-ms", type=int,
                   default=defaults.min_incremental_fetch_session_eviction_ms,
                   help="a fetch session unused this long may be evicted for a new one (Kafka's name)")
    g = p.add_argument_group("replication")
    g.add_argument("--replica-fetch-transport", choices=("auto", "http", "kafka"),
                   default=defaults.replica_fetch_transport,
                   help="how followers fetch: kafka (one multi-partition Fetch per leader per round in a fetch "
                        "session, over the inter-broker Kafka listener), http (one long-poll per partition), or "
                        "auto (the default: kafka when this broker has a Kafka listener it can use, else http); "
                        "with kafka or auto, a leader without that listener is followed over http")
    g.add_argument("--num-replica-fetchers", type=int, default=defaults.num_replica_fetchers,
                   help="fetchers (connections) per leader with --replica-fetch-transport kafka (Kafka's name)")
    g.add_argument("--kafka-inter-broker-listener-name", default=None,
                   help="the Kafka listener followers fetch through (Kafka's inter.broker.listener.name; "
                        "default: the first of --kafka-listeners)")
    g.add_argument("--sasl-mechanism-inter-broker-protocol", choices=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
                   default=defaults.sasl_mechanism_inter_broker_protocol,
                   help="how --inter-broker-user logs in on a SASL inter-broker Kafka listener (Kafka's name)")
    p.add_argument("--unsafe-ack-before-isr", action="store_true",
                   help="testing odradek verify only: acknowledges writes the ISR may not have (never in production)")
    # Hidden: planted transaction bugs for odradek verify's self-test (docs/verify.md, "A checker that can fail").
    p.add_argument("--unsafe-read-uncommitted-as-committed", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--unsafe-partial-commit-markers", action="store_true", help=argparse.SUPPRESS)


def build_parser(prog: str = "odradek broker") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="run one broker in the foreground")
    add_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    return run(build_parser("python -m broker").parse_args(sys.argv[1:] if argv is None else argv))
