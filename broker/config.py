"""Broker settings: the command line's flags, with Kafka's names and defaults where Kafka has them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    broker_id: int
    zk_connect: str
    host: str
    port: int
    data_dir: Path
    rack: str | None = None
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

    @staticmethod
    def parse_listen(listen: str) -> tuple[str, int]:
        host, sep, port = listen.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"--listen must be HOST:PORT, got {listen!r}")
        return host or "127.0.0.1", int(port)
