"""Broker settings: the command line's flags, with Kafka's names and defaults where Kafka has them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from broker.kafka.listeners import KafkaListener
from broker.security.settings import SecuritySettings
from odradek.protocol.model import KafkaEndpoint


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    broker_id: int
    zk_connect: str
    host: str
    port: int
    data_dir: Path
    rack: str | None = None
    # Kafka's advertised.listeners: the URL clients and other brokers are told to use, when it differs from the
    # listener (a broker listening on 0.0.0.0:9092 in a container that is reached at 127.0.0.1:9092).
    advertised_url: str | None = None
    # Kafka's zookeeper.session.timeout.ms is 18000 since 2.5; ours is shorter because a controller or
    # partition-leader failover after a crash takes about one session timeout (see README).
    zk_session_timeout_ms: int = 6000
    zk_connect_timeout_ms: int = 15000
    # Kafka's replica.lag.time.max.ms (10000 up to 2.4, 30000 since): how long a follower may lag before it
    # leaves the ISR. A topic's own "replica.lag.time.max.ms" config overrides it.
    replica_lag_time_max_ms: int = 10000
    max_request_bytes: int = 64 * 1024 * 1024
    # Kafka's log.retention.check.interval.ms: how often retention deletes old segments.
    log_retention_check_interval_ms: int = 300_000
    # Kafka's auto.leader.rebalance.enable, leader.imbalance.check.interval.seconds and
    # leader.imbalance.per.broker.percentage.
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_s: float = 300.0
    leader_imbalance_per_broker_percentage: int = 10
    # Kafka's offsets.retention.minutes (7 days since 2.0): an empty group's offsets are deleted after this long;
    # group.initial.rebalance.delay.ms (Kafka 3000; ours shorter): the stabilization window of an empty group.
    offsets_retention_minutes: int = 10080
    group_initial_rebalance_delay_ms: int = 300
    # Confluent REST Proxy's consumer.instance.timeout.ms: a v2 consumer instance idle this long is deleted.
    consumer_instance_timeout_ms: int = 300_000
    # Kafka's producer.id.expiration.ms (KIP-854; 1 day): an idempotent producer's state is forgotten this long
    # after its last write to a partition (docs/transactions.md, "Expiry").
    producer_id_expiration_ms: int = 86_400_000
    # NOT FOR PRODUCTION: a planted bug, off by default. With it on, acks=all is acknowledged after the leader's
    # own append, before the ISR has the write (and without min.insync.replicas), so acknowledged writes can be
    # lost. It exists only so that `odradek verify`'s self-test can prove the checker catches lost writes
    # (docs/verify.md, "A checker that can fail"); nothing else may set it.
    unsafe_ack_before_isr: bool = False
    # NOT FOR PRODUCTION either, two more planted bugs for the transactional checks (docs/verify.md): read_committed
    # reads served as read_uncommitted (aborted and open transactions' records: G1a), and a commit's marker left
    # off its last partition (a torn transaction).
    unsafe_read_uncommitted_as_committed: bool = False
    unsafe_partial_commit_markers: bool = False
    # Request limits (docs/http-api.md, "Limits"). Each bounds what one request from an allowed client may cost
    # the broker; a request over a limit is refused with a 4xx before anything is written.
    # Kafka's queued.max.request.bytes: request bytes being read at once, over all connections.
    queued_max_request_bytes: int = 128 * 1024 * 1024
    # Slow or partial requests: the headers must arrive within the first, the whole body within the second.
    request_header_timeout_ms: int = 10_000
    request_body_timeout_ms: int = 30_000
    # The hot routes (produce, the binary path, REST reads) served by broker/api/hot_routes.py's connections rather
    # than aiohttp's request cycle (behind the same security and client quotas); False: every request is aiohttp's.
    http_hot_routes: bool = True
    # The CPUs every thread of the broker runs on (broker/cpu_affinity.py); None: wherever the OS schedules them.
    cpu_affinity: frozenset[int] | None = None
    # The cap on a long-poll's wait (a read's timeout, a fetch's timeout_ms), like a consumer's fetch.max.wait.ms.
    fetch_max_wait_ms: int = 30_000
    # Records in one JSON produce request, and in one record batch (binary path, after decompression).
    max_records_per_request: int = 10_000
    max_records_per_batch: int = 100_000
    # A compressed batch may inflate to at most this many bytes (decompression bombs are refused on append).
    max_decompressed_batch_bytes: int = 32 * 1024 * 1024
    # KIP-578's max.partitions (cluster-wide) and a per-topic cap, checked when topics are created or grown.
    max_partitions: int = 10_000
    max_partitions_per_topic: int = 1_000
    # The longest topic config value accepted (ZooKeeper nodes hold 1 MiB; a config is never that big).
    max_config_value_bytes: int = 8 * 1024
    # Connections this broker keeps to other brokers (forwarded produces and reads, replica fetches).
    inter_broker_max_connections: int = 100
    # Logging: to stderr, or to a file rotated at log_max_bytes keeping log_backup_count old files (as Kafka's
    # log4j RollingFileAppender does), so that no stream of bad requests can fill the disk.
    log_file: Path | None = None
    log_max_bytes: int = 10 * 1024 * 1024
    log_backup_count: int = 5
    # Listeners, TLS, authentication, ACLs, ZooKeeper credentials (docs/security.md); the default is open.
    security: SecuritySettings = field(default_factory=SecuritySettings)
    # Kafka's wire protocol (broker/kafka/): Kafka's listeners (none: no Kafka listener), advertised.listeners
    # (empty: the listeners; what ZooKeeper's registration names), socket.request.max.bytes (a larger request
    # closes its connection) and connections.max.idle.ms.
    kafka_listeners: tuple[KafkaListener, ...] = ()
    kafka_advertised_listeners: tuple[KafkaListener, ...] = ()
    socket_request_max_bytes: int = 104_857_600
    connections_max_idle_ms: int = 600_000
    # Kafka's incremental fetch sessions (KIP-227, broker/fetch/sessions.py): how many this broker keeps, and how
    # long one must be unused (or have existed) before a new one may take its slot.
    max_incremental_fetch_session_cache_slots: int = 1000
    min_incremental_fetch_session_eviction_ms: int = 120_000
    # Kafka's sasl.enabled.mechanisms on the SASL_PLAINTEXT and SASL_SSL Kafka listeners (broker/kafka/sasl.py),
    # checked against the SCRAM credentials in /config/users.
    kafka_sasl_mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    # How followers replicate (broker/replication/replica_manager.py): "kafka", Kafka's way (one fetcher per
    # leader and fetcher id, one multi-partition Fetch per round in a fetch session, over one connection to the
    # leader's inter-broker Kafka listener), "http" (one long-poll per partition over the HTTP replica routes), or
    # "auto" (the default): kafka when this broker can (``effective_replica_fetch_transport``), else http. Kafka's
    # way costs a round what changed in the follower's session, where http costs a long-poll per partition: with
    # 1,000 idle partitions beside a loaded topic, 120-163 against 1,748 ms of CPU a second idle, and p50 4 against
    # 148 ms under load (docs/performance.md, bench/acks_all_load.py --idle-partitions).
    replica_fetch_transport: str = "auto"
    # Kafka's num.replica.fetchers: fetchers (connections) per leader broker, partitions hashed among them.
    num_replica_fetchers: int = 1
    # Kafka's inter.broker.listener.name, for the Kafka listeners: the one followers fetch from (by this name in
    # each leader's registration); None: the first Kafka listener. A SASL one is logged in to as
    # --inter-broker-user with Kafka's sasl.mechanism.inter.broker.protocol.
    kafka_inter_broker_listener_name: str | None = None
    sasl_mechanism_inter_broker_protocol: str = "SCRAM-SHA-256"

    @staticmethod
    def parse_listen(listen: str) -> tuple[str, int]:
        host, sep, port = listen.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"--listen must be HOST:PORT, got {listen!r}")
        return host or "127.0.0.1", int(port)

    def advertised_address(self) -> tuple[str, int]:
        """The host and port registered in ZooKeeper: the advertised URL's, else the listener's."""
        if not self.advertised_url:
            return self.host, self.port
        scheme, sep, rest = self.advertised_url.partition("://")
        if not sep or scheme.lower() not in ("http", "https"):
            raise ValueError(f"--advertised-url must be http(s)://HOST:PORT, got {self.advertised_url!r}")
        return self.parse_listen(rest.rstrip("/"))

    def effective_replica_fetch_transport(self) -> str:
        """``kafka`` or ``http``: ``auto`` is kafka when this broker has an inter-broker Kafka listener and, for a
        SASL one, a user to log in as; else http. (A leader without that listener is still followed over HTTP.)"""
        if self.replica_fetch_transport != "auto":
            return self.replica_fetch_transport
        try:
            listener = self.kafka_inter_broker_listener()
        except ValueError:
            return "http"
        if listener is None:
            return "http"
        if listener.sasl and not (self.security.inter_broker_user and self.security.inter_broker_password):
            return "http"
        return "kafka"

    def kafka_inter_broker_listener(self) -> KafkaListener | None:
        """The Kafka listener brokers replicate through (None: this broker has none); ValueError naming the flag
        when ``kafka_inter_broker_listener_name`` is not one of the listeners."""
        if not self.kafka_listeners:
            return None
        name = self.kafka_inter_broker_listener_name or self.kafka_listeners[0].name
        for lst in self.kafka_listeners:
            if lst.name == name:
                return lst
        raise ValueError(f"--kafka-inter-broker-listener-name {name} is not one of --kafka-listeners")

    def kafka_endpoints(self) -> tuple[KafkaEndpoint, ...]:
        """The Kafka endpoints registered in ZooKeeper: the advertised listeners, else the listeners."""
        return tuple(KafkaEndpoint(lst.name, lst.host, lst.port, lst.security_protocol)
                     for lst in self.kafka_advertised_listeners or self.kafka_listeners)
