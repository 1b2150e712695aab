"""The ``odradek`` PySpark data source: Spark's Kafka source and sink, over Odradek's HTTP API.

Schema (as ``spark-sql-kafka-0-10``)::

    key binary, value binary, topic string, partition int, offset long, timestamp timestamp,
    timestampType int [, headers array<struct<key: string, value: binary>>  -- with includeHeaders=true]

Reader options (names case-insensitive, as in Spark):

* ``bootstrap.servers`` (or ``kafka.bootstrap.servers``): HTTP addresses of any brokers, comma-separated;
* exactly one of ``subscribe`` (comma list), ``subscribePattern`` (regex, full match) or ``assign``
  (JSON ``{"t": [0, 1]}``);
* ``startingOffsets``: ``earliest`` (batch default), ``latest`` (streaming default) or JSON
  ``{"t": {"0": 23, "1": -2}}`` (-2 = earliest, -1 = latest); it must list every subscribed partition;
* ``startingTimestamp`` (ms, all partitions) or ``startingOffsetsByTimestamp`` (JSON), with
  ``startingOffsetsByTimestampStrategy`` ``error`` (default) or ``latest`` when no record is that recent;
  these win over ``startingOffsets``;
* ``endingOffsets`` (batch only): ``latest`` (default) or JSON with -1 allowed;
* ``failOnDataLoss`` (default true), ``includeHeaders`` (default false);
* ``maxOffsetsPerTrigger`` (streaming): at most this many offsets per micro-batch, shared across partitions in
  proportion to their backlog; also honoured by ``Trigger.AvailableNow``;
* ``minPartitions`` / ``maxRecordsPerPartition``: split large partitions into several Spark tasks;
* ``key.format``/``value.format``: ``binary`` (default), ``avro``, ``json_schema`` or ``protobuf``:
  Confluent-framed records read into the type of the subject's version (``value.subject``, default
  ``<topic>-value``; ``value.schema.version``, default the latest; ``mode`` FAILFAST or PERMISSIVE;
  ``schema.registry.url``, default the cluster's own; ``value.protobuf.message``, default the file's first
  message): see :mod:`odradek_spark.avro`, :mod:`odradek_spark.json_schema`, :mod:`odradek_spark.protobuf`;
* ``kafkaConsumer.pollTimeoutMs`` (120000): how long a task waits without progress (leader election, ...);
  ``kafka.max.partition.fetch.bytes`` (4 MiB) per fetch; ``kafka.request.timeout.ms`` (30000);
  ``fetchOffset.numRetries`` (3) and ``fetchOffset.retryIntervalMs`` (1000) for the driver's offset lookups.

Offsets: a streaming offset is ``{"topic": {"partition": offset}}`` and means "read up to, not including"; a
micro-batch reads ``[start, end)`` per partition, and the same range read again (a replay after a restart)
returns the same records. Partitions that appear while a query runs are read from offset 0 (reported as data
loss if retention already removed their first records). The source never commits offsets to the cluster:
Spark's checkpoint is the only record of progress. The starting offsets of a new query are resolved when it
starts; if the query fails before its first micro-batch commits, the restarted query resolves them again (pin
them with JSON ``startingOffsets`` when the first batch must be replayed exactly).

Writing: see :mod:`odradek_spark.writer` (at-least-once).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from odradek_spark.cluster import Cluster
from odradek_spark.options import (
    OptionError,
    SourceOptions,
    parse_reader_formats,
    parse_sink_options,
    parse_source_options,
)
from odradek_spark.planning import (
    DataLossError,
    OffsetRange,
    PartitionOffsets,
    TopicPartition,
    check_spec_partitions,
    from_json_offsets,
    plan_stream_ranges,
    rate_limit,
    resolve_offsets,
    split_ranges,
    to_json_offsets,
)

__all__ = ["DataLossError", "OdradekDataSource", "OdradekInputPartition", "source_schema"]

log = logging.getLogger(__name__)


def source_schema(include_headers: bool, avro: Sequence[Any] = ()) -> StructType:
    """Spark's Kafka source schema; a column read as Avro (odradek_spark/avro.py) has its reader schema's type."""
    typed = {c.column: c.spark_field() for c in avro}
    fields = [
        typed.get("key", StructField("key", BinaryType())),
        typed.get("value", StructField("value", BinaryType())),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        element = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(element)))
    return StructType(fields)


@dataclass
class OdradekInputPartition(InputPartition):
    """One Spark task: offsets ``[from_offset, until_offset)`` of one partition, and where its leader was."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    leader_url: str | None = None


# ------------------------------------------------------------------------------------------- driver side


def _cluster(options: SourceOptions) -> Cluster:
    return Cluster(options.bootstrap, request_timeout_ms=options.request_timeout_ms,
                   read_committed=options.read_committed, security=options.security)


def _bounds(cluster: Cluster, tps: Sequence[TopicPartition]) -> tuple[PartitionOffsets, PartitionOffsets]:
    offsets = cluster.list_offsets(tps)
    return {tp: o[0] for tp, o in offsets.items()}, {tp: o[1] for tp, o in offsets.items()}


def _starting_offsets(cluster: Cluster, options: SourceOptions, tps: Sequence[TopicPartition],
                      earliest: PartitionOffsets, latest: PartitionOffsets) -> PartitionOffsets:
    spec = options.starting_timestamp
    if spec is None:
        return resolve_offsets("startingOffsets", options.starting, tps, earliest, latest)
    if spec.all_partitions is not None:
        wanted = dict.fromkeys(tps, spec.all_partitions)
    else:
        check_spec_partitions("startingOffsetsByTimestamp", spec.per_partition, tps)
        wanted = {tp: spec.per_partition[tp] for tp in tps}
    out: PartitionOffsets = {}
    for tp in tps:
        found = cluster.offset_for_time(tp, wanted[tp])
        if found is None:
            if spec.strategy != "latest":
                raise OptionError(f"no record of {tp[0]}-{tp[1]} has a timestamp >= {wanted[tp]}; set "
                                  "startingOffsetsByTimestampStrategy=latest to start at the latest offset instead")
            found = latest[tp]
        out[tp] = found
    return out


def _partitions(ranges: Sequence[OffsetRange], cluster: Cluster) -> list[OdradekInputPartition]:
    return [
        OdradekInputPartition(r.topic, r.partition, r.from_offset, r.until_offset,
                              cluster.leader_url(r.topic, r.partition))
        for r in ranges
    ]


def _read(options: SourceOptions, partition: InputPartition) -> Iterator[Any]:
    """Executor side, shared by batch and streaming: stateless, a fresh connection pool per task."""
    if not isinstance(partition, OdradekInputPartition) or partition.until_offset <= partition.from_offset:
        return
    from odradek_spark.reader import read_range

    cluster = _cluster(options)
    try:
        rng = OffsetRange(partition.topic, partition.partition, partition.from_offset, partition.until_offset)
        batches = read_range(cluster, options, rng, partition.leader_url)
        if options.avro:
            from odradek_spark.avro import decode_columns

            batches = decode_columns(batches, options, f"{partition.topic}-{partition.partition}")
        yield from batches
    finally:
        cluster.close()


def resolve_avro(options: SourceOptions) -> SourceOptions:
    """On the driver: the reader schema of each typed column (its subject's version), from the registry: an
    AvroColumn, a JsonSchemaColumn or a ProtobufColumn (odradek_spark/avro.py, json_schema.py, protobuf.py)."""
    if not options.formats:
        return options
    from odradek_spark.avro import AvroColumn
    from odradek_spark.schema_registry import RegistryClient

    columns: list[Any] = []
    with RegistryClient(options.registry, options.request_timeout_ms, options.security) as registry:
        for f in options.formats:
            assert f.subject is not None
            if f.kind == "json_schema":
                columns.append(_json_schema_column(registry, f))
            elif f.kind == "protobuf":
                from odradek_spark.protobuf import ProtobufSchemaError, resolve_column

                try:
                    columns.append(resolve_column(registry, f))
                except ProtobufSchemaError as e:
                    raise OptionError(f"{f.column}.format=protobuf (subject {f.subject}): {e}") from None
            else:
                schema_id, version, text = registry.version(f.subject, f.version or "latest")
                columns.append(AvroColumn(f.column, f.subject, version, schema_id, text, f.mode))
    return replace(options, avro=tuple(columns))


def _json_schema_column(registry: Any, f: Any) -> Any:
    from odradek_spark.json_schema import JsonSchemaError, resolve_column

    try:
        return resolve_column(registry, f)  # with the schemas its $ref may name, fetched from the registry
    except JsonSchemaError as e:
        raise OptionError(f"{f.column}.format=json_schema: {e}") from None


def _check_schema(schema: StructType, options: SourceOptions) -> None:
    expected = source_schema(options.include_headers, options.avro)
    if schema != expected:
        if options.avro:
            raise OptionError("the Avro columns' schemas changed while the query was being defined (a new version "
                              f"was registered): define it again; now {expected.simpleString()}")
        raise OptionError("the odradek source has a fixed schema and takes no user-specified one: "
                          f"{expected.simpleString()}")


class OdradekBatchReader(DataSourceReader):
    """``spark.read.format("odradek")``: ranges are fixed when the query is planned (offsets resolved then)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        options = self.options
        cluster = _cluster(options)
        try:
            def plan() -> list[OdradekInputPartition]:
                tps = cluster.discover(options, must_exist=options.subscribe_pattern is None)
                earliest, latest = _bounds(cluster, tps)
                start = _starting_offsets(cluster, options, tps, earliest, latest)
                end = resolve_offsets("endingOffsets", options.ending, tps, earliest, latest)
                ranges = []
                for tp in tps:
                    if end[tp] < start[tp]:
                        raise OptionError(f"the starting offset {start[tp]} of {tp[0]}-{tp[1]} is after its ending "
                                          f"offset {end[tp]} (the partition holds offsets {earliest[tp]} to "
                                          f"{latest[tp]}); check startingOffsets and endingOffsets")
                    ranges.append(OffsetRange(tp[0], tp[1], start[tp], end[tp]))
                ranges = split_ranges(ranges, min_partitions=options.min_partitions,
                                      max_records_per_partition=options.max_records_per_partition)
                return _partitions(ranges, cluster)

            planned = cluster.retrying(plan, options.offset_fetch_retries, options.offset_fetch_retry_interval_ms)
        finally:
            cluster.close()
        # Spark wants at least one partition; an empty one reads nothing.
        return list(planned) or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.options, partition)


class OdradekStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("odradek")``: micro-batches of ``[start, end)`` offset maps.

    Spark keeps this object in one long-lived planner process per query, so the metadata cache and
    connections live across micro-batches; only ``read`` runs elsewhere, and it carries no state.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._cluster: Cluster | None = None
        self._target: PartitionOffsets | None = None  # Trigger.AvailableNow: never go past these
        self._latest: PartitionOffsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Pickled to executors for read(): connections stay behind.
        state = dict(self.__dict__)
        state["_cluster"] = None
        return state

    def _client(self) -> Cluster:
        if self._cluster is None:
            self._cluster = _cluster(self.options)
        return self._cluster

    def _retrying(self, fn: Any) -> Any:
        o = self.options
        return self._client().retrying(fn, o.offset_fetch_retries, o.offset_fetch_retry_interval_ms)

    def _fetch_latest(self) -> PartitionOffsets:
        cluster = self._client()
        tps = cluster.discover(self.options, must_exist=False)
        return _bounds(cluster, tps)[1]

    def initialOffset(self) -> dict:
        def resolve() -> PartitionOffsets:
            cluster = self._client()
            tps = cluster.discover(self.options, must_exist=False)
            earliest, latest = _bounds(cluster, tps)
            return _starting_offsets(cluster, self.options, tps, earliest, latest)

        return to_json_offsets(self._retrying(resolve))

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._retrying(self._fetch_latest)
        log.info("Trigger.AvailableNow: reading up to %s", to_json_offsets(self._target))

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        """The end of the next micro-batch: the latest offsets, capped by the read limit (and the AvailableNow
        target). Returning ``start`` unchanged tells Spark there is nothing new."""
        begin = from_json_offsets(start)
        # Under Trigger.AvailableNow the frozen target is the latest: never more, and a partition below its start
        # (a recreated topic) is still seen, so data loss is reported rather than hidden.
        latest = dict(self._target) if self._target is not None else self._retrying(self._fetch_latest)
        self._latest = latest
        if limit is None:
            limit = self.getDefaultReadLimit()
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        return to_json_offsets(latest)

    def reportLatestOffset(self) -> dict | None:
        return to_json_offsets(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        ranges, problems = plan_stream_ranges(from_json_offsets(start), from_json_offsets(end))
        for problem in problems:
            from odradek_spark.reader import report_data_loss

            report_data_loss(problem, self.options.fail_on_data_loss)
        ranges = split_ranges(ranges, min_partitions=self.options.min_partitions,
                              max_records_per_partition=self.options.max_records_per_partition)
        return _partitions(ranges, self._client())

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.options, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: like Spark's Kafka source, progress lives in the checkpoint, not in the cluster."""

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


class OdradekDataSource(DataSource):
    """Registered as format ``odradek``; see the module docstring for options and semantics."""

    @classmethod
    def name(cls) -> str:
        return "odradek"

    def schema(self) -> StructType:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        formats = parse_reader_formats(self.options)
        return source_schema(include, resolve_avro(formats).avro if formats is not None else ())

    def reader(self, schema: StructType) -> DataSourceReader:
        options = resolve_avro(parse_source_options(self.options, streaming=False))
        _check_schema(schema, options)
        return OdradekBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = resolve_avro(parse_source_options(self.options, streaming=True))
        _check_schema(schema, options)
        return OdradekStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from odradek_spark.writer import OdradekBatchWriter, register_avro, sink_layout

        if overwrite:
            raise OptionError("save mode 'overwrite' is not possible on a log; use mode('append')")
        options = parse_sink_options(self.options)
        layout = sink_layout(schema, options)
        return OdradekBatchWriter(register_avro(options, schema), layout)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from odradek_spark.writer import OdradekStreamWriter, register_avro, sink_layout

        options = parse_sink_options(self.options)
        layout = sink_layout(schema, options)
        return OdradekStreamWriter(register_avro(options, schema), layout)
