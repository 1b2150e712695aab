"""Per-log settings, read from Kafka's topic-config names and string values.

The broker hands us the dict stored in ZooKeeper's ``/config/topics/<topic>`` (merged over the broker's
defaults), so every value arrives as a string with Kafka's name. Parsing and range checks live here, once:
a bad value raises :class:`InvalidConfigError` naming the key, at topic-creation or config-change time,
rather than as a surprise deep inside a segment roll. Names that are valid Kafka topic configs but that the
log does not act on (``min.insync.replicas``, ``compression.type``, ...) are accepted and kept in
``extra`` so the broker can use them; names Kafka does not know are refused, as Kafka's AdminClient would.

Defaults are Kafka 2.8's. The flush defaults deserve a word: ``flush.messages`` and ``flush.ms`` are
``Long.MAX_VALUE``, i.e. never fsync on a schedule. As in Kafka, durability comes from replication: a
write is acknowledged once it is on ``min.insync.replicas`` brokers' page caches, and losing a machine's
page cache (power loss) is survived by the other replicas, while an fsync per append would cap every
partition at the disk's sync rate. Segments are still fsync'd when they roll and at clean shutdown, which
is what lets the recovery point advance and keeps restart-time recovery short.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from odradek.protocol.errors import InvalidConfigError
from odradek.protocol.records import COMPRESSION_CODECS

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

# Kafka topic configs that are valid but not acted on by the log layer: the broker may read them from
# ``LogConfig.extra``. Values are kept as given (strings).
PASSTHROUGH_NAMES = frozenset(
    {
        "compression.type",
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "message.format.version",
        "message.timestamp.difference.max.ms",
        "message.downconversion.enable",
        "preallocate",
        "follower.replication.throttled.replicas",
        "leader.replication.throttled.replicas",
        "segment.jitter.ms",
        "confluent.placement.constraints",
    }
)

_CLEANUP_POLICIES = {"delete", "compact"}


def _parse_int(name: str, raw: Any, lo: int, hi: int = LONG_MAX) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidConfigError(f"Invalid value {raw!r} for configuration {name}: not an integer") from None
    if not lo <= value <= hi:
        raise InvalidConfigError(f"Invalid value {raw!r} for configuration {name}: must be between {lo} and {hi}")
    return value


def _parse_ratio(name: str, raw: Any) -> float:
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise InvalidConfigError(f"Invalid value {raw!r} for configuration {name}: not a number") from None
    if not 0.0 <= value <= 1.0:
        raise InvalidConfigError(f"Invalid value {raw!r} for configuration {name}: must be in [0, 1]")
    return value


def _parse_policy(name: str, raw: Any) -> frozenset[str]:
    text = str(raw).strip().strip("[]")
    parts = {p.strip().lower() for p in text.split(",") if p.strip()}
    if not parts or not parts <= _CLEANUP_POLICIES:
        raise InvalidConfigError(
            f"Invalid value {raw!r} for configuration {name}: must be delete, compact or compact,delete"
        )
    return frozenset(parts)


def _parse_timestamp_type(name: str, raw: Any) -> str:
    value = str(raw).strip()
    if value not in ("CreateTime", "LogAppendTime"):
        raise InvalidConfigError(f"Invalid value {raw!r} for configuration {name}: must be CreateTime or LogAppendTime")
    return value


def _check_passthrough(name: str, raw: Any) -> None:
    if name == "compression.type" and str(raw) not in {*COMPRESSION_CODECS, "producer", "uncompressed"}:
        raise InvalidConfigError(f"Invalid value {raw!r} for configuration {name}")
    if name == "min.insync.replicas":
        _parse_int(name, raw, 1, INT_MAX)


@dataclass(frozen=True, slots=True)
class LogConfig:
    """One log's settings. Immutable: a config change builds a new one and the log swaps it in."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    cleanup_policy: frozenset[str] = frozenset({"delete"})
    delete_retention_ms: int = 24 * 3600 * 1000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1024 * 1024 + 12
    file_delete_delay_ms: int = 60000
    message_timestamp_type: str = "CreateTime"
    extra: Mapping[str, str] = field(default_factory=dict)

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def from_topic_config(
        cls, overrides: Mapping[str, Any] | None = None, defaults: Mapping[str, Any] | None = None
    ) -> LogConfig:
        """Build from Kafka-named settings: ``defaults`` (the broker's), then ``overrides`` (the topic's).

        Raises:
            InvalidConfigError: an unknown name or a value out of range, with the name in the message.
        """
        merged: dict[str, Any] = dict(defaults or {})
        merged.update(overrides or {})
        kwargs: dict[str, Any] = {}
        extra: dict[str, str] = {}
        for name, raw in merged.items():
            parser = _PARSERS.get(name)
            if parser is not None:
                attr, parse = parser
                kwargs[attr] = parse(name, raw)
            elif name in PASSTHROUGH_NAMES:
                _check_passthrough(name, raw)
                extra[name] = str(raw)
            else:
                raise InvalidConfigError(f"Unknown topic config name: {name}")
        config = cls(**kwargs, extra=extra)
        if config.segment_index_bytes < 8 + 12:
            raise InvalidConfigError("Invalid value for configuration segment.index.bytes: must be at least 20")
        return config

    def to_topic_config(self) -> dict[str, str]:
        """Kafka names and string values: what ``from_topic_config`` reads back unchanged."""
        out: dict[str, str] = {}
        for name, (attr, _parse) in _PARSERS.items():
            value = getattr(self, attr)
            if isinstance(value, frozenset):
                value = ",".join(sorted(value))
            out[name] = str(value)
        out.update(self.extra)
        return out


def _long(lo: int) -> Any:
    return lambda name, raw: _parse_int(name, raw, lo)


def _int(lo: int) -> Any:
    return lambda name, raw: _parse_int(name, raw, lo, INT_MAX)


# Kafka name -> (LogConfig attribute, parser(name, raw) -> value)
_PARSERS: dict[str, tuple[str, Any]] = {
    "segment.bytes": ("segment_bytes", _int(14)),
    "segment.ms": ("segment_ms", _long(1)),
    "segment.index.bytes": ("segment_index_bytes", _int(4)),
    "index.interval.bytes": ("index_interval_bytes", _int(0)),
    "retention.ms": ("retention_ms", _long(-1)),
    "retention.bytes": ("retention_bytes", _long(-1)),
    "cleanup.policy": ("cleanup_policy", _parse_policy),
    "delete.retention.ms": ("delete_retention_ms", _long(0)),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _parse_ratio),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _long(0)),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", _long(1)),
    "flush.messages": ("flush_messages", _long(1)),
    "flush.ms": ("flush_ms", _long(0)),
    "max.message.bytes": ("max_message_bytes", _int(0)),
    "file.delete.delay.ms": ("file_delete_delay_ms", _long(0)),
    "message.timestamp.type": ("message_timestamp_type", _parse_timestamp_type),
}

TOPIC_CONFIG_NAMES = frozenset(_PARSERS) | PASSTHROUGH_NAMES
