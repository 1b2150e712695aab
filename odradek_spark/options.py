"""Parsing and validation of the connector's options, with the names and defaults of Spark's Kafka source.

Everything is checked on the driver when the DataFrame is defined, so a typo fails with a message naming the
option instead of as a task failure on an executor minutes later. The parsed options are frozen dataclasses:
Spark pickles readers and writers to its Python workers, and a plain dataclass pickles small and safe.

Option names are case-insensitive (Spark lower-cases them); values are strings, as Spark hands them over.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from odradek_spark.security import SecurityOptionError, SecurityPairs, parse_security

__all__ = [
    "EARLIEST",
    "LATEST",
    "ColumnFormat",
    "OffsetSpec",
    "OptionError",
    "SinkOptions",
    "SourceOptions",
    "TimestampSpec",
    "parse_formats",
    "parse_reader_formats",
    "parse_sink_options",
    "parse_source_options",
]

EARLIEST = -2  # in a JSON offsets spec, as in Kafka: "the log start offset"
LATEST = -1  # "the high watermark"

# A starting/ending position: "earliest", "latest", or {(topic, partition): offset} with -2/-1 allowed.
OffsetSpec = str | dict[tuple[str, int], int]

_BOOTSTRAP_KEYS = ("bootstrap.servers", "kafka.bootstrap.servers")
_SUBSCRIPTION_KEYS = ("assign", "subscribe", "subscribepattern")
# Kafka client settings Spark's Kafka source refuses, for the same reasons here: the connector owns them.
_FORBIDDEN = {
    "kafka.auto.offset.reset": "use the startingOffsets option instead",
    "kafka.key.deserializer": "keys are always read as bytes; cast or decode the 'key' column",
    "kafka.value.deserializer": "values are always read as bytes; cast or decode the 'value' column",
    "kafka.enable.auto.commit": "the source never commits offsets to the cluster; Spark's checkpoint tracks them",
    "kafka.interceptor.classes": "interceptors are not supported",
    "kafka.key.serializer": "keys are written as given (string or binary column)",
    "kafka.value.serializer": "values are written as given (string or binary column)",
}
_TIMESTAMP_STRATEGIES = ("error", "latest")
# Spark lower-cases option names; messages use the names as documented.
_DISPLAY = {name.lower(): name for name in (
    "startingOffsets", "endingOffsets", "startingTimestamp", "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy", "failOnDataLoss", "maxOffsetsPerTrigger", "minPartitions",
    "maxRecordsPerPartition", "includeHeaders", "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs", "subscribePattern", "isolation.level", "exactlyOnce", "transactional.id.prefix",
)}
_ISOLATION_KEYS = ("isolation.level", "kafka.isolation.level")
_ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


def _name(key: str) -> str:
    return _DISPLAY.get(key, key)


class OptionError(ValueError):
    """An option is missing, malformed or not allowed for this kind of query."""


@dataclass(frozen=True)
class TimestampSpec:
    """Start at the first record whose timestamp is >= the given ms (per partition, or one for all)."""

    all_partitions: int | None = None
    per_partition: dict[tuple[str, int], int] = field(default_factory=dict)
    strategy: str = "error"  # what to do when no record is that recent: fail, or start at the latest offset


@dataclass(frozen=True)
class ColumnFormat:
    """``key.format``/``value.format=avro`` (odradek_spark/avro.py), ``json_schema`` (odradek_spark/json_schema.py)
    or ``protobuf`` (odradek_spark/protobuf.py): the column's subject (None: Confluent's TopicNameStrategy,
    ``<topic>-<column>``), the reader's schema version (None: the latest), ``mode``, the format (``kind``) and,
    for Protobuf, the message read (``<column>.protobuf.message``; None: the file's first message)."""

    column: str
    subject: str | None = None
    version: int | None = None
    mode: str = "FAILFAST"
    kind: str = "avro"
    message: str | None = None


@dataclass(frozen=True)
class SourceOptions:
    bootstrap: tuple[str, ...]
    # Exactly one of the three is set.
    assign: tuple[tuple[str, int], ...] | None = None
    subscribe: tuple[str, ...] | None = None
    subscribe_pattern: str | None = None
    starting: OffsetSpec = "earliest"
    starting_timestamp: TimestampSpec | None = None
    ending: OffsetSpec = "latest"
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    fetch_max_bytes: int = 4 << 20
    request_timeout_ms: int = 30_000
    offset_fetch_retries: int = 3
    offset_fetch_retry_interval_ms: int = 1000
    # read_committed: end offsets are the last stable offsets and the brokers drop aborted transactions' batches.
    read_committed: bool = False
    # TLS and credentials (odradek_spark/security.py): kafka.security.protocol, kafka.ssl.truststore.location, ...
    security: SecurityPairs = field(default=(), repr=False)
    # Confluent-framed Avro columns: as asked, then as resolved against the registry on the driver (AvroColumn).
    formats: tuple[ColumnFormat, ...] = ()
    registry: tuple[str, ...] = ()
    avro: tuple[Any, ...] = ()

    def matches(self, topic: str) -> bool:
        """Whether a topic belongs to the subscription (assign: the topic of some assigned partition)."""
        if self.subscribe is not None:
            return topic in self.subscribe
        if self.subscribe_pattern is not None:
            return re.fullmatch(self.subscribe_pattern, topic) is not None
        return any(t == topic for t, _ in self.assign or ())


@dataclass(frozen=True)
class SinkOptions:
    bootstrap: tuple[str, ...]
    topic: str | None = None
    acks: str = "all"
    linger_ms: float = 5.0
    batch_size: int = 256 * 1024
    compression: str | None = None
    delivery_timeout_ms: int = 120_000
    request_timeout_ms: int = 30_000
    max_request_size: int = 1 << 20
    # Exactly-once (odradek_spark/exactly_once.py): each task's records in one transaction, committed by the driver.
    exactly_once: bool = False
    transactional_id_prefix: str | None = None  # default: "spark-<query id>" (streaming) or a job's own uuid
    transaction_timeout_ms: int = 600_000
    security: SecurityPairs = field(default=(), repr=False)  # TLS and credentials, as the source's
    formats: tuple[ColumnFormat, ...] = ()  # as the source's; resolved (registered) on the driver into ``avro``
    registry: tuple[str, ...] = ()
    avro: tuple[Any, ...] = ()


# ------------------------------------------------------------------------------------------------- helpers


def _security(opts: Mapping[str, str]) -> SecurityPairs:
    try:
        return parse_security(opts)
    except SecurityOptionError as e:
        raise OptionError(str(e)) from None


def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _bootstrap(opts: Mapping[str, str]) -> tuple[str, ...]:
    raw = next((opts[k] for k in _BOOTSTRAP_KEYS if opts.get(k, "").strip()), None)
    if raw is None:
        raise OptionError(
            "option 'bootstrap.servers' (or 'kafka.bootstrap.servers') is required: the HTTP address of one or "
            "more brokers, e.g. 'http://127.0.0.1:8082,http://127.0.0.1:8083'"
        )
    urls: list[str] = []
    for item in raw.split(","):
        item = item.strip().rstrip("/")
        if not item:
            continue
        if "://" not in item:
            item = "http://" + item
        if not re.fullmatch(r"https?://[^/\s:]+(:\d+)?", item):
            raise OptionError(f"bootstrap.servers: {item!r} is not a broker address like http://host:port")
        if item not in urls:
            urls.append(item)
    if not urls:
        raise OptionError("option 'bootstrap.servers' names no broker")
    return tuple(urls)


def _bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in ("true", "false"):
        return value == "true"
    raise OptionError(f"option '{_name(key)}' must be true or false, not {raw!r}")


def _int(opts: Mapping[str, str], key: str, default: int | None, *, minimum: int = 1) -> int | None:
    raw = opts.get(key)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"option '{_name(key)}' must be an integer, not {raw!r}") from None
    if value < minimum:
        raise OptionError(f"option '{_name(key)}' must be >= {minimum}, not {value}")
    return value


def _req_int(opts: Mapping[str, str], key: str, default: int, *, minimum: int = 1) -> int:
    value = _int(opts, key, default, minimum=minimum)
    assert value is not None
    return value


def _json_object(key: str, raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option '{_name(key)}' is not valid JSON ({exc.msg} at position {exc.pos}): "
                          f"{raw!r}") from None
    if not isinstance(value, dict):
        raise OptionError(f"option '{_name(key)}' must be a JSON object like {{\"topic\": {{\"0\": 23}}}}, not {raw!r}")
    return value


def _partition_id(key: str, topic: str, raw: Any) -> int:
    try:
        p = int(raw)
    except (TypeError, ValueError):
        raise OptionError(f"option '{_name(key)}': partition {raw!r} of topic '{topic}' is not an integer") from None
    if p < 0 or str(raw).strip() != str(p):
        raise OptionError(f"option '{_name(key)}': partition {raw!r} of topic '{topic}' is not a partition id")
    return p


def parse_partition_offsets(key: str, raw: str) -> dict[tuple[str, int], int]:
    """``{"t": {"0": 23, "1": -2}}`` -> {("t", 0): 23, ("t", 1): -2}; values are checked to be integers."""
    out: dict[tuple[str, int], int] = {}
    for topic, parts in _json_object(key, raw).items():
        if not isinstance(parts, dict):
            raise OptionError(f"option '{_name(key)}': topic '{topic}' must map partition ids to offsets, "
                              f"got {parts!r}")
        for p_raw, off in parts.items():
            p = _partition_id(key, topic, p_raw)
            if isinstance(off, bool) or not isinstance(off, int):
                raise OptionError(f"option '{_name(key)}': offset of {topic}-{p} must be an integer, not {off!r}")
            out[(topic, p)] = off
    return out


def _offset_spec(opts: Mapping[str, str], key: str, default: str, *, allow: tuple[str, ...],
                 allow_earliest_sentinel: bool, allow_latest_sentinel: bool, why: str) -> OffsetSpec:
    raw = opts.get(key)
    if raw is None:
        return default
    value = raw.strip()
    if value.lower() in ("earliest", "latest"):
        if value.lower() not in allow:
            raise OptionError(f"option '{_name(key)}' cannot be '{value.lower()}' {why}")
        return value.lower()
    if not value.startswith("{"):
        raise OptionError(f"option '{_name(key)}' must be {', '.join(repr(a) for a in allow)} or a JSON object like "
                          f"{{\"topic\": {{\"0\": 23}}}}, not {raw!r}")
    offsets = parse_partition_offsets(key, value)
    for (topic, p), off in offsets.items():
        if off == EARLIEST and not allow_earliest_sentinel:
            raise OptionError(f"option '{_name(key)}': -2 (earliest) is not allowed for {topic}-{p} {why}")
        if off == LATEST and not allow_latest_sentinel:
            raise OptionError(f"option '{_name(key)}': -1 (latest) is not allowed for {topic}-{p} {why}")
        if off < EARLIEST:
            raise OptionError(f"option '{_name(key)}': offset {off} of {topic}-{p} is negative (only -2 = earliest and "
                              "-1 = latest are special)")
    return offsets


def _isolation(opts: Mapping[str, str]) -> bool:
    """``isolation.level`` (or Kafka's ``kafka.isolation.level``): whether the query reads read_committed."""
    given = {k: opts[k].strip().lower() for k in _ISOLATION_KEYS if k in opts}
    if len(set(given.values())) > 1:
        raise OptionError(f"options 'isolation.level' and 'kafka.isolation.level' disagree: {given}")
    level = next(iter(given.values()), "read_uncommitted")
    if level not in _ISOLATION_LEVELS:
        raise OptionError(f"option 'isolation.level' must be read_uncommitted or read_committed, not {level!r}")
    return level == "read_committed"


_FORMATS = ("binary", "avro", "json_schema", "protobuf")
_WRITTEN = ("avro", "json_schema", "protobuf")  # the formats the sink writes
_MODES = ("FAILFAST", "PERMISSIVE")


def parse_formats(opts: Mapping[str, str], topics: tuple[str, ...] | None, *, reader: bool,
                  bootstrap: tuple[str, ...]) -> tuple[tuple[ColumnFormat, ...], tuple[str, ...]]:
    """``key.format``/``value.format`` (``binary``, the default, ``avro``, ``json_schema`` or ``protobuf``), their
    subjects and reader versions, ``<column>.protobuf.message``, ``mode`` and ``schema.registry.url`` (default:
    the bootstrap servers, which serve the registry); ``topics``: the one topic a default subject is named after
    (None: not known, e.g. a topic column)."""
    formats = []
    for column in ("key", "value"):
        kind = opts.get(f"{column}.format", "binary").strip().lower()
        if kind not in _FORMATS:
            raise OptionError(f"option '{column}.format' must be binary or avro or json_schema or protobuf, "
                              f"not {kind!r}")
        if kind == "binary":
            for extra in (f"{column}.subject", f"{column}.schema.version"):
                if extra in opts:
                    raise OptionError(f"option '{extra}' needs {column}.format=avro, json_schema or protobuf")
        message = opts.get(f"{column}.protobuf.message", "").strip() or None
        if f"{column}.protobuf.message" in opts and (kind != "protobuf" or message is None):
            raise OptionError(f"option '{column}.protobuf.message' names a message (full name or simple name) of a "
                              f"{column}.format=protobuf column's schema")
        if kind == "binary":
            continue
        if not reader and kind not in _WRITTEN:
            raise OptionError(f"{column}.format={kind} is for reading: the sink writes binary, string, avro or "
                              "json_schema columns")
        subject = opts.get(f"{column}.subject", "").strip() or None
        if subject is None and (topics is None or len(topics) != 1):
            raise OptionError(f"{column}.format={kind} names its subject after the topic (<topic>-{column}): with "
                              f"{'several topics' if topics else 'no topic option'}, set '{column}.subject'")
        raw_version = opts.get(f"{column}.schema.version", "latest").strip().lower()
        if not reader and f"{column}.schema.version" in opts:
            raise OptionError(f"option '{column}.schema.version' is for reading: the sink registers the "
                              "DataFrame's own schema")
        version = None
        if raw_version != "latest":
            version = _int(opts, f"{column}.schema.version", None)  # an error names the option
        mode = opts.get("mode", "FAILFAST").strip().upper()
        if mode not in _MODES:
            raise OptionError(f"option 'mode' must be FAILFAST or PERMISSIVE, not {mode!r}")
        if subject is None:
            assert topics is not None
            subject = f"{topics[0]}-{column}"
        formats.append(ColumnFormat(column, subject, version, mode, kind, message))
    urls = tuple(u.strip().rstrip("/") for u in opts.get("schema.registry.url", "").split(",") if u.strip())
    for u in urls:
        if not re.fullmatch(r"https?://[^\s/]+(/[^\s]*)?", u):
            raise OptionError(f"option 'schema.registry.url': {u!r} is not an http(s) URL")
    return tuple(formats), urls or bootstrap


def parse_reader_formats(options: Mapping[str, Any]) -> SourceOptions | None:
    """What the source's schema depends on, for ``DataSource.schema()`` (which cannot know whether the query is
    a batch or a streaming one): options carrying only the Avro columns, registry and transport settings; None
    when both columns are binary."""
    opts = _lower(options)
    if all(opts.get(f"{c}.format", "binary").strip().lower() == "binary" for c in ("key", "value")):
        return None
    bootstrap = _bootstrap(opts)
    topics: tuple[str, ...] | None = None
    if opts.get("subscribe", "").strip():
        topics = tuple(dict.fromkeys(t.strip() for t in opts["subscribe"].split(",") if t.strip()))
    elif opts.get("assign", "").strip():
        topics = tuple(_json_object("assign", opts["assign"]))
    formats, registry = parse_formats(opts, topics, reader=True, bootstrap=bootstrap)
    return SourceOptions(bootstrap=bootstrap, subscribe=topics, formats=formats, registry=registry,
                         request_timeout_ms=_req_int(opts, "kafka.request.timeout.ms", 30_000, minimum=100),
                         security=_security(opts))


def _timestamp(key: str, raw: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"option '{_name(key)}' must be a timestamp in ms since the epoch, not {raw!r}") from None
    if value < 0:
        raise OptionError(f"option '{_name(key)}' must be >= 0, not {value}")
    return value


# ------------------------------------------------------------------------------------------------- source


def parse_source_options(options: Mapping[str, Any], *, streaming: bool) -> SourceOptions:
    """Validate the reader options of a batch (``streaming=False``) or streaming query.

    Raises:
        OptionError: with a message naming the option and what it accepts.
    """
    opts = _lower(options)
    for key, why in _FORBIDDEN.items():
        if key in opts:
            raise OptionError(f"option '{_name(key)}' is not supported: {why}")
    bootstrap = _bootstrap(opts)

    given = [k for k in _SUBSCRIPTION_KEYS if opts.get(k, "").strip()]
    if len(given) != 1:
        listed = ", ".join(given) if given else "none"
        raise OptionError(f"exactly one of 'assign', 'subscribe' and 'subscribePattern' is required (given: {listed})")
    assign = subscribe = pattern = None
    kind = given[0]
    raw = opts[kind].strip()
    if kind == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
        if not topics:
            raise OptionError("option 'subscribe' names no topic")
        for t in topics:
            if not re.fullmatch(r"[a-zA-Z0-9._-]{1,249}", t) or t in (".", ".."):
                raise OptionError(f"option 'subscribe': {t!r} is not a valid topic name")
        subscribe = topics
    elif kind == "subscribepattern":
        try:
            re.compile(raw)
        except re.error as exc:
            raise OptionError(f"option 'subscribePattern' is not a valid regular expression: {exc}") from None
        pattern = raw
    else:
        obj = _json_object("assign", raw)
        pairs: list[tuple[str, int]] = []
        for topic, parts in obj.items():
            if not isinstance(parts, list) or not parts:
                raise OptionError(f"option 'assign': topic '{topic}' must map to a non-empty list of partitions, "
                                  f"like {{\"{topic}\": [0, 1]}}")
            pairs.extend((topic, _partition_id("assign", topic, p)) for p in parts)
        assign = tuple(sorted(set(pairs)))

    if streaming:
        if "endingoffsets" in opts:
            raise OptionError("option 'endingOffsets' is for batch queries; a streaming query reads until stopped "
                              "(use Trigger.AvailableNow to stop at the offsets available when it starts)")
        starting = _offset_spec(opts, "startingoffsets", "latest", allow=("earliest", "latest"),
                                allow_earliest_sentinel=True, allow_latest_sentinel=True, why="")
        ending: OffsetSpec = "latest"
    else:
        if "maxoffsetspertrigger" in opts:
            raise OptionError("option 'maxOffsetsPerTrigger' is for streaming queries only")
        starting = _offset_spec(opts, "startingoffsets", "earliest", allow=("earliest",),
                                allow_earliest_sentinel=True, allow_latest_sentinel=False,
                                why="for a batch query (it would read nothing)")
        ending = _offset_spec(opts, "endingoffsets", "latest", allow=("latest",),
                              allow_earliest_sentinel=False, allow_latest_sentinel=True,
                              why="for a batch query (it would read nothing)")

    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in _TIMESTAMP_STRATEGIES:
        raise OptionError(f"option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', not {strategy!r}")
    ts_spec: TimestampSpec | None = None
    if "startingtimestamp" in opts:
        ts_spec = TimestampSpec(all_partitions=_timestamp("startingTimestamp", opts["startingtimestamp"]),
                                strategy=strategy)
    elif "startingoffsetsbytimestamp" in opts:
        per = parse_partition_offsets("startingOffsetsByTimestamp", opts["startingoffsetsbytimestamp"])
        for (topic, p), ts in per.items():
            if ts < 0:
                raise OptionError(f"option 'startingOffsetsByTimestamp': timestamp of {topic}-{p} must be >= 0")
        ts_spec = TimestampSpec(per_partition=per, strategy=strategy)

    max_offsets = _int(opts, "maxoffsetspertrigger", None)
    one_topic = subscribe if subscribe is not None else \
        tuple(dict.fromkeys(t for t, _ in assign)) if assign is not None else None
    formats, registry = parse_formats(opts, one_topic, reader=True, bootstrap=bootstrap)
    return SourceOptions(
        formats=formats,
        registry=registry,
        bootstrap=bootstrap,
        assign=assign,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        starting=starting,
        starting_timestamp=ts_spec,
        ending=ending,
        fail_on_data_loss=_bool(opts, "failondataloss", True),
        max_offsets_per_trigger=max_offsets,
        min_partitions=_int(opts, "minpartitions", None),
        max_records_per_partition=_int(opts, "maxrecordsperpartition", None),
        include_headers=_bool(opts, "includeheaders", False),
        poll_timeout_ms=_req_int(opts, "kafkaconsumer.polltimeoutms", 120_000),
        fetch_max_bytes=_req_int(opts, "kafka.max.partition.fetch.bytes", 4 << 20, minimum=1024),
        request_timeout_ms=_req_int(opts, "kafka.request.timeout.ms", 30_000, minimum=100),
        offset_fetch_retries=_req_int(opts, "fetchoffset.numretries", 3, minimum=0),
        offset_fetch_retry_interval_ms=_req_int(opts, "fetchoffset.retryintervalms", 1000, minimum=0),
        read_committed=_isolation(opts),
        security=_security(opts),
    )


# --------------------------------------------------------------------------------------------------- sink


def parse_sink_options(options: Mapping[str, Any]) -> SinkOptions:
    """Validate the writer options (batch and streaming alike)."""
    opts = _lower(options)
    for key, why in _FORBIDDEN.items():
        if key in opts:
            raise OptionError(f"option '{_name(key)}' is not supported: {why}")
    topic = opts.get("topic", "").strip() or None
    if topic is not None and (not re.fullmatch(r"[a-zA-Z0-9._-]{1,249}", topic) or topic in (".", "..")):
        raise OptionError(f"option 'topic': {topic!r} is not a valid topic name")
    acks = opts.get("kafka.acks", "all").strip().lower()
    if acks not in ("all", "-1", "1", "0"):
        raise OptionError(f"option 'kafka.acks' must be all, -1, 1 or 0, not {acks!r}")
    compression = opts.get("kafka.compression.type", "none").strip().lower()
    if compression not in ("none", "gzip", "lz4", "zstd"):
        raise OptionError(f"option 'kafka.compression.type' must be none, gzip, lz4 or zstd, not {compression!r}")
    prefix = opts.get("transactional.id.prefix", "").strip() or None
    if prefix is not None and not re.fullmatch(r"[a-zA-Z0-9._-]{1,200}", prefix):
        raise OptionError(f"option 'transactional.id.prefix': {prefix!r} must be 1-200 of [a-zA-Z0-9._-]")
    exactly_once = _bool(opts, "exactlyonce", prefix is not None)
    if exactly_once and acks not in ("all", "-1"):
        raise OptionError("option 'exactlyOnce' needs kafka.acks=all (a transactional producer is idempotent)")
    bootstrap = _bootstrap(opts)
    formats, registry = parse_formats(opts, (topic,) if topic else None, reader=False, bootstrap=bootstrap)
    return SinkOptions(
        formats=formats,
        registry=registry,
        bootstrap=bootstrap,
        exactly_once=exactly_once,
        transactional_id_prefix=prefix,
        transaction_timeout_ms=_req_int(opts, "kafka.transaction.timeout.ms", 600_000, minimum=1000),
        topic=topic,
        acks=acks,
        linger_ms=float(_req_int(opts, "kafka.linger.ms", 5, minimum=0)),
        batch_size=_req_int(opts, "kafka.batch.size", 256 * 1024, minimum=1),
        compression=None if compression == "none" else compression,
        delivery_timeout_ms=_req_int(opts, "kafka.delivery.timeout.ms", 120_000),
        request_timeout_ms=_req_int(opts, "kafka.request.timeout.ms", 30_000, minimum=100),
        max_request_size=_req_int(opts, "kafka.max.request.size", 1 << 20, minimum=1024),
        security=_security(opts),
    )
