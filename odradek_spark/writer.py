"""Writing a DataFrame to Odradek, batch and streaming: the columns and rules of Spark's Kafka sink.

Input columns (others are ignored):

* ``value`` (required, string or binary; null writes a tombstone),
* ``key`` (optional, string or binary; null means keyless),
* ``topic`` (string; required unless the ``topic`` option is set, and the option wins over the column),
* ``partition`` (optional int; null lets the producer's partitioner choose: murmur2 of the key for keyed
  records, Kafka's sticky partitioner for keyless ones),
* ``headers`` (optional ``array<struct<key: string, value: binary>>``).

With ``value.format=avro`` (or ``key.format``) the column may be any type Avro carries (a struct becomes a
record): it is registered under ``<topic>-value`` on the driver and written framed (:mod:`odradek_spark.avro`);
``json_schema`` likewise writes it as JSON text under the JSON Schema derived from its type
(:mod:`odradek_spark.json_schema`), and ``protobuf`` a struct as a Protobuf message: the subject's latest schema when
the struct fits its message, else the struct's own proto3 schema registered there (:mod:`odradek_spark.protobuf`).

Delivery is **at least once** by default, as with Spark's Kafka sink (``exactlyOnce=true`` or a
``transactional.id.prefix`` makes it exactly once for streaming queries: odradek_spark/exactly_once.py).
Each Spark task sends its rows through one :class:`odradek.Producer` (``acks=all`` by default) and succeeds
only once every record is acknowledged, but a task that fails after some of its batches were acknowledged has
already written them, and Spark's retry of the task (or of the micro-batch, after a restart) writes them again;
so can a producer retry after an ambiguous timeout. Without exactlyOnce there is no transaction to abort:
``abort`` only logs. Consumers that need exactly-once results must deduplicate, e.g. on a unique key carried in
the record.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from odradek_spark.exactly_once import (
    describe,
    end_transactions,
    job_prefix,
    task_identity,
    write_transactional,
)
from odradek_spark.options import OptionError, SinkOptions

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["OdradekBatchWriter", "OdradekCommitMessage", "OdradekStreamWriter", "SinkLayout", "register_avro",
           "sink_layout"]

log = logging.getLogger(__name__)


@dataclass
class OdradekCommitMessage(WriterCommitMessage):
    """What one task wrote: Spark hands these to ``commit`` on the driver."""

    records: int


@dataclass(frozen=True)
class SinkLayout:
    """Which input columns exist, by name; checked once against the DataFrame schema on the driver."""

    topic_column: bool
    key_column: bool
    partition_column: bool
    headers_column: bool


def _is(dtype: DataType, *types: type) -> bool:
    return isinstance(dtype, types)


def sink_layout(schema: StructType, options: SinkOptions) -> SinkLayout:
    """Validate the DataFrame's columns the way Spark's Kafka sink does, with messages naming the column.

    Raises:
        OptionError: a required column is missing or a column has the wrong type.
    """
    fields = {f.name.lower(): f for f in schema.fields}
    avro = {f.column: f.kind for f in options.formats}  # Confluent-framed Avro or JSON: any type they carry
    value = fields.get("value")
    if value is None:
        raise OptionError("the DataFrame to write needs a 'value' column (string or binary)")
    if "value" not in avro and not _is(value.dataType, StringType, BinaryType):
        raise OptionError(f"column 'value' must be string or binary, not {value.dataType.simpleString()} (or set "
                          "value.format=avro)")
    key = fields.get("key")
    if "key" in avro and key is None:
        raise OptionError(f"key.format={avro['key']} needs a 'key' column")
    if key is not None and "key" not in avro and not _is(key.dataType, StringType, BinaryType):
        raise OptionError(f"column 'key' must be string or binary, not {key.dataType.simpleString()} (or set "
                          "key.format=avro)")
    topic = fields.get("topic")
    if topic is not None and not _is(topic.dataType, StringType):
        raise OptionError(f"column 'topic' must be a string, not {topic.dataType.simpleString()}")
    if topic is None and options.topic is None:
        raise OptionError("no topic to write to: set the 'topic' option or add a 'topic' column")
    partition = fields.get("partition")
    if partition is not None and not _is(partition.dataType, IntegerType):
        raise OptionError(f"column 'partition' must be an int, not {partition.dataType.simpleString()}")
    headers = fields.get("headers")
    if headers is not None:
        dt = headers.dataType
        ok = (
            isinstance(dt, ArrayType)
            and isinstance(dt.elementType, StructType)
            and [f.name.lower() for f in dt.elementType.fields] == ["key", "value"]
            and isinstance(dt.elementType.fields[0].dataType, StringType)
            and isinstance(dt.elementType.fields[1].dataType, BinaryType | StringType)
        )
        if not ok:
            raise OptionError("column 'headers' must be array<struct<key: string, value: binary>>, not "
                              f"{dt.simpleString()}")
    return SinkLayout(
        topic_column=topic is not None and options.topic is None,
        key_column=key is not None,
        partition_column=partition is not None,
        headers_column=headers is not None,
    )


def register_avro(options: SinkOptions, schema: StructType) -> SinkOptions:
    """On the driver, before any task: each Avro column's schema (as Spark's ``to_avro`` derives it from the
    column's type) registered under its subject, each JSON Schema column's likewise, and each Protobuf column's
    schema chosen or registered (:func:`odradek_spark.protobuf.writer_column`); the registry's refusal (an
    incompatible change) or a struct that fits no message fails the query here, with the reason."""
    if not options.formats:
        return options
    from odradek_spark.avro import AvroColumn, avro_schema_for
    from odradek_spark.schema_registry import RegistryClient

    fields = {f.name.lower(): f for f in schema.fields}
    columns = []
    with RegistryClient(options.registry, options.request_timeout_ms, options.security) as registry:
        for f in options.formats:
            assert f.subject is not None
            if f.kind == "json_schema":
                from odradek_spark.json_schema import JsonSchemaColumn, JsonSchemaError, json_schema_for

                try:
                    text = json.dumps(json_schema_for(fields[f.column].dataType))
                except JsonSchemaError as e:
                    raise OptionError(f"{f.column}.format=json_schema: {e}") from None
                schema_id, version = registry.register_typed(f.subject, text, "JSON")
                columns.append(JsonSchemaColumn(f.column, f.subject, version, schema_id, text))
                continue
            if f.kind == "protobuf":
                from odradek_spark.protobuf import ProtobufSchemaError, writer_column

                try:
                    columns.append(writer_column(registry, f, fields[f.column].dataType))
                except ProtobufSchemaError as e:
                    raise OptionError(f"{f.column}.format=protobuf (subject {f.subject}): {e}") from None
                continue
            avro = avro_schema_for(fields[f.column].dataType)
            schema_id, version = registry.register(f.subject, avro)
            columns.append(AvroColumn(f.column, f.subject, version, schema_id, json.dumps(avro)))
    return replace(options, avro=tuple(columns))


def _encoders(options: SinkOptions, batch: pa.RecordBatch) -> dict[str, Any]:
    from pyspark.sql.pandas.types import from_arrow_type

    types = {f.name.lower(): f.type for f in batch.schema}
    return {c.column: c.encoder(from_arrow_type(types[c.column])) for c in options.avro}


def _column(batch: pa.RecordBatch, name: str) -> list[Any]:
    # Spark keeps the DataFrame's column case; options and checks are case-insensitive.
    for i, field in enumerate(batch.schema):
        if field.name.lower() == name:
            return batch.column(i).to_pylist()
    raise KeyError(name)


def new_producer(options: SinkOptions, **extra: Any) -> Any:
    """The task's producer, with the sink's producer options (``extra``: e.g. a transactional id)."""
    from odradek.client import Producer

    return Producer(
        list(options.bootstrap),
        acks=options.acks,
        linger_ms=options.linger_ms,
        batch_size=options.batch_size,
        compression=options.compression,
        delivery_timeout_ms=options.delivery_timeout_ms,
        request_timeout_ms=options.request_timeout_ms,
        max_request_size=options.max_request_size,
        **dict(options.security),  # TLS and credentials (odradek_spark/security.py)
        **extra,
    )


def send_rows(producer: Any, options: SinkOptions, layout: SinkLayout,
              batches: Iterable[pa.RecordBatch]) -> tuple[int, list[BaseException]]:
    """Send every row through ``producer``; return how many were acknowledged and the failures (stops at the
    first Arrow batch with a failure).

    Rows leave through the producer's own batching and partitioner. After each Arrow batch the producer is
    flushed, which bounds memory (the producer has no buffer limit) at the cost of a pause per batch.
    """
    errors: list[BaseException] = []
    lock = threading.Lock()

    def on_done(fut: Any) -> None:
        exc = fut.exception()
        if exc is not None:
            with lock:
                errors.append(exc)

    sent = 0
    encoders: dict[str, Any] | None = None
    for batch in batches:
        n = batch.num_rows
        if not n:
            continue
        if encoders is None:
            encoders = _encoders(options, batch)
        values = _column(batch, "value")
        keys = _column(batch, "key") if layout.key_column else [None] * n
        if "value" in encoders:
            values = encoders["value"].encode(values)
        if "key" in encoders:
            keys = encoders["key"].encode(keys)
        topics = _column(batch, "topic") if layout.topic_column else [options.topic] * n
        parts = _column(batch, "partition") if layout.partition_column else [None] * n
        headers = _column(batch, "headers") if layout.headers_column else None
        send = producer.send
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise ValueError("a row has a null 'topic'; set the 'topic' option to give a default topic")
            hdrs = None
            if headers is not None and headers[i]:
                hdrs = [(h["key"], h["value"]) for h in headers[i]]
            send(topic, values[i], keys[i], parts[i], None, hdrs).add_done_callback(on_done)
        producer.flush()
        sent += n
        if errors:
            break
    return sent, errors


def write_batches(options: SinkOptions, layout: SinkLayout, batches: Iterator[pa.RecordBatch]) -> int:
    """Send every row through one producer; return how many were acknowledged, or raise the first failure."""
    producer = new_producer(options)
    try:
        sent, errors = send_rows(producer, options, layout, batches)
    finally:
        producer.close()
    if errors:
        raise RuntimeError(f"writing to Odradek failed: {errors[0]!r} ({len(errors)} record(s) failed; records "
                           "acknowledged before the failure stay written: the sink is at-least-once)") from errors[0]
    return sent


class OdradekBatchWriter(DataSourceArrowWriter):
    """``df.write.format("odradek")``: one producer per task. At least once (see the module docstring), or with
    ``exactlyOnce`` all-or-nothing: every task's records in a transaction the driver commits at the end."""

    def __init__(self, options: SinkOptions, layout: SinkLayout) -> None:
        self.options = options
        self.layout = layout
        self.prefix = job_prefix() if options.exactly_once else None  # decided once, here on the driver

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        if self.options.exactly_once:
            prefix, partition, _ = task_identity(self.options, self.prefix)
            return write_transactional(self.options, self.layout, iterator, prefix, partition, None)
        return OdradekCommitMessage(write_batches(self.options, self.layout, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.options.exactly_once:
            end_transactions(self.options, messages, commit=True)
            log.info("committed %s to Odradek", describe(messages))
            return
        total = sum(m.records for m in messages if isinstance(m, OdradekCommitMessage))
        log.info("wrote %d record(s) to Odradek", total)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.options.exactly_once:
            end_transactions(self.options, messages, commit=False)
            log.warning("write aborted; the finished tasks' transactions were aborted")
            return
        total = sum(m.records for m in messages if isinstance(m, OdradekCommitMessage))
        log.warning("write aborted; %d record(s) from tasks that finished are already written and stay (no "
                    "transactions: the sink is at-least-once)", total)


class OdradekStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("odradek")``: each micro-batch like a batch write. At least once by default: a
    micro-batch replayed after a failure writes its records again. With ``exactlyOnce`` each (micro-batch,
    partition) is one transaction, committed on the driver's commit and recorded, so a replay writes nothing
    twice (odradek_spark/exactly_once.py)."""

    def __init__(self, options: SinkOptions, layout: SinkLayout) -> None:
        self.options = options
        self.layout = layout

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        if self.options.exactly_once:
            prefix, partition, batch_id = task_identity(self.options, None)
            return write_transactional(self.options, self.layout, iterator, prefix, partition, batch_id)
        return OdradekCommitMessage(write_batches(self.options, self.layout, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.options.exactly_once:
            end_transactions(self.options, messages, commit=True)
            log.info("micro-batch %d committed %s to Odradek", batchId, describe(messages))
            return
        total = sum(m.records for m in messages if isinstance(m, OdradekCommitMessage))
        log.info("micro-batch %d wrote %d record(s) to Odradek", batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.options.exactly_once:
            end_transactions(self.options, messages, commit=False)
            log.warning("micro-batch %d aborted; its transactions were aborted", batchId)
            return
        log.warning("micro-batch %d aborted; records already acknowledged stay written (at-least-once)", batchId)
