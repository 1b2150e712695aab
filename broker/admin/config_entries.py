"""How a config is described to Kafka's admin clients: its value, where the value comes from, its synonyms, type,
documentation and flags (Kafka's ``DescribeConfigsResourceResult``), for topics and brokers.

Pure functions over the values the admin services read (broker/admin/config_requests.py, and topic creation's
answer in broker/admin/topic_requests.py); the Kafka front door only renders the result.

Sources follow Kafka's ``configSynonyms``: a value's synonyms are listed most specific first (a topic override,
then a broker's dynamic config, the cluster-wide dynamic default, the broker's start-up setting, the built-in
default) and the config's source is its first synonym's. Odradek's logs take their defaults from
broker/log/config.py, not from broker-level ``log.*`` settings, so a topic config's synonyms are its override
(if any) and its built-in default under the broker name Kafka gives it (``retention.ms`` -> ``log.retention.ms``).
A broker config is read-only unless it is one of the dynamic broker configs (zk.configs.BROKER_CONFIGS). No
config here is sensitive (Odradek keeps no password in a topic or broker config), so values are never hidden.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

from broker.log.config import LogConfig


class ConfigSource(IntEnum):
    """Kafka's DescribeConfigsResponse.ConfigSource ids."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType(IntEnum):
    """Kafka's DescribeConfigsResponse.ConfigType ids (DescribeConfigs v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    sensitive: bool
    config_type: ConfigType
    documentation: str | None
    synonyms: tuple[ConfigSynonym, ...]


B, S, INT, L, D, LIST = (ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.LONG, ConfigType.DOUBLE,
                         ConfigType.LIST)

# Topic config -> (type, the broker config Kafka names as its synonym, documentation).
TOPIC_CONFIGS: dict[str, tuple[ConfigType, str, str]] = {
    "cleanup.policy": (LIST, "log.cleanup.policy",
                       "The retention policy of old log segments: delete, compact, or both."),
    "compression.type": (S, "compression.type",
                         "The final compression type of the topic: a codec, uncompressed, or producer (keep the "
                         "producer's)."),
    "delete.retention.ms": (L, "log.cleaner.delete.retention.ms",
                            "How long delete tombstones are kept in a compacted topic."),
    "file.delete.delay.ms": (L, "log.segment.delete.delay.ms",
                             "How long a deleted segment's files stay on disk before they are removed."),
    "flush.messages": (L, "log.flush.interval.messages",
                       "The number of messages after which the log is fsync'd."),
    "flush.ms": (L, "log.flush.interval.ms", "The time after which the log is fsync'd."),
    "follower.replication.throttled.replicas": (LIST, "follower.replication.throttled.replicas",
                                                "Replicas (partition:broker) whose follower fetches are throttled, "
                                                "or *."),
    "index.interval.bytes": (INT, "log.index.interval.bytes",
                             "How often (in bytes of log) an offset index entry is added."),
    "leader.replication.throttled.replicas": (LIST, "leader.replication.throttled.replicas",
                                              "Replicas (partition:broker) whose leader-side reads for followers "
                                              "are throttled, or *."),
    "max.compaction.lag.ms": (L, "log.cleaner.max.compaction.lag.ms",
                              "The longest a message stays ineligible for compaction."),
    "max.message.bytes": (INT, "message.max.bytes", "The largest record batch size allowed."),
    "message.downconversion.enable": (B, "log.message.downconversion.enable",
                                      "Whether down-conversion of message formats is enabled."),
    "message.format.version": (S, "log.message.format.version", "The message format version."),
    "message.timestamp.difference.max.ms": (L, "log.message.timestamp.difference.max.ms",
                                            "The largest difference allowed between a message's timestamp and "
                                            "the broker's."),
    "message.timestamp.type": (S, "log.message.timestamp.type",
                               "Whether a message's timestamp is its CreateTime or its LogAppendTime."),
    "min.cleanable.dirty.ratio": (D, "log.cleaner.min.cleanable.ratio",
                                  "The dirty share of a log above which it is compacted."),
    "min.compaction.lag.ms": (L, "log.cleaner.min.compaction.lag.ms",
                              "The least time a message stays uncompacted."),
    "min.insync.replicas": (INT, "min.insync.replicas",
                            "The least number of in-sync replicas that must acknowledge an acks=all write."),
    "preallocate": (B, "log.preallocate", "Whether segment files are preallocated."),
    "retention.bytes": (L, "log.retention.bytes",
                        "The largest size a partition's log may grow to before old segments are deleted."),
    "retention.ms": (L, "log.retention.ms", "How long a log segment is kept before it is deleted."),
    "segment.bytes": (INT, "log.segment.bytes", "The size of a log segment file."),
    "segment.index.bytes": (INT, "log.index.size.max.bytes", "The size of a segment's offset index."),
    "segment.jitter.ms": (L, "log.roll.jitter.ms", "The largest random jitter subtracted from segment.ms."),
    "segment.ms": (L, "log.roll.ms", "The time after which a segment is rolled even if not full."),
    "unclean.leader.election.enable": (B, "unclean.leader.election.enable",
                                       "Whether a replica outside the ISR may be elected leader as a last resort, "
                                       "at the cost of data loss."),
}
LIST_CONFIGS = frozenset(name for name, (kind, _, _) in TOPIC_CONFIGS.items() if kind == LIST) | {
    "log.cleanup.policy"}

# Broker configs: (type, documentation). Dynamic ones (zk.configs.BROKER_CONFIGS) are the not read-only ones.
BROKER_DOCS: dict[str, tuple[ConfigType, str]] = {
    "broker.id": (INT, "The broker's id."),
    "broker.rack": (S, "The broker's rack, for rack-aware replica placement."),
    "listeners": (S, "The broker's HTTP listener."),
    "log.dirs": (S, "The directory holding the broker's logs."),
    "zookeeper.connect": (S, "The ZooKeeper connect string, with the cluster's chroot."),
    "zookeeper.session.timeout.ms": (INT, "The broker's ZooKeeper session timeout."),
    "replica.lag.time.max.ms": (L, "How long a follower may lag before it leaves the ISR."),
    "log.retention.check.interval.ms": (L, "How often logs are checked for segments to delete."),
    "auto.leader.rebalance.enable": (B, "Whether the controller moves leadership back to preferred replicas."),
    "leader.imbalance.check.interval.seconds": (L, "How often the controller checks leader imbalance."),
    "leader.imbalance.per.broker.percentage": (INT, "The leader imbalance per broker that triggers a rebalance."),
    "leader.replication.throttled.rate": (L, "The leader-side replication throttle, bytes per second."),
    "follower.replication.throttled.rate": (L, "The follower-side replication throttle, bytes per second."),
    "replica.alter.log.dirs.io.max.bytes.per.second": (L, "The throttle of moves between log dirs."),
    "log.retention.ms": (L, "How long a log segment is kept before it is deleted."),
    "log.retention.bytes": (L, "The largest size a partition's log may grow to."),
    "log.segment.bytes": (INT, "The size of a log segment file."),
    "log.cleanup.policy": (LIST, "The default retention policy: delete, compact, or both."),
    "log.flush.interval.messages": (L, "The number of messages after which the log is fsync'd."),
    "log.flush.interval.ms": (L, "The time after which the log is fsync'd."),
    "message.max.bytes": (INT, "The largest record batch size allowed."),
    "min.insync.replicas": (INT, "The least number of in-sync replicas for an acks=all write."),
    "unclean.leader.election.enable": (B, "Whether unclean leader election is allowed."),
    "compression.type": (S, "The final compression type."),
    "quota.producer.default": (L, "The default produce quota, bytes per second."),
    "quota.consumer.default": (L, "The default fetch quota, bytes per second."),
}


def _topic_defaults() -> dict[str, str]:
    defaults = LogConfig().to_topic_config()
    defaults.setdefault("min.insync.replicas", "1")
    defaults.setdefault("unclean.leader.election.enable", "false")
    return defaults


_TOPIC_DEFAULTS = _topic_defaults()


def topic_entries(overrides: Mapping[str, str], effective: Mapping[str, str], *,
                  keys: Iterable[str] | None = None) -> list[ConfigEntry]:
    """A topic's configs (``effective``: every value, ``overrides``: the topic's own), sorted by name; ``keys``
    narrows to those names (unknown ones are left out, as Kafka does)."""
    wanted = None if keys is None else set(keys)
    out: list[ConfigEntry] = []
    for name in sorted(effective):
        if wanted is not None and name not in wanted:
            continue
        kind, broker_name, doc = TOPIC_CONFIGS.get(name, (ConfigType.UNKNOWN, "", ""))
        synonyms: list[ConfigSynonym] = []
        if name in overrides:
            synonyms.append(ConfigSynonym(name, overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        if broker_name and name in _TOPIC_DEFAULTS:
            synonyms.append(ConfigSynonym(broker_name, _TOPIC_DEFAULTS[name], ConfigSource.DEFAULT_CONFIG))
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        out.append(ConfigEntry(name, effective[name], source, read_only=False, sensitive=False, config_type=kind,
                               documentation=doc or None, synonyms=tuple(synonyms)))
    return out


def broker_entries(static: Mapping[str, str], dynamic: Mapping[str, str], dynamic_default: Mapping[str, str],
                   dynamic_names: Iterable[str], *, per_broker: bool,
                   keys: Iterable[str] | None = None) -> list[ConfigEntry]:
    """A broker's configs: ``per_broker`` (the broker itself) lists its static settings, its dynamic overrides
    and the cluster-wide dynamic defaults; the ``<default>`` entity (``per_broker`` False) lists the dynamic
    defaults alone, each with only its default synonym (Kafka's rule)."""
    layers: list[tuple[Mapping[str, str], ConfigSource]] = [(dynamic_default,
                                                             ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]
    if per_broker:
        layers = [(dynamic, ConfigSource.DYNAMIC_BROKER_CONFIG), *layers, (static, ConfigSource.STATIC_BROKER_CONFIG)]
    names: set[str] = set().union(*(layer for layer, _ in layers))
    wanted = None if keys is None else set(keys)
    dynamic_set = frozenset(dynamic_names)
    out: list[ConfigEntry] = []
    for name in sorted(names):
        if wanted is not None and name not in wanted:
            continue
        synonyms = tuple(ConfigSynonym(name, layer[name], source) for layer, source in layers if name in layer)
        kind, doc = BROKER_DOCS.get(name, (ConfigType.UNKNOWN, ""))
        out.append(ConfigEntry(name, synonyms[0].value, synonyms[0].source, read_only=name not in dynamic_set,
                               sensitive=False, config_type=kind, documentation=doc or None, synonyms=synonyms))
    return out


def list_default(name: str) -> str:
    """The default of a list-type config, what an incremental APPEND or SUBTRACT starts from when it is unset."""
    if name in ("cleanup.policy", "log.cleanup.policy"):
        return "delete"
    return ""
